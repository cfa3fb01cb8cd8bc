"""Tests for numfmt.packing.

Oracles: byte values from the OCP MX and GPTQ conventions, hand
derivations written here, ml_dtypes for E2M1 / E4M3 / E8M0 bit patterns, the QLoRA paper's
NF4 table (appendix E), and the vLLM formulation of the Marlin layout (a 16x16-tile
transpose followed by a 1024-entry permutation), which is written differently from the
fragment map in numfmt.packing.marlin.
"""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numfmt import FP4_E2M1, mx_quantize, nvfp4_quantize, sqnr_db, tensor_scaled
from numfmt.packing import (
    AbsmaxQuantized, DoubleQuantizedScales, Fp8MarlinWeight, GPTQWeight, PackedFP4, QLoRATensor,
    absmax_dequantize, absmax_quantize, act_order_permutation, double_dequantize, double_quantize,
    e4m3_bits_as_fp16, fp4_levels, fp16_from_bytes, gptq_dequantize, gptq_pack_qweight,
    gptq_pack_qzeros, gptq_quantize, gptq_to_marlin, gptq_unpack_qweight, gptq_unpack_qzeros,
    group_index, int4_levels, inverse_permutation, kernel_row_order, marlin_fp8_pack,
    marlin_fp8_shape_supported, marlin_fp8_unpack, marlin_int4_location, marlin_pack_int4,
    marlin_permute_scales, marlin_unpack_int4, marlin_unpermute_scales, nf4_levels, pack_block_fp4,
    pack_fp4, pack_int4, pack_nibbles, pack_uint4, permute_qweight_rows, qlora_bits_per_parameter,
    dynamic_map, qlora_dequantize, qlora_quantize, unpack_block_fp4, unpack_fp4, unpack_int4, unpack_nibbles,
    unpack_uint4,
)

SETTINGS = settings(max_examples=40, deadline=None)


# ------------------------------------------------------------------------------------ nibbles
def test_issue_byte_values():
    assert pack_fp4([1.0, -6.0]).tolist() == [0xF2]
    assert pack_int4([1, -2]).tolist() == [0xE1]
    assert pack_uint4([3, 12]).tolist() == [0xC3]


def test_fp4_codes_match_ml_dtypes_low_nibble_first():
    values = FP4_E2M1.decode(np.arange(16, dtype=np.uint8))           # every code, -0 included
    codes = values.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    expected = codes[0::2] | (codes[1::2] << 4)
    assert pack_fp4(values).tolist() == expected.tolist()
    back = unpack_fp4(pack_fp4(values))
    assert np.array_equal(back, values) and np.array_equal(np.signbit(back), np.signbit(values))


def test_high_first_order_swaps_nibbles():
    assert pack_uint4([3, 12], order="high_first").tolist() == [0x3C]
    assert unpack_uint4(np.array([0x3C], np.uint8), order="high_first").tolist() == [3, 12]


def test_int4_every_value_round_trips():
    v = np.arange(-8, 8)
    assert unpack_int4(pack_int4(v)).tolist() == v.tolist()
    # two's complement by hand: -8 -> 0x8, -1 -> 0xF
    assert pack_int4([-8, -1]).tolist() == [0xF8]


@SETTINGS
@given(st.lists(st.integers(0, 15), min_size=1, max_size=65),
       st.sampled_from(["low_first", "high_first"]))
