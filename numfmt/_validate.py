"""Input checks shared by every public entry point of numfmt.

Each check raises with a message that names the argument, so a student who passes the wrong
thing learns what was expected instead of receiving NaN or a silently wrong answer.
"""

from __future__ import annotations

import numpy as np


#: float64 holds every integer of magnitude up to 2**53 exactly, and not every one above.
EXACT_INT = 2**53


def check_bool(value, name: str) -> bool:
    """Return ``value`` as a bool, refusing strings, None, ints and anything else.

    One check for every flag of numfmt and numfmt.torch (``symmetric``, ``saturate``,
    ``signed``, ``subnormals``, ``pad``, ...): the string ``"False"`` is truthy and ``None``
    falsy, so accepting either would silently pick the wrong meaning.

    Raises
    ------
    TypeError
        If ``value`` is not a Python bool or a numpy bool.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def _refuse_array(x, arr: np.ndarray, name: str) -> None:
    """Raise the right error for an array that is not real-valued (never returns)."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(f"{name} is a masked array: numfmt would drop the mask; pass "
                        f"{name}.filled(...) or {name}.compressed() to say what is meant")
    if arr.dtype == object:
        flat = arr.ravel()
        if flat.size and all(type(v) is int for v in flat):  # Python ints beyond int64
            big = max(flat, key=abs)
            raise ValueError(f"{name} holds the integer {big}, beyond int64 and float64's exact "
                             f"integers (|n| <= 2**53); pass a float to have it rounded first")
        kinds = sorted({type(v).__name__ for v in flat[:1000]})
        if "bool" in kinds and len(kinds) > 1:
            raise TypeError(f"{name} mixes booleans with numbers ({', '.join(kinds)})")
    raise TypeError(f"{name} must hold real numbers (int or float), got dtype {arr.dtype}")


def _check_mixed_bools(x, name: str) -> None:
    """Refuse a list such as ``[True, 2.5]``, which numpy silently turns into ``[1.0, 2.5]``."""
    if isinstance(x, (list, tuple)):
        stack = [x]
        while stack:
            for v in stack.pop():
                if isinstance(v, (bool, np.bool_)):
                    raise TypeError(f"{name} mixes booleans with numbers: {x!r} "
                                    "(True would be read as 1.0)")
                if isinstance(v, (list, tuple)):
                    stack.append(v)


def _check_exact_float64(arr: np.ndarray, name: str) -> None:
    """Refuse 64-bit integers beyond 2**53 and long doubles that float64 does not hold exactly.

    Converting them to float64 rounds once, and the format rounds again: the result can miss
    the nearest value (double rounding). Only those dtypes need the pass; others are exact.
    """
    if arr.size == 0:
        return
    if arr.dtype.kind in "iu" and arr.dtype.itemsize == 8:
        mx = arr.max()
        mn = arr.min()
        if mx > EXACT_INT or (arr.dtype.kind == "i" and mn < -EXACT_INT):
            bad = mx if mx > EXACT_INT else mn
            raise ValueError(f"{name} holds the integer {int(bad)}, beyond float64's exact "
                             "integers (|n| <= 2**53): converting it to float64 would round it "
                             "once before the format rounds it again; convert it yourself "
                             f"({name}.astype(np.float64)) if that is what you mean")
    elif arr.dtype.kind == "f" and arr.dtype.itemsize > 8:
        with np.errstate(over="ignore", invalid="ignore"):
            f = arr.astype(np.float64)
            inexact = (f != arr) & ~np.isnan(arr)
        if inexact.any():
            bad = arr.ravel()[np.flatnonzero(inexact.ravel())[0]]
            raise ValueError(f"{name} holds {bad!r} ({arr.dtype}), which float64 cannot hold "
                             "exactly: converting it would round it once before the format "
                             f"rounds it again; convert it yourself ({name}.astype(np.float64)) "
                             "if that is what you mean")


def _tensor_as_numpy(t, name: str) -> np.ndarray:
    """A torch tensor as numpy, exactly: detached, on the CPU, bfloat16/float8 widened to float32.

    numfmt's numpy functions have no gradient, so a grad-requiring tensor is read through
    ``detach()``. numpy has no bfloat16 or float8 dtype; both widen to float32 exactly.
    """
    t = t.detach()
    if t.is_meta:
        raise ValueError(f"{name} is a meta tensor: it has a shape but no values")
    dtype = str(t.dtype)
    if t.is_complex() or dtype == "torch.bool" or "float4" in dtype:
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {t.dtype}")
    if dtype == "torch.bfloat16" or "float8" in dtype:
        t = t.float()
    return t.cpu().numpy()


