"""numfmt on torch tensors, on the CPU or a CUDA device, bit for bit equal to numfmt on numpy.

``import numfmt.torch as nt`` needs torch; ``import numfmt`` does not. Every function takes
tensors or array-likes; a tensor is computed on its own device, anything else on
:func:`default_device` (CUDA when available), and an explicit ``device=`` overrides both.
Results are bit-identical to the numpy implementation (the metrics on a GPU: to float64
summation order). Integer and block quantization and the metrics run numfmt's own array-API
bodies (:mod:`numfmt._xp`); the formats' rounding kernels are a twin, tested bit for bit.

Low-precision matrix multiplication (int8 with int32 accumulation, FP8 with tensor or row
scales, block-scaled MX/NVFP4 emulation) is in :mod:`numfmt.torch.gemm`; quantization-aware
training on torch (the STE autograd Functions, ``QATLinear``) in :mod:`numfmt.torch.qat`;
training in low precision (recipes for each GEMM operand, ``QuantLinear``, loss scaling) in
:mod:`numfmt.torch.train` (``import numfmt.torch.train as ntt``; a package, one module per
idea, LoRA and LSQ among them).
GPU timing lives outside the library, beside the lectures: ``lectures/gpu_timing.py``.
"""

try:
    import torch  # noqa: F401
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError("numfmt.torch needs PyTorch: pip install 'lowprec-course[torch]'") from err

from numfmt.torch._core import as_real_tensor, default_device
from numfmt.torch.blocks import (BlockQuantized, block_quantize, mx_quantize, nvfp4_quantize,
                                 tensor_scaled)
from numfmt.torch.formats import NATIVE_DTYPES, decode, encode, round, to_native
from numfmt.torch.intquant import IntQuantized, dequantize_affine, quantize_affine, quantize_int
from numfmt.torch.metrics import rel_error, sqnr_db

__all__ = [
    "default_device", "as_real_tensor", "round", "encode", "decode", "to_native",
    "NATIVE_DTYPES", "IntQuantized", "quantize_affine", "dequantize_affine", "quantize_int",
    "BlockQuantized", "block_quantize", "mx_quantize", "nvfp4_quantize", "tensor_scaled",
    "rel_error", "sqnr_db",
]
