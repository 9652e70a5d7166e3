"""Build the package's ROS 2 messages without CMake: rosidl generators + gcc, against the PyPI ROS wheels.

This is the pip route of the package (``setup.py`` calls it); the ROS-native route is ``CMakeLists.txt``
with ``rosidl_generate_interfaces``. Both produce the same types (same RIHS01 type hashes). Only the C and
Python type supports are built: rclpy needs nothing else, and C++ consumers build with colcon.

Outputs:
  * in place, ignored by git: ``wamdiff2_ros/msg/`` (generated Python classes) and the three
    ``wamdiff2_ros/wamdiff2_ros_s__rosidl_typesupport_*.so`` extension modules, so that an editable
    install and a wheel install import the same files;
  * ``build/rosidl/stage/{lib,include,share}``: the shared libraries, headers, interface files and the
    ament index markers, which ``setup.py`` installs as data files under the environment prefix (the
    ROS wheels put theirs there too: ``rosidl_typesupport_c`` dlopens ``lib<pkg>__rosidl_typesupport_*.so``
    by name through ``LD_LIBRARY_PATH``, which the wheels' bootstrapper sets to ``<prefix>/lib``).

The build is skipped when no input is newer than the last successful build (``--force`` rebuilds).
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PACKAGE = "wamdiff2_ros"
ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build" / "rosidl"
STAGE = BUILD / "stage"
STAMP = BUILD / "stamp"
PREFIX = Path(sys.prefix)  # the environment holding the ROS wheels


def interface_files() -> list[Path]:
    return sorted((ROOT / "msg").glob("*.msg"))


def direct_dependencies() -> list[str]:
    from catkin_pkg.package import parse_package

    package = parse_package(str(ROOT / "package.xml"))
    return sorted({d.name for d in package.build_depends if _is_interface(d.name)})


def _is_interface(name: str) -> bool:
    return (PREFIX / "share" / name / "msg").is_dir() or name in {"builtin_interfaces", "service_msgs"}


def dependency_closure(names: list[str]) -> list[str]:
    """Every interface package the given ones depend on, transitively (generators need them all)."""
    from catkin_pkg.package import parse_package

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        manifest = PREFIX / "share" / name / "package.xml"
        if not manifest.exists():
            raise SystemExit(f"interface dependency '{name}' is not installed in {PREFIX} (no {manifest})")
        seen.add(name)
        package = parse_package(str(manifest))
        todo += [d.name for d in package.build_depends + package.exec_depends if _is_interface(d.name)]
    return sorted(seen)


def up_to_date() -> bool:
    if not STAMP.exists():
        return False
    inputs = [*interface_files(), ROOT / "package.xml", Path(__file__)]
    outputs = [ROOT / PACKAGE / "msg" / "__init__.py", STAGE / "lib"]
    return all(o.exists() for o in outputs) and STAMP.stat().st_mtime >= max(
        p.stat().st_mtime for p in inputs
    )


def generate(deps: list[str]) -> None:
    os.environ.setdefault("AMENT_PREFIX_PATH", str(PREFIX))  # the generators find their templates by it
    from rosidl_generator_c.cli import GenerateC
    from rosidl_generator_py.cli import GeneratePython
    from rosidl_typesupport_c.cli import GenerateCTypesupport
    from rosidl_typesupport_fastrtps_c.cli import GenerateFastRTPSCTypesupport
    from rosidl_typesupport_introspection_c.cli import GenerateIntrospectionCTypesupport

    files = [f"{ROOT}:msg/{p.name}" for p in interface_files()]
    include_paths = [str(PREFIX / "share" / d) for d in deps]
    # Called as classes, not through `rosidl generate -t ...`: each wheel lists its entry points twice
    # (dist-info + egg-info) and the CLI's strict mode rejects the duplicates.
    for kind, generator in (
        ("c", GenerateC),
        ("ts_c", GenerateCTypesupport),
        ("ts_fastrtps_c", GenerateFastRTPSCTypesupport),
        ("ts_introspection_c", GenerateIntrospectionCTypesupport),
        ("py", GeneratePython),
    ):
        generator(kind).generate(PACKAGE, files, include_paths, output_path=BUILD / kind / PACKAGE)


def _sources(kind: str, pattern: str) -> list[str]:
    return sorted(glob.glob(str(BUILD / kind / PACKAGE / "**" / pattern), recursive=True))


def compile_libraries(deps: list[str]) -> None:
    lib = BUILD / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    # This build's headers first: an earlier build's, installed under the prefix, must not shadow them.
    include = [f"-I{BUILD / k}" for k in ("c", "ts_c", "ts_fastrtps_c", "ts_introspection_c", "py")]
    include += [
        f"-I{PREFIX / 'include'}",
        *(f"-I{d}" for d in sorted(glob.glob(str(PREFIX / "include" / "*"))) if Path(d).name != PACKAGE),
    ]
    python_include = [f"-I{sysconfig.get_paths()['include']}", f"-I{_numpy_include()}"]
    link_dirs = [f"-L{lib}", f"-L{PREFIX / 'lib'}"]

    def dep_libs(suffix: str) -> list[str]:
        return [f"-l{d}__{suffix}" for d in deps]

    def own(suffix: str) -> str:
        return f"-l{PACKAGE}__{suffix}"

    def build(compiler: list[str], sources: list[str], output: Path, links: list[str], strict: bool) -> None:
        cmd = [*compiler, "-O2", "-fPIC", "-w", "-shared", *include, *sources, "-o", str(output), *link_dirs]
        cmd += (["-Wl,--no-undefined"] if strict else []) + links
        subprocess.run(cmd, check=True)

    gcc, gxx = ["gcc"], ["g++", "-std=c++17"]
    runtime = ["-lrosidl_runtime_c", "-lrcutils"]
    build(gcc, _sources("c", "*.c"), lib / f"lib{PACKAGE}__rosidl_generator_c.so",
          [*dep_libs("rosidl_generator_c"), *runtime], strict=True)  # fmt: skip
    # The three type supports only need generator_c; build them side by side (2 cores).
    typesupports = [
        (gcc, "ts_introspection_c", "*.c", "rosidl_typesupport_introspection_c",
         [*dep_libs("rosidl_typesupport_introspection_c"), "-lrosidl_typesupport_introspection_c"]),
        (gxx, "ts_fastrtps_c", "*.cpp", "rosidl_typesupport_fastrtps_c",
         [*dep_libs("rosidl_typesupport_fastrtps_c"), "-lrosidl_typesupport_fastrtps_c",
          "-lrosidl_typesupport_fastrtps_cpp", "-lrosidl_dynamic_typesupport", "-lrmw", "-lfastcdr"]),
        (gxx, "ts_c", "*.cpp", "rosidl_typesupport_c", ["-lrosidl_typesupport_c"]),
    ]  # fmt: skip
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [
            pool.submit(build, compiler, _sources(kind, pattern), lib / f"lib{PACKAGE}__{name}.so",
                        [own("rosidl_generator_c"), *links, *dep_libs("rosidl_generator_c"), *runtime], True)
            for compiler, kind, pattern, name, links in typesupports
        ]  # fmt: skip
        for job in jobs:
            job.result()
    py_links = [own("rosidl_generator_c"), own("rosidl_typesupport_c"), *dep_libs("rosidl_generator_py")]
    py_links += [*dep_libs("rosidl_generator_c"), *dep_libs("rosidl_typesupport_c")]
    py_links += ["-lrosidl_runtime_c", "-lrosidl_typesupport_c", "-lrcutils"]
    # Not strict: the Python C-API symbols resolve when the interpreter loads the module.
    build(
        gcc + python_include,
        _sources("py", "_*_s.c"),
        lib / f"lib{PACKAGE}__rosidl_generator_py.so",
        py_links,
        False,
    )
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = []
        for ts in (
            "rosidl_typesupport_c",
            "rosidl_typesupport_fastrtps_c",
            "rosidl_typesupport_introspection_c",
        ):
            source = BUILD / "py" / PACKAGE / f"_{PACKAGE}_s.ep.{ts}.c"
            output = lib / f"{PACKAGE}_s__{ts}.so"  # plain .so name, as the ROS wheels ship them
            links = [
                own("rosidl_generator_py"),
                own(ts),
                own("rosidl_typesupport_c"),
                own("rosidl_generator_c"),
            ]
            links += ["-lrosidl_runtime_c", "-lrosidl_typesupport_c", "-lrcutils"]
            jobs.append(pool.submit(build, gcc + python_include, [str(source)], output, links, False))
        for job in jobs:
            job.result()


def _numpy_include() -> str:
    import numpy

    return numpy.get_include()


def stage() -> None:
    """Lay out the install tree (see module docstring) and the in-place Python modules."""
    shutil.rmtree(STAGE, ignore_errors=True)
    (STAGE / "lib").mkdir(parents=True)
    for so in (BUILD / "lib").glob(f"lib{PACKAGE}__*.so"):
        shutil.copy2(so, STAGE / "lib")
    for so in (BUILD / "lib").glob(f"{PACKAGE}_s__*.so"):
        shutil.copy2(so, ROOT / PACKAGE)
    generated_msg = ROOT / PACKAGE / "msg"
    shutil.rmtree(generated_msg, ignore_errors=True)
    shutil.copytree(BUILD / "py" / PACKAGE / "msg", generated_msg, ignore=shutil.ignore_patterns("*.c"))
    for kind in ("c", "ts_c", "ts_fastrtps_c", "ts_introspection_c"):
        for header in (BUILD / kind / PACKAGE).rglob("*.h"):
            target = STAGE / "include" / PACKAGE / PACKAGE / header.relative_to(BUILD / kind / PACKAGE)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(header, target)
    share = STAGE / "share" / PACKAGE
    (share / "msg").mkdir(parents=True)
    shutil.copy2(ROOT / "package.xml", share)
    names = []
    for msg in interface_files():
        shutil.copy2(msg, share / "msg")
        shutil.copy2(BUILD / "c" / PACKAGE / "tmp" / "msg" / f"{msg.stem}.idl", share / "msg")
        shutil.copy2(BUILD / "c" / PACKAGE / "msg" / f"{msg.stem}.json", share / "msg")
        names += [f"msg/{msg.stem}.idl", f"msg/{msg.name}"]
    index = STAGE / "share" / "ament_index" / "resource_index"
    (index / "packages").mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "resource" / PACKAGE, index / "packages" / PACKAGE)  # the package's ament marker
    (index / "rosidl_interfaces").mkdir(parents=True, exist_ok=True)
    (index / "rosidl_interfaces" / PACKAGE).write_text("\n".join(names) + "\n")


def stage_resources() -> None:
    """Stage what ``ros2 launch`` / ``ros2 run`` look up under the prefix: launch and config files and the
    bundled default model under ``share/<pkg>``, and the node executables under ``lib/<pkg>`` (launch_ros
    never looks in ``bin/``)."""
    share = STAGE / "share" / PACKAGE
    for folder in ("launch", "config", "models"):
        shutil.rmtree(share / folder, ignore_errors=True)
        if (ROOT / folder).is_dir():
            shutil.copytree(ROOT / folder, share / folder)
    executables = STAGE / "lib" / PACKAGE
    shutil.rmtree(executables, ignore_errors=True)
    executables.mkdir(parents=True)
    for script in sorted((ROOT / "scripts").glob("*")):
        # Point the shebang at this environment's interpreter, as pip does for its own scripts.
        body = script.read_text().split("\n", 1)[1]
        target = executables / script.name
        target.write_text(f"#!{sys.executable}\n{body}")
        target.chmod(0o755)


def install_stage() -> None:
    """Copy the staged tree into the prefix, as a wheel install does (pip skips data files when editable)."""
    shutil.copytree(STAGE, PREFIX, dirs_exist_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when the outputs are up to date")
    parser.add_argument(
        "--install",
        action="store_true",
        help=f"copy the staged tree into {PREFIX} (after an editable install)",
    )
    args = parser.parse_args(argv)
    if args.force or not up_to_date():
        deps = dependency_closure(direct_dependencies())
        shutil.rmtree(BUILD, ignore_errors=True)
        BUILD.mkdir(parents=True)
        generate(deps)
        compile_libraries(deps)
        stage()
        STAMP.touch()
        print(f"built {len(interface_files())} messages of {PACKAGE} against {PREFIX}", file=sys.stderr)
    stage_resources()
    if args.install:
        install_stage()
    return 0


if __name__ == "__main__":
    sys.exit(main())
