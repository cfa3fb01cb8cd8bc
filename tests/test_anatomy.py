"""Tests for numfmt.anatomy against independent oracles: ml_dtypes bit patterns, numpy's own
float16/float32 (np.spacing, np.finfo), brute force over the value grid, hand derivations."""

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from numfmt import BF16, E8M0, FORMATS, FP4_E2M1, FP8_E4M3, FP16, FP32
from numfmt._reference import reference_dtypes
from numfmt.anatomy import (bit_fields, bit_string, max_exact_integer, neighbours,
                            spacing, special_codes)

ML = {f.name: t for f, t in reference_dtypes().items()}  # every format with a reference
SIGNED = [f for f in FORMATS.values() if f.signed]


def test_fp32_constants_match_numpy_finfo():
    fi = np.finfo(np.float32)
    assert FP32.max_value == float(fi.max)
    assert FP32.min_normal == float(fi.smallest_normal)
    assert FP32.min_subnormal == float(fi.smallest_subnormal)
    assert FP32.bits == 32


def test_fp32_round_matches_numpy_float32():
    # magnitudes from below the smallest subnormal (1.4e-45) to near the max (3.4e38)
    x = np.random.default_rng(1).standard_normal(10_000) * 10.0 ** np.linspace(-46, 37, 10_000)
    assert np.array_equal(FP32.round(x, saturate=False), x.astype(np.float32).astype(np.float64))


@pytest.mark.parametrize("name", sorted(ML))
def test_bit_fields_match_ml_dtypes_codes(name):
    fmt = FORMATS[name]
    vals = fmt.values()
    if not fmt.signed:
        vals = vals[vals > 0]
    f = bit_fields(fmt, vals)
    raw = vals.astype(ML[name])
    codes = raw.view(np.uint16 if fmt.bits > 8 else np.uint8).astype(np.int64)
    if fmt.bits < 8:  # ml_dtypes stores sub-byte formats right-aligned in a byte
        codes &= (1 << fmt.bits) - 1
    assert np.array_equal(f.code, codes)
    m, e = fmt.man_bits, fmt.exp_bits
    assert np.array_equal((f.sign << (e + m)) | (f.exponent << m) | f.mantissa, f.code)


def test_bit_string_hand_examples():
    # 1.0 = 1.000 * 2^0: exponent field = bias (7 = 0111 in E4M3, 15 = 01111 in FP16).
    assert bit_string(FP8_E4M3, 1.0) == "0 0111 000"
    assert bit_string(FP16, -2.0) == "1 10000 0000000000"
    assert bit_string(FP4_E2M1, 6.0) == "0 11 1"           # 1.5 * 2^(3-1)
    assert bit_string(FP4_E2M1, 0.5) == "0 00 1"           # subnormal 0.1b * 2^0
    assert bit_string(FP8_E4M3, 448.0) == "0 1111 110"      # 1.75 * 2^(15-7)
    assert bit_string(E8M0, 1.0) == "01111111"             # unsigned, no mantissa field
    with pytest.raises(ValueError, match="single number"):
        bit_string(FP16, [1.0, 2.0])


def test_bit_fields_bad_input():
    with pytest.raises(TypeError, match="FloatFormat"):
        bit_fields("E4M3", 1.0)
    with pytest.raises(ValueError, match="16 bits"):
        bit_fields(FP32, 1.0)
    with pytest.raises(ValueError, match="no NaN"):
        bit_fields(FP4_E2M1, np.nan)
    with pytest.raises(TypeError, match="real"):
        bit_fields(FP16, "1.0")


@pytest.mark.parametrize("fmt", SIGNED, ids=lambda f: f.name)
def test_neighbours_bracket_x_by_brute_force(fmt):
    grid = fmt.values()
    rng = np.random.default_rng(2)
    sample = grid if grid.size < 1000 else rng.choice(grid, 300)
    x = np.concatenate([rng.uniform(-1.2, 1.2, 300) * fmt.max_value, sample, [0.0]])
    lo, hi = neighbours(fmt, x)
    for xi, l, h in zip(x, lo, hi):
        below, above = grid[grid <= xi], grid[grid >= xi]
        assert l == (below.max() if below.size else -np.inf)
        assert h == (above.min() if above.size else np.inf)


