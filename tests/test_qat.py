"""numfmt.qat: fake quantization, STE masks, calibration, rounding, and the QAT optimizer.

Expected values are derived by hand in the tests, or come from ml_dtypes (float overflow).
"""

import ml_dtypes
import numpy as np
import pytest

from numfmt import FP4_E2M1, FP8_E4M3, FP8_E5M2, nvfp4_quantize
from numfmt.qat import (WEIGHT_FORMATS, FakeQuantized, QATAdam, QParams, adam_update,
                        calibrate_absmax, calibrate_minmax, calibrate_percentile,
                        fake_quantize, fake_quantize_block, fake_quantize_float,
                        fake_quantize_weight, qparams_from_range, round_nearest_even,
                        round_stochastic, ste_backward)

GRID = QParams(np.array(1.0), np.array(0), -8, 7)


# ------------------------------------------------------------------ STE on the integer grid
def test_issue_example_forward_and_mask():
    # round(-8.6) = -9 < -8 clamps; round(-8.4) = -8 is inside; round(7.6) = 8 > 7 clamps.
    fq = fake_quantize([-8.6, -8.4, -8.0, 7.0, 7.4, 7.6], GRID)
    assert fq.values.tolist() == [-8, -8, -8, 7, 7, 7]
    assert fq.mask.tolist() == [False, True, True, True, True, False]
    grad = ste_backward(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]), fq)
    assert grad.tolist() == [0.0, 2.0, 3.0, 4.0, 5.0, 0.0]


def test_infinities_clamp_to_the_ends_with_zero_gradient():
    fq = fake_quantize([np.inf, -np.inf], GRID)
    assert fq.values.tolist() == [7.0, -8.0]
    assert fq.mask.tolist() == [False, False]


def test_ties_round_to_even_at_the_boundary():
    # 7.5 -> 8 (even) clamps; -8.5 -> -8 (even) stays inside; 6.5 -> 6.
    fq = fake_quantize([7.5, -8.5, 6.5], GRID)
    assert fq.values.tolist() == [7, -8, 6]
    assert fq.mask.tolist() == [False, True, True]


def test_affine_zero_point_shifts_the_window():
    # scale 0.5, zero point 3, codes [0, 15]: real range [-1.5, 6.0].
    qp = QParams(np.array(0.5), np.array(3), 0, 15)
    fq = fake_quantize([-1.6, -1.7, 0.0, 6.2, 6.3], qp)
    # -1.6/0.5 = -3.2 -> -3 + 3 = 0 in; -1.7/0.5 = -3.4 -> -3 in; 6.2/0.5 = 12.4 -> 12 + 3 = 15 in;
    # 6.3/0.5 = 12.6 -> 13 + 3 = 16 out.
    assert fq.values.tolist() == [-1.5, -1.5, 0.0, 6.0, 6.0]
    assert fq.mask.tolist() == [True, True, True, True, False]


@pytest.mark.parametrize("scale,zp,qmin,qmax", [(1.0, 0, -8, 7), (0.25, 0, -127, 127),
                                               (0.5, 3, 0, 15), (2.0**-3, 100, 0, 255)])
def test_against_torch_fake_quantize_forward_and_gradient(scale, zp, qmin, qmax):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    # Power-of-two scales: x / scale is exact in float32 both ways, so both round the same.
    x = rng.uniform((qmin - zp - 3) * scale, (qmax - zp + 3) * scale, 2000).astype(np.float32)
    x[:4] = [(qmin - zp - 0.5) * scale, (qmax - zp + 0.5) * scale, np.inf, -np.inf]
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.fake_quantize_per_tensor_affine(xt, scale, zp, qmin, qmax)
    yt.sum().backward()
    fq = fake_quantize(x.astype(np.float64), QParams(np.array(scale), np.array(zp), qmin, qmax))
    np.testing.assert_array_equal(fq.values, yt.detach().numpy())
    np.testing.assert_array_equal(fq.mask.astype(np.float32), xt.grad.numpy())


def test_nearest_error_at_most_half_a_step_inside_the_range():
    qp = calibrate_absmax([2.0], 8)
    x = np.linspace(-2.0, 2.0, 10001)
    err = np.abs(fake_quantize(x, qp).values - x)
    assert err.max() <= qp.scale.item() / 2 * (1 + 1e-12)


