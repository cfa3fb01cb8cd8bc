"""Low-precision matrix multiplication on torch: int8, FP8 with scales, block-scaled (emulated).

Three ways a GEMM ``y = x @ w.T`` (x: (M, K) activations, w: (N, K) weights) is computed with
narrow operands:

- int8 x int8 with an int32 accumulator (``torch._int_mm``; cuBLASLt IMMA on CUDA) and the
  zero-point correction for asymmetric activations (Jacob et al., CVPR 2018, section 2.3).
- FP8 x FP8 with float32 dequantization scales per tensor or per row, output in bf16
  (``torch._scaled_mm``; cuBLASLt on CUDA, which wants the second operand column-major and K, N
  multiples of 16). On the CPU the same numerics are emulated: exact FP8 products, a float32
  matmul, then the scales.
- Block-scaled MXFP8/MXFP4/NVFP4: one scale per 32 (16) elements along K. Emulated by summing
  per-block dot products of the elements times both block scales, which is what Blackwell
  tensor cores do in hardware (native only on compute capability 10.x).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np
import torch

from numfmt._validate import check_bool, check_fits_storage
from numfmt.formats import FP8_E4M3, FP8_E5M2, FloatFormat
from numfmt.torch._core import as_calibration_tensor, default_device
from numfmt.torch.blocks import BlockQuantized
from numfmt.torch.formats import round as round_to
from numfmt.torch.intquant import quantize_int

__all__ = ["INT32_MAX", "FP8_DTYPES", "GRANULARITIES", "OUT_DTYPES", "int32_safe_k",
           "int8_mm", "int8_mm_reference", "Int8Linear", "int8_linear", "Fp8Operand",
           "fp8_quantize", "scaled_mm", "fp8_linear", "block_scaled_mm",
           "block_scaled_linear", "fp8_kernel_available",
           "native_block_scaled_available"]

INT32_MAX = 2**31 - 1
FP8_DTYPES = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2}
GRANULARITIES = ("tensor", "row")
OUT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def int32_safe_k(amax_a: int = 128, amax_b: int = 128) -> int:
    """Largest K for which no int32 dot product of K terms can overflow.

    Each product is at most ``amax_a * amax_b`` in magnitude, so K terms stay within int32 when
    ``K * amax_a * amax_b <= 2^31 - 1``. Full int8 (-128 * -128 = 16384): K <= 131071; the
    restricted symmetric range (127 * 127 = 16129): K <= 133144.

    Raises
    ------
    ValueError
        If an amax is not a positive integer.
    """
    for name, v in (("amax_a", amax_a), ("amax_b", amax_b)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return INT32_MAX // (amax_a * amax_b)


def _check_2d(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        raise TypeError(f"{what} needs two torch tensors")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"{what} needs 2-D operands, got shapes {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{what}: inner dimensions differ, (M, K) = {tuple(a.shape)} but "
                         f"(K, N) = {tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"{what}: operands on different devices ({a.device}, {b.device})")


def int8_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """int8 (M, K) @ int8 (K, N) with an int32 accumulator.

    Uses ``torch._int_mm`` (CPU since torch 2.x; cuBLASLt on CUDA, which needs M > 16 and K, N
    multiples of 8). The operands are passed in the one layout cuBLASLt's int8 GEMM takes on
    every CUDA version: ``a`` row-major and ``b`` column-major (a transposed ``a`` gives
    CUBLAS_STATUS_NOT_SUPPORTED, a row-major ``b`` fails under CUDA 13; torch's
    ``test__int_mm``); other layouts are copied into it. Where ``_int_mm`` is unavailable the
    result is computed exactly in int64 and wrapped to int32.

    Overflow: on the CPU the int32 sum wraps modulo 2^32 (two's-complement addition is exact
    modulo 2^32 in any order). cuBLAS does not document what its int8 kernels do when the
    int32 accumulator overflows (wrap or saturate); keep K below :func:`int32_safe_k`.

    Parameters
    ----------
    a : torch.Tensor of int8, shape (M, K)
    b : torch.Tensor of int8, shape (K, N)

    Returns
    -------
    torch.Tensor of int32, shape (M, N), on the operands' device

    Raises
    ------
    TypeError
        If an operand is not an int8 tensor.
    ValueError
        If the shapes do not chain, the operands are on different devices, or (CUDA) M <= 16 or
        K, N are not multiples of 8.
    """
    _check_2d(a, b, "int8_mm")
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise TypeError(f"int8_mm needs int8 operands, got {a.dtype} and {b.dtype}")
    (m, k), n = a.shape, b.shape[1]
    if a.is_cuda and (m <= 16 or k % 8 or n % 8):
        raise ValueError(f"torch._int_mm on CUDA needs M > 16 and K, N multiples of 8; got "
                         f"M={m}, K={k}, N={n}")
    a = a.contiguous()                 # row-major (M, K)
    if not b.t().is_contiguous():      # column-major (K, N): b.t() is a row-major (N, K)
        b = b.t().contiguous().t()
    try:
        return torch._int_mm(a, b)
    except (RuntimeError, NotImplementedError):  # pragma: no cover - older CPU builds
        return int8_mm_reference(a, b).to(a.device).to(torch.int32)  # int64 -> int32 wraps


def int8_mm_reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Exact int64 product of integer tensors, computed on the CPU (the oracle for int8_mm).

    Returns
    -------
    torch.Tensor of int64 on the CPU, shape (M, N)
    """
    _check_2d(a, b, "int8_mm_reference")
    return a.cpu().to(torch.int64) @ b.cpu().to(torch.int64)


