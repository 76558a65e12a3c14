#!/usr/bin/env bash
# For the GPU host (which has nvcc, CMake, Eigen and GoogleTest but no package access): build with
# CUDA for the local GPU's architecture and run the whole default test suite, GPU tests included.
# Prints the device tests' own summaries last. Usage: ./tools/gpu_check.sh [arch, default 90a]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
arch=${1:-90a}
export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DBLOCKSCALE_CUDA=ON \
      -DBLOCKSCALE_CUDA_ARCHS="$arch" >/dev/null || exit 1
cmake --build build-gpu -j "$(nproc)" 2>&1 | grep -E "error|warning|Error" ; \
  [ "${PIPESTATUS[0]}" -eq 0 ] || exit 1
log=${OUT:-/tmp}/ctest.log
ctest --test-dir build-gpu -LE exhaustive --output-on-failure -j 8 2>&1 | tee "$log" | tail -n 25
status=${PIPESTATUS[0]}
echo "---- device tests, their own output"
for t in build-gpu/tests/formats/*device_test build-gpu/tests/quant/*_test; do [ -x "$t" ] && "$t" 2>&1 | grep -E "^[a-z0-9_]+_test:|PASSED|FAILED" | grep -v "bad bytes 0$" | tail -n 15; done
exit "$status"