def test_grid_values_are_fixed_points_affine():
    qp = calibrate_minmax([-0.3, 1.7, 0.0, 0.9, -0.1], 8, symmetric=False)
    grid = (np.arange(qp.qmin, qp.qmax + 1) - qp.zero_point) * qp.scale
    np.testing.assert_array_equal(fake_quantize(grid, qp).values, grid)


# ------------------------------------------------------------------ rounding
def test_round_nearest_even_ties():
    assert round_nearest_even([0.5, 1.5, 2.5, -0.5, -1.5, 2.4]).tolist() == [0, 2, 2, -0, -2, 2]


def test_stochastic_rounding_is_unbiased_monte_carlo():
    # Each draw is lo or lo + 1 with p = frac: a Bernoulli with sigma = sqrt(p (1 - p)) <= 0.5.
    # The mean of n draws has standard error sigma / sqrt(n); we allow 5 standard errors
    # (false-failure probability about 6e-7 per value), small enough to catch a bias of 1 %.
    n = 200_000
    for x in (3.7, -2.25, 0.01, 1e6 + 0.5):
        draws = round_stochastic(np.full(n, x), rng=42)
        lo = np.floor(x)
        assert set(np.unique(draws)) <= {lo, lo + 1}
        p = x - lo
        se = np.sqrt(p * (1 - p) / n)
        assert abs(draws.mean() - x) < 5 * se
    # Nearest rounding of 3.7 is biased by 0.3, far outside that bound: the test can fail.
    assert abs(round_nearest_even(np.full(n, 3.7)).mean() - 3.7) > 5 * np.sqrt(0.21 / n)


def test_stochastic_fake_quantize_unbiased_and_grid_values_stable():
    qp = calibrate_absmax([12.7], 8)             # scale 0.1
    x = 3.0 + 0.7 * qp.scale.item()
    n = 200_000
    v = fake_quantize(np.full(n, x), qp, "stochastic", rng=7).values
    assert set(np.round(np.unique(v), 12)) == {3.0, 3.1}
    se = qp.scale.item() * np.sqrt(0.7 * 0.3 / n)   # Bernoulli(0.7) times the step; 5 sigma
    assert abs(v.mean() - x) < 5 * se
    on_grid = 5 * qp.scale.item()
    assert np.all(fake_quantize(np.full(1000, on_grid), qp, "stochastic", rng=1).values
                  == on_grid)


def test_stochastic_float_rounding_unbiased():
    # E4M3 between 1.0 and 1.125 (step 2^-3): 1.03125 is a quarter of the way up.
    n = 200_000
    v = fake_quantize_float(np.full(n, 1.03125), FP8_E4M3, mode="stochastic", rng=3).values
    assert set(np.unique(v)) == {1.0, 1.125}
    se = 0.125 * np.sqrt(0.25 * 0.75 / n)
    assert abs(v.mean() - 1.03125) < 5 * se


# ------------------------------------------------------------------ float and block masks
def test_float_mask_boundary_agrees_with_ml_dtypes_overflow():
    # A value "stays in range" exactly when a non-saturating cast gives a finite number.
    for fmt, dt in ((FP8_E4M3, ml_dtypes.float8_e4m3fn), (FP8_E5M2, ml_dtypes.float8_e5m2)):
        top = fmt.max_value
        x = np.concatenate([np.linspace(0.9 * top, 1.2 * top, 4001), [464.0, 61440.0]])
        x = np.concatenate([x, -x])
        finite = np.isfinite(x.astype(dt).astype(np.float64))
        np.testing.assert_array_equal(fake_quantize_float(x, fmt).mask, finite)


def test_float_mask_e2m1_by_hand():
    # E2M1 tops out at 6 with step 2 in [4, 8): midpoint 7 ties to 8 (even mantissa) -> out.
    fq = fake_quantize_float([6.0, 6.9, 7.0, 7.1, -7.0, np.inf], FP4_E2M1)
    assert fq.values.tolist() == [6, 6, 6, 6, -6, 6]
    assert fq.mask.tolist() == [True, True, False, False, False, False]


def test_float_scale_and_values():
    fq = fake_quantize_float([1.1, 3.0], FP8_E4M3, scale=2.0)
    # 1.1 / 2 = 0.55 -> E4M3 step 2^-4 in [0.5, 1): 0.5625 -> 1.125; 1.5 exact -> 3.0
    assert fq.values.tolist() == [1.125, 3.0]


