"""Tests for numfmt.rounding: directed/tie rules against brute force over the value grid, and
summation against numpy's own float16/float32 arithmetic (an independent IEEE implementation)."""

import ml_dtypes
import numpy as np
import pytest

from numfmt import BF16, E8M0, FORMATS, FP4_E2M1, FP8_E4M3, FP16
from numfmt import FP32
from numfmt.rounding import cumsum_in_format, round_to_format, sum_in_format

SIGNED = [f for f in FORMATS.values() if f.signed]


def brute(x, grid, mode):
    """Round one number by searching the grid (the definition, not the bit trick)."""
    a, pos = abs(x), grid[grid >= 0]
    below = pos[pos <= a].max()
    above = pos[pos >= a].min() if a <= pos.max() else pos.max()  # saturate
    if mode == "toward_zero":
        r = below
    elif a - below != above - a:
        r = below if a - below < above - a else above
    else:
        r = above  # half_away: a tie goes to the larger magnitude
    return np.copysign(r, x)


@pytest.mark.parametrize("fmt", [f for f in SIGNED if f.bits <= 8], ids=lambda f: f.name)
@pytest.mark.parametrize("mode", ["half_away", "toward_zero"])
def test_directed_modes_match_brute_force(fmt, mode):
    grid = fmt.values()
    mids = (grid[1:] + grid[:-1]) / 2  # exact ties, the cases where the rules differ
    rng = np.random.default_rng(0)
    x = np.concatenate([mids, rng.uniform(-1.3, 1.3, 400) * fmt.max_value, grid])
    got = round_to_format(x, fmt, mode)
    want = np.array([brute(v, grid, mode) for v in x])
    assert np.array_equal(got, want)


def test_hand_examples_e2m1():
    # E2M1 grid 0, 0.5, 1, 1.5, 2, 3, 4, 6. 2.5 is a tie between 2 (mantissa 0) and 3.
    x = [2.5, -2.5, 0.25, 5.0, 5.9, 7.0]
    assert round_to_format(x, FP4_E2M1, "nearest_even").tolist() == [2.0, -2.0, 0.0, 4.0, 6.0, 6.0]
    assert round_to_format(x, FP4_E2M1, "half_away").tolist() == [3.0, -3.0, 0.5, 6.0, 6.0, 6.0]
    assert round_to_format(x, FP4_E2M1, "toward_zero").tolist() == [2.0, -2.0, 0.0, 4.0, 4.0, 6.0]


def test_stochastic_is_unbiased_between_neighbours():
    # 1 + 0.3 ulp in BF16 (ulp 2^-7): rounds up with probability 0.3; 4 sigma band on the mean.
    x = np.full(200_000, 1.0 + 0.3 * 2**-7)
    r = round_to_format(x, BF16, "stochastic", rng=0)
    assert set(np.unique(r)) == {1.0, 1.0 + 2**-7}
    p = np.mean(r > 1.0)
    assert abs(p - 0.3) < 4 * np.sqrt(0.3 * 0.7 / x.size)


def test_nan_and_sign_pass_through():
    r = round_to_format([np.nan, -0.0, -1e9], FP8_E4M3, "toward_zero")
    assert np.isnan(r[0]) and np.signbit(r[1]) and r[2] == -448.0


def test_round_to_format_bad_input():
    with pytest.raises(ValueError, match="mode"):
        round_to_format(1.0, FP16, "up")
    with pytest.raises(ValueError, match="no sign"):
        round_to_format(1.0, E8M0, "toward_zero")
    with pytest.raises(TypeError, match="FloatFormat"):
        round_to_format(1.0, np.float16)
    with pytest.raises(TypeError, match="real"):
        round_to_format([1j], FP16)


def kahan_numpy(x, dtype):
    s = dtype(0)
    c = dtype(0)
    for v in x.astype(dtype):
        y = dtype(v - c)
        t = dtype(s + y)
        c = dtype(dtype(t - s) - y)
        s = t
    return float(s)


@pytest.mark.parametrize("dtype, fmt", [(np.float16, FP16), (np.float32, FP32),
                                        (ml_dtypes.bfloat16, BF16)])
def test_sequential_and_kahan_match_numpy_dtype_arithmetic(dtype, fmt):
    x = np.random.default_rng(4).uniform(0, 1, (600, 3)).astype(dtype).astype(np.float64)
    seq = sum_in_format(x, fmt, "sequential")
    for j in range(3):
        s = dtype(0)
        for v in x[:, j].astype(dtype):
            s = dtype(s + v)
        assert seq[j] == float(s)
        assert sum_in_format(x[:, j], fmt, "sequential") == float(s)  # the 1-D fast path
        assert sum_in_format(x[:, j], fmt, "kahan") == kahan_numpy(x[:, j], dtype)


def test_pairwise_matches_a_hand_written_tree():
    x = np.random.default_rng(5).uniform(0, 1, 13).astype(np.float16)
    level = list(x)
    while len(level) > 1:
        if len(level) % 2:
            level.append(np.float16(0))
        level = [np.float16(level[i] + level[i + 1]) for i in range(0, len(level), 2)]
    assert sum_in_format(x.astype(np.float64), FP16, "pairwise") == float(level[0])


