#!/usr/bin/env bash
# Two ranks on two GPUs of this host (skipped, exit 77, with fewer): the gradient sums through the
# copy engines (--collectives copy-engines) give the same losses and gradient norms to the bit as
# through NCCL's kernels (a sum of two fp32 values is the same either way round), for the plain,
# the sharded-optimizer and the expert-parallel step; the run's header says which path it took.
#   usage: BLOCKSCALE=path/to/blockscale tests/train/parallel/two_gpu_sums_test.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.." || exit 1
bs=${BLOCKSCALE:?set BLOCKSCALE to the blockscale binary}
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if ((gpus < 2)); then echo "skipped: needs 2 GPUs (this machine has ${gpus:-0})"; exit 77; fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cfg=(--device gpu --recipe fp8_block --d-model 256 --d-ff 256 --layers 2 --heads 4 --experts 4 --top-k 2
     --seq-len 128 --batch 2 --vocab 256 --steps 6 --eval-every 3 --eval-batches 2 --log-every 1000
     --synthetic-tokens 200000 --checkpoint-every -1)
failed=0
for mode in plain shard expert; do
  extra=()
  [[ $mode == shard ]] && extra=(--shard-optimizer)
  [[ $mode == expert ]] && extra=(--expert-parallel)
  for path in nccl copy-engines; do
    if ! BLOCKSCALE=$bs ./tools/train_ranks.sh 2 "${cfg[@]}" "${extra[@]}" --collectives $path --out "$dir/$mode-$path" \
        >"$dir/$mode-$path.log" 2>&1; then
      echo "$mode, $path: the run failed"; tail -5 "$dir/$mode-$path.log"; failed=1
    fi
  done
  if ! grep -q "gradient sums through copy engines" "$dir/$mode-copy-engines.log"; then
    echo "$mode: the copy-engine run's header does not say 'gradient sums through copy engines'"; failed=1
  fi
  if cmp -s <(cut -d, -f1-6 "$dir/$mode-nccl/train.csv") <(cut -d, -f1-6 "$dir/$mode-copy-engines/train.csv") &&
     cmp -s "$dir/$mode-nccl/eval.csv" "$dir/$mode-copy-engines/eval.csv"; then
    echo "$mode: copy engines and NCCL: identical losses, gradient norms and eval losses"
  else
    echo "$mode: copy engines and NCCL DIFFER"; paste -d'|' "$dir/$mode-nccl/train.csv" "$dir/$mode-copy-engines/train.csv" | head -8
    failed=1
  fi
done
exit $failed
