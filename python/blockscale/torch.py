"""blockscale's GPU kernels on torch CUDA tensors: quantize, the dense and grouped GEMMs, Linear.

Every call runs on the current CUDA stream of the input's device, allocates its outputs with
torch (the caching allocator) on that device, and copies nothing: the kernels read the tensors
in place through DLPack (blockscale._cuda). Expert sizes of the grouped (MoE) calls stay on the
device, so nothing here synchronises with the host. Argument errors raise ValueError naming the
argument and the rule; errors of the launch itself raise RuntimeError.

    import torch, blockscale.torch as bst
    x = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(2048, 1024, device="cuda")
    xq = bst.quantize_fp8_block(x, block="1x128")         # codes + fp32 scales in the GEMM layout
    wq = bst.quantize_fp8_block(w, block="128x128")
    y = bst.fp8_gemm(xq, wq)                              # bf16 [512, 2048] = x w^T

Quantized data are uint8 codes (E2M1: two per byte) in the stored orientation (a columnwise copy
of an R x C input is C x R); scales are one flat tensor in the layout the GEMMs read
(blockscale.gemm_scales gives the emulator's bytes in that layout): the bytes of the emulator,
``blockscale.quantize``, on the same input.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

import torch
import torch.utils.dlpack

try:
    from . import _cuda
except ImportError as e:  # a build without CUDA: the emulator (blockscale.quantize) still works
    raise ImportError("blockscale.torch needs blockscale._cuda, which is built only with CUDA "
                      "(python/README.md: building the GPU module)") from e

__all__ = ["Operand", "Quantized", "quantize", "quantize_fp8_block", "quantize_mxfp8", "quantize_nvfp4",
           "quantize_grouped", "quantize_experts", "dequantize", "gemm", "fp8_gemm", "grouped_gemm",
           "fp8_grouped_gemm", "linear", "Linear", "GroupedLinear"]

_MX = ("mxfp8", "mxfp8_e5m2", "mxfp4")
_FP8_BLOCKS = {"1x128": "fp8_block128", "128x128": "fp8_block128x128",
               (1, 128): "fp8_block128", (128, 128): "fp8_block128x128"}


@dataclass(frozen=True)
class Operand:
    """One quantized copy in its stored orientation: what a GEMM takes as A or B.

    data: uint8 [rows, row_bytes] codes (experts: [experts, rows, row_bytes]). scales: flat,
    float32 (FP8 blockwise) or uint8 (MX, NVFP4), in the GEMM layout (experts: [experts, n]).
    scale_dec: NVFP4's fp32 tensor decode scale on the device ([1]; experts: [experts]), else None.
    """

    format: str
    data: torch.Tensor
    scales: torch.Tensor
    scale_dec: Optional[torch.Tensor] = None

    @property
    def rows(self) -> int:
        return self.data.shape[-2]

    @property
    def cols(self) -> int:
        return self.data.shape[-1] * (2 if self.format in ("mxfp4", "nvfp4") else 1)


@dataclass(frozen=True)
class Quantized:
    """The quantized copies of one tensor (x's shape: ``shape``; as a matrix rows x cols).

    rowwise: blocks along x's rows (rows x cols); columnwise: blocks along its columns, stored
    transposed (cols x rows; grouped: cols x capacity, each expert's tokens padded to the block).
    padded_group_ends: the grouped quantize's padded expert ends (int32, device): a K-grouped
    GEMM's group_ends. ``data`` / ``scales`` are those of the one copy there is.
    """

    format: str
    shape: Tuple[int, ...]
    rowwise: Optional[Operand] = None
    columnwise: Optional[Operand] = None
    padded_group_ends: Optional[torch.Tensor] = None

    def _one(self) -> Operand:
        if (self.rowwise is None) == (self.columnwise is None):
            raise ValueError("q: holds both copies; use q.rowwise or q.columnwise")
        return self.rowwise if self.rowwise is not None else self.columnwise

    @property
    def data(self) -> torch.Tensor:
        return self._one().data

    @property
    def scales(self) -> torch.Tensor:
        return self._one().scales

    @property
    def scale_dec(self) -> Optional[torch.Tensor]:
        return self._one().scale_dec


# torch's raw current-stream query (what Triton uses): it skips building a torch.cuda.Stream
# object, which costs more host time than a small kernel takes on the GPU.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(device: torch.device) -> int:
    # A host tensor has no stream: _cuda then refuses it, naming the argument.
    if device.type != "cuda":
        return 0
    if _raw_stream is not None:
        return _raw_stream(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def _tensor(name: str, x) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name}: a torch.Tensor, not {type(x).__name__}")
    # DLPack refuses tensors that require grad; the kernels never take part in autograd directly.
    return x.detach()


def _dl(t: Optional[torch.Tensor]):
    """t as a DLPack capsule for _cuda. torch.utils.dlpack.to_dlpack exports without any stream
    synchronisation, which is what the kernels need (they run on the stream they are given; the
    protocol's t.__dlpack__() would order torch's default stream after the current one, per tensor,
    unless given stream=-1) and is far cheaper than t.__dlpack__(stream=-1), whose Python-side
    stream handling bounded small layers by host time. A host tensor goes as it is, for _cuda to
    refuse with its device error."""
    if t is None or not t.is_cuda:
        return t
    return torch.utils.dlpack.to_dlpack(t)


def _bytes(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """Quantized codes as uint8 (a float8_e4m3fn view of them is accepted)."""
    if t is None or t.dtype == torch.uint8:
        return t
    if t.dtype == getattr(torch, "float8_e4m3fn", None):
        return t.view(torch.uint8)
    return t  # a wrong dtype: _cuda names it


def _matrix(name: str, x) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    x = _tensor(name, x)
    if x.dim() == 0:
        raise ValueError(f"{name}: rank 0 (a scalar) has no block to quantize")
    shape = tuple(x.shape)
    return x.reshape(-1, shape[-1]) if x.dim() != 2 else x, shape


def _alloc_copies(sizes: dict, rows: int, cols: int, direction: str, nvfp4: bool, device, col_rows: int,
                  batches: Optional[int] = None):
    """Outputs of the requested copies, sized by _cuda.quantized_sizes (batches: that many of each,
    stacked along a leading dimension)."""
    lead = () if batches is None else (batches,)
    sdt = torch.float32 if sizes["scale_dtype"] == "float32" else torch.uint8
    item = 4 if sdt == torch.float32 else 1
    out = {}
    for copy, r, c in (("rowwise", rows, cols), ("columnwise", cols, col_rows)):
        if direction not in (copy, "both"):
            continue
        nbytes = sizes[f"{copy}_data"]
        out[f"{copy}_data"] = torch.empty(lead + (r, nbytes // r if r else 0), dtype=torch.uint8, device=device)
        out[f"{copy}_scales"] = torch.empty(lead + (sizes[f"{copy}_scales"] // item,), dtype=sdt, device=device)
        out[f"{copy}_scale_dec"] = torch.empty(1, dtype=torch.float32, device=device) if nvfp4 else None
    return out


def _workspace(nbytes: int, device) -> Optional[torch.Tensor]:
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None


def _outputs(o: dict):
    """The six copy outputs in _cuda's argument order, as capsules (None where not requested)."""
    return [_dl(o.get(f"{c}_{part}")) for c in ("rowwise", "columnwise") for part in ("data", "scales", "scale_dec")]


def _operands(fmt: str, o: dict) -> Tuple[Optional[Operand], Optional[Operand]]:
    def op(copy):
        d = o.get(f"{copy}_data")
        return None if d is None else Operand(fmt, d, o[f"{copy}_scales"], o.get(f"{copy}_scale_dec"))
    return op("rowwise"), op("columnwise")


def quantize(x: torch.Tensor, format: str, *, direction: str = "rowwise", rounding: str = "ceil",
             pow2: bool = False, block_2d: bool = False, sr_seed: Optional[int] = None, sr_offset: int = 0,
             rht: bool = False) -> Quantized:
    """Quantizes x (bf16, fp16 or fp32 CUDA tensor; rank >= 1, as the matrix [prod(shape[:-1]), shape[-1]]).

    format: fp8_block128, fp8_block128x128, mxfp8, mxfp8_e5m2, mxfp4, nvfp4. direction: rowwise,
    columnwise or both (both from one read). The options are the emulator's (blockscale.quantize).
    """
    m, shape = _matrix("x", x)
    rows, cols = m.shape
    sizes = _cuda.quantized_sizes(format, rows, cols, direction, rounding, pow2, block_2d, sr_seed, rht)
    o = _alloc_copies(sizes, rows, cols, direction, format == "nvfp4", m.device, rows)
    _cuda.quantize(_dl(m), format, direction, rounding, pow2, block_2d, sr_seed, sr_offset, rht,
                   *_outputs(o), _dl(_workspace(sizes["workspace"], m.device)), _stream(m.device))
    r, c = _operands(format, o)
    return Quantized(format, shape, r, c)


def quantize_fp8_block(x: torch.Tensor, block: Union[str, Tuple[int, int]] = "1x128", *, direction: str = "rowwise",
                       pow2: bool = False) -> Quantized:
    """FP8 blockwise: block "1x128" (activations, gradients) or "128x128" (weights); E4M3 codes, fp32 scales."""
    if block not in _FP8_BLOCKS:
        raise ValueError(f"block: {block!r} is not one of '1x128', '128x128'")
    return quantize(x, _FP8_BLOCKS[block], direction=direction, pow2=pow2)


def quantize_mxfp8(x: torch.Tensor, *, direction: str = "rowwise", rounding: str = "ceil",
                   e5m2: bool = False) -> Quantized:
    """MXFP8: 1x32 blocks, E4M3 (or E5M2) codes, E8M0 scales (swizzled 128x4)."""
    return quantize(x, "mxfp8_e5m2" if e5m2 else "mxfp8", direction=direction, rounding=rounding)


def quantize_nvfp4(x: torch.Tensor, *, direction: str = "rowwise", block_2d: bool = False,
                   sr_seed: Optional[int] = None, sr_offset: int = 0, rht: bool = False) -> Quantized:
    """NVFP4: 1x16 (or 16x16) blocks, E2M1 codes two per byte, UE4M3 scales, the fp32 tensor scale
    measured on the device (scale_dec: S_dec). sr_seed: stochastic rounding; rht: the 16-point
    Hadamard transform on the columnwise copy."""
    return quantize(x, "nvfp4", direction=direction, block_2d=block_2d, sr_seed=sr_seed, sr_offset=sr_offset, rht=rht)


def quantize_grouped(x: torch.Tensor, group_ends: torch.Tensor, format: str = "fp8_block128", *,
                     direction: str = "both", rounding: str = "ceil", sr_seed: Optional[int] = None,
                     sr_offset: int = 0, rht: bool = False) -> Quantized:
    """The tokens of several experts (x: [tokens, cols], sorted by expert; group_ends: int32
    cumulative ends on the device, the last = tokens). The rowwise copy is the dense one (the
    M-grouped GEMM's A); the columnwise one is per expert, padded to the block (the K-grouped
    GEMM's operand), with its padded ends in ``padded_group_ends``."""
    m, shape = _matrix("x", x)
    ends = _tensor("group_ends", group_ends)
    if ends.dim() != 1:
        raise ValueError(f"group_ends: must have 1 dimension (got shape {tuple(ends.shape)})")
    rows, cols = m.shape
    sizes = _cuda.quantized_sizes(format, rows, cols, direction, rounding, False, False, sr_seed, rht, ends.shape[0])
    o = _alloc_copies(sizes, rows, cols, direction, format == "nvfp4", m.device, sizes["capacity"])
    padded = torch.empty(ends.shape[0], dtype=torch.int32, device=m.device)
    _cuda.quantize_grouped(_dl(m), _dl(ends), format, direction, rounding, sr_seed, sr_offset, rht, *_outputs(o),
                           _dl(padded), _dl(_workspace(sizes["workspace"], m.device)), _stream(m.device))
    r, c = _operands(format, o)
    return Quantized(format, shape, r, c, padded)


def quantize_experts(w: torch.Tensor, format: str = "fp8_block128x128", *, direction: str = "rowwise",
                     block_2d: bool = False) -> Quantized:
    """The experts' weights w [experts, n, k], each quantized on its own (the M-grouped GEMM's B):
    data [experts, n, row_bytes] (columnwise: [experts, k, ...]), scales [experts, bytes of one].

    One launch for fp8_block128x128 and the MX formats with n a multiple of 128 (the library's
    batched quantize); one per expert otherwise (NVFP4: each expert gets its own tensor scale;
    block_2d: 16x16 blocks, NVFP4 only)."""
    w = _tensor("w", w)
    if w.dim() != 3:
        raise ValueError(f"w: must have 3 dimensions (experts, n, k), got shape {tuple(w.shape)}")
    if block_2d and format != "nvfp4":
        raise ValueError(f"block_2d: 16x16 blocks are NVFP4's, not {format}'s")
    experts, n, k = w.shape
    if experts > 0 and (format == "fp8_block128x128" or (format in _MX and n % 128 == 0)):
        sizes = _cuda.quantized_sizes(format, n, k, direction)
        o = _alloc_copies(sizes, n, k, direction, False, w.device, n, batches=experts)
        x = w.reshape(experts * n, k)
        _cuda.quantize_batched(_dl(x), experts, format, direction, "ceil", False, _dl(o.get("rowwise_data")),
                               _dl(o.get("rowwise_scales")), _dl(o.get("columnwise_data")),
                               _dl(o.get("columnwise_scales")), _stream(w.device))
        r, c = _operands(format, o)
        return Quantized(format, tuple(w.shape), r, c)
    per = [quantize(w[g], format, direction=direction, block_2d=block_2d) for g in range(experts)]

    def stack(copy):
        ops = [getattr(q, copy) for q in per]
        if not ops or ops[0] is None:
            return None
        dec = torch.cat([o.scale_dec for o in ops]) if ops[0].scale_dec is not None else None
        return Operand(format, torch.stack([o.data for o in ops]), torch.stack([o.scales for o in ops]), dec)
    return Quantized(format, tuple(w.shape), stack("rowwise"), stack("columnwise"))


def dequantize(q: Union[Quantized, Operand]) -> torch.Tensor:
    """The values of one copy as float32, in its stored orientation (rows x cols), on the GPU."""
    op = q._one() if isinstance(q, Quantized) else q
    if not isinstance(op, Operand) or op.data.dim() != 2:
        raise ValueError("q: one 2D quantized copy (an Operand or a Quantized with one copy)")
    out = torch.empty((op.rows, op.cols), dtype=torch.float32, device=op.data.device)
    _cuda.dequantize(_dl(_bytes(op.data)), _dl(op.scales), _dl(op.scale_dec), op.format, op.rows, op.cols, _dl(out),
                     _stream(op.data.device))
    return out


def _operand(name: str, x) -> Operand:
    if isinstance(x, Quantized):
        try:
            return x._one()
        except ValueError:
            raise ValueError(f"{name}: holds both copies; pass {name}.rowwise or {name}.columnwise") from None
    if isinstance(x, Operand):
        return x
    raise ValueError(f"{name}: a Quantized or an Operand, not {type(x).__name__}")


def _out(out, shape, dtype, device, accumulate: bool) -> torch.Tensor:
    if out is None:
        if accumulate:
            raise ValueError("out: required with accumulate=True (out += A B^T)")
        return torch.empty(shape, dtype=dtype, device=device)
    return _tensor("out", out)


def gemm(a, b, *, out_dtype: torch.dtype = torch.bfloat16, alpha: float = 1.0, out: Optional[torch.Tensor] = None,
         accumulate: bool = False) -> torch.Tensor:
    """D = alpha * A B^T (accumulate: out += alpha * A B^T), A and B quantized copies along K.

    FP8 blockwise: A fp8_block128 x B fp8_block128x128 (fprop, dgrad) or fp8_block128 (wgrad);
    the MX / NVFP4 pairs of gemm/gemm.h. out_dtype: torch.bfloat16 or torch.float32."""
    a, b = _operand("a", a), _operand("b", b)
    dev = a.data.device
    d = _out(out, (a.rows, b.rows), out_dtype, dev, accumulate)
    ws = _cuda.gemm_workspace_size(a.format, b.format, a.rows, b.rows, a.cols)
    _cuda.gemm(_dl(_bytes(a.data)), _dl(a.scales), a.format, _dl(_bytes(b.data)), _dl(b.scales), b.format, _dl(d),
               _dl(d) if accumulate else None, float(alpha), 1.0 if accumulate else 0.0, _dl(a.scale_dec),
               _dl(b.scale_dec), _dl(_workspace(ws, dev)), _stream(dev))
    return d


def fp8_gemm(a, b, **kwargs) -> torch.Tensor:
    """gemm() restricted to FP8 blockwise operands (A 1x128; B 128x128 or 1x128)."""
    for name, x in (("a", a), ("b", b)):
        f = _operand(name, x).format
        if not f.startswith("fp8_block"):
            raise ValueError(f"{name}: an FP8 blockwise operand (fp8_block128 or fp8_block128x128), not {f}")
    return gemm(a, b, **kwargs)


def grouped_gemm(a, b, group_ends: torch.Tensor, *, mode: str = "m", out_dtype: torch.dtype = torch.bfloat16,
                 alpha: float = 1.0, out: Optional[torch.Tensor] = None, accumulate: bool = False) -> torch.Tensor:
    """The MoE GEMMs of gemm/grouped.h, expert ends on the device (int32, cumulative, no leading 0).

    mode "m" (fprop, dgrad): a = the tokens' rowwise copy [tokens, k]; b = quantize_experts(W)
    (rowwise: [experts, n, k]); D [tokens, n]. mode "k" (wgrad): a, b = the columnwise copies of
    quantize_grouped(dY), quantize_grouped(X); group_ends = their padded_group_ends; D [experts, m, n].
    """
    a, b = _operand("a", a), _operand("b", b)
    ends = _tensor("group_ends", group_ends)
    dev = a.data.device
    if ends.dim() != 1:
        raise ValueError(f"group_ends: must have 1 dimension (got shape {tuple(ends.shape)})")
    if mode not in ("m", "k"):
        raise ValueError(f"mode: '{mode}' is not one of m (fprop, dgrad), k (wgrad)")
    shape = (a.rows, b.rows) if mode == "m" else (ends.shape[0], a.rows, b.rows)
    d = _out(out, shape, out_dtype, dev, accumulate)
    _cuda.grouped_gemm(mode, _dl(_bytes(a.data)), _dl(a.scales), a.format, _dl(_bytes(b.data)), _dl(b.scales),
                       b.format, _dl(ends), _dl(d), _dl(d) if accumulate else None, float(alpha),
                       1.0 if accumulate else 0.0, _dl(a.scale_dec), _dl(b.scale_dec), _stream(dev))
    return d


def fp8_grouped_gemm(a, b, group_ends: torch.Tensor, **kwargs) -> torch.Tensor:
    """grouped_gemm() restricted to FP8 blockwise operands."""
    for name, x in (("a", a), ("b", b)):
        f = _operand(name, x).format
        if not f.startswith("fp8_block"):
            raise ValueError(f"{name}: an FP8 blockwise operand (fp8_block128 or fp8_block128x128), not {f}")
    return grouped_gemm(a, b, group_ends, **kwargs)


from ._torch_linear import GroupedLinear, Linear, linear  # noqa: E402  (they use the functions above)