def test_swamping_fp16_stalls_at_2048():
    # Adding 1 to 2048 in FP16 is a tie between 2048 and 2050; ties go to even (2048).
    ones = np.ones(4096)
    assert sum_in_format(ones, FP16, "sequential") == 2048.0
    assert sum_in_format(ones, FP16, "pairwise") == 4096.0
    assert sum_in_format(ones, FP16, "kahan") == 4096.0


@pytest.mark.parametrize("shape", [(5,), (5, 2)])
def test_overflow_follows_the_format(shape):
    assert np.all(sum_in_format(np.full(shape, 16129.0), FP16) == np.inf)
    assert np.all(np.isnan(sum_in_format(np.full(shape, 400.0), FP8_E4M3)))
    assert np.all(sum_in_format(np.full(shape, 4.0), FP4_E2M1) == 6.0)  # no Inf, no NaN
    assert np.all(np.isnan(sum_in_format(np.full(shape, 60000.0), FP16, "kahan")))


@pytest.mark.parametrize("fmt", [f for f in SIGNED], ids=lambda f: f.name)
def test_scalar_fast_path_matches_format_round(fmt):
    from numfmt.rounding import _scalar_nearest
    rng = np.random.default_rng(6)
    x = np.concatenate([rng.uniform(-1.5, 1.5, 3000) * fmt.max_value,
                        rng.standard_normal(3000) * fmt.min_normal, fmt.values(),
                        (fmt.values()[1:] + fmt.values()[:-1]) / 2, [np.nan, np.inf, -0.0]])
    fl = _scalar_nearest(fmt)
    got = np.array([fl(v) for v in x.tolist()])
    want = fmt.round(x, saturate=False)
    assert np.array_equal(got, want, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(want))


def test_sum_in_format_bad_input():
    with pytest.raises(ValueError, match="method"):
        sum_in_format([1.0], FP16, "tree")
    with pytest.raises(ValueError, match="at least one term"):
        sum_in_format([], FP16)
    with pytest.raises(ValueError, match="at least one term"):
        sum_in_format(1.0, FP16)
    with pytest.raises(ValueError, match="wider than FP32"):
        from numfmt import FloatFormat
        sum_in_format([1.0], FloatFormat("E5M26", 5, 26, 15, "ieee"))  # 32 bits, 26 > 23


def test_cumsum_in_format_matches_numpy_float16():
    x = np.random.default_rng(7).uniform(0, 1, 3000).astype(np.float16)
    want, s = [], np.float16(0)
    for v in x:
        s = np.float16(s + v)
        want.append(float(s))
    got = cumsum_in_format(x.astype(np.float64), FP16)
    assert got.tolist() == want
    assert got[-1] == sum_in_format(x.astype(np.float64), FP16)


def test_cumsum_in_format_bad_input():
    with pytest.raises(ValueError, match="1-D"):
        cumsum_in_format(np.ones((2, 2)), FP16)
    with pytest.raises(ValueError, match="1-D"):
        cumsum_in_format([], FP16)
    with pytest.raises(TypeError, match="FloatFormat"):
        cumsum_in_format([1.0], "FP16")


@pytest.mark.parametrize("mode", ["nearest_even", "half_away", "toward_zero", "stochastic"])
@pytest.mark.parametrize("fmt", [f for f in SIGNED], ids=lambda f: f.name)
def test_float64_extremes_saturate_without_warnings(fmt, mode):
    # float64's max rounds up past 2^1024 in half_away (the carry overflowed float64 with a
    # warning); every mode must saturate it to +-max_value quietly, and keep subnormals' sign.
    import warnings
    big = np.finfo(np.float64).max
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = round_to_format([big, -big, 5e-324, -5e-324], fmt, mode, rng=0)
    assert r[:2].tolist() == [fmt.max_value, -fmt.max_value]
    # FNUZ formats have no -0 (ml_dtypes' float8_e4m3fnuz gives +0 for -5e-324 too)
    tiny_sign = 0 if fmt.specials == "fnuz" else 1
    assert np.all(np.abs(r[2:]) <= fmt.min_subnormal)
    assert np.signbit(r).tolist() == [0, 1, 0, tiny_sign]


@pytest.mark.parametrize("method", ["sequential", "pairwise", "kahan"])
def test_opposite_infinities_give_nan_without_warnings_in_both_paths(method):
    # IEEE: inf + (-inf) is NaN. FP16 partial sums overflow to +inf in column 0 and -inf in
    # column 1; the 2-D path (and the 1-D one, column by column) gives NaN quietly.
    import warnings
    x = np.array([[6e4, -6e4], [6e4, -6e4], [-np.inf, np.inf]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = sum_in_format(x, FP16, method)
        cols = [sum_in_format(x[:, j], FP16, method) for j in range(2)]
    assert np.all(np.isnan(r)) and np.all(np.isnan(cols))
