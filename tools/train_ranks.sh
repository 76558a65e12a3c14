#!/usr/bin/env bash
# Runs `blockscale train` as N ranks on this host's GPUs, one process per GPU, with the variables
# torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT). torchrun works as
# well: torchrun --nproc-per-node N --no-python ./build/blockscale train ...
#   usage: tools/train_ranks.sh N [blockscale train options]
# Rank 0 prints and writes --out; the others' output goes to <out>/rank<r>.log. NVLink multicast
# stays off (NCCL_NVLS_ENABLE=0): the multi-GPU hosts this was built on are shared.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:?usage: tools/train_ranks.sh N [blockscale train options]}
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "train_ranks.sh: N must be a positive integer (got '$n')" >&2; exit 2; }
bs=${BLOCKSCALE:-./build/blockscale}  # the binary (BLOCKSCALE overrides)
out=runs/train
args=("$@")
for ((i = 0; i < ${#args[@]}; ++i)); do
  [[ ${args[i]} == --out ]] && out=${args[i + 1]:-$out}
  [[ ${args[i]} == --out=* ]] && out=${args[i]#--out=}
done
mkdir -p "$out" || exit 1
# A port below Linux's ephemeral range (32768+), so no outgoing connection holds it.
export NCCL_NVLS_ENABLE=0 WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-$((20000 + RANDOM % 12000))}
pids=()
for ((r = n - 1; r >= 0; --r)); do
  if ((r == 0)); then
    RANK=0 LOCAL_RANK=0 "$bs" train "$@" &
  else
    RANK=$r LOCAL_RANK=$r "$bs" train "$@" >"$out/rank$r.log" 2>&1 &
  fi
  pids+=($!)
done
# The first rank to fail stops the others (they would wait for it in NCCL forever).
status=0
for ((left = n; left > 0; --left)); do
  if ! wait -n; then  # the next rank to finish (the ranks are this script's only jobs)
    status=1
    echo "train_ranks.sh: a rank failed (see $out/rank*.log); stopping the others" >&2
    kill "${pids[@]}" 2>/dev/null
    wait
    break
  fi
done
exit $status
