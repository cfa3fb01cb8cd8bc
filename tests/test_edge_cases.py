"""Hostile inputs at the edges of float64, float16 and float32 storage, and hand-built
containers: each either gives the right value (from an independent source) or a clear
ValueError/TypeError naming what is wrong, and no numpy warning escapes."""

import dataclasses
import warnings

import ml_dtypes
import numpy as np
import pytest

import numfmt
import numfmt.ptq as ptq
from numfmt import FP4_E2M1, FP8_E4M3, scaling
from numfmt import packing as pk

RNG = np.random.default_rng(0)
W = RNG.standard_normal((4, 8))
X = RNG.standard_normal((64, 8))
Q4 = lambda w: numfmt.quantize_int(w, 4, granularity="channel").values     # noqa: E731


def no_warnings(call):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return call()


# --- GPTQ's dampening and hand-built GPTQWeight --------------------------------------------

def test_gptq_is_invariant_to_a_huge_hessian():
    # scaling H by 4^k scales its Cholesky factor by 2^k exactly, and GPTQ's result does not
    # depend on the scale of H (its updates are ratios): 2^1022 I must give what I gives,
    # although sum(diag H) = 2^1025 overflows float64
    h = np.eye(8)
    want = ptq.gptq(W, h)
    got = no_warnings(lambda: ptq.gptq(W, h * 2.0**1022))
    np.testing.assert_array_equal(got.weight, want.weight)
    np.testing.assert_array_equal(got.codes, want.codes)


@pytest.mark.parametrize("kwargs, match", [
    (dict(hessian=np.eye(8) * 1e308, damp=0.9), "damp"),      # H_ii + 0.9e308 overflows
    (dict(hessian=np.eye(8) * 2, damp=1e308), "damp"),
    (dict(hessian=np.eye(8) * np.finfo(float).max, damp=0.01), "damp"),
])
def test_gptq_damping_beyond_float64_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        no_warnings(lambda: ptq.gptq(W, **kwargs))


def test_gptq_weight_too_small_names_weight():
    with pytest.raises(ValueError, match="weight row 0 .* multiply weight"):
        ptq.gptq(W * 1e-310, ptq.hessian(X))


GW = pk.gptq_quantize(RNG.standard_normal((32, 8)), 16)


@pytest.mark.parametrize("change, error, match", [
    (dict(g_idx=GW.g_idx - 1), ValueError, "g_idx must lie in"),
    (dict(g_idx=GW.g_idx + 1), ValueError, "g_idx must lie in"),
    (dict(g_idx=GW.g_idx[:4]), ValueError, "g_idx must have shape"),
    (dict(g_idx=GW.g_idx.astype(float)), TypeError, "g_idx must hold integers"),
    (dict(scales=GW.scales[:, :4]), ValueError, "scales must have shape"),
    (dict(scales=GW.scales[:1]), ValueError, "one zero point per scale"),
    (dict(scales=GW.scales.astype(np.float32)), TypeError, "scales must be float16"),
    (dict(scales=-GW.scales), ValueError, "non-negative"),
    (dict(scales=GW.scales * np.float16(np.inf)), ValueError, "finite"),
])
def test_gptq_dequantize_checks_every_field(change, error, match):
    with pytest.raises(error, match=match):
        pk.gptq_dequantize(dataclasses.replace(GW, **change))


def test_gptq_quantize_empty_weight():
    with pytest.raises(ValueError, match="weight is empty"):
        pk.gptq_quantize(np.zeros((0, 8)), 8)


# --- scales stored in float16 / float32: subnormals refused unless exact --------------------

@pytest.mark.parametrize("call", [
    # ideal scale 1.4 * 2^-24: float16 stores 2^-24, and the group decodes 29 % low
    lambda: pk.gptq_quantize(np.full((16, 8), 21 * 2.0**-24), 8),
    lambda: pk.marlin_fp8_pack(np.full((64, 128), 1.4 * 2.0**-24 * 448 / 256)),
    lambda: pk.qlora_quantize(np.array([2e-45, 0, 1e-45, 0]), double_quant=False),
    lambda: pk.absmax_quantize(np.array([3e-40, 1e-40]), pk.nf4_levels()),
    lambda: pk.double_quantize(np.full(4, 1e-37), code="int8"),
], ids=["gptq-fp16", "marlin-fp16", "qlora-fp32", "absmax-fp32", "double-quant-step-fp32"])
def test_subnormal_storage_scales_are_refused(call):
    with pytest.raises(ValueError, match="smallest normal number"):
        no_warnings(call)


