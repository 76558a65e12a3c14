#!/usr/bin/env bash
# The GPU machine's check (it has nvcc, CMake, Eigen and GoogleTest but no package access): one
# CUDA build for one architecture, then the parts asked for, in the order given. The cuDNN
# frontend's headers come from .deps/cudnn_frontend (tools/setup.sh fetches them where pip reaches
# PyPI; copy the folder to a machine without): without them the step runs the reference attention.
# Run from anywhere:
#
#   OUT=/tmp/g tools/gpu_check.sh [--arch 90a] [--build DIR] [--jobs N] [tests|gemm|quant|train|peers|parallel|all]...
#
# Parts (default: tests); each builds only the targets it needs, all in the one build folder:
#   tests  everything; the default test suite (ctest -LE exhaustive), GPU tests included, then the
#          quant/ device tests' own summary lines (run once more, directly).
#   gemm   gemm_test at every sm90 tile (summary, failures, the ten cases closest to their error
#          bound), gemm_grouped_test and gemm_k_grouped_test, gemm_bench's table (--data normal: the
#          dense table of docs/performance.md), gemm_grouped_bench's, and per FP8 blockwise kernel (where
#          cuobjdump exists) its registers, stack and local (spill) bytes and its counts of QGMMA
#          (FP8 wgmma), UTMALDG and LDL/STL instructions and the highest register its SASS names.
#          When gemm_test crashes or hangs (a CUDA error poisons the rest of the process), it runs
#          again with the 128-wide tile only (GEMM_TEST_TILE=128) and the bench times only that
#          tile; a failing bench is retried at 128 too. So the default tile is still checked.
#   quant  every quant/ test, the CLI and its round-trip test, quant_bench: each test's summary,
#          the CLI tests' result, quant_bench's table, and ncu counters for the cases in NCU_CASES.
#   train  the step's memory-bound phases against their floors (norm_bench, embedding_loss_bench
#          tables), the training step at width 2048 (docs/performance.md's W): every recipe against
#          bf16, then bf16 with the reference attention; the comparison table and each run's phase
#          line (GPU time per phase, and the memory-bound phases' floors).
#   peers  blockscale's FP8 blockwise GEMMs beside their peers in one sitting: gemm_bench (--data
#          normal; cuBLASLt and cuBLAS in its own process), gemm_grouped_bench --only 0,1,2, DeepGEMM
#          (bench/deepgemm_peer.py: dense on normal data, grouped on uniform data as
#          gemm_grouped_bench; skipped without an importable deep_gemm), torch's grouped GEMMs
#          (bench/torch_grouped_peers.py; skipped without torch), then bench/peer_table.py's table
#          of ratios.
#   parallel  two GPUs of this host (skipped with fewer): copy-engine sums against NCCL's to the
#          bit, tools/data_parallel_check.sh 2 for fp8_block (plain and sharded), bf16 and width 2048
#          (loss agreement, scaling efficiency, exposed communication, optimizer state), and
#          tools/data_parallel_resume_check.sh 2.
#   all    tests, gemm and quant (the quant/ tests' direct run happens once).
#
# Options: --arch (BLOCKSCALE_CUDA_ARCHS, the arch-neutral sources' targets; default 90a), --build
# (the build folder, default build-gpu in the repository), --jobs (build parallelism, default
# all cores). Environment: OUT (logs, default /tmp/gpu_check), STEPS (the gemm and quant parts'
# phases, "tests bench" by default: "bench" skips their tests), BENCH_ARGS (more gemm_bench
# arguments, e.g. "--iters 30"), NCU_CASES (quant_bench case indices, `quant_bench --list`).
#
# Exit status: 0 every part passed; 1 a configure, build or test failed (a failed build stops the
# script); 2 bad usage (with this usage text); 3 no GPU: nvidia-smi is missing or lists no GPU,
# checked right after the arguments, before anything is configured or built.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PATH="/usr/local/cuda/bin:$PATH"

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | grep '^#' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