def test_nibble_round_trip_with_explicit_padding(codes, order):
    packed = pack_nibbles(codes, pad=True, order=order)
    assert packed.shape == ((len(codes) + 1) // 2,)
    assert unpack_nibbles(packed, count=len(codes), order=order).tolist() == codes


def test_nibbles_pack_along_last_axis():
    codes = np.arange(24).reshape(2, 3, 4) % 16
    packed = pack_nibbles(codes)
    assert packed.shape == (2, 3, 2)
    assert packed[1, 2, 1] == (codes[1, 2, 2] | codes[1, 2, 3] << 4)
    assert np.array_equal(unpack_nibbles(packed), codes)


def test_odd_length_raises_without_pad_and_pads_with_zero():
    with pytest.raises(ValueError, match="odd number"):
        pack_nibbles([1, 2, 3])
    with pytest.raises(ValueError, match="odd number"):
        pack_fp4([1.0])
    assert pack_nibbles([1, 2, 3], pad=True).tolist() == [0x21, 0x03]


@pytest.mark.parametrize("call, exc, match", [
    (lambda: pack_nibbles([0, 16]), ValueError, r"\[0, 15\]"),
    (lambda: pack_nibbles([0.0, 1.0]), TypeError, "integer"),
    (lambda: pack_nibbles(np.array(3)), ValueError, "axis"),
    (lambda: pack_nibbles([1, 2], order="middle"), ValueError, "order"),
    (lambda: pack_int4([7, 8]), ValueError, r"\[-8, 7\]"),
    (lambda: pack_uint4([-1, 0]), ValueError, r"\[0, 15\]"),
    (lambda: pack_fp4([1.0, 2.5]), ValueError, "E2M1"),
    (lambda: pack_fp4([1.0, np.nan]), ValueError, "non-finite"),
    (lambda: pack_fp4(["a", "b"]), TypeError, "dtype"),
    (lambda: unpack_nibbles(np.array([1, 2], np.int32)), TypeError, "uint8"),
    (lambda: unpack_nibbles(np.array([1, 2], np.uint8), count=2), ValueError, "count"),
])
def test_nibble_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# --------------------------------------------------------------------- MXFP4 / NVFP4 bytes
def _hand_block(n):
    """[1, -6, 0.5, ...]: amax 6 exactly, all on the E2M1 grid."""
    grid = np.array([1.0, -6.0, 0.5, -0.5, 2.0, 3.0, -4.0, 1.5])
    return np.resize(grid, n)


def test_mxfp4_block_bytes_by_hand():
    # amax = 6: scale = 2^(floor(log2 6) - emax(E2M1) = 2 - 2) = 1, E8M0 code 127 = 0x7F;
    # elements are x itself, so the first byte is 0xF2.
    p = pack_block_fp4(mx_quantize(_hand_block(32)[None, :], FP4_E2M1), "mxfp4")
    assert p.scales.tolist() == [[0x7F]]
    assert p.elements[0, 0] == 0xF2 and p.elements.shape == (1, 16)
    assert p.nbytes == 17 and p.bits_per_element == 4.25 and p.tensor_scale == b""


def test_nvfp4_block_bytes_by_hand():
    # tensor scale g = fp32(6 / (6 * 448)); block scale E4M3(6 / 6 / g) = 448 = code 0x7E.
    x = _hand_block(16)[None, :]
    p = pack_block_fp4(nvfp4_quantize(x), "nvfp4")
    assert p.scales.tolist() == [[0x7E]]
    assert p.elements[0, 0] == 0xF2
    assert p.tensor_scale == np.array([1 / 448], "<f4").tobytes()
    assert p.nbytes == 8 + 1 + 4
    assert len(p.to_bytes()) == p.nbytes


@SETTINGS
@given(st.integers(1, 3), st.integers(1, 4), st.integers(0, 2**32 - 1),
       st.sampled_from(["mxfp4", "nvfp4"]))
def test_block_fp4_round_trip_and_scale_bytes(rows, blocks, seed, kind):
    rng = np.random.default_rng(seed)
    block = 32 if kind == "mxfp4" else 16
    x = rng.standard_normal((rows, blocks * block)) * np.exp(rng.uniform(-8, 8))
    bq = mx_quantize(x, FP4_E2M1) if kind == "mxfp4" else nvfp4_quantize(x)
    p = pack_block_fp4(bq, kind)
    assert np.array_equal(unpack_block_fp4(p), bq.values)
    scale_dtype = ml_dtypes.float8_e8m0fnu if kind == "mxfp4" else ml_dtypes.float8_e4m3fn
    assert np.array_equal(p.scales, bq.scales.astype(scale_dtype).view(np.uint8))
    codes = bq.elements.astype(ml_dtypes.float4_e2m1fn).view(np.uint8)
    assert np.array_equal(p.elements, codes[..., 0::2] | (codes[..., 1::2] << 4))
    # 4 bits per element + 8 bits per block (+ 32 bits for the NVFP4 tensor scale), which is
    # what the format claims per element, plus the tensor scale
    expected_bits = x.size * 4 + (x.size // block) * 8 + (32 if kind == "nvfp4" else 0)
    assert p.nbytes * 8 == expected_bits
    assert p.nbytes * 8 == bq.bits_per_element * x.size + len(p.tensor_scale) * 8


def test_block_fp4_errors():
    x = np.ones((1, 32))
    with pytest.raises(TypeError, match="BlockQuantized"):
        pack_block_fp4(x, "mxfp4")
    with pytest.raises(ValueError, match="kind"):
        pack_block_fp4(mx_quantize(x, FP4_E2M1), "int4")
    with pytest.raises(ValueError, match="E4M3|E8M0|scale"):
        pack_block_fp4(nvfp4_quantize(np.linspace(-1, 1, 32)[None, :] * 0.37), "mxfp4")
    with pytest.raises(ValueError, match="even"):
        pack_block_fp4(tensor_scaled(np.ones((1, 3)), FP4_E2M1), "nvfp4")
    with pytest.raises(TypeError, match="PackedFP4"):
        unpack_block_fp4(b"\x00")


# ---------------------------------------------------------------------------- GPTQ layout
def test_gptq_qweight_issue_value():
    q = gptq_pack_qweight(np.arange(1, 9).reshape(8, 1))
    assert q.dtype == np.int32 and q.shape == (1, 1)
    assert q.view(np.uint32)[0, 0] == 0x87654321


def test_gptq_qweight_matches_loop_reference():
    rng = np.random.default_rng(1)
    codes = rng.integers(0, 16, (32, 12))
    expected = np.zeros((4, 12), np.uint32)
    for i in range(4):
        for n in range(12):
            for lane in range(8):
                expected[i, n] |= np.uint32(codes[8 * i + lane, n]) << np.uint32(4 * lane)
    assert np.array_equal(gptq_pack_qweight(codes).view(np.uint32), expected)
    assert np.array_equal(gptq_unpack_qweight(gptq_pack_qweight(codes)), codes)


@SETTINGS
@given(st.integers(1, 6), st.integers(1, 24), st.integers(0, 2**32 - 1))
def test_gptq_round_trips_on_random_shapes(k8, n, seed):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, 16, (8 * k8, n))
    q = gptq_pack_qweight(codes)
    assert q.shape == (k8, n) and np.array_equal(gptq_unpack_qweight(q), codes)
    zeros = rng.integers(0, 16, (k8, 8 * n))
    z = gptq_pack_qzeros(zeros)
    assert z.shape == (k8, n) and np.array_equal(gptq_unpack_qzeros(z), zeros)
    perm = rng.permutation(8 * k8)
    back = permute_qweight_rows(permute_qweight_rows(q, perm), inverse_permutation(perm))
    assert np.array_equal(back, q)


def test_gptq_qzeros_keep_zero_and_fifteen():
    zeros = np.array([[0, 15, 0, 1, 2, 3, 4, 0], [15] * 8])
    packed = gptq_pack_qzeros(zeros)
    assert packed.view(np.uint32)[0, 0] == 0x043210F0            # column 0 lowest nibble
    assert np.array_equal(gptq_unpack_qzeros(packed), zeros)


def test_gptq_zero_point_zero_survives_quantization():
    # all weights >= 0: the range is [0, max], so the zero point is 0 and 0.0 stays exact
    w = np.abs(np.random.default_rng(2).standard_normal((128, 8)))
    w[5, :] = 0.0
    gw = gptq_quantize(w, group_size=128)
    assert np.all(gptq_unpack_qzeros(gw.qzeros) == 0)
    assert np.all(gptq_dequantize(gw)[5] == 0.0)


@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_quantize_error_bound(act_order):
    rng = np.random.default_rng(3)
    k, n, g = 256, 16, 64
    w = rng.standard_normal((k, n))
    perm = act_order_permutation(rng.gamma(2.0, size=k)) if act_order else None
    gw = gptq_quantize(w, group_size=g, perm=perm)
    assert gw.qweight.shape == (k // 8, n) and gw.scales.shape == (k // g, n)
    assert gw.qzeros.shape == (k // g, n // 8) and gw.g_idx.shape == (k,)
    err = np.abs(gptq_dequantize(gw) - w)
    # Rounding costs at most half a step. The FP16 scale is up to 2^-11 too small, so the
    # top of the range can overshoot code 15 by 15 * 2^-11 steps before clipping: 0.51 steps.
    step = gw.scales.astype(np.float64)[gw.g_idx]
    assert np.all(err <= 0.51 * step)
    if act_order:
        for i in range(k // g):                              # group i = rows perm[i*g:(i+1)*g]
            assert np.all(gw.g_idx[perm[i * g:(i + 1) * g]] == i)


def test_act_order_and_kernel_row_order():
    h = np.array([0.5, 3.0, 2.0, 3.0, 0.1, 1.0, 9.0, 0.2])
    perm = act_order_permutation(h)
    assert perm.tolist() == [6, 1, 3, 2, 5, 0, 7, 4]           # by hand: descending, ties in order
    g_idx = group_index(perm, 4)
    assert g_idx.tolist() == [1, 0, 0, 0, 1, 1, 0, 1]
    order = kernel_row_order(g_idx)
    assert order.tolist() == [1, 2, 3, 6, 0, 4, 5, 7]
    assert np.all(np.diff(g_idx[order]) >= 0)
    inv = inverse_permutation(order)
    assert np.array_equal(order[inv], np.arange(8)) and np.array_equal(inv[order], np.arange(8))


def test_permute_qweight_rows_and_activation_permutation():
    rng = np.random.default_rng(4)
    codes = rng.integers(0, 16, (64, 8))
    perm = rng.permutation(64)
    moved = permute_qweight_rows(gptq_pack_qweight(codes), perm)
    assert np.array_equal(gptq_unpack_qweight(moved), codes[perm])
    # permuting weight rows and activation columns together leaves x @ W unchanged (integers: exact)
    x = rng.integers(-5, 6, (3, 64))
    assert np.array_equal(x[:, perm] @ codes[perm], x @ codes)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: gptq_pack_qweight(np.zeros((12, 4), int)), ValueError, "multiple of 8"),
    (lambda: gptq_pack_qweight(np.zeros(8, int)), ValueError, "2-D"),
    (lambda: gptq_pack_qweight(np.full((8, 1), 16)), ValueError, r"\[0, 15\]"),
    (lambda: gptq_pack_qweight(np.zeros((8, 1))), TypeError, "integer"),
    (lambda: gptq_unpack_qweight(np.zeros((1, 1), np.int64)), TypeError, "int32"),
    (lambda: gptq_pack_qzeros(np.zeros((1, 4), int)), ValueError, "multiple of 8"),
    (lambda: gptq_unpack_qzeros(np.zeros((1, 1), np.float32)), TypeError, "int32"),
    (lambda: gptq_quantize(np.zeros((100, 8)), 64), ValueError, "multiple"),
    (lambda: gptq_quantize(np.zeros((64, 4)), 64), ValueError, "multiple of 8"),
    (lambda: gptq_quantize(np.full((64, 8), np.inf), 64), ValueError, "non-finite"),
    (lambda: gptq_quantize(np.zeros((64, 8)), 64, perm=np.arange(63)), ValueError, "permutation"),
    (lambda: group_index([0, 0, 1, 2], 2), ValueError, "permutation"),
    (lambda: group_index([0, 1, 2], 2), ValueError, "multiple"),
    (lambda: inverse_permutation([1, 2]), ValueError, "permutation"),
    (lambda: permute_qweight_rows(np.zeros((1, 2), np.int32), np.arange(7)), ValueError,
     "permutation"),
    (lambda: act_order_permutation(np.ones((2, 2))), ValueError, "1-D"),
    (lambda: gptq_dequantize(np.zeros((8, 8))), TypeError, "GPTQWeight"),
])
def test_gptq_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------------------ Marlin INT4
def _vllm_weight_perm(num_bits):
    """vLLM's get_weight_perm: 16x16 sub-tiles, 32 threads, then the nibble/byte interleave."""
    perm = []
    for i in range(32):
        col = i // 4
        perm1 = [16 * row + col + 8 * block
                 for block in (0, 1)
                 for row in (2 * (i % 4), 2 * (i % 4) + 1, 2 * (i % 4 + 4), 2 * (i % 4 + 4) + 1)]
        for j in range(4):
            perm.extend(p + 256 * j for p in perm1)
    interleave = [0, 2, 4, 6, 1, 3, 5, 7] if num_bits == 4 else [0, 2, 1, 3]
    return np.array(perm).reshape(-1, len(interleave))[:, interleave].ravel()


def _vllm_marlin_reference(codes, num_bits):
    """Codes (K, N) -> uint32 words (K/16, N*16*bits/32), the vLLM test-utility way."""
    k, n = codes.shape
    w = codes.reshape(k // 16, 16, n // 16, 16).transpose(0, 2, 1, 3).reshape(k // 16, n * 16)
    w = w.reshape(-1, 1024)[:, _vllm_weight_perm(num_bits)].reshape(k // 16, n * 16)
    per_word = 32 // num_bits
    out = np.zeros((k // 16, n * 16 // per_word), np.uint32)
    for i in range(per_word):
        out |= w[:, i::per_word].astype(np.uint32) << np.uint32(num_bits * i)
    return out


@pytest.mark.parametrize("k, n", [(16, 64), (32, 128), (128, 256)])
def test_marlin_int4_matches_vllm_formulation(k, n):
    codes = np.random.default_rng(k + n).integers(0, 16, (k, n))
    packed = marlin_pack_int4(codes)
    assert packed.dtype == np.int32 and packed.shape == (k // 16, 2 * n)
    assert np.array_equal(packed.view(np.uint32), _vllm_marlin_reference(codes, 4))
    assert np.array_equal(gptq_to_marlin(gptq_pack_qweight(codes)), packed)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 3), st.integers(0, 2**32 - 1))
def test_marlin_int4_round_trip(kt, nt, seed):
    codes = np.random.default_rng(seed).integers(0, 16, (16 * kt, 64 * nt))
    assert np.array_equal(marlin_unpack_int4(marlin_pack_int4(codes)), codes)


def test_marlin_int4_locations_by_hand():
    # Thread t owns column 16j + t // 4 and rows 2(t % 4) + {0, 1, 8, 9} of sub-tile j; its word
    # is 4t + j; lanes 0..7 hold (r, c) (r+8, c) (r, c+8) (r+8, c+8) (r+1, c) (r+9, c) ...
    cases = {(0, 0): (0, 0, 0), (8, 0): (0, 0, 1), (0, 8): (0, 0, 2), (9, 8): (0, 0, 7),
             (1, 0): (0, 0, 4), (2, 0): (0, 4, 0), (0, 1): (0, 16, 0), (0, 16): (0, 1, 0),
             (0, 64): (0, 128, 0), (16, 0): (1, 0, 0), (7, 23): (0, 125, 4), (7, 31): (0, 125, 6)}
    n = 128
    codes = np.zeros((32, n), np.int64)
    for (k, col), (row, word, lane) in cases.items():
        assert tuple(int(v) for v in marlin_int4_location(k, col, n)) == (row, word, lane)
        codes[:] = 0
        codes[k, col] = 0xA
        packed = marlin_pack_int4(codes).view(np.uint32)
        assert packed[row, word] == 0xA << (4 * lane) and np.count_nonzero(packed) == 1


def test_marlin_int4_same_bytes_as_gptq():
    codes = np.random.default_rng(5).integers(0, 16, (64, 128))
    assert marlin_pack_int4(codes).nbytes == gptq_pack_qweight(codes).nbytes == 64 * 128 // 2


def test_marlin_scale_permutation():
    single = np.arange(64, dtype=np.float16)[None, :]
    p = marlin_permute_scales(single)
    assert p[0, :8].tolist() == [0, 1, 8, 9, 16, 17, 24, 25]      # vLLM scale_perm_single
    assert p[0, 8:10].tolist() == [2, 3]
    grouped = np.arange(128, dtype=np.float32).reshape(2, 64)
    q = marlin_permute_scales(grouped)
    assert q.ravel()[:9].tolist() == [0, 8, 16, 24, 32, 40, 48, 56, 1]   # 8x8 transpose
    for s in (single, grouped, np.random.default_rng(6).standard_normal((4, 192))):
        assert np.array_equal(marlin_unpermute_scales(marlin_permute_scales(s)), s)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: marlin_pack_int4(np.zeros((16, 32), int)), ValueError, "not supported"),
    (lambda: marlin_pack_int4(np.zeros((8, 64), int)), ValueError, "not supported"),
    (lambda: marlin_pack_int4(np.zeros((0, 64), int)), ValueError, "not supported"),
    (lambda: marlin_pack_int4(np.full((16, 64), -1)), ValueError, r"\[0, 15\]"),
    (lambda: marlin_pack_int4(np.zeros((16, 64))), TypeError, "integer"),
    (lambda: marlin_unpack_int4(np.zeros((1, 100), np.int32)), ValueError, "128"),
    (lambda: marlin_unpack_int4(np.zeros((1, 128), np.uint8)), TypeError, "int32"),
    (lambda: gptq_to_marlin(np.zeros((1, 64), np.int32)), ValueError, "not supported"),
    (lambda: marlin_int4_location(0, 0, 100), ValueError, "multiple of 64"),
    (lambda: marlin_int4_location(0, 64, 64), ValueError, "size_n"),
    (lambda: marlin_permute_scales(np.zeros((1, 60))), ValueError, "multiple of 64"),
    (lambda: marlin_permute_scales(np.zeros((1, 64), int)), TypeError, "floating"),
])
def test_marlin_int4_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------------------- Marlin FP8
def test_e4m3_bits_as_fp16_is_value_over_256():
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], np.uint8)   # drop the NaNs
    exact = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64)
    assert np.array_equal(e4m3_bits_as_fp16(codes).astype(np.float64), exact / 256)
    assert e4m3_bits_as_fp16(np.array([0x38], np.uint8))[0] == 2.0**-8     # 1.0 -> 1/256


