#!/usr/bin/env bash
# Data-parallel check on N GPUs of one host: the same global batch on 1 and on N GPUs must give
# the same loss curve (to noise), and N GPUs must run N times the tokens/s of one GPU with the
# same per-GPU batch (scaling efficiency).
#   usage: tools/data_parallel_check.sh N [--recipe R] [other blockscale train options]
# Runs, under runs/dp_check: one_gpu_global (1 GPU, batch N x B), n_gpu (N GPUs, batch B each),
# one_gpu_local (1 GPU, batch B: the throughput reference). Default model: d_model 1024, 4
# layers, 8 experts top-2, seq 1024, B = 4, 300 steps.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:?usage: tools/data_parallel_check.sh N [train options]}
shift
b=4
bs=${BLOCKSCALE:-./build/blockscale}  # the binary (BLOCKSCALE overrides)
model=(--d-model 1024 --d-ff 1024 --layers 4 --heads 16 --experts 8 --top-k 2 --seq-len 1024 --vocab 256
       --eval-batches 8 --log-every 50 --synthetic-tokens 20000000 --device gpu)
long=(--steps 300 --eval-every 50)
dir=runs/dp_check
rm -rf "$dir"
"$bs" train "${model[@]}" "${long[@]}" --batch $((n * b)) --out $dir/one_gpu_global "$@" | tail -1
./tools/train_ranks.sh "$n" "${model[@]}" "${long[@]}" --batch $b --out $dir/n_gpu "$@" | tail -1
"$bs" train "${model[@]}" --batch $b --steps 60 --eval-every 0 --out $dir/one_gpu_local "$@" | tail -1
python3 - "$dir" "$n" <<'PY'
import csv, json, sys
d, n = sys.argv[1], int(sys.argv[2])
ev = lambda r: {int(x["step"]): float(x["eval_loss"]) for x in csv.DictReader(open(f"{d}/{r}/eval.csv"))}
tps = lambda r: float(json.load(open(f"{d}/{r}/summary.json"))["config"]["mean_tokens_per_s"])
a, b = ev("one_gpu_global"), ev("n_gpu")
print("step  eval(1 GPU)  eval(%d GPUs)  diff" % n)
for s in sorted(a):
    if s in b: print("%5d  %10.4f  %11.4f  %+.2f%%" % (s, a[s], b[s], 100 * (b[s] / a[s] - 1)))
t1, tn = tps("one_gpu_local"), tps("n_gpu")
print("tokens/s: 1 GPU %.0f, %d GPUs %.0f: scaling efficiency %.1f%%" % (t1, n, tn, 100 * tn / (n * t1)))
PY
