"""Input checks shared by the PTQ algorithms (private)."""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_calibration_array, check_int, check_real_scalar


def as_matrix(x, name: str) -> np.ndarray:
    """``x`` as a finite, non-empty 2-D float64 array; ValueError/TypeError naming ``name``."""
    arr = as_calibration_array(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D, got shape {np.shape(x)}")
    return arr


def as_inputs(x, k: int, name: str = "x") -> np.ndarray:
    """Calibration inputs of any leading shape as (n, k) float64, finite and non-empty."""
    arr = as_calibration_array(x, name)
    if arr.ndim == 0 or arr.shape[-1] != k:
        raise ValueError(f"{name} must have {k} features on its last axis, got shape "
                         f"{np.shape(x)}")
    return arr.reshape(-1, k)


def check_positive_int(value, name: str) -> int:
    """``value`` as a positive int (TypeError for non-integers, ValueError for <= 0)."""
    value = check_int(value, name)
    if value <= 0:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


def check_fraction(value, name: str, lo: float = 0.0, hi: float = 1.0,
                   lo_open: bool = False) -> float:
    """``value`` as a float in [lo, hi] (or (lo, hi] with ``lo_open``); NaN refused."""
    v = check_real_scalar(value, name)
    ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        left = "(" if lo_open else "["
        raise ValueError(f"{name} must be in {left}{lo}, {hi}], got {value!r}")
    return v


def check_bool(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)