def test_exact_subnormal_scales_are_stored():
    # (max - min) / 15 = 2^-24 exactly, float16's smallest subnormal: stored as it is
    w = np.tile(np.arange(16.0)[:, None], (1, 8)) * 2.0**-24
    np.testing.assert_array_equal(pk.gptq_dequantize(pk.gptq_quantize(w, 16)), w)
    x = np.array([3 * 2.0**-149, 0, -2.0**-149, 0])          # a float32 subnormal absmax, exact
    got = pk.qlora_dequantize(pk.qlora_quantize(x, double_quant=False))
    assert got[0] == x[0]


def test_e4m3_bits_as_fp16_matches_ml_dtypes_for_every_code():
    codes = np.arange(256, dtype=np.uint8)
    want = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) / 256  # the OCP E4M3 value
    got = pk.e4m3_bits_as_fp16(codes).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(want)], want[~np.isnan(want)])
    assert np.isnan(want).sum() == 2


# --- no numpy warning escapes numfmt.ptq; a named error instead -----------------------------

FMAX = np.finfo(np.float64).max


@pytest.mark.parametrize("call, error, match", [
    (lambda: ptq.hessian([[1e200, 1.0]]), ValueError, "scale x down"),
    (lambda: ptq.smoothquant_scales([1.0], [1e-320], 0.0), ValueError, "s_0"),
    (lambda: ptq.smoothquant_scales([1e300], [5e-324], 0.5), ValueError, "s_0"),
    (lambda: ptq.awq_search(W, X * 1e200, Q4), ValueError, "too large"),
    (lambda: ptq.awq_search(W * 1e300, X, Q4), ValueError, "too large"),
    (lambda: ptq.awq_search(W, X, lambda w: w.astype(complex)), TypeError, "real numbers"),
    (lambda: ptq.awq_search(W, X, lambda w: np.full(w.shape, "a")), TypeError, "real numbers"),
    (lambda: ptq.awq_search(W, X, lambda w: w * np.nan), ValueError, "non-finite"),
    (lambda: ptq.llm_int8_matmul(X * 1e160, W * 1e160, np.inf), ValueError, "scale x or w"),
    (lambda: ptq.llm_int8_matmul(X * 1e160, W * 1e160, 1.0), ValueError, "scale x or w"),
    (lambda: ptq.fuse_rotation(np.full((4, 8), 1e308), ptq.hadamard(8)), ValueError,
     "scale weight down"),
    (lambda: ptq.fuse_rotation(np.full((8, 4), 1e308), ptq.hadamard(8), "output"), ValueError,
     "scale weight down"),
    (lambda: ptq.calibrate_kl([5e-324, 1e-323, 0]), ValueError, "multiply x"),
    (lambda: ptq.calibrate_mse([1e-306, 2e-307]), ValueError, "multiply x"),
])
def test_extreme_inputs_raise_named_errors_without_warnings(call, error, match):
    with pytest.raises(error, match=match):
        no_warnings(call)


def test_calibrators_near_float64s_max_without_warnings():
    assert no_warnings(lambda: ptq.calibrate_kl([FMAX, -1, 1])) == FMAX
    # MSE: the same choice as on the data scaled down by 2^600 (exact), scaled back
    x = np.array([1e308, -1e308, 1.0, 3e307, -2e307])
    small = ptq.calibrate_mse(x * 2.0**-600)
    assert no_warnings(lambda: ptq.calibrate_mse(x)) == small * 2.0**600


def test_hessian_of_bfloat16_tensors_and_arrays():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal((16, 8)).astype(np.float32)
    want = ptq.hessian(x.astype(ml_dtypes.bfloat16).astype(np.float32))
    np.testing.assert_array_equal(ptq.hessian(torch.tensor(x).to(torch.bfloat16)), want)
    np.testing.assert_array_equal(ptq.hessian(x.astype(ml_dtypes.bfloat16)), want)


# --- packing: hand-built containers and absurd sizes ----------------------------------------

FW = pk.marlin_fp8_pack(RNG.standard_normal((64, 128)))


@pytest.mark.parametrize("fw, error, match", [
    (pk.Fp8MarlinWeight(FW.packed[:, :1000], FW.scales), ValueError, "multiple of 64"),
    (pk.Fp8MarlinWeight(FW.packed, np.concatenate([FW.scales, FW.scales], 1)), ValueError,
     r"scales must have shape \(1, N\)"),
    (pk.Fp8MarlinWeight(FW.packed.astype(np.int16), FW.scales), TypeError, "uint8"),
    (pk.Fp8MarlinWeight(FW.packed[0], FW.scales), ValueError, "2-D"),
])
def test_marlin_fp8_unpack_checks_its_fields(fw, error, match):
    with pytest.raises(error, match=match):
        pk.marlin_fp8_unpack(fw)


