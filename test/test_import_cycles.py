"""The import graphs of wamdiff2_ros.decoding and wamdiff2_ros.sim have no cycle.

Every ``import`` and ``from ... import`` in a module counts, at module level or inside a function (a lazy
import that closes a circle is still a circle), restricted to modules of the same subpackage. Sources are read
with ``ast``; nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "wamdiff2_ros"
SUBPACKAGES = ("decoding", "sim")


def module_name(root: Path, path: Path, prefix: str) -> str:
    """``root/a/b.py`` -> ``prefix.a.b``; a package's ``__init__.py`` is the package itself."""
    parts = (prefix, *path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, name: str) -> set[str]:
    """Every module ``path`` (module ``name``) imports, anywhere in the file; ``from p import x`` gives both
    ``p`` and ``p.x`` (x may be a submodule; names that are not modules drop out against the known set)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def import_graph(root: Path, prefix: str) -> dict[str, set[str]]:
    """Module -> the modules it imports, for the modules of the subpackage ``root`` (named ``prefix``)."""
    paths = {module_name(root, p, prefix): p for p in sorted(root.rglob("*.py"))}
    return {
        name: {m for m in imported_modules(path, name) if m in paths and m != name}
        for name, path in paths.items()
    }


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component with more than one module (Tarjan), each as a path that
    starts and ends at the same module; ``strongly_connected`` lists the components themselves."""
    return [_cycle_in(graph, component) for component in strongly_connected(graph)]


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """The components of more than one module in which every module imports every other, maybe indirectly."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A concrete cycle through the component's first module, found breadth-first inside the component."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if nxt not in came_from:
                    came_from[nxt] = node
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


@pytest.mark.parametrize("subpackage", SUBPACKAGES)
def test_subpackage_import_graph_has_no_cycle(subpackage: str) -> None:
    graph = import_graph(PACKAGE / subpackage, f"wamdiff2_ros.{subpackage}")
    assert len(graph) > 1 and any(graph.values()), f"no modules or no imports found under {subpackage}/"
    report = [
        f"{' -> '.join(_cycle_in(graph, component))}\n"
        f"  (the modules that import each other: {', '.join(sorted(component))})"
        for component in strongly_connected(graph)
    ]
    assert not report, f"import cycles in wamdiff2_ros.{subpackage}:\n" + "\n".join(report)


def test_the_check_finds_lazy_relative_and_package_cycles(tmp_path: Path) -> None:
    root = tmp_path / "pkg"
    (root / "sub").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("from pkg import b\n")  # b is a submodule named in a from-import
    (root / "b.py").write_text("def f():\n    from pkg.sub.c import g\n")  # lazy, inside a function
    (root / "sub" / "__init__.py").write_text("")
    (root / "sub" / "c.py").write_text("from .. import a\nimport os\n")  # relative, two levels
    (root / "d.py").write_text("from pkg.a import x\n")  # imports into the cycle, not part of it
    graph = import_graph(root, "pkg")
    assert graph["pkg.d"] == {"pkg.a"}
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    (root / "sub" / "c.py").write_text("import os\n")
    assert find_cycles(import_graph(root, "pkg")) == []