class Int8Linear(NamedTuple):
    """Result of :func:`int8_linear`: the integer pipeline, step by step."""

    y: torch.Tensor            #: float64 (M, N), s_x * s_w * (acc - z * rowsum(q_w))
    acc: torch.Tensor          #: int32 (M, N), (q_x - 128) @ q_w.T from the int8 GEMM
    correction: torch.Tensor   #: int64 (1, N), (z_x - 128) * rowsum(q_w)
    exact: torch.Tensor        #: int64 (M, N), (q_x - z_x) @ q_w.T computed in int64 on the CPU
    x_hat: torch.Tensor        #: float64 (M, K) dequantized activations
    w_hat: torch.Tensor        #: float64 (N, K) dequantized weights
    zero_point: int            #: z_x of the uint8 activations


def int8_linear(x, w, device=None) -> Int8Linear:
    """``y = x @ w.T`` with uint8 asymmetric activations and int8 per-row symmetric weights.

    Activations are quantized per tensor to [0, 255] with zero point z (numfmt's
    ``quantize_int(bits=8, symmetric=False)``), weights per output row to [-127, 127]. The GEMM
    runs on int8: the activation codes are shifted by -128 (so is the zero point), and
    ``sum_k (q_x - z) q_w = sum_k (q_x - 128) q_w - (z - 128) sum_k q_w``: one int8 GEMM plus a
    correction that depends only on the weights (precomputable).

    Parameters
    ----------
    x : tensor or array_like, shape (M, K), finite
    w : tensor or array_like, shape (N, K), finite
    device : optional; default the device of ``x`` (a tensor) or the default device

    Returns
    -------
    Int8Linear

    Raises
    ------
    ValueError
        If x or w is not 2-D, K differs, or an input is empty or non-finite.
    """
    x = as_calibration_tensor(x, "x", device=device)  # under their own names (see above)
    w = as_calibration_tensor(w, "w", device=x.device)
    qx = quantize_int(x, 8, symmetric=False, device=device)
    qw = quantize_int(w, 8, symmetric=True, granularity="channel", device=qx.codes.device)
    if qx.codes.ndim != 2 or qw.codes.ndim != 2 or qx.codes.shape[1] != qw.codes.shape[1]:
        raise ValueError(f"x must be (M, K) and w (N, K), got {tuple(qx.codes.shape)} and "
                         f"{tuple(qw.codes.shape)}")
    z = int(qx.zero_point.reshape(()))
    a8 = (qx.codes - 128).to(torch.int8)                       # (M, K) in [-128, 127]
    w8 = qw.codes.to(torch.int8)                               # (N, K) in [-127, 127]
    acc = int8_mm(a8, w8.t())                                  # (M, N) int32
    correction = (z - 128) * qw.codes.sum(dim=1)[None, :]      # (1, N) int64
    exact = int8_mm_reference(qx.codes - z, qw.codes.t())      # (M, N) int64
    s = qx.scale.reshape(()) * qw.scale.reshape(1, -1)         # (1, N) float64
    y = (acc.to(torch.int64) - correction).to(torch.float64) * s
    return Int8Linear(y, acc, correction, exact, qx.values, qw.values, z)


# ---------------------------------------------------------------- FP8 with scales
class Fp8Operand(NamedTuple):
    """An FP8 operand of :func:`scaled_mm`: ``data * scale`` approximates the input."""

    data: torch.Tensor   #: float8_e4m3fn or float8_e5m2, the input's shape
    scale: torch.Tensor  #: float32, shape () per tensor or (rows, 1) per row


