"""Tests for numfmt.scaling: hand derivations and a loop written out independently."""

import numpy as np
import pytest

from numfmt import E8M0, FP4_E2M1, FP8_E4M3, FP8_E5M2
from numfmt.scaling import delayed_scales, quantize_with_scale, scale_from_amax


def test_scale_from_amax_hand_values():
    assert scale_from_amax(448.0, FP8_E4M3) == 1.0
    assert scale_from_amax(3.0, FP4_E2M1) == 0.5
    assert scale_from_amax(57344.0, FP8_E5M2, margin=1) == 2.0
    assert scale_from_amax([0.0], FP8_E4M3).tolist() == [1.0]


def test_quantize_with_scale_maps_amax_to_max_and_counts():
    x = np.array([0.0, 1e-9, 1.0, -6.0, 12.0, 6.9])
    r = quantize_with_scale(x, FP4_E2M1, 1.0)
    assert r.values.tolist() == [0.0, 0.0, 1.0, -6.0, 6.0, 6.0]
    # E2M1's next step above 6 would be 8: only beyond the midpoint 7 is a value clipped
    assert r.clipped == 1 / 6                  # 12 > 7; 6.9 rounds to 6 anyway
    assert r.flushed == 1 / 5                  # 1e-9 of the five non-zero values
    r = quantize_with_scale(x, FP4_E2M1, 2.0)  # 12 / 2 = 6 fits exactly
    assert r.values[-2] == 12.0 and r.clipped == 0.0


def test_amax_mapped_onto_max_is_not_counted_as_clipped():
    x = np.random.default_rng(0).standard_normal(4096) * 3.7
    s = float(scale_from_amax(np.abs(x).max(), FP8_E4M3))
    assert quantize_with_scale(x, FP8_E4M3, s).clipped == 0.0
    assert quantize_with_scale(x, FP8_E4M3, s / 2).clipped > 0.0


def test_delayed_scales_against_a_written_out_loop():
    amax = np.array([1.0, 2.0, 0.5, 8.0, 1.0, 1.0, 1.0])
    got = delayed_scales(amax, FP8_E4M3, history=3)
    want = []
    for t in range(len(amax)):
        window = amax[max(0, t - 3):t] if t else amax[:1]
        want.append(max(window) / 448.0)
    assert np.allclose(got, want, rtol=0, atol=0)
    # the spike at step 3 is seen from step 4 on, and forgotten after 3 steps
    assert got[3] == 2 / 448 and got[4] == got[6] == 8 / 448


def test_bad_input():
    with pytest.raises(TypeError, match="signed FloatFormat"):
        scale_from_amax(1.0, E8M0)
    with pytest.raises(ValueError, match="non-negative"):
        scale_from_amax(-1.0, FP8_E4M3)
    with pytest.raises(TypeError, match="margin"):
        scale_from_amax(1.0, FP8_E4M3, margin=0.5)
    with pytest.raises(ValueError, match="scale"):
        quantize_with_scale([1.0], FP8_E4M3, 0.0)
    with pytest.raises(ValueError, match="non-finite"):
        quantize_with_scale([np.inf], FP8_E4M3, 1.0)
    with pytest.raises(ValueError, match="history"):
        delayed_scales([1.0], FP8_E4M3, history=0)
    with pytest.raises(ValueError, match="1-D"):
        delayed_scales(np.ones((2, 2)), FP8_E4M3)


@pytest.mark.parametrize("scale,exc,msg", [
    ("2", TypeError, "scale must be a real number"),
    (True, TypeError, "scale must be a real number"),
    (np.array([2.0]), TypeError, "scale must be a real number"),
    (np.nan, ValueError, "positive and finite"),
])
def test_quantize_with_scale_refuses_a_scale_that_is_not_one_number(scale, exc, msg):
    # Before: "2" was parsed as 2.0 and True taken as 1.0.
    with pytest.raises(exc, match=msg):
        quantize_with_scale([1.0], FP8_E4M3, scale)


def test_quantize_with_scale_overflowing_quotient_saturates_without_warning():
    # 1e300 / 1e-300 overflows float64 to inf, which saturates to 448: values +-448e-300,
    # both elements clipped.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = quantize_with_scale([1e300, -1e300], FP8_E4M3, 1e-300)
    assert r.values.tolist() == [448 * 1e-300, -448 * 1e-300] and r.clipped == 1.0


@pytest.mark.parametrize("amax,margin", [(1.0, -2000), (1.0, 2000), (1e308, 10)])
def test_scale_from_amax_refuses_a_scale_beyond_float64(amax, margin):
    # 2^-2000 underflows to 0 (a zero scale), 2^2000 and 1e308 * 1024 / 448 overflow (Inf):
    # neither is a scale, and Python's float power would raise OverflowError.
    with pytest.raises(ValueError, match="float64"):
        scale_from_amax(amax, FP8_E4M3, margin)


def test_scale_from_amax_accepts_numpy_integer_margin():
    # 448 * 2^3 / 448 = 8.
    assert scale_from_amax(448.0, FP8_E4M3, np.int8(3)).item() == 8.0


@pytest.mark.parametrize("amaxes", [[1.0, 2.0, np.nan], [1.0, 2.0, -1.0], [1.0, np.inf]])
def test_delayed_scales_checks_every_amax(amaxes):
    # The last step's amax is never used for a scale, but a NaN or negative one is still bad
    # input (it was silently ignored).
    with pytest.raises(ValueError, match="finite and non-negative"):
        delayed_scales(amaxes, FP8_E4M3)
