#!/usr/bin/env bash
# One device-tool call that trains the bundled default model (issue 8): AR teacher (B = 1) -> progressive block
# adaptation B4 -> B8 -> B16 -> B32 -> Stage II (B16 teacher, JSD) on generated planning scenes.
# Usage on the GPU machine: bash tools/train_default_model.sh [DEADLINE_S] 2>&1 | tee $OUT/train.log
# (carry .whl and data/gpu_train)
# A 30-step calibration run measures the step time first; the step counts of the stages are then sized so
# training ends by DEADLINE_S seconds after the script starts (default 330). Each finished model is written to
# $OUT as a bf16 checkpoint (no tokenizer files: the loader falls back to the bundled Qwen tokenizer), tarred
# and split into pieces under 16 MiB (cat NAME.tar.part-* | tar -x).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/pack
DEADLINE=${1:-330}
DATA=${DATA:-data/gpu_train/planning.json}
RUN=${RUN:-runs/default}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-32}
WORKERS=${WORKERS:-10}
CALIB=${CALIB:-30}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
if [ -z "${NOWHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
TRAIN="python3 -m wamdiff2_ros.cli.main train"
COMMON=(device="$DEVICE" "data={planning: $DATA}" "task_weights={}" "eval_data={}" max_new_tokens=96
  num_workers="$WORKERS" progress=false global_batch_size="$BATCH" local_batch_size="$BATCH" weight_decay=0.0 seed=0)
latest() { # a phase folder's final/, else its newest step_*/
  if [ -d "$1/final" ]; then echo "$1/final"; else ls -d "$1"/step_* 2>/dev/null | sort | tail -1; fi
}
pack() { # NAME FOLDER: bf16 copy -> $OUT/NAME.tar.part-aa, -ab
  [ -n "$2" ] && [ -d "$2" ] || { echo "pack $1: nothing at '$2'"; return; }
  python3 - "$2" "/tmp/pack/$1" <<'PY'
import sys
from wamdiff2_ros.model.checkpoint import load_checkpoint, save_checkpoint
save_checkpoint(load_checkpoint(sys.argv[1], dtype="bf16").model, sys.argv[2])
PY
  cp "$2/trainer_state.json" "$2/train_config.yaml" "/tmp/pack/$1/" 2>/dev/null
  echo "$2" > "/tmp/pack/$1/SOURCE"
  tar -C /tmp/pack -cf - "$1" | split -b 15M - "$OUT/$1.tar.part-"
  echo "packed $1 from $2 at ${SECONDS}s"
}
left() { echo $((DEADLINE - SECONDS)); }
budget() { # PERCENT EXTRA: timeout seconds for a stage, at least 30
  local b=$(( $(left) * $1 / 100 + $2 )); echo $(( b > 30 ? b : 30 ))
}
echo "== init ${SECONDS}s"
python3 tools/init_default_model.py "$RUN/init" --seed 0 || exit 1
echo "== calibrate ${SECONDS}s"
T=$SECONDS
$TRAIN sft --config config/train_sft_tiny.yaml model="$RUN/init" out_dir=/tmp/calib max_steps=$CALIB \
  "${COMMON[@]}" lr=2.0e-3 merger_lr=2.0e-3 visual_lr=2.0e-3 ckpt_every_steps=1000 | tail -3
STARTUP_STEP=$(python3 - /tmp/calib/metrics.jsonl $((SECONDS - T)) <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"train"' in l]
step = statistics.median(r["step_s"] for r in rows[min(5, len(rows) - 1):])
startup = max(5.0, float(sys.argv[2]) - sum(r["step_s"] for r in rows))
print(f"{startup:.1f} {step:.4f}")
PY
)
read -r STARTUP STEP <<<"$STARTUP_STEP"
echo "calibration: startup ${STARTUP}s per invocation, ${STEP}s per step; $(left)s left"
# Step budget: what is left after 4 invocations' startup and 3 packings (~8 s each), distill steps ~1.4x.
read -r S0 S1 S2 S3 <<<"$(python3 -c "
left = $(left) - 4 * $STARTUP - 24
n = max(left, 40) / ($STEP * 1.35)  # steady state ran ~1.3x the calibration's step (checkpoint saves)
print(max(int(min(0.55 * n, 4000)), 1), max(int(min(0.05 * n, 300)), 1), max(int(min(0.22 * n, 1200)), 1), max(int(min(0.13 * n / 1.4, 600)), 1))")"
echo "steps: sft $S0, adapt B4/B8/B16 $S1 each, adapt B32 $S2, distill $S3"

echo "== sft ${SECONDS}s"
timeout "$(budget 55 20)" $TRAIN sft --config config/train_sft_tiny.yaml model="$RUN/init" \
  out_dir="$RUN/sft" max_steps=$S0 "${COMMON[@]}" lr=2.0e-3 merger_lr=2.0e-3 visual_lr=2.0e-3 \
  warmup_steps_max=50 ckpt_every_steps=$(( S0 / 5 + 1 )) | tail -3
TEACHER=$(latest "$RUN/sft/B1")
pack teacher "$TEACHER" &
P1=$!

echo "== adapt B4-B16 ${SECONDS}s from $TEACHER"
timeout "$(budget 35 15)" $TRAIN adapt --config config/train_adapt_tiny.yaml model="$TEACHER" \
  out_dir="$RUN/adapt" "block_sizes=[4,8,16]" max_steps=$S1 "${COMMON[@]}" lr=1.0e-3 merger_lr=1.0e-3 \
  visual_lr=1.0e-3 warmup_steps_max=10 ckpt_every_steps=1000 | tail -3
B16=$(latest "$RUN/adapt/B16"); [ -n "$B16" ] || B16=$(latest "$RUN/adapt/B8"); [ -n "$B16" ] || B16=$TEACHER
echo "== adapt B32 ${SECONDS}s from $B16"
timeout "$(budget 65 10)" $TRAIN adapt --config config/train_adapt_tiny.yaml model="$B16" \
  out_dir="$RUN/adapt" "block_sizes=[32]" max_steps=$S2 "${COMMON[@]}" lr=1.0e-3 merger_lr=1.0e-3 \
  visual_lr=1.0e-3 warmup_steps_max=20 ckpt_every_steps=$(( S2 / 4 + 1 )) | tail -3
B32=$(latest "$RUN/adapt/B32")
pack adapt32 "$B32" &
P2=$!

echo "== distill ${SECONDS}s: student $B32, teacher $B16"
timeout "$(budget 100 0)" $TRAIN distill --config config/train_distill_tiny.yaml \
  model="$B32" teacher="$B16" out_dir="$RUN/distill" max_steps=$S3 "${COMMON[@]}" lr=3.0e-4 \
  merger_lr=3.0e-4 visual_lr=3.0e-4 warmup_steps_max=10 ckpt_every_steps=$(( S3 / 3 + 1 )) | tail -3
pack distill32 "$(latest "$RUN/distill/B32")"
wait "$P1" "$P2"
for s in sft adapt distill; do
  mkdir -p "/tmp/logs/$s"; cp "$RUN/$s"/{metrics.jsonl,train_config.yaml,loss.png} "/tmp/logs/$s/" 2>/dev/null
done
cp /tmp/calib/metrics.jsonl /tmp/logs/calib_metrics.jsonl
tar -C /tmp -czf "$OUT/logs.tar.gz" logs
ls -la "$OUT"
echo "== done ${SECONDS}s"
