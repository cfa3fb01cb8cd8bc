"""The float32 fast paths of FloatFormat.round / encode against ml_dtypes and a plain grid search.

float32 input takes 32-bit pattern arithmetic (BF16) or a float32 FPU rounding (E4M3 ... FP16);
encode computes codes from the rounded value's own bit pattern. These tests feed them every
float32 exponent with the mantissa tails where rounding decides (exact grid values, ties, one
unit either side, all ones), NaN payloads (quiet, signalling, both signs) and float32
subnormals, and check each result bit for bit against an independent oracle.
"""

import warnings

import numpy as np
import pytest

from numfmt import (BF16, E8M0, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FP16,
                    FloatFormat)
from numfmt._reference import reference_dtypes

# Every format with a reference type except the FNUZ ones: their one NaN (0x80) has no sign,
# where the NaN checks below expect the value's sign; tests/test_formats.py covers them.
ORACLE = {f: t for f, t in reference_dtypes().items() if f.specials != "fnuz"}
ALL = list(ORACLE)
CANONICAL_NAN = 0x7FF8_0000_0000_0000  # what round() documents for NaN (sign from the input)


def edge_patterns(man_bits: int, seed: int = 0) -> np.ndarray:
    """float32 values: every sign and exponent field, with the mantissa tails that decide
    rounding to ``man_bits`` bits, plus NaN payloads and 2^16 random patterns."""
    s = 23 - man_bits
    half = 1 << (s - 1)
    tails = sorted({0, 1, half - 1, half, half + 1, (1 << s) - 1} & set(range(1 << s)))
    heads = sorted({0, 1, 2, (1 << man_bits) - 2, (1 << man_bits) - 1} & set(range(1 << man_bits)))
    sign = np.arange(2, dtype=np.uint32)[:, None, None, None] << 31
    exp = np.arange(256, dtype=np.uint32)[None, :, None, None] << 23
    head = np.array(heads, dtype=np.uint32)[None, None, :, None] << s
    tail = np.array(tails, dtype=np.uint32)[None, None, None, :]
    grid = (sign | exp | head | tail).ravel()
    nans = np.array([0x7F80_0001, 0x7F80_7FFF, 0x7FBF_FFFF, 0x7FC0_0000, 0x7FC0_8000,
                     0x7FFF_FFFF, 0x7F80_8000], dtype=np.uint32)
    rand = np.random.default_rng(seed).integers(0, 1 << 32, 1 << 16, dtype=np.uint32)
    return np.concatenate([grid, nans, nans | np.uint32(1 << 31), rand]).view(np.float32)


def widen(x) -> np.ndarray:
    """float32 to float64 (a signalling NaN becomes quiet: numpy warns, we don't care)."""
    with np.errstate(invalid="ignore"):
        return np.asarray(x).astype(np.float64)


def bits(a) -> np.ndarray:
    return widen(a).view(np.uint64)


