#!/usr/bin/env bash
# One GPU visit for quant/: bench/quant_gpu_check.sh (build; STEPS "tests" and/or "bench", with
# ncu on NCU_CASES), the peers' script in the same session when the bench runs, then (MEMCHECK=1)
# compute-sanitizer memcheck on a subset of the three grouped tests. Needs .deps (nlohmann, CLI11
# headers) and .peers (a copy of ../shared/peers) carried. Split over two calls when one would
# pass the 10-minute limit:
#   OUT=/tmp/s STEPS=tests bench/gpu_session.sh
#   OUT=/tmp/s STEPS=bench NCU_CASES="9 16" MEMCHECK=1 bench/gpu_session.sh
set -uo pipefail
OUT=${OUT:-/tmp/gpu_session}
STEPS=${STEPS:-tests bench}
mkdir -p "$OUT"
export PATH="/usr/local/cuda/bin:$PATH"
STEPS="$STEPS" NCU_CASES="${NCU_CASES:-}" OUT="$OUT" bash bench/quant_gpu_check.sh build-gpu
status=$?
if [[ " $STEPS " == *" bench "* ]]; then
  echo "== peers (same session)"
  python3 .peers/measure_peers.py 2>&1 | tee "$OUT/peers.log" | tail -n 20
fi
if [ "${MEMCHECK:-0}" = 1 ]; then
  for t in fp8_block_grouped_quantize_test nvfp4_grouped_quantize_test mx_grouped_quantize_test; do
    echo "== memcheck $t (subset)"
    timeout 120 compute-sanitizer --tool memcheck --print-limit 5 "build-gpu/tests/quant/quant_$t" \
      --gtest_filter="*/3_*:*/12_*:*/32_*:*/33_*:*Empty*" >"$OUT/memcheck_$t.log" 2>&1
    grep -E "ERROR SUMMARY|PASSED|FAILED" "$OUT/memcheck_$t.log" | head -5
  done
fi
exit "$status"
