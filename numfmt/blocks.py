"""Scaled floating-point quantization: one mechanism, from a whole-tensor scale to block scales.

A block of ``block`` consecutive elements along the last axis shares one scale ``s``; each element
is stored as ``elem.round(x / s)``, and the value is ``element * s * tensor_scale``. The presets:

- :func:`tensor_scaled`: one exact scale ``amax / elem.max_value`` for the whole tensor.
- :func:`mx_quantize`: OCP Microscaling (MX) v1.0, section 6.3: blocks of 32, shared scale
  ``2^(floor(log2 amax) - emax_elem)`` stored as E8M0, elements saturate at the element format's max.
- :func:`nvfp4_quantize`: NVIDIA NVFP4: E2M1 elements in blocks of 16, block scales in E4M3,
  and an FP32 tensor scale ``amax / (6 * 448)`` so that block scales use E4M3's whole range.
- :func:`block_quantize`: the general form, with the scale kind as a parameter, for ablations.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt import _xp
from numfmt._chunks import absmax_rows, rows_per_chunk
from numfmt._validate import as_calibration_array, check_block
from numfmt.formats import (E8M0, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FP32,
                            FloatFormat)

__all__ = ["MX_ELEMENTS", "SCALE_BITS", "CLIP_TOLERANCE", "saturated", "scaled_round",
           "fp32_tensor_scale", "exact_scales", "BlockQuantized", "SCALE_RULES", "e8m0_exponent", "block_quantize",
           "mx_quantize", "nvfp4_quantize", "tensor_scaled"]

#: The element formats OCP MX v1.0 defines (section 5, table 1): MXFP8 E4M3 and E5M2, MXFP6
#: E2M3 and E3M2, MXFP4 E2M1. ``block_quantize`` takes any signed FloatFormat; these are the
#: standard ones.
MX_ELEMENTS = (FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1)

#: Scale kinds of :func:`block_quantize` and the bits each stored scale costs.
SCALE_BITS = {"e8m0": 8, "e4m3": 8, "exact": 32}

# An exact scale maps the block maximum to max_value up to one float64 rounding of the
# division (448.00000000000006): that is not clipping, so a few ulps are allowed.
CLIP_TOLERANCE = 1 + 4 * np.finfo(np.float64).eps


def fp32_tensor_scale(t_amax: float, elem: FloatFormat) -> float:
    """NVFP4's second-level scale ``amax / (elem.max_value * 448)`` as stored in FP32.

    Rounded to nearest even in FP32; clamped to FP32's finite range [2^-149, max] (a tensor
    scale of 0 or Inf would turn the whole tensor into zeros or NaN), so a tensor beyond it
    saturates (reported by ``clipped``) or flushes block by block through its E4M3 scales.
    """
    ideal = t_amax / (elem.max_value * FP8_E4M3.max_value)
    # The hardware cast of a float64 to float32 rounds to nearest even, subnormals included,
    # and overflows to Inf: FP32.round(ideal) before the clamp (a tenth of its cost for
    # one number, which NVFP4 pays once per quantized tensor).
    with np.errstate(over="ignore"):
        g = float(np.float32(ideal))
    return min(max(g, FP32.min_subnormal), FP32.max_value)


def exact_scales(amax: np.ndarray, max_value: float, xp=None) -> np.ndarray:
    """Exact scales ``amax / max_value`` (float64), one ulp moved where rounding misplaces them.

    Rounding the quotient up near float64's max puts ``max_value * s`` past it (the top
    element would dequantize to Inf): take the float below. A float64-subnormal quotient can
    round down so far that ``amax / s`` exceeds ``max_value`` (the top element would saturate
    and the block come back several percent low): take the float above. One step suffices in
    both cases; elsewhere the quotient is unchanged. 0 stays 0 (the quotient underflowed).
    ``amax`` is a numpy array or a torch tensor (numfmt.torch uses this very code); ``xp``, its
    array namespace, is found from it when not given.
    """
    if not _xp.is_array_api_obj(amax):
        amax = np.asarray(amax, dtype=np.float64)
    xp = xp if xp is not None else _xp.array_namespace(amax)
    s = amax / max_value
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        over = ~xp.isfinite(s * max_value)
        low = (s > 0) & (amax / xp.where(s > 0, s, 1.0) > max_value * CLIP_TOLERANCE)
    if bool(over.any()) or bool(low.any()):
        down = xp.nextafter(s, xp.zeros_like(s))
        up = xp.nextafter(s, xp.full_like(s, float("inf")))
        s = xp.where(over, down, xp.where(low, up, s))
    return s


def saturated(y, fmt: FloatFormat) -> np.ndarray:
    """True where ``y`` rounds (nearest-even, unbounded exponent) beyond ``fmt.max_value``.

    numfmt's one definition of "saturated": where the clamp to ``max_value``, not rounding,
    sets the stored value. The boundary is the midpoint between ``max_value`` and the next
    step ``max_value + 2^(emax - man_bits)``; at the midpoint itself the tie goes to the even
    mantissa, which is ``max_value``'s only in "fn" formats such as E4M3 (top mantissa 110,
    the all-ones code being NaN), so E4M3 saturates above 464, E5M2 from 61440, E2M1 from 7.
    It is the STE mask of :func:`numfmt.qat.fake_quantize_float` (``mask = ~saturated``) and
    the rate :func:`numfmt.scaling.quantize_with_scale` reports as ``clipped``.

    Parameters
    ----------
    y : ndarray of real numbers, any shape (the quotient ``x / scale``); +-Inf saturates
    fmt : FloatFormat

    Returns
    -------
    ndarray of bool, the shape of ``y``.
    """
    boundary = fmt.max_value + np.ldexp(1.0, fmt.emax - fmt.man_bits) / 2
    tie_stays = fmt.specials == "fn" and fmt.man_bits > 0
    a = np.abs(y)
    return (a > boundary) if tie_stays else (a >= boundary)


def scaled_round(x: np.ndarray, fmt: FloatFormat, scale, mode: str = "nearest", rng=None):
    """``y = x / scale``, ``elements = fmt.round(y)`` (saturating), ``values = elements * scale``.

    The one scaled-float quantizer behind :func:`tensor_scaled`, :func:`block_quantize`,
    :func:`numfmt.scaling.quantize_with_scale` and :func:`numfmt.qat.fake_quantize_float`; they
    differ only in how they choose ``scale`` and what they report about ``y`` (see
    :func:`saturated`). No input checks: the callers make them.

    Parameters
    ----------
    x : ndarray of float32 or float64, any shape
    fmt : FloatFormat
    scale : ndarray or float, positive, broadcastable against ``x``
    mode, rng : as :meth:`FloatFormat.round`

    Returns
    -------
    (elements, values, y) : float64 ndarrays of the broadcast shape (``y`` keeps float32 when
    ``x`` and ``scale`` are float32); a quotient beyond float64 is Inf and saturates.
    """
    with np.errstate(over="ignore"):
        y = x / scale
    elements = fmt.round(y, saturate=True, mode=mode, rng=rng)
    return elements, elements * scale, y


class BlockQuantized(NamedTuple):
    """Result of a scaled quantization; ``values`` first, so ``result[0]`` is the tensor."""

    values: np.ndarray       #: dequantized, float64, shape of x
    elements: np.ndarray     #: element values on the element format's grid, float64, shape of x
    scales: np.ndarray       #: stored block scales, float64, shape x.shape[:-1] + (n_blocks,)
    tensor_scale: float      #: second-level FP32 scale (NVFP4); 1.0 where there is none
    clipped: float           #: fraction of elements whose |x / scale| exceeded elem.max_value
    bits_per_element: float  #: element bits + scale bits / block (tensor scale not counted)

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(result)`` is ``result.values``: code written for an array still works."""
        if copy is False:
            raise ValueError("a BlockQuantized converts to an array only by copying its values")
        return np.array(self.values, dtype=dtype)


