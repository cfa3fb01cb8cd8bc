"""Hostile inputs, grouped by the kind of fault (one section each).

Every reproducer of a fault found stays here with the right value or the clear error it gets,
and each kind is checked beyond the one input: over every flag, every accepted small format,
every storage dtype, numpy and numfmt.torch alike. Expected values come from plain reference
code written in this file (exact fractions, a brute-force nearest search), numpy's own float32
conversion, or hand derivations stated next to them.
"""

from __future__ import annotations

import itertools
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import numfmt as nf
import numfmt.torch as nt
from numfmt import (E8M0, FP4_E2M1, FP8_E4M3, FP8_E5M2, FP16, FP32, FloatFormat, anatomy,
                    block_quantize, dequantize_affine, int_range, mx_quantize, nvfp4_quantize,
                    quantize_affine, quantize_int, qat, rel_error, scaling, tensor_scaled)
from numfmt.packing import (absmax_dequantize, absmax_quantize, double_quantize, gptq_quantize,
                            marlin_fp8_pack, nf4_levels, pack_nibbles, qlora_quantize,
                            unpack_nibbles)
from numfmt.torch.qat import ActivationFakeQuant, fake_quantize_int
from numfmt import rounding
from numfmt.torch import gemm

FMAX = np.finfo(np.float64).max
TINY = np.finfo(np.float64).tiny  # 2**-1022
SUB = 5e-324                      # 2**-1074, float64's smallest subnormal
PROPS = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


# ----------------------------------------------------------------- reference: a format's grid
def ref_values(f: FloatFormat) -> np.ndarray:
    """Every finite value of ``f``, ascending, from the field definitions with exact fractions.

    Written plainly from the specification of the three conventions (module docstring of
    numfmt.formats; OCP OFP8 rev 1.0 and IEEE 754 for "fn" and "ieee"), not from numfmt.
    """
    vals = set()
    top = 2**f.exp_bits - 1
    for e in range(2**f.exp_bits):
        for m in range(2**f.man_bits):
            if f.specials == "ieee" and e == top:
                continue  # Inf and NaN
            if f.specials == "fn" and e == top and m == 2**f.man_bits - 1:
                continue  # the single NaN per sign
            frac = Fraction(m, 2**f.man_bits)
            if e == 0 and f.subnormals:
                v = frac * Fraction(2) ** (1 - f.bias)
            else:
                v = (1 + frac) * Fraction(2) ** (e - f.bias)
            vals.add(v)
            if f.signed:
                vals.add(-v)
    return np.array(sorted(float(v) for v in vals))


def small_formats():
    """Every FloatFormat the constructor accepts with 1-4 exponent and 0-3 mantissa bits."""
    out = []
    for e, m, sp, signed, sub in itertools.product(range(1, 5), range(0, 4), ("ieee", "fn", "none"),
                                                    (True, False), (True, False)):
        for bias in range(-3, 2**e + 2):
            try:
                out.append(FloatFormat(f"E{e}M{m}b{bias}{sp}{int(signed)}{int(sub)}", e, m, bias,
                                       sp, signed=signed, subnormals=sub))
            except ValueError:
                pass
    return out


SMALL = small_formats()


# ==================================================================== scales in FP16 / FP32 storage
@pytest.mark.parametrize("call, dtype_name", [
    (lambda: gptq_quantize(np.full((8, 8), 1e6), group_size=8), "float16"),
    (lambda: gptq_quantize(np.full((8, 8), 1e-9), group_size=8), "float16"),
    (lambda: marlin_fp8_pack(np.full((64, 128), 1e300)), "float16"),
    (lambda: marlin_fp8_pack(np.full((64, 128), 1e-12)), "float16"),
    (lambda: absmax_quantize(np.array([1e300, 1.0]), nf4_levels()), "float32"),
    (lambda: absmax_quantize(np.array([1e-50, 0.0]), nf4_levels()), "float32"),
    (lambda: qlora_quantize(np.array([1e39, 1.0])), "float32"),
    (lambda: double_quantize(np.array([1e300, 1.0])), "float32"),
    (lambda: double_quantize(np.array([1e-44, 0.0]), center=False, code="int8"), "float32"),
    (lambda: double_quantize(np.array([1e-40, 1e-40]), code="dynamic"), "float32"),
    (lambda: gemm.fp8_quantize(np.array([[1e300, 1.0]])), "float32"),
    (lambda: gemm.fp8_quantize(np.array([[1e-50, 1e-51]])), "float32"),
    (lambda: gemm.fp8_quantize(np.array([[1e300, 1.0]]), granularity="row"), "float32"),
])
def test_scale_storage_overflow_and_flush_refused(call, dtype_name):
    with pytest.raises(ValueError, match=f"does not fit {dtype_name}"):
        call()


def test_fp8_linear_names_the_operand_whose_scale_overflows():
    with pytest.raises(ValueError, match="scale of x"):
        gemm.fp8_linear(np.full((16, 16), 1e300), np.ones((16, 16)))
    with pytest.raises(ValueError, match="scale of w"):
        gemm.fp8_linear(np.ones((16, 16)), np.full((16, 16), 1e300))


def test_qlora_overflow_message_names_x_not_scales():
    with pytest.raises(ValueError) as e:
        qlora_quantize(np.array([1e39, 1.0]))
    assert "scales contains" not in str(e.value) and "1e+39" in str(e.value)


@PROPS
@given(st.integers(-200, 200))
def test_stored_scales_are_finite_and_non_zero_or_refused(k):
    """Any magnitude 2**k: the stored scale decodes to a positive finite number, or a clear
    error is raised (never Inf, NaN or a flush to 0)."""
    w = np.ldexp(np.linspace(0.5, 1.0, 64 * 128).reshape(64, 128), k)
    try:
        fw = marlin_fp8_pack(w)
    except ValueError as e:
        assert "does not fit float16" in str(e)
    else:
        s = fw.scales.astype(np.float64)
        assert np.isfinite(s).all() and (s > 0).all()
    try:
        q = absmax_quantize(w.ravel(), nf4_levels())
    except ValueError as e:
        assert "does not fit float32" in str(e)
    else:
        back = absmax_dequantize(q)
        assert np.isfinite(back).all() and (np.abs(back).max() > 0)


