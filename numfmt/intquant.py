"""Integer quantization: a scale, a zero point, and codes on a uniform grid.

``q = clamp(round(x / scale) + zero_point, qmin, qmax)`` and ``x_hat = (q - zero_point) * scale``,
with round half to even. Symmetric quantization uses the restricted signed range
``[-(2^(b-1) - 1), 2^(b-1) - 1]`` and zero point 0; asymmetric (affine) quantization uses the
unsigned range ``[0, 2^b - 1]`` over ``[min, max]`` widened to contain 0, with an integer zero
point so that 0 is represented exactly.

References: Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018, section 2; Nagel et al., "A White Paper on Neural
Network Quantization", 2021, section 2.

The bodies are written once over the array API (:mod:`numfmt._xp`): :mod:`numfmt.torch.intquant`
checks tensors and calls them, so numpy and torch compute the same float64 operations in the same
order and agree bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt import _xp
from numfmt.metrics import _CHUNK, rel_error
from numfmt._validate import (as_calibration_array, as_integer_array, as_real_array, check_block,
                              check_bool, check_clip, check_code_range, check_int)

__all__ = ["GRANULARITIES", "IntQuantized", "int_range", "grouped_view_shape",
           "quantize_affine", "dequantize_affine", "quantize_int", "clip_sweep"]

GRANULARITIES = ("tensor", "channel", "group")
MIN_BITS, MAX_BITS = 2, 16


class IntQuantized(NamedTuple):
    """Result of :func:`quantize_int`; unpacks as ``values, codes, scale, zero_point``."""

    values: np.ndarray      #: dequantized values, float64, shape of x (a tensor in numfmt.torch)
    codes: np.ndarray       #: integer codes, int64, shape of x
    scale: np.ndarray       #: float64, see quantize_int for the shape
    zero_point: np.ndarray  #: int64, same shape as scale


def int_range(bits: int, symmetric: bool = True) -> tuple[int, int]:
    """Return ``(qmin, qmax)``: ``(-(2^(b-1)-1), 2^(b-1)-1)`` if symmetric, else ``(0, 2^b-1)``.

    Raises
    ------
    TypeError, ValueError
        If ``bits`` is not an integer in [2, 16], or ``symmetric`` is not a bool.
    """
    check_int(bits, "bits")
    if not MIN_BITS <= bits <= MAX_BITS:
        raise ValueError(f"bits must be in [{MIN_BITS}, {MAX_BITS}], got {bits}")
    if check_bool(symmetric, "symmetric"):
        return -(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1


def grouped_view_shape(shape: tuple, granularity: str, group) -> tuple:
    """Check ``granularity``/``group`` against a tensor's ``shape``; return the shape to view it as.

    Parameters
    ----------
    shape : tuple of int, (..., K)
    granularity : {"tensor", "channel", "group"}
    group : int or None, only (and always) with "group"; must divide K

    Returns
    -------
    tuple of int
        ``shape[:-1] + (K // group, group)`` for "group", else ``shape`` unchanged. The scales
        then reduce over every axis ("tensor") or the last one ("channel", "group").

    Raises
    ------
    TypeError, ValueError
        As :func:`quantize_int` for its ``granularity`` and ``group`` arguments.
    """
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if granularity != "group":
        if group is not None:
            raise ValueError(f'group={group} is only meaningful with granularity="group"')
        return tuple(shape)
    if group is None:
        raise ValueError('granularity="group" needs a group size, e.g. group=32')
    group = check_block(shape[-1], group, "group")
    return tuple(shape[:-1]) + (shape[-1] // group, group)


def _affine_scale(lo, hi, levels: int):
    """``(hi - lo) / levels``, also where ``hi - lo`` overflows float64 (ranges above 1.8e308).

    There both bounds are huge, so halving them is exact and ``(hi/2 - lo/2) / levels * 2``
    is the same correctly rounded quotient; elsewhere the first form is used unchanged.
    """
    lo, hi = (v if _xp.is_array_api_obj(v) else np.asarray(v, dtype=np.float64) for v in (lo, hi))
    xp = _xp.array_namespace(lo, hi)
    with _xp.quiet(xp):
        width = hi - lo
    if bool(xp.all(xp.isfinite(width))):
        return width / levels
    return xp.where(xp.isfinite(width), width / levels, (hi * 0.5 - lo * 0.5) / levels * 2.0)


_TINY = float(np.finfo(np.float64).tiny)


def _check_calibrated_scale(scale: np.ndarray, nonzero: np.ndarray, clip: float) -> None:
    """Refuse a scale of a non-zero tensor, row or group that is not a normal float64.

    Below 2**-1022 the scale loses digits and at 0 the "all-zero gets scale 1" rule would
    return the input unchanged (clip = 1e-323 made quantization the identity).
    """
    bad = nonzero & ~(scale >= _TINY)
    if bool(bad.any()):  # numpy arrays and torch tensors alike (numfmt.torch.intquant)
        what = "tensor, row or group" if scale.reshape(-1).shape[0] > 1 else "tensor"
        fix = ("multiply x by a power of two first" if clip >= 1.0 else   # clip is at most 1
               "multiply x by a power of two first, or use a larger clip")
        raise ValueError(f"the scale {float(scale[bad].reshape(-1)[0]):.6g} of a non-zero "
                         f"{what} is below "
                         f"float64's smallest normal number {_TINY:.6g}: the values are too "
                         f"small (max |x| / qmax{' * clip' if clip < 1.0 else ''}); {fix}")


def quantize_affine(x, scale, zero_point=0, qmin: int = -127, qmax: int = 127) -> np.ndarray:
    """Return the codes ``clamp(round_half_even(x / scale) + zero_point, qmin, qmax)``.

    Parameters
    ----------
    x : array_like of real numbers
    scale : array_like, positive, broadcastable against ``x``
    zero_point : array_like of integers, broadcastable against ``x``
    qmin, qmax : int
        The code range, ``qmin <= qmax``, within +-2**53 (the codes are computed in float64).

    Returns
    -------
    ndarray of int64, the broadcast shape. NaN is refused; +-Inf (and a quotient ``x / scale``
    beyond float64's range) clamps to qmin/qmax.

    Raises
    ------
    TypeError
        If ``x`` or ``scale`` is not real-valued, ``zero_point`` does not hold integers, or
        ``qmin``/``qmax`` is not an integer.
    ValueError
        If a scale is not positive and finite, ``x`` contains NaN, ``qmin > qmax``, or
        ``qmin``/``qmax`` lies beyond +-2**53 (clamping there and casting would wrap int64).
    """
    x = as_real_array(x)
    scale = _check_scale(scale)
    zero_point = as_integer_array(zero_point, "zero_point")
    return _affine_codes(np.asarray(x), np.asarray(scale), np.asarray(zero_point), qmin, qmax)


def _affine_codes(x, scale, zero_point, qmin: int, qmax: int):
    """quantize_affine's arithmetic on checked arrays of one namespace (numpy or torch)."""
    qmin, qmax = check_code_range(qmin, qmax)
    xp = _xp.array_namespace(x, scale, zero_point)
    if bool(xp.any(xp.isnan(x))):
        raise ValueError("x contains NaN: it has no integer code")
    with _xp.quiet(xp):  # an overflowing quotient is +-inf and clamps
        q = xp.asarray(xp.round(x / scale) + zero_point)  # asarray: 0-d numpy stays an array
    return xp.astype(xp.clip(q, qmin, qmax), xp.int64)


def _check_scale(scale) -> np.ndarray:
    scale = as_real_array(scale, "scale")
    bad = ~(np.isfinite(scale) & (scale > 0))
    if bad.any():
        raise ValueError(f"scale must be positive and finite, got {float(scale[bad].ravel()[0])!r}")
    return scale


def dequantize_affine(codes, scale, zero_point=0) -> np.ndarray:
    """Return ``(codes - zero_point) * scale`` as float64 (shapes broadcast).

    Parameters
    ----------
    codes : array_like of integers (or integer-valued reals)
    scale : array_like, positive and finite, broadcastable against ``codes``
    zero_point : array_like of integers, broadcastable against ``codes``

    Returns
    -------
    ndarray of float64, the broadcast shape.

    Raises
    ------
    TypeError
        If ``codes`` or ``scale`` is not real-valued or ``zero_point`` does not hold integers.
    ValueError
        If a scale is not positive and finite, or a value ``(codes - zero_point) * scale``
        lies beyond float64's range (it would be +-Inf).
    """
    codes = as_real_array(codes, "codes")
    scale = _check_scale(scale)
    zero_point = as_integer_array(zero_point, "zero_point")
    return _affine_values(codes, scale, zero_point)


def _affine_values(codes, scale, zero_point):
    """dequantize_affine's arithmetic on checked arrays of one namespace (numpy or torch)."""
    xp = _xp.array_namespace(codes, scale, zero_point)
    with _xp.quiet(xp):  # NaN codes (signalling too) give NaN
        out = (codes - zero_point) * scale
    # Finite codes and scales: an Inf is an overflow (an infinite code stays infinite).
    if bool(xp.any(xp.isinf(out) & xp.isfinite(codes))):
        raise ValueError("(codes - zero_point) * scale lies beyond float64's range "
                         f"(max {np.finfo(np.float64).max:.6g}) for some element")
    return out


def _zero_point(lo, hi, scale, qmin: int, qmax: int):
    """The asymmetric grid's integer zero point ``round_half_even(-lo / scale)``, clamped to
    [qmin, qmax] (int64), for ``lo <= 0 <= hi`` and the ``scale`` that ``_affine_scale`` made
    of them (1 where the range is zero).

    A symmetric range (``-lo == hi > 0``; AWQ's clip search makes one of every group it clips
    on both sides) has the exact quotient ``qmax / 2``, a half-integer, and takes it rounded
    half to even: 2^(b-1). The floating-point quotient ``hi / fl(2 hi / qmax)`` lands a last
    bit above, on or below the half-integer as the rounding of the scale goes, which follows
    the last bits of ``hi``: the zero point, and with it every code of the group, would hang
    on them (the quotient falls below the half-integer for a few percent of random ranges at 3
    and 4 bits). Everywhere else the quotient is
    the float64 one, as in the GPTQ and AWQ reference code. :func:`_symmetric_ties` handles
    the range's lower end, the other half-integer of such a group.
    """
    xp = _xp.array_namespace(lo, hi, scale)
    with _xp.quiet(xp):
        z = xp.round(-lo / scale)
    tie = _symmetric_ties(lo, hi)
    if tie is not None:
        z = xp.where(tie, xp.full_like(z, float(np.rint(qmax / 2))), z)
    return xp.astype(xp.clip(z, qmin, qmax), xp.int64)


def _symmetric_ties(lo, hi):
    """The asymmetric groups whose range is symmetric (``-lo == hi > 0``), as a boolean array
    of the groups' shape, or None when there is none. Their lowest element ``lo`` sits at the
    exact quotient ``-qmax / 2``, a half-integer that rounds half to even onto code 0 (with
    the zero point 2^(b-1) of :func:`_zero_point`), where the float64 quotient ``lo / scale``
    would go to code 0 or 1 with the last bits of ``lo`` (the top end clamps to ``qmax``
    either way)."""
    xp = _xp.array_namespace(lo, hi)
    tie = (hi == -lo) & (hi > 0)
    return tie if bool(xp.any(tie)) else None


def quantize_int(x, bits: int, symmetric: bool = True, granularity: str = "tensor",
                 group: int | None = None, clip: float = 1.0) -> IntQuantized:
    """Quantize ``x`` to ``bits``-bit integers with scales calibrated from its range.

    Parameters
    ----------
    x : array_like of real numbers, shape (..., K), non-empty and finite
    bits : int in [2, 16]
    symmetric : bool, default True
        True: signed restricted range, zero point 0, ``scale = clip * amax / qmax``.
        False: unsigned ``[0, 2^b - 1]`` over ``[min(x, 0), max(x, 0)] * clip``, with
        ``scale = clip * (max - min) / (2^b - 1)`` and integer ``zero_point = round(-clip * min / scale)``
        (on a symmetric range ``min = -max``: 2^(b-1), the exact quotient (2^b - 1) / 2
        rounded half to even, not the floating-point one, which follows the last bit of max).
    granularity : {"tensor", "channel", "group"}
        One scale for the whole tensor; one per row (reducing over the last axis); or one per
        ``group`` consecutive elements along the last axis.
    group : int, only with granularity="group"
        Group size; must divide ``K``.
    clip : float in (0, 1]
        Fraction of the calibrated range to keep; values beyond it saturate.

    Returns
    -------
    IntQuantized
        ``values`` (float64, shape of x), ``codes`` (int64, shape of x), ``scale`` (float64)
        and ``zero_point`` (int64) with shape ``(1,) * x.ndim`` for "tensor",
        ``x.shape[:-1] + (1,)`` for "channel" (both broadcast against ``x``), and
        ``x.shape[:-1] + (K // group, 1)`` for "group" (broadcasts against ``x`` reshaped to
        ``x.shape[:-1] + (K // group, group)``). An all-zero tensor, row or group gets scale
        1.0 and codes 0, so it dequantizes to zeros. A 0-d ``x`` gives 0-d ``values`` and
        ``codes``, and ``scale`` and ``zero_point`` of shape (1,).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued, ``bits``/``group`` is not an integer, ``symmetric`` is not
        a bool, or ``clip`` is not a real number.
    ValueError
        If ``x`` is empty or non-finite, ``bits`` is outside [2, 16], ``clip`` is outside (0, 1],
        ``granularity`` is unknown, ``group`` is missing, given without "group", or does not
        divide the last axis.

    Examples
    --------
    The integer-only matmul ``y = A @ W.T`` with asymmetric activations and per-row symmetric
    weights: ``y = s_a * s_w.T * (qa @ qw.T - z_a * qw.sum(axis=1))``.
    """
    shape = np.shape(x)
    return _quantize_int(as_calibration_array(x), shape, bits, symmetric, granularity, group, clip)


def _quantize_int(x, shape: tuple, bits: int, symmetric: bool, granularity: str, group, clip):
    """quantize_int on a checked, finite, non-empty array of either namespace (float64, or a
    float32 tensor: widened exactly where float64 is needed); results shaped to ``shape``."""
    xp = _xp.array_namespace(x)
    qmin, qmax = int_range(bits, symmetric)
    clip = check_clip(clip)
    xg = xp.reshape(x, grouped_view_shape(tuple(x.shape), granularity, group))
    tensor = granularity == "tensor"
    rows = xp.reshape(xg, (-1, 1) if tensor else (-1, xg.shape[-1]))  # (R, K): one scale a row
    red = (1,) * xg.ndim if tensor else tuple(xg.shape[:-1]) + (1,)   # the scales' shape

    if symmetric:
        if tensor:  # max |x| = max(max x, -min x): no |x| temporary
            amax = xp.maximum(xp.max(rows), -xp.min(rows)) + 0.0  # + 0.0: zeros give +0
        else:
            amax = _xp.absmax_rows(xp, rows)
        amax = xp.reshape(xp.astype(amax, xp.float64), red)  # exact
        scale = amax * (clip / qmax)
        _check_calibrated_scale(scale, amax > 0, clip)
        zero_point = xp.zeros(red, dtype=xp.int64, device=_device(xp, x))
        scale = xp.where(scale == 0, xp.ones_like(scale), scale)
    else:
        axis = None if tensor else -1
        mn = xp.reshape(xp.astype(xp.min(rows, axis=axis), xp.float64), red)
        mx = xp.reshape(xp.astype(xp.max(rows, axis=axis), xp.float64), red)
        lo = xp.clip(mn, None, 0.0) * clip
        hi = xp.clip(mx, 0.0, None) * clip
        scale = _affine_scale(lo, hi, qmax)
        _check_calibrated_scale(scale, (mn != 0) | (mx != 0), clip)
        scale = xp.where(scale == 0, xp.ones_like(scale), scale)
        zero_point = _zero_point(lo, hi, scale, qmin, qmax)
        with _xp.quiet(xp):  # the grid's ends must be float64 numbers
            ends = xp.abs(xp.concat([(qmin - zero_point) * scale, (qmax - zero_point) * scale],
                                    axis=-1))
        if not bool(xp.all(xp.isfinite(ends))):
            raise ValueError("the asymmetric grid over x's range reaches beyond float64's range "
                             f"(an end of the grid is {float(xp.max(ends)):.6g}); scale x down "
                             "or quantize it symmetrically")

    # The steps of quantize_affine and dequantize_affine, in place on the result, one
    # cache-sized chunk of rows at a time (these arrays can hold millions of values, and fresh
    # full-size temporaries cost more than the arithmetic). The zero point is added and removed
    # only when asymmetric, so a symmetric code 0 from a small negative x dequantizes to -0.0.
    per_row = (rows.shape[0], 1)
    s_rows = xp.broadcast_to(xp.reshape(scale, (-1, 1)), per_row)
    z_rows = xp.broadcast_to(xp.reshape(zero_point, (-1, 1)), per_row)
    tie = None if symmetric else _symmetric_ties(lo, hi)
    if tie is not None:   # the exact -qmax / 2 of a symmetric range's lower end: code 0
        tie_rows = xp.broadcast_to(xp.reshape(tie, (-1, 1)), per_row)
        lo_rows = xp.broadcast_to(xp.reshape(lo, (-1, 1)), per_row)
        mid = float(np.rint(qmax / 2))
    values = _xp.empty(xp, tuple(rows.shape), xp.float64, x)
    codes = _xp.empty(xp, tuple(rows.shape), xp.int64, x)
    for i, j in _xp.row_spans(xp, rows.shape[0], rows.shape[1], x):
        q = values[i:j]
        with _xp.quiet(xp):  # a tiny clip puts x / scale past float64: it clamps
            _xp.divide_into(xp, rows[i:j], s_rows[i:j], q)
        _xp.round_into(xp, q)
        if tie is not None:
            at_end = tie_rows[i:j] & (rows[i:j] == lo_rows[i:j])
            if bool(xp.any(at_end)):
                q[at_end] = -mid
        if not symmetric:
            q += z_rows[i:j]
        _xp.clip_into(xp, q, qmin, qmax)
        codes[i:j] = q
        if not symmetric:
            q -= z_rows[i:j]
        q *= s_rows[i:j]
    return IntQuantized(xp.reshape(values, shape), xp.reshape(codes, shape), scale, zero_point)


def _device(xp, x):
    """``x``'s device in the namespace's terms (numpy: "cpu")."""
    return getattr(x, "device", None) if not _xp.is_numpy_namespace(xp) else None


def clip_sweep(x, bits: int, clips) -> list:
    """Relative error of symmetric per-tensor INT``bits`` of ``x`` at each clip ratio.

    ``clip_sweep(x, bits, clips)[i] == rel_error(quantize_int(x, bits, clip=clips[i]).values, x)``
    bit for bit: the U-curve of error against clip ratio. One call per ratio checks ``x`` and
    finds its maximum and energy again (about 21 passes over ``x`` per ratio); here they are
    found once, and each chunk of 2^16 values is quantized at every ratio while it is in
    cache, with quantize_int's operations (divide by ``amax * (c / qmax)``, round half to
    even, clamp, multiply) and rel_error's sums (the same chunks, in the same order), so every
    float is the same. Inputs off that path (not a finite, non-empty float64 array; a ratio
    that is not a float in (0, 1]; a scale or a sum below float64's normal range, where
    numfmt takes its careful path) are computed one ratio at a time as above, which also
    raises their errors.

    Parameters
    ----------
    x : array_like of real numbers, any shape, non-empty and finite
    bits : int in [2, 16]
    clips : sequence of float in (0, 1], the fractions of max|x| kept

    Returns
    -------
    list of float: ``||Q_c(x) - x|| / ||x||`` (fractions), one per clip ratio, in order.

    Raises
    ------
    TypeError, ValueError
        As :func:`quantize_int` and :func:`numfmt.rel_error` (bad ``bits``, a clip ratio
        outside (0, 1], an empty, non-finite or all-zero ``x``).

    References
    ----------
    Clipping against rounding error: Banner et al., "Post-training 4-bit quantization of
    convolution networks for rapid deployment", NeurIPS 2019, section 3.
    """
    clips = tuple(clips)

    def one_at_a_time(ratios):
        return [rel_error(quantize_int(x, bits, clip=c).values, x) for c in ratios]

    a = np.asarray(x) if isinstance(x, np.ndarray) else None
    _, qmax = int_range(bits)
    if (a is None or a.dtype != np.float64 or a.size == 0 or not clips
            or not all(isinstance(c, (float, np.floating)) and 0 < c <= 1 for c in clips)
            or not np.isfinite(a).all()):
        return one_at_a_time(clips)
    flat = a.ravel()
    amax = np.abs(flat).max(keepdims=True)                 # (1,), as quantize_int's
    scales = [amax * (c / qmax) for c in clips]
    signal = float(np.einsum("i,i->", flat, flat))
    if not (np.isfinite(signal) and signal >= _TINY and all(sc[0] >= _TINY for sc in scales)):
        return one_at_a_time(clips)
    noise = [0.0] * len(clips)
    buf = np.empty(min(_CHUNK, flat.size))
    for i in range(0, flat.size, _CHUNK):
        xc = flat[i:i + _CHUNK]
        b = buf[:xc.size]
        for j, sc in enumerate(scales):
            _round_symmetric_into(xc, sc, qmax, b)
            b -= xc                                        # Q(x) - x, as rel_error takes it
            noise[j] += float(np.einsum("i,i->", b, b))
    return [float(np.sqrt(nz / signal)) if np.isfinite(nz) and nz >= _TINY
            else one_at_a_time((c,))[0] for nz, c in zip(noise, clips)]


def _round_symmetric_into(x: np.ndarray, scale, qmax: int, out: np.ndarray) -> np.ndarray:
    """``out = clamp(rint(x / scale), -qmax, qmax) * scale``: quantize_int's symmetric steps in
    its order, so the same floats, for an already validated float64 ``x`` and a positive
    normal ``scale`` (a float or an array that broadcasts). A tiny scale that sends ``x /
    scale`` past float64 clamps, as in quantize_int. Returns ``out``."""
    with np.errstate(over="ignore"):
        np.divide(x, scale, out=out)
    np.rint(out, out=out)
    np.maximum(out, -qmax, out=out)
    np.minimum(out, qmax, out=out)
    out *= scale
    return out