#: Rules for the shared E8M0 exponent of :func:`block_quantize` (``scale_format="e8m0"``).
SCALE_RULES = ("floor", "rceil")


def e8m0_exponent(amax, elem: FloatFormat, scale_rule: str = "floor") -> np.ndarray:
    """Unbiased exponent of the E8M0 block scale for block maxima ``amax`` (all > 0).

    Parameters
    ----------
    amax : ndarray of float64, any shape, every entry positive and finite
    elem : FloatFormat, the element format
    scale_rule : {"floor", "rceil"}
        ``"floor"``: ``floor(log2 amax) - elem.emax`` (OCP MX v1.0, section 6.3). The block
        maximum lands in ``[2^emax, 2^(emax+1))`` after division, so values above
        ``elem.max_value`` saturate (E4M3: [256, 512) against a max of 448).
        ``"rceil"``: ``ceil(log2 d)`` with the FP32 product ``d = FP32(FP32(amax) *
        FP32(1 / elem.max_value))``: the smallest power of two that keeps the block maximum
        within ``elem.max_value`` (up to that FP32 rounding), so nothing saturates. This is the
        rule of NVIDIA's MXFP8 recipe and cuBLAS, computed as torchao's RCEIL does.

    Returns
    -------
    ndarray of int64, the shape of ``amax``, clamped to E8M0's [-127, 127]

    References
    ----------
    OCP Microscaling Formats (MX) Specification v1.0, 2023, section 6.3. Mishra et al.,
    "Recipes for Pre-training LLMs with MXFP8", arXiv:2506.08027, 2025 (rounding the scale
    up). cuBLAS documentation, "1D block quantization". torchao
    ``torchao/prototype/mx_formats/mx_tensor.py``, ``_f32_to_e8m0_rceil`` (git 36027d8).
    """
    if not _xp.is_array_api_obj(amax):
        amax = np.asarray(amax, dtype=np.float64)
    xp = _xp.array_namespace(amax)
    if scale_rule == "floor":
        e = _xp.floor_log2(xp, amax) - elem.emax
    elif scale_rule == "rceil":
        with _xp.quiet(xp):  # beyond FP32: Inf, clamped to E8M0's top below
            d = xp.astype(amax, xp.float32) * xp.asarray(1 / elem.max_value, dtype=xp.float32,
                                                         device=_device(amax))
        fmax = float(np.finfo(np.float32).max)
        bits = _xp.float32_bits(xp, xp.where(xp.isfinite(d), d, fmax))
        biased = (bits >> 23) & 0xFF
        mantissa = bits & 0x7FFFFF
        # A normal FP32 d rounds up when any mantissa bit is set. An FP32 subnormal d is below
        # 2^-126: it becomes 2^-127 (E8M0's smallest) or, above 2^-127, 2^-126.
        up = xp.where(biased == 0, mantissa > 0x400000, mantissa != 0)
        e = xp.where(biased == 0, xp.where(up, -126, -127),
                     biased + xp.astype(up, xp.int64) - 127)
    else:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    return xp.clip(e, E8M0.emin, E8M0.emax)