def _widen_ml_dtypes(arr: np.ndarray) -> np.ndarray:
    """An array of an ml_dtypes type (bfloat16, float8_*, float6_*, float4_*, int4, ...) as
    float32 or int64, exactly: every value of those narrow types is a float32 or an int64
    (NaN stays NaN), as torch's bfloat16 tensors are widened to float32."""
    if arr.dtype.kind == "V" and arr.dtype.type.__module__.split(".")[0] == "ml_dtypes":
        import ml_dtypes
        try:
            ml_dtypes.iinfo(arr.dtype)
        except ValueError:
            return arr.astype(np.float32)
        return arr.astype(np.int64)
    return arr


def as_real_array(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as a float64 ndarray, refusing what is not a real number.

    A torch tensor is read exactly: through ``detach()`` (numfmt's numpy functions have no
    gradient), from any device, bfloat16 and float8 widened to float32. A numpy array of an
    ml_dtypes type (``ml_dtypes.bfloat16``, ``float8_e4m3fn``, ...) is widened the same way.

    Raises
    ------
    TypeError
        If ``x`` has a boolean, complex, string, object or other non-real dtype, is a masked
        array, or is a list mixing booleans with numbers.
    ValueError
        If ``x`` holds an integer beyond 2**53 or a long double that float64 cannot hold
        exactly (converting would round twice), or is a meta tensor (no values).
    """
    if type(x).__module__.split(".")[0] == "torch" and hasattr(x, "detach"):
        x = _tensor_as_numpy(x, name)
    if isinstance(x, np.ma.MaskedArray):
        _refuse_array(x, np.asarray(x), name)
    arr = _widen_ml_dtypes(np.asarray(x))
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        _refuse_array(x, arr, name)
    _check_mixed_bools(x, name)
    if arr.dtype.itemsize > 8 or arr.dtype.kind in "iu":
        _check_exact_float64(arr, name)
    return arr.astype(np.float64, copy=False)


def as_calibration_array(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as float64 for calibrating a scale: non-empty and finite.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued (see :func:`as_real_array`).
    ValueError
        If ``x`` is empty or contains NaN or +-Inf (a scale computed from them is garbage).
    """
    arr = as_real_array(x, name)
    if arr.size == 0:
        raise ValueError(f"{name} is empty: there is nothing to calibrate a scale on")
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if not np.isfinite(arr).all():
        bad = np.flatnonzero(~np.isfinite(arr.ravel()))[0]
        raise ValueError(
            f"{name} contains a non-finite value ({float(arr.ravel()[bad])!r} at flat index "
            f"{bad}); "
            "a scale calibrated on NaN or Inf would be meaningless"
        )
    return arr


def check_block(n: int, block, what: str = "block") -> int:
    """Check that ``block`` is a positive integer dividing the last-axis length ``n``.

    Raises
    ------
    TypeError
        If ``block`` is not an integer.
    ValueError
        If ``block`` is not positive or does not divide ``n``.
    """
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
        raise TypeError(f"{what} size must be an integer, got {block!r}")
    block = int(block)
    if block <= 0:
        raise ValueError(f"{what} size must be positive, got {block}")
    if n % block:
        raise ValueError(
            f"{what} size {block} does not divide the last axis (length {n}); "
            f"pad the tensor or choose a {what} size that divides {n}"
        )
    return block


def check_int(value, name: str) -> int:
    """Return ``value`` as an int, refusing bools, floats and anything else that is not one.

    Raises
    ------
    TypeError
        If ``value`` is not a Python or numpy integer.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def check_positive_int(value, name: str) -> int:
    """Return ``value`` as a positive int.

    Raises
    ------
    TypeError
        If ``value`` is not a Python or numpy integer (bools refused).
    ValueError
        If ``value`` <= 0.
    """
    value = check_int(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_real_scalar(value, name: str) -> float:
    """Return ``value`` as a float, refusing bools, strings, arrays and other non-numbers.

    Raises
    ------
    TypeError
        If ``value`` is not a Python or numpy int or float scalar.
    """
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]  # a 0-d array, as numfmt's own scale functions return
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name} = {value} is beyond float64's range") from None


def check_code_range(qmin, qmax) -> tuple[int, int]:
    """Return ``(qmin, qmax)`` as ints: integers with ``qmin <= qmax`` and ``|q| <= 2**53``.

    Codes are computed in float64, which holds every integer up to 2**53 exactly; beyond
    that, clamping to ``qmax`` (for example 2**63 - 1) and casting to int64 would wrap.

    Raises
    ------
    TypeError
        If ``qmin`` or ``qmax`` is not an integer.
    ValueError
        If ``qmin > qmax`` or either lies beyond +-2**53.
    """
    qmin, qmax = check_int(qmin, "qmin"), check_int(qmax, "qmax")
    for name, q in (("qmin", qmin), ("qmax", qmax)):
        if abs(q) > EXACT_INT:
            raise ValueError(f"{name} = {q} is beyond +-2**53: codes are computed in float64, "
                             "which does not hold such integers exactly")
    if qmin > qmax:
        raise ValueError(f"qmin ({qmin}) must not exceed qmax ({qmax})")
    return qmin, qmax


def check_fits_storage(values: np.ndarray, dtype, name: str, fix: str = "") -> None:
    """Refuse positive ``values`` that a narrower float ``dtype`` cannot store faithfully.

    Scales stored in float16 or float32 overflow to Inf (and dequantize to Inf or NaN) above
    the dtype's max, flush to 0 (every weight of the group decodes to 0) below half its
    smallest subnormal, and between that and its smallest normal number (2**-14 in float16,
    2**-126 in float32) keep fewer significant bits the smaller they are: 1.4 * 2**-24 is
    stored in float16 as 2**-24, 29 % low, and every weight of the group with it. All three
    are refused rather than stored silently; a subnormal value that the dtype holds exactly
    is stored.

    Raises
    ------
    ValueError
        If a finite value exceeds the dtype's max, or a non-zero one is below the dtype's
        smallest normal number and not exactly representable in it.
    """
    info = np.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    normal = float(info.tiny)
    a = np.abs(np.asarray(values, dtype=np.float64)).reshape(-1)
    big = a > float(info.max)
    sub = (a > 0) & (a < normal)
    small = sub.copy()
    small[sub] = a[sub].astype(dtype).astype(np.float64) != a[sub]
    if big.any() or small.any():
        i = np.flatnonzero((big | small).ravel())[0]
        bad = float(np.asarray(values).ravel()[i])
        where = (f"holds magnitudes up to {float(info.max):.6g}" if big.ravel()[i] else
                 f"keeps full precision only from its smallest normal number {normal:.3g} "
                 f"(below that it rounds to a multiple of {tiny:.3g}, and to 0 under "
                 f"{tiny / 2:.3g})")
        raise ValueError(f"{name} {bad:.6g} does not fit {np.dtype(dtype).name}, which "
                         + where + (f"; {fix}" if fix else ""))


def check_clip(clip) -> float:
    """Return ``clip`` as a float in (0, 1].

    Raises
    ------
    TypeError
        If ``clip`` is not a real number (see :func:`check_real_scalar`).
    ValueError
        If ``clip`` is outside (0, 1] (NaN included).
    """
    c = check_real_scalar(clip, "clip")
    if not 0.0 < c <= 1.0:
        raise ValueError(f"clip must be a number in (0, 1], got {clip!r}")
    return c


def as_integer_array(x, name: str) -> np.ndarray:
    """Return ``x`` as an int64 ndarray, refusing floats, bools and other non-integers.

    Raises
    ------
    TypeError
        If ``x`` does not have an integer dtype.
    ValueError
        If ``x`` holds an integer beyond int64 (a uint64 above 2**63 - 1, a Python int),
        which the cast would wrap.
    """
    arr = np.asarray(x)
    if arr.dtype == object:
        flat = arr.ravel()
        if flat.size and all(type(v) is int for v in flat):
            big = max(flat, key=abs)
            raise ValueError(f"{name} holds the integer {big}, beyond int64")
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds the integer {int(arr.max())}, beyond int64")
    return arr.astype(np.int64)
