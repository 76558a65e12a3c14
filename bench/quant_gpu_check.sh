#!/usr/bin/env bash
# The GPU machine's check of quant/: builds every quant test, the CLI round-trip test and the
# benchmark for sm_90a, runs the tests (summary lines; full logs in $OUT), the benchmark (table
# last) and, for the benchmark cases listed in NCU_CASES (indices, see `quant_bench --list`), a
# few hardware counters. STEPS picks the parts (default "tests bench"). Run from the repository
# root:
#   OUT=/tmp/q NCU_CASES="1 5" STEPS="tests bench" bench/quant_gpu_check.sh [build-dir]
set -uo pipefail
OUT=${OUT:-/tmp/quant_gpu_check}
B=${1:-build-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
if ! cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLOCKSCALE_CUDA=ON -DBLOCKSCALE_CUDA_ARCHS=90a \
     >"$OUT/configure.log" 2>&1; then
  echo "configure FAILED:"; tail -30 "$OUT/configure.log"; exit 1
fi
tests="quant_quantize_test quant_dequantize_test quant_mx_quantize_test quant_mx_grouped_quantize_test
       quant_nvfp4_quantize_test quant_fp8_block_quantize_test quant_fp8_block_grouped_quantize_test
       quant_nvfp4_grouped_quantize_test quant_mx_device_test quant_nvfp4_device_test quant_mx_bf16_api_test"
if ! cmake --build "$B" -j16 --target $tests quant_bench blockscale cli_roundtrip_test >"$OUT/build.log" 2>&1; then
  echo "build FAILED:"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1
fi
status=0
steps=" ${STEPS:-tests bench} "
if [[ $steps == *" tests "* ]]; then
for t in $tests; do
  "$B/tests/quant/$t" >"$OUT/$t.log" 2>&1 || status=1
  echo "== $t: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$OUT/$t.log" | tr '\n' ' ')"
  grep -E "^[a-z0-9_]+_test:" "$OUT/$t.log" | grep -v -E "bad bytes 0$|mismatches 0$" | cut -c1-200 | head -20
  grep -E "^\[  FAILED  \]|Failure|got 0x|guard byte" "$OUT/$t.log" | cut -c1-200 | head -20
done
(cd "$B" && ctest -R "CliRoundTrip|cli_errors" --output-on-failure >"$OUT/cli.log" 2>&1) || status=1
echo "== CLI: $(grep -E 'tests passed|tests failed' "$OUT/cli.log")"
grep -E "cli_roundtrip_test:|Failure" "$OUT/cli.log" | head -10
fi
if [[ $steps == *" bench "* ]]; then
echo "== bench"
"$B/bench/quant_bench" 2>&1 | tee "$OUT/bench.log" | grep -v "^case "
for c in ${NCU_CASES:-}; do
  echo "== ncu: bench case $c ($("$B/bench/quant_bench" --list | sed -n "$((c + 1))p"))"
  timeout 150 ncu -k regex:"quantize_kernel|amax_kernel" -c 2 --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
    "$B/bench/quant_bench" --only "$c" --iters 20 >"$OUT/ncu_case$c.log" 2>&1
  grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Warp Cycles Per Issued|dram__bytes|bank_conflicts" \
    "$OUT/ncu_case$c.log" | sed -E 's/ +/ /g' | cut -c1-140 | head -40
done
fi
exit "$status"
