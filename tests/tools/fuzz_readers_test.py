#!/usr/bin/env python3
"""Mutation fuzzing of the `blockscale` CLI's file readers: .npy and .safetensors (quantize,
study), quantized .safetensors (dequantize) and training checkpoints (train --resume).

Valid seed files are made with numpy and with the CLI itself, then mutated: bit flips, byte
overwrites, truncation, junk, and edits of what the readers parse (safetensors' length field and
JSON header, the npy header dict, the quantized schema's metadata, a checkpoint's state.json,
files and `latest`). Every mutated input runs the CLI under a timeout. A run must end with exit 0
(the mutation left a valid file), or 1 / 2 with one stderr line "blockscale <command>: ..."; never
a signal, a hang, a stray stderr line, or a file left behind (a temporary, a partial output, a
lock). A run that breaks the rule fails the test; --keep saves its input and command line.

Each input is drawn from its own random stream (--seed, reader, index), so a given input is the
same whatever --jobs and --count are: a failure found at --count 10000 reproduces alone.

Usage: fuzz_readers_test.py --cli build/blockscale [--count N] [--seed S] [--jobs J]
                            [--report] [--keep DIR]
"""
import argparse
import concurrent.futures
import json
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


# ---- XXH64 (seed 0), for checkpoints whose tensors file is mutated and re-signed ----------------
M64 = (1 << 64) - 1
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


# ---- byte-level mutations (any file) ------------------------------------------------------------
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

# ---- .safetensors -------------------------------------------------------------------------------
DTYPE_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2,
              "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
BAD_DTYPES = ["F31", "", "f32", "FLOAT", "F8_E4M3FN", "F4", "C64", "STR", " F32", "F32\u0000", 32, None, ["F32"]]
BAD_INTS = [-1, -(1 << 63), (1 << 63) - 1, 1 << 63, 1 << 64, 1 << 40, 1 << 32, 0.5, 1e300, "4", None, True, [4]]


def st_split(b):
    n = int.from_bytes(b[:8], "little")
    return json.loads(b[8:8 + n]), b[8 + n:]


def st_join(header, data, pad=True):
    h = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return len(h).to_bytes(8, "little") + h + data


def st_tensors(b):
    """(metadata or None, [[name, dtype, shape, bytes]] in offset order)."""
    header, data = st_split(b)
    meta = header.pop("__metadata__", None)
    ts = [[k, v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]] for k, v in header.items()]
    return meta, sorted(ts, key=lambda t: header[t[0]]["data_offsets"][0])


