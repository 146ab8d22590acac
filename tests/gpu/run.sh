#!/usr/bin/env bash
# msvm on a real NVIDIA GPU (issue 19, item 4), in one command of about 8 minutes:
#
#   bash tests/gpu/run.sh [OUT_DIR]          (OUT_DIR defaults to $OUT, else artifacts/)
#
# 1. bench/gpu_check.py: every op and fused kernel vs numpy at L2/L3, the fused chain's share of
#    the device copy bandwidth, compile latency per tier, the BERT-like layer from the kernels,
#    the BERT-base layer as a Cell at S=128 batch 1 (L1/L2/L3/auto), ResNet-50 at batch 1 and 32
#    (when mindcv is importable) -- first, so that the figures come back even if the tests run long;
# 2. tests/gpu: ops and fused kernels at L1/L2/L3, random programs, the article's Cell, the BERT
#    layer and a conv net as Cells with device-resident tensors, streams, mixing devices;
# 3. tests/vm's op tests with every tensor on the GPU (tests/gpu -m optests).
# Exit 2 without a usable GPU (the reason is printed), 1 when anything failed. Logs: OUT_DIR/gpu-*.txt
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT_DIR=${1:-${OUT:-artifacts}}
mkdir -p "$OUT_DIR"
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/vm:$PWD/server${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export MSVM_CACHE_DIR="${MSVM_CACHE_DIR:-$(mktemp -d)}"
"$PY" -c 'import sys; from msvm.context import gpu_problem; p = gpu_problem(); print("msvm:", p or "a CUDA device is usable"); sys.exit(2 if p else 0)' || exit 2
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; "$PY" -c 'import cupy, llvmlite, numpy; print("CuPy", cupy.__version__, "llvmlite", llvmlite.__version__, "numpy", numpy.__version__)'; } 2>&1 | tee "$OUT_DIR/gpu-env.txt"
timeout 180 "$PY" bench/gpu_check.py --budget 45 2>&1 | tee "$OUT_DIR/gpu-check.txt"
bench=${PIPESTATUS[0]}
timeout 130 "$PY" -m pytest -q -rfs -p no:cacheprovider -m "not optests" tests/gpu 2>&1 | tee "$OUT_DIR/gpu-tests.txt"
tests=${PIPESTATUS[0]}
MSVM_OPTESTS_TIMEOUT=140 timeout 150 "$PY" -m pytest -q -rfs -s -p no:cacheprovider -m optests tests/gpu 2>&1 \
    | tee "$OUT_DIR/gpu-optests.txt"
optests=${PIPESTATUS[0]}
echo "bench/gpu_check.py exit $bench, tests/gpu exit $tests, op tests exit $optests (124: stopped at its time limit)" \
    | tee -a "$OUT_DIR/gpu-tests.txt"
[ "$bench" = 0 ] && [ "$tests" = 0 ] && [ "$optests" = 0 ]
