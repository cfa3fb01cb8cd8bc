"""The anatomy of a floating-point value: its bit fields, its grid neighbours, its spacing.

Helpers for looking inside a :class:`~numfmt.formats.FloatFormat`: which sign, exponent and
mantissa fields a value is stored as, the representable values on either side of it, the gap
to the next larger value (the unit in the last place), and the largest run of integers the
format holds exactly.

References: IEEE 754-2019, sections 3.3-3.4 (binary interchange formats and their fields);
OCP 8-bit Floating Point Specification (OFP8) rev. 1.0; OCP MX Specification v1.0, section 5.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import as_real_array
from numfmt.formats import FloatFormat

__all__ = ["BitFields", "bit_fields", "bit_string", "neighbours", "spacing",
           "max_exact_integer", "special_codes"]



def _check_format(fmt, *, signed: bool = False, small: bool = False) -> FloatFormat:
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"fmt must be a FloatFormat such as FP8_E4M3, got {fmt!r}")
    if signed and not (fmt.signed and fmt.subnormals):
        raise ValueError(f"{fmt.name} has no sign bit or no zero; this needs a signed format")
    if small and fmt.bits > 16:
        raise ValueError(f"{fmt.name} has {fmt.bits} bits; its code table is too large "
                         "(formats of at most 16 bits only)")
    return fmt


class BitFields(NamedTuple):
    """Fields of stored codes; every member is an int64 array of the input's shape."""

    code: np.ndarray      #: the whole bit pattern
    sign: np.ndarray      #: 0 or 1 (always 0 for unsigned formats)
    exponent: np.ndarray  #: the biased exponent field
    mantissa: np.ndarray  #: the fraction (trailing significand) field


def bit_fields(fmt: FloatFormat, x, saturate: bool = True) -> BitFields:
    """Round ``x`` to ``fmt`` and split each stored code into sign, exponent and mantissa.

    Parameters
    ----------
    fmt : FloatFormat
        A format of at most 16 bits (the formats in ``numfmt.FORMATS``).
    x : array_like of real numbers, any shape
        Rounded with ``fmt.encode`` (round to nearest even).
    saturate : bool, default True
        Passed to ``fmt.encode``: ``False`` gives the Inf or NaN code on overflow.

    Returns
    -------
    BitFields
        ``code``, ``sign``, ``exponent``, ``mantissa``: int64 arrays of ``x``'s shape, with
        ``code == (sign << (exp_bits + man_bits)) | (exponent << man_bits) | mantissa``.

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat or ``x`` is not real-valued.
    ValueError
        If ``fmt`` is wider than 16 bits, or ``x`` holds NaN and ``fmt`` has no NaN.

    References
    ----------
    IEEE 754-2019 section 3.4: the fields S, E, T of a binary interchange format.
    """
    fmt = _check_format(fmt, small=True)
    code = fmt.encode(x, saturate=saturate).astype(np.int64)
    m, e = fmt.man_bits, fmt.exp_bits
    sign = (code >> (e + m)) & 1 if fmt.signed else np.zeros_like(code)
    return BitFields(code, sign, (code >> m) & ((1 << e) - 1), code & ((1 << m) - 1))


def bit_string(fmt: FloatFormat, x, saturate: bool = True) -> str:
    """Return the code of one number as its fields, e.g. ``"0 0111 000"`` for 1.0 in E4M3.

    Parameters
    ----------
    fmt : FloatFormat of at most 16 bits
    x : real number (a scalar)
    saturate : bool, default True
        As :func:`bit_fields`.

    Returns
    -------
    str
        Sign bit (omitted for unsigned formats), exponent field and mantissa field (omitted
        when ``man_bits == 0``), most significant bit first, separated by single spaces.

    Raises
    ------
    TypeError, ValueError
        As :func:`bit_fields`; also ValueError if ``x`` is not a scalar.
    """
    if np.ndim(x) != 0:
        raise ValueError(f"x must be a single number, got shape {np.shape(x)}")
    f = bit_fields(fmt, x, saturate=saturate)
    parts = [format(int(f.sign), "b")] if fmt.signed else []
    parts.append(format(int(f.exponent), f"0{fmt.exp_bits}b"))
    if fmt.man_bits:
        parts.append(format(int(f.mantissa), f"0{fmt.man_bits}b"))
    return " ".join(parts)