def ml_round(fmt, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(invalid="ignore"):
            return x.astype(ORACLE[fmt]).astype(np.float64)


def ml_codes(fmt, x):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(invalid="ignore"):
            return x.astype(ORACLE[fmt]).view(np.uint16 if fmt.bits > 8 else np.uint8)


def checkable(fmt, x) -> np.ndarray:
    """Where ml_dtypes defines numfmt's result: not NaN, and outside E8M0's lowest binade
    (ml_dtypes 0.5/0.6 rounded it up; tests/test_formats.py checks it by version)."""
    keep = ~np.isnan(x)
    if fmt is E8M0:
        keep &= ~((x > 2.0**-127) & (x < 2.0**-126))
    return keep


def test_the_shipped_formats_take_the_paths_the_module_describes():
    # If a format silently fell back, the speed would go but these tests would still pass.
    assert BF16._float32_path == "bits"
    for fmt in (FP16, FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1):
        assert fmt._float32_path == "fpu", fmt
    assert E8M0._float32_path is None  # unsigned, and 2^-127 is not a float32 normal


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_round_of_edge_patterns_equals_ml_dtypes_bit_for_bit(fmt):
    x = edge_patterns(min(fmt.man_bits, 22))
    ours = fmt.round(x, saturate=False)
    keep = checkable(fmt, x)
    assert np.array_equal(bits(ours[keep]), bits(ml_round(fmt, x[keep])))
    nan_in = np.isnan(x)
    sign = (x.view(np.uint32) >> 31).astype(np.uint64) << 63
    expected_nan = np.uint64(CANONICAL_NAN) | (sign if fmt.signed else np.zeros_like(sign))
    assert np.array_equal(bits(ours[nan_in]), expected_nan[nan_in])


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_saturating_round_of_edge_patterns_is_ml_dtypes_of_the_clamped_value(fmt):
    x = edge_patterns(min(fmt.man_bits, 22), seed=1)
    ours = fmt.round(x)
    top = np.float32(fmt.max_value)
    clamped = np.clip(x, -top if fmt.signed else 0, top)  # NaN stays NaN
    keep = checkable(fmt, x) & ((x > 0) | fmt.signed)
    assert np.array_equal(bits(ours[keep]), bits(ml_round(fmt, clamped[keep])))


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_float32_path_equals_the_float64_path_on_every_pattern(fmt, saturate):
    # float64 input takes the general path, itself checked against ml_dtypes in test_formats.
    x = edge_patterns(min(fmt.man_bits, 22), seed=2)
    assert x.size > 1 << 16  # more than one chunk of round's and encode's loops
    assert np.array_equal(bits(fmt.round(x, saturate=saturate)),
                          bits(fmt.round(widen(x), saturate=saturate)))
    if fmt.has_nan:
        assert np.array_equal(fmt.encode(x, saturate=saturate),
                              fmt.encode(widen(x), saturate=saturate))


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_encode_of_edge_patterns_equals_ml_dtypes(fmt):
    x = edge_patterns(min(fmt.man_bits, 22), seed=3)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    ours = fmt.encode(x, saturate=False)
    keep = checkable(fmt, x)
    assert ours.dtype == (np.uint16 if fmt.bits > 8 else np.uint8)
    assert np.array_equal(ours[keep], ml_codes(fmt, x[keep]))


def nan_code(fmt, negative: bool) -> int:
    """The NaN pattern encode documents: E4M3 0x7F, E5M2 0x7E, FP16 0x7E00, BF16 0x7FC0,
    E8M0 0xFF, with the sign bit of the value."""
    m, top = fmt.man_bits, (1 << fmt.exp_bits) - 1
    mant = (1 << (m - 1)) if fmt.specials == "ieee" else (1 << m) - 1
    return (top << m | mant) | (int(negative and fmt.signed) << (fmt.bits - 1))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_encode_of_every_code_value_gives_that_code(fmt, dtype):
    codes = np.arange(1 << fmt.bits)
    v = ml_round(fmt, codes.astype(np.uint16 if fmt.bits > 8 else np.uint8).view(ORACLE[fmt]))
    with np.errstate(invalid="ignore"):  # exact: every value here is a float32 number
        v = v.astype(dtype)
    nan = np.isnan(v)
    ours = fmt.encode(v, saturate=False)
    assert np.array_equal(ours[~nan], codes[~nan])
    expected = [nan_code(fmt, bool(c >> (fmt.bits - 1))) for c in codes[nan]]
    assert ours[nan].tolist() == expected
    assert nan_code(FP8_E4M3, False) == 0x7F and nan_code(FP8_E5M2, True) == 0xFE


# ----------------------------------------------------------------- formats no library has
def grid_of(fmt) -> np.ndarray:
    """Non-negative values of ``fmt`` by code, from the field definitions, plus the value one
    step beyond max (rounding to it means overflow)."""
    m, top = fmt.man_bits, (1 << fmt.exp_bits) - 1
    vals = [k * 2.0 ** (fmt.emin - m) for k in range(1 << m)]  # subnormals, from 0
    last = top - 1 if fmt.specials == "ieee" else top
    for e in range(1, last + 1):
        for k in range(1 << m):
            vals.append((1 + k / 2**m) * 2.0 ** (e - fmt.bias))
    if fmt.specials == "fn":
        vals.pop()  # all ones is NaN
    return np.array(vals + [vals[-1] + 2.0 ** (np.floor(np.log2(vals[-1])) - m)])


def reference_round(fmt, x: np.ndarray, saturate: bool) -> np.ndarray:
    """Nearest grid value, ties to the even code, by search over the whole grid."""
    g = grid_of(fmt)
    a = np.abs(widen(x))
    finite = np.isfinite(a)
    i = np.clip(np.searchsorted(g, np.where(finite, a, 0.0)), 1, len(g) - 1)
    lo, hi = g[i - 1], g[i]
    d_lo, d_hi = a - lo, hi - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (i % 2 == 0))
    pick_hi |= a > g[-1]
    r = np.where(pick_hi, hi, lo)
    over = (r == g[-1]) | np.isinf(a)
    if saturate or fmt.specials == "none":
        r = np.where(over, g[-2], r)
    else:
        r = np.where(over, np.inf if fmt.specials == "ieee" else np.nan, r)
    r = np.where(np.isnan(a), np.nan, r)
    return np.copysign(r, widen(x))