def test_neighbours_hand_examples():
    lo, hi = neighbours(FP4_E2M1, [2.4, 3.0, 7.0, -0.2])
    assert lo.tolist() == [2.0, 3.0, 6.0, -0.5]
    assert hi.tolist() == [3.0, 3.0, np.inf, 0.0]
    with pytest.raises(ValueError, match="NaN"):
        neighbours(FP16, np.nan)


@pytest.mark.parametrize("dtype, fmt", [(np.float16, FP16), (np.float32, FP32)])
def test_spacing_matches_numpy_spacing(dtype, fmt):
    rng = np.random.default_rng(3)
    fi = np.finfo(dtype)
    x = np.exp(rng.uniform(np.log(float(fi.smallest_subnormal)), np.log(float(fi.max) / 2), 5000))
    x = x.astype(dtype)
    assert np.array_equal(spacing(fmt, x.astype(np.float64)), np.spacing(x).astype(np.float64))


@pytest.mark.parametrize("fmt", SIGNED, ids=lambda f: f.name)
def test_spacing_is_the_gap_to_the_next_grid_value(fmt):
    grid = fmt.values()
    pos = grid[grid >= 0]
    assert np.array_equal(spacing(fmt, pos[:-1]), np.diff(pos))


def test_spacing_bad_input():
    with pytest.raises(ValueError, match="finite"):
        spacing(FP16, np.inf)
    with pytest.raises(TypeError, match="FloatFormat"):
        spacing(None, 1.0)


@pytest.mark.parametrize("dtype, fmt, n", [(np.float16, FP16, 2048), (np.float32, FP32, 2**24),
                                           (ml_dtypes.bfloat16, BF16, 256)])
def test_max_exact_integer_against_numpy_dtypes(dtype, fmt, n):
    assert max_exact_integer(fmt) == n
    ints = np.arange(n - 5, n + 2, dtype=np.float64)
    back = ints.astype(dtype).astype(np.float64)
    assert np.array_equal(back[:-1], ints[:-1])  # n - 5 ... n exact
    assert back[-1] != ints[-1]                  # n + 1 is not


@pytest.mark.parametrize("fmt", [f for f in SIGNED if f.bits <= 8], ids=lambda f: f.name)
def test_max_exact_integer_by_brute_force(fmt):
    grid = set(fmt.values().tolist())
    n = 0
    while float(n + 1) in grid:
        n += 1
    assert max_exact_integer(fmt) == n


def test_max_exact_integer_refuses_e8m0():
    with pytest.raises(ValueError, match="no zero"):
        max_exact_integer(E8M0)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_special_codes_count_decoded_table(name):
    fmt = FORMATS[name]
    v = fmt.decode(np.arange(1 << fmt.bits))
    assert special_codes(fmt) == (int(np.isinf(v).sum()), int(np.isnan(v).sum()))


def test_special_codes_fp32_against_numpy():
    # Every float32 bit pattern with the all-ones exponent: count Inf and NaN by viewing them.
    m = np.arange(1 << 23, dtype=np.uint32)
    codes = np.concatenate([(0xFF << 23) | m, (0x1FF << 23) | m]).view(np.float32)
    assert special_codes(FP32) == (int(np.isinf(codes).sum()), int(np.isnan(codes).sum()))


@settings(max_examples=200, deadline=None)
@given(st.floats(-500, 500, allow_nan=False))
def test_bit_fields_decode_back_to_the_rounded_value(v):
    f = bit_fields(FP8_E4M3, v)
    assert FP8_E4M3.decode(f.code) == FP8_E4M3.round(v)