def neighbours(fmt: FloatFormat, x) -> tuple[np.ndarray, np.ndarray]:
    """Return the representable values just below and just above ``x``.

    Parameters
    ----------
    fmt : FloatFormat of at most 16 bits
    x : array_like of real numbers, any shape, no NaN

    Returns
    -------
    lower, upper : ndarray of float64, the shape of ``x``
        ``lower`` is the largest finite value of ``fmt`` that is ``<= x`` and ``upper`` the
        smallest that is ``>= x``; both equal ``x`` when ``x`` is representable. Beyond the
        finite range the missing side is ``-inf`` (below the most negative value) or ``+inf``
        (above the largest value).

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat or ``x`` is not real-valued.
    ValueError
        If ``x`` holds NaN, or ``fmt`` is wider than 16 bits.
    """
    fmt = _check_format(fmt, small=True)
    x = as_real_array(x)
    if np.isnan(x).any():
        raise ValueError("x contains NaN: it has no neighbours")
    grid = fmt.values()  # ascending, finite
    hi = np.searchsorted(grid, x, side="left")    # first grid value >= x
    lo = np.searchsorted(grid, x, side="right") - 1  # last grid value <= x
    padded = np.concatenate(([-np.inf], grid, [np.inf]))
    return padded[lo + 1], padded[hi + 1]


def spacing(fmt: FloatFormat, x) -> np.ndarray:
    """Gap between ``|x|`` and the next larger magnitude of ``fmt``'s grid (one ulp at ``x``).

    Parameters
    ----------
    fmt : FloatFormat
    x : array_like of real numbers, any shape, finite

    Returns
    -------
    ndarray of float64, the shape of ``x``
        ``2**(max(floor(log2|x|), emin) - man_bits)``: constant inside a binade
        ``[2**e, 2**(e+1))``, doubling from one binade to the next, and equal to the smallest
        subnormal throughout the subnormal range (and at zero). Defined by the same formula
        beyond ``max_value``.

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat or ``x`` is not real-valued.
    ValueError
        If ``x`` is not finite.

    Notes
    -----
    ``spacing(fmt, x) / |x|`` lies in ``(2**-(man_bits+1), 2**-man_bits]`` for every normal
    ``x``: the relative spacing of floating point is nearly constant, so round to nearest
    has a relative error of at most the unit roundoff ``2**-(man_bits+1)`` (IEEE 754-2019,
    section 2.1; Higham, "Accuracy and Stability of Numerical Algorithms", section 2.1).
    """
    fmt = _check_format(fmt)
    x = as_real_array(x)
    if not np.isfinite(x).all():
        raise ValueError("x must be finite")
    _, k = np.frexp(np.abs(x))  # |x| = f * 2**k, f in [0.5, 1): floor(log2|x|) = k - 1
    e = np.where(x == 0, fmt.emin, np.maximum(k - 1, fmt.emin))
    return np.ldexp(1.0, e - fmt.man_bits)


def max_exact_integer(fmt: FloatFormat) -> int:
    """Largest ``N`` such that every integer ``0, 1, ..., N`` is exactly representable.

    ``2**(man_bits + 1)``: a significand of ``man_bits + 1`` bits holds every integer below
    ``2**(man_bits+1)``, and ``2**(man_bits+1)`` itself, but not ``2**(man_bits+1) + 1``
    (FP32: 16,777,216; FP16: 2048; BF16: 256). Capped at ``max_value`` for formats too narrow to
    reach it. 0 for a format whose smallest step exceeds 1 (a large negative bias: 1 is then
    not a value).

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat.
    ValueError
        If ``fmt`` has no zero (E8M0).
    """
    fmt = _check_format(fmt, signed=True)
    if fmt.min_subnormal > 1.0:  # every value is a multiple of the smallest step: 1 is not one
        return 0
    return int(min(2 ** (fmt.man_bits + 1), np.floor(fmt.max_value)))


def special_codes(fmt: FloatFormat) -> tuple[int, int]:
    """Number of codes that encode an infinity and number that encode NaN, ``(n_inf, n_nan)``.

    From the encoding rules: ``"ieee"`` reserves the all-ones exponent (mantissa 0 is Inf,
    the other ``2**man_bits - 1`` mantissas NaN, each with either sign); ``"fn"`` keeps only the
    all-ones exponent *and* mantissa as NaN; ``"fnuz"`` has one NaN, the pattern of -0;
    ``"none"`` has neither.

    Raises
    ------
    TypeError
        If ``fmt`` is not a FloatFormat.
    """
    fmt = _check_format(fmt)
    signs = 2 if fmt.signed else 1
    if fmt.specials == "ieee":
        return signs, signs * ((1 << fmt.man_bits) - 1)
    if fmt.specials == "fn":
        return 0, signs
    if fmt.specials == "fnuz":
        return 0, 1
    return 0, 0
