#!/usr/bin/env python3
"""formats/io against the reference writers and readers: numpy (np.save / np.load), ml_dtypes
(bfloat16 and fp8 arrays) and the safetensors package (its serializer and parser).

io_dump (built with the tests) converts each reference-written file with blockscale's reader and
writer; the result must be byte-identical to what the reference writes for the same array
(C-order .npy; .safetensors with at most one metadata key, since the reference keeps metadata in
a hash map), the reference parser must accept it, and io::to_float must give ml_dtypes' fp32
values. Fails (never skips) when numpy, ml_dtypes or safetensors is missing. Run by CTest:
    io_reference_test.py --io-dump build/tests/formats/io_dump
"""
import argparse
import io
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
    import safetensors
    import safetensors.numpy
except ImportError as e:  # fail, never skip: a missing oracle must show in the test report
    print(f"FAIL: {e}. This test needs numpy, ml_dtypes and safetensors: run ./tools/setup.sh "
          "(or python3 -m pip install numpy ml_dtypes safetensors)", file=sys.stderr)
    sys.exit(1)

SEED = 20240611
NPY_DTYPES = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, np.uint8, np.int8,
              np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.bool_]
SHAPES = [(), (5,), (2, 3, 4), (3, 0, 2), (1, 2, 1, 3, 1, 2), (100000,)]
FLOAT8 = [ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu]


def random_array(rng, dtype, shape):
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    # Any bit pattern: NaN, Inf and subnormals included.
    size = int(np.prod(shape))
    width = np.dtype(dtype).itemsize
    bits = rng.integers(0, 256, size=size * width, dtype=np.uint8)
    return bits.view(dtype).reshape(shape)


def npy_bytes(a):
    b = io.BytesIO()
    np.save(b, a)
    return b.getvalue()


class Checker:
    def __init__(self, io_dump, tmp):
        self.io_dump, self.tmp, self.failures, self.checks = io_dump, tmp, [], 0

    def fail(self, what):
        self.failures.append(what)

    def run(self, *args):
        r = subprocess.run([self.io_dump, *args], capture_output=True, text=True)
        if r.returncode != 0:
            self.fail(f"io_dump {' '.join(args)}: {r.stderr.strip()}")
            return None
        return r.stdout

    def convert(self, name, data):
        src, dst = os.path.join(self.tmp, "in_" + name), os.path.join(self.tmp, "out_" + name)
        with open(src, "wb") as f:
            f.write(data)
        if self.run("convert", src, dst) is None:
            return None
        with open(dst, "rb") as f:
            return f.read()

    def floats(self, path, expected, what, name=None):
        out = self.run("floats", path, *([name] if name else []))
        if out is None:
            return
        got = np.array([int(x, 16) for x in out.split()], dtype=np.uint32)
        want = np.asarray(expected, dtype=np.float32).reshape(-1).view(np.uint32)
        self.checks += 1
        if got.shape != want.shape:
            self.fail(f"{what}: {got.size} floats, expected {want.size}")
            return
        nan = np.isnan(want.view(np.float32))
        bad = np.nonzero((got != want) & ~(nan & np.isnan(got.view(np.float32))))[0]
        if bad.size:
            i = bad[0]
            self.fail(f"{what}: element {i}: {got[i]:08x}, ml_dtypes/numpy {want[i]:08x} ({bad.size} differ)")


def check_npy(c, rng):
    for dtype in NPY_DTYPES:
        for shape in SHAPES:
            a = random_array(rng, dtype, shape)
            name = f"{np.dtype(dtype).name}_{'x'.join(map(str, shape)) or 'scalar'}.npy"
            ref = npy_bytes(a)
            out = c.convert(name, ref)
            c.checks += 1
            if out is not None and out != ref:
                c.fail(f"npy {name}: blockscale's bytes differ from np.save's")
            if out is not None:
                back = np.load(io.BytesIO(out))
                if dtype == ml_dtypes.bfloat16:
                    back = back.view(ml_dtypes.bfloat16)  # np.load gives '<V2' as void
                if back.shape != a.shape or back.tobytes() != a.tobytes():
                    c.fail(f"npy {name}: np.load of blockscale's file differs")
            if np.dtype(dtype).kind == "f" or dtype == ml_dtypes.bfloat16:
                c.floats(os.path.join(c.tmp, "in_" + name), a.astype(np.float32), f"to_float npy {name}")
    # Fortran order: read as row-major, written back in C order.
    for dtype in (np.float32, ml_dtypes.bfloat16, np.int64):
        for shape in ((3, 4), (2, 3, 4), (2, 1, 3, 2)):
            a = random_array(rng, dtype, shape)
            name = f"fortran_{np.dtype(dtype).name}_{'x'.join(map(str, shape))}.npy"
            out = c.convert(name, npy_bytes(np.asfortranarray(a)))
            c.checks += 1
            if out is not None and out != npy_bytes(np.ascontiguousarray(a)):
                c.fail(f"npy {name}: Fortran input not converted to np.save's C-order bytes")


def check_safetensors(c, rng):
    dtypes = [np.float16, np.float32, np.float64, ml_dtypes.bfloat16, *FLOAT8, np.uint8,
              np.int8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.bool_]
    tensors = {}
    for i, dtype in enumerate(dtypes):
        for j, shape in enumerate([(), (7,), (2, 3, 4), (3, 0)]):
            tensors[f"t{i}.{j}"] = random_array(rng, dtype, shape)
    for k, dtype in enumerate(FLOAT8):  # every code
        tensors[f"codes{k}"] = np.arange(256, dtype=np.uint8).view(dtype)
    for metadata in (None, {"format": "np"}):
        ref = safetensors.numpy.save(tensors, metadata=metadata)
        name = f"model_{'meta' if metadata else 'plain'}.safetensors"
        out = c.convert(name, ref)
        c.checks += 1
        if out is None:
            continue
        if out != ref:
            c.fail(f"{name}: blockscale's bytes differ from safetensors.numpy.save's")
        # The reference parser reads blockscale's file back to the same tensors.
        try:
            parsed = dict(safetensors.deserialize(out))
        except Exception as e:  # the reference parser rejects blockscale's file
            c.fail(f"{name}: the safetensors parser rejects blockscale's file: {e}")
            continue
        for key, a in tensors.items():
            t = parsed.get(key)
            if t is None or list(t["shape"]) != list(a.shape) or bytes(t["data"]) != a.tobytes():
                c.fail(f"{name}: the safetensors parser reads tensor {key} back differently")
    path = os.path.join(c.tmp, "in_model_plain.safetensors")
    for key, a in tensors.items():
        if a.dtype.kind == "f" or a.dtype in (np.dtype(ml_dtypes.bfloat16), *map(np.dtype, FLOAT8)):
            c.floats(path, a.astype(np.float32), f"to_float safetensors {key} ({a.dtype})", key)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--io-dump", required=True)
    args = p.parse_args()
    rng = np.random.default_rng(SEED)
    np.seterr(all="ignore")  # casts of NaN/Inf/huge bit patterns to fp32 are intended
    with tempfile.TemporaryDirectory(prefix="blockscale_io_ref_") as tmp:
        c = Checker(args.io_dump, tmp)
        check_npy(c, rng)
        check_safetensors(c, rng)
    for f in c.failures[:30]:
        print("FAIL:", f, file=sys.stderr)
    if c.failures:
        print(f"{len(c.failures)} failures in {c.checks} checks", file=sys.stderr)
        return 1
    print(f"OK: {c.checks} checks (numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}, "
          f"safetensors {safetensors.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