@pytest.mark.parametrize("n, k", [(64, 128), (128, 64), (192, 256)])
def test_marlin_fp8_matches_vllm_formulation(n, k):
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((n, k)) * rng.uniform(0.1, 3, (n, 1))).astype(np.float16)
    w[3] = 0.0                                                     # a zero channel
    fw = marlin_fp8_pack(w)
    scale = np.abs(w.astype(np.float64)).max(axis=1) / 448
    q = w.astype(np.float64) / np.where(scale > 0, scale, 1.0)[:, None]
    codes = q.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)      # (N, K)
    ref = _vllm_marlin_reference(np.ascontiguousarray(codes.T), 8)
    assert fw.packed.dtype == np.uint8 and fw.packed.shape == (k // 16, 16 * n)
    assert np.array_equal(fw.packed.view("<u4"), ref)
    ref_scales = (scale * 256).astype(np.float16)[None, :]
    perm = [2 * i + c for i in range(4) for c in (0, 1, 8, 9, 16, 17, 24, 25)]
    assert np.array_equal(fw.scales, ref_scales.reshape(-1, 32)[:, perm].reshape(1, n))
    assert fw.scales.dtype == np.float16
    got_codes, got_scales = marlin_fp8_unpack(fw)
    assert np.array_equal(got_codes, codes)
    assert np.all(got_codes[3] == 0) and got_scales[3] == 0
    assert fw.nbytes == n * k + 2 * n


def test_marlin_fp8_reconstruction_error_bound():
    rng = np.random.default_rng(8)
    n, k = 128, 64
    w = rng.standard_normal((n, k))
    codes, scales = marlin_fp8_unpack(marlin_fp8_pack(w))
    deq = codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * scales[:, None]
    # E4M3 rounding: relative error <= 2^-4 for normals, absolute <= 2^-10 * scale below
    # 2^-6 * scale (half the subnormal step 2^-9); the FP16 scale adds <= 2^-11 relative.
    bound = (2**-4 + 2**-11) * np.abs(w) * (1 + 2**-11) + 2**-10 * scales[:, None] * (1 + 2**-11)
    assert np.all(np.abs(deq - w) <= bound)
    rel = np.linalg.norm(deq - w) / np.linalg.norm(w)
    # Gaussian weights, E4M3 with one scale per column: mostly normals, whose rounding error is
    # uniform within +-2^-4 relative, RMS 2^-4 / sqrt(3) = 3.6% at most and about 2.5% in
    # practice (uniform within a binade weights small relative errors); 5% bounds the former,
    # 1e-3 shows values were rounded at all.
    assert 1e-3 < rel < 0.05


def test_fp8_shape_support_and_source_length():
    assert marlin_fp8_shape_supported(64, 128) and marlin_fp8_shape_supported(128, 64)
    assert not marlin_fp8_shape_supported(64, 64) and not marlin_fp8_shape_supported(63, 128)
    assert not marlin_fp8_shape_supported(0, 128)
    w = np.arange(6, dtype=np.float16).reshape(2, 3)
    assert np.array_equal(fp16_from_bytes(w.astype("<f2").tobytes(), 2, 3), w)
    with pytest.raises(ValueError, match="has 0 bytes, expected 16384"):
        fp16_from_bytes(b"", 64, 128)
    with pytest.raises(TypeError, match="uint8"):
        fp16_from_bytes(np.zeros(12, np.int16), 2, 3)


@pytest.mark.parametrize("call, exc, match", [
    (lambda: marlin_fp8_pack(np.zeros((63, 128))), ValueError, "not supported"),
    (lambda: marlin_fp8_pack(np.zeros((64, 64))), ValueError, "not supported"),
    (lambda: marlin_fp8_pack(np.zeros((64, 128), np.int32)), TypeError, "float16"),
    (lambda: marlin_fp8_pack(np.zeros(64 * 128)), ValueError, "2-D"),
    (lambda: marlin_fp8_unpack(np.zeros(4)), TypeError, "Fp8MarlinWeight"),
    (lambda: e4m3_bits_as_fp16(np.zeros(2, np.int32)), TypeError, "uint8"),
])
def test_marlin_fp8_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_marlin_fp8_non_finite_names_position(bad):
    w = np.zeros((64, 128), np.float16)
    w[5, 17] = bad
    with pytest.raises(ValueError, match=r"non-finite value at \[n=5, k=17\]"):
        marlin_fp8_pack(w)


# ------------------------------------------------------------------------- QLoRA and NF4
# QLoRA paper (Dettmers et al. 2023), appendix E: the NF4 data type.
NF4_PAPER = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
             0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
             0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def test_nf4_levels_match_paper_table():
    # The paper's values are float32 results of a float32 linspace: the input probabilities
    # carry ~6e-8 error, the quantile's slope near the top is ~14, and dividing by 1.85 gives
    # ~5e-7 at most; 1e-6 leaves margin.
    assert np.allclose(nf4_levels(), NF4_PAPER, rtol=0, atol=1e-6)
    assert nf4_levels()[7] == 0.0 and nf4_levels()[0] == -1.0 and nf4_levels()[-1] == 1.0


def test_nf4_codes_issue_example():
    q = absmax_quantize(np.array([1.0, -0.5, 0.0, 0.25]), nf4_levels(), block=4)
    assert q.codes.tolist() == [15, 2, 7, 10]
    assert absmax_quantize(np.array([1.0, 0.9]), nf4_levels(), block=2).codes[1] == 15
    assert nf4_levels()[15] == 1.0


def test_codebooks_by_hand():
    assert np.array_equal(int4_levels() * 7, np.arange(-7, 8))
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6.0])
    assert np.array_equal(fp4_levels() * 6, np.concatenate([-e2m1[:0:-1], e2m1]))


