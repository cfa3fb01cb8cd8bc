"""Round, encode and decode for numfmt's FloatFormat, on torch tensors on any device.

The arithmetic is the one of :mod:`numfmt.formats`, step for step, so the results are bit for
bit those of the numpy implementation: round-to-nearest-even by adding half a unit in the last
place to the float64 bit pattern and clearing the low bits; subnormals by adding and subtracting
a power of two so that the FPU rounds; stochastic rounding by comparing a uniform draw with the
fractional position between the two neighbouring grid values.
"""

from __future__ import annotations

import numpy as np
import torch

from numfmt.formats import FloatFormat
from numfmt._validate import as_integer_array, check_bool
from numfmt.torch._core import (F64, as_real_tensor, check_device, check_tensor, default_device,
                                floor_log2, pow2)

__all__ = ["CHUNK", "NATIVE_DTYPES", "round", "encode", "decode", "to_native"]

CHUNK = 1 << 17  # elements per chunk of round on large tensors

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
            # The float32 arithmetic of numfmt's FloatFormat._nearest_float32: no float64 copy.
            t = _float32_input(x, device)
            step = lambda c: _nearest_float32(c, fmt, saturate).to(F64)  # noqa: E731
        else:
            t = as_real_tensor(x, device=device)
            step = lambda c: _round_flat(c, fmt, saturate)  # noqa: E731
        shape, flat = t.shape, t.reshape(-1)
        n = flat.numel()
        if n <= CHUNK or flat.device.type != "cpu":
            return step(flat).reshape(shape)
        # On the CPU, cache-sized chunks: each fresh full-size temporary costs page faults.
        out = torch.empty(n, dtype=F64, device=flat.device)
        for i in range(0, n, CHUNK):
            out[i:i + CHUNK] = step(flat[i:i + CHUNK])
        return out.reshape(shape)
    x = as_real_tensor(x, device=device)
    shape = x.shape
    x = x.reshape(-1)
    a = x.abs()
    if mode == "nearest":
        r = _nearest_magnitude(a, fmt)
    else:
        r = _stochastic_magnitude(a, fmt, _draws(u, a, generator))
    if not fmt.subnormals:  # E8M0: no zero, nothing below 2**emin
        r = torch.maximum(r, r.new_tensor(fmt.min_normal))
    overflow = r > fmt.max_value
    if saturate or fmt.specials == "none":
        r = torch.minimum(r, r.new_tensor(fmt.max_value))
    else:
        r = torch.where(overflow, r.new_tensor(np.inf if fmt.has_inf else np.nan), r)
    if fmt.signed:
        r = torch.copysign(r, x)
        if fmt.specials == "fnuz":
            r = r + 0.0  # no -0 in FNUZ formats
    else:
        r = torch.where((x <= 0) | torch.isnan(x), r.new_tensor(np.nan), r)
    return r.reshape(shape)


def _round_flat(x: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Round-to-nearest of 1-D float64 ``x``: the steps of :func:`round`."""
    a = x.abs()
    r = _nearest_magnitude(a, fmt)
    if not fmt.subnormals:
        r = torch.maximum(r, r.new_tensor(fmt.min_normal))
    if saturate or fmt.specials == "none":
        r = torch.minimum(r, r.new_tensor(fmt.max_value))
    else:
        r = torch.where(r > fmt.max_value, r.new_tensor(np.inf if fmt.has_inf else np.nan), r)
    if fmt.signed:
        r = torch.copysign(r, x)
        return r + 0.0 if fmt.specials == "fnuz" else r  # no -0 in FNUZ formats
    return torch.where((x <= 0) | torch.isnan(x), r.new_tensor(np.nan), r)


_I32 = torch.int32
_SIGN32 = -(1 << 31)  # 0x8000_0000 as int32
_QNAN32 = 0x7FC0_0000  # widens to float64's canonical NaN, as numpy's round() returns


def _nearest_float32(x: torch.Tensor, fmt: FloatFormat, saturate: bool) -> torch.Tensor:
    """Round 1-D float32 ``x``; float64 result bit for bit that of the float64 arithmetic.

    The twin of ``FloatFormat._nearest_float32`` (see there why it is exact): "bits" rounds
    the 32-bit pattern (BF16), "fpu" adds and subtracts 2^(binade + 23 - man_bits).
    """
    t = x.view(_I32)
    nan = torch.isnan(x)
    shift = 23 - fmt.man_bits
    if fmt._float32_path == "bits":
        tz = torch.where(nan, 0, t)  # int32 must not overflow: a NaN's payload could carry
        r = ((tz >> shift) & 1) + tz + ((1 << (shift - 1)) - 1)
        r = r & ~((1 << shift) - 1)
        f = r.view(torch.float32)
    else:
        c = torch.clamp(t & 0x7F80_0000, (fmt.emin + 127) << 23, (fmt.emax + 128) << 23)
        cf = (c + (shift << 23)).view(torch.float32)
        f = (x.abs() + cf) - cf
    top = float(np.float32(fmt.max_value))
    if saturate or fmt.specials == "none":
        f = torch.clamp(f, -top, top)
    elif not (fmt.has_inf and fmt.emax == 127):
        special = torch.copysign(f.new_tensor(np.inf if fmt.has_inf else np.nan), f)
        f = torch.where(f.abs() > top, special, f)
    r = f.view(_I32)
    if fmt._float32_path == "fpu":
        r = r | (t & _SIGN32)
    r = torch.where(nan, (t & _SIGN32) | _QNAN32, r)
    return r.view(torch.float32)


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
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and fmt._float32_path:
        t = _float32_input(x, device)
        flat = t.reshape(-1)
        step = lambda c: _codes_of_float32(_nearest_float32(c, fmt, saturate), fmt)  # noqa
        n = flat.numel()
        if n <= CHUNK or flat.device.type != "cpu":
            return step(flat).reshape(t.shape)
        out = torch.empty(n, dtype=_code_dtype(fmt), device=flat.device)
        for i in range(0, n, CHUNK):
            out[i:i + CHUNK] = step(flat[i:i + CHUNK])
        return out.reshape(t.shape)
    r = round(x, fmt, saturate=saturate, device=device)
    flat = r.reshape(-1)
    n = flat.numel()
    if n <= CHUNK or flat.device.type != "cpu":
        return _codes_of(flat, fmt).reshape(r.shape)
    out = torch.empty(n, dtype=_code_dtype(fmt), device=flat.device)
    for i in range(0, n, CHUNK):
        out[i:i + CHUNK] = _codes_of(flat[i:i + CHUNK], fmt)
    return out.reshape(r.shape)


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

