"""Round, encode and decode for numfmt's FloatFormat, on torch tensors on any device.

The results are bit for bit those of :mod:`numfmt.formats` (the specification), NaN included.
Round-to-nearest-even adds ``C = 2^(e + mantissa bits - man_bits)`` (``e`` the binade of
``|x|``, clamped to the format's) to the magnitude and subtracts it again, so that the FPU
rounds at the format's quantum, subnormals included; float32 input stays float32 where that is
exact (the formats numfmt's own float32 path takes), and BF16 from float32 is torch's own
bias-and-truncate cast. On the CPU the work goes in cache-sized chunks through reused
buffers into one result allocated by numpy (huge pages): fresh memory, not arithmetic, is
what large tensors cost. Stochastic rounding compares a uniform draw with the fractional
position between the two neighbouring grid values, as numpy does.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import torch

from numfmt.formats import FloatFormat
from numfmt._validate import as_integer_array, check_bool
from numfmt.torch._core import (CHUNK, F64, Scratch, as_real_tensor, check_device, check_tensor,
                                default_device, floor_log2, may_hold_nan, new_result, pow2, spans,
                                step_of)

__all__ = ["CHUNK", "NATIVE_DTYPES", "round", "encode", "decode", "to_native"]

_MODES = ("nearest", "stochastic")
_I64 = torch.int64

#: torch's native dtypes for the formats that have one (float8_e8m0fnu since torch 2.7).
NATIVE_DTYPES = {"E4M3": torch.float8_e4m3fn, "E5M2": torch.float8_e5m2,
                 "FP16": torch.float16, "BF16": torch.bfloat16}
if hasattr(torch, "float8_e4m3fnuz"):
    NATIVE_DTYPES["E4M3FNUZ"] = torch.float8_e4m3fnuz
    NATIVE_DTYPES["E5M2FNUZ"] = torch.float8_e5m2fnuz
if hasattr(torch, "float8_e8m0fnu"):
    NATIVE_DTYPES["E8M0"] = torch.float8_e8m0fnu


def _check_fmt(fmt) -> FloatFormat:
    if not isinstance(fmt, FloatFormat):
        raise TypeError(f"fmt must be a numfmt FloatFormat such as FP8_E4M3, got {fmt!r}")
    return fmt


def round(x, fmt: FloatFormat, saturate: bool = True, mode: str = "nearest",  # noqa: A001
          generator: torch.Generator | None = None, u=None, device=None) -> torch.Tensor:
    """Round real numbers onto ``fmt``'s grid; the torch twin of :meth:`FloatFormat.round`.

    Parameters
    ----------
    x : tensor or array_like of real numbers, any shape
        Converted exactly to float64. A tensor stays on its device unless ``device`` is given.
    fmt : FloatFormat
        E.g. ``numfmt.FP8_E4M3``.
    saturate : bool, default True
        As :meth:`FloatFormat.round`: clamp overflow and +-Inf to +-max, or (False) give the
        format's Inf (E5M2, FP16, BF16) or NaN (E4M3, E8M0).
    mode : {"nearest", "stochastic"}
        Round to nearest, ties to even (E8M0: ties up), or stochastic rounding.
    generator : torch.Generator, optional
        Source of the uniform draws for ``mode="stochastic"`` when ``u`` is not given.
    u : tensor or array_like of float64 in [0, 1), shape of ``x``, optional
        Explicit uniform draws for stochastic rounding. With
        ``u = np.random.default_rng(seed).random(x.size)`` the result is bit for bit
        ``fmt.round(x, mode="stochastic", rng=seed)``.
    device : torch.device or str, optional
        Where to compute; default: the device of ``x`` if it is a tensor, else
        :func:`numfmt.torch.default_device`.

    Returns
    -------
    torch.Tensor of float64, the shape of ``x``
        Bit-identical to ``fmt.round`` on the same input (and the same draws).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued, ``fmt`` is not a FloatFormat, or ``saturate`` is not a
        bool (the check numfmt's FloatFormat.round uses).
    ValueError
        If ``mode`` is unknown, ``u`` has the wrong number of elements or values outside
        [0, 1), ``x`` is a meta tensor, or ``device`` is CUDA without CUDA.

    Notes
    -----
    A tensor that requires grad is accepted; rounding is a step function, so the gradient of
    the result is exactly 0 almost everywhere (not a straight-through estimator; see
    :mod:`numfmt.torch.qat` for that).
    """
    fmt = _check_fmt(fmt)
    check_bool(saturate, "saturate")
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}, got {mode!r}")
    if mode == "nearest":
        if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and fmt._float32_path:
            t = _float32_input(x, device)  # float32 arithmetic: no float64 copy of x
        else:
            t = as_real_tensor(x, device=device)
        return step_of(x, _round_nearest(t.detach(), fmt, saturate).reshape(t.shape))
    x = as_real_tensor(x, device=device)
    shape = x.shape
    x = x.reshape(-1)
    if _stochastic_fast_ok(fmt) and x.numel() and bool(torch.isfinite(x.sum())):
        return _stochastic_chunks(x, fmt, _draws(u, x, generator), saturate).reshape(shape)
    a = x.abs()
    r = _stochastic_magnitude(a, fmt, _draws(u, a, generator))
    return _finish(r, x, fmt, saturate).reshape(shape)


def _round_nearest(t: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Round-to-nearest of float32 (with ``fmt._float32_path``) or float64 ``t`` as a flat
    float64 result, chunk by chunk on the CPU into one preallocated result."""
    flat = t.reshape(-1)
    n = flat.numel()
    out = new_result(n, F64, flat.device)
    if (flat.is_cpu and flat.dtype == torch.float32 and fmt._float32_path == "fpu"
            and fmt.man_bits <= 21 and n):
        _round_fpu32_cpu(flat, out, fmt, saturate)
        return out
    s = Scratch(flat.device)
    fast = flat.dtype == torch.float32 or _fpu_float64(fmt)
    bf16 = flat.dtype == torch.float32 and _is_bf16(fmt)
    step = max(1, n if not flat.is_cpu else CHUNK)
    for xc, oc in zip(flat.split(step), out.split(step)):
        if bf16:  # as _nearest_into, with the bfloat16 values widened straight into the result
            src = xc
            if saturate:
                src = torch.clamp(xc, -fmt.max_value, fmt.max_value,
                                  out=s("f", xc.dtype, xc.numel()))
            b = s("b", torch.bfloat16, xc.numel())
            b.copy_(src)
            oc.copy_(b)
            if may_hold_nan(xc):  # the canonical NaN with x's sign
                nan = torch.copysign(s.const(float("nan"), torch.float32), xc)
                torch.where(torch.isnan(xc), nan, oc, out=oc)
        elif not fast:
            oc.copy_(_round_flat(xc, fmt, saturate))
        elif xc.dtype == torch.float64:  # the result chunk is the working buffer
            _nearest_into(xc, oc, fmt, saturate, s)
        else:
            f = s("f", torch.float32, xc.numel())
            _nearest_into(xc, f, fmt, saturate, s)
            oc.copy_(f)  # float32 -> float64 is exact
    return out


def _round_fpu32_cpu(x: torch.Tensor, out: torch.Tensor, fmt: FloatFormat,
                     saturate: bool) -> None:
    """``out = round(x)`` for 1-D float32 ``x`` on the CPU (``fmt._float32_path == "fpu"``,
    at most 21 mantissa bits), the same values as :func:`_nearest_into`, one pass fewer.

    With ``e`` the binade of ``|x|`` clamped to [emin, emax + 1] and ``C = 1.5 * 2^(e + 23 -
    man_bits)``, ``x + C`` lies in C's binade for either sign of ``x`` (``|x| < 2^(e + 1) <=
    C / 3``, as ``23 - man_bits >= 2``), where float32's last place is the format's quantum:
    the FPU rounds to nearest even, subnormals included, and ``- C`` is exact. The signed
    value needs no ``|x|`` pass; the sign is ORed back on for results that are zero (x - x
    is +0). ``e`` comes from the exponent field of ``x``, whose max (one int reduction) says
    whether a chunk may round past max_value or hold a NaN. One loop, constants and buffers
    made once (64 chunks of 4M values otherwise spend 10-15 microseconds each in Python);
    half a chunk, so that x, two float32 buffers and the float64 result chunk (20 bytes per
    element) stay within a 2 MiB L2 (a few percent faster than whole chunks).
    """
    step = CHUNK // 2
    m = min(step, x.numel())
    f, c = torch.empty(m), torch.empty(m)
    fi, ci = f.view(_I32), c.view(_I32)
    exp_mask, sign, qnan = (torch.tensor(v, dtype=_I32) for v in (0x7F80_0000, _SIGN32,
                                                                   _QNAN32))
    lo, hi = (fmt.emin + 127) << 23, (fmt.emax + 1 + 127) << 23  # patterns of 2^emin, 2^(emax+1)
    top_binade = (fmt.emax + 127) << 23  # below it nothing can round past max_value
    alpha = 1.5 * 2.0 ** (23 - fmt.man_bits)  # C = alpha * 2^e, exact in float32
    top = float(np.float32(fmt.max_value))
    clamp_top = saturate or fmt.specials == "none"
    special = np.inf if fmt.has_inf else np.nan
    for xc, oc in zip(x.split(step), out.split(step)):
        if xc.numel() != m:  # the last chunk
            m = xc.numel()
            f, c = f[:m], c[:m]
            fi, ci = f.view(_I32), c.view(_I32)
        t = xc.view(_I32)
        torch.bitwise_and(t, exp_mask, out=ci)  # 2^e as a pattern (Inf's for Inf and NaN)
        e_max = int(torch.amax(ci))
        ci.clamp_(lo, hi)
        torch.add(xc, c, alpha=alpha, out=f)
        f.sub_(c, alpha=alpha)
        if e_max >= top_binade:
            if clamp_top:
                f.clamp_(-top, top)  # NaN stays NaN
            else:
                f.masked_fill_(f.abs() > top, special)  # the sign is ORed on below
        torch.bitwise_and(t, sign, out=ci)
        fi.bitwise_or_(ci)
        if e_max == 0x7F80_0000 and bool(torch.isnan(xc).any()):  # the canonical NaN, x's sign
            torch.where(torch.isnan(xc), torch.bitwise_and(t, sign).bitwise_or_(qnan), fi,
                        out=fi)
        oc.copy_(f)  # float32 -> float64 is exact


class _Layout(NamedTuple):
    itype: torch.dtype
    man: int       # mantissa bits
    exp_mask: int  # the exponent field
    sign: int      # the sign bit, as a value of itype
    qnan: int      # the quiet NaN numpy assigns (positive)


_LAYOUTS = {torch.float32: _Layout(torch.int32, 23, 0x7F80_0000, -(1 << 31), 0x7FC0_0000),
            torch.float64: _Layout(_I64, 52, 0x7FF0 << 48, -(1 << 63), 0x7FF8 << 48)}


def _fpu_float64(fmt: FloatFormat) -> bool:
    """Whether :func:`_nearest_into` rounds float64 input for ``fmt``: signed, subnormals,
    ties to even, and every constant 2^(e + 52 - man_bits) a float64 normal number."""
    return (fmt._standard_flags and fmt.signed and fmt.subnormals and 0 < fmt.man_bits < 52
            and fmt.specials in ("ieee", "fn", "none", "fnuz")
            and fmt.emin + 52 - fmt.man_bits >= -1022 and fmt.emax + 1 + 52 - fmt.man_bits <= 1023)


def _nearest_into(x: torch.Tensor, f: torch.Tensor, fmt: FloatFormat, saturate: bool,
                  s: Scratch, signed: bool = True, above: float | None = None,
                  finite: bool = False):
    """``f = round(x)`` to nearest even, for 1-D float32 ``x`` (``fmt._float32_path``) or
    float64 ``x`` (:func:`_fpu_float64`); ``f`` has the dtype and length of ``x``.

    The same values as numpy's ``FloatFormat._nearest_float32`` (float32) and its float64
    bit path (both are exact round-to-nearest-even), computed in place, in as few passes as
    possible. "fpu": with ``C = 2^(e + mant - man_bits)``, ``e`` the binade of ``|x|``
    clamped to [emin, emax + 1], ``|x| + C`` has the format's quantum as its last place, so
    the FPU's own round-to-nearest-even rounds (subnormals included) and ``- C`` is exact.
    "bits" (BF16 from float32): add the rounding bias to the 32-bit pattern and clear the low
    bits, as hardware does. With ``signed=False`` (encode), ``f`` gets the magnitude and its
    NaNs are not canonical. ``finite=True`` promises that ``x`` holds no NaN. With ``above``,
    returns the number of elements with ``|x| > above`` (a 0-d tensor, so a GPU need not wait).
    """
    lay = _LAYOUTS[x.dtype]
    t = x.view(lay.itype)
    n = x.numel()
    count = None
    if x.dtype == torch.float32 and fmt._float32_path == "bits":
        top = float(np.float32(fmt.max_value))
        nan = not finite and may_hold_nan(x)
        if above is not None:
            count = (x.abs() > above).sum()
        if _is_bf16(fmt):
            # torch's own float32 -> bfloat16 cast rounds exactly so (bias 0x7FFF + the last
            # kept bit, then truncate; checked against numfmt on every device by this
            # package's tests), in one vectorized pass. Saturation first: rounding commutes
            # with clamping at a grid value. NaN is made canonical below.
            if saturate:
                torch.clamp(x, -top, top, out=f)
            else:
                f.copy_(x)
            b = s("b", torch.bfloat16, n)
            b.copy_(f)
            f.copy_(b)
        else:
            _round_bits_(x, t, f, fmt, saturate, nan, top)
        if not signed:
            f.abs_()
    else:
        p = _fpu_constants(fmt, x.dtype)  # once per format: this runs once per chunk
        c = s("c", x.dtype, n)
        ci, fi = c.view(lay.itype), f.view(lay.itype)
        torch.abs(x, out=f)
        # On the CPU one max of |x| says whether a NaN needs making canonical and whether
        # anything can pass max_value (a value at most max_value rounds to at most it).
        big, nan = True, not finite
        cpu = x.is_cpu
        if cpu and not finite and n:
            m = float(torch.amax(f))
            nan, big = m != m, not m <= p.top
        if above is not None:  # a float 0/1 sum counts fastest; in x's dtype (3x faster
            # than float64 accumulation) where it is exact: at most 2^24 elements
            exact = n <= 1 << 24 and cpu
            count = torch.gt(f, above, out=c).sum(dtype=None if exact else F64)
        torch.clamp(f, p.lo, p.hi, out=c)
        ci.bitwise_and_(s.const(lay.exp_mask, lay.itype))  # 2^e
        f.add_(c, alpha=p.k).sub_(c, alpha=p.k)
        if not (big or nan):
            pass
        elif saturate or fmt.specials == "none":
            f.clamp_(max=p.top)  # NaN stays NaN
        else:
            f.masked_fill_(f > p.top, p.special)
        if nan:
            # The canonical NaN by one clamp: arithmetic has quieted every NaN, so as
            # integers their patterns lie at and above the quiet NaN's, and every other
            # magnitude (Inf included) lies below it.
            fi.clamp_(max=s.const(lay.qnan, lay.itype))
        nan = False
        if signed:
            torch.bitwise_and(t, s.const(lay.sign, lay.itype), out=ci)
            fi.bitwise_or_(ci)
            if p.fnuz:
                f.add_(0.0)  # no -0 in FNUZ formats
    if nan and signed:
        fi = f.view(lay.itype)
        torch.where(torch.isnan(x), torch.bitwise_and(t, lay.sign).bitwise_or_(lay.qnan), fi,
                    out=fi)
    return count


class _Fpu(NamedTuple):
    """Constants of :func:`_nearest_into`'s "fpu" path for one format and input dtype."""

    top: float      # max_value in the input's dtype
    lo: float       # 2^emin, the lowest binade C may take
    hi: float       # 2^(emax + 1), the binade above the top one
    k: float        # 2^(mantissa bits - man_bits): C = k * 2^e
    special: float  # what overflow gives without saturation: Inf or NaN
    fnuz: bool      # no -0


@functools.lru_cache(maxsize=None)
def _fpu_constants(fmt: FloatFormat, dtype: torch.dtype) -> _Fpu:
    lay = _LAYOUTS[dtype]
    top = fmt.max_value if dtype == F64 else float(np.float32(fmt.max_value))
    return _Fpu(top, 2.0 ** fmt.emin, 2.0 ** (fmt.emax + 1), 2.0 ** (lay.man - fmt.man_bits),
                np.inf if fmt.has_inf else np.nan, fmt.specials == "fnuz")


def _is_bf16(fmt: FloatFormat) -> bool:
    return (fmt.exp_bits, fmt.man_bits, fmt.bias, fmt.specials) == (8, 7, 127, "ieee") \
        and fmt.signed and fmt.subnormals and fmt._standard_flags


def _round_bits_(x, t, f, fmt: FloatFormat, saturate: bool, nan: bool, top: float) -> None:
    """The "bits" path of :func:`_nearest_into` (float32 input, float32's exponent range):
    add the rounding bias and the last kept bit to the 32-bit pattern, clear the low bits."""
    shift = 23 - fmt.man_bits
    src = torch.where(torch.isnan(x), 0, t) if nan else t  # NaN's payload must not carry
    fi = f.view(_I32)
    torch.bitwise_right_shift(src, shift, out=fi)
    fi.bitwise_and_(1).add_(src).add_((1 << (shift - 1)) - 1).bitwise_and_(-(1 << shift))
    if saturate or fmt.specials == "none":
        f.clamp_(-top, top)
    elif not (fmt.has_inf and fmt.emax == 127):  # else overflow carried into float32's Inf
        special = torch.copysign(f.new_tensor(np.inf if fmt.has_inf else np.nan), f)
        torch.where(f.abs() > top, special, f, out=f)


def _round_flat(x: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Round-to-nearest of 1-D float64 ``x`` where :func:`_nearest_into` cannot (E8M0, exponent
    ranges beyond float64's constants): the float64 bit path of numfmt's round."""
    return _finish(_nearest_magnitude(x.abs(), fmt), x, fmt, saturate)


def _finish(r: torch.Tensor, x: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """The steps of numfmt's round after the magnitude ``r`` of ``x`` is rounded (nearest or
    stochastic): E8M0's floor, saturation or the format's special, the sign (no -0 in FNUZ
    formats) or, unsigned, NaN for what is not positive."""
    if not fmt.subnormals:  # E8M0: no zero, nothing below 2**emin
        r = torch.maximum(r, r.new_tensor(fmt.min_normal))
    if saturate or fmt.specials == "none":
        r = torch.minimum(r, r.new_tensor(fmt.max_value))
    else:
        r = torch.where(r > fmt.max_value, r.new_tensor(np.inf if fmt.has_inf else np.nan), r)
    if fmt.signed:
        r = torch.copysign(r, x)
        return r + 0.0 if fmt.specials == "fnuz" else r  # -0.0 + 0.0 is +0.0
    return torch.where((x <= 0) | torch.isnan(x), r.new_tensor(np.nan), r)


_I32 = torch.int32
_SIGN32 = -(1 << 31)  # 0x8000_0000 as int32
_QNAN32 = 0x7FC0_0000  # widens to float64's canonical NaN, as numpy's round() returns


def _codes_of_float32(f: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Codes of float32 values ``f`` on ``fmt``'s grid: the twin of numpy's
    ``FloatFormat._codes_of`` (the larger of the pattern's code and the subnormal's code)."""
    m = fmt.man_bits
    bits = f.view(_I32)
    if (fmt.exp_bits, fmt.bias, fmt.specials) == (8, 127, "ieee"):  # BF16: top of the pattern
        return ((bits >> (23 - m)) & ((1 << fmt.bits) - 1)).to(_code_dtype(fmt))
    mag = bits & 0x7FFF_FFFF
    code = (mag >> (23 - m)) - ((127 - fmt.bias) << m)
    sub = mag.view(torch.float32) * float(np.ldexp(1.0, -fmt.emin)) * float(np.ldexp(1.0, m))
    code = torch.maximum(code, torch.fmin(sub, sub.new_tensor(float(1 << m))).to(_I32))
    code = code | (((bits >> 31) & 1) << (fmt.bits - 1))
    special = ~torch.isfinite(f)
    if bool(special.any()):
        nan = torch.isnan(f)
        if not fmt.has_nan and bool(nan.any()):
            raise ValueError(f"{fmt.name} has no NaN: cannot encode NaN")
        top_exp = (1 << fmt.exp_bits) - 1
        nan_mant = 1 << (m - 1) if fmt.specials == "ieee" else (1 << m) - 1
        field = torch.where(nan, (top_exp << m) | nan_mant, top_exp << m)
        field = field | (((bits >> 31) & 1) << (fmt.bits - 1))
        code = torch.where(special, field, code)
    return code.to(_code_dtype(fmt))


def _draws(u, a: torch.Tensor, generator) -> torch.Tensor:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {generator!r} "
                        "(a numpy Generator draws for numfmt's FloatFormat.round; pass u= "
                        "to use its draws here)")
    if u is None:
        return torch.rand(a.shape, dtype=F64, device=a.device, generator=generator)
    u = as_real_tensor(u, "u", device=a.device).reshape(-1)
    if u.numel() != a.numel():
        raise ValueError(f"u must hold one draw per element of x ({a.numel()}), got {u.numel()}")
    if u.numel() and not bool(((u >= 0) & (u < 1)).all()):
        raise ValueError("u must hold uniform draws in [0, 1)")
    return u


def _nearest_magnitude(a: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Non-negative float64 magnitudes to nearest, ties even (E8M0: ties up)."""
    shift = 52 - fmt.man_bits
    nan = torch.isnan(a)
    b = torch.where(nan, a.new_zeros(()), a).view(_I64)  # sign bit 0: int64 arithmetic is safe
    half = 1 << (shift - 1)
    if fmt.man_bits == 0:
        rb = b + half
    else:
        rb = b + ((b >> shift) & 1) + (half - 1)
    r = (rb & ~((1 << shift) - 1)).view(F64)
    r = torch.where(nan, a.new_tensor(np.nan), r)  # the canonical NaN, as numpy assigns
    if fmt.subnormals:
        c = float(np.ldexp(1.0, fmt.emin - fmt.man_bits + 52))
        r = torch.where(a < fmt.min_normal, (a + c) - c, r)
    return r


def _stochastic_magnitude(a: torch.Tensor, fmt: FloatFormat, u: torch.Tensor) -> torch.Tensor:
    """Round magnitudes down or up with probability equal to the position between neighbours."""
    finite = torch.isfinite(a)
    safe = torch.where(finite, a, a.new_zeros(()))
    e = torch.clamp(floor_log2(safe), min=fmt.emin)
    # e >= emin >= -1022, but e - man_bits can pass below pow2's range (E11 with bias 1023):
    # the product of two exact powers of two is exact, also as a float64 subnormal.
    quantum = pow2(e) * float(np.ldexp(1.0, -fmt.man_bits))
    steps = safe / quantum  # exact: quantum is a power of two
    low = torch.floor(steps)
    up = (u < (steps - low)).to(F64)
    return torch.where(finite, (low + up) * quantum, a)


def _stochastic_fast_ok(fmt: FloatFormat) -> bool:
    """Whether :func:`_stochastic_chunks` applies: a signed format with subnormals whose
    quanta 2^(e - man_bits) are float64 normal numbers."""
    return (fmt.signed and fmt.subnormals and fmt.emin - fmt.man_bits >= -1022
            and fmt.emax <= 1023)


def _stochastic_chunks(x: torch.Tensor, fmt: FloatFormat, u: torch.Tensor,
                       saturate: bool) -> torch.Tensor:
    """Stochastic rounding of finite 1-D float64 ``x`` with draws ``u``: the values of
    :func:`_stochastic_magnitude` and :func:`_finish`, in place through cache-sized buffers.

    The quantum ``2^(max(e, emin) - man_bits)`` is built from the exponent field of ``|x|``
    (clamped at emin's pattern, so 0 and subnormals take emin's quantum), the same power of
    two ``pow2(e) * 2^-man_bits`` gives; the division, floor, comparison and product are the
    same float64 operations in the same order.
    """
    n = x.numel()
    out = new_result(n, F64, x.device)
    s = Scratch(x.device)
    lo = (fmt.emin + 1023) << 52
    shift = fmt.man_bits << 52
    special = np.inf if fmt.has_inf else np.nan
    for i, j in spans(n, x.device):
        xc, o = x[i:j], out[i:j]
        a = s("a", F64, j - i)
        q = s("q", F64, j - i)
        w = s("u", F64, j - i)
        qi = q.view(_I64)
        torch.abs(xc, out=a)
        torch.bitwise_and(a.view(_I64), s.const(0x7FF << 52, _I64), out=qi)
        qi.clamp_(min=lo).sub_(shift)              # 2^(e - man_bits), e >= emin
        a.div_(q)                                  # steps: exact (q is a power of two)
        torch.floor(a, out=o)                      # low
        a.sub_(o)                                  # the fractional step
        # up = (u < step) as 1.0 or 0.0: the sign of a float64 difference is that of the
        # exact one, and |step - u| < 1, so ceil gives 1 exactly where u < step (u widens
        # exactly; same-dtype passes run 2x faster here than a mixed-dtype compare and add).
        w.copy_(u[i:j])
        torch.sub(a, w, out=w)
        w.ceil_()
        o.add_(w).mul_(q)
        if saturate or fmt.specials == "none":
            o.clamp_(max=fmt.max_value)
        else:
            o.masked_fill_(o > fmt.max_value, special)
        # copysign(o, x) for o >= +0 (or a positive NaN): OR in x's sign bit, as
        # _nearest_into does (a third of copysign's time on the CPU).
        torch.bitwise_and(xc.view(_I64), s.const(-(1 << 63), _I64), out=qi)
        o.view(_I64).bitwise_or_(qi)
        if fmt.specials == "fnuz":
            o.add_(0.0)                            # no -0 in FNUZ formats
    return out


def _float32_input(x: torch.Tensor, device) -> torch.Tensor:
    """A float32 tensor for the fast paths, through the checks ``as_real_tensor`` makes."""
    check_tensor(x, "x")
    device = check_device(device)
    return x if device is None else x.to(device)


def encode(x, fmt: FloatFormat, saturate: bool = True, device=None) -> torch.Tensor:
    """Round ``x`` to ``fmt`` and return the bit patterns; the twin of :meth:`FloatFormat.encode`.

    Parameters
    ----------
    x : tensor or array_like of real numbers, any shape
    fmt : FloatFormat
    saturate : bool, default True
        Passed to :func:`round`.
    device : optional, as :func:`round`

    Returns
    -------
    torch.Tensor of uint8 (formats of 8 bits or fewer), int32 (FP16, BF16) or int64 (FP32),
    shape of ``x``
        The codes, right-aligned; equal to ``fmt.encode(x)``, including the NaN patterns
        (0x7F E4M3, 0x7E E5M2, 0xFF E8M0, with the input's sign bit).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued or ``fmt`` is not a FloatFormat.
    ValueError
        If a value is or rounds to NaN and the format has no NaN (E2M3, E3M2, E2M1).
    """
    fmt = _check_fmt(fmt)
    check_bool(saturate, "saturate")
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and fmt._float32_path:
        t = _float32_input(x, device)
        return _encode_float32(t.detach().reshape(-1), fmt, saturate).reshape(t.shape)
    r = round(x, fmt, saturate=saturate, device=device).detach()
    flat = r.reshape(-1)
    out = new_result(flat.numel(), _code_dtype(fmt), flat.device)
    for i, j in spans(flat.numel(), flat.device):
        out[i:j] = _codes_of(flat[i:j], fmt)
    return out.reshape(r.shape)


def _encode_float32(flat: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Codes of 1-D float32 ``flat`` (``fmt._float32_path`` set), chunk by chunk on the CPU."""
    if not fmt.has_nan and flat.numel() and bool(torch.isnan(flat).any()):
        raise ValueError(f"{fmt.name} has no NaN: cannot encode NaN")
    n = flat.numel()
    out = new_result(n, _code_dtype(fmt), flat.device)
    s = Scratch(flat.device)
    top16 = (fmt.exp_bits, fmt.bias, fmt.specials) == (8, 127, "ieee")
    lut = _code_table(fmt).to(flat.device) if fmt.bits <= 8 and not top16 else None
    for i, j in spans(n, flat.device):
        f = s("f", torch.float32, j - i)
        _nearest_into(flat[i:j], f, fmt, saturate, s)
        fi = f.view(_I32)
        if top16:  # BF16 (and E8Mm): the code is the top of the pattern
            oc = out[i:j]
            torch.bitwise_right_shift(fi, 23 - fmt.man_bits, out=oc)
            oc.bitwise_and_((1 << fmt.bits) - 1)
        elif lut is not None:
            # A value on an 8-bit format's grid is fixed by its sign, exponent and top man_bits
            # bits (its subnormals are float32 normals): a table lookup gives the code.
            key = s("k", _I32, j - i)
            torch.bitwise_right_shift(fi, 23 - fmt.man_bits, out=key)
            key.bitwise_and_((1 << (9 + fmt.man_bits)) - 1)
            torch.index_select(lut, 0, key, out=out[i:j])
        else:
            out[i:j] = _codes_of_float32(f, fmt)
    return out


@functools.lru_cache(maxsize=None)
def _code_table(fmt: FloatFormat) -> torch.Tensor:
    """uint8 codes of the float32 values with pattern ``key << (23 - man_bits)``, for every
    key of 9 + man_bits bits (sign, exponent, top mantissa bits), from numpy's encode."""
    m = fmt.man_bits
    keys = np.arange(1 << (9 + m), dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # signalling NaN patterns widen to quiet ones
        v = (keys << np.uint32(23 - m)).view(np.float32).astype(np.float64)
    if not fmt.has_nan:
        v[np.isnan(v)] = 0.0  # never looked up: NaN is refused before
    codes = fmt.encode(v, saturate=False)
    return torch.from_numpy(codes.astype(np.uint8))


def _code_dtype(fmt: FloatFormat) -> torch.dtype:
    # int32 would wrap a 32-bit code's sign bit to a negative number: int64 beyond 16 bits.
    return torch.uint8 if fmt.bits <= 8 else torch.int32 if fmt.bits <= 16 else torch.int64


def _codes_of(r: torch.Tensor, fmt: FloatFormat) -> torch.Tensor:
    """Codes of float64 values ``r`` on ``fmt``'s grid (the steps of encode)."""
    nan = torch.isnan(r)
    if not fmt.has_nan and bool(nan.any()):
        raise ValueError(f"{fmt.name} has no NaN: cannot encode NaN")
    m = fmt.man_bits
    inf = torch.isinf(r)
    a = torch.where(nan | inf, r.new_zeros(()), r.abs())  # specials get their fields below
    normal = a >= fmt.min_normal
    top_exp = (1 << fmt.exp_bits) - 1
    # On the grid a normal value's float64 fields are the format's fields, rebiased and cut.
    exp_field = torch.where(normal, floor_log2(a) + fmt.bias, 0)
    mant_normal = (a.view(_I64) >> (52 - m)) & ((1 << m) - 1)
    # Exact integer on the grid; two power-of-two factors, as 2^(m - emin) can pass 2^1023.
    sub = torch.where(normal, a.new_zeros(()), a)
    mant_sub = (sub * float(np.ldexp(1.0, -fmt.emin)) * float(np.ldexp(1.0, m))).to(_I64)
    mant = torch.where(normal, mant_normal, mant_sub)
    exp_field = torch.where(inf, top_exp, exp_field)
    mant = torch.where(inf, 0, mant)
    nan_mant = 1 << (m - 1) if fmt.specials == "ieee" else (1 << m) - 1
    exp_field = torch.where(nan, top_exp, exp_field)
    mant = torch.where(nan, nan_mant, mant)
    code = (exp_field << m) | mant
    if fmt.signed:
        code = code | (torch.signbit(r).to(_I64) << (fmt.exp_bits + m))
    if fmt.specials == "fnuz":
        code = torch.where(nan, 1 << (fmt.bits - 1), code)  # the negative-zero pattern
    return code.to(_code_dtype(fmt))


def decode(codes, fmt: FloatFormat, device=None) -> torch.Tensor:
    """Return the float64 values of bit patterns ``codes``, computed from the field definitions.

    Parameters
    ----------
    codes : tensor or array_like of integers in [0, 2**fmt.bits), any shape
    fmt : FloatFormat
    device : optional, as :func:`round`

    Returns
    -------
    torch.Tensor of float64, the shape of ``codes``; equal to ``fmt.decode(codes)``.

    Raises
    ------
    TypeError
        If ``codes`` is not an integer tensor/array or ``fmt`` is not a FloatFormat.
    ValueError
        If a code is negative or does not fit in ``fmt.bits`` bits.
    """
    fmt = _check_fmt(fmt)
    device = check_device(device)
    if isinstance(codes, torch.Tensor):
        if codes.dtype == torch.bool or codes.is_floating_point() or codes.is_complex():
            raise TypeError(f"codes must be integers, got dtype {codes.dtype}")
        check_tensor(codes, "codes")
        if codes.dtype == torch.uint64 and codes.numel() and int(codes.max()) >= 1 << fmt.bits:
            raise ValueError(f"{fmt.name} codes must lie in [0, {(1 << fmt.bits) - 1}], "
                             f"got {int(codes.max())}")
        c = codes.to(device=device if device is not None else codes.device, dtype=_I64)
    else:
        arr = np.asarray(codes)
        if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
            if arr.dtype != object:
                raise TypeError(f"codes must be integers, got dtype {arr.dtype}")
        c = torch.as_tensor(as_integer_array(arr, "codes"),
                            device=device if device is not None else default_device())
    if c.numel() and (int(c.min()) < 0 or int(c.max()) >= (1 << fmt.bits)):
        bad = int(c.min()) if int(c.min()) < 0 else int(c.max())
        raise ValueError(f"{fmt.name} codes must lie in [0, {(1 << fmt.bits) - 1}], got {bad}")
    m = fmt.man_bits
    mant = c & ((1 << m) - 1)
    exp = (c >> m) & ((1 << fmt.exp_bits) - 1)
    mant_f = mant.to(F64)
    val = (1.0 + mant_f * float(np.ldexp(1.0, -m))) * pow2(exp - fmt.bias)
    if fmt.subnormals:
        val = torch.where(exp == 0, mant_f * float(np.ldexp(1.0, fmt.emin - m)), val)
    top = exp == (1 << fmt.exp_bits) - 1
    nan = val.new_tensor(np.nan)
    if fmt.specials == "ieee":
        val = torch.where(top, torch.where(mant == 0, val.new_tensor(np.inf), nan), val)
    elif fmt.specials == "fn":
        val = torch.where(top & (mant == (1 << m) - 1), nan, val)
    if fmt.signed:
        val = torch.where(((c >> (fmt.bits - 1)) & 1) == 1, -val, val)
    if fmt.specials == "fnuz":
        val = torch.where(c == 1 << (fmt.bits - 1), nan, val)
    return val


def to_native(x, fmt: FloatFormat) -> torch.Tensor:
    """Round ``x`` exactly as :func:`round` (saturating) and store it in torch's native dtype.

    Parameters
    ----------
    x : tensor or array_like of real numbers
    fmt : FloatFormat with a native torch dtype (E4M3, E5M2, FP16, BF16, E8M0)

    Returns
    -------
    torch.Tensor of ``NATIVE_DTYPES[fmt.name]``, on the device of ``x``
        The values are on the format's grid before the cast, so the cast is exact.

    Raises
    ------
    ValueError
        If torch has no dtype for ``fmt``.
    """
    fmt = _check_fmt(fmt)
    if fmt.name not in NATIVE_DTYPES:
        raise ValueError(f"torch has no native dtype for {fmt.name}; "
                         f"native: {sorted(NATIVE_DTYPES)}")
    r = round(x, fmt)
    return r.to(torch.float32).to(NATIVE_DTYPES[fmt.name])