def test_block_fake_quant_matches_block_quantize():
    x = np.random.default_rng(0).standard_t(3, size=(4, 64))
    fq = fake_quantize_block(x, FP4_E2M1, 16, "e4m3")
    np.testing.assert_array_equal(fq.values, nvfp4_quantize(x).values)
    assert fq.mask.shape == x.shape


def test_mx_block_mask_marks_saturated_elements():
    # MX scale 2^(floor(log2 7) - 2) = 1 for E2M1: 7 rounds past 6 and saturates; 5 does not.
    x = np.zeros(32)
    x[:2] = [7.0, 5.0]
    fq = fake_quantize_block(x, FP4_E2M1, 32, "e8m0")
    assert fq.values[:2].tolist() == [6.0, 4.0]
    assert fq.mask[:2].tolist() == [False, True]


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_every_weight_format_is_idempotent(fmt):
    # A fake-quantized tensor is on the grid: quantizing it again changes nothing (scales are
    # recalibrated from it, and its amax is itself a grid point).
    w = np.random.default_rng(5).normal(size=(8, 32))
    v = fake_quantize_weight(w, fmt).values
    np.testing.assert_allclose(fake_quantize_weight(v, fmt).values, v, rtol=0, atol=1e-12)


def test_int2_is_ternary_and_per_channel_scales_follow_rows():
    w = np.array([[0.0, 0.5, 1.0, -0.2], [0.0, 50.0, 100.0, -80.0]])
    v = fake_quantize_weight(w, "INT2", axis=0).values
    # Scales 1 and 100 (absmax / 1); 0.5 and 50/100 are ties and round to the even code 0.
    assert v.tolist() == [[0, 0, 1, 0], [0, 0, 100, -100]]
    qp = calibrate_absmax(w, 8, axis=0)
    assert qp.scale.shape == (2, 1)
    np.testing.assert_allclose(qp.scale.ravel(), [1 / 127, 100 / 127])


# ------------------------------------------------------------------ calibration
def test_affine_calibration_nudges_zero_point_by_hand():
    # [-0.3, 1.7]: scale = 2.0 / 255; zero point = round(0.3 / scale) = round(38.25) = 38.
    qp = calibrate_minmax([-0.3, 1.7, 0.9], 8, symmetric=False)
    assert (qp.qmin, qp.qmax) == (0, 255)
    assert qp.scale.item() == pytest.approx(2.0 / 255, rel=1e-15)
    assert qp.zero_point.item() == 38
    assert fake_quantize([0.0], qp).values.tolist() == [0.0]   # real 0 is exactly a code


def test_affine_range_widened_to_contain_zero():
    qp = calibrate_minmax([2.0, 3.0], 8, symmetric=False)   # [0, 3]
    assert qp.zero_point.item() == 0 and qp.scale.item() == pytest.approx(3.0 / 255)


def test_affine_range_wider_than_float64_max():
    # 1.6e308 - (-1e308) overflows float64; the scale 2.6e308 / 255 does not. Zero point:
    # round(0 - (-1e308) / 1.0196e306) = round(98.08) = 98. No NaN, no warning.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qp = qparams_from_range(-1e308, 1.6e308, 8, symmetric=False)
        fq = fake_quantize([-1e308, 1.6e308], qp)
    assert qp.scale.item() == pytest.approx(1.6e308 / 255 + 1e308 / 255, rel=1e-15)
    assert qp.zero_point.item() == 98
    assert np.all(np.abs(fq.values - [-1e308, 1.6e308]) <= qp.scale / 2) and fq.mask.all()

def test_percentile_nearest_rank_by_hand():
    x = np.concatenate([np.arange(100) / 100, [1000.0]])    # 101 values, last = 100
    # c = 0.02: lo index floor(2) = 2 -> 0.02; hi index ceil(98) = 98 -> 0.98.
    qp = calibrate_percentile(x, 8, 0.02)
    assert qp.scale.item() == pytest.approx(0.98 / 127, rel=1e-15)
    assert calibrate_percentile(x, 8, 0.0).scale.item() == pytest.approx(1000 / 127)
    qa = calibrate_percentile(x, 8, 0.02, symmetric=False)
    assert qa.scale.item() == pytest.approx(0.98 / 255, rel=1e-15)