CUSTOM = [FloatFormat("E8M3", 8, 3, 127, "ieee"),   # BF16's exponents: the "bits" path
          FloatFormat("E6M4", 6, 4, 31, "fn"),      # the "fpu" path with an E4M3-like top
          FloatFormat("E4M5", 4, 5, 7, "none"),     # the "fpu" path without specials
          FloatFormat("E8M2", 8, 2, 100, "ieee")]   # binades beyond float32's: general path


def test_custom_formats_take_the_expected_paths():
    assert [f._float32_path for f in CUSTOM] == ["bits", "fpu", "fpu", None]


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", CUSTOM, ids=str)
def test_custom_formats_round_like_a_grid_search(fmt, saturate):
    x = edge_patterns(fmt.man_bits, seed=4)
    x = x[(np.abs(x) < 2.0**127) | ~np.isfinite(x)]  # the grid's step beyond max fits float64
    ours, ref = fmt.round(x, saturate=saturate), reference_round(fmt, x, saturate)
    keep = ~np.isnan(ref)
    assert np.array_equal(bits(ours[keep]), bits(ref[keep]))
    assert np.isnan(ours[~keep]).all()
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    assert np.array_equal(fmt.encode(x, saturate=saturate),
                          fmt.encode(widen(x), saturate=saturate))


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", ALL + CUSTOM[:3], ids=str)
def test_torch_twin_of_the_float32_paths_is_bit_identical(fmt, saturate):
    # numfmt.torch rounds float32 tensors with the same float32 arithmetic, in chunks on the
    # CPU: 2 x 82K patterns cross its 128K chunk boundary.
    torch = pytest.importorskip("torch")
    import numfmt.torch as nt
    x = np.concatenate([edge_patterns(min(fmt.man_bits, 22), seed=5)] * 2)
    assert x.size > 1 << 17
    ours = nt.round(torch.from_numpy(x), fmt, saturate=saturate).numpy()
    assert np.array_equal(bits(ours), bits(fmt.round(x, saturate=saturate)))
    if not fmt.has_nan:
        with pytest.raises(ValueError, match="no NaN"):
            nt.encode(torch.from_numpy(x), fmt)
        x = x[~np.isnan(x)]
    codes = nt.encode(torch.from_numpy(x), fmt, saturate=saturate).numpy()
    assert np.array_equal(codes, fmt.encode(x, saturate=saturate))


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_decode_of_every_code_equals_ml_dtypes_with_the_canonical_nan(fmt):
    # BF16 decodes by shifting its codes into float32 patterns; the others use a table.
    codes = np.arange(1 << fmt.bits).astype(np.uint16 if fmt.bits > 8 else np.uint8)
    ours = fmt.decode(codes)
    theirs = ml_round(fmt, codes.view(ORACLE[fmt]))
    nan = np.isnan(theirs)
    assert np.array_equal(bits(ours[~nan]), bits(theirs[~nan]))
    sign = np.uint64(1 << 63) * ((codes[nan].astype(np.uint64) >> (fmt.bits - 1)) & 1)
    expected = np.uint64(CANONICAL_NAN) | (sign if fmt.signed else np.zeros_like(sign))
    assert np.array_equal(bits(ours[nan]), expected)
    one = fmt.decode(codes[1])  # a scalar code gives a 0-d array, as documented
    assert isinstance(one, np.ndarray) and one.shape == () and bits(one) == bits(ours[1])


