"""The readable rounding (numfmt.round_reference) equals FloatFormat.round in every bit.

Inputs: every code of every format (and FP32's codes around each format's range), the
midpoints between neighbouring values (the ties), their float64 neighbours, values beyond
max_value, +-Inf, NaN, signed zeros, and random values over each format's whole range, as
float64 and float32, saturating and not.
"""

import numpy as np
import pytest

from numfmt import FORMATS, FP32
from numfmt.round_reference import round_reference

FMTS = list(FORMATS.values()) + [FP32]


def bits(a):
    return np.ascontiguousarray(a, np.float64).view(np.uint64)


def probe_values(fmt, seed=0):
    """Grid values, the midpoints between them, their neighbours, specials, random values."""
    if fmt.bits <= 16:
        v = fmt.decode(np.arange(2 ** fmt.bits, dtype=np.uint32).astype(fmt.code_dtype))
    else:  # FP32: a sample of its codes
        rng = np.random.default_rng(seed)
        v = rng.integers(0, 2 ** 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
        with np.errstate(invalid="ignore"):                 # signalling NaNs widen
            v = v.view(np.float32).astype(np.float64)
    grid = np.unique(v[np.isfinite(v)])
    mid = (grid[:-1] + grid[1:]) / 2
    top = fmt.max_value
    rng = np.random.default_rng(seed + 1)
    lo, hi = max(fmt.emin - fmt.man_bits - 2, -1074), min(fmt.emax + 2, 1023)
    rand = np.ldexp(rng.uniform(1, 2, 20000), rng.integers(lo, hi, 20000))
    out = np.concatenate([
        v, grid, mid, np.nextafter(mid, np.inf), np.nextafter(mid, -np.inf),
        [top * 1.01, top * 2, np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-320, 5e-324],
        rand, -rand])
    return np.concatenate([out, -out])


@pytest.mark.parametrize("fmt", FMTS, ids=lambda f: f.name)
@pytest.mark.parametrize("saturate", [True, False])
def test_reference_equals_fast_round_bit_for_bit(fmt, saturate):
    x = probe_values(fmt)
    np.testing.assert_array_equal(bits(round_reference(fmt, x, saturate)),
                                  bits(fmt.round(x, saturate)))
    with np.errstate(over="ignore"):                        # beyond float32: +-Inf
        x32 = x.astype(np.float32)                          # the float32 paths
    np.testing.assert_array_equal(bits(round_reference(fmt, x32, saturate)),
                                  bits(fmt.round(x32, saturate)))


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=lambda f: f.name)
def test_every_code_rounds_to_itself(fmt):
    codes = np.arange(2 ** fmt.bits, dtype=np.uint32).astype(fmt.code_dtype)
    v = fmt.decode(codes)
    ok = np.isfinite(v)
    np.testing.assert_array_equal(bits(round_reference(fmt, v[ok], False)), bits(v[ok]))


def test_bad_input():
    with pytest.raises(TypeError, match="fmt"):
        round_reference("E4M3", [1.0])
    with pytest.raises(TypeError, match="saturate"):
        round_reference(FP32, [1.0], saturate=1)
    with pytest.raises(TypeError):
        round_reference(FP32, ["a"])
