"""numfmt: exact low-precision number formats and quantization on numpy.

Floating-point formats (FP16, BF16, FP8 E4M3/E5M2, FP6 E2M3/E3M2, FP4 E2M1, the E8M0 scale),
integer quantization with scales and zero points, block scaling (MX, NVFP4), and error metrics.
Every rounding agrees bit for bit with ml_dtypes where ml_dtypes defines the result.
"""

from numfmt.blocks import (SCALE_BITS, BlockQuantized, block_quantize, mx_quantize, nvfp4_quantize,
                           tensor_scaled)
from numfmt.formats import (BF16, E8M0, FORMATS, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2,
                            FP16, FP32, FloatFormat)
from numfmt.intquant import (IntQuantized, dequantize_affine, int_range, quantize_affine,
                             quantize_int)
from numfmt.metrics import rel_error, sqnr_db

__all__ = [
    "BF16", "E8M0", "FORMATS", "FP4_E2M1", "FP6_E2M3", "FP6_E3M2", "FP8_E4M3", "FP8_E5M2", "FP16", "FP32",
    "FloatFormat", "SCALE_BITS", "BlockQuantized", "block_quantize", "mx_quantize",
    "nvfp4_quantize", "tensor_scaled", "IntQuantized", "dequantize_affine", "int_range",
    "quantize_affine", "quantize_int", "rel_error", "sqnr_db",
]
from numfmt import packing  # noqa: E402,F401  -- storage layouts: nibbles, GPTQ, Marlin, NF4
