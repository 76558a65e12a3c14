"""blockscale's Python emulator against the CLI: the same bytes for every format and option, the
same files (save / load), and the reference GEMMs and study metrics against numpy.

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


class WithCli(unittest.TestCase):
    """A temporary directory and the CLI's quantize of inputs() in both directions."""

    def setUp(self):
        if not CLI or not os.path.exists(CLI):
            self.skipTest("BLOCKSCALE_CLI not set to the built CLI")
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def cli_quantize(self, fmt, flags, rows_multiple_of_16):
        """inputs() and the path of the CLI's file of them."""
        x = inputs(rows_multiple_of_16)
        src = os.path.join(self.dir.name, "in.safetensors")
        out = os.path.join(self.dir.name, "q.safetensors")
        write_safetensors(src, x)
        subprocess.run([CLI, "quantize", "--recipe", fmt, "--direction", "both", "--quiet", "--in", src,
                        "--out", out] + flags, check=True, capture_output=True)
        return x, out


class EmulatorMatchesCli(WithCli):
    def compare(self, fmt, flags, kwargs, rows_multiple_of_16=False):
        x, out = self.cli_quantize(fmt, flags, rows_multiple_of_16)
        deq = os.path.join(self.dir.name, "d.safetensors")
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


class FilesMatchCli(WithCli):
    """blockscale.save writes the CLI's file byte for byte; blockscale.load reads it back."""

    def roundtrip(self, fmt, flags, kwargs, rows_multiple_of_16=False):
        x, cli_file = self.cli_quantize(fmt, flags, rows_multiple_of_16)
        py_file = os.path.join(self.dir.name, "py.safetensors")
        mine = {name: blockscale.quantize(a, fmt, direction="both", **kwargs) for name, a in x.items()}
        blockscale.save(py_file, mine)
        with open(cli_file, "rb") as f, open(py_file, "rb") as g:
            self.assertEqual(f.read(), g.read(), f"{fmt} {flags}: the files differ")
        loaded = blockscale.load(cli_file)
        self.assertEqual(sorted(loaded), sorted([n for n in x] + [n + ".columnwise" for n in x]))
        for name, (row, col) in mine.items():
            for entry, q in ((name, row), (name + ".columnwise", col)):
                got = loaded[entry]
                with self.subTest(format=fmt, flags=flags, entry=entry):
                    for field in ("format", "rows", "cols", "block", "shape", "direction", "rounding", "hadamard"):
                        self.assertEqual(getattr(got, field), getattr(q, field), field)
                    self.assertEqual(got.data.tobytes(), q.data.tobytes())
                    self.assertEqual(got.scales.dtype, q.scales.dtype)
                    self.assertEqual(got.scales.tobytes(), q.scales.tobytes())
                    self.assertEqual(np.float32(got.global_scale), np.float32(q.global_scale))
                    np.testing.assert_array_equal(blockscale.dequantize(got), blockscale.dequantize(q))

    def test_every_format(self):
        for fmt in blockscale.FORMATS:
            self.roundtrip(fmt, [], {})

    def test_options(self):
        self.roundtrip("mxfp4", ["--rounding", "floor"], {"rounding": "floor"})
        self.roundtrip("nvfp4", ["--2d"], {"block_2d": True})
        self.roundtrip("nvfp4", ["--rht", "--sr-seed", "5"], {"rht": True, "sr_seed": 5}, rows_multiple_of_16=True)

    def test_errors_name_the_argument(self):
        q = blockscale.quantize(np.ones((4, 32), np.float32), "mxfp8", direction="both")
        path = os.path.join(self.dir.name, "bad.safetensors")
        for tensors, start in (([q[0]], "tensors:"), ({"w": "codes"}, "tensors['w']:"),
                               ({"w": (q[1], q[0])}, "tensors['w']:"), ({"": q[0]}, "tensors:"),
                               ({"w": q, "w.columnwise": q[0]}, "tensors['w.columnwise']:")):
            with self.subTest(tensors=str(tensors)[:40]), self.assertRaises(ValueError) as e:
                blockscale.save(path, tensors)
            self.assertTrue(str(e.exception).startswith(start), str(e.exception))
        self.assertFalse(os.path.exists(path), "a refused save left a file")
        with self.assertRaises(ValueError) as e:
            blockscale.load(os.path.join(self.dir.name, "missing.safetensors"))
        self.assertTrue(str(e.exception).startswith("path:"), str(e.exception))
        self.assertIn("missing.safetensors", str(e.exception))
        with self.assertRaises(ValueError) as e:
            blockscale.save(os.path.join(self.dir.name, "no_such_dir", "x.safetensors"), {"w": q[0]})
        self.assertTrue(str(e.exception).startswith("path:"), str(e.exception))