# ================================================================== formats the constructor accepts
def test_e3m0_keeps_nan_and_rounds_to_nearest():
    f = FloatFormat("E3M0", 3, 0, 3, "none")
    # values are 0, 2^-2, ..., 2^4 (subnormal 2^-2 = 0.25, no mantissa); 0.15 is nearer 0.25.
    out = f.round(np.array([np.nan, 0.15]))
    assert np.isnan(out[0]) and out[1] == 0.25
    t = nt.round(torch.tensor([np.nan, 0.15], dtype=torch.float64), f).numpy()
    assert np.array_equal(out, t, equal_nan=True)


def test_format_without_a_normal_binade_is_refused():
    with pytest.raises(ValueError, match="no normal binade"):
        FloatFormat("E1M2", 1, 2, 0, "ieee")


def test_ieee_format_without_mantissa_is_refused():
    with pytest.raises(ValueError, match="man_bits >= 1"):
        FloatFormat("E3M0i", 3, 0, 3, "ieee")


def test_max_exact_integer_of_a_format_without_1():
    # values 0, 4, 8, 12, ... (bias -2: smallest subnormal 2^(1+2-1) = 4): 1 is not a value.
    assert anatomy.max_exact_integer(FloatFormat("Xpos", 2, 1, -2, "none")) == 0


def test_small_format_scan_is_not_empty():
    assert len(SMALL) > 500  # every combination above that the constructor accepts


@pytest.mark.parametrize("f", SMALL, ids=lambda f: f.name)
def test_every_accepted_small_format_matches_its_reference_grid(f):
    ref = ref_values(f)
    vals = np.unique(f.decode(np.arange(2**f.bits))[np.isfinite(f.decode(np.arange(2**f.bits)))]
                     + 0.0)
    assert np.array_equal(vals, ref)
    assert f.max_value == ref.max()
    assert np.array_equal(f.round(ref), ref)                   # the grid is fixed by round
    assert np.array_equal(f.decode(f.encode(ref)), ref)        # and survives encode/decode
    if f.signed and f.subnormals:
        n = 0
        while n + 1 <= ref.max() and np.isin(float(n + 1), ref):
            n += 1
        assert anatomy.max_exact_integer(f) == n


@st.composite
def format_and_inputs(draw):
    f = draw(st.sampled_from(SMALL))
    ref = ref_values(f)
    pos = ref[ref > 0] if not f.signed else ref
    lo_hi = draw(st.lists(st.tuples(st.integers(0, len(pos) - 1),
                                    st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.49999, 0.50001])),
                          min_size=1, max_size=20))
    xs = []
    for i, t in lo_hi:
        a = pos[i]
        b = pos[i + 1] if i + 1 < len(pos) else a * 3
        xs.append(a + t * (b - a))
    return f, ref, np.array(xs)


@PROPS
@given(format_and_inputs())
def test_round_is_nearest_idempotent_monotone_and_torch_equal(case):
    """For every accepted small format: round is nearest (brute force), idempotent, monotone,
    keeps NaN, and numfmt.torch gives the same bits."""
    f, ref, x = case
    r = f.round(x)
    if not f.signed:
        x = x[x > 0]
        r = r[: x.size] if x.size else r[:0]
        r = f.round(x)
    dist = np.abs(ref[None, :] - x[:, None]).min(axis=1)
    assert np.array_equal(np.abs(r - x), dist)                 # nearest
    assert np.array_equal(f.round(r), r)                       # idempotent
    order = np.argsort(x, kind="stable")
    assert (np.diff(r[order]) >= 0).all()                      # monotone
    t = nt.round(torch.from_numpy(x), f).numpy()
    assert np.array_equal(r, t) and np.array_equal(np.signbit(r), np.signbit(t))
    if f.has_nan or f.signed:
        withnan = f.round(np.array([np.nan, x[0]]))
        assert np.isnan(withnan[0])                            # NaN stays NaN


def test_e11_stochastic_numpy_equals_torch_below_pow2_range():
    f = FloatFormat("E11M4", 11, 4, 1023, "ieee")   # stochastic quantum 2^-1026 (subnormal)
    x = np.array([3e-309, 1e-310, 2.2e-308, 5e-324])
    u = np.random.default_rng(0).random(x.size)
    a = f.round(x, mode="stochastic", rng=0)
    b = nt.round(torch.from_numpy(x), f, mode="stochastic", u=u).numpy()
    assert np.array_equal(a, b)
    assert a[0] != 0.0  # 3e-309 is 2^-1026 * 1.07e4 steps: never 0


# ============================================================================ scales beyond float64
def test_tiny_clip_is_not_the_identity():
    with pytest.raises(ValueError, match="below float64's smallest normal"):
        quantize_int(np.array([50.0, -20.0]), 8, clip=1e-323)
    with pytest.raises(ValueError, match="below float64's smallest normal"):
        nt.quantize_int(np.array([50.0, -20.0]), 8, clip=1e-323)


def test_tiny_clip_that_does_not_underflow_warns_nothing():
    with pytest.raises(ValueError):  # scale 2e-323 is subnormal: refused, no overflow warning
        quantize_int(np.array([1.0, 2.0]), 2, clip=1e-323)
    q = quantize_int(np.array([1.0, 2.0]), 8, clip=1e-300)  # x / scale = 1.27e302: finite
    assert q.codes.tolist() == [127, 127]


def test_subnormal_tensor_is_refused_not_flushed():
    for f in (quantize_int, nt.quantize_int):
        with pytest.raises(ValueError, match="smallest normal"):
            f(np.array([SUB, 2 * SUB]), 8)


