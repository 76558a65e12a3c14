#!/usr/bin/env python3
"""Mutation fuzzing of the `blockscale` CLI's checkpoint reader (train/run/checkpoint.h), through
train --resume.

A tiny CPU training run (2 steps, a checkpoint each), then mutated: tensors.safetensors edited
(also re-signed with XXH64 so the safetensors reader is reached), state.json's values and bytes,
deleted files, `latest` pointing elsewhere, files made directories or links. The rule every run
must keep, and the driver: fuzz_readers_common.py.

Usage: fuzz_readers_checkpoint_test.py --cli build/blockscale [--count N] [--seed S] [--jobs J]
                                       [--readers R,...] [--only INDEX] [--report] [--keep DIR]
"""
import json
import os
import subprocess
import sys

import numpy as np

import fuzz_readers_common as common
from fuzz_readers_common import BYTE_MUTATIONS, DIR, M64, read_tree
from fuzz_readers_safetensors import ST_MUTATIONS

READERS = ("checkpoint",)

# ---- XXH64 (seed 0), for checkpoints whose tensors file is mutated and re-signed ----------------
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                      0x27D4EB2F165667C5)


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def _round(acc, lane):
    return (_rotl((acc + lane * P2) & M64, 31) * P1) & M64


def xxh64(data):
    n, i = len(data), 0
    if n >= 32:
        v = [(P1 + P2) & M64, P2, 0, (-P1) & M64]
        lanes = np.frombuffer(data[:n - n % 32], dtype="<u8").reshape(-1, 4).tolist()
        for a, b, c, d in lanes:
            v = [_round(v[0], a), _round(v[1], b), _round(v[2], c), _round(v[3], d)]
        i = len(lanes) * 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & M64
        for x in v:
            h = ((h ^ _round(0, x)) * P1 + P4) & M64
    else:
        h = P5
    h = (h + n) & M64
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, int.from_bytes(data[i:i + 8], "little")), 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * P1) & M64), 23) * P2 + P3) & M64
        i += 4
    for byte in data[i:]:
        h = (_rotl(h ^ ((byte * P5) & M64), 11) * P1) & M64
    h = ((h ^ (h >> 33)) * P2) & M64
    h = ((h ^ (h >> 29)) * P3) & M64
    return h ^ (h >> 32)


# ---- checkpoints (train/run/checkpoint.h) -------------------------------------------------------
LATEST = "run/latest"


def _latest_step(files):
    name = files.get(LATEST, b"step_00000002\n")
    name = name.decode("latin-1").strip() if isinstance(name, bytes) else "step_00000002"
    return "run/" + name


def _resign(files, step):
    """state.json's size and checksum made to match the (mutated) tensors file, so the load gets
    past them to the safetensors reader and the slot checks."""
    state = json.loads(files[step + "/state.json"])
    t = files[step + "/tensors.safetensors"]
    state["tensors_bytes"], state["tensors_xxh64"] = len(t), f"{xxh64(t):016x}"
    files[step + "/state.json"] = json.dumps(state, indent=2).encode()


def ck_tensors_bytes(rng, files):
    step = _latest_step(files)
    p = step + "/tensors.safetensors"
    name = rng.choice(list(BYTE_MUTATIONS))
    files[p] = BYTE_MUTATIONS[name](rng, files[p])
    return files


def ck_tensors_resigned(rng, files):
    step = _latest_step(files)
    p = step + "/tensors.safetensors"
    pool = dict(BYTE_MUTATIONS, **ST_MUTATIONS)
    files[p] = pool[rng.choice(sorted(pool))](rng, files[p])
    _resign(files, step)
    return files


STATE_VALUES = [-1, 0, 1, 3, 8, 1 << 31, 1 << 62, (1 << 63) - 1, 1 << 63, 1 << 64, -(1 << 63), 1.5, 1e308, "2",
                "", None, True, [], {}, "step_00000002", "0123456789abcdef", "014F9897CB896E1B", "xyz"]


