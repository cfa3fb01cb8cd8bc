"""Block scaling (MX, NVFP4, general) against hand derivations and an ml_dtypes-based reference."""

import math
import warnings

import ml_dtypes
import numpy as np
import pytest

from numfmt import (E8M0, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, MX_ELEMENTS,
                    block_quantize, mx_quantize, nvfp4_quantize, tensor_scaled)
from numfmt._reference import reference_dtypes
from numfmt.blocks import saturated, scaled_round

ML = reference_dtypes(MX_ELEMENTS)  # the OCP MX element formats and their ml_dtypes twins
ML_MAX = {f: float(ml_dtypes.finfo(t).max) for f, t in ML.items()}


def ml_elem_round(fmt, y):
    """Round to ``fmt`` with ml_dtypes, saturating first (ml_dtypes' FP8 overflows to NaN/Inf)."""
    y = np.clip(y, -ML_MAX[fmt], ML_MAX[fmt])
    return y.astype(ML[fmt]).astype(np.float64)


def mx_reference(x, fmt, block, clamp=False):
    """OCP MX v1.0 section 6.3, written block by block with math.frexp and ml_dtypes
    (``clamp``: the scale exponent kept in E8M0's range 2^-127 .. 2^127, section 5)."""
    emax_elem = math.frexp(ML_MAX[fmt])[1] - 1
    out = np.empty_like(x)
    for i in range(0, x.size, block):
        b = x[i:i + block]
        amax = float(np.abs(b).max())
        e = math.frexp(amax)[1] - 1 - emax_elem
        scale = 2.0 ** (min(max(e, -127), 127) if clamp else e) if amax > 0 else 1.0
        out[i:i + block] = ml_elem_round(fmt, b / scale) * scale
    return out


def test_nvfp4_hand_case():
    # Tensor amax 2688 -> tensor scale 2688 / (6 * 448) = 1. Block scale E4M3(2688 / 6) = 448.
    # 2688 / 448 = 6 -> 6; -1000 / 448 = -2.23 -> E2M1 -2 -> -896; 0.5 / 448 -> 0.
    x = np.zeros(16)
    x[:3] = [2688.0, -1000.0, 0.5]
    r = nvfp4_quantize(x)
    assert r.values.tolist() == [2688.0, -896.0] + [0.0] * 14
    assert r.tensor_scale == 1.0 and r.scales.tolist() == [448.0]
    assert r.bits_per_element == 4.5


