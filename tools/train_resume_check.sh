#!/usr/bin/env bash
# Resume check on this machine's GPU (or --device cpu as the first argument: slow but the same).
# For each recipe, against an uninterrupted run of a tiny MoE model:
#   stop + resume   stopped after 123 steps, resumed from its last checkpoint;
#   kill -9         killed (SIGKILL) at random moments, over and over, while it checkpoints every
#                   5 steps, and resumed each time until it finishes.
# Both must log the same losses, gradient norms and eval losses, bit for bit. A kill that lands
# mid-save leaves a step_*.tmp-* directory, which the next start removes; the count is printed.
#   usage: [STEPS=300] tools/train_resume_check.sh [--device cpu|gpu] [recipe ...]   (default: gpu, mxfp8 nvfp4)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bs=${BLOCKSCALE:-./build/blockscale}  # the binary (BLOCKSCALE overrides)
device=gpu
if [[ ${1:-} == --device ]]; then device=${2:?--device needs cpu or gpu}; shift 2; fi
recipes=("$@")
((${#recipes[@]})) || recipes=(mxfp8 nvfp4)
dir=runs/resume_check
cfg=(--device "$device" --d-model 128 --d-ff 256 --layers 2 --heads 4 --experts 4 --top-k 2 --seq-len 64
     --batch 4 --vocab 256 --steps "${STEPS:-300}" --eval-every 50 --eval-batches 2 --log-every 1000
     --synthetic-tokens 200000 --checkpoint-every 5)
same() { cmp -s <(cut -d, -f1-6 "$1/train.csv") <(cut -d, -f1-6 "$2/train.csv") && cmp -s "$1/eval.csv" "$2/eval.csv"; }
failed=0
for r in "${recipes[@]}"; do
  rm -rf "$dir/$r" && mkdir -p "$dir/$r"
  "$bs" train --recipe "$r" "${cfg[@]}" --out "$dir/$r/whole" >/dev/null 2>&1 || { echo "$r: the uninterrupted run failed"; failed=1; continue; }
  "$bs" train --recipe "$r" "${cfg[@]}" --out "$dir/$r/stopped" --stop-after 123 >/dev/null 2>&1
  "$bs" train --recipe "$r" "${cfg[@]}" --out "$dir/$r/stopped" --resume "$dir/$r/stopped" >/dev/null 2>&1
  if same "$dir/$r/whole" "$dir/$r/stopped"; then echo "$r: stop + resume: identical"; else echo "$r: stop + resume: DIFFERS"; failed=1; fi
  k="$dir/$r/killed" kills=0 mid_save=0 landed=""
  for ((attempt = 0; attempt < 40; ++attempt)); do
    # No checkpoint yet: start afresh over the killed attempt's logs (a new run refuses them).
    resume=(--overwrite)
    [[ -e $k/latest ]] && resume=(--resume "$k")
    "$bs" train --recipe "$r" "${cfg[@]}" --out "$k" "${resume[@]}" >/dev/null 2>"$dir/$r/attempt.err" &
    pid=$!
    sleep "$((1 + RANDOM % 2)).$((RANDOM % 10))"
    if kill -0 "$pid" 2>/dev/null; then
      kill -9 "$pid"; wait "$pid" 2>/dev/null
      kills=$((kills + 1))
      landed+=" $(cat "$k/latest" 2>/dev/null || echo none)"
      compgen -G "$k/step_*.tmp-*" >/dev/null && mid_save=$((mid_save + 1))
    else
      # A kill that landed after the last checkpoint leaves a finished run, which a resume refuses.
      wait "$pid" || grep -q "already at step" "$dir/$r/attempt.err" || { echo "$r: a resumed run failed"; failed=1; }
      break
    fi
  done
  "$bs" train --recipe "$r" "${cfg[@]}" --out "$k" --resume "$k" >/dev/null 2>&1  # finishes (refused if done)
  if same "$dir/$r/whole" "$k"; then verdict=identical; else verdict=DIFFERS; failed=1; fi
  echo "$r: $kills kills ($mid_save mid-save), last checkpoint at each:${landed:- -}; then resumed: $verdict"
done
exit $failed
