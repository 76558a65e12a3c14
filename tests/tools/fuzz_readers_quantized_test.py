#!/usr/bin/env python3
"""Mutation fuzzing of the `blockscale` CLI's quantized-file reader (formats/io/quantized_file.h),
through dequantize.

Files of `blockscale quantize --direction both` (mxfp8, nvfp4, fp8_block128, fp8_block128x128,
mxfp4, nvfp4 --2d, mxfp8 floor; of two seed .safetensors files), then mutated: byte edits, every
.safetensors mutation, and edits of the quantized schema (metadata values such as a 0x0 block,
deleted keys, dropped tensors, edge scale values). The rule every run must keep, and the driver:
fuzz_readers_common.py.

Usage: fuzz_readers_quantized_test.py --cli build/blockscale [--count N] [--seed S] [--jobs J]
                                      [--readers R,...] [--only INDEX] [--report] [--keep DIR]
"""
import os
import subprocess
import sys

import numpy as np

import fuzz_readers_common as common
from fuzz_readers_common import BYTE_MUTATIONS
from fuzz_readers_safetensors import DTYPE_SIZE, ST_MUTATIONS, st_build, st_join, st_split, st_tensors

READERS = ("dequantize",)

# ---- quantized .safetensors (the schema of formats/io/quantized_file.h) -------------------------
META_VALUES = {
    ".recipe": ["mxfp8", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4", "fp8_block128",
                "fp8_block128x128", "mxfp9", "", "MXFP8", "nvfp4 ", "bf16", "fp8_block"],
    ".block": ["0x0", "1x0", "0x32", "1x32", "32x1", "16x16", "1x16", "128x128", "1x128", "-1x32", "1x-32", "x",
               "1x", "x32", "1x32x1", "99999999999999999999x1", "4294967296x1", "9223372036854775807x1",
               "1 x 32", "+1x32", "01x032", "1x33", "1X32", "", "1x32\n"],
    ".shape": ["[]", "[0]", "[-1]", "[1e3]", "[", "]", "[1,]", "[,1]", "[4,64]", "[64,4]", "[8,64]", "[64]", "[1,512]",
               "[9223372036854775807]", "[9223372036854775808]", "[4294967296,4294967296]", "null", "{}", '["4"]',
               "[[4]]", "[4 64]", "[ 8 , 64 ]", "[8,64,1]", "[1,8,64]", "[2,4,64]", "[8.0,64]", "[0x8,64]", "",
               "[" + ",".join(["1"] * 65) + "]", "[" * 10000],
    ".direction": ["rowwise", "columnwise", "both", "", "ROWWISE", "row"],
    ".rounding": ["ceil", "floor", "rn", "", "up", "CEIL"],
    ".transform": ["none", "rht16", "rht32", "", "None"],
}


def q_meta_value(rng, b):
    header, data = st_split(b)
    meta = header.get("__metadata__", {})
    keys = [k for k in meta if any(k.endswith(s) for s in META_VALUES)]
    if keys:
        k = rng.choice(keys)
        meta[k] = rng.choice(META_VALUES[next(s for s in META_VALUES if k.endswith(s))])
    return st_join(header, data)


def q_meta_delete(rng, b):
    header, data = st_split(b)
    meta = header.get("__metadata__", {})
    if meta:
        del meta[rng.choice(list(meta))]
    return st_join(header, data)


def q_drop_tensor(rng, b):
    meta, ts = st_tensors(b)
    if ts:
        ts.remove(rng.choice(ts))
    return st_build(meta, ts)


def q_values(rng, b):
    """Edge values written into a scale, global scale or data tensor: the reader checks scales."""
    meta, ts = st_tensors(b)
    t = rng.choice(ts)
    raw = bytearray(t[3])
    if raw:
        size = DTYPE_SIZE.get(t[1], 1)
        f32 = [0.0, -0.0, -1.0, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4e38, 2.0 ** -127, 1.0]
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(raw) // size) * size
            if t[1] == "F32":
                raw[i:i + 4] = np.float32(rng.choice(f32)).tobytes()
            else:
                raw[i] = rng.choice([0x00, 0x01, 0x7E, 0x7F, 0x80, 0xFE, 0xFF])
    t[3] = bytes(raw)
    return st_build(meta, ts)


Q_MUTATIONS = {"q_meta_value": q_meta_value, "q_meta_delete": q_meta_delete, "q_drop_tensor": q_drop_tensor,
               "q_values": q_values}

# ---- seeds and runs -----------------------------------------------------------------------------
MUTATIONS = {"quantized": dict(BYTE_MUTATIONS, **ST_MUTATIONS, **Q_MUTATIONS)}
QUANTIZED_SEEDS = [["--recipe", "mxfp8"], ["--recipe", "nvfp4"], ["--recipe", "fp8_block128"],
                   ["--recipe", "fp8_block128x128"], ["--recipe", "mxfp4"], ["--recipe", "nvfp4", "--2d"],
                   ["--recipe", "mxfp8", "--rounding", "floor"]]


def command(reader, files):
    """(argv after the binary, the files a success adds)."""
    return ["dequantize", "--in", "in.safetensors", "--out", "out.safetensors", "--quiet"], {"out.safetensors"}


def make_seeds(cli, d):
    """reader -> [(seed name, kind, files)]; every seed is a valid input its command accepts."""
    common.make_plain_seeds(d)  # the .safetensors files quantized below
    read = lambda name: open(os.path.join(d, name), "rb").read()
    quantized = []
    for i, opts in enumerate(QUANTIZED_SEEDS):
        for src in ("mixed.safetensors", "wide.safetensors"):
            out = f"q{i}_{src}"
            p = subprocess.run([cli, "quantize", "--in", src, "--out", out, "--direction", "both", "--quiet"] + opts,
                               cwd=d, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                sys.exit(f"making seed {out}: {p.stderr.strip()}")
            quantized.append(("_".join(opts[1:]) + "_" + src, "quantized", {"in.safetensors": read(out)}))
    return {"dequantize": quantized}


if __name__ == "__main__":
    common.main(__doc__, READERS, make_seeds, MUTATIONS, command)
