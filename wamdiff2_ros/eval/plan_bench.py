"""Camera-to-plan latency through the product path: ``Planner.plan`` on a fresh frame each time, as the
planner node calls it.

The warm-up (``Planner.warm_up``: allocation, compile, graph capture) is timed apart; then every frame is a
new seeded image with new ego numbers, timed wall-clock around ``plan`` (which returns parsed answers on
the host, so it has synchronised). Medians and p99 of the total and of each stage (``planner.STAGES``), and
the builds and captures the timed frames added (a warm planner adds none).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from wamdiff2_ros.decoding.planner import STAGES, DrivingInputs, Planner


def _percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(np.ceil(0.99 * len(ordered))) - 1)]  # nearest rank
    return {"p50_ms": float(np.median(ordered)) * 1e3, "p99_ms": p99 * 1e3}


def frames(image_hw: tuple[int, int], count: int, seed: int = 1) -> list[DrivingInputs]:
    """``count`` distinct seeded frames with varying ego state (so prompts differ as a drive's do)."""
    rng = np.random.default_rng(seed)
    return [
        DrivingInputs(
            rng.integers(0, 256, size=(*image_hw, 3), dtype=np.uint8),
            ("straight", "left", "right")[index % 3],
            (float(rng.uniform(0.0, 30.0)), float(rng.uniform(-0.5, 0.5))),
            (float(rng.uniform(-2.0, 2.0)), float(rng.uniform(-0.5, 0.5))),
        )
        for index in range(count)
    ]


def measure_plan(planner: Planner, image_hw: tuple[int, int], count: int = 20) -> dict[str, Any]:
    """Warm ``planner`` for the camera size, then time ``count`` plans of fresh frames.

    Returns:
        ``warmup_s``; ``total`` and one entry per stage with ``p50_ms``/``p99_ms``; ``parsed`` (answers that
        parsed, of all); ``forwards_p50``; ``builds_added``/``captures_added`` during the timed frames;
        ``graphs_compiled_warmup``/``graphs_compiled_added``: the graphs torch.compile made during the
        warm-up and during the timed frames (the process's count: a later row reuses an earlier row's);
        ``recompiles``/``recompile_reasons``: how often and why Dynamo compiled a function again during this
        row (a function's first compile is no recompile; the first 10 distinct reasons);
        the GPU's peak allocated memory (GiB) when on CUDA.
    """
    device = planner.loaded.model.device
    graphs, failures = _compiled_graphs(), _guard_failures()
    warmup_s = planner.warm_up(image_hw)
    graphs_warm = _compiled_graphs()
    fast = planner.fast
    builds, captures = (fast.builds, fast.captures) if fast is not None else (0, 0)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    totals, stages, forwards, parsed, answers = [], {name: [] for name in STAGES}, [], 0, 0
    for inputs in map(planner.on_a_straight_road, frames(image_hw, count)):  # a route model's road
        started = time.perf_counter()
        output = planner.plan(inputs)
        totals.append(time.perf_counter() - started)
        for name in STAGES:
            stages[name].append(output.stages_s.get(name, 0.0))
        forwards.append(output.decode.forwards)
        parsed += sum(c.waypoints_ego is not None for c in output.candidates)
        answers += len(output.candidates)
    row: dict[str, Any] = {
        "warmup_s": warmup_s,
        "frames": count,
        "total": _percentiles(totals),
        **{name: _percentiles(values) for name, values in stages.items()},
        "parsed": f"{parsed}/{answers}",
        "forwards_p50": float(np.median(forwards)),
        "builds_added": (fast.builds - builds) if fast is not None else 0,
        "captures_added": (fast.captures - captures) if fast is not None else 0,
        "graphs_compiled_warmup": graphs_warm - graphs,
        "graphs_compiled_added": _compiled_graphs() - graphs_warm,
        **_recompiles_fields(_recompiles_since(failures)),
    }
    if device.type == "cuda":
        row["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return row


def _compiled_graphs() -> int:
    # Dynamo's count of the graphs it has compiled in this process (one per specialisation: a compiled
    # piece that guards on a value it should not, e.g. the prompt's length, shows here as more graphs)
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def _recompiles_fields(recompiles: list[str]) -> dict[str, Any]:
    # The row's count of recompiles and the first 10 distinct reasons, in order
    return {"recompiles": len(recompiles), "recompile_reasons": list(dict.fromkeys(recompiles))[:10]}


def _guard_failures() -> dict[Any, int]:
    # How many guard-failure reasons Dynamo has recorded for each compiled function so far
    from torch._dynamo.utils import guard_failures

    return {code: len(reasons) for code, reasons in guard_failures.items()}


def _recompiles_since(before: dict[Any, int]) -> list[str]:
    # The recompiles since ``before``, one line each: "function (file:line): reason". On a recompile Dynamo
    # records a reason for every cached entry of the function ("frame/entry: reason", then a stack trace),
    # the newest entry's first: a recompile is a reason whose entry number is the highest seen so far.
    from torch._dynamo.utils import guard_failures

    lines = []
    for code, reasons in list(guard_failures.items()):
        where = f"{code.co_name} ({code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno})"
        newest = -1
        for index, reason in enumerate(reasons):
            head = reason.splitlines()[0] if reason else ""
            entry, _, text = head.partition(": ")
            number = entry.rsplit("/", 1)[-1]
            number = int(number) if number.isdigit() else index  # another format: every reason counts
            if number > newest:
                newest = number
                if index >= before.get(code, 0):
                    lines.append(f"{where}: {text or head}")
    return lines


def format_rows(rows: list[dict[str, Any]]) -> str:
    """A table: one row per setting, p50 (p99) of the total and p50 of each stage, in ms."""
    header = ["row", "total p50", "p99", *STAGES, "parsed", "forwards", "warm-up s", "captures+", "graphs"]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in rows:
        cells = [row["name"], f"{row['total']['p50_ms']:.1f}", f"{row['total']['p99_ms']:.1f}"]
        cells += [f"{row[name]['p50_ms']:.1f}" for name in STAGES]
        cells += [
            row["parsed"],
            f"{row['forwards_p50']:.0f}",
            f"{row['warmup_s']:.1f}",
            str(row["captures_added"]),
            f"{row['graphs_compiled_warmup']}+{row['graphs_compiled_added']}",
        ]
        lines.append(" | ".join(cells))
    return "\n".join(lines)
