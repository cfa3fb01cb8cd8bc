"""Input checks shared by every public entry point of numfmt.

Each check raises with a message that names the argument, so a student who passes the wrong
thing learns what was expected instead of receiving NaN or a silently wrong answer.
"""

from __future__ import annotations

import numpy as np


def as_real_array(x, name: str = "x") -> np.ndarray:
    """Return ``x`` as a float64 ndarray, refusing what is not a real number.

    Raises
    ------
    TypeError
        If ``x`` has a boolean, complex, string, object or other non-real dtype.
    """
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {arr.dtype}")
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
            f"{name} contains a non-finite value ({arr.ravel()[bad]!r} at flat index {bad}); "
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


def check_real_scalar(value, name: str) -> float:
    """Return ``value`` as a float, refusing bools, strings, arrays and other non-numbers.

    Raises
    ------
    TypeError
        If ``value`` is not a Python or numpy int or float scalar.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r}")
    return float(value)


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
    """
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)