def test_fmax_range_asymmetric_grid_refused():
    # grid (q - 2) * 2FMAX/3 for q = 0: -4FMAX/3 is beyond float64
    for f in (quantize_int, nt.quantize_int):
        with pytest.raises(ValueError, match="beyond float64's range"):
            f(np.array([FMAX, -FMAX]), 2, symmetric=False)


def _near_fmax(v: float) -> bool:
    """Within 2 ulps of float64's max, finite: the nearest grid value to FMAX under a scale
    that is itself rounded (the grid point 448 * s or 127 * s need not be FMAX exactly)."""
    return np.isfinite(v) and abs(v - FMAX) <= 2 * 2.0**971  # ulp of FMAX: 2^(1023-52)


def test_fmax_symmetric_is_finite():
    q = quantize_int(np.array([FMAX, -FMAX, 1.0]), 8)
    assert _near_fmax(q.values[0]) and q.values[1] == -q.values[0] and q.values[2] == 0.0
    assert q.values[0] == 127 * q.scale[0]  # on the grid


def test_tensor_scaled_and_exact_blocks_at_fmax():
    r = tensor_scaled(np.array([FMAX]), FP8_E4M3)
    assert _near_fmax(r.values[0]) and r.values[0] == 448 * r.tensor_scale
    assert nt.tensor_scaled(np.array([FMAX]), FP8_E4M3).values.tolist() == r.values.tolist()
    b = block_quantize(np.array([FMAX, 1.0]), FP8_E4M3, 2, "exact")
    # 1.0 is 2^-1024 of the block max: below E4M3's range under this scale, it flushes to 0
    assert _near_fmax(b.values[0]) and b.values[1] == 0.0 and b.clipped == 0.0
    assert np.array_equal(b.values, nt.block_quantize(np.array([FMAX, 1.0]), FP8_E4M3, 2,
                                                      "exact").values.numpy())


@PROPS
@given(st.integers(-1074, 1023), st.sampled_from([FP8_E4M3, FP8_E5M2, FP4_E2M1]))
def test_tensor_scaled_never_overflows_or_clips_silently(k, elem):
    x = np.ldexp(np.array([1.0, -0.75, 0.3, 0.0]), k)
    x[0] = min(x[0], FMAX) if np.isfinite(x[0]) else FMAX
    r = tensor_scaled(x, elem)
    assert np.isfinite(r.values).all()
    if r.tensor_scale > 0:
        # the top element maps within max_value (up to float64 rounding of x / s)
        assert np.abs(x).max() / r.tensor_scale <= elem.max_value * (1 + 4 * 2**-52)
        assert np.array_equal(r.values, nt.tensor_scaled(x, elem).values.numpy())


@PROPS
@given(st.integers(-1074, 1023), st.sampled_from([2, 4, 8, 16]), st.booleans(),
       st.sampled_from([1.0, 0.5, 1e-3, 1e-300, 1e-323]),
       st.lists(st.floats(-1, 1), min_size=1, max_size=12))
def test_quantize_int_at_every_magnitude_is_right_or_refused(k, bits, symmetric, clip, base):
    """x = base * 2**k for every binade of float64: finite values on the grid, codes in range,
    error at most half a step inside the clip range, numpy == torch; or one clear ValueError
    from both."""
    with np.errstate(over="ignore"):
        x = np.ldexp(np.array(base), k)
    assume(np.isfinite(x).all())
    try:
        q = quantize_int(x, bits, symmetric, clip=clip)
    except ValueError as e:
        assert "smallest normal" in str(e) or "beyond float64" in str(e)
        with pytest.raises(ValueError):
            nt.quantize_int(x, bits, symmetric, clip=clip)
        return
    qmin, qmax = int_range(bits, symmetric)
    assert np.isfinite(q.values).all() and np.isfinite(q.scale).all()
    assert ((q.codes >= qmin) & (q.codes <= qmax)).all()
    assert np.array_equal(q.values, (q.codes - q.zero_point) * q.scale)
    if clip == 1.0:
        # every x lies inside the calibrated range: nearest code, within half a step (plus
        # the rounding of x / scale, one float64 ulp of the quotient)
        assert (np.abs(q.values - x) <= q.scale * (0.5 + 2**-40)).all()
    t = nt.quantize_int(x, bits, symmetric, clip=clip)
    assert np.array_equal(q.values, t.values.numpy()) and np.array_equal(q.codes, t.codes.numpy())


# ================================================================================== int64 code wrap
def test_quantize_affine_huge_code_range_refused():
    for f in (quantize_affine, nt.quantize_affine):
        with pytest.raises(ValueError, match=r"2\*\*53"):
            f(np.array([1e300]), 1.0, 0, -2**63, 2**63 - 1)


@PROPS
@given(st.integers(-2**53, 2**53), st.floats(-1e300, 1e300))
def test_quantize_affine_codes_at_the_exact_limit_never_wrap(qmax, x):
    qmin = -abs(qmax)
    qmax = abs(qmax)
    c = quantize_affine(np.array([x]), 1.0, 0, qmin, qmax)[0]
    assert qmin <= c <= qmax
    assert c == (qmax if x >= qmax else qmin if x <= qmin else int(np.rint(x)))


# =============================================================================== booleans and flags
FLAG_CALLS = [
    ("symmetric", lambda v: quantize_int(np.ones(3), 8, symmetric=v)),
    ("symmetric", lambda v: nt.quantize_int(np.ones(3), 8, symmetric=v)),
    ("symmetric", lambda v: int_range(8, symmetric=v)),
    ("symmetric", lambda v: qat.calibrate_minmax(np.ones(3), 8, symmetric=v)),
    ("symmetric", lambda v: qat.qparams_from_range(-1.0, 1.0, 8, symmetric=v)),
    ("saturate", lambda v: FP8_E4M3.round(np.ones(3), saturate=v)),
    ("saturate", lambda v: FP8_E4M3.encode(np.ones(3), saturate=v)),
    ("saturate", lambda v: nt.round(np.ones(3), FP8_E4M3, saturate=v)),
    ("saturate", lambda v: nt.encode(np.ones(3), FP8_E4M3, saturate=v)),
    ("signed", lambda v: FloatFormat("X", 4, 3, 7, "fn", signed=v)),
    ("subnormals", lambda v: FloatFormat("X", 4, 3, 7, "fn", subnormals=v)),
    ("pad", lambda v: pack_nibbles(np.array([1, 2, 3]), pad=v)),
    ("double_quant", lambda v: qlora_quantize(np.ones(64), double_quant=v)),
    ("center", lambda v: double_quantize(np.ones(4), center=v)),
    ("signed", lambda v: double_quantize(np.ones(4), signed=v)),
    ("emulate", lambda v: gemm.scaled_mm(
        torch.ones(16, 16).to(torch.float8_e4m3fn), torch.ones(16, 16).to(torch.float8_e4m3fn).t(),
        torch.tensor(1.0), torch.tensor(1.0), emulate=v)),
]


