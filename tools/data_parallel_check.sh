#!/usr/bin/env bash
# Data-parallel check on N GPUs of one host: the same global batch on 1 and on N GPUs must give
# the same loss curve (to noise), and N GPUs must run N times the tokens/s of one GPU with the
# same per-GPU batch (scaling efficiency); it prints both, the communication the backward did not
# hide and the optimizer state each GPU holds.
#   usage: tools/data_parallel_check.sh N [--recipe R] [other blockscale train options]
# Runs, under runs/dp_check: one_gpu_global (1 GPU, batch N x B), n_gpu (N GPUs, batch B each),
# one_gpu_accum (1 GPU accumulating the N ranks' micro-batches of B: the same samples, the same
# per-micro-batch routing and load-balancing loss as the N ranks, summed in another order),
# one_gpu_seed2 (one_gpu_global with another seed: the run-to-run noise that the N-GPU curve is
# measured against), one_gpu_local (1 GPU, batch B: the throughput reference). Default model:
# d_model 1024, 4 layers, 8 experts top-2, seq 1024, B = 4, 300 steps; an option given replaces its
# default (e.g. --d-model 2048 --d-ff 1408). Don't pass --seed.
# With --expert-parallel or --shard-optimizer, the 1-GPU runs leave it out (one process, no ranks).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
n=${1:?usage: tools/data_parallel_check.sh N [train options]}
shift
b=4
bs=${BLOCKSCALE:-./build/blockscale}  # the binary (BLOCKSCALE overrides)
# The defaults the caller's options leave (--d-model 2048 replaces --d-model 1024).
unless_given() {
  local d=("$@") i
  for ((i = 0; i < ${#d[@]}; i += 2)); do
    [[ " ${user[*]} " == *" ${d[i]} "* || " ${user[*]} " == *" ${d[i]}="* ]] || kept+=("${d[i]}" "${d[i + 1]}")
  done
}
user=("$@")
kept=() && unless_given --d-model 1024 --d-ff 1024 --layers 4 --heads 16 --experts 8 --top-k 2 --seq-len 1024 \
  --vocab 256 --eval-batches 8 --log-every 50 --synthetic-tokens 20000000 --device gpu && model=("${kept[@]}")
kept=() && unless_given --steps 300 --eval-every 50 && long=("${kept[@]}")
kept=() && unless_given --steps 60 --eval-every 0 && short=("${kept[@]}")  # the 1-GPU throughput reference
dir=runs/dp_check
single=()  # the options for one GPU: --expert-parallel and --shard-optimizer need ranks from a launcher
for a in "$@"; do [[ $a == --expert-parallel || $a == --shard-optimizer ]] || single+=("$a"); done
rm -rf "$dir"
"$bs" train "${model[@]}" "${long[@]}" --batch $((n * b)) --out $dir/one_gpu_global "${single[@]}" | tail -1
"$bs" train "${model[@]}" "${long[@]}" --batch $((n * b)) --seed 2 --out $dir/one_gpu_seed2 "${single[@]}" | tail -1
"$bs" train "${model[@]}" "${long[@]}" --batch $b --grad-accum "$n" --out $dir/one_gpu_accum "${single[@]}" | tail -1
./tools/train_ranks.sh "$n" "${model[@]}" "${long[@]}" --batch $b --out $dir/n_gpu "$@" | tail -1
"$bs" train "${model[@]}" "${short[@]}" --batch $b --out $dir/one_gpu_local "${single[@]}" | tail -1
python3 - "$dir" "$n" <<'PY'
import csv, json, sys
d, n = sys.argv[1], int(sys.argv[2])
ev = lambda r: {int(x["step"]): float(x["eval_loss"]) for x in csv.DictReader(open(f"{d}/{r}/eval.csv"))}
tps = lambda r: float(json.load(open(f"{d}/{r}/summary.json"))["config"]["mean_tokens_per_s"])
a, b, c, m = ev("one_gpu_global"), ev("n_gpu"), ev("one_gpu_seed2"), ev("one_gpu_accum")
rel = lambda x, s: "%+7.2f%%" % (100 * (x[s] / a[s] - 1))
print("eval loss; the other columns relative to 1 GPU: %d GPUs, 1 GPU accumulating %d micro-batches, 1 GPU seed 2 (noise)" % (n, n))
print(" step   1 GPU  %d GPUs    accum  seed 2" % n)
for s in sorted(a):
    if s in b and s in c and s in m:
        print("%5d  %.4f %s %s %s" % (s, a[s], rel(b, s), rel(m, s), rel(c, s)))
train = lambda r: [float(l.split(",")[3]) for l in open(f"{d}/{r}/train.csv").read().split("\n")[1:] if l]
tb, tm = train("n_gpu"), train("one_gpu_accum")
i = next((i for i, (x, y) in enumerate(zip(tb, tm)) if x != y), None)
if i is None: print("train loss of %d GPUs and of 1 GPU accumulating: identical at every step" % n)
else: print("train loss of %d GPUs and of 1 GPU accumulating: identical up to step %d; step %d differs by %.1e (relative)"
            % (n, i, i + 1, abs(tb[i] / tm[i] - 1)))
t1, tn = tps("one_gpu_local"), tps("n_gpu")
print("tokens/s: 1 GPU %.0f, %d GPUs %.0f: scaling efficiency %.1f%%" % (t1, n, tn, 100 * tn / (n * t1)))
cfg = json.load(open(f"{d}/n_gpu/summary.json"))["config"]
phases = cfg.get("phase_ms_per_step", {})
if phases:
    print("exposed communication per step (%d GPUs): %.2f ms of %.2f ms" % (n, phases.get("communication", 0.0),
                                                                           cfg["phase_timed_step_ms"]))
if "collectives" in cfg: print("gradient sums through %s" % cfg["collectives"])
print("optimizer state per GPU: %.1f MiB (AdamW's moments, fp32, %d parameters)"
      % (cfg["optimizer_state_bytes_per_rank"] / 2**20, cfg["parameters"]))
PY
