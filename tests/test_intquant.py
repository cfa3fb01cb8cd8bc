"""quantize_int: hand-derived cases, properties, shapes, and errors."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from numfmt import (clip_sweep, dequantize_affine, int_range, quantize_affine, quantize_int,
                    rel_error)


def test_ties_round_half_to_even_at_scale_half():
    # 63.5 sets amax, so scale = 63.5 / 127 = 0.5; x / 0.5 = [0.5, 1.5, 2.5, 3.5, -0.5, -1.5].
    x = np.array([0.25, 0.75, 1.25, 1.75, -0.25, -0.75, 63.5])
    r = quantize_int(x, 8)
    assert r.scale.item() == 0.5
    assert r.codes.tolist() == [0, 2, 2, 4, 0, -2, 127]
    # Python's round() is round-half-even too: an independent check of the same ties.
    assert r.codes[:6].tolist() == [round(v / 0.5) for v in x[:6]]


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_a_symmetric_range_gets_the_midpoint_zero_point_whatever_its_last_bit(bits):
    # rows [-h, 0, h]: the exact -min / scale is (2^b - 1) / 2, which rounds half to even to
    # 2^(b-1) (Python's round, an independent rounding); the float64 quotient of the rounded
    # scale, h / ((h + h) / (2^b - 1)), lands above, on or below it with the last bits of h
    import torch
    from numfmt.torch import quantize_int as quantize_int_torch
    qmax = 2 ** bits - 1
    h = np.random.default_rng(bits).uniform(0.01, 1.0, 4000)
    x = np.stack([-h, np.zeros_like(h), h], axis=1)
    for r in (quantize_int(x, bits, symmetric=False, granularity="channel"),
              quantize_int_torch(torch.from_numpy(x), bits, symmetric=False,
                                 granularity="channel")):
        z = np.asarray(r.zero_point).ravel()
        assert round(qmax / 2) == 2 ** (bits - 1) and (z == 2 ** (bits - 1)).all()
        codes = np.asarray(r.codes)
        assert (codes[:, 1] == 2 ** (bits - 1)).all()                 # 0 is a code
        # the ends' exact quotients -+(2^b - 1) / 2 round half to even: -max onto code 0,
        # +max onto 2^b, clamped to the top code
        assert (codes[:, 0] == 0).all() and (codes[:, 2] == qmax).all()
    if bits in (3, 4, 8):   # the float quotient does go both ways on this sample
        assert len(set(np.rint(h / ((h + h) / qmax)).tolist())) == 2


def test_symmetric_int8_hand_case():
    r = quantize_int(np.array([-0.5, 2.0]), 8)
    assert r.scale.item() == 2.0 / 127        # amax / qmax
    assert r.codes.tolist() == [-32, 127]     # -0.5 / (2/127) = -31.75 -> -32
    assert r.zero_point.item() == 0


def test_asymmetric_hand_case():
    # [min, max] = [-1, 3]: scale = 4 / 255, zero point = round(1 / scale) = round(63.75) = 64.
    r = quantize_int(np.array([-1.0, 0.0, 3.0]), 8, symmetric=False)
    assert r.scale.item() == 4.0 / 255
    assert r.zero_point.item() == 64
    assert r.codes.tolist() == [0, 64, 255]
    assert r.values[1] == 0.0


def test_asymmetric_range_is_widened_to_contain_zero():
    r = quantize_int(np.array([2.0, 3.0, 4.0]), 4, symmetric=False)
    assert r.zero_point.item() == 0 and r.scale.item() == 4.0 / 15


@pytest.mark.parametrize("gran,group", [("tensor", None), ("channel", None), ("group", 8)])
def test_zero_is_exact_in_every_asymmetric_grid(gran, group):
    rng = np.random.default_rng(0)
    x = rng.normal(0.7, 1.0, (6, 32))
    x[:, ::5] = 0.0
    r = quantize_int(x, 4, symmetric=False, granularity=gran, group=group)
    assert np.all(r.values[x == 0.0] == 0.0)
    assert r.zero_point.dtype == np.int64 and r.codes.min() >= 0 and r.codes.max() <= 15


@pytest.mark.parametrize("gran,group,shape", [
    ("tensor", None, (1, 1, 1)), ("channel", None, (2, 3, 1)), ("group", 4, (2, 3, 3, 1))])
def test_scale_and_zero_point_shapes(gran, group, shape):
    x = np.arange(1.0, 73.0).reshape(2, 3, 12)
    r = quantize_int(x, 8, granularity=gran, group=group)
    assert r.scale.shape == shape and r.zero_point.shape == shape
    assert r.values.shape == x.shape and r.codes.shape == x.shape and r.codes.dtype == np.int64


def test_channel_and_group_scales_are_the_row_and_group_maxima():
    x = np.array([[1.0, -4.0, 2.0, 0.5], [0.1, 0.2, -8.0, 3.0]])
    assert quantize_int(x, 4, granularity="channel").scale.ravel().tolist() == [4 / 7, 8 / 7]
    g = quantize_int(x, 4, granularity="group", group=2).scale.ravel()
    np.testing.assert_allclose(g, [4 / 7, 2 / 7, 0.2 / 7, 8 / 7], rtol=1e-15)


def test_integer_only_matmul_matches_dequantized_product():
    rng = np.random.default_rng(1)
    A = np.maximum(rng.standard_normal((8, 64)), 0) + 0.1   # min 0.1 > 0 still gives z = 0
    A[0, 0] = -0.3                                           # now the zero point is not 0
    W = rng.standard_normal((5, 64))
    _, qa, sa, za = quantize_int(A, 8, symmetric=False)
    _, qw, sw, _ = quantize_int(W, 8, granularity="channel")
    assert za.item() != 0
    y_int = sa.item() * sw.T * (qa @ qw.T - za.item() * qw.sum(axis=1))
    y_deq = ((qa - za) * sa) @ (qw * sw).T
    np.testing.assert_allclose(y_int, y_deq, rtol=1e-12, atol=1e-12)
    # The two sides above agree for any integer codes (an identity), so the codes themselves
    # are checked against the definitions written out here: asymmetric per tensor,
    # scale = (max - min) / 255, zero point = round(-min / scale); symmetric per row,
    # scale = amax / 127; codes = clamp(round_half_even(x / scale) + zero point).
    sa_hand = (A.max() - A.min()) / 255
    za_hand = np.rint(-A.min() / sa_hand)
    sw_hand = np.abs(W).max(axis=1, keepdims=True) / 127
    assert sa.item() == sa_hand and za.item() == za_hand
    assert np.array_equal(sw, sw_hand)
    assert np.array_equal(qa, np.clip(np.rint(A / sa_hand) + za_hand, 0, 255))
    assert np.array_equal(qw, np.clip(np.rint(W / sw_hand), -127, 127))


def test_clip_saturates_the_largest_values():
    x = np.array([-10.0, -1.0, 0.6, 1.0, 10.0])
    r = quantize_int(x, 4, clip=0.1)    # range 1.0, scale 1/7: 0.6 * 7 = 4.2
    assert r.codes.tolist() == [-7, -7, 4, 7, 7]


@pytest.mark.parametrize("gran,group", [("tensor", None), ("channel", None), ("group", 4)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_all_zero_tensor_rows_and_groups_quantize_to_zeros_without_warnings(gran, group, symmetric):
    x = np.zeros((3, 8))
    x[1] = np.linspace(-1, 1, 8)   # one non-zero row; the others and their groups are all zero
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = quantize_int(x, 4, symmetric=symmetric, granularity=gran, group=group)
        z = quantize_int(np.zeros((3, 8)), 4, symmetric=symmetric, granularity=gran, group=group)
    assert np.all(r.values[[0, 2]] == 0) and np.all(np.isfinite(r.values))
    assert np.all(z.values == 0) and np.all(z.codes == z.zero_point.ravel()[0])


# Magnitudes from 1e-290: smaller ones (2.2e-308 with 2 bits, asymmetric) give a scale below
# float64's smallest normal, which quantize_int refuses (tests/test_bad_inputs.py checks that).
_MAGNITUDES = st.one_of(st.just(0.0), st.floats(1e-290, 1e6), st.floats(-1e6, -1e-290))


@settings(max_examples=60, deadline=None)
@given(arrays(np.float64, st.integers(1, 64), elements=_MAGNITUDES),
       st.integers(2, 16), st.booleans())
def test_codes_in_range_and_error_at_most_half_a_step(x, bits, symmetric):
    r = quantize_int(x, bits, symmetric=symmetric)
    qmin, qmax = (-(2 ** (bits - 1) - 1), 2 ** (bits - 1) - 1) if symmetric else (0, 2**bits - 1)
    assert r.codes.min() >= qmin and r.codes.max() <= qmax
    # clip = 1: nothing saturates, so each value is within half a step of its reconstruction.
    assert np.all(np.abs(r.values - x) <= r.scale.item() / 2 * (1 + 1e-9) + 1e-300)


def test_int_range_and_affine_helpers():
    assert int_range(8) == (-127, 127) and int_range(8, symmetric=False) == (0, 255)
    assert int_range(2) == (-1, 1)
    q = quantize_affine([-9.0, -8.4, 0.2, 7.4, np.inf], 1.0, 0, -8, 7)
    assert q.tolist() == [-8, -8, 0, 7, 7]
    assert dequantize_affine([0, 3], 0.5, 1).tolist() == [-0.5, 1.0]


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("x,exc,msg", [
    (np.array([]), ValueError, "empty"),
    (np.array([1.0, np.nan]), ValueError, "non-finite"),
    (np.array([1.0, np.inf]), ValueError, "non-finite"),
    (np.array(["1"]), TypeError, "real numbers"),
    (np.array([1 + 1j]), TypeError, "real numbers"),
])
def test_bad_x(x, exc, msg):
    with pytest.raises(exc, match=msg):
        quantize_int(x, 8)


@pytest.mark.parametrize("kwargs,exc,msg", [
    (dict(bits=1), ValueError, r"\[2, 16\]"),
    (dict(bits=17), ValueError, r"\[2, 16\]"),
    (dict(bits=4.0), TypeError, "integer"),
    (dict(bits=8, clip=0.0), ValueError, "clip"),
    (dict(bits=8, clip=1.5), ValueError, "clip"),
    (dict(bits=8, clip=float("nan")), ValueError, "clip"),
    (dict(bits=8, granularity="row"), ValueError, "granularity"),
    (dict(bits=8, granularity="group"), ValueError, "group size"),
    (dict(bits=8, granularity="group", group=5), ValueError, "does not divide"),
    (dict(bits=8, granularity="group", group=0), ValueError, "positive"),
    (dict(bits=8, granularity="group", group=2.0), TypeError, "integer"),
    (dict(bits=8, granularity="channel", group=4), ValueError, "only meaningful"),
])
def test_bad_parameters(kwargs, exc, msg):
    with pytest.raises(exc, match=msg):
        quantize_int(np.ones((2, 8)), **kwargs)


def test_quantize_affine_rejects_bad_scale_and_nan():
    with pytest.raises(ValueError, match="positive"):
        quantize_affine([1.0], 0.0)
    with pytest.raises(ValueError, match="NaN"):
        quantize_affine([np.nan], 1.0)
    with pytest.raises(ValueError, match="qmin"):
        quantize_affine([1.0], 1.0, 0, 5, 4)


@pytest.mark.parametrize("gran,group", [("tensor", None), ("channel", None), ("group", 2)])
def test_asymmetric_range_wider_than_float64_max(gran, group):
    # max - min = 1.6e308 + 1e308 overflows float64, but the scale 2.6e308 / 255 = 1.0196e306
    # does not. Hand derivation: zero point round(1e308 / 1.0196e306) = round(98.08) = 98;
    # -1e308 -> code 0, 1.6e308 -> code 98 + round(156.92) = 255. Every value lies within half
    # a step of its reconstruction; nothing is NaN.
    x = np.array([[-1e308, 1.6e308], [-1e308, 1.6e308]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = quantize_int(x, 8, symmetric=False, granularity=gran, group=group)
    assert np.all(r.scale == pytest.approx(1.6e308 / 255 + 1e308 / 255, rel=1e-15))
    assert np.all(r.zero_point == 98) and r.codes.tolist() == [[0, 255], [0, 255]]
    assert np.all(np.abs(r.values - x) <= r.scale / 2)


@pytest.mark.parametrize("call,exc,msg", [
    (lambda: quantize_affine([1.0], 1.0, 0.5), TypeError, "zero_point must hold integers"),
    (lambda: quantize_affine([1.0], 1.0, np.nan), TypeError, "zero_point must hold integers"),
    (lambda: quantize_affine([1.0], 1.0, True), TypeError, "zero_point must hold integers"),
    (lambda: quantize_affine([1.0], 1.0, 0, -127.5, 127), TypeError, "qmin must be an integer"),
    (lambda: quantize_affine([1.0], 1.0, 0, -127, "127"), TypeError, "qmax must be an integer"),
    (lambda: quantize_affine([1.0], "1.0"), TypeError, "scale must hold real numbers"),
    (lambda: dequantize_affine(["1", "2"], 0.5), TypeError, "codes must hold real numbers"),
    (lambda: dequantize_affine([True], 0.5), TypeError, "codes must hold real numbers"),
    (lambda: dequantize_affine([1], "0.5"), TypeError, "scale must hold real numbers"),
    (lambda: dequantize_affine([1], 0.0), ValueError, "positive and finite"),
    (lambda: dequantize_affine([1], np.nan), ValueError, "positive and finite"),
    (lambda: dequantize_affine([1], 1.0, 0.5), TypeError, "zero_point must hold integers"),
    (lambda: quantize_int([1.0], 8, clip=True), TypeError, "clip must be a real number"),
    (lambda: quantize_int([1.0], 8, clip="0.5"), TypeError, "clip must be a real number"),
])
def test_affine_helpers_refuse_non_integer_zero_points_and_non_numbers(call, exc, msg):
    # Before: a zero point of 0.5 silently shifted every code by half a step and truncated;
    # NaN became an arbitrary int64; strings were parsed as numbers.
    with pytest.raises(exc, match=msg):
        call()


def test_affine_helpers_accept_numpy_scalars_and_broadcast():
    # numpy integer/float scalars are numbers; zero_point broadcasts against a scalar x:
    # round(1.0 / 0.5) + [0, 3] = [2, 5]; dequantized back (code - zp) * 0.5 = [1.0, 1.0].
    codes = quantize_affine(1.0, np.float32(0.5), np.array([0, 3]), np.int8(-8), np.int64(7))
    assert codes.tolist() == [2, 5]
    assert dequantize_affine(codes, 0.5, np.array([0, 3])).tolist() == [1.0, 1.0]
    assert quantize_int([1.0, -0.5], 8, clip=np.float32(0.5)).scale.item() == 0.5 / 127


def test_quantize_affine_overflowing_quotient_clamps_without_warning():
    # 1e300 / 1e-300 = 1e600 overflows float64 to +inf, which clamps to qmax, as +inf does.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert quantize_affine([1e300, -1e300], 1e-300).tolist() == [127, -127]


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("gran, group", [("tensor", None), ("channel", None), ("group", 32),
                                         ("group", 24)])
def test_large_tensors_equal_the_textbook_formula_bit_for_bit(gran, group, symmetric):
    # 96 x 1536 = 147K values: quantize_int works 64K at a time; the formula below at once.
    rng = np.random.default_rng(11)
    x = rng.standard_t(3, (96, 1536)) * np.exp(rng.uniform(-3, 3, (96, 1))) + 0.3
    x[5] = 0.0  # an all-zero row (and groups)
    x = x.astype(np.float32)
    r = quantize_int(x, 4, symmetric=symmetric, granularity=gran, group=group)
    x64 = x.astype(np.float64)
    xg = x64.reshape(96, -1, group) if group else x64
    axis = None if gran == "tensor" else -1
    if symmetric:
        s = np.abs(xg).max(axis=axis, keepdims=True) * (1.0 / 7)
        s[s == 0] = 1.0
        q = np.clip(np.rint(xg / s), -7, 7)
        values = q * s
    else:
        lo = np.minimum(xg.min(axis=axis, keepdims=True), 0.0)
        hi = np.maximum(xg.max(axis=axis, keepdims=True), 0.0)
        s = (hi - lo) / 15
        s[s == 0] = 1.0
        z = np.clip(np.rint(-lo / s), 0, 15)
        q = np.clip(np.rint(xg / s) + z, 0, 15)
        values = (q - z) * s
    assert np.array_equal(r.codes, q.reshape(x.shape).astype(np.int64))
    assert np.array_equal(r.values.view(np.uint64), values.reshape(x.shape).view(np.uint64))
    assert np.array_equal(r.scale, s)


@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("gran, group", [("tensor", None), ("channel", None), ("group", 32)])
def test_torch_twin_is_bit_identical_across_its_chunks(gran, group, symmetric):
    torch = pytest.importorskip("torch")
    import numfmt.torch as nt
    rng = np.random.default_rng(12)
    x = (rng.standard_t(3, (96, 1536)) + 0.3).astype(np.float32)  # 147K > one 128K chunk
    x[4] = 0.0
    a = quantize_int(x, 4, symmetric=symmetric, granularity=gran, group=group)
    b = nt.quantize_int(torch.from_numpy(x), 4, symmetric=symmetric, granularity=gran,
                        group=group)
    assert np.array_equal(a.values.view(np.uint64), b.values.numpy().view(np.uint64))
    assert np.array_equal(a.codes, b.codes.numpy()) and np.array_equal(a.scale, b.scale.numpy())


def test_the_tiny_tensor_hypothesis_found_is_refused_with_the_scale_message():
    # 2^-1022 with 2 bits, asymmetric: scale 2^-1022 / 3 is a float64 subnormal.
    with pytest.raises(ValueError, match="below float64's smallest normal"):
        quantize_int(np.array([2.0**-1022]), 2, symmetric=False)


# ---------------------------------------------------------------------------------------------
# clip_sweep: the U-curve of error against clip ratio in one pass
# ---------------------------------------------------------------------------------------------
CLIPS = tuple(np.geomspace(0.005, 1.0, 32))


def _hand_int(z, bits, clip):
    """Symmetric per-tensor INTb written out: scale = clip * amax / qmax, round half even, clamp."""
    qmax = 2 ** (bits - 1) - 1
    s = clip * np.abs(z).max() / qmax
    return np.clip(np.rint(z / s), -qmax, qmax) * s


@pytest.mark.parametrize("n", [1 << 18, 3 * (1 << 16) + 5, 1000])
def test_clip_sweep_is_quantize_int_then_rel_error_bit_for_bit(n):
    """The oracle is one quantize_int and one rel_error per ratio (another path through numfmt:
    its own checks, chunking and sums); a quantizer written here checks both to rounding (its
    scale is c * amax / qmax, not amax * (c / qmax), so the last bits may differ). n spans one
    chunk, a partial last chunk, and less than a chunk."""
    rng = np.random.default_rng(7)
    for z in (rng.standard_t(2.5, n), rng.laplace(size=n) * 3e-3):
        for bits in range(2, 9):
            sweep = clip_sweep(z, bits, CLIPS)
            assert sweep == [rel_error(quantize_int(z, bits, clip=c).values, z) for c in CLIPS]
            hand = [np.linalg.norm(_hand_int(z, bits, c) - z) / np.linalg.norm(z) for c in CLIPS]
            np.testing.assert_allclose(sweep, hand, rtol=1e-9)


def test_clip_sweep_off_its_path_answers_as_quantize_int_and_rel_error():
    z = np.random.default_rng(3).standard_normal(4096)
    # float32, a 2-D array, squares in the subnormal range (numfmt's careful path), a list,
    # an integer clip ratio, and a tiny clip ratio whose x / scale overflows float64
    for x, clips in ((z.astype(np.float32), (1.0, 0.3)), (z.reshape(64, 64), (1.0, 0.3)),
                     (z * 1e-160, (1.0, 0.3)), (list(z[:64]), (1.0, 0.5)), (z, (1, 0.5)),
                     (z * 10, (3e-308, 1.0))):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            got = clip_sweep(x, 4, clips)
        assert got == [rel_error(quantize_int(x, 4, clip=c).values, x) for c in clips]
    with pytest.raises(ValueError, match="clip"):
        clip_sweep(z, 4, (1.5,))
    with pytest.raises(ValueError, match="all zero"):
        clip_sweep(np.zeros(1024), 4, (1.0,))
    with pytest.raises(ValueError, match="bits"):
        clip_sweep(z, 1, (1.0,))
    with pytest.raises(ValueError):
        clip_sweep(np.array([1.0, np.nan]), 4, (1.0,))
