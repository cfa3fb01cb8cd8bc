"""Floating-point formats as one type: FP32, FP16 and BF16 down to FP4 E2M1 and the E8M0 scale.

A format is a sign bit (except E8M0), ``exp_bits`` exponent bits with a ``bias``, and ``man_bits``
mantissa bits. Three conventions for the all-ones exponent exist in the formats deep learning uses:

``"ieee"``  the top exponent is reserved: mantissa 0 is +-Inf, anything else NaN (FP16, BF16, E5M2).
``"fn"``    "finite": no Inf; only the all-ones exponent *and* mantissa is NaN, so the top binade
            carries numbers (E4M3: max 1.75 * 2^8 = 448). E8M0 has no mantissa, so its whole top
            code 0xFF is NaN.
``"none"``  every code is a number: no Inf, no NaN (the OCP MX element formats E2M3, E3M2, E2M1).
``"fnuz"``  "finite, unsigned zero": no Inf and no -0; the one NaN is the negative-zero pattern
            (0x80), so every other code is a number (AMD's E4M3FNUZ, max 240, and E5M2FNUZ,
            max 57344, with biases 8 and 16; the float8_e4m3fnuz / float8_e5m2fnuz of ml_dtypes).

References: OCP 8-bit Floating Point Specification (OFP8) rev. 1.0, 2023; OCP Microscaling
Formats (MX) Specification v1.0, 2023, section 5 (element and scale formats); IEEE 754-2019;
AMD CDNA 3 (MI300) ISA reference guide, FP8/BF8 formats; Graphcore/AMD/Qualcomm, "8-bit
Numerical Formats for Deep Neural Networks", arXiv:2206.02915 (the FNUZ encodings).
Every rounding of float32 (and narrower) input agrees bit for bit with ml_dtypes
(tests/test_formats.py shows where). float64 input is rounded once, directly; ml_dtypes and
torch convert float64 to float32 first and then round again, so on rare float64 inputs near a
midpoint they differ from numfmt, and numfmt's result is the nearer one.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from functools import cached_property

import numpy as np

from numfmt._chunks import CHUNK as _CHUNK
from numfmt._validate import as_integer_array, as_real_array, check_bool

_SPECIALS = ("ieee", "fn", "none", "fnuz")
_MODES = ("nearest", "stochastic")
_U64 = np.uint64
_U32 = np.uint32
_F32_SIGN = _U32(0x8000_0000)
_F32_QNAN = _U32(0x7FC0_0000)  # widens to float64's canonical NaN, the one round() returns


class _Layout:
    """Widths of an IEEE binary float's fields (float32 or float64), for bit arithmetic."""

    def __init__(self, ftype, utype, exp: int, man: int):
        self.ftype, self.utype, self.exp, self.man = ftype, utype, exp, man
        self.bias = (1 << (exp - 1)) - 1


_F32 = _Layout(np.float32, _U32, 8, 23)
_F64 = _Layout(np.float64, _U64, 11, 52)