def fp8_quantize(x, fmt: FloatFormat = FP8_E4M3, granularity: str = "tensor",
                 device=None) -> Fp8Operand:
    """Quantize a 2-D tensor to FP8 with float32 scales ``amax / fmt.max_value``.

    The scale is rounded to float32 (what the kernel reads); the elements are
    ``round(x / scale)`` in ``fmt``, saturating, rounded once from float64 with
    :func:`numfmt.torch.round` and then stored in torch's float8 dtype (exactly).

    Parameters
    ----------
    x : tensor or array_like, shape (R, K), finite
    fmt : FP8_E4M3 or FP8_E5M2
    granularity : {"tensor", "row"}
        One scale for the tensor (shape ()), or one per row (shape (R, 1)). For the weight of
        ``x @ w.T`` a row of ``w`` is an output column, which is what cuBLAS's row-wise
        scaling of the second operand means.
    device : optional

    Returns
    -------
    Fp8Operand

    Raises
    ------
    TypeError
        If ``fmt`` is not E4M3 or E5M2.
    ValueError
        If ``x`` is not 2-D, empty or non-finite, or ``granularity`` is unknown; or a scale
        ``amax / fmt.max_value`` does not fit float32 (above 3.4e38 it would be Inf and the
        data 0; below 7e-46 it would be 0 and the data saturate).
    """
    return _fp8_quantize(x, fmt, granularity, device, "x")


def _fp8_quantize(x, fmt, granularity, device, name: str) -> Fp8Operand:
    from numfmt.torch._core import as_calibration_tensor
    if fmt not in (FP8_E4M3, FP8_E5M2):
        raise TypeError(f"fmt must be FP8_E4M3 or FP8_E5M2, got {fmt!r}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    x = as_calibration_tensor(x, name, device=device)
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, K), got shape {tuple(x.shape)}")
    amax = x.abs().amax() if granularity == "tensor" else x.abs().amax(dim=1, keepdim=True)
    ideal = torch.where(amax > 0, amax / fmt.max_value, 1.0)
    check_fits_storage(ideal.detach().cpu().numpy(), np.float32,
                       f"the float32 scale of {name}, amax / {fmt.max_value:g} =",
                       f"scale {name} into range first")
    scale = ideal.to(torch.float32)
    q = round_to(x / scale.to(torch.float64), fmt)
    return Fp8Operand(q.to(torch.float32).to(FP8_DTYPES[fmt.name]), scale)