@pytest.mark.parametrize("bad", ["False", "no", None, 0, 1, 1.0, np.array(True)])
@pytest.mark.parametrize("name, call", FLAG_CALLS, ids=[f"{n}-{i}" for i, (n, _) in
                                                        enumerate(FLAG_CALLS)])
def test_every_flag_refuses_what_is_not_a_bool(name, call, bad):
    if name == "emulate" and bad is None:
        return  # scaled_mm's emulate=None documents "choose by hardware"
    with pytest.raises(TypeError, match=f"{name} must be True or False"):
        call(bad)


@pytest.mark.parametrize("name, call", FLAG_CALLS)
def test_every_flag_accepts_python_and_numpy_bools(name, call):
    for v in (True, np.bool_(True)):
        try:
            call(v)
        except (TypeError) as e:
            pytest.fail(f"{name}={v!r} refused: {e}")
        except ValueError:
            pass  # a refusal of the combination (e.g. center without signed), not of the type


def test_string_and_none_flags_are_refused():
    assert int_range(8, symmetric=False) == (0, 255)
    with pytest.raises(TypeError, match="symmetric"):
        quantize_int(np.array([1.0, -2.0]), 8, symmetric="False")
    with pytest.raises(TypeError, match="symmetric"):
        quantize_int(np.array([1.0, -2.0]), 8, symmetric=None)
    with pytest.raises(TypeError, match="saturate"):
        nt.round(np.array([1e6]), FP8_E4M3, saturate="no")
    with pytest.raises(TypeError, match="saturate"):
        nt.round(np.array([1e6]), FP8_E4M3, saturate=None)


# ================================================================================= QParams and Adam
def test_hand_built_qparams_with_qmin_above_qmax():
    qp = qat.QParams(np.array([0.1]), np.array([0]), 5, 3)
    with pytest.raises(ValueError, match=r"qmin \(5\) must not exceed qmax \(3\)"):
        qat.fake_quantize(np.array([1.0]), qp)


def test_adam_refuses_negative_second_moment_and_infinite_lr():
    one, half, z = np.array([1.0]), np.array([0.5]), np.zeros(1)
    with pytest.raises(ValueError, match="v must be non-negative"):
        qat.adam_update(one, z, z, np.array([-1.0]), 1, 0.1)
    with pytest.raises(ValueError, match="lr=inf"):
        qat.adam_update(one, half, z, z, 1, float("inf"))
    with pytest.raises(ValueError, match="eps=inf"):
        qat.adam_update(one, half, z, z, 1, 0.1, eps=float("inf"))
    with pytest.raises(ValueError, match="m contains"):
        qat.adam_update(one, half, np.array([np.nan]), z, 1, 0.1)


def test_adam_huge_step_number():
    # t = 10**400: the bias corrections 1 - beta**t are 1, so m_hat = 0.05 and
    # v_hat = 0.00025; p = 1 - 0.1 * 0.05 / (sqrt(0.00025) + 1e-8) (Kingma and Ba, Alg. 1).
    p, m, v = qat.adam_update(np.array([1.0]), np.array([0.5]), np.zeros(1), np.zeros(1),
                              10**400, 0.1)
    assert p[0] == pytest.approx(1 - 0.1 * 0.05 / (np.sqrt(0.00025) + 1e-8), rel=1e-15)


@PROPS
@given(st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(-1e6, 1e6), st.floats(-1e12, 1e12),
       st.integers(1, 10**30), st.floats(0, 1e300), st.floats(0, 1))
def test_adam_update_is_finite_or_refused(p, g, m, v, t, lr, beta1):
    """Any finite state and hyper-parameters: a finite update, or a ValueError (never NaN)."""
    try:
        out = qat.adam_update(np.array([p]), np.array([g]), np.array([m]), np.array([v]), t,
                              lr, beta1)
    except ValueError as e:
        assert v < 0 or lr == 0 or beta1 == 1 or "overflows" in str(e)
    else:
        assert all(np.isfinite(a).all() for a in out)


def test_adam_overflowing_update_refused():
    # m_hat = 1e6, v_hat = 1e12 -> step 1e300 * 1e6 / 1e6 = 1e300 fine; with v = 0 the
    # step is 1e300 * 1e6 / 1e-8 = 1e314: beyond float64
    with pytest.raises(ValueError, match="overflows"):
        qat.adam_update(np.array([0.0]), np.array([0.0]), np.array([1e7]), np.zeros(1), 1,
                        1e300, beta1=0.9)


def test_qatadam_master_beyond_fp32():
    with pytest.raises(ValueError, match="FP32 master"):
        qat.QATAdam(np.array([1e308, 1.0]), lambda w: qat.fake_quantize_weight(w, "INT8"))


