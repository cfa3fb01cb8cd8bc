"""Input checks shared by the PTQ algorithms (private)."""

from __future__ import annotations

import numpy as np

from numfmt._validate import as_calibration_array, check_real_scalar


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


def check_fraction(value, name: str, lo: float = 0.0, hi: float = 1.0,
                   lo_open: bool = False) -> float:
    """``value`` as a float in [lo, hi] (or (lo, hi] with ``lo_open``); NaN refused."""
    v = check_real_scalar(value, name)
    ok = (lo < v if lo_open else lo <= v) and v <= hi
    if not ok:
        left = "(" if lo_open else "["
        raise ValueError(f"{name} must be in {left}{lo}, {hi}], got {value!r}")
    return v


_TINY = float(np.finfo(np.float64).tiny)


def damping(diag: np.ndarray, damp: float) -> float:
    """GPTQ's dampening ``damp * mean(diag(H))``, finite, and with every ``H_ii`` plus it
    finite; ValueError naming ``hessian`` or ``damp`` when float64 cannot hold them.

    The mean is taken as ``np.mean`` does; only when its sum overflows is it taken on the
    diagonal scaled by 2**-64 (exact) and scaled back.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        mean = np.mean(diag)
        if not np.isfinite(mean):
            mean = np.mean(diag * 2.0**-64) * 2.0**64
        if not np.isfinite(mean):
            raise ValueError(f"mean(diag(hessian)) is beyond float64's range (max H_ii = "
                             f"{diag.max():.3g}): scale the calibration inputs down")
        d = damp * mean
        if not (np.isfinite(d) and np.isfinite(diag + d).all()):
            raise ValueError(f"damp * mean(diag(hessian)) = {damp:.3g} * {mean:.3g} added to "
                             "the diagonal is beyond float64's range: damp is a fraction of "
                             "the mean diagonal (the reference uses 0.01)")
    return float(d)


def check_weight_scales(w: np.ndarray, qmax: int, symmetric: bool = True) -> None:
    """Refuse a (out, in) weight with a non-zero row whose quantization scale must fall below
    float64's smallest normal number (about max|row| / qmax); ValueError naming ``weight``."""
    amax = np.abs(w).max(axis=1)
    largest = amax / qmax * (1.0 if symmetric else 2.0)    # the largest scale the row can get
    bad = (amax > 0) & (largest < _TINY)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ValueError(f"weight row {r} has max |w| = {amax[r]:.3g}: its scale would be below "
                         f"float64's smallest normal number {_TINY:.3g}; multiply weight by a "
                         "power of two first")
