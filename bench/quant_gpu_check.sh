#!/usr/bin/env bash
# The GPU machine's check of quant/: builds the quant test and benchmark for sm_90a, runs the test
# (summary lines only; full log in $OUT/test.log), the benchmark (table last), dumps the SASS and
# reads a few hardware counters of the main kernel. Run from the repository root:
#   OUT=/tmp/q bench/quant_gpu_check.sh [build-dir]
set -uo pipefail
OUT=${OUT:-/tmp/quant_gpu_check}
B=${1:-build-gpu}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
if ! cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLOCKSCALE_CUDA=ON -DBLOCKSCALE_CUDA_ARCHS=90a \
     >"$OUT/configure.log" 2>&1; then
  echo "configure FAILED:"; tail -30 "$OUT/configure.log"; exit 1
fi
if ! cmake --build "$B" -j16 --target quant_mx_quantize_test quant_bench >"$OUT/build.log" 2>&1; then
  echo "build FAILED:"; grep -E "error|Error" "$OUT/build.log" | head -30; exit 1
fi
echo "== test"
"$B/tests/quant/quant_mx_quantize_test" >"$OUT/test.log" 2>&1
echo "test exit code $?"
echo "layout lines with 0 bad bytes: $(grep -c 'bad bytes 0$' "$OUT/test.log")"
grep -E "^mx_quantize_test:" "$OUT/test.log" | grep -v -E "bad bytes 0$|dequantize" | cut -c1-200
grep -E "dequantize" "$OUT/test.log" | grep -v "mismatches 0$" | cut -c1-200
grep -E "FAILED|PASSED|Failure|got 0x|guard byte|flag:" "$OUT/test.log" | cut -c1-200 | head -40
echo "== bench"
"$B/bench/quant_bench" 2>&1 | tee "$OUT/bench.log" | grep -v "^case "
cuobjdump -sass "$B/quant/CMakeFiles/blockscale_quant.dir/mx_quantize.cu.o" >"$OUT/sass_all.txt" 2>&1
echo "== SASS (bf16 e4m3 hw-cvt kernels)"
python3 bench/sass_summary.py "$OUT/sass_all.txt" \
  'InputTypeE0ELNS_7formats6RecipeE0ELb[01]ELb[01]ELNS1_14ElementEncoderE0' "$OUT/sass_bf16_e4m3.txt"
rm -f "$OUT/sass_all.txt"
for c in 0 1; do
  echo "== ncu: bench case $c (0: bf16 16384x8192 row, 1: row+col; hw-cvt)"
  timeout 150 ncu -k regex:mxfp8_quantize_kernel -c 1 --section SpeedOfLight --section Occupancy \
    --section SchedulerStats --section WarpStateStats --section LaunchStats \
    --metrics dram__bytes_read.sum,dram__bytes_write.sum,smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
    "$B/bench/quant_bench" --only $c --iters 20 >"$OUT/ncu_case$c.log" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|dram__bytes|inst_executed|bank_conflicts|Block Limit" \
    "$OUT/ncu_case$c.log" | sed -E 's/ +/ /g' | cut -c1-120
done
