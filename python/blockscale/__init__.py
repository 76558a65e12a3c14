"""blockscale: block-scaled low precision (MXFP8, MXFP4, NVFP4, FP8 blockwise) for training and study.

The emulator on numpy arrays, bit-identical to the C++ library and the ``blockscale`` CLI::

    import numpy as np, blockscale
    x = np.random.randn(256, 512).astype(np.float32)
    q = blockscale.quantize(x, "nvfp4")          # a QuantizedTensor: codes, scales, global scale
    y = blockscale.dequantize(q)                 # float32, x's shape
    blockscale.save("q.safetensors", {"x": q})   # the CLI's file schema; blockscale.load reads it
    d = blockscale.reference_gemm(q, q)          # fp64 A B^T of the quantized operands
    blockscale.recipe_error(x, "nvfp4")          # sqnr_db, rel_fro_error, ... as `blockscale study`

The GPU kernels on torch CUDA tensors are in ``blockscale.torch`` (imported on demand: importing
blockscale never imports torch).
"""
from ._core import __version__
from .emulator import FORMATS, QuantizedTensor, dequantize, gemm_scales, quantize
from .files import load, save
from .metrics import gemm_error, recipe_error
from .reference import reference_gemm, reference_gemm_k_grouped, reference_gemm_m_grouped

__all__ = ["__version__", "FORMATS", "QuantizedTensor", "quantize", "dequantize", "gemm_scales", "save", "load",
           "reference_gemm", "reference_gemm_m_grouped", "reference_gemm_k_grouped", "recipe_error", "gemm_error"]


def __getattr__(name):
    # blockscale.torch (the GPU kernels on torch tensors) loads torch: only when first asked for.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'blockscale' has no attribute '{name}'")