@dataclass(frozen=True)
class FloatFormat:
    """A binary floating-point format with round, encode and decode on numpy arrays.

    Parameters
    ----------
    name : str
        Standard name, e.g. ``"E4M3"``.
    exp_bits, man_bits : int
        Widths of the exponent and mantissa (fraction) fields.
    bias : int
        Exponent bias: a normal code with exponent field ``E`` means ``1.m * 2**(E - bias)``.
    specials : {"ieee", "fn", "none", "fnuz"}
        Which special values the all-ones exponent encodes (see the module docstring).
    signed : bool
        Whether there is a sign bit. Only the E8M0 scale format is unsigned.
    subnormals : bool
        Whether exponent field 0 holds subnormals (and zero). E8M0 has neither: its code 0 is
        the normal number 2^-127.

    Raises
    ------
    TypeError
        If ``name`` is not a string, ``exp_bits``, ``man_bits``, ``bias`` is not an integer,
        or ``signed``/``subnormals`` is not a bool.
    ValueError
        If ``specials`` is unknown, a width is out of range, the format has more than 32 bits,
        its binades leave float64's normal range (all arithmetic here is float64), it has no
        normal binade (``emin > emax``, e.g. one exponent bit with "ieee" specials), it is
        "ieee" without mantissa bits (Inf takes mantissa 0 and NaN needs another), or it is
        unsigned with subnormals (unsigned formats are E8M0-like: no zero).
    """

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    specials: str
    signed: bool = True
    subnormals: bool = True

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise TypeError(f"name must be a string, got {self.name!r}")
        for field in ("exp_bits", "man_bits", "bias"):
            v = getattr(self, field)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{field} must be an integer, got {v!r}")
        for field in ("signed", "subnormals"):
            check_bool(getattr(self, field), field)
        if self.specials not in _SPECIALS:
            raise ValueError(f"specials must be one of {_SPECIALS}, got {self.specials!r}")
        if not (1 <= self.exp_bits <= 11 and 0 <= self.man_bits <= 52):
            raise ValueError("exp_bits must be in [1, 11] and man_bits in [0, 52], got "
                             f"exp_bits={self.exp_bits}, man_bits={self.man_bits}")
        if self.bits > 32:
            # Codes are stored in at most uint32, and rounding works on float64 bit patterns.
            raise ValueError(f"{self.name} has {self.bits} bits; formats have at most 32 bits")
        if not self.signed and self.subnormals:
            raise ValueError(f"{self.name}: an unsigned format must have subnormals=False (as "
                             "E8M0: round maps zero and negatives to NaN, so it has no zero)")
        if self.specials == "ieee" and self.man_bits == 0:
            raise ValueError(f"{self.name}: an 'ieee' format needs man_bits >= 1 (the all-ones "
                             "exponent with mantissa 0 is Inf; NaN needs a non-zero mantissa)")
        if self.emin > self.emax:
            raise ValueError(f"{self.name} has no normal binade: emin = {self.emin} > emax = "
                             f"{self.emax} (with {self.exp_bits} exponent bit(s) and "
                             f"{self.specials!r} specials); add an exponent bit")
        if self.emax > 1023 or self.emin < -1022:
            raise ValueError(f"{self.name}'s binades 2^{self.emin} .. 2^{self.emax} exceed "
                             "float64's normal range 2^-1022 .. 2^1023 (choose another bias)")

    def __repr__(self) -> str:
        return f"FloatFormat({self.name})"

    # ------------------------------------------------------------------ derived constants
    @property
    def bits(self) -> int:
        """Total storage width in bits."""
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def emax(self) -> int:
        """Unbiased exponent of the largest finite binade."""
        top = (1 << self.exp_bits) - 1
        if self.specials == "ieee" or (self.specials == "fn" and self.man_bits == 0):
            top -= 1  # the whole all-ones exponent is taken by Inf/NaN
        return top - self.bias

    @property
    def emin(self) -> int:
        """Unbiased exponent of the smallest normal binade."""
        return (1 if self.subnormals else 0) - self.bias

    @property
    def max_value(self) -> float:
        """Largest finite value, e.g. 448.0 for E4M3 and 57344.0 for E5M2."""
        top_mantissa = (1 << self.man_bits) - 1
        if self.specials == "fn" and self.man_bits > 0:
            top_mantissa -= 1  # all-ones mantissa in the top binade is NaN
        return float(np.ldexp(1.0 + top_mantissa / (1 << self.man_bits), self.emax))

    @property
    def min_normal(self) -> float:
        """Smallest positive normal value, 2**emin."""
        return float(np.ldexp(1.0, self.emin))

    @property
    def min_subnormal(self) -> float:
        """Smallest positive value, 2**(emin - man_bits) (``min_normal`` without subnormals)."""
        return float(np.ldexp(1.0, self.emin - (self.man_bits if self.subnormals else 0)))

    @property
    def has_inf(self) -> bool:
        """Whether +-Inf exist (the "ieee" convention only)."""
        return self.specials == "ieee"

    @property
    def has_nan(self) -> bool:
        """Whether a NaN code exists (every convention but "none")."""
        return self.specials != "none"

    @property
    def code_dtype(self) -> np.dtype:
        """Smallest unsigned integer dtype that holds one code (uint8, uint16 or uint32)."""
        return np.dtype(np.uint8 if self.bits <= 8 else np.uint16 if self.bits <= 16 else np.uint32)

    # ------------------------------------------------------------------ rounding
    def round(self, x, saturate: bool = True, mode: str = "nearest", rng=None,
              dtype=np.float64) -> np.ndarray:
        """Round real numbers onto this format's grid.

        Parameters
        ----------
        x : array_like of real numbers, any shape
            float64 input is rounded once, directly (never through float32 first).
        saturate : bool, default True
            ``True``: overflow and +-Inf clamp to +-``max_value``. ``False``: follow the format
            on overflow (E5M2, FP16, BF16 give +-Inf; E4M3 and E8M0 give NaN). Formats with
            neither Inf nor NaN (E2M3, E3M2, E2M1) always saturate.
        mode : {"nearest", "stochastic"}
            ``"nearest"``: round to nearest, ties to even (IEEE 754 roundTiesToEven), including
            in the subnormal range. ``"stochastic"``: round up to the next grid value with
            probability equal to the fractional position between the two neighbours, so the
            result is unbiased; values already on the grid are unchanged.
        rng : numpy.random.Generator or int or None
            Source of the uniform draws for stochastic rounding (an int seeds a new Generator).
            Only used with ``mode="stochastic"``.
        dtype : {numpy.float64, numpy.float32}, default float64
            dtype of the result. ``float32`` is allowed for formats whose every value is a
            float32 number (all shipped formats but none wider than float32's range); it
            gives exactly ``round(x, ...).astype(numpy.float32)`` (NaN: float32's quiet NaN,
            sign kept) while writing half the bytes, which is most of the cost on large
            arrays (README, Benchmarks).

        Returns
        -------
        ndarray of float64 (or ``dtype``), the shape of ``x``
            NaN stays NaN. Signed zero is kept. For E8M0 (unsigned, no zero), zero and
            negative numbers give NaN and positive values below 2**-127 give 2**-127.

        Raises
        ------
        TypeError
            If ``x`` is not real-valued (a masked array or a list mixing booleans with numbers
            included), ``saturate`` is not a bool, or ``rng`` is not a Generator, an int or None.
        ValueError
            If ``mode`` is unknown, or ``x`` holds integers beyond 2**53 or long doubles that
            float64 does not hold exactly (they would be rounded twice), or ``dtype`` is
            neither float64 nor float32, or float32 cannot hold every value of the format.

        Notes
        -----
        For float32, float16 and integer input, agrees bit for bit with
        ``x.astype(ml_dtypes.<format>)`` in every case ml_dtypes defines, with
        ``saturate=False`` for E4M3, E5M2, E4M3FNUZ, E5M2FNUZ, FP16, BF16 and E8M0. For float64
        input it may not: ml_dtypes (and torch's casts) round float64 to float32 first and then
        to the format, which moves a value just off a midpoint onto it (1 + 2^-4 + 2^-30 to
        E4M3: here 1.125, the nearest; ml_dtypes and torch 1.0). Here float64 is rounded once,
        to the truly nearest value. The FNUZ formats have no -0: a negative value that rounds
        to zero gives +0. ml_dtypes converts NaN
        into E2M1/E2M3/E3M2 as -0 (they have no NaN); here NaN stays NaN. E8M0 rounds ties
        upward (1.5 -> 2, 3 -> 4), as ml_dtypes does; inside E8M0's lowest binade
        (2^-127, 2^-126) the nearest power of two wins as everywhere else (1.2 * 2^-127 ->
        2^-127), as in ml_dtypes 0.7; ml_dtypes 0.5 and 0.6 returned 2^-126 for every value there.

        See Also
        --------
        numfmt.round_reference.round_reference : the same rounding to nearest in about twenty
            readable lines (binade, spacing, ties to even, overflow), equal in every bit; the
            paths here are its fast version.
        """
        if mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
        check_bool(saturate, "saturate")
        dtype = self._result_dtype(dtype)
        if type(x) is not np.ndarray or x.dtype.kind != "f" or x.dtype.itemsize > 8:
            x = as_real_array(x)  # ints become float64; anything else is refused
        shape = x.shape
        x = x.reshape(-1)
        if mode == "nearest" and x.size > _CHUNK:
            # Chunk by chunk, the temporaries stay in cache and only the result is full-size
            # (8 B/element peak, against 26 at once): fresh pages cost more than arithmetic.
            # A float32 chunk's result is widened by the assignment itself (no float64 copy).
            out = np.empty(x.size, dtype)
            for i in range(0, x.size, _CHUNK):
                out[i:i + _CHUNK] = self._nearest_chunk(x[i:i + _CHUNK], saturate)
            return out.reshape(shape)
        if mode == "nearest" and x.dtype == np.float32:
            r = self._nearest_float32_values(x, saturate)
            if r is not None:
                return r.astype(dtype, copy=False).reshape(shape)
        with np.errstate(invalid="ignore"):  # a float32 signalling NaN widens to a quiet one
            a = np.abs(x, dtype=np.float64)  # float32 input is widened exactly, in the same pass
        if mode == "nearest":
            r = self._nearest_magnitude(a)
        else:
            r = self._stochastic_magnitude(a, _as_generator(rng))
        if not self.subnormals:  # E8M0: no zero and no subnormals below 2**emin
            np.maximum(r, self.min_normal, out=r)
        if saturate or self.specials == "none":
            np.minimum(r, self.max_value, out=r)
        else:
            with np.errstate(invalid="ignore"):
                r[r > self.max_value] = np.inf if self.has_inf else np.nan
        if self.signed:
            with np.errstate(invalid="ignore"):  # a float32 signalling NaN widening in x
                np.copysign(r, x, out=r)
            if self.specials == "fnuz":
                r += 0.0  # no -0 in FNUZ formats: -0.0 + 0.0 is +0.0, everything else unchanged
        else:
            not_positive = x > 0  # False for NaN too
            np.logical_not(not_positive, out=not_positive)
            np.copyto(r, np.nan, where=not_positive)
        return r.astype(dtype, copy=False).reshape(shape)  # exact: checked by _result_dtype

    def _result_dtype(self, dtype) -> np.dtype:
        """``dtype`` as the numpy dtype of round()'s or decode()'s result, checked."""
        try:  # a type, a dtype or its name (None, numpy's default, is float64)
            dt = np.dtype(dtype) if dtype is None or isinstance(dtype, (type, np.dtype, str)) \
                else None
        except TypeError:
            dt = None
        if dt is None or dt not in (np.dtype(np.float64), np.dtype(np.float32)):
            raise ValueError(f"dtype must be numpy.float64 or numpy.float32, got {dtype!r}")
        if dt == np.float32 and not self._fits_float32:
            raise ValueError(f"{self.name}'s values 2^{self.emin - self.man_bits} .. "
                             f"2^{self.emax} with {self.man_bits} mantissa bits are not all "
                             "float32 numbers: use dtype=numpy.float64")
        return dt

    @cached_property
    def _fits_float32(self) -> bool:
        """Whether every value of the format (and its Inf, NaN) is a float32 number."""
        lowest = self.emin - (self.man_bits if self.subnormals else 0)
        return self.man_bits <= 23 and self.emax <= 127 and lowest >= -149

    def _nearest_chunk(self, x: np.ndarray, saturate: bool) -> np.ndarray:
        """``round(x, saturate)`` of a 1-D float32 or float64 ``x`` of at most one chunk,
        as float32 where a float32 path applies (the caller widens it while storing it)."""
        r = self._nearest_float32_values(x, saturate) if x.dtype == np.float32 else None
        return r if r is not None else self.round(x, saturate)

    def _nearest_float32_values(self, x: np.ndarray, saturate: bool) -> np.ndarray | None:
        """round() of 1-D float32 ``x`` as float32 values, or None where no float32 path
        applies. Widening the result gives round()'s float64 one bit for bit (NaN becomes
        the canonical quiet NaN)."""
        if self._float32_exact:
            return self._nearest_float32(x, saturate).view(np.float32)
        if self._pow2_float32:
            return self._nearest_pow2_float32(x)
        return None

    @cached_property
    def _pow2_float32(self) -> bool:
        """Whether :meth:`_nearest_pow2_float32` applies: an unsigned power-of-two format
        (E8M0) whose values above 2^-126 are float32 normals."""
        return (self._standard_flags and not self.signed and not self.subnormals
                and self.man_bits == 0 and self.emax <= 127)

    def _nearest_pow2_float32(self, x: np.ndarray) -> np.ndarray | None:
        """round() of 1-D float32 ``x`` for E8M0-like formats, or None if ``x`` needs more.

        Where every value is a float32 normal in ``[2^emin, 1.5 * 2^emax)`` (no NaN, no zero,
        no negative, no overflow, no float32 subnormal), the nearest power of two with ties
        up is the pattern plus half the mantissa field, mantissa cleared: a carry moves the
        exponent up. Other chunks (checked with two reductions) take the float64 path.
        """
        with np.errstate(invalid="ignore"):  # a signalling NaN: the comparisons fail below
            lo, hi = x.min(), x.max()
        if not (lo >= np.ldexp(1.0, max(self.emin, -126))
                and hi < 1.5 * np.ldexp(1.0, self.emax)):  # False for NaN
            return None
        r = x.view(_U32) + _U32(0x0040_0000)
        r &= _U32(0x7F80_0000)
        return r.view(np.float32)

    def _nearest_magnitude(self, a: np.ndarray) -> np.ndarray:
        """Round non-negative float64 magnitudes to nearest (ties even; ties up for E8M0)."""
        # Normal range: clear the low (52 - man_bits) bits of the float64 pattern after adding
        # half a unit in the last place; a carry out of the mantissa bumps the exponent, which
        # is exactly the step into the next binade.
        shift = 52 - self.man_bits
        half = _U64(1 << (shift - 1))
        b = a.view(_U64)
        if self.man_bits == 0:  # E8M0: ties round up (ml_dtypes' convention)
            # E8M0 (unsigned, no subnormals) needs neither the NaN check nor the subnormal
            # pass below, which read ``a``: only then may the rounding overwrite it in place.
            rb = b if not (self.signed or self.subnormals) else b.copy()
            rb += half
        else:
            rb = np.right_shift(b, _U64(shift))
            rb &= _U64(1)  # the last kept bit: adding it turns ties-up into ties-to-even
            rb += b
            rb += half - _U64(1)
        rb &= _U64(~((1 << shift) - 1) & 0xFFFF_FFFF_FFFF_FFFF)
        r = rb.view(np.float64)
        if self.signed:  # unsigned E8M0 marks NaN (and non-positive input) in round()
            nan = np.isnan(a)
            if nan.any():
                r[nan] = np.nan  # a NaN payload must not round into Inf
        if self.subnormals:
            # Subnormal range: adding 2**(emin - man_bits + 52) makes the float64 unit in the
            # last place equal to the format's smallest subnormal, so the FPU's own
            # round-to-nearest-even does the work.
            c = np.ldexp(1.0, self.emin - self.man_bits + 52)
            small = a < self.min_normal
            if small.any():  # whole-array arithmetic beats gathering the small ones
                with np.errstate(invalid="ignore"):  # a signalling NaN in a raises 'invalid'
                    sub = a + c
                    sub -= c
                np.copyto(r, sub, where=small)
        return r

    @cached_property
    def _float32_path(self) -> str | None:
        """How :meth:`_nearest_float32` rounds float32 input: "bits", "fpu", or None (it can't).

        "bits" when the format's exponent range starts where float32's does (BF16: its
        subnormals are float32 subnormals, fixed point, so rounding the pattern is exact);
        "fpu" when all its binades, one above the top included, lie inside float32's normal
        range (E4M3 ... FP16). Both need a sign bit, subnormals and a convention written in this
        module: a flag added to FloatFormat later sends a format with that flag changed to the
        general float64 path.
        """
        if not self._standard_flags:
            return None
        # The conventions this fast path was written for ("fnuz" has no -0 and one NaN: the
        # general path handles it).
        if not (self.signed and self.subnormals and self.specials in ("ieee", "fn", "none")
                and self.man_bits < 23):
            return None
        if self.emin == -126 and self.emax <= 127:
            return "bits"
        if self.emin > -126 and self.emax + 1 + (23 - self.man_bits) <= 127:
            return "fpu"
        return None

    @cached_property
    def _standard_flags(self) -> bool:
        """Whether every field beyond the seven this module was written for has its default."""
        known = {"name", "exp_bits", "man_bits", "bias", "specials", "signed", "subnormals"}
        return all(getattr(self, f.name) == f.default for f in fields(self)
                   if f.name not in known)

    @property
    def _float32_exact(self) -> bool:
        return self._float32_path is not None

    def _nearest_float32(self, x: np.ndarray, saturate: bool) -> np.ndarray:
        """Bit patterns (uint32) of ``round(x, saturate)`` as float32, for 1-D float32 ``x``.

        Only where ``_float32_path`` is set: every result is then a float32 number, and
        rounding a float32 value is rounding the exact value, so widening gives round()'s
        float64 result bit for bit, NaN included. 4-byte working arrays and no masked writes
        (the slow kind of numpy pass) make this 2-3x faster than the float64 path.
        """
        t = x.view(_U32)
        shift = 23 - self.man_bits
        if self._float32_path == "bits":
            # Round to nearest even on the signed pattern: the sign bit is only reached by a
            # carry out of a NaN's payload, and NaN is restored below.
            r = np.right_shift(t, _U32(shift))
            r &= _U32(1)
            r += t
            r += _U32((1 << (shift - 1)) - 1)
            r &= _U32(~((1 << shift) - 1) & 0xFFFF_FFFF)
            f = r.view(np.float32)
            # With float32's top binade (BF16), overflow is the carry into float32's Inf.
            top_is_float32s = self.has_inf and self.emax == 127
            mag = np.abs(f) if not (saturate or top_is_float32s) else None
            fmax = None
        else:
            # Adding C = 2^(e + shift), with e the binade of |x| clamped to [emin, emax + 1],
            # puts the format's quantum 2^(e - man_bits) at the last place of float32, so the
            # FPU's round-to-nearest-even rounds, subnormals included; subtracting C is exact.
            f = np.abs(x)
            with np.errstate(invalid="ignore"):  # a signalling NaN
                fmax = f.max()  # max propagates NaN: NaN is restored below
            c = t & _U32(0x7F80_0000)
            lo = _U32((self.emin + 127) << 23)
            if fmax < np.ldexp(np.float32(1), self.emax + 1):  # no binade to clamp from above
                np.maximum(c, lo, out=c)
            else:
                np.clip(c, lo, _U32((self.emax + 128) << 23), out=c)
            c += _U32(shift << 23)
            cf = c.view(np.float32)
            with np.errstate(invalid="ignore"):  # a signalling NaN; NaN is restored below
                f += cf
                f -= cf
            del c, cf
            r = f.view(_U32)
            mag = f
        top = np.float32(self.max_value)
        if saturate or self.specials == "none":
            if fmax is None:
                np.clip(f, -top, top, out=f)
            elif not fmax <= top:  # |x| <= top rounds to at most top (on the grid); NaN clamps
                np.minimum(f, top, out=f)  # f = |x| rounded: the lower bound is moot
        elif mag is not None:
            over = mag > top  # False for NaN
            if over.any():
                f[over] = np.copysign(np.float32(np.inf if self.has_inf else np.nan), f[over])
        if self._float32_path == "fpu":  # the sign back on (an OR: np.copysign is slower)
            sign = t & _F32_SIGN
            r |= sign
            del sign
        if fmax is None:
            with np.errstate(invalid="ignore"):  # a signalling NaN
                fmax = x.max()  # max propagates NaN: one read, no mask, most chunks
        if np.isnan(fmax):
            nan = np.isnan(x)
            r[nan] = _F32_QNAN | (t[nan] & _F32_SIGN)
        return r

    def _codes_of(self, r: np.ndarray) -> np.ndarray:
        """Codes of values ``r`` on the format's grid (1-D float32 or float64, NaN allowed).

        A normal value carries the format's fields in its own pattern: the exponent field,
        rebiased, and the top ``man_bits`` of the mantissa. A subnormal's code is the integer
        ``|r| * 2^(man_bits - emin)``. Both are computed everywhere and the larger one taken:
        for a normal value the first is at least 2^man_bits, which caps the second; below
        2^emin the first (as a signed integer) never exceeds the second. No per-element branch.
        """
        lay = _F32 if r.dtype == np.float32 else _F64
        itype = np.int32 if lay.utype is _U32 else np.int64
        m = self.man_bits
        if (self.exp_bits, self.bias, self.specials) == (lay.exp, lay.bias, "ieee") \
                and self.signed and self.subnormals and self._standard_flags:
            # BF16 from float32: the code is the top of the pattern, Inf, subnormals and
            # round()'s quiet NaN included.
            return np.right_shift(r.view(lay.utype), lay.utype(lay.man - m)).astype(
                self.code_dtype)
        mag = r.view(lay.utype) & lay.utype((1 << (lay.exp + lay.man)) - 1)
        if self.subnormals:
            with np.errstate(over="ignore"):  # a large normal value: Inf, capped next line
                sub = mag.view(lay.ftype) * lay.ftype(np.ldexp(1.0, -self.emin))
                sub *= lay.ftype(np.ldexp(1.0, m))  # two factors: 2^(m - emin) can pass 2^1023
            np.fmin(sub, lay.ftype(1 << m), out=sub)  # fmin: NaN becomes 2^m too
        mag >>= lay.utype(lay.man - m)
        code = mag.view(itype)
        code -= itype((lay.bias - self.bias) << m)
        if self.subnormals:
            np.maximum(code, sub.astype(itype), out=code)
            del sub
        if self.signed:
            sign = np.right_shift(r.view(lay.utype), lay.utype(lay.exp + lay.man))
            sign <<= lay.utype(self.bits - 1)
            code |= sign.view(itype)
            del sign
        special = ~np.isfinite(r)
        if special.any():
            nan = np.isnan(r)
            if nan.any() and not self.has_nan:
                raise ValueError(f"{self.name} has no NaN: cannot encode NaN")
            top_exp = (1 << self.exp_bits) - 1
            nan_mant = 1 << (m - 1) if self.specials == "ieee" else (1 << m) - 1
            field = np.where(nan[special], (top_exp << m) | nan_mant, top_exp << m)
            if self.signed:
                field |= np.signbit(r[special]).astype(np.int64) << (self.bits - 1)
            if self.specials == "fnuz":  # no Inf; the one NaN is the negative-zero pattern
                field = np.full(field.shape, 1 << (self.bits - 1))
            code[special] = field
        return code.astype(self.code_dtype)

    def _stochastic_magnitude(self, a: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Round non-negative magnitudes down or up with probability given by the position."""
        finite = np.isfinite(a)
        safe = np.where(finite, a, 0.0)
        _, k = np.frexp(safe)  # safe = f * 2**k with f in [0.5, 1)
        e = np.maximum(k - 1, self.emin)
        quantum = np.ldexp(1.0, e - self.man_bits)
        steps = safe / quantum  # exact: quantum is a power of two
        low = np.floor(steps)
        up = rng.random(a.shape) < (steps - low)
        with np.errstate(over="ignore"):  # beyond float64's max: Inf, saturated or kept below
            r = (low + up) * quantum
        return np.where(finite, r, a)

    # ------------------------------------------------------------------ bit patterns
    def encode(self, x, saturate: bool = True) -> np.ndarray:
        """Round ``x`` to this format and return the bit patterns.

        Parameters
        ----------
        x : array_like of real numbers, any shape
        saturate : bool, default True
            Passed to :meth:`round`.

        Returns
        -------
        ndarray of uint8 (formats of 8 bits or fewer) or uint16, the shape of ``x``
            The codes, right-aligned (a 4-bit code uses the low nibble). Equal to ml_dtypes'
            bit patterns for every representable value; NaN gives the pattern ml_dtypes uses
            (0x7F for E4M3, 0x7E for E5M2, 0xFF for E8M0, sign bit from the input; 0x80 for
            the FNUZ formats).

        Raises
        ------
        ValueError
            If ``x`` contains NaN (or a value that rounds to NaN) and the format has no NaN.
        """
        if not isinstance(saturate, (bool, np.bool_)):
            raise TypeError(f"saturate must be True or False, got {saturate!r}")
        x = np.asarray(x)
        if x.dtype.kind != "f" or x.dtype.itemsize > 8:
            x = as_real_array(x)  # as round() does
        flat = x.reshape(-1)
        fast = flat.dtype == np.float32 and self._float32_exact
        top = fast and self._float32_path == "bits" and self.exp_bits == 8 \
            and self.specials == "ieee"
        codes = np.empty(flat.size, self.code_dtype)
        for i in range(0, flat.size, _CHUNK):  # only the codes are full-size
            xc = flat[i:i + _CHUNK]
            if top:
                self._encode_top_float32(xc, saturate, codes[i:i + _CHUNK])
                continue
            r = (self._nearest_float32(xc, saturate).view(np.float32) if fast
                 else self.round(xc, saturate=saturate))
            codes[i:i + _CHUNK] = self._codes_of(r)
        return codes.reshape(x.shape)

    def _encode_top_float32(self, x: np.ndarray, saturate: bool, out: np.ndarray) -> None:
        """``out = encode(x)`` for 1-D float32 ``x`` where a code is the top ``9 + man_bits``
        bits of float32's pattern (BF16: float32's exponent field, bias and specials).

        Round to nearest even on the pattern itself, as hardware converts float32 to
        bfloat16: add ``2^(s-1) - 1`` plus the last kept bit, shift right by ``s = 23 -
        man_bits``. A carry out of the mantissa steps into the next binade, the top one's into
        Inf (the non-saturating overflow); the sign bit rides along. NaN (whose payload may
        carry anywhere) gets the quiet NaN's code with its sign, as ml_dtypes writes it
        (0x7FC0 / 0xFFC0 in BF16); saturation turns Inf's code into the largest finite one,
        one below it.
        """
        s = _U32(23 - self.man_bits)
        t = x.view(_U32)
        u = np.right_shift(t, s)
        u &= _U32(1)
        u += t  # wraps only for NaN patterns, replaced below
        u += _U32((1 << (23 - self.man_bits - 1)) - 1)
        u >>= s
        with np.errstate(invalid="ignore"):  # a signalling NaN
            hi = x.max()  # max and min propagate NaN: one read each, no mask, most chunks
            lo = x.min() if saturate else None
        nan = np.isnan(hi)
        if saturate and (nan or not (-self.max_value <= lo and hi <= self.max_value)):
            inf = _U32(0xFF << self.man_bits)  # Inf's code without the sign
            over = (u & _U32((1 << (8 + self.man_bits)) - 1)) == inf
            u[over] -= _U32(1)  # the largest finite code, the sign kept
        if nan:
            m = np.isnan(x)
            u[m] = (_F32_QNAN | (t[m] & _F32_SIGN)) >> s
        out[...] = u

    def decode(self, codes, dtype=np.float64) -> np.ndarray:
        """Return the values of bit patterns ``codes``.

        Parameters
        ----------
        codes : array_like of integers in [0, 2**bits), any shape
        dtype : {numpy.float64, numpy.float32}, default float64
            As in :meth:`round`: float32 gives exactly ``decode(codes).astype(numpy.float32)``
            and is allowed where every value of the format is a float32 number.

        Returns
        -------
        ndarray of float64 (or ``dtype``), the shape of ``codes``

        Raises
        ------
        TypeError
            If ``codes`` is not an integer array.
        ValueError
            If a code is negative or does not fit in ``bits`` bits (the message names it),
            including Python ints beyond int64; or ``dtype`` is not allowed (see :meth:`round`).
        """
        dtype = self._result_dtype(dtype)
        codes = np.asarray(codes)
        if codes.dtype == np.bool_ or codes.dtype.kind not in "iu":
            if codes.dtype != object:
                raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
            codes = as_integer_array(codes, "codes")  # Python ints beyond int64: refused
        if codes.size:
            lo = codes.min() if codes.dtype.kind == "i" else 0  # unsigned: no reduction needed
            hi = codes.max()
            if lo < 0 or hi >= (1 << self.bits):
                bad = lo if lo < 0 else hi
                raise ValueError(f"{self.name} codes must lie in [0, {(1 << self.bits) - 1}], "
                                 f"got {int(bad)}")
        if self.bits > 16:  # FP32: 2^32 codes are too many for a table
            return self._values_of(codes.astype(np.int64)).astype(dtype, copy=False)
        if (self.exp_bits, self.bias) == (8, 127) and (
                self._float32_path == "bits" or (self._pow2_float32 and self.specials == "fn")):
            out = self._decode_float32_top(codes, dtype)
        else:
            table = self._table if dtype == np.float64 else self._table32
            out = table[codes]  # indexing takes any integer dtype: no int64 copy first
        return out if codes.ndim else np.asarray(out)  # a 0-d input gives a 0-d array

    def _decode_float32_top(self, codes: np.ndarray, dtype=np.float64) -> np.ndarray:
        """Values of the codes of a format that is the top of float32's pattern (BF16, E8M0).

        Shifted into place, a code is the float32 pattern of its value (sign, exponent field,
        mantissa; Inf and subnormals included); only NaN is made the table's canonical one.
        E8M0 (no sign, no mantissa) differs in two codes: 0 is 2^-127, a float32 subnormal
        (pattern 0x00400000, not 0), and 0xFF is NaN, not Inf.
        """
        flat = codes.reshape(-1)
        out = np.empty(flat.size, dtype)
        shift = _U32(23 - self.man_bits)
        pow2 = self.man_bits == 0
        for i in range(0, flat.size, _CHUNK):
            c = flat[i:i + _CHUNK]
            u = c.astype(_U32)
            u <<= shift
            f = u.view(np.float32)
            if pow2:
                if c.min() == 0:
                    np.maximum(u, _U32(0x0040_0000), out=u)  # every other code is >= 1 << 23
                if c.max() == 0xFF:
                    u[c == 0xFF] = _F32_QNAN
            elif np.isnan(f.max()):  # max propagates NaN: one read, no mask, most chunks
                nan = np.isnan(f)
                u[nan] = _F32_QNAN | (u[nan] & _F32_SIGN)
            out[i:i + _CHUNK] = f
        return out.reshape(codes.shape)[()]  # a 0-d input gives a scalar, as indexing does

    @cached_property
    def _table(self) -> np.ndarray:
        """Value of every code (formats of 16 bits or fewer)."""
        val = self._values_of(np.arange(1 << self.bits, dtype=np.int64))
        val.setflags(write=False)
        return val

    @cached_property
    def _table32(self) -> np.ndarray:
        """``_table`` as float32 (exact where ``_fits_float32``, the only case it is used)."""
        val = self._table.astype(np.float32)
        val.setflags(write=False)
        return val

    def _values_of(self, c: np.ndarray) -> np.ndarray:
        """Values of int64 codes ``c``, computed from the field definitions (not from encode)."""
        m = self.man_bits
        mant = c & ((1 << m) - 1)
        exp = (c >> m) & ((1 << self.exp_bits) - 1)
        with np.errstate(over="ignore"):  # the all-ones exponent of an E11 format: Inf/NaN below
            normal = np.ldexp(1.0 + mant / (1 << m), exp - self.bias)
        if self.subnormals:
            sub = np.ldexp(mant.astype(np.float64), self.emin - m)
            val = np.where(exp == 0, sub, normal)
        else:
            val = normal
        top = exp == (1 << self.exp_bits) - 1
        if self.specials == "ieee":
            val = np.where(top, np.where(mant == 0, np.inf, np.nan), val)
        elif self.specials == "fn":
            val = np.where(top & (mant == (1 << m) - 1), np.nan, val)
        if self.signed:
            val = np.where((c >> (self.bits - 1)) & 1, -val, val)
        if self.specials == "fnuz":
            val = np.where(c == 1 << (self.bits - 1), np.nan, val)
        return val

    def values(self) -> np.ndarray:
        """Every finite value of the format, ascending, with a single zero.

        Returns
        -------
        ndarray of float64, 1-D (E2M1: 15 values from -6 to 6).

        Raises
        ------
        ValueError
            For formats wider than 16 bits (FP32 has over four billion values).
        """
        if self.bits > 16:
            raise ValueError(f"{self.name} has {1 << self.bits:,} codes: too many to list")
        t = self._table
        return np.unique(t[np.isfinite(t)] + 0.0)  # + 0.0 turns -0.0 into +0.0


def _as_generator(rng) -> np.random.Generator:
    """``rng`` as a Generator: a Generator, an int seed, a SeedSequence or BitGenerator (what
    ``numpy.random.default_rng`` takes), or None (fresh entropy)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (np.random.SeedSequence, np.random.BitGenerator)):
        return np.random.default_rng(rng)
    if rng is None or (isinstance(rng, (int, np.integer)) and not isinstance(rng, bool)):
        if rng is not None and rng < 0:
            raise ValueError(f"rng must be a non-negative int seed, got {rng!r}")
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None, got {rng!r}")


