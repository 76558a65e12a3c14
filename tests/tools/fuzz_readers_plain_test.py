#!/usr/bin/env python3
"""Mutation fuzzing of the `blockscale` CLI's .npy and .safetensors readers, through quantize and
study.

Valid .npy (f32 / f16 / f64, ranks 1-3) and .safetensors files (F32 / F16 / BF16 / F64 / I32,
metadata or none) made with numpy, then mutated: bit flips, byte overwrites, truncation, junk, and
edits of what the readers parse (the npy header dict, magic and version; safetensors' length field
and JSON header). The rule every run must keep, and the driver: fuzz_readers_common.py.

Usage: fuzz_readers_plain_test.py --cli build/blockscale [--count N] [--seed S] [--jobs J]
                                  [--readers R,...] [--only INDEX] [--report] [--keep DIR]
"""
import re

import numpy as np

import fuzz_readers_common as common
from fuzz_readers_common import BYTE_MUTATIONS, header_end
from fuzz_readers_safetensors import ST_MUTATIONS

READERS = ("quantize", "study")

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

# ---- seeds and runs -----------------------------------------------------------------------------
MUTATIONS = {"npy": dict(BYTE_MUTATIONS, **NPY_MUTATIONS), "safetensors": dict(BYTE_MUTATIONS, **ST_MUTATIONS)}


def command(reader, files):
    """(argv after the binary, the files a success adds)."""
    src = next(iter(k for k in files if k.startswith("in.")), "in.npy")
    if reader == "quantize":
        return ["quantize", "--recipe", "mxfp8", "--in", src, "--out", "out.safetensors", "--quiet"], {"out.safetensors"}
    return ["study", "--in", src, "--recipes", "mxfp8", "--quiet", "--threads", "1"], set()


def make_seeds(cli, d):
    """reader -> [(seed name, kind, files)]; every seed is a valid input its command accepts."""
    plain = common.make_plain_seeds(d)
    return {"quantize": plain, "study": plain}


if __name__ == "__main__":
    common.main(__doc__, READERS, make_seeds, MUTATIONS, command)