def st_build(meta, ts):
    """A well-formed file of `ts` laid out back to back in list order."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, dtype, shape, raw in ts:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    return st_join(header, data)


def _entry(rng, header):
    names = [k for k in header if k != "__metadata__"]
    return rng.choice(names) if names else None


def st_header_len(rng, b):
    n = int.from_bytes(b[:8], "little")
    v = rng.choice([0, 1, 2, n - 1, n + 1, n + 8, len(b) - 8, len(b) - 7, len(b), 100_000_000, 100_000_001,
                    1 << 32, 1 << 63, M64, rng.randrange(1 << 64)])
    return (v & M64).to_bytes(8, "little") + b[8:]


def st_header_text(rng, b):
    """Random character edits inside the JSON text, the length field kept consistent."""
    n = int.from_bytes(b[:8], "little")
    h = bytearray(b[8:8 + n])
    for _ in range(rng.randint(1, 4)):
        i = rng.randrange(len(h))
        c = rng.choice([b"{", b"}", b"[", b"]", b'"', b":", b",", b"\\", b"-", b"0", b"9", b"e", b"\x00",
                        b"\xff", b"\xc3", b"\n", b"\\u0000", b"\\ud800", b"null", b"1e999"])
        op = rng.randrange(3)
        if op == 0:
            h[i:i + 1] = c
        elif op == 1:
            h[i:i] = c
        else:
            del h[i]
    return st_join(bytes(h), b[8 + n:], pad=False)


def st_header_type(rng, b):
    _, data = st_split(b)
    text = rng.choice([b"[]", b"null", b"0", b'"x"', b"{}", b"true", b"{" * 100000, b"[" * 100000,
                       b'{"a":' * 5000 + b"1" + b"}" * 5000, b"", b"{\"__metadata__\":{}}"])
    return st_join(text, data)


def st_dtype(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        header[k]["dtype"] = rng.choice(list(DTYPE_SIZE) + BAD_DTYPES)
    return st_join(header, data)


def st_shape(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        shape = list(header[k]["shape"])
        choice = rng.randrange(6)
        if choice == 0 and shape:
            shape[rng.randrange(len(shape))] = rng.choice(BAD_INTS + [0, 1, 2])
        elif choice == 1:
            shape = shape + [1] * rng.choice((1, 60, 64, 65, 1000))
        elif choice == 2:
            shape = rng.choice([[], [0], [1 << 32, 1 << 32], [1 << 62, 4], [3037000500, 3037000500], [-4, -16]])
        elif choice == 3:
            shape = rng.choice(["[4]", 4, None, {"a": 1}, [[4]]])
        elif choice == 4:
            shape = list(reversed(shape))
        else:
            shape = shape[:-1]
        header[k]["shape"] = shape
    return st_join(header, data)


def st_offsets(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        begin, end = header[k]["data_offsets"]
        header[k]["data_offsets"] = rng.choice([
            [end, begin], [begin, end + 1], [begin - 1, end], [begin + 1, end + 1], [0, end - begin],
            [rng.choice(BAD_INTS), end], [begin, rng.choice(BAD_INTS)], [begin], [begin, end, end], [], "0,4",
            [begin, len(data) + 1], [len(data), len(data)], None])
    return st_join(header, data)


def st_duplicate_key(rng, b):
    """A key written twice in the JSON text (json.dumps cannot write that)."""
    header, data = st_split(b)
    k = _entry(rng, header)
    if not k:
        return b
    text = json.dumps(header, separators=(",", ":"))
    where = rng.randrange(3)
    if where == 0:  # the same tensor entry twice
        dup = json.dumps(k) + ":" + json.dumps(header[k], separators=(",", ":"))
    elif where == 1:  # a key inside an entry twice
        field = rng.choice(["dtype", "shape", "data_offsets"])
        dup = None
        entry = json.dumps(header[k], separators=(",", ":"))
        text = text.replace(entry, entry[:-1] + "," + json.dumps(field) + ":" + json.dumps(header[k][field]) + "}", 1)
    else:  # a metadata key twice
        meta = header.get("__metadata__") or {"format": "pt"}
        mk = rng.choice(list(meta) or ["format"])
        dup = '"__metadata__":' + json.dumps({mk: meta.get(mk, "pt")}, separators=(",", ":"))
    if dup:
        text = text[:-1] + "," + dup + "}"
    return st_join(text.encode(), data)


def st_missing_key(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        if rng.random() < 0.3:
            del header[k]  # its bytes now a hole in the buffer
        else:
            del header[k][rng.choice(["dtype", "shape", "data_offsets"])]
    return st_join(header, data)


def st_extra_key(rng, b):
    header, data = st_split(b)
    k = _entry(rng, header)
    if k:
        header[k][rng.choice(["dtype ", "offsets", "__metadata__", ""])] = 1
    return st_join(header, data)


def st_entry_type(rng, b):
    header, data = st_split(b)
    k = rng.choice(list(header))
    header[k] = rng.choice([None, 1, "x", [], [1, 2], {}, True])
    return st_join(header, data)


def _rename(names):
    def mutate(rng, b):
        meta, ts = st_tensors(b)
        if ts:
            rng.choice(ts)[0] = rng.choice(names + [ts[0][0]])
        return st_build(meta, ts)
    return mutate


# Tensor names are the file's own strings and reach messages: odd ones, and ones with control
# characters (a newline would split a message line in two).
st_names = _rename(["", "a\u0000b", "x" * 70000, "\u00e9\u4e2d\U0001F600", "../x", "a/b", "__metadata__", "w.scale",
                    "w.data", "a\u2028b", "a b", "'", "%s%n"])
st_names_control = _rename(["\n", "a\nb", "a\rb", "\x1b[31mred\x1b[0m", "a\x7fb"])


def st_metadata(rng, b):
    header, data = st_split(b)
    meta = header.get("__metadata__") or {}
    choice = rng.randrange(5)
    if choice == 0:
        header["__metadata__"] = rng.choice([None, [], "x", 1, {"a": {"b": "c"}}])
    elif choice == 1 and meta:
        meta[rng.choice(list(meta))] = rng.choice([None, 1, [], {}, True, 1.5])
        header["__metadata__"] = meta
    elif choice == 2:
        meta[rng.choice(["", "\n", "x" * 5000, ".recipe", "w.recipe", "a\u0000b"])] = rng.choice(["", "\n", "mxfp8", "x" * 70000])
        header["__metadata__"] = meta
    elif choice == 3:
        header.pop("__metadata__", None)
    else:
        header["__metadata__"] = {str(i): str(i) for i in range(rng.choice((100, 20000)))}
    return st_join(header, data)


def st_valid_variant(rng, b):
    """A well-formed file that differs in content: a tensor retyped, reshaped, dropped (one of
    several) or reordered, its bytes resized to match (random bytes where it grows)."""
    meta, ts = st_tensors(b)
    if not ts:
        return b
    t = rng.choice(ts)
    choice = rng.randrange(4)
    if choice == 0:
        t[1] = rng.choice(list(DTYPE_SIZE))
    elif choice == 1:
        t[2] = rng.choice([[], [0], [1], [1, 1], [3, 0], [0, 5], [7], [1, 31], [33, 1], [2, 3, 5],
                           [1] * 64, [2] * 12, [16, 16], [17, 129], [300, 3]])
    elif choice == 2 and len(ts) > 1:
        ts.remove(t)
    else:
        rng.shuffle(ts)
    if choice < 2:
        n = int(np.prod(t[2], dtype=np.int64)) * DTYPE_SIZE[t[1]]
        t[3] = (t[3] + bytes(rng.randrange(256) for _ in range(max(0, n - len(t[3])))))[:n]
    return st_build(meta, ts)


def st_no_tensors(rng, b):
    """A well-formed file that holds no tensor at all (its metadata kept or not)."""
    meta, _ = st_tensors(b)
    return st_build(meta if rng.random() < 0.5 else None, [])


ST_MUTATIONS = {"st_header_len": st_header_len, "st_header_text": st_header_text, "st_header_type": st_header_type,
                "st_dtype": st_dtype, "st_shape": st_shape, "st_offsets": st_offsets,
                "st_duplicate_key": st_duplicate_key, "st_missing_key": st_missing_key, "st_extra_key": st_extra_key,
                "st_entry_type": st_entry_type, "st_names": st_names, "st_names_control": st_names_control,
                "st_metadata": st_metadata,
                "st_valid_variant": st_valid_variant, "st_no_tensors": st_no_tensors}

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

# ---- .npy ---------------------------------------------------------------------------------------
NPY_DESCRS = ["<f4", "<f2", "<f8", ">f4", ">f8", ">f2", "|f1", "<f16", "<c8", "<i4", "<i8", "|u1", "|b1", "<U3",
              "|S4", "O", "|O", "<V2", "|V4", "<M8[s]", "float32", "", "<f4'", "bfloat16", "<e", "=f4", "<f3", "f4",
              "<f4 ", "<F4", "<f4\u0000"]
NPY_SHAPES = ["()", "(0,)", "(1,)", "(-1,)", "(4,)", "(4, 64)", "(64, 4)", "(2, 128)", "(4611686018427387904,)",
              "(9223372036854775807,)", "(9223372036854775808,)", "(18446744073709551616,)", "(4294967296, 4294967296)",
              "(3037000500, 3037000500)", "(" + "1, " * 64 + ")", "(" + "1, " * 65 + ")", "(4,,)", "(,)", "(", ")",
              "4", "[4]", "(4.0,)", "('4',)", "((4,),)", "(0x10,)", "(4 64)", "(+4,)", "(-0,)", "(4, -64)",
              "(" * 30000, "(" * 30000 + ")" * 30000, "(4L,)", "(4,)(4,)"]
NPY_FORTRAN = ["True", "False", "'True'", "1", "0", "None", "true", ""]


def npy_parts(b):
    """(major version, header text, data) of a .npy file as np.save writes it."""
    major = b[6]
    hl = 2 if major == 1 else 4
    n = int.from_bytes(b[8:8 + hl], "little")
    return major, b[8 + hl:8 + hl + n].decode("latin-1"), b[8 + hl + n:]


def npy_join(header, data, major=1, pad=True):
    h = header.encode("latin-1")
    hl = 2 if major == 1 else 4
    if pad:
        h = h.rstrip(b"\n")
        h += b" " * (-(len(h) + 1 + 8 + hl) % 64) + b"\n"
    n = min(len(h), (1 << (8 * hl)) - 1)
    return b"\x93NUMPY" + bytes([major, 0]) + n.to_bytes(hl, "little") + h + data


def _npy_field(header, key, value):
    return re.sub(r"'%s': (\([^)]*\)|'[^']*'|\w+)" % key, lambda m: f"'{key}': {value}", header, count=1)


def npy_descr(rng, b):
    major, h, data = npy_parts(b)
    return npy_join(_npy_field(h, "descr", repr(rng.choice(NPY_DESCRS)) if rng.random() < 0.9 else "4"), data, major)


def npy_shape(rng, b):
    major, h, data = npy_parts(b)
    shape = rng.choice(NPY_SHAPES)
    if len(shape) > 60000 and major == 1:
        major = 2
    return npy_join(_npy_field(h, "shape", shape), data, major)


def npy_fortran(rng, b):
    major, h, data = npy_parts(b)
    return npy_join(_npy_field(h, "fortran_order", rng.choice(NPY_FORTRAN)), data, major)


def npy_keys(rng, b):
    major, h, data = npy_parts(b)
    d = h.strip().rstrip(",}").lstrip("{")
    items = [s.strip() for s in re.findall(r"'\w+': (?:\([^)]*\)|'[^']*'|\w+)", d)]
    choice = rng.randrange(5)
    if choice == 0 and items:
        items.remove(rng.choice(items))
    elif choice == 1 and items:
        items.append(rng.choice(items))
    elif choice == 2:
        items.append(rng.choice(["'extra': 1", "'descr ': '<f4'", "'': ''", "'shape': 4"]))
    elif choice == 3:
        rng.shuffle(items)
    else:
        items = [i.replace("'", '"', 2) for i in items]
    return npy_join("{" + ", ".join(items) + rng.choice(["}", ", }", "", "}}", "} x"]), data, major)


def npy_magic_version(rng, b):
    b = bytearray(b)
    choice = rng.randrange(3)
    if choice == 0:
        b[rng.randrange(6)] = rng.randrange(256)
    elif choice == 1:
        b[6:8] = bytes(rng.choice([(0, 0), (2, 0), (3, 0), (4, 0), (1, 1), (255, 255)]))
    else:
        b[8:10] = rng.choice([0, 1, 0xFFFF, 0x7FFF, header_end(b) - 11, header_end(b) - 9]).to_bytes(2, "little")
    return bytes(b)


def npy_header_text(rng, b):
    major, h, data = npy_parts(b)
    h = list(h)
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(h))
        h[i] = rng.choice(["{", "}", "(", ")", "'", '"', ",", ":", "\\", "\x00", "\xff", "-", "9", " ", "\n"])
    return npy_join("".join(h), data, major, pad=False)


def npy_valid_variant(rng, b):
    """A well-formed .npy of another dtype, byte order, layout or shape (random bytes as data)."""
    descr = rng.choice(["<f4", "<f2", "<f8", ">f4", ">f8", ">f2", "<i4", "|u1", "|b1", "<V2", "|V1", "<c8"])
    shape = rng.choice([(), (0,), (1,), (3, 0), (7,), (1, 31), (33, 1), (2, 3, 5), (1,) * 32, (16, 16), (17, 129)])
    fortran = rng.choice(["False", "True"])
    n = int(np.prod(shape, dtype=np.int64)) * int(descr[2:])
    data = bytes(rng.randrange(256) for _ in range(n))
    return npy_join(f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape!r}, }}", data)


NPY_MUTATIONS = {"npy_descr": npy_descr, "npy_shape": npy_shape, "npy_fortran": npy_fortran, "npy_keys": npy_keys,
                 "npy_magic_version": npy_magic_version, "npy_header_text": npy_header_text,
                 "npy_valid_variant": npy_valid_variant}

# ---- checkpoints (train/checkpoint.h) -----------------------------------------------------------
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

# ---- seeds --------------------------------------------------------------------------------------
TINY = ["--device", "cpu", "--d-model", "32", "--d-ff", "32", "--layers", "1", "--heads", "2", "--experts", "2",
        "--top-k", "1", "--seq-len", "16", "--batch", "2", "--vocab", "64", "--synthetic-tokens", "4096",
        "--eval-batches", "1", "--schedule-steps", "8", "--checkpoint-every", "1", "--eval-every", "0"]
QUANTIZED_SEEDS = [["--recipe", "mxfp8"], ["--recipe", "nvfp4"], ["--recipe", "fp8_block128"],
                   ["--recipe", "fp8_block128x128"], ["--recipe", "mxfp4"], ["--recipe", "nvfp4", "--2d"],
                   ["--recipe", "mxfp8", "--rounding", "floor"]]


def make_seeds(cli, d):
    """reader -> [(seed name, kind, files)]; every seed is a valid input its command accepts."""
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
    plain = [(name, kind, {"in." + kind: read(name)}) for name, kind in files]

    quantized = []
    for i, opts in enumerate(QUANTIZED_SEEDS):
        for src in ("mixed.safetensors", "wide.safetensors"):
            out = f"q{i}_{src}"
            p = subprocess.run([cli, "quantize", "--in", src, "--out", out, "--direction", "both", "--quiet"] + opts,
                               cwd=d, capture_output=True, text=True, timeout=120)
            if p.returncode != 0:
                sys.exit(f"making seed {out}: {p.stderr.strip()}")
            quantized.append(("_".join(opts[1:]) + "_" + src, "quantized", {"in.safetensors": read(out)}))

    p = subprocess.run([cli, "train"] + TINY + ["--steps", "2", "--out", "run"], cwd=d, capture_output=True,
                       text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"making the checkpoint seed: {p.stderr.strip()}")
    run = {"run/" + k: v for k, v in read_tree(os.path.join(d, "run")).items()}
    state = json.loads(run["run/step_00000002/state.json"])
    if state["tensors_xxh64"] != f"{xxh64(run['run/step_00000002/tensors.safetensors']):016x}":
        sys.exit("this script's XXH64 disagrees with the checkpoint's checksum")
    return {"quantize": plain, "study": plain, "dequantize": quantized, "checkpoint": [("run", "checkpoint", run)]}


MUTATIONS = {"npy": dict(BYTE_MUTATIONS, **NPY_MUTATIONS), "safetensors": dict(BYTE_MUTATIONS, **ST_MUTATIONS),
             "quantized": dict(BYTE_MUTATIONS, **ST_MUTATIONS, **Q_MUTATIONS), "checkpoint": CK_MUTATIONS}

# ---- running one input --------------------------------------------------------------------------


def command(reader, files):
    """(argv after the binary, the command's name, the files a success adds)."""
    src = next(iter(k for k in files if k.startswith("in.")), "in.npy")
    if reader == "quantize":
        return ["quantize", "--recipe", "mxfp8", "--in", src, "--out", "out.safetensors", "--quiet"], {"out.safetensors"}
    if reader == "dequantize":
        return ["dequantize", "--in", "in.safetensors", "--out", "out.safetensors", "--quiet"], {"out.safetensors"}
    if reader == "study":
        return ["study", "--in", src, "--recipes", "mxfp8", "--quiet", "--threads", "1"], set()
    return ["train"] + TINY + ["--steps", "3", "--resume", "run", "--out", "run"], None


# stderr lines a run may print besides its one error line: warnings about a tensor it skips or
# notes on one it read, and train's progress.
NOISE = {"quantize": [r"blockscale quantize: skipping '.*'(\.\.\.)?: "],
         "study": [r"blockscale study: skipping "],
         "dequantize": [r"blockscale dequantize: '.*' was quantized after a Hadamard transform"],
         "train": [r"resumed from \S+ at step -?\d+$", r"train: ", r"step \d+/\d+ \| ", r"eval step \d+: loss ",
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


def run_case(cli, base, reader, seeds, master_seed, index, timeout, skip_known):
    rng = random.Random(f"{master_seed}/{reader}/{index}")
    seed_name, kind, files = rng.choice(seeds)
    mutation = rng.choice(sorted(MUTATIONS[kind]))
    result = {"reader": reader, "index": index, "seed": seed_name, "mutation": mutation}
    if skip_known and (reader, mutation) in KNOWN_ISSUES:
        return dict(result, outcome="skipped")
    files = dict(files)
    if kind == "checkpoint":
        files = MUTATIONS[kind][mutation](rng, files)
    else:
        (name, data), = files.items()
        files = {name: MUTATIONS[kind][mutation](rng, data)}
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
READERS = ("quantize", "dequantize", "study", "checkpoint")
FAILING = ("crash", "hang", "bad message", "leftover")


def keep(keep_dir, r):
    d = os.path.join(keep_dir, f"{r['reader']}-{r['index']}-{r['mutation']}")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    write_tree(d, r["files"])
    with open(os.path.join(d, "command.txt"), "w") as f:
        f.write(f"cd {d} && blockscale {' '.join(r['args'])}\n# {r['outcome']}: {r['why']}\n# stderr:\n{r['stderr']}")
    return d


def report(results, elapsed):
    cols = ("ok", "error", "crash", "hang", "bad message", "leftover", "skipped")
    print(f"{'reader':<11} {'inputs':>7} {'ok':>6} {'clean err':>9} {'crashes':>7} {'hangs':>5} {'bad msg':>7} "
          f"{'leftover':>8} {'skipped':>7}")
    for reader in READERS:
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", required=True)
    ap.add_argument("--count", type=int, default=300, help="mutated inputs per reader")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=20, help="seconds a run may take before it counts as a hang")
    ap.add_argument("--readers", default=",".join(READERS))
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
    readers = args.readers.split(",")
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
            results = list(pool.map(lambda w: run_case(cli, base, w[0], seeds[w[0]], args.seed, w[1], args.timeout,
                                                           not args.run_known_issues),
                                    work))
    elapsed = time.time() - start
    if args.report:
        report(results, elapsed)
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


if __name__ == "__main__":
    main()