def _check_scaled_mm(a, b, scale_a, scale_b, out_dtype) -> None:
    _check_2d(a, b, "scaled_mm")
    fp8 = tuple(FP8_DTYPES.values())
    if a.dtype not in fp8 or b.dtype not in fp8:
        raise TypeError(f"scaled_mm needs float8_e4m3fn or float8_e5m2 operands, got {a.dtype} "
                        f"and {b.dtype}")
    if a.dtype == b.dtype == torch.float8_e5m2:
        raise ValueError("cuBLAS has no E5M2 x E5M2 GEMM: make one operand E4M3")
    (m, k), n = a.shape, b.shape[1]
    if k % 16 or n % 16:
        raise ValueError(f"scaled_mm needs K and N multiples of 16 (cuBLASLt FP8), got K={k}, "
                         f"N={n}; pad the operands")
    if a.stride(1) != 1:
        raise ValueError(f"the first operand must be row-major, got strides {a.stride()}")
    if b.stride(0) != 1:
        raise ValueError(f"the second operand must be column-major (pass w.t() of a row-major "
                         f"(N, K) weight), got strides {b.stride()}")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if not isinstance(s, torch.Tensor) or s.dtype != torch.float32:
            raise TypeError(f"{name} must be a float32 tensor, got "
                            f"{getattr(s, 'dtype', type(s).__name__)}")
        if s.device != a.device:
            raise ValueError(f"{name} is on {s.device} but the operands on {a.device}; "
                             "torch._scaled_mm on CUDA needs them on the same device")
        # Meta tensors (shape checks on the CPU against torch's kernel rules) hold no values.
        if not s.is_meta and not bool((torch.isfinite(s) & (s > 0)).all()):
            raise ValueError(f"{name} must be positive and finite")
    tensorwise = scale_a.numel() == 1 and scale_b.numel() == 1
    rowwise = tuple(scale_a.shape) == (m, 1) and tuple(scale_b.shape) == (1, n)
    if not (tensorwise or rowwise):
        raise ValueError(f"scales must both have one element (per tensor) or shapes (M, 1) = "
                         f"({m}, 1) and (1, N) = (1, {n}) (per row); got {tuple(scale_a.shape)} "
                         f"and {tuple(scale_b.shape)}")
    if rowwise and not tensorwise and not (scale_a.is_contiguous()
                                           and scale_b.is_contiguous()):
        raise ValueError("per-row scales must be contiguous tensors (cuBLAS reads them as "
                         "dense vectors); pass scale.contiguous()")
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"out_dtype must be one of {OUT_DTYPES} (what torch._scaled_mm returns "
                         f"for both scalings without an output scale), got {out_dtype}")


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16, emulate: bool | None = None) -> torch.Tensor:
    """FP8 GEMM ``(a @ b) * scale_a * scale_b`` rounded to ``out_dtype``, with cuBLAS's rules.

    Parameters
    ----------
    a : torch.Tensor of float8_e4m3fn or float8_e5m2, shape (M, K), row-major
    b : torch.Tensor of float8, shape (K, N), column-major (``w.t()`` of an (N, K) weight)
    scale_a, scale_b : torch.Tensor of float32
        Dequantization scales: both of one element (per tensor), or (M, 1) and (1, N) (per row).
        On CUDA they must be on the operands' device, and per-row scales contiguous.
    out_dtype : torch.bfloat16 (default), torch.float16 or torch.float32
    emulate : bool, optional
        Default: ``torch._scaled_mm`` where :func:`fp8_kernel_available` (CUDA, compute
        capability 8.9 or higher), the emulation elsewhere. The emulation converts the FP8
        values to float32 (exact), multiplies in float32 (each product is exact: two 4-bit
        significands give at most 8 bits; TF32, if enabled, holds them exactly too), multiplies
        by the scales and rounds to ``out_dtype``. It agrees with ``torch._scaled_mm`` on the
        CPU to the rounding of the float32 accumulation (summation order) and one rounding of
        the output. Hopper's FP8 tensor cores keep fewer bits while they accumulate (about 14,
        DeepSeek-V3 technical report, section 3.3.2) before cuBLAS promotes the partial sums to
        float32, so on a GPU more of the last bits differ.

    Returns
    -------
    torch.Tensor of ``out_dtype``, shape (M, N)

    Raises
    ------
    TypeError
        If an operand is not FP8 or a scale not a float32 tensor.
    ValueError
        If the shapes do not chain, K or N is not a multiple of 16, ``a`` is not row-major or
        ``b`` not column-major, both operands are E5M2, a scale is not positive and finite or
        not on the operands' device, the scale shapes are neither per-tensor nor per-row,
        per-row scales are not contiguous, or ``out_dtype`` is not one of the three above.
    """
    _check_scaled_mm(a, b, scale_a, scale_b, out_dtype)
    if emulate is not None:
        check_bool(emulate, "emulate")
    if emulate is None:
        emulate = not fp8_kernel_available(a.device)
    if not emulate:
        return torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    acc = a.to(torch.float32) @ b.to(torch.float32)                # (M, N) float32
    return (acc * scale_a * scale_b).to(out_dtype)


def fp8_linear(x, w, fmt_x: FloatFormat = FP8_E4M3, fmt_w: FloatFormat = FP8_E4M3,
               granularity: str = "tensor", device=None) -> torch.Tensor:
    """``y = x @ w.T`` through FP8: quantize both, :func:`scaled_mm`, bf16 output.

    Parameters
    ----------
    x : (M, K) and w : (N, K), tensors or array_like, finite; K and N multiples of 16
    fmt_x, fmt_w : FP8_E4M3 or FP8_E5M2 (not both E5M2)
    granularity : {"tensor", "row"}
        Scales per tensor, or per row of x and per row of w (= per output column).

    Returns
    -------
    torch.Tensor of bfloat16, shape (M, N)

    Raises
    ------
    As :func:`fp8_quantize` and :func:`scaled_mm`.
    """
    for name, fmt in (("fmt_x", fmt_x), ("fmt_w", fmt_w)):
        if fmt not in (FP8_E4M3, FP8_E5M2):
            raise TypeError(f"{name} must be FP8_E4M3 or FP8_E5M2, got {fmt!r}")
    qx = _fp8_quantize(x, fmt_x, granularity, device, "x")
    qw = _fp8_quantize(w, fmt_w, granularity, qx.data.device, "w")
    return scaled_mm(qx.data, qw.data.t(), qx.scale, qw.scale.reshape(1, -1)
                     if granularity == "row" else qw.scale)


