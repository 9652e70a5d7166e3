#!/usr/bin/env bash
# One device-tool call on two GPUs (kind nvidia-h200-x2): two default-model candidates of different shapes,
# each with a reduced vocabulary, trained side by side from scratch through AR teacher -> adapt B4/B8/B16 ->
# adapt B32 (tools/train_default_model.sh with T_DISTILL=0, one per GPU) on the 18,000 scenes of the default
# recipe (tools/make_default_data.py, made here on the host's CPUs in about 130 s). Stage II follows in a
# second call (tools/continue_default_model.sh with the returned teacher and student).
# Usage: bash tools/train_candidates.sh NAME_A[:DATA_A] "INIT_ARGS_A" NAME_B[:DATA_B] "INIT_ARGS_B"
#   e.g. bash tools/train_candidates.sh w128 "--hidden 128" w128m1024 "--hidden 128 --intermediate 1024"
# A candidate's DATA_x (a carried folder) replaces DATA for it; DATA is generated only when missing.
# Returns $OUT/candidates.tar.part-* (teacher, adapt16, adapt32 per candidate, bf16) and the logs.
set -uo pipefail
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/data/train}
RUNS=${RUNS:-s1_:1:4000 s2_:2:2000 s4_:4:12000} QA_KEPT=${QA_KEPT:-24000}  # the default recipe
MIN_INT_DIGITS=${MIN_INT_DIGITS:-1}  # 2: padded planning answers (05.00), what a B32 student needs
source tools/device_train_lib.sh
echo "== generate ${SECONDS}s"
[ -f "$DATA/planning.json" ] || python3 tools/make_default_data.py "$DATA" --work /tmp/data/generate \
  --runs $RUNS --qa-kept "$QA_KEPT" --min-int-digits "$MIN_INT_DIGITS" || exit 1
rm -rf /tmp/candidates
gpu=0
while [ $# -ge 2 ]; do
  IFS=: read -r name data <<<"$1"
  args=$2 data=${data:-$DATA}
  shift 2
  echo "== $name on GPU $gpu, data $data: $args ${SECONDS}s"
  CUDA_VISIBLE_DEVICES=$gpu NOWHEELS=1 OUT=/tmp/candidates/$name RUN=runs/$name DATA=$data T_DISTILL=0 \
    INIT_ARGS="$args --vocab-from $data" bash tools/train_default_model.sh >"$OUT/$name.log" 2>&1 &
  gpu=$((gpu + 1))
done
wait
tail -n 3 "$OUT"/*.log
# one tar of every candidate's pieces: fewer files than the tool's limit of 8
tar -C /tmp/candidates -cf - . | split -b 15M - "$OUT/candidates.tar.part-"
ls -la "$OUT"
echo "== done ${SECONDS}s"
