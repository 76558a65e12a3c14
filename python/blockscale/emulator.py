"""The emulator's quantize and dequantize on numpy arrays (any array numpy can read, CPU).

The bytes are formats/' (docs/numerics.md): the same as ``blockscale quantize`` writes and as the
GPU kernels produce. A tensor of any rank >= 1 is quantized as the 2D matrix
``[prod(shape[:-1]), shape[-1]]``; blocks run along the last dimension (rowwise) or along the rows
(columnwise: the stored matrix is the transpose, as the file schema stores it).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple, Union

import numpy as np

from . import _core

FORMATS = tuple(_core.formats())
_MX = ("mxfp8", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4")
_FP8_BLOCK = ("fp8_block128", "fp8_block128x128")
_DIRECTIONS = ("rowwise", "columnwise", "both")
_ROUNDINGS = ("ceil", "floor")


@dataclass(frozen=True)
class QuantizedTensor:
    """One quantized copy of a tensor, in its stored orientation.

    data: uint8 [rows, row_bytes] element codes (E2M1: two per byte, low nibble first).
    scales: one per block, linear row-major [ceil(rows / block[0]), ceil(cols / block[1])]:
        uint8 codes (E8M0 for MX, UE4M3 for NVFP4) or float32 (FP8 blockwise).
    global_scale: NVFP4's tensor dequantization scale S_dec (1.0 for the others).
    shape: the input tensor's shape; direction: "rowwise" or "columnwise" (stored transposed).
    """

    format: str
    data: np.ndarray
    scales: np.ndarray
    global_scale: float
    rows: int
    cols: int
    block: Tuple[int, int]
    shape: Tuple[int, ...]
    direction: str
    rounding: str
    hadamard: bool
    nonfinite_seen: bool


def _as_float32_matrix(x, name: str) -> Tuple[np.ndarray, Tuple[int, ...]]:
    a = np.asarray(x)
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        raise ValueError(f"{name}: a floating-point array, not {a.dtype}")
    if a.ndim == 0:
        raise ValueError(f"{name}: rank 0 (a scalar) has no block to quantize")
    if a.size == 0:
        raise ValueError(f"{name}: shape {a.shape} is empty")
    # float16 and bfloat16 widen exactly; float64 rounds to nearest, as the CLI reads it.
    m = np.ascontiguousarray(a.astype(np.float32, copy=False)).reshape(-1, a.shape[-1])
    return m, tuple(int(d) for d in a.shape)


def _choice(name: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ValueError(f"{name}: '{value}' is not one of {', '.join(allowed)}")


def quantize(
    x,
    format: str,
    *,
    rounding: str = "ceil",
    direction: str = "rowwise",
    sr_seed: Optional[int] = None,
    rht: bool = False,
    block_2d: bool = False,
    pow2: bool = False,
) -> Union[QuantizedTensor, Tuple[QuantizedTensor, QuantizedTensor]]:
    """Quantizes x with one format; returns a QuantizedTensor, or (rowwise, columnwise) for "both".

    rounding: MX scale rounding, "ceil" (default) or "floor". sr_seed: NVFP4 stochastic rounding
    with this Philox seed. rht: NVFP4's 16-point random Hadamard transform on the columnwise copy.
    block_2d: NVFP4 16x16 blocks (weights). pow2: FP8 blockwise power-of-two scales.
    """
    _choice("format", format, FORMATS)
    _choice("rounding", rounding, _ROUNDINGS)
    _choice("direction", direction, _DIRECTIONS)
    nvfp4 = format == "nvfp4"
    if rounding == "floor" and format not in _MX:
        raise ValueError(f"rounding: 'floor' applies to MX formats only ({format} rounds to nearest)")
    if sr_seed is not None and not nvfp4:
        raise ValueError("sr_seed: stochastic rounding applies to nvfp4 only")
    if sr_seed is not None and not (0 <= int(sr_seed) < 2**64):
        raise ValueError(f"sr_seed: {sr_seed} is outside [0, 2^64)")
    if rht and not nvfp4:
        raise ValueError("rht: the Hadamard transform applies to nvfp4 only")
    if rht and direction == "rowwise":
        raise ValueError("rht: the transform applies to the columnwise copy; use direction='columnwise' or 'both'")
    if rht and block_2d:
        raise ValueError("rht: cannot be combined with block_2d (16x16 weight blocks)")
    if block_2d and not nvfp4:
        raise ValueError("block_2d: 16x16 blocks apply to nvfp4 only")
    if pow2 and format not in _FP8_BLOCK:
        raise ValueError("pow2: power-of-two scales apply to fp8_block128 and fp8_block128x128 only")
    m, shape = _as_float32_matrix(x, "x")
    if rht and m.shape[0] % 16 != 0:
        raise ValueError(f"rht: needs a row count (the columnwise block dimension) that is a multiple of 16, "
                         f"not {m.shape[0]}")

    def one(columnwise: bool) -> QuantizedTensor:
        hadamard = rht and columnwise
        d = _core.quantize(m, format, rounding, columnwise, sr_seed is not None, int(sr_seed or 0), hadamard,
                           block_2d, pow2)
        return _from_core(d, shape, "columnwise" if columnwise else "rowwise",
                          rounding if format in _MX else "rn", hadamard)

    if direction == "both":
        return one(False), one(True)
    return one(direction == "columnwise")


def _parts(q: QuantizedTensor, name: str) -> dict:
    """q's matrix fields as _core takes them (formats' QuantizedMatrix)."""
    if not isinstance(q, QuantizedTensor):
        raise ValueError(f"{name}: a QuantizedTensor, not {type(q).__name__}")
    return {"format": q.format, "rows": q.rows, "cols": q.cols, "block": q.block,
            "data": np.ascontiguousarray(q.data), "scales": np.ascontiguousarray(q.scales),
            "global_scale": q.global_scale}


def _from_core(d: dict, shape, direction: str, rounding: str, hadamard: bool) -> QuantizedTensor:
    return QuantizedTensor(
        format=d["format"], data=d["data"], scales=d["scales"], global_scale=float(d["global_scale"]),
        rows=int(d["rows"]), cols=int(d["cols"]), block=tuple(d["block"]), shape=tuple(int(s) for s in shape),
        direction=direction, rounding=rounding, hadamard=hadamard, nonfinite_seen=bool(d["nonfinite_seen"]))


def dequantize(q: QuantizedTensor) -> np.ndarray:
    """The exact inverse (docs/numerics.md): float32 in q.shape (columnwise copies transposed back).

    NVFP4 copies made with rht stay in the transformed domain.
    """
    p = _parts(q, "q")
    m = _core.dequantize(p["format"], p["rows"], p["cols"], p["block"], p["data"], p["scales"], p["global_scale"])
    if q.direction == "columnwise":
        m = m.T
    return np.ascontiguousarray(m).reshape(q.shape)


def gemm_scales(q: QuantizedTensor) -> np.ndarray:
    """q's scales as uint8 bytes in the layout the GPU GEMMs read and the GPU quantize writes.

    FP8 blockwise: fp32 in VEC128_32F (1x128) or BLK128x128_32F (128x128); MX and NVFP4: the
    swizzled 128x4 layout, one scale per row (formats/scale_layout.h; padding zero). The bytes a
    ``blockscale.torch`` quantize of the same input holds in its ``scales``.
    """
    p = _parts(q, "q")
    return _core.gemm_scales(p["format"], p["rows"], p["cols"], p["block"], p["data"], p["scales"],
                             p["global_scale"])