class ReferenceGemms(unittest.TestCase):
    """The fp64 reference GEMMs against numpy's fp64 products of the dequantized operands (exact in
    fp32 for these operands, so the two differ only by summation order)."""

    rng = np.random.default_rng(7)

    def operand(self, rows, cols, fmt="mxfp8"):
        x = self.rng.standard_normal((rows, cols)).astype(np.float32)
        # FP8 blockwise with power-of-two scales: element x scale is then exact in fp32 too.
        q = blockscale.quantize(x, fmt, pow2=fmt.startswith("fp8_block"))
        return x, q, blockscale.dequantize(q).astype(np.float64)

    def test_dense_with_beta(self):
        for fmt in ("mxfp8", "mxfp4", "fp8_block128"):
            _, a, da = self.operand(33, 256, fmt)
            _, b, db = self.operand(20, 256, fmt)
            c = self.rng.standard_normal((33, 20))
            np.testing.assert_allclose(blockscale.reference_gemm(a, b), da @ db.T, rtol=1e-12, atol=1e-12)
            np.testing.assert_allclose(blockscale.reference_gemm(a, b, alpha=2.0, beta=0.5, c=c),
                                       2.0 * (da @ db.T) + 0.5 * c, rtol=1e-12, atol=1e-12)

    def test_m_grouped(self):
        _, a, da = self.operand(50, 64)
        bs = [self.operand(24, 64) for _ in range(3)]
        ends = [10, 10, 50]  # an empty expert in the middle
        d = blockscale.reference_gemm_m_grouped(a, [b for _, b, _ in bs], ends)
        want = np.concatenate([da[0:10] @ bs[0][2].T, da[10:50] @ bs[2][2].T])
        np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)

    def test_k_grouped(self):
        _, a, da = self.operand(16, 96)  # dY^T over 96 padded token columns
        _, b, db = self.operand(8, 96)   # X^T
        ends = [32, 32, 96]
        d = blockscale.reference_gemm_k_grouped(a, b, ends)
        self.assertEqual(d.shape, (3, 16, 8))
        np.testing.assert_allclose(d[0], da[:, :32] @ db[:, :32].T, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(d[1], np.zeros((16, 8)))
        np.testing.assert_allclose(d[2], da[:, 32:] @ db[:, 32:].T, rtol=1e-12, atol=1e-12)

    def test_errors(self):
        _, a, _ = self.operand(8, 64)
        _, b, _ = self.operand(8, 32)
        for call, start in ((lambda: blockscale.reference_gemm(a, b), "reference_gemm: b.cols (K = 32)"),
                            (lambda: blockscale.reference_gemm(a, "b"), "b:"),
                            (lambda: blockscale.reference_gemm(a, a, beta=1.0), "c:"),
                            (lambda: blockscale.reference_gemm_m_grouped(a, a, [8]), "b:")):
            with self.assertRaises(ValueError) as e:
                call()
            self.assertTrue(str(e.exception).startswith(start), str(e.exception))


class Metrics(unittest.TestCase):
    """The study's metrics against the same figures computed here from quantize / dequantize."""

    def test_recipe_error(self):
        rng = np.random.default_rng(3)
        x = (rng.standard_normal((64, 96)) * np.exp(rng.uniform(-4, 4, (64, 1)))).astype(np.float32)
        for fmt in ("mxfp8", "nvfp4", "fp8_block128"):
            e = blockscale.recipe_error(x, fmt)
            d = blockscale.dequantize(blockscale.quantize(x, fmt)).astype(np.float64)
            xd = x.astype(np.float64)
            err = xd - d
            self.assertEqual(e["elements"], x.size)
            self.assertAlmostEqual(e["sqnr_db"], 10 * np.log10(np.sum(xd ** 2) / np.sum(err ** 2)), places=9)
            self.assertAlmostEqual(e["rel_fro_error"], np.linalg.norm(err) / np.linalg.norm(xd), places=12)
            self.assertAlmostEqual(e["max_abs_error"], np.max(np.abs(err)), places=12)
            self.assertEqual("scale_at_min" in e, fmt != "fp8_block128")

    def test_gemm_error(self):
        rng = np.random.default_rng(4)
        a = rng.standard_normal((40, 128)).astype(np.float32)
        b = rng.standard_normal((24, 128)).astype(np.float32)
        e = blockscale.gemm_error(a, b, "mxfp8")
        q = blockscale.dequantize(blockscale.quantize(a, "mxfp8")).astype(np.float64) @ \
            blockscale.dequantize(blockscale.quantize(b, "mxfp8")).astype(np.float64).T
        exact = a.astype(np.float64) @ b.astype(np.float64).T
        self.assertAlmostEqual(e["rel_fro_error"], np.linalg.norm(q - exact) / np.linalg.norm(exact), places=12)
        with self.assertRaises(ValueError) as err:
            blockscale.gemm_error(a, b[:, :64], "mxfp8")
        self.assertTrue(str(err.exception).startswith("b:"), str(err.exception))
        with self.assertRaises(ValueError):
            blockscale.recipe_error(a, "mxfp8", pow2=True)


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