# ============================================================================ inputs beyond float64
def test_longdouble_and_big_ints_are_not_rounded_twice():
    with pytest.raises(ValueError, match="float64 cannot hold exactly"):
        FP4_E2M1.round(np.longdouble(2.5) + np.longdouble(2) ** -60)
    with pytest.raises(ValueError, match=r"2\*\*53"):
        FP32.round(np.int64(2**60 + 2**36 + 1))
    with pytest.raises(ValueError, match="integer"):
        FP16.round(10**30)
    with pytest.raises(ValueError, match=r"2\*\*53"):
        nt.round(torch.tensor([2**60 + 1]), FP16)
    # a long double that float64 holds exactly is fine: 2.5 is a tie, to even: 2.0
    assert FP4_E2M1.round(np.longdouble(2.5)) == 2.0


@PROPS
@given(st.integers(-2**63, 2**63 - 1))
def test_int64_rounds_once_or_is_refused(n):
    """Below 2**53 the result is numpy's own float32 conversion (one rounding); above, refused."""
    if abs(n) <= 2**53:
        assert FP32.round(np.int64(n)) == float(np.float32(np.int64(n)))
        assert nt.round(torch.tensor([n]), FP32).item() == float(np.float32(np.int64(n)))
    else:
        with pytest.raises(ValueError):
            FP32.round(np.int64(n))
        with pytest.raises(ValueError):
            nt.round(torch.tensor([n]), FP32)


def test_codes_beyond_int64():
    for dec in (FP8_E4M3.decode, lambda c: nt.decode(c, FP8_E4M3)):
        with pytest.raises(ValueError, match="1180591620717411303424"):
            dec([2**70])
    with pytest.raises(ValueError, match="18446744073709551615"):
        pack_nibbles(np.array([2**64 - 1, 0], dtype=np.uint64))
    with pytest.raises(ValueError, match="got 256"):
        FP8_E4M3.decode([256])


# ================================================================================ clipped is honest
def test_tensor_scaled_subnormal_scale_does_not_saturate():
    x = np.array([1900 * SUB, 10 * SUB])
    r = tensor_scaled(x, FP8_E4M3)
    # the scale is moved up one subnormal step (2e-323 -> 2.5e-323): 1900/5 = 380 <= 448
    assert r.tensor_scale == 5 * SUB and r.clipped == 0.0
    assert np.abs(x).max() / r.tensor_scale <= 448
    # 380 rounds to 384 in E4M3 (spacing 32 in [256, 448]); 10/5 = 2 is exact
    assert r.values.tolist() == [384 * 5 * SUB, 2 * 5 * SUB]


@PROPS
@given(st.lists(st.integers(1, 4000), min_size=1, max_size=8))
def test_subnormal_exact_block_scales_report_no_hidden_clipping(ks):
    x = np.array(ks, dtype=np.float64) * SUB
    x = np.concatenate([x, np.zeros((-x.size) % 4)])
    r = block_quantize(x, FP8_E4M3, 4, "exact")
    y_max = [np.abs(b).max() / s for b, s in zip(x.reshape(-1, 4), r.scales) if s > 0]
    assert all(y <= 448 * (1 + 4 * 2**-52) for y in y_max)
    assert r.clipped == 0.0


# ======================================================================================= 0-d inputs
@pytest.mark.parametrize("call", [
    lambda: mx_quantize(3.0, FP4_E2M1, 1),
    lambda: nt.mx_quantize(3.0, FP4_E2M1, 1),
    lambda: block_quantize(np.float64(3.0), FP8_E4M3, 1, "exact"),
    lambda: nvfp4_quantize(np.float64(3.0), 1),
    lambda: tensor_scaled(3.0, FP8_E4M3),
    lambda: nt.tensor_scaled(3.0, FP8_E4M3),
])
def test_block_results_keep_a_0d_shape(call):
    r = call()
    assert tuple(r.values.shape) == () and tuple(r.elements.shape) == ()


SHAPE_CALLS = [
    ("round", lambda x: FP8_E4M3.round(x), lambda x: nt.round(x, FP8_E4M3)),
    ("encode", lambda x: FP8_E4M3.encode(x), lambda x: nt.encode(x, FP8_E4M3)),
    ("decode", lambda x: FP8_E4M3.decode(FP8_E4M3.encode(x)),
     lambda x: nt.decode(FP8_E4M3.encode(x), FP8_E4M3)),
    ("quantize_int", lambda x: quantize_int(x, 8).values, lambda x: nt.quantize_int(x, 8).values),
    ("codes", lambda x: quantize_int(x, 8).codes, lambda x: nt.quantize_int(x, 8).codes),
    ("quantize_affine", lambda x: quantize_affine(x, 0.5), lambda x: nt.quantize_affine(x, 0.5)),
    ("dequantize_affine", lambda x: dequantize_affine(x, 0.5),
     lambda x: nt.dequantize_affine(x, 0.5)),
    ("tensor_scaled", lambda x: tensor_scaled(x, FP8_E4M3).values,
     lambda x: nt.tensor_scaled(x, FP8_E4M3).values),
    ("mx", lambda x: mx_quantize(x, FP8_E4M3, 1).values,
     lambda x: nt.mx_quantize(x, FP8_E4M3, 1).values),
    ("elements", lambda x: mx_quantize(x, FP8_E4M3, 1).elements,
     lambda x: nt.mx_quantize(x, FP8_E4M3, 1).elements),
    ("fake_block", lambda x: qat.fake_quantize_block(x, FP4_E2M1, 1).mask, None),
    ("fake_float", lambda x: qat.fake_quantize_float(x, FP8_E4M3).mask, None),
    ("fake_weight", lambda x: qat.fake_quantize_weight(x, "INT8").values, None),
]


@PROPS
@given(st.sampled_from([(), (1,), (3,), (2, 4), (1, 1, 2)]), st.data())
def test_elementwise_results_keep_the_input_shape(shape, data):
    """Every elementwise result has the shape of its input, 0-d included, numpy and torch."""
    x = np.asarray(data.draw(st.lists(st.sampled_from([0.0, 0.3, -1.7, 2.5, 100.0, -448.0]),
                                      min_size=int(np.prod(shape)),
                                      max_size=int(np.prod(shape)))), dtype=np.float64)
    x = x.reshape(shape)
    assume(np.abs(x).max() > 0 if x.size else True)
    for name, f, g in SHAPE_CALLS:
        assert np.shape(f(x)) == shape, name
        if g is not None:
            assert tuple(g(x).shape) == shape, name


