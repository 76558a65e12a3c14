"""The machinery of the `blockscale` CLI's reader fuzz tests (fuzz_readers_*_test.py): files as
data, byte-level mutations, the .npy / .safetensors seed files, running one mutated input under a
timeout, judging its outcome, and the command-line driver each test's main() calls.

A run must end with exit 0 (the mutation left a valid file), or 1 / 2 with one stderr line
"blockscale <command>: ..."; never a signal, a hang, a stray stderr line, or a file left behind (a
temporary, a partial output, a lock). A run that breaks the rule fails the test; --keep saves its
input and command line.

Each input is drawn from its own random stream (--seed, reader, index), so a given input is the
same whatever --jobs and --count are, and whichever test file runs its reader: a failure found at
--count 10000 reproduces alone.
"""
import argparse
import concurrent.futures
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

import ml_dtypes
import numpy as np
from safetensors.numpy import save_file

# (reader, mutation class) pairs a known CLI bug turns into a failure; their inputs are skipped
# (and counted as skipped) until the bug is gone. Each names the bug it stands for; delete the
# entry with the bug and the class runs again.
KNOWN_ISSUES = {}

# ---- files as data ------------------------------------------------------------------------------
# An input is a dict: relative path -> bytes (a file), DIR (an empty directory) or ("->", target)
# (a symbolic link). Single-file readers get {"in.npy": ...} or {"in.safetensors": ...};
# checkpoints get a whole run directory under "run/".
DIR = "dir"


def write_tree(root, files):
    for rel, v in sorted(files.items()):
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        if v == DIR:
            os.makedirs(p, exist_ok=True)
        elif isinstance(v, tuple):
            os.symlink(v[1], p)
        else:
            with open(p, "wb") as f:
                f.write(v)


def read_tree(root):
    files = {}
    for d, dirs, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            files[os.path.relpath(p, root)] = ("->", os.readlink(p)) if os.path.islink(p) else open(p, "rb").read()
        for n in dirs:
            if not os.listdir(os.path.join(d, n)):
                files[os.path.relpath(os.path.join(d, n), root)] = DIR
    return files


def listing(root):
    out = set()
    for d, dirs, names in os.walk(root):
        out.update(os.path.relpath(os.path.join(d, n), root) for n in dirs + names)
    return out


# ---- byte-level mutations (any file) ------------------------------------------------------------
M64 = (1 << 64) - 1
INTERESTING = (0x00, 0xFF, 0x7F, 0x80)
INTERESTING_WORDS = (0, 1, 0x7F, 0x80, 0xFF, 0x7FFF, 0x8000, 0xFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF,
                     0x7FFFFFFFFFFFFFFF, 0x8000000000000000, M64)


def header_end(b):
    """Where the parsed header of a .npy / .safetensors file ends: half the byte edits land before."""
    if b[:6] == b"\x93NUMPY" and len(b) >= 10:
        return min(len(b), 10 + int.from_bytes(b[8:10], "little") if b[6] == 1 else 12 + int.from_bytes(b[8:12], "little"))
    if len(b) >= 8:
        return min(len(b), 8 + int.from_bytes(b[:8], "little"))
    return len(b)


def _pos(rng, b):
    hot = header_end(b)
    return rng.randrange(hot) if hot and rng.random() < 0.5 else rng.randrange(len(b))


def bitflip(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 8) if b else 0):
        b[_pos(rng, b)] ^= 1 << rng.randrange(8)
    return bytes(b)


def interesting_bytes(rng, b):
    b = bytearray(b)
    for _ in range(rng.randint(1, 4) if b else 0):
        i = _pos(rng, b)
        if rng.random() < 0.7:
            b[i] = rng.choice(INTERESTING)
        else:
            w = rng.choice((2, 4, 8))
            b[i:i + w] = (rng.choice(INTERESTING_WORDS) & ((1 << 8 * w) - 1)).to_bytes(w, "little")
    return bytes(b)


def truncate(rng, b):
    return b[:_pos(rng, b)] if b else b


def extend_junk(rng, b):
    n = rng.choice((1, 7, 8, 64, 4096))
    junk = bytes(rng.randrange(256) for _ in range(n)) if rng.random() < 0.5 else bytes([rng.choice(INTERESTING)]) * n
    return b + junk


BYTE_MUTATIONS = {"bitflip": bitflip, "interesting_bytes": interesting_bytes, "truncate": truncate,
                  "extend_junk": extend_junk}

# ---- .npy and .safetensors seeds ----------------------------------------------------------------


