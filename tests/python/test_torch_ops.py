"""blockscale.torch (the GPU kernels on torch CUDA tensors) against the emulator and fp64 references.

- quantize: the codes and the scales (in the GEMM layout: blockscale.gemm_scales) byte for byte
  the emulator's, blockscale.quantize, on the same input copied to numpy; random and adversarial
  inputs (NaN, Inf, zeros, the largest magnitudes, subnormals), odd shapes, every input dtype.
- GEMMs (dense, M- and K-grouped): within the error bound tests/gemm/gemm_test.cpp derives for FP8
  blockwise, against an fp64 product of the dequantized operands:
      ||D - D_ref||_F <= (8 * 2^-13 + (K/128 + 5) * 2^-24) ||abs||_F + 1.01 * u_out * ||D_ref||_F
  abs = |A| |B|^T (the dequantized operands' magnitudes), u_out = 2^-8 (bf16 D) or 2^-24 (fp32).
- errors: a wrong device, dtype, shape or stride raises ValueError naming the argument.
- Linear / GroupedLinear forward and backward against fp64 products of the same quantized operands.

Needs torch, a CUDA GPU and blockscale._cuda (a CUDA build); without them the GPU tests skip.
The tests of the first section need no GPU. Run:
    PYTHONPATH=<build>/python python3 -m pytest tests/python/test_torch_ops.py -q
"""
import os
import subprocess
import sys

if __name__ == "__main__":  # ctest: 77 (skipped) without pytest; pytest itself skips the GPU tests
    try:
        import pytest
    except ImportError:
        print("test_torch_ops: pytest is not installed; skipped")
        sys.exit(77)
    sys.exit(pytest.main([__file__, "-q", "-rs", "-p", "no:cacheprovider"]))

import numpy as np
import pytest

import blockscale

try:
    from blockscale import _cuda
except ImportError:
    _cuda = None
try:
    import torch
except ImportError:
    torch = None

HAVE_GPU = torch is not None and torch.cuda.is_available() and _cuda is not None
needs_cuda_module = pytest.mark.skipif(_cuda is None, reason="blockscale._cuda not built (a build without CUDA)")
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs torch, a CUDA GPU and blockscale._cuda")
if HAVE_GPU:
    import blockscale.torch as bst


# ---- without a GPU --------------------------------------------------------------------------

def test_import_blockscale_does_not_import_torch():
    code = "import sys, blockscale; assert 'torch' not in sys.modules, 'blockscale imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ))


@needs_cuda_module
def test_cuda_module_refuses_host_arrays():
    x = np.zeros((4, 128), np.float32)
    with pytest.raises(ValueError, match=r"^x: must be a CUDA tensor \(got one on cpu\)"):
        _cuda.quantize(x, "fp8_block128", "rowwise", "ceil", False, False, None, 0, False,
                       None, None, None, None, None, None, None, 0)
    with pytest.raises(ValueError, match=r"^a_data: must be a CUDA tensor"):
        _cuda.gemm(np.zeros((4, 128), np.uint8), np.zeros(4, np.float32), "fp8_block128",
                   np.zeros((4, 128), np.uint8), np.zeros(4, np.float32), "fp8_block128x128",
                   np.zeros((4, 4), np.float32), None, 1.0, 0.0, None, None, None, 0)


@needs_cuda_module
def test_quantized_sizes_need_no_gpu():
    s = _cuda.quantized_sizes("fp8_block128", 256, 512, "both")
    assert s["rowwise_data"] == 256 * 512 and s["columnwise_data"] == 512 * 256
    assert s["rowwise_scales"] == 4 * 256 * 4 and s["scale_dtype"] == "float32"
    g = _cuda.quantized_sizes("fp8_block128", 300, 256, "both", num_groups=4)
    assert g["capacity"] >= 300 and g["capacity"] % 128 == 0
    with pytest.raises(ValueError, match=r"^format: 'fp9' is not one of"):
        _cuda.quantized_sizes("fp9", 4, 4)
    assert isinstance(_cuda.gpu_status(), str)