def test_fake_quantize_block_0d_shapes_agree():
    fq = qat.fake_quantize_block(3.0, FP4_E2M1, 1)
    assert fq.values.shape == () == fq.mask.shape


def test_decode_of_0d_is_a_0d_array():
    d = FP8_E4M3.decode(np.array(5))
    assert isinstance(d, np.ndarray) and d.shape == () and d == 5 * 2.0**-9  # subnormal 5/8*2^-6
    assert nt.decode(np.array(5), FP8_E4M3).dim() == 0


@pytest.mark.parametrize("scalar", [3.0, np.float64(3.0), 3, np.int32(3)])
@pytest.mark.parametrize("call", [
    lambda s: FP8_E4M3.round(s), lambda s: FP8_E4M3.encode(s), lambda s: nt.round(s, FP8_E4M3),
    lambda s: quantize_int(s, 8), lambda s: nt.quantize_int(s, 8),
    lambda s: quantize_affine(s, 0.5), lambda s: dequantize_affine(s, 0.5),
    lambda s: mx_quantize(s, FP4_E2M1, 1), lambda s: tensor_scaled(s, FP8_E4M3),
    lambda s: rel_error(s, 2.0), lambda s: nf.sqnr_db(s, 2.0),
    lambda s: scaling.scale_from_amax(s, FP8_E4M3), lambda s: anatomy.spacing(FP16, s),
    lambda s: qat.fake_quantize_float(s, FP8_E4M3), lambda s: qat.round_nearest_even(s),
    lambda s: qat.round_stochastic(s, rng=0), lambda s: qat.calibrate_minmax(s, 8),
    lambda s: qat.fake_quantize(s, qat.calibrate_minmax(s, 8)),
    lambda s: qat.fake_quantize_weight(s, "INT8"),
    lambda s: scaling.quantize_with_scale(s, FP8_E4M3, 0.5),
    lambda s: rounding.round_to_format(s, FP16, "half_away"),
    lambda s: anatomy.neighbours(FP8_E4M3, s), lambda s: anatomy.bit_fields(FP8_E4M3, s),
    lambda s: nt.encode(s, FP8_E4M3), lambda s: nt.tensor_scaled(s, FP8_E4M3),
    lambda s: nt.quantize_affine(s, 0.5), lambda s: nt.dequantize_affine(s, 0.5),
    lambda s: nt.rel_error(s, 2.0), lambda s: nt.block_quantize(s, FP8_E4M3, 1, "exact"),
    lambda s: FP8_E4M3.decode(int(s)), lambda s: nt.decode(int(s), FP8_E4M3),
])
def test_array_like_functions_accept_scalars(call, scalar):
    call(scalar)


# ====================================================================================== torch edges
@pytest.mark.parametrize("call", [
    lambda t: nt.quantize_int(t, 8), lambda t: nt.mx_quantize(t, FP4_E2M1),
    lambda t: nt.rel_error(t, t), lambda t: nt.quantize_affine(t, 0.1),
    lambda t: nt.round(t, FP8_E4M3), lambda t: nt.encode(t, FP8_E4M3),
    lambda t: nt.decode(t.to(torch.int64), FP8_E4M3), lambda t: nt.nvfp4_quantize(t),
])
def test_meta_tensors_get_a_clear_error(call):
    with pytest.raises(ValueError, match="meta"):
        call(torch.empty(32, device="meta"))