def test_a_format_with_a_flag_this_module_does_not_know_takes_the_general_path():
    # A later FloatFormat flag (say, AMD's FNUZ specials) changed from its default must not
    # reach arithmetic written without it; at its default the fast paths stay.
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Flagged(FloatFormat):
        new_flag: bool = False

    assert Flagged("E4M3", 4, 3, 7, "fn")._float32_path == "fpu"
    assert Flagged("E4M3", 4, 3, 7, "fn", new_flag=True)._float32_path is None
    assert Flagged("BF16", 8, 7, 127, "ieee", new_flag=True)._float32_path is None


# ----------------------------------------------------------------- E8M0 from float32
def e8m0_easy_patterns() -> np.ndarray:
    """Positive float32 normals from 2^-126 to just below 1.5 * 2^127, with the mantissa tails
    that decide E8M0's rounding (the tie 0x400000 rounds up)."""
    exp = np.arange(1, 255, dtype=np.uint32)[:, None] << 23
    tails = np.array([0, 1, 0x3F_FFFF, 0x40_0000, 0x40_0001, 0x7F_FFFF], dtype=np.uint32)
    x = (exp | tails).ravel()
    return x[x < 0x7F40_0000].view(np.float32)  # 0x7F400000 = 1.5 * 2^127 rounds past 2^127


def test_e8m0_float32_path_on_easy_values_equals_hand_values_and_ml_dtypes():
    x = e8m0_easy_patterns()
    assert E8M0._pow2_float32 and E8M0._nearest_pow2_float32(x) is not None  # path taken
    ours = E8M0.round(x, saturate=False)
    assert np.array_equal(bits(ours), bits(ml_round(E8M0, x)))
    assert np.array_equal(bits(ours), bits(E8M0.round(widen(x), saturate=False)))
    hand = np.float32([1.5, 3.0, 1.4999999, 0.75, 2.0**-126, np.float32(1.5 * 2.0**127) * 0.99999994])
    assert E8M0.round(hand).tolist() == [2.0, 4.0, 1.0, 1.0, 2.0**-126, 2.0**127]


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("odd", [0.0, -1.0, np.nan, -np.nan, np.inf, 1.5 * 2.0**127,
                                 2.0**-126 * 0.75, 2.0**-127, 2.0**-149])
def test_e8m0_float32_chunks_the_bit_path_cannot_take_use_the_float64_path(odd, saturate):
    # One value outside [2^-126, 1.5 * 2^127) sends its chunk (only it) to the float64 path:
    # zero and negatives give NaN, overflow 2^127 or NaN, E8M0's lowest binade 2^-127 or 2^-126.
    easy = np.resize(e8m0_easy_patterns(), (1 << 16) + 5)
    x = np.concatenate([easy, easy])
    x[(1 << 16) + 100] = np.float32(odd)  # in the second chunk
    assert E8M0._nearest_pow2_float32(x[(1 << 16):2 << 16]) is None
    assert E8M0._nearest_pow2_float32(x[:1 << 16]) is not None
    ours = E8M0.round(x, saturate=saturate)
    assert np.array_equal(bits(ours), bits(E8M0.round(widen(x), saturate=saturate)))
    assert np.array_equal(bits(E8M0.round(x[:1000], saturate=saturate)),  # one small chunk
                          bits(E8M0.round(widen(x[:1000]), saturate=saturate)))


def test_e8m0_float32_path_raises_no_numpy_warning():
    x = np.resize(e8m0_easy_patterns(), 3 << 16)
    x.view(np.uint32)[7] = 0x7F80_0001  # a signalling NaN
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(E8M0.round(x)[7])