# ---------------------------------------------------------------- block-scaled (MX, NVFP4)
def block_scaled_mm(qx: BlockQuantized, qw: BlockQuantized) -> torch.Tensor:
    """``x @ w.T`` from two block-quantized operands, accumulated block by block.

    ``y[m, n] = tx * tw * sum_j sx[m, j] * sw[n, j] * sum_{k in block j} ex[m, k] * ew[n, k]``:
    the element dot product of each block (exact in float64 for blocks of 32 elements of at
    most 4 significand bits), times both block scales, summed over blocks, times the tensor
    scales. This is the arithmetic of block-scaled tensor cores (OCP MX v1.0 section 6.4; NVFP4).

    Parameters
    ----------
    qx : BlockQuantized of x, shape (M, K), blocks along K
    qw : BlockQuantized of w, shape (N, K), the same block size

    Returns
    -------
    torch.Tensor of float64, shape (M, N)

    Raises
    ------
    TypeError
        If an operand is not a numfmt.torch BlockQuantized (numpy's holds arrays, not tensors).
    ValueError
        If the operands are not 2-D, K or the number of blocks differs.
    """
    for name, q in (("qx", qx), ("qw", qw)):
        if not isinstance(q, BlockQuantized):
            raise TypeError(f"{name} must be a numfmt.torch BlockQuantized (from "
                            "numfmt.torch.mx_quantize or nvfp4_quantize), got "
                            f"{type(q).__module__}.{type(q).__name__}")
    ex, ew = qx.elements, qw.elements
    if ex.ndim != 2 or ew.ndim != 2 or ex.shape[1] != ew.shape[1]:
        raise ValueError(f"operands must be (M, K) and (N, K), got {tuple(ex.shape)} and "
                         f"{tuple(ew.shape)}")
    nb = qx.scales.shape[-1]
    if qw.scales.shape[-1] != nb:
        raise ValueError(f"block sizes differ: {nb} and {qw.scales.shape[-1]} blocks along K")
    ex = ex.reshape(ex.shape[0], nb, -1)                           # (M, nb, B)
    ew = ew.reshape(ew.shape[0], nb, -1).to(ex.device)             # (N, nb, B)
    partial = torch.einsum("mjb,njb->mnj", ex, ew)                 # (M, N, nb), exact
    sx = qx.scales[:, None, :]                                     # (M, 1, nb)
    sw = qw.scales.to(ex.device)[None, :, :]                       # (1, N, nb)
    return (partial * sx * sw).sum(dim=-1) * (qx.tensor_scale * qw.tensor_scale)


def block_scaled_linear(x, w, quantize: Callable[..., BlockQuantized], device=None):
    """Quantize ``x`` (M, K) and ``w`` (N, K) with ``quantize`` and return
    ``(block_scaled_mm(qx, qw), qx, qw)``; ``quantize`` is e.g. ``numfmt.torch.nvfp4_quantize``.
    """
    # Checked under their own names first: quantize's messages would call both "x".
    x = as_calibration_tensor(x, "x", device=device)
    w = as_calibration_tensor(w, "w", device=x.device)
    qx = quantize(x, device=device)
    qw = quantize(w, device=qx.values.device)
    return block_scaled_mm(qx, qw), qx, qw


def fp8_kernel_available(device=None) -> bool:
    """Whether ``torch._scaled_mm`` runs on ``device``: CUDA with compute capability 8.9 (Ada)
    or 9.0 and higher (Hopper, Blackwell), as torch's CUDA kernel requires; ``device``
    defaults to :func:`numfmt.torch.default_device`."""
    dev = torch.device(device) if device is not None else default_device()
    if dev.type != "cuda" or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability(dev) >= (8, 9)


def native_block_scaled_available(device=None) -> bool:
    """Whether torch can run MXFP8/MXFP4/NVFP4 GEMMs natively here: CUDA compute capability 10.0
    or later, every Blackwell GPU (B200/GB200 are sm_100, RTX 50 and DGX Spark sm_120/121; all
    have block-scaled MMA), the test torch itself uses (``PLATFORM_SUPPORTS_MX_GEMM`` in
    ``torch.testing._internal.common_cuda``). The scales must be in cuBLAS's swizzled tiles."""
    dev = torch.device(device) if device is not None else None
    if not torch.cuda.is_available() or (dev is not None and dev.type != "cuda"):
        return False
    return torch.cuda.get_device_capability(dev) >= (10, 0)
