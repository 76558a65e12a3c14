#!/usr/bin/env python3
"""formats/scalar_codecs.h against ml_dtypes, an oracle independent of CUDA.

codec_dump (built with the tests) writes our codes; this script compares them with ml_dtypes'
float8_e4m3fn, float8_e5m2, float4_e2m1fn, float6_e2m3fn, float6_e3m2fn and float8_e8m0fnu on
every bf16 pattern, every fp16 pattern, random fp32 patterns and fp32 patterns within 4 ulps of
every rounding boundary. ml_dtypes casts are RNE but do not saturate (E4M3 overflows to NaN,
E5M2 to Inf), so inputs are clipped to [-max, max] before its cast and saturation, Inf and NaN
are checked against the contract separately. Run by CTest:
    ml_dtypes_oracle_test.py --codec-dump build/tests/formats/codec_dump
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import ml_dtypes
except ImportError as e:  # fail, never skip: a missing oracle must show in the test report
    print(f"FAIL: {e}. This test needs numpy and ml_dtypes: run ./tools/setup.sh "
          "(or python3 -m pip install numpy ml_dtypes)", file=sys.stderr)
    sys.exit(1)

SEED = 20241121
# name in codec_dump -> (ml_dtypes type name, max finite value, sign bit of the code)
ELEMENT_FORMATS = {
    "e4m3": ("float8_e4m3fn", 448.0, 0x80),
    "e5m2": ("float8_e5m2", 57344.0, 0x80),
    "e2m1": ("float4_e2m1fn", 6.0, 0x8),
    "e2m3": ("float6_e2m3fn", 7.5, 0x20),
    "e3m2": ("float6_e3m2fn", 28.0, 0x20),
}
NAN_CODE = {"e4m3": 0x7F, "e5m2": 0x7F}  # sign kept; the others have no NaN and give +max


def ml_type(name):
    t = getattr(ml_dtypes, name, None)
    if t is None:
        print(f"FAIL: ml_dtypes {ml_dtypes.__version__} has no {name}; upgrade it "
              "(python3 -m pip install -U ml_dtypes)", file=sys.stderr)
        sys.exit(1)
    return t


def bits_to_f32(u):
    return np.asarray(u, dtype=np.uint32).view(np.float32)


def f32_bits(x):
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def ml_values(dtype, n_codes):
    """Every finite non-negative value of a format, decoded by ml_dtypes, ascending."""
    v = np.arange(n_codes, dtype=np.uint8).view(dtype).astype(np.float64)
    return np.unique(v[np.isfinite(v) & (v >= 0)])


def near(points):
    """fp32 patterns within +-4 ulps of each (exactly representable) point, both signs."""
    p = np.asarray(points, dtype=np.float64)
    f = p.astype(np.float32)
    assert np.array_equal(f.astype(np.float64), p), "boundary point not exact in fp32"
    b = f32_bits(f).astype(np.int64)[:, None] + np.arange(-4, 5)[None, :]
    b = b[(b >= 0) & (b <= 0x7F800000)].astype(np.uint32)
    return np.concatenate([bits_to_f32(b), -bits_to_f32(b)])


def boundary_inputs():
    pts = []
    for _, (tname, _, _) in ELEMENT_FORMATS.items():
        v = ml_values(ml_type(tname), 256)
        pts += [v, (v[:-1] + v[1:]) / 2, [v[-1] + (v[-1] - v[-2]) / 2, v[1] / 2]]
    k = np.arange(-149, 128)
    pts += [np.ldexp(1.0, k), np.ldexp(1.5, k[1:])]  # E8M0: powers of two and their midpoints
    return near(np.concatenate([np.asarray(p, dtype=np.float64) for p in pts]))


def input_sets():
    rng = np.random.default_rng(SEED)
    raw = bits_to_f32(rng.integers(0, 2**32, size=2_000_000, dtype=np.uint64).astype(np.uint32))
    # Exponents where the formats live, so rounding inside each format is hit often.
    mant = rng.integers(0, 2**32, size=1_000_000, dtype=np.uint64).astype(np.uint32) & 0x807FFFFF
    expo = rng.integers(127 - 24, 127 + 17, size=1_000_000).astype(np.uint32) << 23
    return {
        "every bf16": bits_to_f32(np.arange(65536, dtype=np.uint32) << 16),
        "every fp16": np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32),
        "random fp32": np.concatenate([raw, bits_to_f32(mant | expo)]),
        "fp32 near boundaries": boundary_inputs(),
    }


class Runner:
    def __init__(self, codec_dump, tmp):
        self.codec_dump, self.tmp, self.failures = codec_dump, tmp, []

    def encode(self, fmt, x):
        src, dst = os.path.join(self.tmp, "in.f32"), os.path.join(self.tmp, "out.u8")
        np.asarray(x, dtype="<f4").tofile(src)
        subprocess.run([self.codec_dump, "encode", fmt, src, dst], check=True)
        out = np.fromfile(dst, dtype=np.uint8)
        assert out.size == x.size, f"codec_dump wrote {out.size} codes for {x.size} inputs"
        return out

    def decode(self, fmt):
        dst = os.path.join(self.tmp, "dec.f32")
        subprocess.run([self.codec_dump, "decode", fmt, dst], check=True)
        return np.fromfile(dst, dtype="<f4")

    def expect_equal(self, what, x, ours, want):
        bad = np.nonzero(ours != want)[0]
        if bad.size:
            rows = [f"x={float(x[i])!r} (0x{int(f32_bits(x[i])):08x}) ours 0x{int(ours[i]):02x} "
                    f"want 0x{int(want[i]):02x}" for i in bad[:5]]
            self.failures.append(f"{what}: {bad.size} mismatches\n    " + "\n    ".join(rows))
        return int(ours.size)


def check_element(r, fmt, name, x):
    tname, vmax, sign_bit = ELEMENT_FORMATS[fmt]
    dtype = ml_type(tname)
    ours = r.encode(fmt, x)
    max_code = int(np.array([vmax], dtype=np.float32).astype(dtype).view(np.uint8)[0])
    neg = np.signbit(x)
    fin, nan = np.isfinite(x), np.isnan(x)
    # Finite values: ml_dtypes' RNE on the clipped value (clipping is what satfinite means).
    want = np.clip(x[fin], -vmax, vmax).astype(dtype).view(np.uint8)
    n = r.expect_equal(f"{fmt} {name} vs ml_dtypes", x[fin], ours[fin], want)
    # Saturation: |x| > max and +-Inf give +-max.
    sat = (np.abs(x) > vmax) & ~nan
    r.expect_equal(f"{fmt} {name} saturation", x[sat], ours[sat],
                   np.where(neg[sat], max_code | sign_bit, max_code).astype(np.uint8))
    # NaN: canonical NaN with the sign kept (E4M3/E5M2), +max otherwise.
    if fmt in NAN_CODE:
        want_nan = np.where(neg[nan], NAN_CODE[fmt] | sign_bit, NAN_CODE[fmt])
    else:
        want_nan = np.full(int(nan.sum()), max_code)
    r.expect_equal(f"{fmt} {name} NaN", x[nan], ours[nan], want_nan.astype(np.uint8))
    return n, int(sat.sum()), int(nan.sum())


def check_ue4m3(r, name, x):
    """UE4M3 (no ml_dtypes type): E4M3 of x >= 0, 0 for negatives and -0, 0x7F for NaN."""
    ours = r.encode("ue4m3", x)
    nan = np.isnan(x)
    pos = ~nan & ~np.signbit(x)
    want = np.clip(x[pos], 0, 448.0).astype(ml_type("float8_e4m3fn")).view(np.uint8)
    n = r.expect_equal(f"ue4m3 {name} vs ml_dtypes e4m3fn (x >= 0)", x[pos], ours[pos], want)
    r.expect_equal(f"ue4m3 {name} negative", x[~nan & ~pos], ours[~nan & ~pos],
                   np.zeros(int((~nan & ~pos).sum()), np.uint8))
    r.expect_equal(f"ue4m3 {name} NaN", x[nan], ours[nan], np.full(int(nan.sum()), 0x7F, np.uint8))
    return n


def check_e8m0(r, name, x):
    """Ours rounds toward zero (floor) or up (ceil); ml_dtypes' E8M0 cast rounds to nearest with
    ties up (measured, ml_dtypes 0.6), and below 2^-126 it rounds everything in (2^-127, 2^-126)
    up, so it is an oracle for positive x in [2^-126, 2^127] only: there its code must be ours
    floor or ceil, whichever is nearer. Floor/ceil must bracket x on [2^-127, 2^127]; zero, NaN,
    Inf and negative inputs are checked against the contract directly."""
    dtype = ml_type("float8_e8m0fnu")
    floor, ceil = r.encode("e8m0_floor", x), r.encode("e8m0_ceil", x)
    a = np.abs(x.astype(np.float64))
    rng_ = (x > 0) & (a >= 2.0**-127) & (a <= 2.0**127)
    xs, fl, ce = x[rng_], floor[rng_].astype(np.int64), ceil[rng_].astype(np.int64)
    lo = np.ldexp(1.0, fl - 127)
    bracket = (lo <= xs) & (xs < 2 * lo) & ((ce == fl) & (xs == lo) | (ce == fl + 1) & (xs > lo))
    if not bracket.all():
        i = np.nonzero(~bracket)[0][0]
        r.failures.append(f"e8m0 {name}: floor/ceil 0x{int(fl[i]):02x}/0x{int(ce[i]):02x} do not bracket "
                          f"{float(xs[i])!r}")
    ml = xs >= 2.0**-126
    want = np.where(xs >= 1.5 * lo, ce, fl)[ml].astype(np.uint8)
    n = r.expect_equal(f"e8m0 {name} vs ml_dtypes nearest", xs[ml], want,
                       xs[ml].astype(dtype).view(np.uint8))
    nan, inf, zero = np.isnan(x), np.isinf(x), x == 0
    for what, m, code in (("NaN", nan, 0xFF), ("Inf", inf, 0xFE), ("zero", zero, 0x00)):
        for label, got in (("floor", floor), ("ceil", ceil)):
            r.expect_equal(f"e8m0_{label} {name} {what}", x[m], got[m], np.full(int(m.sum()), code, np.uint8))
    neg = (x < 0) & ~inf  # sign ignored: same codes as |x|
    r.expect_equal(f"e8m0_floor {name} negative", x[neg], floor[neg], r.encode("e8m0_floor", -x[neg]))
    r.expect_equal(f"e8m0_ceil {name} negative", x[neg], ceil[neg], r.encode("e8m0_ceil", -x[neg]))
    return n


def check_decode(r):
    for fmt, (tname, _, _), n in [(f, ELEMENT_FORMATS[f], c) for f, c in
                                  (("e4m3", 256), ("e5m2", 256), ("e2m1", 16), ("e2m3", 64), ("e3m2", 64))] + \
            [("e8m0_floor", ("float8_e8m0fnu", 0, 0), 256)]:
        ours = r.decode(fmt)
        want = np.arange(n, dtype=np.uint8).view(ml_type(tname)).astype(np.float32)
        same = (f32_bits(ours) == f32_bits(want)) | (np.isnan(ours) & np.isnan(want))
        if ours.size != n or not same.all():
            bad = np.nonzero(~same)[0][:5] if ours.size == n else []
            r.failures.append(f"decode {fmt}: codes {[hex(int(c)) for c in bad]} differ "
                              f"(ours {ours[bad] if len(bad) else ours.size}, ml_dtypes {want[bad]})")
    print(f"decode: every code of e4m3, e5m2 (256), e2m1 (16), e2m3, e3m2 (64), e8m0 (256) vs ml_dtypes")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--codec-dump", required=True, help="path of the codec_dump executable")
    args = ap.parse_args()
    print(f"numpy {np.__version__}, ml_dtypes {ml_dtypes.__version__}")
    with tempfile.TemporaryDirectory() as tmp, np.errstate(invalid="ignore", over="ignore"):
        r = Runner(args.codec_dump, tmp)
        for name, x in input_sets().items():
            parts = []
            for fmt in ELEMENT_FORMATS:
                n, n_sat, n_nan = check_element(r, fmt, name, x)
                parts.append(f"{fmt} {n}")
            parts.append(f"ue4m3 {check_ue4m3(r, name, x)}")
            parts.append(f"e8m0 {check_e8m0(r, name, x)}")
            print(f"{name}: {x.size} inputs ({int(np.isnan(x).sum())} NaN, "
                  f"{int(np.isinf(x).sum())} Inf); compared with ml_dtypes: " + ", ".join(parts))
        check_decode(r)
    if r.failures:
        print("FAILED:\n  " + "\n  ".join(r.failures), file=sys.stderr)
        return 1
    print("ml_dtypes oracle: all agree")
    return 0


if __name__ == "__main__":
    sys.exit(main())
