"""numfmt: exact low-precision number formats and quantization on numpy.

Floating-point formats (FP16, BF16, FP8 E4M3/E5M2, FP6 E2M3/E3M2, FP4 E2M1, the E8M0 scale),
integer quantization with scales and zero points, block scaling (MX, NVFP4), and error metrics.
Every rounding of float32 input agrees bit for bit with ml_dtypes where ml_dtypes defines the
result; float64 input is rounded once (ml_dtypes and torch go through float32 first).
"""

from numfmt import formats as _formats
from numfmt.blocks import (MX_ELEMENTS, SCALE_BITS, SCALE_RULES, BlockQuantized, block_quantize,
                           e8m0_exponent, mx_quantize, nvfp4_quantize, tensor_scaled)
from numfmt.formats import *  # noqa: F401,F403  -- FloatFormat, every format, FORMATS
from numfmt.intquant import (IntQuantized, clip_sweep, dequantize_affine, int_range,
                             quantize_affine, quantize_int)
from numfmt.metrics import rel_error, sqnr_db

__all__ = [
    *_formats.__all__,
    "MX_ELEMENTS", "SCALE_BITS", "SCALE_RULES", "BlockQuantized", "block_quantize", "e8m0_exponent",
    "mx_quantize", "nvfp4_quantize", "tensor_scaled",
    "IntQuantized", "dequantize_affine", "int_range", "quantize_affine", "quantize_int",
    "clip_sweep",
    "rel_error", "sqnr_db",
]

# Submodules load on first use (PEP 562), so ``import numfmt`` costs formats, blocks, intquant
# and metrics only: ``numfmt.packing.pack_int4`` works after ``import numfmt`` all the same.
_SUBMODULES = ("anatomy", "cost", "packing", "ptq", "qat", "rounding", "scaling")


def __getattr__(name):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"numfmt.{name}")
    raise AttributeError(f"module 'numfmt' has no attribute {name!r}")
