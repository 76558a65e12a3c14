"""The accuracy study's error metrics (study/study.h): the figures ``blockscale study`` reports,
for one tensor or one GEMM, on numpy arrays.
"""
from __future__ import annotations

import numpy as np

from . import _core
from .emulator import FORMATS, _as_float32_matrix, _choice


def _options(format: str, rounding: str, block_2d: bool, pow2: bool) -> None:
    _choice("format", format, FORMATS)
    _choice("rounding", rounding, ("ceil", "floor"))
    if rounding == "floor" and not format.startswith("mx"):
        raise ValueError(f"rounding: 'floor' applies to MX formats only ({format} rounds to nearest)")
    if block_2d and format != "nvfp4":
        raise ValueError("block_2d: 16x16 blocks apply to nvfp4 only")
    if pow2 and not format.startswith("fp8_block"):
        raise ValueError("pow2: power-of-two scales apply to fp8_block128 and fp8_block128x128 only")


def recipe_error(x, format: str, *, rounding: str = "ceil", block_2d: bool = False, pow2: bool = False) -> dict:
    """How much quantizing x (rowwise, blocks along the last dimension) loses: sqnr_db,
    rel_fro_error, max_abs_error, max_rel_error, the saturated and flushed shares, and for MX and
    NVFP4 the shares of blocks whose scale sits at the bottom / top of its range. Non-finite inputs
    and the blocks holding them are counted (nonfinite, excluded) and left out of the metrics."""
    _options(format, rounding, block_2d, pow2)
    m, _ = _as_float32_matrix(x, "x")
    return _core.recipe_error(m, format, rounding, bool(block_2d), bool(pow2))


def gemm_error(a, b, format: str, *, rounding: str = "ceil", block_2d: bool = False, pow2: bool = False) -> dict:
    """The error of A B^T with A [M, K] and B [N, K] both quantized rowwise (blocks along K), against
    the unquantized product, both in fp64: rel_fro_error, sqnr_db, max_abs_error."""
    _options(format, rounding, block_2d, pow2)
    ma, _ = _as_float32_matrix(a, "a")
    mb, _ = _as_float32_matrix(b, "b")
    return _core.gemm_error(ma, mb, format, rounding, bool(block_2d), bool(pow2))
