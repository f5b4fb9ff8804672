#!/usr/bin/env bash
# GPU checks of issue 10, in one run, on a machine with a CUDA GPU:
#   TORCH_SPEC="torch" bash scripts/setup.sh --test   # a CUDA build of torch (once)
#   bash scripts/gpu_check.sh [OUT_DIR]               # default out/gpu
# 1. nvidia-smi; 2. the CUDA tests (fp16 exactness, batched rows = batch-1 greedy, precision
# selection); 3. bench_decoding at fp16 and fp32 (exactness per precision, speed-ups, WER);
# 4. bench_batching on CUDA (what a batch saves there, the fp16 batched-vs-single logit gap);
# 5. load_test with 32 real-time streams, GPU memory sampled by nvidia-smi meanwhile.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-out/gpu}"
mkdir -p "$OUT"
PY=.venv/bin/python
[ -x "$PY" ] || PY=python3
export PYTHONUNBUFFERED=1
SHARED="${SHARED:-../shared/eval-dev}"
rc=0
step() { echo; echo "=== $*"; }

step "nvidia-smi"
nvidia-smi | tee "$OUT/nvidia-smi.txt" || { echo "no GPU here"; exit 1; }

step "CUDA tests"
$PY -m pytest -q -ra -m cuda tests/decoding/test_cuda.py 2>&1 | tee "$OUT/pytest-cuda.txt" || rc=1

step "bench_decoding fp16 vs fp32 (CUDA)"
$PY scripts/bench_decoding.py --manifest "$SHARED/manifest.jsonl" --lang en --kind real \
    --step 1.0 --device cuda --precision fp16,fp32 --json "$OUT/bench_cuda.json" \
    2>&1 | tee "$OUT/bench_cuda.txt" || rc=1

step "bench_batching (CUDA)"
$PY scripts/bench_batching.py --device cuda --json "$OUT/batching_cuda.json" \
    2>&1 | tee "$OUT/batching_cuda.txt" || rc=1

step "load_test: 32 streams on the GPU"
nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv -l 5 \
    > "$OUT/gpu-memory.csv" &
smi=$!
$PY scripts/load_test.py --streams 32 --viewers 1 --seconds 120 \
    --reference "$SHARED/longform/lf3_real_dev.json" --server-arg=--device=cuda \
    --json "$OUT/load32.json" 2>&1 | tail -40 | tee "$OUT/load32.txt" || rc=1
kill "$smi" 2>/dev/null
echo "peak GPU memory (MiB): $(cut -d, -f2 "$OUT/gpu-memory.csv" | grep -o '[0-9]*' | sort -n | tail -1)"
exit $rc
