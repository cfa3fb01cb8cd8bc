"""Hypothesis strategies the labs' checks share: small float arrays whose shrinking ends at
readable inputs (few elements, short decimals)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

__all__ = ["floats", "matrices", "vectors"]


def floats(lo: float = -100.0, hi: float = 100.0, width: int = 64):
    """Finite floats in [lo, hi] (shrinking towards 0, integers and halves)."""
    return st.floats(lo, hi, allow_nan=False, allow_infinity=False, width=width)


def vectors(n_min: int = 1, n_max: int = 16, lo: float = -100.0, hi: float = 100.0):
    """1-D float64 arrays of n_min..n_max elements in [lo, hi], each 0 or of magnitude above
    1e-6 (no float64 subnormals or scales that underflow)."""
    return hnp.arrays(np.float64, st.integers(n_min, n_max), elements=floats(lo, hi).filter(
        lambda v: v == 0 or abs(v) > 1e-6))


def matrices(rows=(1, 3), cols=st.just(16), lo: float = -100.0, hi: float = 100.0,
             dtype=np.float64):
    """2-D arrays: rows from the range `rows`, columns drawn from the strategy `cols`."""
    shape = st.tuples(st.integers(*rows), cols)
    return hnp.arrays(dtype, shape, elements=floats(lo, hi, 32 if dtype == np.float32 else 64))
