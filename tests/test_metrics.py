"""rel_error and sqnr_db against hand derivations."""

import math

import numpy as np
import pytest

from numfmt import rel_error, sqnr_db


def test_sqnr_hand_case():
    # signal 1 + 4 + 9 + 16 = 30, noise 0.5^2 = 0.25: 10 log10(120) = 20.79 dB.
    assert sqnr_db([1, -2, 3, -3.5], [1, -2, 3, -4]) == pytest.approx(10 * math.log10(120))
    assert round(sqnr_db([1, -2, 3, -3.5], [1, -2, 3, -4]), 2) == 20.79


def test_rel_error_hand_case():
    assert rel_error([1, 2, 2], [1, 2, 3]) == pytest.approx(1 / math.sqrt(14))


def test_exact_reconstruction():
    assert rel_error([1.0, 2.0], [1.0, 2.0]) == 0.0
    assert sqnr_db([1.0, 2.0], [1.0, 2.0]) == math.inf


def test_multidimensional_inputs_use_the_frobenius_norm():
    x = np.array([[3.0, 0.0], [0.0, 4.0]])
    assert rel_error(x + np.array([[0.5, 0.0], [0.0, 0.0]]), x) == pytest.approx(0.1)


@pytest.mark.parametrize("fn", [rel_error, sqnr_db])
@pytest.mark.parametrize("q,x,exc,msg", [
    ([1.0, 2.0], [1.0, 2.0, 3.0], ValueError, "same shape"),
    ([0.0, 0.0], [0.0, 0.0], ValueError, "all zero"),
    ([], [], ValueError, "empty"),
    ([np.nan, 1.0], [1.0, 1.0], ValueError, "finite"),
    ([1.0, 1.0], [np.inf, 1.0], ValueError, "finite"),
    (["a"], ["b"], TypeError, "real numbers"),
])
def test_bad_input(fn, q, x, exc, msg):
    with pytest.raises(exc, match=msg):
        fn(q, x)


def test_huge_values_do_not_overflow_the_sums():
    # (1e200)^2 overflows float64; the relative error of [1e200, 1.1e200] against [1e200, 1e200]
    # is 0.1e200 / (sqrt(2) * 1e200) = 0.0707..., whatever the magnitude.
    assert rel_error([1e200, 1.1e200], [1e200, 1e200]) == pytest.approx(0.1 / math.sqrt(2))


# Relative error and SQNR are scale-invariant: multiplying q and x by the same c leaves them
# unchanged. Hand case: q = [2, 1], x = [1, 1] gives noise 1, signal 2, so rel_error = 1/sqrt(2)
# and SQNR = 10 log10(2) = 3.0103 dB at every magnitude, including where the squares
# underflow (c = 1e-200, 1e-300, float64 subnormals) or overflow (c = 1e300).
@pytest.mark.parametrize("c", [1e-320, 1e-300, 1e-200, 1e-160, 1.0, 1e160, 1e300])
def test_scale_invariance_at_extreme_magnitudes(c):
    q, x = np.array([2.0, 1.0]) * c, np.array([1.0, 1.0]) * c
    assert rel_error(q, x) == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    assert sqnr_db(q, x) == pytest.approx(10 * math.log10(2), rel=1e-12)


def test_noise_far_below_the_signal_is_not_reported_as_exact():
    # q = x + 1e-170 with x = 1: (1e-170)^2 underflows float64, but the noise is not zero:
    # rel_error = 1e-170 / 1 and SQNR = -20 log10(1e-170) = 3400 dB.
    x = np.array([1.0, 0.0])
    q = np.array([1.0, 1e-170])
    assert rel_error(q, x) == pytest.approx(1e-170, rel=1e-12, abs=0)
    assert sqnr_db(q, x) == pytest.approx(3400.0, rel=1e-12)


def test_opposite_huge_values_whose_difference_overflows():
    # q - x = 2 * 1.5e308 overflows float64; the error is still |q - x| / |x| = 2.
    assert rel_error([1.5e308], [-1.5e308]) == pytest.approx(2.0, rel=1e-15)
    assert sqnr_db([1.5e308], [-1.5e308]) == pytest.approx(-20 * math.log10(2), rel=1e-12)


def test_equal_ratio_gives_plus_zero_db():
    # sum x^2 / sum (q - x)^2 = 1 exactly: 0 dB, printed as "0.0" and not "-0.0".
    assert math.copysign(1.0, sqnr_db([2e200], [1e200])) == 1.0
    assert math.copysign(1.0, sqnr_db([2.0], [1.0])) == 1.0
