"""``fp8_fused.SPLIT_PRODUCTS`` from a ``gpu_kernels.py split_products`` sweep, for an A/B on the same card.

The sweep times each 2b product at 32 and 128 rows through the swap-AB kernel whole and split over its depth
against today's path; a shape goes into the table where its fastest launch beat today's by ``MARGIN``.
Printed as Python (to paste into fp8_fused.py once the forward shows it pays), and optionally applied to a
command run in this process: a probe script or a module, so ``bench`` can time the sweep's table before it
is committed.

Usage: python3 tools/probes/split_table.py SWEEP.json [-- SCRIPT.py ARGS... | -- -m MODULE ARGS...]
"""

from __future__ import annotations

import json
import runpy
import sys

MARGIN = 0.97  # a launch must be 3 % faster than today's path: the sweep's replays repeat within ~1-2 %
SHAPES = {"qkv": (4096, 2048), "out": (2048, 2048), "gate_up": (12288, 2048), "down": (2048, 6144)}


def sweep_table(sweep: dict) -> dict[tuple[int, int, int], tuple[int, ...]]:
    """(rows, N, K) -> (BLOCK_N, BLOCK_K, warps, stages, splits) where the sweep's best beat today's path."""
    table = {}
    for key, row in sweep["split_products"].items():
        if "best_us" not in row or row["best_us"] > MARGIN * row["today_us"]:
            continue
        name, rows = key.split(" M")
        table[(int(rows), *SHAPES[name])] = tuple(row["launch"])
    return dict(sorted(table.items()))


def main(argv: list[str]) -> None:
    with open(argv[0]) as file:
        table = sweep_table(json.load(file))
    print("SPLIT_PRODUCTS = {")
    for shape, launch in table.items():
        print(f"    {shape}: {launch},")
    print("}", flush=True)
    if "--" not in argv:
        return
    from wamdiff2_ros.decoding import fp8_fused

    fp8_fused.SPLIT_PRODUCTS.clear()
    fp8_fused.SPLIT_PRODUCTS.update(table)
    command = argv[argv.index("--") + 1 :]
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = command
        runpy.run_path(command[0], run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