def _leaves(obj, path=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaves(v, path + (k,))
    if path:
        yield path


# The step and token count the trainer keeps in state.json's "state" (beside the loader's own
# "step"): ck_state_value gives them numbers only, ck_state_counter_type anything else.
TRAINER_COUNTERS = (("state", "step"), ("state", "tokens"))


def _set_state(files, path, value):
    p = _latest_step(files) + "/state.json"
    state = json.loads(files[p])
    parent = state
    for k in path[:-1]:
        parent = parent[k]
    if value is _set_state:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    files[p] = json.dumps(state, indent=2).encode()
    return files


def ck_state_value(rng, files):
    state = json.loads(files[_latest_step(files) + "/state.json"])
    path = rng.choice(list(_leaves(state)))
    values = STATE_VALUES
    if path in TRAINER_COUNTERS:
        values = [v for v in STATE_VALUES if isinstance(v, (int, float)) and not isinstance(v, bool)]
    return _set_state(files, path, _set_state if rng.random() < 0.25 else rng.choice(values))


def ck_state_counter_type(rng, files):
    return _set_state(files, rng.choice(TRAINER_COUNTERS), rng.choice(["2", "", None, True, [], {}, [2]]))


def ck_state_bytes(rng, files):
    p = _latest_step(files) + "/state.json"
    pool = dict(BYTE_MUTATIONS, text=lambda r, b: b.replace(b"{", r.choice([b"[", b"{{", b'{"step":1,', b""]), 1))
    files[p] = pool[rng.choice(sorted(pool))](rng, files[p])
    return files


def ck_delete(rng, files):
    step = _latest_step(files)
    victim = rng.choice([LATEST, step + "/state.json", step + "/tensors.safetensors", step, "run/train.csv",
                         "run/eval.csv", "run/summary.json", "run/step_00000001"])
    for k in [k for k in files if k == victim or k.startswith(victim + "/")]:
        del files[k]
    if victim == step and rng.random() < 0.5:
        files[step] = DIR  # emptied rather than removed
    return files


def ck_latest(rng, files):
    files[LATEST] = rng.choice([
        b"step_00000001\n", b"step_00000009\n", b"", b"\n", b"step_00000002", b"../run\n", b"/\n", b"/etc\n", b".\n",
        b"..\n", b"latest\n", b"step_00000002\n\n", b"step_00000002\x00\n", b"a" * 5000, b"s" * 70000 + b"\n",
        b"step_00000002/state.json\n", b" step_00000002\n", b"step_00000002 \n", b"step_0000002\n",
        b"step_-0000001\n", b"step_99999999999999999999\n", b"\xff\xfe\n", b"step_00000002\r\n", b"run\n",
        b"step_00000002/../step_00000001\n"])
    if rng.random() < 0.1:
        files[LATEST] = rng.choice([DIR, ("->", "step_00000002"), ("->", "nowhere"), ("->", "latest")])
    return files


def ck_replace_kind(rng, files):
    """A file where a directory belongs, or a directory where a file belongs."""
    step = _latest_step(files)
    victim = rng.choice([step + "/state.json", step + "/tensors.safetensors"])
    if victim in files:
        files[victim] = rng.choice([DIR, ("->", "../step_00000001/" + victim.split("/")[-1]),
                                    ("->", victim.split("/")[-1])])
    else:
        files[step] = b"not a directory"
        files = {k: v for k, v in files.items() if not k.startswith(step + "/")}
    return files


def _endless(name):
    def mutate(rng, files):
        """The file replaced by a link to a device that never ends: reading it to the end hangs."""
        files[_latest_step(files) + "/" + name] = ("->", "/dev/zero")
        return files
    return mutate


def ck_other_step(rng, files):
    """Consistent edits: the step number changed, or the other checkpoint's tensors swapped in."""
    step = _latest_step(files)
    if step + "/state.json" not in files or "run/step_00000001/tensors.safetensors" not in files:
        return files
    if rng.random() < 0.5:
        state = json.loads(files[step + "/state.json"])
        state["step"] = state["state"]["step"] = rng.choice([0, 1, 2, 3, 5, 100, -5])
        files[step + "/state.json"] = json.dumps(state, indent=2).encode()
    else:
        files[step + "/tensors.safetensors"] = files["run/step_00000001/tensors.safetensors"]
        if rng.random() < 0.5:
            _resign(files, step)
    return files


CK_MUTATIONS = {"ck_tensors_bytes": ck_tensors_bytes, "ck_tensors_resigned": ck_tensors_resigned,
                "ck_state_value": ck_state_value, "ck_state_counter_type": ck_state_counter_type,
                "ck_state_bytes": ck_state_bytes, "ck_delete": ck_delete,
                "ck_latest": ck_latest, "ck_replace_kind": ck_replace_kind, "ck_other_step": ck_other_step,
                "ck_endless_tensors": _endless("tensors.safetensors"), "ck_endless_state": _endless("state.json")}

# ---- seeds and runs -----------------------------------------------------------------------------
MUTATIONS = {"checkpoint": CK_MUTATIONS}
TINY = ["--device", "cpu", "--d-model", "32", "--d-ff", "32", "--layers", "1", "--heads", "2", "--experts", "2",
        "--top-k", "1", "--seq-len", "16", "--batch", "2", "--vocab", "64", "--synthetic-tokens", "4096",
        "--eval-batches", "1", "--schedule-steps", "8", "--checkpoint-every", "1", "--eval-every", "0"]


def command(reader, files):
    """(argv after the binary, the files a success adds: None, a resumed run writes many)."""
    return ["train"] + TINY + ["--steps", "3", "--resume", "run", "--out", "run"], None


def make_seeds(cli, d):
    """reader -> [(seed name, kind, files)]; every seed is a valid input its command accepts."""
    p = subprocess.run([cli, "train"] + TINY + ["--steps", "2", "--out", "run"], cwd=d, capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"making the checkpoint seed: {p.stderr.strip()}")
    run = {"run/" + k: v for k, v in read_tree(os.path.join(d, "run")).items()}
    state = json.loads(run["run/step_00000002/state.json"])
    if state["tensors_xxh64"] != f"{xxh64(run['run/step_00000002/tensors.safetensors']):016x}":
        sys.exit("this script's XXH64 disagrees with the checkpoint's checksum")
    return {"checkpoint": [("run", "checkpoint", run)]}


if __name__ == "__main__":
    common.main(__doc__, READERS, make_seeds, MUTATIONS, command)