@pytest.mark.parametrize("cdtype", [np.uint8, np.uint16, np.int64])
@pytest.mark.parametrize("fmt", [E8M0, BF16], ids=str)
def test_shift_decoders_over_chunks_with_and_without_special_codes(fmt, cdtype):
    # E8M0 and BF16 decode by shifting codes into float32 patterns, chunk by chunk, fixing
    # E8M0's codes 0 (2^-127) and 0xFF (NaN) and BF16's NaN only in chunks that hold them.
    n = 1 << 16
    if fmt is BF16 and cdtype is np.uint8:
        pytest.skip("BF16 codes need 16 bits")
    rng = np.random.default_rng(6)
    plain = rng.integers(1, 0xFF, n) if fmt is E8M0 else rng.integers(0, 0x7F80, n)  # no NaN
    every = np.arange(1 << fmt.bits)
    codes = np.concatenate([plain, np.resize(every, n), plain[:77]]).astype(cdtype)
    ours = fmt.decode(codes)
    theirs = ml_round(fmt, codes.astype(np.uint16 if fmt.bits > 8 else np.uint8).view(ORACLE[fmt]))
    nan = np.isnan(theirs)
    assert nan[n:2 * n].any() and not nan[:n].any()
    assert np.array_equal(bits(ours[~nan]), bits(theirs[~nan]))
    sign = np.uint64(1 << 63) * ((codes[nan].astype(np.uint64) >> (fmt.bits - 1)) & 1)
    expected = np.uint64(CANONICAL_NAN) | (sign if fmt.signed else np.zeros_like(sign))
    assert np.array_equal(bits(ours[nan]), expected)
    if fmt is E8M0:
        assert ours[n] == 2.0**-127 and ours[n + 254] == 2.0**127  # codes 0 and 0xFE by hand


# ----------------------------------------------------------------- dtype=float32 results
def bits32(a) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