FP32 = FloatFormat("FP32", 8, 23, 127, "ieee")
FP16 = FloatFormat("FP16", 5, 10, 15, "ieee")
BF16 = FloatFormat("BF16", 8, 7, 127, "ieee")
FP8_E4M3 = FloatFormat("E4M3", 4, 3, 7, "fn")
FP8_E5M2 = FloatFormat("E5M2", 5, 2, 15, "ieee")
FP6_E2M3 = FloatFormat("E2M3", 2, 3, 1, "none")
FP6_E3M2 = FloatFormat("E3M2", 3, 2, 3, "none")
FP4_E2M1 = FloatFormat("E2M1", 2, 1, 1, "none")
E8M0 = FloatFormat("E8M0", 8, 0, 127, "fn", signed=False, subnormals=False)
FP8_E4M3FNUZ = FloatFormat("E4M3FNUZ", 4, 3, 8, "fnuz")  # AMD MI300: max 240, NaN 0x80
FP8_E5M2FNUZ = FloatFormat("E5M2FNUZ", 5, 2, 16, "fnuz")  # AMD MI300: max 57344, NaN 0x80

#: Every format of at most 16 bits by its standard name (FP32 is kept apart: it has too many
#: codes for a value table).
FORMATS = {f.name: f for f in (FP16, BF16, FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1, E8M0,
                               FP8_E4M3FNUZ, FP8_E5M2FNUZ)}

#: The type each format agrees with bit for bit, by name: a numpy dtype for FP32 and FP16, an
#: ml_dtypes type for the rest (``numfmt._reference.reference_dtypes`` resolves the names).
#: The one table tests and benchmarks take their oracle pairs from; a format ml_dtypes lacks
#: has no entry.
REFERENCE_DTYPES = {"FP32": "float32", "FP16": "float16", "BF16": "bfloat16",
                    "E4M3": "float8_e4m3fn", "E5M2": "float8_e5m2", "E2M3": "float6_e2m3fn",
                    "E3M2": "float6_e3m2fn", "E2M1": "float4_e2m1fn", "E8M0": "float8_e8m0fnu",
                    "E4M3FNUZ": "float8_e4m3fnuz", "E5M2FNUZ": "float8_e5m2fnuz"}

# Every FloatFormat constant of this module is public: a new format is exported by defining it.
__all__ = ["FloatFormat", "FORMATS", "REFERENCE_DTYPES",
           *(n for n, v in list(globals().items()) if isinstance(v, FloatFormat))]
