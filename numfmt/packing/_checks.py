"""Small input checks shared by the packing modules (private)."""

import numpy as np

from numfmt._validate import as_integer_array, as_real_array


def as_int_array(codes, name="codes"):
    """Return ``codes`` as an int64 array; raise TypeError for non-integer input."""
    return as_integer_array(codes, name)


def check_range(arr, lo, hi, name="codes"):
    """Raise ValueError unless every element of ``arr`` lies in [lo, hi]."""
    if arr.size and (arr.min() < lo or arr.max() > hi):
        bad = arr[(arr < lo) | (arr > hi)][0]
        raise ValueError(f"{name} must lie in [{lo}, {hi}]; found {int(bad)}")


def as_float_array(x, name="x"):
    """Return ``x`` as float64; raise TypeError for non-real input, ValueError for NaN/inf."""
    arr = as_real_array(x, name)
    if not np.all(np.isfinite(arr)):
        where = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise ValueError(f"{name} contains a non-finite value at index {where}")
    return arr


def check_ndim(arr, ndim, name):
    """Raise ValueError unless ``arr.ndim == ndim``."""
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")


def check_int32(arr, name):
    """Raise TypeError unless ``arr`` is an int32 (or uint32) array; return it as uint32."""
    arr = np.asarray(arr)
    if arr.dtype not in (np.int32, np.uint32):
        raise TypeError(f"{name} must be an int32 array, got dtype {arr.dtype}")
    return arr.view(np.uint32)