def test_percentile_per_channel_axis_1():
    x = np.stack([np.arange(11.0), 10 * np.arange(11.0)], axis=1)  # (11, 2): columns differ
    qp = calibrate_percentile(x, 8, 0.1, axis=1)
    # last = 10: hi index ceil(9) = 9 -> 9 and 90.
    assert qp.scale.shape == (1, 2)
    np.testing.assert_allclose(qp.scale.ravel(), [9 / 127, 90 / 127])


@pytest.mark.parametrize("fn", [
    lambda x: calibrate_minmax(x, 8), lambda x: calibrate_minmax(x, 8, symmetric=False),
    lambda x: calibrate_absmax(x, 4), lambda x: calibrate_percentile(x, 8, 0.1)])
@pytest.mark.parametrize("bad,err", [([], ValueError),
                                     ([1.0, np.nan], ValueError), ([1.0, np.inf], ValueError),
                                     (["a"], TypeError)])
def test_calibration_refuses_degenerate_input(fn, bad, err):
    with pytest.raises(err):
        fn(np.array(bad))


@pytest.mark.parametrize("calibrate", [
    lambda x: calibrate_minmax(x, 8), lambda x: calibrate_minmax(x, 8, symmetric=False),
    lambda x: calibrate_absmax(x, 4), lambda x: calibrate_percentile(x, 8, 0.1),
    lambda x: calibrate_minmax(x, 4, axis=0), lambda x: calibrate_minmax(x, 4, False, axis=1),
    lambda x: qparams_from_range(0.0, 0.0, 8), lambda x: qparams_from_range(0, 0, 8, False)])