def test_float4_tensor_is_refused_with_a_hint():
    x = torch.zeros(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(TypeError, match="float4_e2m1fn_x2.*unpack"):
        nt.round(x, FP8_E4M3)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CUDA-less answer")
@pytest.mark.parametrize("call", [
    lambda: nt.round(np.ones(3), FP8_E4M3, device="cuda"),
    lambda: nt.decode(np.ones(3, int), FP8_E4M3, device="cuda"),
    lambda: nt.quantize_int(np.ones(3), 8, device="cuda"),
    lambda: nt.mx_quantize(np.ones(32), FP4_E2M1, device="cuda:0"),
])
def test_cuda_without_cuda(call):
    with pytest.raises(ValueError, match="CUDA is not available"):
        call()


def test_bad_device_names():
    with pytest.raises(ValueError, match="not a torch device"):
        nt.round(np.ones(3), FP8_E4M3, device="gpu")
    with pytest.raises(TypeError, match="device must be"):
        nt.round(np.ones(3), FP8_E4M3, device=0.5)


def test_grad_requiring_tensors_warn_nothing_and_have_zero_gradient():
    x = torch.ones(16, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert nt.nvfp4_quantize(x).values.shape == (16,)
        assert nt.tensor_scaled(x, FP8_E4M3).values.shape == (16,)
        assert rel_error(torch.ones(3, requires_grad=True), np.full(3, 2.0)) == 0.5
    x = torch.tensor([0.3, -1.7, 2.2], dtype=torch.float64, requires_grad=True)
    nt.round(x, FP8_E4M3).sum().backward()  # documented: a step function's gradient, 0
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_numpy_block_quantized_in_torch_gemm():
    q = mx_quantize(np.ones((2, 32)), FP4_E2M1)
    with pytest.raises(TypeError, match="numfmt.torch BlockQuantized"):
        gemm.block_scaled_mm(q, q)
    from numfmt.packing import pack_block_fp4
    with pytest.raises(TypeError, match="numfmt.torch.blocks.BlockQuantized"):
        pack_block_fp4(nt.nvfp4_quantize(np.ones(16)), "nvfp4")


# ======================================================================= messages name the argument
def test_torch_generator_message_names_generator():
    with pytest.raises(TypeError, match="generator must be a torch.Generator"):
        nt.round(np.ones(3), FP8_E4M3, mode="stochastic", generator=np.random.default_rng(0))


@pytest.mark.parametrize("rng", [1.5, torch.Generator(), "seed", -1])
def test_rng_message_names_rng(rng):
    with pytest.raises((TypeError, ValueError), match="rng must be"):
        FP8_E4M3.round(np.ones(3), mode="stochastic", rng=rng)


def test_messages_name_the_argument():
    for signed in ("no", None):
        with pytest.raises(TypeError, match="signed must be True or False"):
            FloatFormat("X", 4, 3, 7, "fn", signed=signed)
    for g in (8.0, None):
        with pytest.raises(TypeError, match="group_size must be an integer"):
            gptq_quantize(np.ones((8, 8)), group_size=g)
    with pytest.raises(TypeError, match="count must be an integer"):
        unpack_nibbles(np.array([0x21, 0x43], np.uint8), count=3.0)
    with pytest.raises(ValueError, match=r"margin = 1099511627776"):
        scaling.scale_from_amax(1.0, FP8_E4M3, margin=2**40)


@pytest.mark.parametrize("call, name", [
    (lambda: qat.fake_quantize_weight(np.array([1.0, np.nan]), "INT8"), "w"),
    (lambda: qat.fake_quantize_weight(np.array([1.0, np.inf] * 16), "MXFP4"), "w"),
    (lambda: gemm.int8_linear(np.ones((16, 16)), np.full((16, 16), np.inf)), "w"),
    (lambda: gemm.block_scaled_linear(np.ones((2, 32)), np.full((2, 32), np.nan),
                                      nt.mx_quantize), "w"),
    (lambda: gemm.fp8_linear(np.ones((16, 16)), np.full((16, 16), np.nan)), "w"),
    (lambda: qat.QATAdam(np.array([np.nan]), lambda w: qat.fake_quantize_weight(w, "INT8")),
     "master"),
])
def test_non_finite_message_names_the_callers_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name} contains a non-finite value \((nan|inf)"):
        call()


def test_library_output_accepted_by_the_library():
    s = scaling.scale_from_amax(2.0, FP8_E4M3)   # 0-d ndarray, 2 / 448
    r = scaling.quantize_with_scale(np.array([1.0, 2.0]), FP8_E4M3, s)
    # 1 / (2/448) = 224 and 2 / (2/448) = 448 are E4M3 values: exact
    assert r.values.tolist() == [1.0, 2.0]


def test_mixed_bool_list_and_masked_array_refused():
    with pytest.raises(TypeError, match="mixes booleans"):
        FP8_E4M3.round([True, 2.5])
    with pytest.raises(TypeError, match="masked array"):
        FP8_E4M3.round(np.ma.masked_array([1.0, 1e6], mask=[False, True]))


# ====================================================================== validate, then change state
def test_activation_fake_quant_keeps_its_range_on_a_refused_batch():
    afq = ActivationFakeQuant(8)
    with pytest.raises(TypeError, match="floating-point"):
        afq(torch.tensor([1, 2, 3]))
    assert np.isnan(afq.lo.item()) and np.isnan(afq.hi.item())
    afq(torch.tensor([1.0, 3.0]))
    with pytest.raises(ValueError):
        afq(torch.tensor([1.0, float("nan")]))
    assert (afq.lo.item(), afq.hi.item()) == (1.0, 3.0)


@pytest.mark.parametrize("grad", [np.array([np.nan, 0.0]), np.array([1e300, 0.0]), np.ones(3)])
def test_qatadam_keeps_its_state_on_a_refused_step(grad):
    opt = qat.QATAdam(np.array([1.0, -1.0]), lambda w: qat.fake_quantize_weight(w, "INT8"),
                      lr=1e300 if grad[0] == 1e300 else 1e-3)
    before = (opt.master.copy(), opt.m.copy(), opt.v.copy(), opt.t, opt.view.copy())
    with pytest.raises(ValueError):
        opt.step(grad)
    after = (opt.master, opt.m, opt.v, opt.t, opt.view)
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


def test_qatadam_keeps_its_state_when_the_quantizer_raises():
    calls = []

    def quantize(w):
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("quantizer broke")
        return qat.fake_quantize_weight(w, "INT8")

    opt = qat.QATAdam(np.array([1.0, -1.0]), quantize)
    with pytest.raises(RuntimeError):
        opt.step(np.ones(2))
    assert opt.t == 0 and opt.master.tolist() == [1.0, -1.0] and not opt.m.any()


def test_fake_quantize_int_refuses_huge_code_range():
    with pytest.raises(ValueError, match=r"2\*\*53"):
        fake_quantize_int(torch.ones(3), 0.1, 0, -2**63, 2**63 - 1)


# ============================================================ warnings: none escape numfmt
SNAN = np.array([0x7FF0000000000001, 0], dtype=np.uint64).view(np.float64)


@pytest.mark.parametrize("f", [FP16, FP32, nf.BF16, FP8_E4M3, FP8_E5M2, nf.FP6_E2M3,
                               nf.FP6_E3M2, FP4_E2M1, E8M0], ids=lambda f: f.name)
def test_signalling_nan_warns_nothing(f):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = f.round(SNAN)
        s = f.round(SNAN, mode="stochastic", rng=0)
    assert np.isnan(r[0]) and np.isnan(s[0])


def test_overflowing_dequantize_and_tiny_clip_raise_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="beyond float64's range"):
            dequantize_affine(np.array([1e308]), 10.0)
        with pytest.raises(ValueError, match="beyond float64's range"):
            nt.dequantize_affine(np.array([1e308]), 10.0)
        with pytest.raises(ValueError):
            quantize_int(np.array([1.0, 2.0]), 2, clip=1e-323)


# --------------------------------------------------------------------- torch tensors in numpy's API
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn,
                                   torch.float8_e5m2, torch.int16, torch.float64])
def test_numpy_api_reads_torch_tensors_exactly(dtype):
    t = torch.tensor([1.5, -3.0, 40.0, 0.0]).to(dtype)
    ref = t.to(torch.float64).numpy()   # torch's own exact widening is the reference
    assert np.array_equal(FP16.round(t), ref)   # every value above is an FP16 value
    assert np.array_equal(quantize_int(t, 16).values, quantize_int(ref, 16).values)


