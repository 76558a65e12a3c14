"""blockscale's Python emulator against the CLI: the same bytes for every format and option.

Run by ctest (tests/python/CMakeLists.txt) with PYTHONPATH at the built package and
BLOCKSCALE_CLI at the CLI binary. The CLI's files are read by a reader written here (the
safetensors layout is simple), so neither side's I/O code checks itself.
"""
import json
import os
import struct
import subprocess
import tempfile
import unittest

import ml_dtypes
import numpy as np

import blockscale

CLI = os.environ.get("BLOCKSCALE_CLI", "")

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "U8": np.uint8,
           "F8_E4M3": np.uint8, "F8_E5M2": np.uint8, "BF16": ml_dtypes.bfloat16}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        code = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.float64): "F64",
                np.dtype(ml_dtypes.bfloat16): "BF16"}[a.dtype]
        raw = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": code, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    body = raw[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        out[name] = np.frombuffer(body[b:e], dtype=_DTYPES[t["dtype"]]).reshape(t["shape"])
    return out, meta


def inputs(rows_multiple_of_16=False):
    rng = np.random.default_rng(1234)
    r = 32 if rows_multiple_of_16 else 33
    x = {
        "random": rng.standard_normal((r, 70)).astype(np.float32) * np.exp(rng.uniform(-8, 8, (r, 1))).astype(np.float32),
        "rank3": rng.standard_normal((2, 16 if rows_multiple_of_16 else 5, 48)).astype(np.float32),
        "f16": rng.standard_normal((16, 130)).astype(np.float16),
        "bf16": rng.standard_normal((16, 40)).astype(ml_dtypes.bfloat16),
        "f64": rng.standard_normal((16, 36)) * 1e-3,
    }
    adv = rng.standard_normal((16 if rows_multiple_of_16 else 9, 160)).astype(np.float32)
    adv[0, :5] = [np.nan, np.inf, -np.inf, 0.0, -0.0]
    adv[1, :] = 0.0                                   # all-zero blocks
    adv[2, :32] = 1e-40                               # subnormals
    adv[3, :] = np.float32(3.4028235e38)              # the largest magnitude
    adv[4, 40:80] = -np.float32(3.4e38)
    adv[5, 100:] = 1e-30
    x["adversarial"] = adv
    if not rows_multiple_of_16:
        x["vector"] = rng.standard_normal(100).astype(np.float32)
    return x


class EmulatorMatchesCli(unittest.TestCase):
    def setUp(self):
        if not CLI or not os.path.exists(CLI):
            self.skipTest("BLOCKSCALE_CLI not set to the built CLI")
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def compare(self, fmt, flags, kwargs, rows_multiple_of_16=False):
        x = inputs(rows_multiple_of_16)
        src = os.path.join(self.dir.name, "in.safetensors")
        out = os.path.join(self.dir.name, "q.safetensors")
        deq = os.path.join(self.dir.name, "d.safetensors")
        write_safetensors(src, x)
        subprocess.run([CLI, "quantize", "--recipe", fmt, "--direction", "both", "--quiet", "--in", src,
                        "--out", out] + flags, check=True, capture_output=True)
        subprocess.run([CLI, "dequantize", "--in", out, "--out", deq], check=True, capture_output=True)
        cli, meta = read_safetensors(out)
        cli_deq, _ = read_safetensors(deq)
        for name, a in x.items():
            for q in blockscale.quantize(a, fmt, direction="both", **kwargs):
                entry = name if q.direction == "rowwise" else name + ".columnwise"
                with self.subTest(format=fmt, flags=flags, tensor=entry):
                    self.assertEqual(q.data.tobytes(), cli[entry + ".data"].tobytes())
                    self.assertEqual(q.scales.dtype, cli[entry + ".scale"].dtype)
                    self.assertEqual(q.scales.tobytes(), cli[entry + ".scale"].tobytes())
                    if fmt == "nvfp4":
                        self.assertEqual(np.float32(q.global_scale).tobytes(), cli[entry + ".global_scale"].tobytes())
                    self.assertEqual(f"{q.block[0]}x{q.block[1]}", meta[entry + ".block"])
                    self.assertEqual(json.loads(meta[entry + ".shape"]), list(q.shape))
                    y = blockscale.dequantize(q)
                    self.assertEqual(y.shape, a.shape)
                    self.assertEqual(y.tobytes(), cli_deq[entry].tobytes())

    def test_every_format(self):
        for fmt in blockscale.FORMATS:
            self.compare(fmt, [], {})

    def test_mx_floor_scales(self):
        for fmt in ("mxfp8", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4"):
            self.compare(fmt, ["--rounding", "floor"], {"rounding": "floor"})

    def test_nvfp4_options(self):
        self.compare("nvfp4", ["--sr-seed", "7"], {"sr_seed": 7})
        self.compare("nvfp4", ["--2d"], {"block_2d": True})
        self.compare("nvfp4", ["--rht", "--sr-seed", "18446744073709551615"],
                     {"rht": True, "sr_seed": 2**64 - 1}, rows_multiple_of_16=True)

    def test_fp8_pow2(self):
        for fmt in ("fp8_block128", "fp8_block128x128"):
            self.compare(fmt, ["--pow2"], {"pow2": True})


class Errors(unittest.TestCase):
    x = np.ones((4, 32), np.float32)

    def check(self, start, **kw):
        fmt = kw.pop("format", "mxfp8")
        x = kw.pop("x", self.x)
        with self.assertRaises(ValueError) as e:
            blockscale.quantize(x, fmt, **kw)
        self.assertTrue(str(e.exception).startswith(start), str(e.exception))

    def test_arguments_are_named(self):
        self.check("format:", format="mxfp9")
        self.check("rounding:", rounding="up")
        self.check("rounding:", format="nvfp4", rounding="floor")
        self.check("direction:", direction="diagonal")
        self.check("sr_seed:", sr_seed=1)
        self.check("sr_seed:", format="nvfp4", sr_seed=-1)
        self.check("sr_seed:", format="nvfp4", sr_seed=2**64)
        self.check("rht:", format="nvfp4", rht=True)
        self.check("rht:", format="nvfp4", rht=True, direction="both", x=np.ones((8, 32), np.float32))
        self.check("block_2d:", block_2d=True)
        self.check("pow2:", pow2=True)
        self.check("x:", x=np.ones((4, 32), np.int32))
        self.check("x:", x=np.float32(1.0))
        self.check("x:", x=np.ones((0, 32), np.float32))
        with self.assertRaises(ValueError):
            blockscale.dequantize("not a tensor")

    def test_version(self):
        self.assertRegex(blockscale.__version__, r"^\d+\.\d+\.\d+$")


if __name__ == "__main__":
    unittest.main()
