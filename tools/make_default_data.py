"""The default model's training scenes: two ``wamdiff2 sim generate`` runs merged into one folder.

Runs ``sim generate --width 192`` for 4,000 samples at seed 1 and 2,000 at seed 2 (held-out evaluation
uses seed 0), then merges them into OUT with ids and image names prefixed ``s1_`` / ``s2_``: all planning
and detection records, and 8,000 of the 24,000 QA records (a seeded draw; QA answers are short, and the
folder must fit the GPU tool's 64 MiB carry with the wheels). About 34 MiB; 5 minutes on 2 cores.
Usage: ``python tools/make_default_data.py OUT [--work DIR] [--runs s1_:1:4000 s2_:2:2000 ...] [--qa-kept N]
[--min-int-digits 2]`` (``--runs``/``--qa-kept`` make bigger sets where nothing has to be carried, e.g. on the
GPU host; ``--min-int-digits 2`` writes padded planning answers, ``05.00``).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

RUNS = ("s1_:1:4000", "s2_:2:2000")
QA_KEPT = 8000
TASKS = ("planning", "detection", "qa")


def _prefixed(record: dict, prefix: str) -> dict:
    images = [path.replace("images/", f"images/{prefix}", 1) for path in record["image"]]
    return record | {"id": prefix + record["id"], "image": images}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("data/generate"), help="where the runs go")
    parser.add_argument("--runs", nargs="+", default=RUNS, help="PREFIX:SEED:SAMPLES per generate run")
    parser.add_argument("--qa-kept", type=int, default=QA_KEPT, help="QA records kept (a seeded draw)")
    parser.add_argument("--min-int-digits", default="1", choices=("1", "2"), help="planning number style")
    args = parser.parse_args()
    merged: dict[str, list[dict]] = {task: [] for task in TASKS}
    (args.out / "images").mkdir(parents=True, exist_ok=True)
    for run_spec in args.runs:
        prefix, seed, samples = run_spec.split(":")
        run = args.work / f"seed{seed}_d{args.min_int_digits}"
        if not (run / "planning.json").is_file():
            command = [sys.executable, "-m", "wamdiff2_ros.cli.main", "sim", "generate", "--out", str(run)]
            command += ["--samples", samples, "--seed", seed, "--width", "192", "--min-int-digits"]
            command.append(args.min_int_digits)
            subprocess.run(command, check=True)
        for task in TASKS:
            merged[task] += [_prefixed(r, prefix) for r in json.loads((run / f"{task}.json").read_text())]
        for image in sorted((run / "images").iterdir()):
            shutil.copyfile(image, args.out / "images" / f"{prefix}{image.name}")
    random.Random(0).shuffle(merged["qa"])
    merged["qa"] = merged["qa"][: args.qa_kept]
    for task, records in merged.items():
        (args.out / f"{task}.json").write_text(json.dumps(records, separators=(",", ":")))
        print(f"{args.out / f'{task}.json'}: {len(records)} records")


if __name__ == "__main__":
    main()
