#!/usr/bin/env bash
# The GPU machine's check of gemm/: builds the GEMM test and benchmark for sm_90a, runs the test
# with both sm90 tile widths (128 x 128 and 128 x 192; summary lines, the measured-error lines,
# failures; full log in $OUT) and the benchmark of both widths (table last). Also prints each
# kernel's register / spill report and, where cuobjdump exists, per kernel the count of QGMMA (FP8
# wgmma) and local-memory (LDL/STL) instructions in its SASS. Budget: about 6 minutes on an H100
# (build 2-3, test <= 150 s, bench <= 90 s). When the test run crashes or hangs (a CUDA error
# poisons the rest of the process), the tests run again with the 128-wide kernel only
# (GEMM_TEST_TILE=128) and the bench times only that width, so the shipped default is still
# verified in the same call. Run from the repository root:
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
echo "== build $SECONDS s; ptxas per kernel (ILi<tile N>ELb<1 = 1x128 B scales>ELi<cluster>...GroupModeE<0 dense, 1 M-, 2 K-grouped>)"
awk '/Compiling entry function .*sm90_fp8_gemm_kernel/ { match($0, /kernelILi[0-9]+ELb[01]ELi[12]ELNS0_9GroupModeE[012]/); f = substr($0, RSTART, RLENGTH) }
     f != "" && /spill stores/ { s = $0; sub(/^ +/, "", s) }
     f != "" && /Used [0-9]+ registers/ { match($0, /Used [0-9]+ registers/); print f ": " substr($0, RSTART, RLENGTH) ", " s; f = "" }' \
  "$OUT/build.log"
obj=$(find "$B/gemm" -name "sm90_fp8_gemm.cu.o" | head -1)
CUOBJDUMP=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
if [[ -n $CUOBJDUMP && -n $obj ]]; then
  "$CUOBJDUMP" -sass "$obj" >"$OUT/sass.txt" 2>/dev/null
  # Highest register named: ptxas's "Used" is the entry cap; the consumers' setmaxnreg region may use more.
  echo "== SASS per kernel: QGMMA, UTMALDG, local-memory LDL/STL, highest register"
  awk '/Function :/ { match($0, /kernelILi[0-9]+ELb[01]ELi[12]ELNS0_9GroupModeE[012]/); f = substr($0, RSTART, RLENGTH); order[++n] = f }
       /QGMMA/ { q[f]++ } /UTMALDG/ { t[f]++ } /[^A-Z](LDL|STL)[ .]/ { l[f]++ }
       { s = $0; while (match(s, /[^A-Z_]R[0-9]+/)) { r = substr(s, RSTART + 2, RLENGTH - 2) + 0; if (r > m[f]) m[f] = r; s = substr(s, RSTART + RLENGTH) } }
       END { for (i = 1; i <= n; i++) { f = order[i]; printf "%s QGMMA %d UTMALDG %d LDL/STL %d max R%d\n", f, q[f], t[f], l[f], m[f] } }' \
    "$OUT/sass.txt"
fi

# The test's summary, failures and worst measured errors from log $1.
summarize_test() {
  grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$1" | tr '\n' ' '; echo
  grep -E "^\[  FAILED  \] .*\." "$1" | cut -c1-160 | head -30
  grep -E "Failure|got |want|mismatch|differ|above the derived|error:|launch|illegal|tile 128 x" "$1" | cut -c1-200 | head -30
  # The measured error of the random cases: the ten closest to their bound (err/bound, descending).
  echo "== measured error (worst err/bound first)"
  grep -E "^gemm_test:" "$1" | sort -t'(' -k2 -r | head -10 | cut -c1-170
}
# A crash rather than failed expectations: killed / timed out, or a CUDA error (the hang trap's
# __trap, an illegal address, a refused launch) that every later case then reports too.
crashed() {
  (( $1 >= 124 )) || grep -qE "unspecified launch failure|illegal (memory access|instruction)|too many resources|launch timed out|an illegal|Aborted|Segmentation" "$2"
}

status=0
echo "== gemm_test (both tile widths)"
timeout 150 "$B/tests/gemm/gemm_test" >"$OUT/gemm_test.log" 2>&1
rc=$?
summarize_test "$OUT/gemm_test.log"
BENCH_TILES=()
if (( rc != 0 )); then
  status=1
  if crashed "$rc" "$OUT/gemm_test.log"; then
    echo "== gemm_test CRASHED (rc $rc, $SECONDS s): again with the 128-wide kernel only (GEMM_TEST_TILE=128)"
    GEMM_TEST_TILE=128 timeout 120 "$B/tests/gemm/gemm_test" >"$OUT/gemm_test_128.log" 2>&1
    echo "rc $?"
    summarize_test "$OUT/gemm_test_128.log"
    BENCH_TILES=(--tiles 128)
  fi
fi
echo "== bench ($SECONDS s so far) ${BENCH_TILES[*]}"
timeout 90 "$B/bench/gemm_bench" ${BENCH_ARGS:-} "${BENCH_TILES[@]}" 2>&1 | tee "$OUT/bench.log"
brc=${PIPESTATUS[0]}
if (( brc != 0 )) && (( ${#BENCH_TILES[@]} == 0 )) && (( SECONDS < 300 )); then
  echo "== bench failed (rc $brc, $SECONDS s): again with the 128-wide kernel only"
  timeout 60 "$B/bench/gemm_bench" ${BENCH_ARGS:-} --tiles 128 2>&1 | tee "$OUT/bench_128.log"
fi
echo "== done in $SECONDS s"
exit "$status"