@needs_cuda_module
def test_argument_checks_without_a_gpu():
    # Arrays that claim to be on a GPU (DLPack, no memory): every check runs before any launch.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from fake_cuda_array import FakeCudaArray as F

    def quantize(x, rd=None, rs=None):
        return _cuda.quantize(x, "fp8_block128", "rowwise", "ceil", False, False, None, 0, False,
                              rd, rs, None, None, None, None, None, 0)

    def gemm(a, b, d, c=None, beta=0.0, a_s=None, b_s=None):
        return _cuda.gemm(a, a_s if a_s is not None else F((1024,)), "fp8_block128", b,
                          b_s if b_s is not None else F((64,)), "fp8_block128x128", d, c, 1.0, beta,
                          None, None, None, 0)

    cases = [
        (lambda: quantize(F((4, 128), "int64")), r"x: dtype must be bfloat16 or float16 or float32 \(got int64\)"),
        (lambda: quantize(F((4, 128), strides=(256, 2))), r"x: the last dimension must be contiguous"),
        (lambda: quantize(F((4, 128), strides=(64, 1))), r"x: row stride \(64\) must be >= its columns \(128\)"),
        (lambda: quantize(F((4, 128))), r"rowwise_data: required \(got None\)"),
        (lambda: quantize(F((4, 128)), F((2, 128), "uint8"), F((4,))),
         r"rowwise_data: holds 256 bytes, needs 512 \(quantized_sizes\)"),
        (lambda: quantize(F((4, 128)), F((4, 128), "uint8", device=1), F((4,))),
         r"rowwise_data: is on cuda:1, must be on x's device cuda:0"),
        (lambda: quantize(F((4, 128)), F((4, 128), "uint8"), F((16,), "uint8")),
         r"rowwise_scales: dtype must be float32 \(got uint8\)"),
        (lambda: quantize(F((4, 128)), F((4, 128), "uint8"), F((4,), cpu=True)),
         r"rowwise_scales: must be a CUDA tensor \(got one on cpu\)"),
        (lambda: gemm(F((128, 256), "uint8"), F((128, 384), "uint8"), F((128, 128))),
         r"b_data: columns \(384\) must equal a_data's columns \(256\)"),
        (lambda: gemm(F((128, 256), "uint8"), F((128, 256), "uint8"), F((128, 64))),
         r"d: shape \(128, 64\) must be \(128, 128\)"),
        (lambda: gemm(F((128, 256), "uint8"), F((128, 256), "uint8"), F((128, 128), "float16")),
         r"d: dtype must be bfloat16 or float32 \(got float16\)"),
        (lambda: gemm(F((128, 256), "uint8"), F((128, 256), "uint8"), F((128, 128)), beta=1.0),
         r"c: required when beta is 1"),
        (lambda: gemm(F((128, 256), "uint8"), F((128, 256), "uint8"), F((128, 128)), a_s=F((8,))),
         r"a_scales: holds 32 bytes, needs 1024"),
        (lambda: _cuda.grouped_gemm("m", F((128, 256), "uint8"), F((1024,)), "fp8_block128", F((128, 256), "uint8"),
                                    F((64,)), "fp8_block128x128", F((2,), "int32"), F((128, 128)), None, 1.0, 0.0,
                                    None, None, 0),
         r"b_data: must have 3 dimensions \(got shape \(128, 256\)\)"),
        (lambda: _cuda.grouped_gemm("m", F((128, 256), "uint8"), F((1024,)), "fp8_block128", F((3, 128, 256), "uint8"),
                                    F((64,)), "fp8_block128x128", F((2,), "int32"), F((128, 128)), None, 1.0, 0.0,
                                    None, None, 0),
         r"b_data: experts \(3, dimension 0\) must equal group_ends' length \(2\)"),
        (lambda: _cuda.grouped_gemm("x", F((1,), "uint8"), None, "", None, None, "", None, None, None, 1.0, 0.0,
                                    None, None, 0), r"mode: 'x' is not one of m \(fprop, dgrad\), k \(wgrad\)"),
        (lambda: _cuda.quantize_batched(F((300, 128)), 7, "fp8_block128x128", "rowwise", "ceil", False, None, None,
                                        None, None, 0), r"batches: must be >= 1 and divide x's rows \(300\), got 7"),
        (lambda: _cuda.quantize_batched(F((300, 128)), 3, "fp8_block128", "rowwise", "ceil", False, None, None,
                                        None, None, 0), r"problem.matrix.recipe: batched quantize takes fp8_block128x128"),
        (lambda: _cuda.grouped_gemm("k", F((128, 256), "uint8"), None, "fp8_block128", None, None, "fp8_block128",
                                    None, None, None, 1.0, 0.0, None, None, 0), r"b_data: required \(got None\)"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match="^" + message):
            call()
    if _cuda.gpu_status():  # no GPU: arguments that all pass stop at the device, never launch
        with pytest.raises(RuntimeError, match="cannot use cuda:0"):
            quantize(F((4, 128)), F((4, 128), "uint8"), F((4,)))


# ---- quantize: the emulator's bytes -----------------------------------------------------------

def _inputs():
    rng = np.random.default_rng(7)
    scaled = rng.standard_normal((256, 512)) * np.exp(rng.uniform(-8, 8, (256, 1)))
    adversarial = rng.standard_normal((130, 250)).astype(np.float32)
    adversarial[0, 3] = np.nan
    adversarial[1, 100] = np.inf
    adversarial[2, 7] = -np.inf
    adversarial[5, :] = 0.0                                  # an all-zero row (and blocks)
    adversarial[7, :40] = np.finfo(np.float32).max           # the largest magnitudes
    adversarial[8, :40] = -np.finfo(np.float32).max
    adversarial[9, :] = 1e-41                                # subnormals only
    adversarial[64:80, 128:] = 0.0                           # an all-zero 16x16 / 1x128 region
    return {
        "random": scaled.astype(np.float32),
        "adversarial": adversarial,
        "tiny": rng.standard_normal((1, 1)).astype(np.float32),
        "odd": rng.standard_normal((33, 70)).astype(np.float32),
        "odd_128": rng.standard_normal((129, 131)).astype(np.float32),
        "zeros": np.zeros((32, 64), np.float32),
    }


_CASES = [  # (format, options for both sides)
    ("fp8_block128", {}),
    ("fp8_block128", {"pow2": True}),
    ("fp8_block128x128", {}),
    ("fp8_block128x128", {"pow2": True}),
    ("mxfp8", {}),
    ("mxfp8", {"rounding": "floor"}),
    ("mxfp8_e5m2", {}),
    ("mxfp4", {}),
    ("nvfp4", {}),
    ("nvfp4", {"block_2d": True}),
    ("nvfp4", {"sr_seed": 1234}),
]


def _check_copy(op, q, what):
    got = op.data.cpu().numpy()
    assert got.shape == q.data.shape, f"{what}: data shape {got.shape}, emulator {q.data.shape}"
    bad = np.argwhere(got != q.data)
    assert bad.size == 0, f"{what}: {len(bad)} code bytes differ, first at {bad[0]}: {got[tuple(bad[0])]} vs " \
                          f"{q.data[tuple(bad[0])]}"
    got_s = op.scales.cpu().contiguous().view(torch.uint8).numpy()
    want_s = blockscale.gemm_scales(q)
    assert got_s.shape == want_s.shape, f"{what}: {got_s.size} scale bytes, emulator {want_s.size}"
    bad = np.flatnonzero(got_s != want_s)
    assert bad.size == 0, f"{what}: {bad.size} scale bytes differ, first at byte {bad[0]}"
    if q.format == "nvfp4":
        assert np.float32(op.scale_dec.item()).tobytes() == np.float32(q.global_scale).tobytes(), \
            f"{what}: tensor scale {op.scale_dec.item()} vs emulator {q.global_scale}"


@needs_gpu
@pytest.mark.parametrize("name", list(_inputs()))
@pytest.mark.parametrize("fmt,opts", _CASES, ids=[f"{f}-{'-'.join(map(str, o.values())) or 'default'}" for f, o in _CASES])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_quantize_matches_emulator(name, fmt, opts, dtype):
    x = torch.from_numpy(_inputs()[name]).to("cuda", getattr(torch, dtype))
    gq = bst.quantize(x, fmt, direction="both", **opts)
    ref = blockscale.quantize(x.float().cpu().numpy(), fmt, direction="both", **opts)  # bf16 / fp16 widen exactly
    _check_copy(gq.rowwise, ref[0], f"{fmt} {name} {dtype} rowwise")
    _check_copy(gq.columnwise, ref[1], f"{fmt} {name} {dtype} columnwise")


@needs_gpu
@pytest.mark.parametrize("direction", ["rowwise", "columnwise"])
def test_quantize_one_direction_and_wrappers(direction):
    x = torch.from_numpy(_inputs()["random"]).cuda()
    ref = blockscale.quantize(x.cpu().numpy(), "fp8_block128", direction=direction)
    _check_copy(bst.quantize_fp8_block(x, block="1x128", direction=direction)._one(), ref, "fp8 1x128")
    ref = blockscale.quantize(x.cpu().numpy(), "mxfp8", direction=direction)
    _check_copy(bst.quantize_mxfp8(x, direction=direction)._one(), ref, "mxfp8")
    ref = blockscale.quantize(x.cpu().numpy(), "nvfp4", direction=direction)
    _check_copy(bst.quantize_nvfp4(x, direction=direction)._one(), ref, "nvfp4")


@needs_gpu
def test_quantize_nvfp4_rht_and_rank3():
    x = torch.from_numpy(_inputs()["random"]).cuda()
    gq = bst.quantize_nvfp4(x, direction="both", rht=True)
    ref = blockscale.quantize(x.cpu().numpy(), "nvfp4", direction="both", rht=True)
    _check_copy(gq.columnwise, ref[1], "nvfp4 rht columnwise")
    x3 = x.reshape(4, 64, 512)
    gq = bst.quantize_fp8_block(x3)
    assert gq.shape == (4, 64, 512)
    _check_copy(gq.rowwise, blockscale.quantize(x3.cpu().numpy(), "fp8_block128"), "rank 3")


@needs_gpu
def test_quantize_on_a_side_stream_and_strided_rows():
    x = torch.from_numpy(_inputs()["random"]).cuda()
    wide = torch.zeros((256, 640), device="cuda")
    wide[:, :512] = x
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # wide was written on the default stream
    with torch.cuda.stream(s):
        gq = bst.quantize_fp8_block(wide[:, :512])  # row stride 640: read in place, no copy
    s.synchronize()
    _check_copy(gq.rowwise, blockscale.quantize(x.cpu().numpy(), "fp8_block128"), "strided rows")


@needs_gpu
@pytest.mark.parametrize("fmt,n", [("fp8_block128x128", 256), ("fp8_block128x128", 100), ("mxfp8", 128),
                                   ("mxfp8", 96), ("nvfp4", 128)])
def test_quantize_experts_matches_one_by_one(fmt, n):
    # One batched launch (fp8_block128x128; MX with n % 128 == 0) or one per expert: the same bytes.
    w = _random((3, n, 256), 13)
    both = bst.quantize_experts(w, fmt, direction="both")
    for g in range(3):
        ref = blockscale.quantize(w[g].cpu().numpy(), fmt, direction="both")
        for copy, r in (("rowwise", ref[0]), ("columnwise", ref[1])):
            op = getattr(both, copy)
            dec = None if op.scale_dec is None else op.scale_dec[g:g + 1]
            _check_copy(bst.Operand(fmt, op.data[g], op.scales[g], dec), r, f"{fmt} expert {g} {copy}")


# ---- GEMMs --------------------------------------------------------------------------------------

def _deq(op):
    return bst.dequantize(op).double()


def _assert_within_bound(d, a, b, what, fp8_block=True):
    """d (GPU) against the fp64 product of the dequantized operands a [m, k], b [n, k] (torch fp64).
    fp8_block=False: the MX / NVFP4 kernels' bound (exact products, bf16 tensor-core accumulation:
    tests/gemm/gemm_block_scaled_test.cpp), far tighter than FP8 blockwise's."""
    ref = a @ b.T
    absolute = a.abs() @ b.abs().T
    u_out = 2.0 ** -8 if d.dtype == torch.bfloat16 else 2.0 ** -24
    k = a.shape[1]
    accumulation = 8 * 2.0 ** -13 + (k / 128 + 5) * 2.0 ** -24 if fp8_block else 2 * (k / 16 + 4) * 2.0 ** -23 + 4 * 2.0 ** -24
    bound = accumulation * absolute.norm() + 1.01 * u_out * ref.norm()
    err = (d.double() - ref).norm()
    assert torch.isfinite(d).all(), f"{what}: non-finite outputs"
    assert err <= bound, f"{what}: ||D - ref|| = {err:.3e} above the bound {bound:.3e} (||ref|| {ref.norm():.3e})"


def _random(shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).cuda()


@needs_gpu
@pytest.mark.parametrize("m,n,k", [(256, 384, 512), (100, 200, 256), (1, 128, 128), (520, 264, 1024)])
@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
def test_fp8_gemm_within_bound(m, n, k, out_dtype):
    x, w = _random((m, k), 1), _random((n, k), 2)
    xq, wq = bst.quantize_fp8_block(x, "1x128"), bst.quantize_fp8_block(w, "128x128")
    d = bst.fp8_gemm(xq, wq, out_dtype=getattr(torch, out_dtype))
    assert d.shape == (m, n) and d.dtype == getattr(torch, out_dtype)
    _assert_within_bound(d, _deq(xq.rowwise), _deq(wq.rowwise), f"fprop {m}x{n}x{k}")
    # wgrad's pair (both 1x128), alpha and accumulation into an fp32 D
    yq = bst.quantize_fp8_block(w, "1x128")
    acc = torch.ones((m, n), device="cuda")
    bst.fp8_gemm(xq, yq, out=acc, accumulate=True, alpha=0.5)
    want = 1.0 + 0.5 * (_deq(xq.rowwise) @ _deq(yq.rowwise).T)
    assert (acc.double() - want).norm() <= 1e-3 * want.norm()


@needs_gpu
def test_fp8_grouped_gemms_with_empty_and_one_row_experts():
    counts = [0, 1, 130, 125]  # an empty expert, a 1-row expert, one past a 128 block
    k, n = 256, 128
    tokens = sum(counts)
    ends = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
    x, w = _random((tokens, k), 3), _random((len(counts), n, k), 4)
    xq = bst.quantize_grouped(x, ends, "fp8_block128", direction="both")
    wq = bst.quantize_experts(w, "fp8_block128x128")
    y = bst.fp8_grouped_gemm(xq.rowwise, wq, ends, mode="m", out_dtype=torch.float32)
    assert y.shape == (tokens, n)
    xd = _deq(xq.rowwise)
    start = 0
    for g, c in enumerate(counts):
        if c:
            _assert_within_bound(y[start:start + c], xd[start:start + c], _deq(bst.Operand(
                wq.format, wq.rowwise.data[g], wq.rowwise.scales[g])), f"M-grouped expert {g}")
        start += c
    # K-grouped (wgrad): dW_g = dY_g^T X_g over each expert's tokens, padded to 128
    dy = _random((tokens, n), 5)
    dyq = bst.quantize_grouped(dy, ends, "fp8_block128", direction="both")
    padded = dyq.padded_group_ends.cpu().tolist()
    assert padded == list(np.cumsum([-(-c // 128) * 128 for c in counts]))
    assert torch.equal(xq.padded_group_ends, dyq.padded_group_ends)
    dw = bst.fp8_grouped_gemm(dyq.columnwise, xq.columnwise, dyq.padded_group_ends, mode="k", out_dtype=torch.float32)
    assert dw.shape == (len(counts), n, k)
    a, b = _deq(dyq.columnwise), _deq(xq.columnwise)
    lo = 0
    for g, hi in enumerate(padded):
        if hi == lo:
            assert (dw[g] == 0).all(), f"K-grouped expert {g} without tokens: D must be 0"
        else:
            _assert_within_bound(dw[g], a[:, lo:hi], b[:, lo:hi], f"K-grouped expert {g}")
        lo = hi


# ---- errors: ValueError naming the argument, before any launch ----------------------------------

@needs_gpu
def test_errors_name_the_argument():
    x = _random((128, 256), 6)
    xq, wq = bst.quantize_fp8_block(x), bst.quantize_fp8_block(_random((128, 384), 7), "128x128")
    with pytest.raises(ValueError, match=r"^x: must be a CUDA tensor \(got one on cpu\)"):
        bst.quantize_fp8_block(x.cpu())
    with pytest.raises(ValueError, match=r"^x: dtype must be bfloat16 or float16 or float32 \(got int32\)"):
        bst.quantize_fp8_block(x.int())
    with pytest.raises(ValueError, match=r"^x: the last dimension must be contiguous"):
        bst.quantize_fp8_block(x[:, ::2])
    with pytest.raises(ValueError, match=r"^block: "):
        bst.quantize_fp8_block(x, block="1x64")
    with pytest.raises(ValueError, match=r"^b_data: columns \(384\) must equal a_data's columns \(256\)"):
        bst.fp8_gemm(xq, wq)
    wq = bst.quantize_fp8_block(_random((128, 256), 8), "128x128")
    with pytest.raises(ValueError, match=r"^d: dtype must be bfloat16 or float32 \(got float16\)"):
        bst.fp8_gemm(xq, wq, out_dtype=torch.float16)
    with pytest.raises(ValueError, match=r"^d: shape \(128, 64\) must be \(128, 128\)"):
        bst.fp8_gemm(xq, wq, out=torch.empty((128, 64), device="cuda", dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"^a_scales: must be a CUDA tensor"):
        bst.fp8_gemm(bst.Operand(xq.format, xq.data, xq.scales.cpu()), wq)
    with pytest.raises(ValueError, match=r"^a_scales: holds \d+ bytes, needs \d+"):
        bst.fp8_gemm(bst.Operand(xq.format, xq.data, xq.scales[:3]), wq)
    with pytest.raises(ValueError, match=r"^a: an FP8 blockwise operand"):
        bst.fp8_gemm(bst.quantize_mxfp8(x), wq)
    with pytest.raises(ValueError, match=r"^out: required with accumulate=True"):
        bst.fp8_gemm(xq, wq, accumulate=True)
    with pytest.raises(ValueError, match=r"^k: must be a positive multiple of 128"):
        bst.fp8_gemm(bst.quantize_fp8_block(_random((4, 200), 9)), bst.quantize_fp8_block(_random((4, 200), 9), "128x128"))
    ends = torch.tensor([64, 128], device="cuda")
    with pytest.raises(ValueError, match=r"^group_ends: dtype must be int32 \(got int64\)"):
        bst.quantize_grouped(x, ends)
    wq2 = bst.quantize_experts(_random((3, 128, 256), 10))
    with pytest.raises(ValueError, match=r"^b_data: experts \(3, dimension 0\) must equal group_ends' length \(2\)"):
        bst.fp8_grouped_gemm(xq, wq2, ends.int())


@needs_gpu
@pytest.mark.skipif(not HAVE_GPU or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_error_on_mixed_devices():
    xq = bst.quantize_fp8_block(_random((128, 256), 11))
    wq = bst.quantize_fp8_block(_random((128, 256), 12).to("cuda:1"), "128x128")
    with pytest.raises(ValueError, match=r"^b_data: is on cuda:1, must be on a_data's device cuda:0"):
        bst.fp8_gemm(xq, wq)


# ---- Linear, GroupedLinear ------------------------------------------------------------------------

# The operands each recipe's layers quantize (blockscale._torch_linear's table): the tests
# quantize them again, with the layer's stochastic-rounding key (nvfp4: its seed, call 0).
def _recipe_operands(recipe, layer):
    f = blockscale._torch_linear._FORMATS[recipe]
    dy_options = {"rht": True, "sr_seed": layer._sr.seed, "sr_offset": 0} if f.sr else {}
    return f, {"rht": True} if f.wgrad_rht else {}, dy_options


RECIPES = ["fp8_block", "mxfp8", "nvfp4"]
# Against the unquantized fp32 layer: each format's own error (two operands quantized), not a wrong one.
NEAR_FP32 = {"fp8_block": 0.1, "mxfp8": 0.1, "nvfp4": 0.25}


@needs_gpu
@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("tokens", [256, 200])  # 200: padded to 256 inside
def test_linear_forward_backward(recipe, tokens):
    torch.manual_seed(0)
    layer = bst.Linear(256, 384, bias=False, recipe=recipe, device="cuda")
    x = torch.randn(tokens, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = layer(x)
    assert y.shape == (tokens, 384) and y.dtype == torch.bfloat16
    dy = torch.randn(tokens, 384, device="cuda", dtype=torch.bfloat16)
    y.backward(dy)
    assert x.grad.shape == x.shape and x.grad.dtype == torch.bfloat16
    assert layer.weight.grad.shape == (384, 256) and layer.weight.grad.dtype == torch.float32

    # The same quantized operands (the kernels are deterministic), multiplied in fp64 by torch.
    f, x_options, dy_options = _recipe_operands(recipe, layer)
    fp8 = recipe == "fp8_block"
    pad = lambda t: torch.nn.functional.pad(t, (0, 0, 0, -tokens % 128))
    xq = bst.quantize(pad(x.detach()), f.x, direction="both", **x_options)
    wq = bst.quantize(layer.weight.detach(), f.w, direction="both", **f.w_options)
    dyq = bst.quantize(pad(dy), f.dy, direction="both", **dy_options)
    _assert_within_bound(pad(y.detach()), _deq(xq.rowwise), _deq(wq.rowwise), f"{recipe} Linear fprop", fp8)
    _assert_within_bound(pad(x.grad), _deq(dyq.rowwise), _deq(wq.columnwise), f"{recipe} Linear dgrad", fp8)
    _assert_within_bound(layer.weight.grad, _deq(dyq.columnwise), _deq(xq.columnwise), f"{recipe} Linear wgrad", fp8)

    # And near the unquantized fp32 layer (the format's error, not a wrong operand).
    ref = x.detach().float() @ layer.weight.detach().T
    assert (y.float() - ref).norm() <= NEAR_FP32[recipe] * ref.norm()
    wgrad = dy.float().T @ x.detach().float()
    assert (layer.weight.grad - wgrad).norm() <= 2 * NEAR_FP32[recipe] * wgrad.norm()
    torch.optim.SGD(layer.parameters(), lr=0.1).step()  # the grads feed a torch optimizer


@needs_gpu
def test_linear_bias_recipes_and_errors():
    torch.manual_seed(1)
    fp8 = bst.Linear(128, 256, device="cuda")
    ref = bst.Linear(128, 256, recipe="bf16", device="cuda")
    ref.load_state_dict(fp8.state_dict())
    x = torch.randn(2, 64, 128, device="cuda")
    a, b = fp8(x), ref(x)
    assert a.shape == b.shape == (2, 64, 256)
    assert (a.float() - b.float()).norm() <= 0.1 * b.float().norm()
    with pytest.raises(ValueError, match=r"^in_features: must be a positive multiple of 128"):
        bst.Linear(100, 128)
    with pytest.raises(ValueError, match=r"^recipe: 'fp4' is not one of"):
        bst.Linear(128, 128, recipe="fp4")


@needs_gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_grouped_linear_forward_backward(recipe):
    torch.manual_seed(2)
    counts = torch.tensor([0, 1, 130, 125], device="cuda")
    layer = bst.GroupedLinear(4, 256, 128, recipe=recipe, device="cuda")
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = layer(x, counts)
    dy = torch.randn_like(y)
    y.backward(dy)
    assert y.shape == (256, 128) and x.grad.shape == x.shape and layer.weight.grad.shape == (4, 128, 256)
    f, x_options, dy_options = _recipe_operands(recipe, layer)
    fp8 = recipe == "fp8_block"
    ends = torch.cumsum(counts, 0, dtype=torch.int32)
    xq = bst.quantize_grouped(x.detach(), ends, f.x, **x_options)
    dyq = bst.quantize_grouped(dy, ends, f.dy, **dy_options)
    wq = bst.quantize_experts(layer.weight.detach(), f.w, direction="both", **f.w_options)
    start = 0
    for g, c in enumerate(counts.tolist()):
        w_row = bst.Operand(f.w, wq.rowwise.data[g], wq.rowwise.scales[g],
                            None if wq.rowwise.scale_dec is None else wq.rowwise.scale_dec[g:g + 1])
        w_col = bst.Operand(f.w, wq.columnwise.data[g], wq.columnwise.scales[g],
                            None if wq.columnwise.scale_dec is None else wq.columnwise.scale_dec[g:g + 1])
        if c:
            rows = slice(start, start + c)
            _assert_within_bound(y.detach()[rows], _deq(xq.rowwise)[rows], _deq(w_row), f"{recipe} fprop expert {g}",
                                 fp8)
            _assert_within_bound(x.grad[rows], _deq(dyq.rowwise)[rows], _deq(w_col), f"{recipe} dgrad expert {g}", fp8)
        start += c
    lo = 0
    for g, hi in enumerate(dyq.padded_group_ends.tolist()):
        if hi == lo:
            assert (layer.weight.grad[g] == 0).all()
        else:
            _assert_within_bound(layer.weight.grad[g], _deq(dyq.columnwise)[:, lo:hi], _deq(xq.columnwise)[:, lo:hi],
                                 f"{recipe} wgrad expert {g}", fp8)
        lo = hi


@needs_gpu
def test_grouped_linear_bf16_recipe():
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip(f"torch {torch.__version__} has no torch._grouped_mm")
    torch.manual_seed(5)
    counts = torch.tensor([0, 1, 130, 125], device="cuda")
    layer = bst.GroupedLinear(4, 256, 128, recipe="bf16", device="cuda")
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    y = layer(x, counts)
    dy = torch.randn_like(y)
    y.backward(dy)
    assert y.dtype == torch.bfloat16 and layer.weight.grad.dtype == torch.float32
    w16 = layer.weight.detach().to(torch.bfloat16).float()  # the operands bf16 multiplies
    xs, start = x.detach().float(), 0
    close = lambda a, b: (a.float() - b).norm() <= 1e-2 * b.norm() + 1e-6
    for g, c in enumerate(counts.tolist()):
        rows = slice(start, start + c)
        assert close(y.detach()[rows], xs[rows] @ w16[g].T), f"fprop expert {g}"
        assert close(x.grad[rows], dy[rows].float() @ w16[g]), f"dgrad expert {g}"
        assert close(layer.weight.grad[g], dy[rows].float().T @ xs[rows]), f"wgrad expert {g}"
        start += c
    assert (layer.weight.grad[0] == 0).all()  # no tokens, no gradient
    with pytest.raises(ValueError, match=r"^recipe: 'fp4' is not one of fp8_block, mxfp8, nvfp4, bf16"):
        bst.GroupedLinear(4, 256, 128, recipe="fp4")
    with pytest.raises(ValueError, match=r"^in_features: must be a positive multiple of 128 for the nvfp4 recipe"):
        bst.GroupedLinear(4, 200, 128, recipe="nvfp4")
    with pytest.raises(ValueError, match=r"^block_2d: 16x16 blocks are NVFP4's, not mxfp8's"):
        bst.quantize_experts(layer.weight.detach(), "mxfp8", block_2d=True)


@needs_gpu
@pytest.mark.parametrize("grouped", [False, True])
def test_layers_requantize_the_weight_only_when_it_changes(grouped):
    torch.manual_seed(3)
    counts = torch.tensor([128, 0, 64, 64], device="cuda")
    make = (lambda: bst.GroupedLinear(4, 256, 128, device="cuda")) if grouped else \
        (lambda: bst.Linear(256, 128, bias=False, device="cuda"))
    layer = make()
    run = (lambda l, x: l(x, counts)) if grouped else (lambda l, x: l(x))
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    with torch.no_grad():
        y_eval = run(layer, x)  # first call under no_grad: the rowwise copy only, nothing saved
    assert layer._wq._direction == "rowwise"
    y0 = run(layer, x)
    assert layer._wq._direction == "both" and torch.equal(y_eval, y0)
    cached = layer._wq._value
    y1 = run(layer, x)
    assert layer._wq._value is cached and torch.equal(y0, y1)  # no change: the same FP8 copies
    with torch.no_grad():
        run(layer, x)  # needs the rowwise copy only: the cached pair serves it
    assert layer._wq._value is cached
    y1.float().square().mean().backward()
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-2)
    opt.step()  # in place on the parameter: its version counter moves
    y2 = run(layer, x)
    assert layer._wq._value is not cached and not torch.equal(y1, y2)
    fresh = make()
    fresh.weight.data.copy_(layer.weight.detach())
    fresh.weight_changed()
    assert torch.equal(y2, run(fresh, x))  # the cache holds the updated weight's bytes
    layer.weight.data.mul_(2)  # through .data the version counter stays: weight_changed() is the rule
    layer.weight_changed()
    fresh.weight.data.copy_(layer.weight.detach())
    fresh.weight_changed()
    assert torch.equal(run(layer, x), run(fresh, x))
    # The functional linear() quantizes the weight it is given on every call: the same bytes.
    if not grouped:
        assert torch.equal(run(layer, x), bst.linear(x, layer.weight))


@needs_gpu
@pytest.mark.parametrize("grouped", [False, True])
def test_layers_in_cuda_graphs(grouped):
    """Captured in a CUDA graph: no host synchronisation breaks the capture, replays see the
    weight's in-place updates (the weight is quantized inside the graph), and
    make_graphed_callables' forward + backward give the eager layer's outputs and gradients."""
    torch.manual_seed(4)
    counts = torch.tensor([100, 0, 92, 64], device="cuda")
    make = (lambda: bst.GroupedLinear(4, 256, 128, device="cuda")) if grouped else \
        (lambda: bst.Linear(256, 128, bias=False, device="cuda"))
    run = (lambda l, x: l(x, counts)) if grouped else (lambda l, x: l(x))
    layer = make()
    x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the capture, as torch asks
        for _ in range(2):
            run(layer, x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = run(layer, x)
    graph.replay()
    assert torch.equal(y, run(layer, x))
    with torch.no_grad():
        layer.weight.mul_(-0.5)  # an optimizer-like in-place update between replays
    graph.replay()
    assert torch.equal(y, run(layer, x))

    eager, graphed_layer = make(), make()
    graphed_layer.load_state_dict(eager.state_dict())
    xg = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    args = (xg, counts) if grouped else (xg,)
    graphed = torch.cuda.make_graphed_callables(graphed_layer, args)
    dy = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    xe = xg.detach().clone().requires_grad_(True)
    ye = run(eager, xe)
    ye.backward(dy)
    yg = graphed(xg, counts) if grouped else graphed(xg)
    yg.backward(dy)
    assert torch.equal(ye, yg) and torch.equal(xe.grad, xg.grad)
    assert torch.equal(eager.weight.grad, graphed_layer.weight.grad)


@needs_gpu
@pytest.mark.parametrize("grouped", [False, True])
def test_layers_under_torch_compile(grouped):
    """torch.compile around the layers: blockscale's ops call into blockscale._cuda, which dynamo
    does not trace, so they run as graph breaks; the compiled forward + backward give the eager
    layer's outputs and gradients to the bit (x * 2 is exact). Prints dynamo's graph breaks."""
    torch._dynamo.reset()
    torch.manual_seed(6)
    counts = torch.tensor([100, 0, 92, 64], device="cuda")
    make = (lambda: bst.GroupedLinear(4, 256, 128, device="cuda")) if grouped else \
        (lambda: bst.Linear(256, 128, bias=False, device="cuda"))
    eager, compiled_layer = make(), make()
    compiled_layer.load_state_dict(eager.state_dict())
    step = (lambda l, x: l(x * 2, counts)) if grouped else (lambda l, x: l(x * 2))
    compiled = torch.compile(lambda x: step(compiled_layer, x))
    dy = torch.randn(256, 128, device="cuda", dtype=torch.bfloat16)
    xe = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    xc = xe.detach().clone().requires_grad_(True)
    ye = step(eager, xe)
    ye.backward(dy)
    yc = compiled(xc)
    yc.backward(dy)
    assert torch.equal(ye, yc) and torch.equal(xe.grad, xc.grad)
    assert torch.equal(eager.weight.grad, compiled_layer.weight.grad)
    explained = torch._dynamo.explain(lambda x: step(compiled_layer, x))(xc.detach())
    reasons = sorted({str(getattr(b, "reason", b)).splitlines()[0][:120] for b in explained.break_reasons})
    print(f"\n{'GroupedLinear' if grouped else 'Linear'} under torch.compile: {explained.graph_count} graphs, "
          f"{explained.graph_break_count} graph breaks: {reasons}")