arch=90a
arch_re='^[0-9]+[af]?(;[0-9]+[af]?)*$'  # one or more, as BLOCKSCALE_CUDA_ARCHS takes them: 90a;100a
B=$root/build-gpu
jobs=$(nproc)
parts=()
while (( $# )); do
  case $1 in
    --arch) [[ ${2:-} =~ $arch_re ]] || { echo "gpu_check.sh: --arch needs an architecture such as 90a, got '${2:-}'" >&2; usage; }
            arch=$2; shift 2 ;;
    --build) [[ -n ${2:-} ]] || { echo "gpu_check.sh: --build needs a folder" >&2; usage; }
             B=$(realpath -m "$2"); shift 2 ;;
    --jobs) [[ ${2:-} =~ ^[1-9][0-9]*$ ]] || { echo "gpu_check.sh: --jobs needs a positive count, got '${2:-}'" >&2; usage; }
            jobs=$2; shift 2 ;;
    -h|--help) usage ;;
    tests|gemm|quant|train|peers|parallel) parts+=("$1"); shift ;;
    all) parts+=(tests gemm quant); shift ;;
    *) echo "gpu_check.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
(( ${#parts[@]} )) || parts=(tests)
steps=" ${STEPS:-tests bench} "
OUT=${OUT:-/tmp/gpu_check}

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check.sh: no GPU here (nvidia-smi is missing or lists none); this check runs on a GPU machine" >&2
  exit 3
fi
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem --format=csv,noheader
status=0

# Configures the build folder (once per run) and builds the given targets (none: everything).
# The build's errors and warnings are printed; a failed configure or build ends the script.
build() {
  if [[ -z ${configured:-} ]]; then
    if ! cmake -S "$root" -B "$B" -DCMAKE_BUILD_TYPE=Release -DBLOCKSCALE_CUDA=ON \
         -DBLOCKSCALE_CUDA_ARCHS="$arch" >"$OUT/configure.log" 2>&1; then
      echo "configure FAILED:"; tail -30 "$OUT/configure.log"; exit 1
    fi
    configured=1
  fi
  local log=$OUT/build_${part}.log targets=()
  (( $# )) && targets=(--target "$@")
  echo "== build ${*:-everything} ($SECONDS s so far)"
  cmake --build "$B" -j "$jobs" "${targets[@]}" >"$log" 2>&1
  local rc=$?
  grep -E "error|warning|Error" "$log" | grep -v "^ptxas info" | head -40
  (( rc == 0 )) || { echo "build FAILED (log: $log)"; exit 1; }
}

# A GoogleTest binary's log $1: its summary lines, then its own "<name>_test:" lines that report
# a problem (counts of bad bytes or mismatches other than 0) and the failures.
summarize() {
  grep -E '^\[  (PASSED|FAILED|SKIPPED) *\] [0-9]+ tests?' "$1" | tr '\n' ' '
  echo
  grep -E "^[a-z0-9_]+_test:" "$1" | grep -v -E "(bad bytes|mismatches|bad elements|bad) 0$" | cut -c1-200 | head -20
  grep -E "^\[  FAILED  \] .*\.|Failure|got 0x|guard byte|error:|illegal|launch" "$1" | cut -c1-200 | head -30
}

# Runs step $1 (a function) once per script run, however many parts ask for it.
once() {
  [[ " ${ran:-} " == *" $1 "* ]] && return 0
  ran="${ran:-} $1"
  "$@"
}

quant_test_targets() {
  # tests/quant/CMakeLists.txt: one target quant_<file> per test source.
  for f in "$root"/tests/quant/*_test.cu "$root"/tests/quant/*_test.cpp; do t=${f##*/}; echo "quant_${t%.*}"; done
}

# shellcheck disable=SC2317  # called through once
quant_tests() {
  for t in $(quant_test_targets); do
    "$B/tests/quant/$t" >"$OUT/$t.log" 2>&1 || status=1
    echo "== $t: $(summarize "$OUT/$t.log")"
  done
}

# ---- tests: the whole default suite ------------------------------------------------------------
part_tests() {
  build
  echo "== ctest -LE exhaustive (log: $OUT/ctest.log)"
  ctest --test-dir "$B" -LE exhaustive --output-on-failure -j 8 2>&1 | tee "$OUT/ctest.log" | tail -n 25
  (( PIPESTATUS[0] == 0 )) || status=1
  echo "---- quant/ device tests, their own output"
  once quant_tests
}

# ---- gemm: gemm/'s test, bench and SASS ---------------------------------------------------------
# ptxas's kernel names, shortened: ILi<tile N>ELb<1 = 1x128 B scales>ELi<cluster>...GroupModeE<0
# dense, 1 M-, 2 K-grouped>[ELi<tile M>].
fp8_kernel_re='kernelILi[0-9]+ELb[01]ELi[12]ELNS0_9GroupModeE[012]E(Li[0-9]+E)?'

gemm_sass() {
  local obj cuobjdump
  obj=$(find "$B/gemm" -name "sm90_fp8_gemm.cu.o" | head -1)
  cuobjdump=$(command -v cuobjdump)
  if [[ -z $cuobjdump || -z $obj ]]; then
    echo "== no cuobjdump or no sm90_fp8_gemm.cu.o: register and SASS counts skipped"; return 0
  fi
  echo "== registers per FP8 kernel (cuobjdump -res-usage; LOCAL > 0: spills)"
  "$cuobjdump" -res-usage "$obj" >"$OUT/res_usage.txt" 2>&1
  awk -v re="$fp8_kernel_re" '
    /Function .*sm90_fp8_gemm_kernel/ { f = ""; if (match($0, re)) f = substr($0, RSTART, RLENGTH); next }
    f != "" && /REG:/ { printf "%s: %s %s %s\n", f, $1, $2, $4; f = "" }' "$OUT/res_usage.txt"
  "$cuobjdump" -sass "$obj" >"$OUT/sass.txt" 2>/dev/null
  # The highest register named: the consumers' setmaxnreg region may use more than REG says.
  echo "== SASS per FP8 kernel: QGMMA, UTMALDG, local-memory LDL/STL, highest register"
  awk -v re="$fp8_kernel_re" '
    /Function :/ { f = ""; if (match($0, re)) { f = substr($0, RSTART, RLENGTH); order[++n] = f } }
    f == "" { next }
    /QGMMA/ { q[f]++ } /UTMALDG/ { t[f]++ } /[^A-Z](LDL|STL)[ .]/ { l[f]++ }
    { s = $0; while (match(s, /[^A-Z_]R[0-9]+/)) { r = substr(s, RSTART + 2, RLENGTH - 2) + 0; if (r > m[f]) m[f] = r; s = substr(s, RSTART + RLENGTH) } }
    END { for (i = 1; i <= n; i++) { f = order[i]; printf "%s QGMMA %d UTMALDG %d LDL/STL %d max R%d\n", f, q[f], t[f], l[f], m[f] } }' \
    "$OUT/sass.txt"
  echo "== FP8 kernels' main loops: instructions per wgmma (bench/sass_summary.py; 4 wgmmas a K block and wave)"
  python3 "$root/bench/sass_summary.py" "$OUT/sass.txt" sm90_fp8_gemm_kernel "$OUT/sass_fp8.txt" |
    awk -v re="$fp8_kernel_re" 'match($0, re) { f = substr($0, RSTART, RLENGTH) } /wgmma loop/ { sub(/^ +/, ""); print f ": " $0 }'
}

# gemm_test's log $1: the summary and failures, then the ten random cases closest to their bound.
summarize_gemm_test() {
  summarize "$1"
  echo "== measured error (worst err/bound first)"
  grep -E "^gemm_test:" "$1" | sort -t'(' -k2 -r | head -10 | cut -c1-170
}

# A crash rather than failed expectations: killed / timed out (rc $1), or a CUDA error in log $2
# (the hang trap's __trap, an illegal address, a refused launch) that every later case reports too.
crashed() {
  (( $1 >= 124 )) || grep -qE "unspecified launch failure|illegal (memory access|instruction)|too many resources|launch timed out|an illegal|Aborted|Segmentation" "$2"
}

part_gemm() {
  build gemm_test gemm_grouped_test gemm_k_grouped_test gemm_bench gemm_grouped_bench
  gemm_sass
  local bench_tiles=()
  if [[ $steps == *" tests "* ]]; then
    echo "== gemm_test (every tile)"
    timeout 150 "$B/tests/gemm/gemm_test" >"$OUT/gemm_test.log" 2>&1
    local rc=$?
    summarize_gemm_test "$OUT/gemm_test.log"
    if (( rc != 0 )); then
      status=1
      if crashed "$rc" "$OUT/gemm_test.log"; then
        echo "== gemm_test CRASHED (rc $rc, $SECONDS s): again with the 128-wide tile only (GEMM_TEST_TILE=128)"
        GEMM_TEST_TILE=128 timeout 120 "$B/tests/gemm/gemm_test" >"$OUT/gemm_test_128.log" 2>&1
        echo "rc $?"
        summarize_gemm_test "$OUT/gemm_test_128.log"
        bench_tiles=(--tiles 128)
      fi
    fi
    for t in gemm_grouped_test gemm_k_grouped_test; do
      timeout 150 "$B/tests/gemm/$t" >"$OUT/$t.log" 2>&1 || status=1
      echo "== $t: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/$t.log" | head -2 | tr '\n' ' ')"
    done
  fi
  if [[ $steps == *" bench "* ]]; then
    echo "== gemm_bench ($SECONDS s so far) ${bench_tiles[*]}"
    # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
    timeout 120 "$B/bench/gemm_bench" --data normal ${BENCH_ARGS:-} "${bench_tiles[@]}" 2>&1 | tee "$OUT/gemm_bench.log"
    local brc=${PIPESTATUS[0]}
    if (( brc != 0 )); then
      status=1
      if (( ${#bench_tiles[@]} == 0 )); then
        echo "== gemm_bench failed (rc $brc, $SECONDS s): again with the 128-wide tile only"
        # shellcheck disable=SC2086
        timeout 60 "$B/bench/gemm_bench" --data normal ${BENCH_ARGS:-} --tiles 128 2>&1 | tee "$OUT/gemm_bench_128.log"
      fi
    fi
    echo "== gemm_grouped_bench ($SECONDS s so far)"
    timeout 120 "$B/bench/gemm_grouped_bench" 2>&1 | tee "$OUT/gemm_grouped_bench.log" | grep -E "^(\||device)"
    (( PIPESTATUS[0] == 0 )) || status=1
  fi
}

# ---- quant: quant/'s tests, the CLI, the bench, ncu ---------------------------------------------
part_quant() {
  # shellcheck disable=SC2046  # one target per word
  build $(quant_test_targets) quant_bench blockscale cli_roundtrip_test
  if [[ $steps == *" tests "* ]]; then
    once quant_tests
    (cd "$B" && ctest -R "CliRoundTrip|cli_errors" --output-on-failure >"$OUT/cli.log" 2>&1) || status=1
    echo "== CLI: $(grep -E 'tests passed|tests failed' "$OUT/cli.log")"
    grep -E "cli_roundtrip_test:|Failure" "$OUT/cli.log" | head -10
  fi
  if [[ $steps == *" bench "* ]]; then
    echo "== quant_bench"
    "$B/bench/quant_bench" 2>&1 | tee "$OUT/quant_bench.log" | grep -v "^case "
    (( PIPESTATUS[0] == 0 )) || status=1
    for c in ${NCU_CASES:-}; do
      echo "== ncu: bench case $c ($("$B/bench/quant_bench" --list | sed -n "$((c + 1))p"))"
      timeout 150 ncu -k regex:"quantize_kernel|amax_kernel" -c 2 --section SpeedOfLight --section Occupancy \
        --section WarpStateStats --section LaunchStats \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum \
        "$B/bench/quant_bench" --only "$c" --iters 20 >"$OUT/ncu_case$c.log" 2>&1
      grep -E "^  [a-z_0-9]+.*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Theoretical Occupancy|No Eligible|Warp Cycles Per Issued|dram__bytes|bank_conflicts" \
        "$OUT/ncu_case$c.log" | sed -E 's/ +/ /g' | cut -c1-140 | head -40
    done
  fi
}

# ---- train: the width-2048 step, every recipe, and bf16 on the reference attention -------------
part_peers() {
  build gemm_bench gemm_grouped_bench
  echo "== gemm_bench --data normal, gemm_grouped_bench --only 0,1,2"
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of arguments
  timeout 300 "$B/bench/gemm_bench" --data normal ${BENCH_ARGS:-} >"$OUT/peers_dense.log" 2>&1 || status=1
  timeout 200 "$B/bench/gemm_grouped_bench" --only 0,1,2 >"$OUT/peers_grouped.log" 2>&1 || status=1
  local dg=()
  if python3 -c "import deep_gemm" 2>/dev/null; then
    echo "== DeepGEMM (bench/deepgemm_peer.py): dense, normal data; grouped, uniform data"
    # DeepGEMM compiles each shape's kernel at its first call: all of them first, in parallel.
    local i
    for i in $(seq 0 17); do
      timeout 300 python3 "$root/bench/deepgemm_peer.py" --only "$i" --iters 3 >/dev/null 2>&1 &
    done
    wait
    timeout 900 python3 "$root/bench/deepgemm_peer.py" --data normal --only 0,1,2,3,4,5,6,7,8,9,10,11,12,13 \
      >"$OUT/peers_deepgemm_dense.log" 2>&1 || status=1
    timeout 600 python3 "$root/bench/deepgemm_peer.py" --data uniform --only 14,15,16,17 \
      >"$OUT/peers_deepgemm_grouped.log" 2>&1 || status=1
    dg=(--deepgemm "$OUT/peers_deepgemm_dense.log" --deepgemm "$OUT/peers_deepgemm_grouped.log")
  else
    echo "== DeepGEMM skipped: no importable deep_gemm (build DeepGEMM for this GPU and put it on PYTHONPATH)"
  fi
  local tp=()
  if python3 -c "import torch" 2>/dev/null; then
    echo "== torch's grouped GEMMs (bench/torch_grouped_peers.py)"
    timeout 300 python3 "$root/bench/torch_grouped_peers.py" >"$OUT/peers_torch.log" 2>&1 || status=1
    tp=(--torch "$OUT/peers_torch.log")
  else
    echo "== torch's grouped GEMMs skipped: no importable torch"
  fi
  python3 "$root/bench/peer_table.py" --dense "$OUT/peers_dense.log" --grouped "$OUT/peers_grouped.log" \
    "${dg[@]}" "${tp[@]}" || status=1
}

part_train() {
  build blockscale norm_bench embedding_loss_bench
  if [[ $steps == *" bench "* ]]; then
    local b
    for b in norm_bench embedding_loss_bench; do
      echo "== $b"
      timeout 120 "$B/bench/$b" >"$OUT/$b.log" 2>&1 || status=1
      grep "^|" "$OUT/$b.log"
    done
  fi
  local w=(--d-model 2048 --d-ff 1408 --layers 2 --heads 16 --experts 8 --top-k 2 --seq-len 1024 --batch 4
           --vocab 256 --eval-every 0 --eval-batches 1 --synthetic-tokens 2000000 --device gpu --checkpoint-every -1
           --steps 30)
  echo "== train width 2048: bf16, fp8_block, mxfp8, nvfp4"
  timeout 400 "$B/blockscale" train "${w[@]}" --compare bf16,fp8_block,mxfp8,nvfp4 --out "$OUT/train_w2048" --overwrite \
    >"$OUT/train_w2048.log" 2>&1 || status=1
  grep -E "^train:|^[a-z0-9_]+ +[0-9.]+ +[-+]|GPU time per step" "$OUT/train_w2048.log" | cut -c1-400
  echo "== train width 2048: bf16 with --attention reference"
  timeout 200 "$B/blockscale" train "${w[@]}" --recipe bf16 --attention reference --out "$OUT/train_w2048_ref" \
    --overwrite >"$OUT/train_w2048_ref.log" 2>&1 || status=1
  grep -E "^train:|GPU time per step|tokens/s" "$OUT/train_w2048_ref.log" | tail -3 | cut -c1-400
}

# ---- parallel: two GPUs of this host --------------------------------------------------------------
part_parallel() {
  if (( $(nvidia-smi -L | grep -c '^GPU ') < 2 )); then echo "parallel: skipped (this machine has one GPU)"; return; fi
  build blockscale
  export BLOCKSCALE=$B/blockscale NCCL_NVLS_ENABLE=0
  echo "== copy-engine sums against NCCL's"
  timeout 300 bash "$root/tests/train/parallel/two_gpu_sums_test.sh" || status=1
  local spec
  for spec in "--recipe fp8_block" "--recipe fp8_block --shard-optimizer" "--recipe bf16" \
              "--recipe fp8_block --d-model 2048 --d-ff 1408"; do
    echo "== data_parallel_check.sh 2 $spec"
    # shellcheck disable=SC2086  # the spec's words are separate options
    (cd "$root" && timeout 600 ./tools/data_parallel_check.sh 2 $spec) >"$OUT/dp_check.log" 2>&1 || status=1
    grep -vE "^runs/|^train:|GPU time per step" "$OUT/dp_check.log" | tail -13
  done
  echo "== data_parallel_resume_check.sh 2"
  (cd "$root" && timeout 300 ./tools/data_parallel_resume_check.sh 2 --recipe fp8_block) 2>&1 | tail -5 || status=1
}

for part in "${parts[@]}"; do
  echo "==== $part ($SECONDS s so far; logs in $OUT)"
  case $part in
    tests) part_tests ;;
    gemm) part_gemm ;;
    quant) part_quant ;;
    peers) part_peers ;;
    train) part_train ;;
    parallel) part_parallel ;;
  esac
done
echo "==== done in $SECONDS s, status $status"
exit "$status"