def test_marlin_fp8_pack_reads_big_endian():
    w = RNG.standard_normal((64, 128))
    got = pk.marlin_fp8_pack(w.astype(">f8"))
    np.testing.assert_array_equal(got.packed, pk.marlin_fp8_pack(w).packed)


def test_marlin_int4_location_types():
    with pytest.raises(TypeError, match="size_n must be an integer"):
        pk.marlin_int4_location(0, 0, "64")
    with pytest.raises(TypeError, match="k must hold integers"):
        pk.marlin_int4_location(0.5, 0, 64)


PACKED = pk.pack_block_fp4(numfmt.mx_quantize(RNG.standard_normal((2, 64)), FP4_E2M1), "mxfp4")
NV = pk.pack_block_fp4(numfmt.nvfp4_quantize(RNG.standard_normal((2, 64))), "nvfp4")


@pytest.mark.parametrize("bad", [
    dataclasses.replace(NV, tensor_scale=b""),
    dataclasses.replace(PACKED, tensor_scale=b"\0\0\0\0"),
    dataclasses.replace(PACKED, kind="mxfp8"),
    dataclasses.replace(PACKED, block=0),
    dataclasses.replace(PACKED, block=48),
    dataclasses.replace(PACKED, elements=PACKED.elements[:, :3]),
    dataclasses.replace(PACKED, scales=PACKED.scales[:, :1]),
    dataclasses.replace(PACKED, shape=(2, 128)),
])
def test_unpack_block_fp4_checks_its_fields(bad):
    with pytest.raises(ValueError):
        pk.unpack_block_fp4(bad)


def test_pack_block_fp4_of_a_scalar():
    with pytest.raises(ValueError, match="0-d"):
        pk.pack_block_fp4(numfmt.mx_quantize(3.0, FP4_E2M1, 1), "mxfp4")


def test_absurd_block_sizes_mean_one_block():
    # a block longer than the tensor holds the whole tensor: the same codes as block = size,
    # without allocating 2^40 padded elements
    x = RNG.standard_normal(100)
    one = pk.absmax_quantize(x, pk.nf4_levels(), 100)
    huge = pk.absmax_quantize(x, pk.nf4_levels(), 2**40)
    np.testing.assert_array_equal(huge.codes, one.codes)
    np.testing.assert_array_equal(pk.absmax_dequantize(huge), pk.absmax_dequantize(one))
    t = pk.qlora_quantize(x, block=2**40, scale_block=2**40)
    np.testing.assert_array_equal(pk.qlora_dequantize(t),
                                  pk.qlora_dequantize(pk.qlora_quantize(x, block=100,
                                                                        scale_block=1)))


# --- ml_dtypes arrays, read bit for bit as torch's bfloat16/float8 tensors are ---------------

@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn,
                                   ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
                                   ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
                                   ml_dtypes.int4, ml_dtypes.uint4])
def test_ml_dtypes_arrays_are_read_exactly(dtype):
    x = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 6.0, 3.0, 1.5]).astype(dtype)   # no NaN in any
    wide = x.astype(np.float64)          # ml_dtypes' own conversion: exact for every value
    np.testing.assert_array_equal(numfmt.quantize_int(x, 8).values,
                                  numfmt.quantize_int(wide, 8).values)
    np.testing.assert_array_equal(numfmt.FP8_E4M3.round(x), numfmt.FP8_E4M3.round(wide))


def test_ml_dtypes_match_torch_bfloat16():
    torch = pytest.importorskip("torch")
    x = RNG.standard_normal(64).astype(ml_dtypes.bfloat16)
    t = torch.tensor(x.astype(np.float32)).to(torch.bfloat16)
    np.testing.assert_array_equal(numfmt.quantize_int(x, 4).values,
                                  numfmt.quantize_int(t, 4).values)


# --- messages that name the cause -----------------------------------------------------------

def test_quantize_int_of_denormals_does_not_suggest_a_larger_clip_at_clip_1():
    with pytest.raises(ValueError) as err:
        numfmt.quantize_int(np.array([5e-324, 1e-323]), 8)
    assert "larger clip" not in str(err.value) and "multiply x" in str(err.value)
    with pytest.raises(ValueError, match="larger clip"):
        numfmt.quantize_int(np.array([1e-300, 1e-301]), 8, clip=1e-10)


def test_scale_from_amax_names_margin():
    with pytest.raises(ValueError, match="margin = 1099511627776"):
        scaling.scale_from_amax(1.0, FP8_E4M3, margin=2**40)
