"""fp64 reference GEMMs on quantized operands (formats/reference_gemm.h): each operand dequantized
exactly to fp64, products accumulated in fp64. The GPU GEMMs are tested against these.

Operands are K-major QuantizedTensors in their stored orientation (blocks along K): A [M, K] and
B [N, K] rowwise copies, or the columnwise copies wgrad multiplies. D = alpha * A B^T + beta * C.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from . import _core
from .emulator import QuantizedTensor, _parts


def _c(c) -> Optional[np.ndarray]:
    return None if c is None else np.ascontiguousarray(np.asarray(c, dtype=np.float64))


def reference_gemm(a: QuantizedTensor, b: QuantizedTensor, *, alpha: float = 1.0, beta: float = 0.0,
                   c=None) -> np.ndarray:
    """D [M, N] (float64) = alpha * A B^T + beta * C; C [M, N] is read only when beta != 0."""
    return _core.reference_gemm(_parts(a, "a"), _parts(b, "b"), float(alpha), float(beta), _c(c))


def reference_gemm_m_grouped(a: QuantizedTensor, b: Sequence[QuantizedTensor], group_ends: Sequence[int], *,
                             alpha: float = 1.0, beta: float = 0.0, c=None) -> np.ndarray:
    """MoE fprop / dgrad: A holds the tokens sorted by expert; expert g's rows
    [group_ends[g-1], group_ends[g]) multiply b[g] [N, K]. D [M, N] (float64)."""
    if isinstance(b, QuantizedTensor):
        raise ValueError("b: one QuantizedTensor per expert (a list), not a single tensor")
    parts = [_parts(q, f"b[{g}]") for g, q in enumerate(b)]
    return _core.reference_gemm_m_grouped(_parts(a, "a"), parts, [int(e) for e in group_ends], float(alpha),
                                          float(beta), _c(c))


def reference_gemm_k_grouped(a: QuantizedTensor, b: QuantizedTensor, padded_group_ends: Sequence[int], *,
                             alpha: float = 1.0, beta: float = 0.0, c=None) -> np.ndarray:
    """MoE wgrad: A [N, Kpad] and B [Kout, Kpad] are the columnwise copies of dY and X over the
    padded token axis; expert g reduces columns [padded_group_ends[g-1], padded_group_ends[g]).
    D [G, N, Kout] (float64)."""
    return _core.reference_gemm_k_grouped(_parts(a, "a"), _parts(b, "b"), [int(e) for e in padded_group_ends],
                                          float(alpha), float(beta), _c(c))