def make_plain_seeds(d):
    """[(seed name, kind, files)]: valid .npy and .safetensors files (written to d too, where the
    quantized seeds are made from them) that quantize and study accept."""
    rng = np.random.default_rng(2026)
    arrays = {"f32_4x64.npy": rng.standard_normal((4, 64)).astype(np.float32),
              "f16_2x3x32.npy": rng.standard_normal((2, 3, 32)).astype(np.float16),
              "f64_64.npy": rng.standard_normal(64),
              "f32_5x7.npy": rng.standard_normal((5, 7)).astype(np.float32) * 1e3}
    files = []
    for name, a in arrays.items():
        np.save(os.path.join(d, name), a)
        files.append((name, "npy"))
    tensors = {"mixed.safetensors": ({"w": rng.standard_normal((8, 64)).astype(np.float32),
                                      "b": rng.standard_normal((64,)).astype(np.float16),
                                      "e": rng.standard_normal((4, 32)).astype(ml_dtypes.bfloat16),
                                      "ids": np.arange(12, dtype=np.int32).reshape(3, 4)},
                                     {"format": "pt", "note": "seed"}),
               "rank3.safetensors": ({"a": rng.standard_normal((2, 4, 32)).astype(np.float64),
                                      "g": (rng.standard_normal((16, 48)) * 1e-6).astype(np.float32)}, None),
               "wide.safetensors": ({"w": rng.standard_normal((32, 256)).astype(np.float32)}, None)}
    for name, (t, meta) in tensors.items():
        save_file(t, os.path.join(d, name), metadata=meta)
        files.append((name, "safetensors"))
    read = lambda name: open(os.path.join(d, name), "rb").read()
    return [(name, kind, {"in." + kind: read(name)}) for name, kind in files]


# ---- running one input --------------------------------------------------------------------------
# stderr lines a run may print besides its one error line: warnings about a tensor it skips or
# notes on one it read, and train's progress.
NOISE = {"quantize": [r"blockscale quantize: skipping '.*'(\.\.\.)?: "],
         "study": [r"blockscale study: skipping "],
         "dequantize": [r"blockscale dequantize: '.*' was quantized after a Hadamard transform"],
         "train": [r"resumed from \S+ at step -?\d+( \(saved as [^()]*\))?$", r"train: ", r"step \d+/\d+ \| ", r"eval step \d+: loss ",
                   r"$"]}


def classify(cmd, rc, err):
    """ok | error (clean) | crash | bad message, with the reason for the last two."""
    if rc < 0 or rc >= 128:
        return "crash", f"exit {rc}"
    lines = err.rstrip("\n").split("\n") if err else []  # lines as a terminal shows them
    noise = [re.compile(r) for r in NOISE[cmd]]
    rest = [l for l in lines if not any(r.match(l) for r in noise)]
    if rc == 0:
        return ("ok", "") if not rest else ("bad message", f"stray stderr on success: {rest[:3]}")
    if rc == 2 and len(rest) == 2 and rest[1] == f"Run 'blockscale {cmd} --help' for usage.":
        rest = rest[:1]
    if rc not in (1, 2):
        return "bad message", f"exit {rc}"
    if len(rest) != 1 or not rest[0].startswith(f"blockscale {cmd}: ") or lines[-1] != rest[0]:
        return "bad message", f"the error is not one final 'blockscale {cmd}: ' line: {lines[-4:]}"
    return "error", ""


def leftovers(case_dir, before, rc, expected_on_success):
    """Names a run must not leave: temporaries and locks always, anything new after a failure
    (a partial output), anything but the expected output after a success."""
    after = listing(case_dir)
    bad = sorted(n for n in after if ".tmp" in os.path.basename(n) or os.path.basename(n) == ".lock")
    new = after - before
    if rc != 0:
        bad += sorted(new)
    elif expected_on_success is not None:
        bad += sorted(new - expected_on_success)
        if not expected_on_success <= after:
            bad.append(f"missing output {sorted(expected_on_success - after)}")
    return sorted(set(bad))


def run_case(cli, base, reader, seeds, mutations, command, master_seed, index, timeout, skip_known):
    """One mutated input of `reader`: a seed of `seeds`, mutated by a class of mutations[its kind]
    (both drawn from the input's own stream), run as command(reader, files) says."""
    rng = random.Random(f"{master_seed}/{reader}/{index}")
    seed_name, kind, files = rng.choice(seeds)
    mutation = rng.choice(sorted(mutations[kind]))
    result = {"reader": reader, "index": index, "seed": seed_name, "mutation": mutation}
    if skip_known and (reader, mutation) in KNOWN_ISSUES:
        return dict(result, outcome="skipped")
    files = dict(files)
    if kind == "checkpoint":
        files = mutations[kind][mutation](rng, files)
    else:
        (name, data), = files.items()
        files = {name: mutations[kind][mutation](rng, data)}
    args, expected = command(reader, files)
    case_dir = os.path.join(base, f"{reader}-{index}")
    os.makedirs(case_dir)
    write_tree(case_dir, files)
    before = listing(case_dir)
    try:
        p = subprocess.run([cli] + args, cwd=case_dir, capture_output=True, timeout=timeout)
        rc, err = p.returncode, p.stderr.decode("utf-8", "replace")
        outcome, why = classify(args[0], rc, err)
        if outcome in ("ok", "error"):
            left = leftovers(case_dir, before, rc, expected)
            if left:
                outcome, why = "leftover", f"left {left[:5]}"
    except subprocess.TimeoutExpired:
        rc, err, outcome, why = None, "", "hang", f"no exit after {timeout} s"
    shutil.rmtree(case_dir, ignore_errors=True)
    return dict(result, outcome=outcome, why=why, rc=rc, stderr=err[-2000:], args=args, files=files)