def test_numpy_api_refuses_meta_and_packed_tensors():
    with pytest.raises(ValueError, match="meta tensor"):
        FP8_E4M3.round(torch.empty(3, device="meta"))
    with pytest.raises(TypeError, match="float4_e2m1fn_x2"):
        FP8_E4M3.round(torch.zeros(4, dtype=torch.uint8).view(torch.float4_e2m1fn_x2))
    with pytest.raises(TypeError, match="torch.bool"):
        quantize_int(torch.tensor([True, False]), 8)


# ------------------------------------------- no warning, no crash: every entry point, hostile pairs
HOSTILE = [0.0, -0.0, 1.0, SUB, 1e-310, FMAX, -FMAX, 1e39, 1e-46, np.inf, np.nan, SNAN[0]]
HOSTILE_X = [np.array([a, b] * 16) for a in HOSTILE for b in HOSTILE]


def _entry_points():
    fs = [nf.BF16, FP16, FP8_E4M3, FP8_E5M2, nf.FP6_E3M2, FP4_E2M1, E8M0]
    out = []
    for f in fs:
        out += [(f"{f.name}.round", lambda x, f=f: f.round(x)),
                (f"{f.name}.round_nonsat", lambda x, f=f: f.round(x, saturate=False)),
                (f"{f.name}.stochastic", lambda x, f=f: f.round(x, mode="stochastic", rng=0)),
                (f"{f.name}.encode", lambda x, f=f: f.encode(x)),
                (f"nt.{f.name}.round", lambda x, f=f: nt.round(x, f))]
    for e in (FP8_E4M3, FP4_E2M1):
        out += [(f"mx_{e.name}", lambda x, e=e: mx_quantize(x, e)),
                (f"exact_{e.name}", lambda x, e=e: block_quantize(x, e, 16, "exact")),
                (f"tensor_scaled_{e.name}", lambda x, e=e: tensor_scaled(x, e)),
                (f"fake_float_{e.name}", lambda x, e=e: qat.fake_quantize_float(x, e)),
                (f"with_scale_{e.name}", lambda x, e=e: scaling.quantize_with_scale(x, e, 1.0))]
    for bits, sym in itertools.product((2, 8), (True, False)):
        out += [(f"quantize_int_{bits}_{sym}", lambda x, b=bits, s=sym: quantize_int(x, b, s)),
                (f"nt.quantize_int_{bits}_{sym}",
                 lambda x, b=bits, s=sym: nt.quantize_int(x, b, s, "group", 8))]
    out += [
        ("nvfp4", nvfp4_quantize), ("nt.nvfp4", nt.nvfp4_quantize),
        ("quantize_affine", lambda x: quantize_affine(x, 1e-300)),
        ("dequantize_affine", lambda x: dequantize_affine(x, 1e10)),
        ("rel_error", lambda x: rel_error(x, x[::-1].copy())),
        ("absmax", lambda x: absmax_dequantize(absmax_quantize(x, nf4_levels()))),
        ("qlora", lambda x: qlora_quantize(x)),
        ("double_quantize", lambda x: double_quantize(np.abs(x))),
        ("gptq", lambda x: gptq_quantize(np.tile(x.reshape(8, 4), (1, 2)), group_size=8)),
        ("marlin", lambda x: marlin_fp8_pack(np.tile(x, (64, 4)))),
        ("fp8_quantize", lambda x: gemm.fp8_quantize(x.reshape(2, 16))),
        ("weight_INT8", lambda x: qat.fake_quantize_weight(x, "INT8")),
        ("weight_E4M3", lambda x: qat.fake_quantize_weight(x, "E4M3")),
        ("weight_NVFP4", lambda x: qat.fake_quantize_weight(x, "NVFP4")),
        ("percentile", lambda x: qat.calibrate_percentile(x, 8, 0.1)),
        ("round_nearest_even", qat.round_nearest_even),
        ("round_stochastic", lambda x: qat.round_stochastic(x, rng=0)),
        ("adam", lambda x: qat.adam_update(x, x, x, np.abs(x), 3, 0.1)),
        ("scale_from_amax", lambda x: scaling.scale_from_amax(np.abs(x), FP8_E4M3)),
        ("half_away", lambda x: rounding.round_to_format(x, FP16, "half_away")),
        ("toward_zero", lambda x: rounding.round_to_format(x, FP8_E4M3, "toward_zero")),
        ("sum_kahan", lambda x: rounding.sum_in_format(x, FP16, "kahan")),
        ("cumsum", lambda x: rounding.cumsum_in_format(x, nf.BF16)),
        ("spacing", lambda x: anatomy.spacing(FP16, x)),
        ("neighbours", lambda x: anatomy.neighbours(FP8_E4M3, x)),
    ]
    return out


@pytest.mark.parametrize("name, call", _entry_points(), ids=[n for n, _ in _entry_points()])
def test_hostile_pairs_give_a_value_or_a_clear_error_and_never_warn(name, call):
    """144 hostile pairs (zeros, float64 subnormals, +-max, FP32's limits, Inf, NaN and a
    signalling NaN): each call returns, or raises ValueError/TypeError; any numpy or torch
    warning is an error here, as in the project's pytest filter for numfmt's own code."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in HOSTILE_X:
            try:
                call(x.copy())
            except (ValueError, TypeError):
                pass


def test_signalling_nan_in_the_integer_helpers():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(qat.round_nearest_even(SNAN)[0])
        assert np.isnan(dequantize_affine(SNAN, 2.0)[0])


def test_weight_e4m3_at_fmax_is_finite():
    v = qat.fake_quantize_weight(np.array([FMAX, 1.0]), "E4M3").values
    assert _near_fmax(v[0])


def test_round_stochastic_rng_message():
    with pytest.raises(TypeError, match="rng must be"):
        qat.round_stochastic(np.ones(3), rng=1.5)