def test_all_zero_calibrates_to_scale_one_and_quantizes_to_zeros(calibrate):
    # The house rule (as numfmt.quantize_int): an all-zero tensor or channel gets scale 1 and
    # zero point 0 (real 0 is code 0 in both the signed and the unsigned range), and
    # fake-quantizes to zeros with the gradient passing everywhere, without NaN or warnings.
    import warnings
    x = np.zeros((3, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        qp = calibrate(x)
        fq = fake_quantize(x, qp)
    assert np.all(qp.scale == 1.0) and np.all(qp.zero_point == 0)
    assert np.all(fq.values == 0.0) and fq.mask.all()


def test_an_all_zero_channel_beside_others_gets_scale_one():
    qp = calibrate_absmax([[1.0, 2.0], [0.0, 0.0]], 8, axis=0)
    assert qp.scale.ravel().tolist() == [2.0 / 127, 1.0]


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_fake_quantize_weight_of_zeros_is_zeros(fmt):
    # A zero-initialised weight (a common init for output projections) in every format.
    fq = fake_quantize_weight(np.zeros((2, 32)), fmt)
    assert np.all(fq.values == 0.0) and fq.mask.all()
    opt = QATAdam(np.zeros((2, 32)), lambda w: fake_quantize_weight(w, fmt))
    assert np.all(opt.view == 0.0)


def test_calibration_refuses_bad_arguments():
    with pytest.raises(ValueError, match="clip_fraction"):
        calibrate_percentile([1.0, 2.0], 8, 0.5)
    with pytest.raises(ValueError, match="clip_fraction"):
        calibrate_percentile([1.0, 2.0], 8, -0.1)
    with pytest.raises(ValueError, match="axis"):
        calibrate_minmax([[1.0]], 8, axis=2)
    with pytest.raises(TypeError, match="axis"):
        calibrate_minmax([[1.0]], 8, axis=0.5)
    with pytest.raises(ValueError, match="bits"):
        calibrate_minmax([1.0], 1)
    with pytest.raises(ValueError, match="lo > hi"):
        qparams_from_range(1.0, 0.0, 8)


def test_fake_quantize_bad_input():
    with pytest.raises(ValueError, match="NaN"):
        fake_quantize([np.nan], GRID)
    with pytest.raises(TypeError, match="QParams"):
        fake_quantize([1.0], (1.0, 0, -8, 7))
    with pytest.raises(ValueError, match="mode must be one of"):
        fake_quantize([1.0], GRID, mode="up")
    with pytest.raises(ValueError, match="scale"):
        fake_quantize([1.0], QParams(np.array(0.0), np.array(0), -8, 7))
    with pytest.raises(TypeError, match="FloatFormat"):
        fake_quantize_float([1.0], "E4M3")
    with pytest.raises(ValueError, match="NaN"):
        fake_quantize_float([np.nan], FP8_E4M3)
    with pytest.raises(ValueError, match="scale"):
        fake_quantize_float([1.0], FP8_E4M3, scale=-1.0)
    with pytest.raises(ValueError, match="divide"):
        fake_quantize_block(np.ones(10), FP4_E2M1, 16)
    with pytest.raises(ValueError, match="fmt"):
        fake_quantize_weight(np.ones(4), "INT3")
    with pytest.raises(ValueError, match="axis"):
        fake_quantize_weight(np.ones((2, 16)), "NVFP4", axis=0)
    with pytest.raises(ValueError, match="nearest"):
        fake_quantize_weight(np.ones((2, 32)), "MXFP4", mode="stochastic")
    with pytest.raises(ValueError, match="shape"):
        ste_backward(np.ones(3), np.ones(2, dtype=bool))
    with pytest.raises(TypeError, match="boolean"):
        ste_backward(np.ones(3), np.ones(3))


# ------------------------------------------------------------------ optimizer
def test_adam_step_equals_a_hand_written_adam_step():
    p0 = np.array([0.12, -0.37, 0.88, -0.05, 0.51])
    g1 = np.array([0.1, -0.2, 0.05, 0.3, -0.15])
    g2 = np.array([-0.05, 0.1, 0.2, 0.3, 0.0])
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-8, 0.1
    # Kingma and Ba, Algorithm 1, step 1: m = 0.1 g, v = 0.001 g^2, m_hat = g, v_hat = g^2,
    # so the update is lr * g / (|g| + eps) = lr * sign(g) (up to eps); AdamW first shrinks p.
    p1_hand = p0 * (1 - lr * wd) - lr * g1 / (np.abs(g1) + eps)
    # Step 2 written out in full.
    m = 0.9 * (0.1 * g1) + 0.1 * g2
    v = 0.999 * (0.001 * g1**2) + 0.001 * g2**2
    m_hat, v_hat = m / (1 - 0.9**2), v / (1 - 0.999**2)
    p2_hand = p1_hand * (1 - lr * wd) - lr * m_hat / (np.sqrt(v_hat) + eps)

    def view(w):
        return fake_quantize_weight(w, "INT8")

    opt = QATAdam(p0, view, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    opt.step(g1)
    # The master is FP32: equal to the float64 hand value rounded once to float32 (rtol 2^-23
    # allows a one-ulp difference from float64 operation order).
    np.testing.assert_allclose(opt.master, p1_hand.astype(np.float32), rtol=2**-23)
    opt.step(g2)
    np.testing.assert_allclose(opt.master, p2_hand.astype(np.float32), rtol=2**-22)
    assert opt.master.dtype == np.float32 and opt.t == 2


def test_adam_update_matches_torch_adamw():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    p = rng.normal(size=7)
    grads = rng.normal(size=(3, 7))
    pt = torch.tensor(p, requires_grad=True)
    opt = torch.optim.AdamW([pt], lr=0.05, weight_decay=0.2)
    m = v = np.zeros(7)
    for t, g in enumerate(grads, 1):
        pt.grad = torch.tensor(g)
        opt.step()
        p, m, v = adam_update(p, g, m, v, t, 0.05, weight_decay=0.2)
    np.testing.assert_allclose(p, pt.detach().numpy(), rtol=1e-14)


def test_master_stays_off_the_grid_while_the_view_is_on_it():
    master = np.array([0.12, -0.37, 0.88, -0.05, 0.51])
    opt = QATAdam(master, lambda w: fake_quantize_weight(w, "INT4"), lr=0.01)
    for _ in range(5):
        opt.step(ste_backward(opt.view - 0.3, opt.mask))
    scale = np.abs(opt.master).max() / 7          # the view's scale, recomputed independently
    codes = opt.view / scale
    np.testing.assert_allclose(codes, np.round(codes), atol=1e-9)        # view on the grid
    master_codes = opt.master / scale
    assert np.abs(master_codes - np.round(master_codes)).max() > 0.05    # master is not
    np.testing.assert_array_equal(opt.view,
                                  fake_quantize_weight(opt.master.astype(np.float64), "INT4").values)


def test_small_updates_vanish_on_a_stored_grid_but_not_in_the_master():
    qp = QParams(np.array(0.25), np.array(0), -7, 7)
    opt = QATAdam(np.zeros(3), lambda w: fake_quantize(w, qp), lr=0.01)
    stored, m, v = np.zeros(3), np.zeros(3), np.zeros(3)
    g = np.array([1.0, -1.0, 0.5])
    for t in range(1, 21):
        opt.step(g)
        stored, m, v = adam_update(stored, g, m, v, t, 0.01)
        stored = fake_quantize(stored, qp).values
    assert np.all(stored == 0)                      # 0.01 per step < half a step (0.125)
    np.testing.assert_allclose(opt.master, [-0.2, 0.2, -0.2], rtol=1e-5)   # 20 * lr * sign(g)
    assert opt.view.tolist() == [-0.25, 0.25, -0.25]


def test_qat_adam_bad_input():
    with pytest.raises(ValueError, match="empty"):
        QATAdam([], lambda w: fake_quantize_weight(w, "INT8"))
    with pytest.raises(TypeError, match="callable"):
        QATAdam([1.0], "INT8")
    with pytest.raises(TypeError, match="FakeQuantized"):
        QATAdam([1.0], lambda w: w)
    opt = QATAdam([1.0, 2.0], lambda w: fake_quantize_weight(w, "INT8"))
    with pytest.raises(ValueError, match="shape"):
        opt.step([1.0])
    with pytest.raises(ValueError, match="NaN or Inf"):
        opt.step([np.nan, 1.0])
    with pytest.raises(ValueError, match="t must"):
        adam_update([1.0], [1.0], [0.0], [0.0], 0, 0.1)
    with pytest.raises(ValueError, match="lr"):
        adam_update([1.0], [1.0], [0.0], [0.0], 1, -0.1)
    assert isinstance(fake_quantize_weight([1.0, 2.0], "INT8"), FakeQuantized)


def test_fake_quantize_overflowing_quotient_saturates_without_warning():
    # x / scale = 1e300 / 1e-300 overflows float64 to +-inf: it clamps (integer grid: code
    # +-127, value +-127e-300; E4M3: +-448e-300) and its gradient is masked, as for +-Inf.
    import warnings
    x = np.array([1e300, -1e300])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fi = fake_quantize(x, QParams(np.array(1e-300), np.array(0), -127, 127))
        ff = fake_quantize_float(x, FP8_E4M3, 1e-300)
    assert fi.values.tolist() == [127 * 1e-300, -127 * 1e-300] and not fi.mask.any()
    assert ff.values.tolist() == [448 * 1e-300, -448 * 1e-300] and not ff.mask.any()


@pytest.mark.parametrize("fmt", [["INT4"], None, 4])
def test_fake_quantize_weight_refuses_a_format_that_is_not_a_name(fmt):
    # A list would otherwise reach a dict lookup and fail with "unhashable type: 'list'".
    with pytest.raises(TypeError, match="fmt must be a format name"):
        fake_quantize_weight(np.ones((2, 32)), fmt)


@pytest.mark.parametrize("kwargs,exc,match", [
    (dict(lr=-1.0), ValueError, "lr > 0"),
    (dict(lr="0.1"), TypeError, "lr must be a real number"),
    (dict(betas=0.9), TypeError, "betas must be a pair"),
    (dict(betas=(0.9, 1.0)), ValueError, "beta2 < 1"),
    (dict(eps=0.0), ValueError, "eps > 0"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay >= 0"),
])
def test_qatadam_checks_its_hyper_parameters_when_built(kwargs, exc, match):
    # Before: accepted here, failing only at the first step (or with "cannot unpack").
    with pytest.raises(exc, match=match):
        QATAdam(np.ones(4), lambda w: fake_quantize_weight(w, "E4M3"), **kwargs)


def test_adam_update_refuses_a_learning_rate_that_is_not_a_number():
    with pytest.raises(TypeError, match="lr must be a real number"):
        adam_update(np.ones(2), np.ones(2), np.zeros(2), np.zeros(2), 1, "0.1")