# ---- driver -------------------------------------------------------------------------------------
FAILING = ("crash", "hang", "bad message", "leftover")


def keep(keep_dir, r):
    d = os.path.join(keep_dir, f"{r['reader']}-{r['index']}-{r['mutation']}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    write_tree(d, r["files"])
    with open(os.path.join(d, "command.txt"), "w") as f:
        f.write(f"cd {d} && blockscale {' '.join(r['args'])}\n# {r['outcome']}: {r['why']}\n# stderr:\n{r['stderr']}")
    return d


def report(results, elapsed, readers):
    cols = ("ok", "error", "crash", "hang", "bad message", "leftover", "skipped")
    print(f"{'reader':<11} {'inputs':>7} {'ok':>6} {'clean err':>9} {'crashes':>7} {'hangs':>5} {'bad msg':>7} "
          f"{'leftover':>8} {'skipped':>7}")
    for reader in readers:
        rs = [r for r in results if r["reader"] == reader]
        if rs:
            n = [sum(r["outcome"] == c for r in rs) for c in cols]
            print(f"{reader:<11} {len(rs):>7} {n[0]:>6} {n[1]:>9} {n[2]:>7} {n[3]:>5} {n[4]:>7} {n[5]:>8} {n[6]:>7}")
    print(f"{len(results)} inputs in {elapsed:.0f} s")
    print("\nper mutation class (ok / clean error / failing):")
    classes = sorted({(r["reader"], r["mutation"]) for r in results})
    for reader, m in classes:
        rs = [r for r in results if r["reader"] == reader and r["mutation"] == m]
        print(f"  {reader:<11} {m:<20} {sum(r['outcome'] == 'ok' for r in rs):>5} "
              f"{sum(r['outcome'] == 'error' for r in rs):>5} {sum(r['outcome'] in FAILING for r in rs):>5}")


def main(doc, readers, make_seeds, mutations, command):
    """The command line of a test file fuzzing `readers`: make_seeds(cli, dir) gives each reader's
    seeds, mutations each seed kind's classes, command(reader, files) the run (see run_case)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--count", type=int, default=300, help="mutated inputs per reader")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20, help="seconds a run may take before it counts as a hang")
    ap.add_argument("--readers", default=",".join(readers), help=f"a subset of {','.join(readers)}")
    ap.add_argument("--only", type=int, help="run this input index only (reproduce one input)")
    ap.add_argument("--run-known-issues", action="store_true",
                    help="also run the inputs of KNOWN_ISSUES' classes (to see whether a bug is gone)")
    ap.add_argument("--report", action="store_true", help="print the table of outcomes per reader")
    ap.add_argument("--keep", help="save each failing input and its command line under this directory")
    ap.add_argument("--memory-limit-mb", type=int, default=4096,
                    help="address-space limit of every run: a reader that trusts a size in the file fails "
                         "its allocation instead of taking the machine's memory")
    args = ap.parse_args()
    cli = os.path.abspath(args.cli)
    if not set(args.readers.split(",")) <= set(readers):
        ap.error(f"--readers: this test runs {','.join(readers)}")
    all_readers, readers = readers, args.readers.split(",")
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="blockscale_fuzz_") as base:
        seed_dir = os.path.join(base, "seeds")
        os.makedirs(seed_dir)
        seeds = make_seeds(cli, seed_dir)
        # Inherited by every run (set after the seeds, which need no limit).
        limit = args.memory_limit_mb << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        indices = [args.only] if args.only is not None else range(args.count)
        work = [(reader, i) for i in indices for reader in readers]
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(lambda w: run_case(cli, base, w[0], seeds[w[0]], mutations, command, args.seed,
                                                       w[1], args.timeout, not args.run_known_issues),
                                    work))
    elapsed = time.time() - start
    if args.report:
        report(results, elapsed, all_readers)
    failing = [r for r in results if r["outcome"] in FAILING]
    for r in failing[:10]:
        where = f"\n    saved: {keep(args.keep, r)}" if args.keep else ""
        print(f"FAIL {r['reader']} #{r['index']} ({r['seed']}, {r['mutation']}): {r['outcome']}: {r['why']}\n"
              f"    blockscale {' '.join(r['args'])}\n    stderr: {r['stderr'].strip()[-500:]}{where}")
    if args.keep:
        for r in failing[10:]:
            keep(args.keep, r)
    if failing:
        print(f"{len(failing)} of {len(results)} inputs broke the rules (reproduce one: --seed {args.seed} "
              f"--readers READER --only INDEX)")
        sys.exit(1)
    print(f"all {len(results)} mutated inputs ended in exit 0 or one clean error line ({elapsed:.0f} s)")
