#!/usr/bin/env bash
# The GPU machine's check of gemm/: builds the GEMM test and benchmark for sm_90a, runs the test
# (summary lines, the measured-error lines, failures; full log in $OUT) and the benchmark (table
# last). Also prints the kernel's register / spill report and, where cuobjdump exists, the count
# of QGMMA (FP8 wgmma) instructions in its SASS. Run from the repository root:
#   OUT=/tmp/g BENCH_ARGS="--iters 30" bash bench/gemm_gpu_check.sh [build-dir]
set -uo pipefail
OUT=${OUT:-/tmp/gemm_gpu_check}
B=${1:-build-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
if ! cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLOCKSCALE_CUDA=ON -DBLOCKSCALE_CUDA_ARCHS=90a \
     >"$OUT/configure.log" 2>&1; then
  echo "configure FAILED:"; tail -30 "$OUT/configure.log"; exit 1
fi
if ! cmake --build "$B" -j16 --target gemm_test gemm_bench >"$OUT/build.log" 2>&1; then
  echo "build FAILED:"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1
fi
obj=$(find "$B/gemm" -name "sm90_fp8_block_gemm.cu.o" | head -1)
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
if [[ -n $CUOBJDUMP && -n $obj ]]; then
  "$CUOBJDUMP" -res-usage "$obj" 2>/dev/null | grep -E "Function|REG" | sed -E 's/ +/ /g' | cut -c1-160 | head -6
  "$CUOBJDUMP" -sass "$obj" >"$OUT/sass.txt" 2>/dev/null
  echo "== SASS: QGMMA $(grep -c QGMMA "$OUT/sass.txt"), UTMALDG $(grep -c UTMALDG "$OUT/sass.txt"), local-memory LDL/STL $(grep -cE 'LDL|STL' "$OUT/sass.txt")"
fi
status=0
echo "== gemm_test"
timeout 300 "$B/tests/gemm/gemm_test" >"$OUT/gemm_test.log" 2>&1 || status=1
grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$OUT/gemm_test.log" | tr '\n' ' '; echo
grep -E "^\[  FAILED  \] .*\." "$OUT/gemm_test.log" | cut -c1-160 | head -30
grep -E "Failure|got |want|mismatch|above the derived|error:" "$OUT/gemm_test.log" | cut -c1-200 | head -30
# The measured error of the random cases: the ten closest to their bound (err/bound, descending).
echo "== measured error (worst err/bound first)"
grep -E "^gemm_test:" "$OUT/gemm_test.log" | sort -t'(' -k2 -r | head -10 | cut -c1-160
echo "== bench"
timeout 240 "$B/bench/gemm_bench" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
exit "$status"
