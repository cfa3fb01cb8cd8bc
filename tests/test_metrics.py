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