FORMATS32 = list(reference_dtypes()) + CUSTOM[:3]


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", FORMATS32, ids=str)
def test_round_to_float32_is_the_float64_result_narrowed(fmt, saturate):
    # Every value of these formats is a float32 number: narrowing round()'s float64 result is
    # exact, and dtype=float32 must give those very bits, on each path (float32 chunks,
    # float64 input, one small array, stochastic rounding), with no numpy warning.
    x32 = edge_patterns(min(fmt.man_bits, 22), seed=7)
    if fmt.name == "FP32":
        x32 = x32[np.isfinite(x32)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (x32, widen(x32), x32[:999]):
            ours = fmt.round(x, saturate=saturate, dtype=np.float32)
            assert ours.dtype == np.float32 and ours.shape == x.shape
            ref = fmt.round(x, saturate=saturate)
            with np.errstate(invalid="ignore"):
                assert np.array_equal(bits32(ours), bits32(ref))
        s = fmt.round(x32[:5000], saturate, "stochastic", rng=3, dtype="float32")
        assert np.array_equal(bits32(s), bits32(fmt.round(x32[:5000], saturate, "stochastic",
                                                           rng=3)))


@pytest.mark.parametrize("fmt", list(ORACLE), ids=str)
def test_round_to_float32_equals_the_ml_dtypes_round_trip(fmt):
    # The round trip x.astype(ml_dtype).astype(float32) a user would otherwise write.
    x = edge_patterns(min(fmt.man_bits, 22), seed=8)
    ours = fmt.round(x, saturate=False, dtype=np.float32)
    keep = checkable(fmt, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(invalid="ignore"):
            theirs = x[keep].astype(ORACLE[fmt]).astype(np.float32)
    assert np.array_equal(bits32(ours[keep]), bits32(theirs))
    sign = x.view(np.uint32)[~keep & np.isnan(x)] & np.uint32(1 << 31)
    expected = np.uint32(0x7FC0_0000) | (sign if fmt.signed else np.zeros_like(sign))
    assert np.array_equal(bits32(ours[~keep & np.isnan(x)]), expected)


REFERENCE = reference_dtypes()


@pytest.mark.parametrize("fmt", list(REFERENCE), ids=str)
def test_decode_to_float32_is_the_float64_result_narrowed_and_ml_dtypes(fmt):
    if fmt.bits > 16:
        codes = np.random.default_rng(9).integers(0, 1 << 32, 1 << 17, dtype=np.uint32)
    else:
        codes = np.resize(np.arange(1 << fmt.bits), (1 << 17) + 3).astype(fmt.code_dtype)
    ours = fmt.decode(codes, dtype=np.float32)
    assert ours.dtype == np.float32
    assert np.array_equal(bits32(ours), bits32(fmt.decode(codes)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        theirs = codes.view(REFERENCE[fmt]).astype(np.float32)
    nan = np.isnan(theirs)
    assert np.array_equal(bits32(ours[~nan]), bits32(theirs[~nan]))
    assert np.isnan(ours[nan]).all()
    assert fmt.decode(codes[3], dtype=np.float32).dtype == np.float32  # 0-d stays 0-d
    assert fmt.decode(codes[3], dtype=np.float32).shape == ()


def test_float32_results_are_refused_where_float32_cannot_hold_the_values():
    wide = CUSTOM[3]  # E8M2 with bias 100: binades up to 2^154
    assert not wide._fits_float32 and FP8_E4M3._fits_float32 and E8M0._fits_float32
    with pytest.raises(ValueError, match="not all float32 numbers"):
        wide.round(np.float32([1.0]), dtype=np.float32)
    with pytest.raises(ValueError, match="not all float32 numbers"):
        wide.decode([1], dtype=np.float32)
    assert FP8_E4M3.round([1.1], dtype=None).dtype == np.float64  # numpy's default
    for bad in (np.float16, "int32", object, 3, np.zeros(2)):
        with pytest.raises(ValueError, match="dtype must be"):
            FP8_E4M3.round([1.0], dtype=bad)
        with pytest.raises(ValueError, match="dtype must be"):
            FP8_E4M3.decode([1], dtype=bad)
    assert FP8_E4M3.round([1.1]).dtype == np.float64  # the default is unchanged


@pytest.mark.parametrize("saturate", [False, True])
@pytest.mark.parametrize("fmt", [f for f in ALL if f._float32_path == "fpu"] + CUSTOM[1:3],
                         ids=str)
def test_fpu_path_on_arrays_without_large_values(fmt, saturate):
    # The "fpu" path skips its upper exponent clamp when no |x| reaches 2^(emax + 1), and its
    # saturation when none exceeds max_value (scaled MX blocks are such arrays): both kinds of
    # array, NaN-free and with NaN, against the float64 path (and ml_dtypes where it exists).
    x = edge_patterns(min(fmt.man_bits, 22), seed=10)
    below_binade = np.resize(x[np.abs(x) < 2.0 ** (fmt.emax + 1)], 3 << 16)  # 3 chunks
    below_top = np.resize(x[np.abs(x) <= fmt.max_value], 3 << 16)
    assert below_binade.max() > fmt.max_value
    for y in (below_binade, below_top, np.append(below_top, np.float32(np.nan))):
        ours = fmt.round(y, saturate=saturate)
        assert np.array_equal(bits(ours), bits(fmt.round(widen(y), saturate=saturate)))
        if fmt in ORACLE and not saturate:
            keep = checkable(fmt, y)
            assert np.array_equal(bits(ours[keep]), bits(ml_round(fmt, y[keep])))


@pytest.mark.parametrize("saturate", [False, True])
def test_bf16_encode_of_float32_over_chunks_equals_ml_dtypes_codes(saturate):
    # BF16's encode of float32 rounds the 32-bit pattern itself, chunk by chunk; chunks with
    # and without NaN, overflow and Inf. Oracle: ml_dtypes' codes (of the value clamped to
    # +-max where saturating; NaN stays NaN there), NaN included: ml_dtypes writes the quiet
    # NaN 0x7FC0 with the value's sign, as numfmt documents.
    n = 1 << 16
    plain = np.random.default_rng(7).standard_normal(n).astype(np.float32)  # no specials
    x = np.concatenate([plain, edge_patterns(7, seed=4), plain[:101]])
    assert x.size > 2 * n
    top = np.float32(BF16.max_value)
    want = ml_codes(BF16, np.clip(x, -top, top) if saturate else x)
    ours = BF16.encode(x, saturate=saturate)
    assert ours.dtype == np.uint16 and np.array_equal(ours, want)
    nan = np.isnan(x)
    assert set(ours[nan].tolist()) == {0x7FC0, 0xFFC0}
    inf = np.isinf(x)  # by hand: BF16's Inf is 0x7F80, its largest finite value 0x7F7F
    assert set(ours[inf].tolist()) == ({0x7F7F, 0xFF7F} if saturate else {0x7F80, 0xFF80})