def test_mx_all_zero_block_gives_zeros_without_nan_or_warning():
    x = np.concatenate([np.zeros(32), np.linspace(-1, 1, 32)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fmt in (FP4_E2M1, FP6_E2M3, FP8_E4M3):
            r = mx_quantize(x, fmt)
            assert np.all(r.values[:32] == 0.0) and np.all(np.isfinite(r.values))
        assert np.all(nvfp4_quantize(np.zeros(32)).values == 0.0)
        assert np.all(tensor_scaled(np.zeros(8), FP8_E4M3).values == 0.0)


def test_mx_scale_hand_cases():
    # E2M1 emax = 2. amax 5: floor(log2 5) = 2 -> scale 2^0. amax 0.3: floor(log2 0.3) = -2 ->
    # scale 2^-4, and 0.3 / 2^-4 = 4.8 rounds to E2M1's 4 (nearer than 6) -> 0.25.
    r = mx_quantize(np.r_[5.0, np.zeros(31), 0.3, np.zeros(31)], FP4_E2M1)
    assert r.scales.tolist() == [1.0, 2.0**-4]
    assert r.values[0] == 4.0 and r.values[32] == 0.25   # 5 -> 4 (tie 5 between 4 and 6 -> even 4)


def test_mxfp8_saturates_a_block_maximum_above_448():
    # floor(log2 500) = 8 = E4M3's emax -> scale 1, and 500 > 448 saturates.
    r = mx_quantize(np.r_[500.0, np.ones(31)], FP8_E4M3)
    assert r.scales.tolist() == [1.0] and r.values[0] == 448.0
    assert r.clipped == 1 / 32


@pytest.mark.parametrize("fmt", MX_ELEMENTS, ids=str)
def test_mx_matches_the_spec_reference(fmt):
    rng = np.random.default_rng(5)
    x = rng.standard_t(4, 32 * 64) * np.exp(rng.uniform(-8, 8, 32 * 64).repeat(1))
    r = mx_quantize(x, fmt)
    assert np.array_equal(r.values, mx_reference(x, fmt, 32))
    assert r.bits_per_element == fmt.bits + 8 / 32
    # Stored scales are E8M0 values: they survive an E8M0 round trip.
    assert np.array_equal(E8M0.decode(E8M0.encode(r.scales)), r.scales)


def test_nvfp4_matches_an_ml_dtypes_reference():
    rng = np.random.default_rng(6)
    x = rng.standard_t(5, 16 * 256) * 0.02
    g = float(np.float32(np.abs(x).max() / (6 * 448)))
    amax = np.abs(x.reshape(-1, 16)).max(axis=1)
    s = (amax / 6 / g).astype(ml_dtypes.float8_e4m3fn).astype(np.float64)   # no overflow: <= 448
    expected = (ml_elem_round(FP4_E2M1, x.reshape(-1, 16) / (s * g)[:, None]) * (s * g)[:, None])
    r = nvfp4_quantize(x)
    assert r.tensor_scale == g
    assert np.array_equal(r.scales, s) and np.array_equal(r.values, expected.ravel())


def test_e4m3_block_scale_that_underflows_decodes_to_zero():
    # The second block's amax is 1e-9 of the tensor's: its E4M3 scale rounds to 0.
    x = np.r_[np.full(16, 1000.0), np.full(16, 1e-6)]
    r = nvfp4_quantize(x)
    assert r.scales[1] == 0.0 and np.all(r.values[16:] == 0.0) and np.all(np.isfinite(r.values))


def test_exact_scale_never_clips_and_uses_the_top_of_the_grid():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 64))
    r = block_quantize(x, FP4_E2M1, 16, "exact")
    assert r.clipped == 0.0
    assert np.all(np.abs(r.elements).reshape(-1, 16).max(axis=1) == 6.0)
    assert r.bits_per_element == 4 + 32 / 16


def test_blocks_run_along_the_last_axis():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 5, 64))
    r = mx_quantize(x, FP4_E2M1)
    assert r.values.shape == x.shape and r.scales.shape == (3, 5, 2)
    for i in range(3):
        for j in range(5):
            assert np.array_equal(r.values[i, j], mx_quantize(x[i, j], FP4_E2M1).values)


def test_values_are_elements_times_scales():
    x = np.random.default_rng(4).standard_normal(64)
    for r in (mx_quantize(x, FP6_E2M3), nvfp4_quantize(x), tensor_scaled(x, FP8_E4M3)):
        blocks = r.elements.reshape(r.scales.shape + (-1,))
        assert np.array_equal(r.values, (blocks * (r.scales * r.tensor_scale)[..., None]).ravel())
        assert np.all(np.isin(r.elements, np.r_[FP4_E2M1.values(), FP6_E2M3.values(),
                                                FP8_E4M3.values()]))