@SETTINGS
@given(st.integers(1, 300), st.sampled_from([16, 64, 100]), st.integers(0, 2**32 - 1),
       st.sampled_from(["nf4", "int4", "fp4"]))
def test_absmax_codes_are_nearest_levels(size, block, seed, book):
    levels = {"nf4": nf4_levels, "int4": int4_levels, "fp4": fp4_levels}[book]()
    x = np.random.default_rng(seed).standard_normal(size)
    q = absmax_quantize(x, levels, block)
    assert q.absmax.dtype == np.float32 and q.absmax.shape == (-(-size // block),)
    # brute force: distance to every level, per element
    scale = np.repeat(q.absmax.astype(np.float64), block)[:size]
    normalized = x / scale
    dist = np.abs(normalized[:, None] - levels[None, :])
    chosen = dist[np.arange(size), q.codes]
    assert np.all(chosen <= dist.min(axis=1) + 1e-12)
    # the largest gap between levels bounds the error: half a gap times the block's absmax
    gap = np.diff(levels).max()
    assert np.all(np.abs(absmax_dequantize(q) - x) <= gap / 2 * scale * (1 + 1e-6))


def test_absmax_zero_block_and_shape():
    x = np.zeros((2, 64))
    x[1] = np.linspace(-1, 1, 64)
    q = absmax_quantize(x, nf4_levels(), 64)
    assert q.absmax[0] == 0 and np.all(absmax_dequantize(q)[0] == 0)
    assert absmax_dequantize(q).shape == (2, 64)


def test_qlora_bits_per_parameter_hand_derived():
    # 4 bits of code; single: + 32/64; double: + 8/64 + 32/(64*256) = 4 + 1/8 + 1/512
    assert qlora_bits_per_parameter(double_quant=False) == 4.5
    assert qlora_bits_per_parameter() == 4 + 1 / 8 + 1 / 512 == 4.126953125
    x = np.random.default_rng(9).standard_normal(2**20)
    t = qlora_quantize(x)
    # 2^19 code bytes + 2^14 scale codes + 64 FP32 steps + 1 FP32 mean
    assert t.nbytes == 2**19 + 2**14 + 64 * 4 + 4
    assert abs(t.bits_per_parameter - 4.127) < 5e-4
    assert qlora_quantize(x, double_quant=False).bits_per_parameter == 4.5


def test_qlora_packs_high_nibble_first():
    x = np.array([1.0, -1.0, 0.0, 1.0])                # NF4 codes 15, 0, 7, 15
    t = qlora_quantize(x, double_quant=False)
    assert t.data.tolist() == [0xF0, 0x7F]


@pytest.mark.parametrize("center, signed", [(True, True), (False, True), (False, False)])
def test_double_quant_error_bounds(center, signed):
    rng = np.random.default_rng(10)
    x = rng.standard_normal(64 * 1024) * 0.02
    q = absmax_quantize(x, nf4_levels(), 64)
    dq = double_quantize(q.absmax, 256, center=center, signed=signed, code="int8")
    assert dq.codes.dtype == (np.int8 if signed else np.uint8)
    assert dq.super_scales.shape == (4,) and dq.super_scales.dtype == np.float32
    assert (dq.offset != 0) == center
    recon = double_dequantize(dq)
    step = np.repeat(dq.super_scales.astype(np.float64), 256)
    # rounding to the nearest code: at most half a step (float32 step and offset: 1e-6 slack)
    assert np.all(np.abs(recon - q.absmax) <= step / 2 * (1 + 1e-6) + 1e-9)
    if center or not signed:
        # QLoRA-style storage moves each weight by at most 1 % of its single-quantized value
        single = absmax_dequantize(q)
        double = absmax_dequantize(q, recon)
        nz = single != 0
        assert np.max(np.abs(double[nz] - single[nz]) / np.abs(single[nz])) <= 0.01


def test_double_quant_steps_by_hand():
    # absmax values crowd around their mean; a signed code without the offset leaves its
    # negative half unused, so its step max/127 is more than twice the centered one.
    x = np.random.default_rng(11).standard_normal(64 * 256)
    a = absmax_quantize(x, nf4_levels(), 64).absmax
    a64 = a.astype(np.float64)
    centered = double_quantize(a, code="int8").super_scales[0]
    signed = double_quantize(a, center=False, code="int8").super_scales[0]
    unsigned = double_quantize(a, center=False, signed=False, code="int8").super_scales[0]
    assert centered == np.float32(np.abs(a64 - np.float32(a64.mean())).max() / 127)
    assert signed == np.float32(a64.max() / 127) and unsigned == np.float32(a64.max() / 255)
    assert 2 * centered < signed


def test_double_quant_small_input_one_block():
    dq = double_quantize(np.array([1.0, 2.0, 3.0, 4.0], np.float32), code="int8")
    assert dq.super_scales.shape == (1,) and dq.offset == np.float32(2.5)
    # centered values -1.5 -0.5 0.5 1.5, step 1.5 / 127: codes -127, round(-42.33), 42, 127
    assert dq.codes.tolist() == [-127, -42, 42, 127]
    assert np.allclose(double_dequantize(dq), [1, 2, 3, 4], atol=1.5 / 127 / 2)


def test_qlora_round_trip_equals_components():
    x = np.random.default_rng(12).standard_normal((3, 100))
    t = qlora_quantize(x)
    q = absmax_quantize(x, nf4_levels(), 64)
    expected = absmax_dequantize(q, double_dequantize(double_quantize(q.absmax)))
    assert np.array_equal(qlora_dequantize(t), expected)
    assert qlora_dequantize(qlora_quantize(np.zeros(128))).tolist() == [0.0] * 128


@pytest.mark.parametrize("call, exc, match", [
    (lambda: absmax_quantize(np.array([1.0, np.nan]), nf4_levels()), ValueError, "non-finite"),
    (lambda: absmax_quantize(np.array([], float), nf4_levels()), ValueError, "empty"),
    (lambda: absmax_quantize(np.ones(4, complex), nf4_levels()), TypeError, "dtype"),
    (lambda: absmax_quantize(np.ones(4), nf4_levels(), block=0), ValueError, "block"),
    (lambda: absmax_quantize(np.ones(4), nf4_levels(), block=2.5), TypeError, "block"),
    (lambda: absmax_quantize(np.ones(4), np.arange(17) / 16), ValueError, "levels"),
    (lambda: absmax_quantize(np.ones(4), [0.5, 0.2]), ValueError, "levels"),
    (lambda: absmax_dequantize(np.ones(4)), TypeError, "AbsmaxQuantized"),
    (lambda: absmax_dequantize(absmax_quantize(np.ones(128), nf4_levels()), np.ones(3)),
     ValueError, "shape"),
    (lambda: double_quantize(np.array([1.0, -1.0])), ValueError, "non-negative"),
    (lambda: double_quantize(np.ones((2, 2))), ValueError, "1-D"),
    (lambda: double_quantize(np.array([1.0, np.inf])), ValueError, "non-finite"),
    (lambda: double_quantize(np.ones(4), center=True, signed=False), ValueError, "signed"),
    (lambda: double_dequantize(np.ones(3)), TypeError, "DoubleQuantizedScales"),
    (lambda: double_quantize(np.ones(4), code="fp8"), ValueError, "code"),
    (lambda: qlora_quantize(np.array([np.inf])), ValueError, "non-finite"),
    (lambda: qlora_dequantize(np.ones(3)), TypeError, "QLoRATensor"),
    (lambda: qlora_bits_per_parameter(block=0), ValueError, "block"),
])
def test_qlora_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_result_types_are_exported():
    # the containers are public: users check isinstance and read their fields
    t = qlora_quantize(np.ones(64))
    assert isinstance(t, QLoRATensor) and isinstance(t.absmax, DoubleQuantizedScales)
    assert isinstance(absmax_quantize(np.ones(4), nf4_levels()), AbsmaxQuantized)
    assert isinstance(gptq_quantize(np.ones((64, 8)), 64), GPTQWeight)
    assert isinstance(marlin_fp8_pack(np.ones((64, 128))), Fp8MarlinWeight)
    assert isinstance(pack_block_fp4(mx_quantize(np.ones((1, 32)), FP4_E2M1), "mxfp4"), PackedFP4)


# ------------------------------------------------------------------ QLoRA's dynamic 8-bit map
def bnb_create_dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes ``functional.create_dynamic_map`` (git HEAD), transcribed as written:
    float32 torch.linspace, float32 means, a Python float times a float32 tensor."""
    torch = pytest.importorskip("torch", reason="the bitsandbytes transcription uses torch")
    data = []
    non_sign_bits = total_bits - 1
    additional_items = 2 ** (non_sign_bits - max_exponent_bits) - 1
    for i in range(max_exponent_bits):
        fraction_items = int(2 ** (i + non_sign_bits - max_exponent_bits) + 1 if signed
                             else 2 ** (i + non_sign_bits - max_exponent_bits + 1) + 1)
        boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        data += ((10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
        if signed:
            data += (-(10 ** (-(max_exponent_bits - 1) + i)) * means).tolist()
    assert additional_items == 0  # the defaults; that branch is not transcribed
    data += [0, 1.0]
    data += [0] * (256 - len(data))
    data.sort()
    return torch.tensor(data, dtype=torch.float32).numpy()


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_map_is_bitsandbytes_definition(signed):
    ref = bnb_create_dynamic_map(signed)
    got = dynamic_map(signed)
    assert got.dtype == np.float32 and got.shape == (256,)
    # bitsandbytes rounds to float32 up to four times (linspace base + step * i, the mean,
    # the product with 10^k), at most half an ulp each: 2 ulps; here float64, rounded once.
    ulps = np.abs(got.astype(np.float64) - ref) / np.spacing(np.abs(ref)).astype(np.float64)
    assert ulps.max() <= 2
    assert got[-1] == 1.0 and 0.0 in got
    assert np.all(np.diff(got) > 0)  # 256 distinct values, ascending
    if signed:  # 2 * (1 + 2 + ... + 64) values, symmetric, plus 0 and 1
        assert np.array_equal(got[:127], -got[128:255][::-1]) and got[127] == 0.0
        assert np.isclose(got[128], 1e-6 * 0.55)  # smallest: 10^-6 x midpoint of [0.1, 1]


def test_dynamic_double_quant_is_nearest_map_value():
    rng = np.random.default_rng(21)
    a = np.abs(rng.standard_t(3, 4096)).astype(np.float32) + np.float32(0.01)
    dq = double_quantize(a, 256)
    assert dq.codes.dtype == np.uint8 and dq.code_map is not None
    v = a.astype(np.float64) - np.float64(dq.offset)
    amax = np.abs(v.reshape(16, 256)).max(axis=1).astype(np.float32)
    assert np.array_equal(dq.super_scales, amax)
    norm = (v.reshape(16, 256) / amax[:, None].astype(np.float64)).ravel()
    # bitsandbytes' reference path: argmin |v / absmax - code| (the first, lower, on ties)
    ref = np.argmin(np.abs(norm[:, None] - dynamic_map().astype(np.float64)[None, :]), axis=1)
    assert np.array_equal(dq.codes, ref)
    recon = double_dequantize(dq)
    assert np.allclose(recon, dynamic_map()[ref] * np.repeat(amax, 256) + dq.offset, rtol=0,
                       atol=1e-6)


def outlier_heavy_weight():
    """An outlier-heavy weight: normal, 0.1 % of values x 1e3, a 1e6 in every 97th row."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4096, 256))
    x[rng.random(x.shape) < 1e-3] *= 1e3
    x[::97, 0] = 1e6
    return x


def test_int8_second_level_fails_on_outliers_dynamic_map_does_not():
    x = outlier_heavy_weight()
    single = sqnr_db(qlora_dequantize(qlora_quantize(x, double_quant=False)), x)
    dyn = sqnr_db(qlora_dequantize(qlora_quantize(x)), x)
    int8 = sqnr_db(qlora_dequantize(qlora_quantize(x, code="int8")), x)
    # Measured 76.0 / 37.4 / 17.7 dB: the INT8 step max|v|/127 of a block that holds a 1e6
    # absmax is ~8000, so every ordinary absmax (~3) collapses onto the mean.
    assert single > 70 and 35 < dyn < 40 and int8 < 20 and dyn - int8 > 15
    # On well-behaved weights both second levels cost under 0.01 dB against FP32 scales.
    w = np.random.default_rng(1).standard_normal(2**18) * 0.02
    ref = sqnr_db(qlora_dequantize(qlora_quantize(w, double_quant=False)), w)
    for code in ("dynamic", "int8"):
        assert abs(sqnr_db(qlora_dequantize(qlora_quantize(w, code=code)), w) - ref) < 0.01


def test_qlora_pads_an_odd_count_with_the_code_of_zero():
    # bitsandbytes pads the normalized data with 0.0, i.e. NF4 code 7.
    t = qlora_quantize(np.array([1.0, -1.0, 0.5]), double_quant=False)
    assert t.data.tolist() == [0xF0, 0xC7]
    assert nf4_levels()[7] == 0.0
    assert qlora_dequantize(t).tolist() == [1.0, -1.0, float(nf4_levels()[12])]