def _device(a):
    """``a``'s device for a new array beside it (None for numpy)."""
    return None if isinstance(a, np.ndarray) else a.device


def _check_elem(elem) -> FloatFormat:
    if not isinstance(elem, FloatFormat) or not elem.signed:
        raise TypeError(f"elem must be a signed FloatFormat such as FP4_E2M1, got {elem!r}")
    return elem


def block_quantize(x, elem: FloatFormat, block: int, scale_format: str = "e8m0",
                   scale_rule: str = "floor") -> BlockQuantized:
    """Quantize ``x`` to ``elem`` with one scale per ``block`` elements along the last axis.

    Parameters
    ----------
    x : array_like of real numbers, shape (..., K), non-empty and finite
    elem : FloatFormat
        Element format (signed), e.g. ``FP4_E2M1``.
    block : int
        Block size; must divide ``K``.
    scale_format : {"e8m0", "e4m3", "exact"}
        ``"e8m0"``: power of two ``2^(floor(log2 amax) - elem.emax)``, exponent clamped to
        E8M0's [-127, 127] (OCP MX v1.0 section 6.3). ``"e4m3"``: FP32 tensor scale
        ``g = amax_tensor / (elem.max_value * 448)``, block scale ``E4M3(amax / elem.max_value / g)``
        (NVFP4). ``"exact"``: ``amax / elem.max_value`` in float64 (an FP32-stored ideal).
    scale_rule : {"floor", "rceil"}, default "floor"
        How ``"e8m0"`` picks its exponent (see :func:`e8m0_exponent`): ``"floor"`` is the OCP
        rule above, ``"rceil"`` rounds the exponent up so no block maximum saturates (NVIDIA's
        MXFP8 recipe, cuBLAS, torchao's RCEIL). Only ``"floor"`` applies to other scale formats.

    Returns
    -------
    BlockQuantized
        ``values`` and ``elements`` with the shape of ``x``; ``scales`` of shape
        ``x.shape[:-1] + (K // block,)``; ``bits_per_element = elem.bits + scale bits / block``.
        An all-zero block gets scale 1.0 (E8M0, exact) and zero elements. An E4M3 block scale
        that underflows to 0 is stored as 0 and its block decodes to zeros, as hardware does;
        so does an exact scale that underflows float64 (amax of a few float64 subnormals).
        The FP32 tensor scale of "e4m3" is kept within FP32's finite range (see
        :func:`fp32_tensor_scale`): beyond it, elements saturate and count as clipped.
        An exact scale is moved by one ulp where rounding would put the top element past
        float64's max or past ``elem.max_value`` (see :func:`exact_scales`). A 0-d ``x`` gives
        0-d ``values`` and ``elements`` and scales of shape (1,).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued, ``elem`` is not a signed FloatFormat, ``block`` not an int.
    ValueError
        If ``x`` is empty or non-finite, ``block`` does not divide ``K``, ``scale_format`` or
        ``scale_rule`` is unknown, or ``scale_rule="rceil"`` is asked of a non-E8M0 scale.
    """
    shape = np.shape(x)
    plain32 = _is_plain_float32(x)
    if plain32:
        # float32 input is used as it is, never copied to float64 whole: |x| and its block
        # maxima are exact in float32, and x / scale is exact in float32 (power-of-two scale)
        # or widened chunk by chunk (below). Its block maxima check it is finite (below).
        src = x
    else:
        src = as_calibration_array(x)
    elem, block = _block_args(elem, scale_format, scale_rule, src.shape[-1], block)
    x = src
    xb = src.reshape(x.shape[:-1] + (x.shape[-1] // block, block))  # (..., n_blocks, block)
    amax = absmax_rows(src.reshape(-1, block)).astype(np.float64).reshape(xb.shape[:-1])
    if plain32 and not np.isfinite(amax).all():  # max and abs carry NaN and Inf through
        as_calibration_array(x)  # raises its error about the first non-finite value
    return _block_result(amax, src.reshape(-1, block), shape, elem, scale_format, scale_rule,
                         _scaled_round)


def _block_args(elem, scale_format, scale_rule, k: int, block) -> tuple[FloatFormat, int]:
    """block_quantize's argument checks (numpy and torch): ``(elem, block)`` checked."""
    elem = _check_elem(elem)
    if scale_format not in SCALE_BITS:
        raise ValueError(f"scale_format must be one of {tuple(SCALE_BITS)}, got {scale_format!r}")
    _check_scale_rule(scale_rule, scale_format)
    return elem, check_block(k, block)


def _block_result(amax, rows, shape: tuple, elem: FloatFormat, scale_format: str,
                  scale_rule: str, scaled_round) -> BlockQuantized:
    """block_quantize from the block maxima ``amax`` (..., n_blocks) and the blocks ``rows``
    (n, block): the scales, then ``scaled_round(rows, full_scales, elem, pow2)`` (the
    library's own chunked rounding), shaped to ``shape``."""
    xp = _xp.array_namespace(amax)
    scales, tensor_scale = _block_scales(amax, elem, scale_format, scale_rule)
    full = xp.reshape(scales * tensor_scale, (-1,))                 # (n,)
    elements, values, clipped = scaled_round(rows, full, elem, pow2=scale_format == "e8m0")
    return BlockQuantized(xp.reshape(values, shape), xp.reshape(elements, shape), scales,
                          tensor_scale, clipped,
                          elem.bits + SCALE_BITS[scale_format] / rows.shape[1])


def _scalar(t) -> float:
    """A 0-d array or tensor as a Python float; a grad-requiring tensor is detached first, so
    autograd does not warn (the scale is a constant of the quantizer, not differentiated)."""
    return float(t.detach() if hasattr(t, "detach") else t)


def _block_scales(amax, elem: FloatFormat, scale_format: str, scale_rule: str):
    """``(scales, tensor_scale)`` of block_quantize from the block maxima ``amax`` (float64,
    numpy or torch): stored block scales of the same shape, and the FP32 tensor scale
    (1.0 unless ``scale_format == "e4m3"``)."""
    xp = _xp.array_namespace(amax)
    tensor_scale = 1.0
    if scale_format == "e4m3":
        t_amax = _scalar(xp.max(amax))
        if t_amax > 0:
            tensor_scale = fp32_tensor_scale(t_amax, elem)
        return _xp.round_to(xp, amax / elem.max_value / tensor_scale, FP8_E4M3), tensor_scale
    positive = amax > 0  # an all-zero block gets scale 1
    if scale_format == "e8m0":
        exponent = e8m0_exponent(xp.where(positive, amax, 1.0), elem, scale_rule)
        return xp.where(positive, _xp.pow2(xp, exponent), 1.0), tensor_scale
    return xp.where(positive, exact_scales(amax, elem.max_value), 1.0), tensor_scale


def _is_plain_float32(x) -> bool:
    """Whether ``x`` is a non-empty float32 ndarray (not a subclass such as a masked array)
    of at least one dimension: one that needs no conversion, only the finiteness check."""
    return type(x) is np.ndarray and x.dtype == np.float32 and x.ndim >= 1 and x.size > 0


def _scaled_round(xb: np.ndarray, full: np.ndarray, elem: FloatFormat, pow2: bool):
    """``elements = elem.round(xb / full)`` (0 where full == 0), ``values = elements * full``
    and the clipped fraction, for blocks ``xb`` (n, block) and their scales ``full`` (n,).

    Chunk by chunk, so the quotient and the masks stay in cache and only the two results are
    full-size. A power-of-two scale divides float32 input exactly, so the quotient stays in
    float32 (and its rounding takes the float32 path) when the element format's grid ends
    above float32's subnormals (a quotient below 2^-126 rounds to zero either way).
    """
    n, block = xb.shape
    f32 = pow2 and xb.dtype == np.float32 and elem._float32_exact \
        and elem.min_subnormal / 2 >= 2.0**-126
    # Otherwise a float32 chunk divided by the float64 scale is widened first, exactly.
    limit = np.float32(elem.max_value) if f32 else elem.max_value * CLIP_TOLERANCE
    safe = np.where(full > 0, full, 1.0)[:, None]                  # (n, 1)
    divisor = safe.astype(np.float32) if f32 else safe             # exact: powers of two
    # A power of two's reciprocal is one too (2^-127 .. 2^127 in float32), and x * 2^-k is
    # x / 2^k bit for bit (both are the correctly rounded x * 2^-k); multiplying is faster.
    reciprocal = (np.float32(1) / divisor) if f32 else None
    # values = elements * 2^k is exact in float32 too where the element grid's last place
    # times E8M0's smallest scale 2^-127 is a float32 number (2^-149 or above; not FP16
    # elements), and below float32's max (|elements| < 2^(emax+1), 2^k <= amax / 2^emax).
    v32 = f32 and elem.min_subnormal * 2.0**-127 >= 2.0**-149
    zero = full == 0
    any_zero = bool(zero.any())
    elements, values = np.empty((n, block)), np.empty((n, block))
    n_clipped = 0
    rows = rows_per_chunk(block)
    for i in range(0, n, rows):
        sl = slice(i, i + rows)
        if f32:
            # scaled_round's arithmetic, written into the results: the float32 elements are
            # widened as they are stored. The scale repeated per element makes both products
            # contiguous one-dimensional passes (numpy broadcasts a (rows, 1) operand over 32
            # columns at a third of that speed).
            r = np.repeat(reciprocal[sl], block)
            with np.errstate(over="ignore"):  # as in scaled_round
                y = xb[sl].reshape(-1) * r
            e = elem._nearest_float32_values(y, True)
            elements[sl] = e.reshape(-1, block)
            if v32:
                np.divide(e, r, out=r)  # e * 2^k, exact (above)
                values[sl] = r.reshape(-1, block)
            else:
                np.multiply(elements[sl], safe[sl], out=values[sl])
        else:
            elements[sl], values[sl], y = scaled_round(xb[sl], elem, divisor[sl])
        # "clipped" counts elements beyond max_value (they were moved by more than rounding),
        # a wider set than saturated(y): (448, 464] rounds to 448 in E4M3 but counts here.
        np.abs(y, out=y)
        n_clipped += int(np.count_nonzero(y > limit))
        if any_zero:
            elements[sl][zero[sl]] = 0.0
            values[sl][zero[sl]] = 0.0
    return elements, values, n_clipped / xb.size


def mx_quantize(x, elem: FloatFormat, block: int = 32, scale_rule: str = "floor") -> BlockQuantized:
    """OCP MX quantization: ``elem`` elements, one E8M0 power-of-two scale per ``block``.

    MXFP8 is ``mx_quantize(x, FP8_E4M3)`` (or FP8_E5M2), MXFP6 uses FP6_E2M3 / FP6_E3M2, MXFP4
    uses FP4_E2M1; each costs ``elem.bits + 8 / 32`` bits per element. ``scale_rule`` is
    ``"floor"`` (OCP MX v1.0, the default) or ``"rceil"`` (exponent rounded up, NVIDIA's MXFP8
    recipe; see :func:`e8m0_exponent`). Shapes, errors and return value as
    :func:`block_quantize` with ``scale_format="e8m0"``.

    References: OCP Microscaling Formats (MX) Specification v1.0, sections 5.3 and 6.3;
    Mishra et al., arXiv:2506.08027, 2025 (RCEIL).
    """
    return block_quantize(x, elem, block, "e8m0", scale_rule)


def _check_scale_rule(scale_rule, scale_format: str) -> None:
    if not isinstance(scale_rule, str) or scale_rule not in SCALE_RULES:
        raise ValueError(f"scale_rule must be one of {SCALE_RULES}, got {scale_rule!r}")
    if scale_rule != "floor" and scale_format != "e8m0":
        raise ValueError(f"scale_rule={scale_rule!r} applies to scale_format='e8m0' only, "
                         f"got scale_format={scale_format!r}")


def nvfp4_quantize(x, block: int = 16) -> BlockQuantized:
    """NVFP4: E2M1 elements, one E4M3 scale per 16, and an FP32 tensor scale amax / (6 * 448).

    4.5 bits per element (the tensor scale is not counted). Shapes, errors and return value as
    :func:`block_quantize` with ``elem=FP4_E2M1, scale_format="e4m3"``.

    References: NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference",
    2025; NVIDIA Transformer Engine NVFP4 recipe (two-level scaling).
    """
    return block_quantize(x, FP4_E2M1, block, "e4m3")


def tensor_scaled(x, elem: FloatFormat) -> BlockQuantized:
    """Quantize ``x`` to ``elem`` with one exact scale ``amax / elem.max_value`` for the tensor.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    elem : FloatFormat, signed

    Returns
    -------
    BlockQuantized
        ``tensor_scale`` holds the scale (1.0 for an all-zero tensor; 0.0, with zero elements,
        where ``amax / elem.max_value`` underflows float64; moved one ulp as in
        :func:`exact_scales` where rounding would make the top element overflow float64 or
        saturate); ``scales`` is ones of shape ``x.shape[:-1] + (1,)`` (a 0-d ``x`` counts
        as shape (1,) there; ``values`` and ``elements`` keep its shape);
        ``bits_per_element = elem.bits``; ``clipped`` is 0: no element exceeds
        ``elem.max_value`` under this scale.

    Raises
    ------
    TypeError, ValueError
        As :func:`block_quantize`.
    """
    return _tensor_scaled(as_calibration_array(x), np.shape(x), elem)


def _tensor_scaled(x, shape: tuple, elem: FloatFormat) -> BlockQuantized:
    """tensor_scaled on a checked float64 array of either namespace; results shaped ``shape``."""
    xp = _xp.array_namespace(x)
    elem = _check_elem(elem)
    amax = _scalar(xp.max(xp.abs(x)))
    s = float(exact_scales(xp.asarray(amax, dtype=xp.float64), elem.max_value)) \
        if amax > 0 else 1.0
    if s > 0:  # scaled_round's steps
        with _xp.quiet(xp):
            elements = _xp.round_to(xp, x / s, elem)
        values = elements * s
    else:  # amax is a few float64 subnormals and the scale underflows: flush to zero
        elements = values = xp.zeros_like(x)
    ones = xp.ones(tuple(x.shape[:-1]) + (1,), dtype=xp.float64, device=_device(x))
    return BlockQuantized(xp.reshape(values, shape), xp.reshape(elements, shape), ones, s, 0.0,
                          float(elem.bits))
