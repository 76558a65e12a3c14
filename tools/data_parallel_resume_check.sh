#!/usr/bin/env bash
# Resume of an N-GPU checkpoint on N GPUs and on 1 GPU (one host). An N-GPU run stops after half
# its steps; resumed on N GPUs it must log the uninterrupted run's losses, gradient norms and eval
# losses bit for bit; resumed on 1 GPU with the same global batch (N x B sequences, one process)
# its eval loss is printed beside the uninterrupted run's (the same to noise: the sums over the
# batch are taken in another order).
#   usage: tools/data_parallel_resume_check.sh N [--recipe R] [other blockscale train options]
# Runs, under runs/dp_resume: whole (N GPUs), stopped (N GPUs, stopped and resumed on N), on_one
# (a copy of stopped at its checkpoint, resumed on 1 GPU). Default model: the one of
# tools/data_parallel_check.sh, B = 4 sequences per GPU, 60 steps, a checkpoint every 10.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
n=${1:?usage: tools/data_parallel_resume_check.sh N [train options]}
shift
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "data_parallel_resume_check.sh: N must be a positive integer (got '$n')" >&2; exit 2; }
b=4
steps=60
bs=${BLOCKSCALE:-./build/blockscale}  # the binary (BLOCKSCALE overrides)
cfg=(--d-model 1024 --d-ff 1024 --layers 4 --heads 16 --experts 8 --top-k 2 --seq-len 1024 --vocab 256
     --eval-batches 8 --log-every 1000 --synthetic-tokens 20000000 --device gpu --steps "$steps"
     --eval-every "$((steps / 2))" --checkpoint-every 10 "$@")
dir=runs/dp_resume
rm -rf "$dir" && mkdir -p "$dir"
# step LOG TITLE COMMAND...: prints TITLE, runs COMMAND into $dir/LOG.log, stops the check if it fails.
step() {
  local log=$1 title=$2
  shift 2
  echo "$title"
  if ! "$@" >"$dir/$log.log" 2>&1; then echo "failed (see $dir/$log.log)"; exit 1; fi
}
step whole "$n GPUs, $steps steps" ./tools/train_ranks.sh "$n" "${cfg[@]}" --batch $b --out "$dir/whole"
step stop "$n GPUs, stopped after $((steps / 2))" \
  ./tools/train_ranks.sh "$n" "${cfg[@]}" --batch $b --out "$dir/stopped" --stop-after $((steps / 2))
cp -r "$dir/stopped" "$dir/on_one"
step resume_n "resumed on $n GPUs" \
  ./tools/train_ranks.sh "$n" "${cfg[@]}" --batch $b --out "$dir/stopped" --resume "$dir/stopped"
step resume_1 "resumed on 1 GPU" "$bs" train "${cfg[@]}" --batch $((n * b)) --out "$dir/on_one" --resume "$dir/on_one"
python3 - "$dir" "$n" <<'PY'
import csv, sys
d, n = sys.argv[1], sys.argv[2]
rows = lambda r: [l.split(",")[:6] for l in open(f"{d}/{r}/train.csv").read().split("\n")[1:] if l]
ev = lambda r: {int(x["step"]): float(x["eval_loss"]) for x in csv.DictReader(open(f"{d}/{r}/eval.csv"))}
w, s = rows("whole"), rows("stopped")
same = len(w) == len(s) and all(a == b for a, b in zip(w, s)) and ev("whole") == ev("stopped")
print("resumed on %s GPUs: %s (%d steps)" % (n, "identical losses, gradient norms and eval losses" if same else "DIFFERS", len(s)))
a, b = ev("whole"), ev("on_one")
for k in sorted(a):
    if k in b: print("eval loss at step %d: %s GPUs %.6f, resumed on 1 GPU %.6f (%+.3f%%)" % (k, n, a[k], b[k], 100 * (b[k] / a[k] - 1)))
sys.exit(0 if same else 1)
PY
