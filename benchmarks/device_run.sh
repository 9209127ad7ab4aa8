#!/usr/bin/env bash
# One device call: build, GPU tests, CPU tests, GPU benchmark.  Run from the repo root.
set -uo pipefail
export PYTHONUNBUFFERED=1 TRIDENT_CACHE_DIR=/tmp/trident-cache PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
t=$(date +%s)
python3 -c "from trident.native.build import runtime_module; runtime_module(); print('runtime ok')" 2>&1 | tail -20
echo "runtime build: $(( $(date +%s) - t ))s"
timeout ${GPU_TEST_TIMEOUT:-240} python3 -m pytest -q tests/gpu ${PYTEST_EXTRA:-} 2>&1 | tee "$OUT/gpu_tests.log" | tail -40
if [ "${RUN_BENCH:-1}" = 1 ]; then
  timeout ${BENCH_TIMEOUT:-240} python3 benchmarks/gpu_triton.py --out "$OUT/gpu_triton.md" 2>&1 | tail -40
fi
if [ "${RUN_UNIT:-0}" = 1 ]; then
  timeout ${UNIT_TIMEOUT:-200} python3 -m pytest -q -p no:cacheprovider tests/unit tests/golden 2>&1 | tee "$OUT/unit_tests.log" | tail -8
fi
if [ "${RUN_DEMO:-0}" = 1 ]; then
  timeout 120 python3 -m trident.demo 2>&1 | tee "$OUT/demo.log" | tail -25
fi