def test_tensor_scaled_uses_amax_over_max_value():
    x = np.array([-3.0, 1.0, 0.3])
    r = tensor_scaled(x, FP4_E2M1)
    assert r.tensor_scale == 0.5 and r.values.tolist() == [-3.0, 1.0, 0.25]
    assert r.bits_per_element == 4.0


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("call,exc,msg", [
    (lambda: mx_quantize(np.ones(40), FP4_E2M1), ValueError, "does not divide"),
    (lambda: nvfp4_quantize(np.ones((2, 24))), ValueError, "does not divide"),
    (lambda: mx_quantize(np.ones(32), "E2M1"), TypeError, "FloatFormat"),
    (lambda: mx_quantize(np.ones(32), E8M0), TypeError, "signed"),
    (lambda: mx_quantize(np.r_[np.nan, np.ones(31)], FP4_E2M1), ValueError, "non-finite"),
    (lambda: nvfp4_quantize(np.r_[np.inf, np.ones(15)]), ValueError, "non-finite"),
    (lambda: nvfp4_quantize(np.array([])), ValueError, "empty"),
    (lambda: tensor_scaled(np.array([]), FP8_E4M3), ValueError, "empty"),
    (lambda: block_quantize(np.ones(32), FP4_E2M1, 32, "fp16"), ValueError, "scale_format"),
    (lambda: block_quantize(np.ones(32), FP4_E2M1, 0), ValueError, "positive"),
    (lambda: block_quantize(np.array(["x"] * 32), FP4_E2M1, 32), TypeError, "real numbers"),
])
def test_bad_input(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


@pytest.mark.parametrize("fmt", MX_ELEMENTS, ids=str)
def test_exact_scale_reports_no_clipping_despite_division_rounding(fmt):
    # Found by the notebook's tests: amax / (amax / 448) can be 448.00000000000006 in float64,
    # which is not a clipped value. Student-t data, blocks of 32, every element format.
    x = np.random.default_rng(0).standard_t(5, 1 << 16) * 0.02
    assert block_quantize(x, fmt, 32, "exact").clipped == 0.0


ELEMS = list(MX_ELEMENTS)
SCALINGS = [lambda x, f: tensor_scaled(x, f)] + [
    (lambda s: lambda x, f: block_quantize(x, f, 2, s))(s) for s in ("e8m0", "e4m3", "exact")]


@pytest.mark.parametrize("fmt", ELEMS, ids=str)
@pytest.mark.parametrize("quantize", SCALINGS, ids=["tensor", "e8m0", "e4m3", "exact"])
def test_subnormal_tensor_gives_finite_values_without_warnings(quantize, fmt):
    # amax = 2^-1074 (the smallest float64 subnormal): amax / max_value underflows float64 to
    # 0. A scale of 0 cannot be divided by; the tensor is flushed to zero (the fate of values
    # below a format's smallest subnormal) and no NaN appears, not even for the exact zero.
    x = np.array([[5e-324, 0.0], [-5e-324, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = quantize(x, fmt)
    assert np.all(np.isfinite(r.values)) and np.all(np.isfinite(r.elements))
    assert np.all(np.abs(r.values) <= 5e-324)


def test_nvfp4_tensor_scale_saturates_at_fp32_max():
    # amax = 1e300 asks for an FP32 tensor scale 1e300 / (6 * 448) = 3.7e296, beyond FP32's
    # max (2 - 2^-23) * 2^127 = 3.4028e38. The stored FP32 scale saturates there (as the E8M0
    # exponent of MX is clamped), the E4M3 block scale saturates at 448, elements at 6, and
    # every element is reported clipped: values 6 * 448 * 3.4028e38 = 9.146e41, finite.
    fp32_max = float(np.finfo(np.float32).max)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = nvfp4_quantize(np.full(16, 1e300))
    assert r.tensor_scale == fp32_max and r.scales.tolist() == [448.0]
    assert r.clipped == 1.0 and np.all(r.values == 6 * 448 * fp32_max)


def test_nvfp4_tensor_scale_never_flushes_to_zero():
    # amax = 1e-300: 1e-300 / 2688 is below FP32's smallest subnormal 2^-149. The tensor scale
    # stays 2^-149 (positive, so nothing is divided by zero); the E4M3 block scale
    # 1e-300 / 6 / 2^-149 = 1.2e-256 is below E4M3's smallest subnormal 2^-9 and rounds to 0,
    # so the block decodes to zeros, as any E4M3 scale underflow does.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = nvfp4_quantize(np.full(16, 1e-300))
    assert r.tensor_scale == 2.0**-149 and r.scales.tolist() == [0.0]
    assert np.all(r.values == 0.0)


@pytest.mark.parametrize("fmt", list(ML), ids=str)
def test_mx_of_float32_input_matches_the_spec_reference_across_chunks(fmt):
    # float32 input divides by its power-of-two scales in float32 (block_quantize's fast path):
    # 96K values (more than one 64K chunk), magnitudes over 2^-140 .. 2^120 so that blocks hit
    # both E8M0 clamps, quotients underflow float32's normals, and whole blocks are zero.
    rng = np.random.default_rng(7)
    n = 32 * 3072
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-140, 120, n // 32).repeat(32)))
    x = x.astype(np.float32)
    x[:64] = 0.0
    x[64:96] = np.float32(2.0**-149)  # one block of float32's smallest subnormal
    r = mx_quantize(x, fmt)
    x64 = x.astype(np.float64)
    assert np.array_equal(r.values, mx_reference(x64, fmt, 32, clamp=True))
    assert np.array_equal(r.values.view(np.uint64), mx_quantize(x64, fmt).values.view(np.uint64))
    assert np.array_equal(r.elements, mx_quantize(x64, fmt).elements)
    assert r.clipped == mx_quantize(x64, fmt).clipped


def test_nvfp4_of_float32_input_equals_its_float64_copy():
    # NVFP4 scales are not powers of two: the quotient is taken in float64 for both.
    rng = np.random.default_rng(8)
    x = (rng.standard_t(5, 16 * 5000) * 0.02).astype(np.float32)
    a, b = nvfp4_quantize(x), nvfp4_quantize(x.astype(np.float64))
    assert np.array_equal(a.values, b.values) and np.array_equal(a.scales, b.scales)
    assert a.tensor_scale == b.tensor_scale and a.clipped == b.clipped


@pytest.mark.parametrize("quantize", ["mx_e4m3", "mx_e2m1", "nvfp4"])
def test_torch_twin_of_float32_blocks_is_bit_identical_across_chunks(quantize):
    torch = pytest.importorskip("torch")
    import numfmt.torch as nt
    rng = np.random.default_rng(9)
    n = 32 * 6144  # 196K values: more than one 128K chunk of numfmt.torch
    x = (rng.standard_normal(n) * np.exp2(rng.uniform(-140, 120, n // 32).repeat(32)))
    x = x.astype(np.float32).reshape(-1, 1024)
    if quantize == "nvfp4":
        x = (rng.standard_t(5, x.shape) * 0.02).astype(np.float32)
        a, b = nvfp4_quantize(x), nt.nvfp4_quantize(torch.from_numpy(x))
    else:
        elem = FP8_E4M3 if quantize == "mx_e4m3" else FP4_E2M1
        a, b = mx_quantize(x, elem), nt.mx_quantize(torch.from_numpy(x), elem)
    assert np.array_equal(a.values.view(np.uint64), b.values.numpy().view(np.uint64))
    assert np.array_equal(a.elements, b.elements.numpy())
    assert np.array_equal(a.scales, b.scales.numpy()) and a.clipped == b.clipped


# ---------------------------------------------------------------------------- MX scale rules
MX_ELEMS = MX_ELEMENTS


def rceil_reference(x32, fmt, block=32):
    """RCEIL written plainly from its definition (cuBLAS 1D block quantization; torchao
    ``_f32_to_e8m0_rceil``): d = FP32(amax * FP32(1 / max)), scale = 2^ceil(log2 d) from d's
    FP32 fields (a subnormal d above 2^-127 rounds to 2^-126), elements RNE with ml_dtypes."""
    out = np.empty(x32.size)
    codes = []
    for i in range(0, x32.size, block):
        b = x32[i:i + block]
        amax = np.float32(np.abs(b).max())
        d = np.float32(amax * np.float32(1 / ML_MAX[fmt]))
        bits = int(d.view(np.uint32))
        exp_field, mant = (bits >> 23) & 0xFF, bits & 0x7FFFFF
        code = exp_field + (mant > 0x400000 if exp_field == 0 else mant != 0)
        scale = 2.0 ** (code - 127) if amax > 0 else 1.0  # numfmt's zero-block convention
        codes.append(code if amax > 0 else 127)
        out[i:i + block] = ml_elem_round(fmt, b.astype(np.float64) / scale) * scale
    return out, np.array(codes)


def rceil_edge_inputs(fmt, rng):
    """Blocks whose amax is max_value * 2^k exactly or one FP32 ulp either side, blocks whose
    amax is a power of two +- one ulp, and FP32-subnormal blocks (the cases a rule gets wrong)."""
    k = rng.integers(-120, 100, size=(512, 1))
    base = (np.float32(ML_MAX[fmt]) * np.ldexp(np.float32(1), k)).astype(np.float32)
    side = rng.integers(0, 3, size=base.shape)
    amax = np.where(side == 0, np.nextafter(base, np.float32(0)),
                    np.where(side == 1, base, np.nextafter(base, np.float32(np.inf))))
    p2 = np.ldexp(np.float32(1), rng.integers(-140, 120, size=(512, 1))).astype(np.float32)
    amax2 = np.where(rng.random(p2.shape) < 0.5, np.nextafter(p2, np.float32(0)),
                     np.nextafter(p2, np.float32(np.inf)))
    rows = []
    for a in (amax, amax2):
        b = (rng.uniform(-1, 1, (512, 32)).astype(np.float32) * a).astype(np.float32)
        b[:, 0] = a[:, 0]
        rows.append(b)
    rows.append((rng.standard_normal((128, 32)) * 1e-39).astype(np.float32))
    return np.concatenate(rows)


@pytest.mark.parametrize("fmt", MX_ELEMS, ids=lambda f: f.name)
def test_rceil_matches_its_definition_on_edges(fmt):
    x = rceil_edge_inputs(fmt, np.random.default_rng(7))
    r = mx_quantize(x.astype(np.float64), fmt, scale_rule="rceil")
    ref, codes = rceil_reference(x.ravel(), fmt)
    assert np.array_equal(r.values.ravel(), ref)
    assert np.array_equal(E8M0.encode(r.scales).ravel(), codes)
    assert r.clipped == 0.0  # the rule's purpose: no block maximum saturates


def _torchao_mx():
    mx = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor",
                             reason="torchao is not installed (pip install --no-deps torchao)")
    import torch
    from torchao.prototype.mx_formats.config import ScaleCalculationMode
    from torchao.prototype.mx_formats.constants import DTYPE_FP6_E2M3, DTYPE_FP6_E3M2
    dtypes = {FP8_E4M3: torch.float8_e4m3fn, FP8_E5M2: torch.float8_e5m2,
              FP6_E2M3: DTYPE_FP6_E2M3, FP6_E3M2: DTYPE_FP6_E3M2,
              FP4_E2M1: torch.float4_e2m1fn_x2}
    return mx, torch, ScaleCalculationMode, dtypes


@pytest.mark.parametrize("fmt", MX_ELEMS, ids=lambda f: f.name)
def test_mx_rules_bit_identical_to_torchao(fmt):
    mx, torch, mode, dtypes = _torchao_mx()
    rng = np.random.default_rng(3)
    sets = [(rng.standard_t(5, (256, 128)) * 0.02).astype(np.float32),
            (rng.standard_normal((64, 128)) * np.exp(rng.uniform(-20, 20, (64, 1)))).astype(
                np.float32)]
    # torchao 0.18 computes RCEIL as ceil(log2(amax / max)) in float32, which misses the
    # ulp-above-a-power-of-two edges and flushes scale-2^-127 blocks; torchao's git HEAD
    # (_f32_to_e8m0_rceil) defines the rule numfmt follows: test the edges against it if present.
    if hasattr(mx, "_f32_to_e8m0_rceil"):
        sets.append(rceil_edge_inputs(fmt, rng))
    for x in sets:
        for rule, tmode in (("floor", mode.FLOOR), ("rceil", mode.RCEIL)):
            t = mx.MXTensor.to_mx(torch.from_numpy(x), dtypes[fmt], 32, scaling_mode=tmode)
            r = mx_quantize(x.astype(np.float64), fmt, scale_rule=rule)
            codes = t.scale.view(torch.uint8).numpy().reshape(r.scales.shape)
            assert np.array_equal(E8M0.encode(r.scales), codes), rule
            assert np.array_equal(r.values.astype(np.float32),
                                  t.dequantize(torch.float32).numpy()), rule


def test_rceil_scale_is_floor_or_one_binade_up():
    # floor(log2 amax) - emax <= ceil(log2(amax / max)) <= that + 1 for every element format,
    # since max_value lies in (2^emax, 2^(emax+1)); equality with floor iff no element clipped.
    rng = np.random.default_rng(11)
    x = rng.standard_t(3, (4096, 32)) * 0.02
    for fmt in MX_ELEMS:
        f, c = mx_quantize(x, fmt), mx_quantize(x, fmt, scale_rule="rceil")
        ratio = c.scales / f.scales
        assert set(np.unique(ratio)) <= {1.0, 2.0}
        amax = np.abs(x).max(axis=1, keepdims=True)
        floor_clips = (amax / f.scales > fmt.max_value * (1 + 1e-12)).ravel()
        assert np.array_equal(ratio.ravel() == 2.0, floor_clips)
        assert c.clipped == 0.0 and f.clipped > 0


def test_scale_rule_bad_values():
    x = np.ones((1, 32))
    with pytest.raises(ValueError, match="scale_rule"):
        mx_quantize(x, FP8_E4M3, scale_rule="ceil")
    with pytest.raises(ValueError, match="scale_rule"):
        block_quantize(x, FP4_E2M1, 16, "e4m3", scale_rule="rceil")
    with pytest.raises(ValueError, match="scale_rule"):
        block_quantize(x, FP4_E2M1, 16, "e8m0", scale_rule=None)


def test_block_quantized_converts_to_its_values():
    # The CS349E seed passes tensor_scaled(...) straight to rel_error as an array.
    x = np.random.default_rng(0).standard_normal((4, 32))
    for r in (tensor_scaled(x, FP8_E4M3), mx_quantize(x, FP4_E2M1)):
        assert np.array_equal(np.asarray(r), r.values)
        assert np.asarray(r, dtype=np.float32).dtype == np.float32
        assert r[0] is r.values  # still the named tuple


@pytest.mark.parametrize("fmt", MX_ELEMS, ids=lambda f: f.name)
def test_rceil_torch_twin_bit_identical(fmt):
    torch = pytest.importorskip("torch", reason="numfmt.torch needs PyTorch")
    import numfmt.torch as nt
    rng = np.random.default_rng(5)
    for x in (rng.standard_t(5, (64, 64)) * 0.02, rceil_edge_inputs(fmt, rng).astype(np.float64),
              np.array([[1e300] * 16 + [1e-300] * 16])):  # beyond FP32: the E8M0 clamp
        a = mx_quantize(x, fmt, scale_rule="rceil")
        b = nt.mx_quantize(torch.from_numpy(x), fmt, scale_rule="rceil")
        assert np.array_equal(a.values, b.values.numpy())
        assert np.array_equal(a.scales, b.scales.numpy()) and a.clipped == b.clipped


# ------------------------------------------------- one scaled quantizer, one "saturated"
@pytest.mark.parametrize("fmt", [f for f in reference_dtypes() if f.signed and (f.has_inf
                                                                               or f.has_nan)],
                         ids=str)
def test_saturated_is_where_a_non_saturating_ml_dtypes_cast_leaves_the_grid(fmt):
    # Oracle: ml_dtypes' own cast without saturation gives Inf or NaN exactly where rounding
    # goes past max_value (every format here has Inf or NaN to show it).
    t = reference_dtypes()[fmt]
    top = fmt.max_value
    step = 2.0 ** (fmt.emax - fmt.man_bits)
    y = np.concatenate([np.linspace(0.9 * top, top + 2 * step, 4001),
                        [top + step / 2, np.nextafter(top + step / 2, 0), np.inf]])
    with np.errstate(over="ignore"):  # BF16's top + 2 steps is past float32: Inf, saturated
        y = np.concatenate([y, -y]).astype(np.float32).astype(np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        left = ~np.isfinite(y.astype(np.float32).astype(t).astype(np.float64))
    np.testing.assert_array_equal(saturated(y, fmt), left)


def test_the_four_quantizers_share_the_rounding_and_the_saturation_rule():
    from numfmt.qat import fake_quantize_float
    from numfmt.scaling import quantize_with_scale
    x = np.random.default_rng(3).standard_t(4, (8, 64)) * 50
    s = float(np.abs(x).max()) / FP8_E4M3.max_value
    want_e, want_v, y = scaled_round(x, FP8_E4M3, s)
    ts = tensor_scaled(x, FP8_E4M3)
    bq = block_quantize(x, FP8_E4M3, 64, "exact")
    assert ts.tensor_scale == s and np.array_equal(ts.values, want_v)
    assert np.array_equal(ts.elements, want_e)
    assert np.array_equal(bq.values.reshape(8, 64), scaled_round(
        x, FP8_E4M3, bq.scales)[1])
    # E5M2's midpoint 61440 ties to Inf (ml_dtypes agrees): saturated, as the STE mask says.
    assert quantize_with_scale([61440.0, 61439.0], FP8_E5M2, 1.0).clipped == 0.5
    assert np.isinf(np.float32(61440.0).astype(ml_dtypes.float8_e5m2).astype(np.float64))
    fq = fake_quantize_float(x * 2, FP8_E4M3, s)
    assert np.array_equal(fq.mask, ~saturated(x * 2 / s, FP8_E4M3))
    assert np.array_equal(fq.values, scaled_round(x * 2, FP8_E4M3, s)[1])


@pytest.mark.parametrize("k", [1, 2, 3, 6, 12, 16, 32, 96, 100, 4096, 70000])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_absmax_rows_equals_numpys_row_maximum(k, dtype):
    # Pairs of a chunk's flat |a| halve each row while its length is even; the rest of the row
    # (odd lengths, or 1) is reduced by numpy. Checked over several chunks and both signs.
    from numfmt._chunks import CHUNK, absmax_rows
    rng = np.random.default_rng(k)
    n = max(3, 3 * CHUNK // k + 1)
    a = (rng.standard_normal((n, k)) * np.exp2(rng.integers(-60, 60, (n, 1)))).astype(dtype)
    a[0] = -0.0
    a[1, -1] = -1e30  # the largest magnitude at the end of a row, negative
    ours = absmax_rows(a)
    assert ours.dtype == dtype and np.array_equal(ours, np.abs(a).max(axis=1))
    assert ours[1] == 1e30 and ours[0] == 0


def test_float32_input_to_block_quantize_is_checked_as_float64_input_is():
    # float32 arrays skip the float64 copy; their checks must not go with it.
    for bad in (np.nan, np.inf, -np.inf):
        x = np.ones(64, np.float32)
        x[40] = bad
        with pytest.raises(ValueError, match="non-finite value .* flat index 40"):
            mx_quantize(x, FP8_E4M3)
        with pytest.raises(ValueError, match="non-finite"):
            nvfp4_quantize(x)
    with pytest.raises(TypeError):
        mx_quantize(np.ma.masked_array(np.ones(32, np.float32)), FP8_E4M3)
    with pytest.raises(ValueError, match="empty"):
        mx_quantize(np.ones((0, 32), np.float32), FP8_E4M3)
    r = mx_quantize(np.float32(3.0), FP8_E4M3, block=1)  # 0-d: as float64 0-d input
    assert r.values.shape == () and r.values == 3.0
