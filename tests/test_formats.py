"""FloatFormat against ml_dtypes (the oracle), the OCP tables, and hand-derived cases."""

import warnings

import ml_dtypes
import numpy as np
import pytest

from numfmt import (BF16, E8M0, FORMATS, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E4M3FNUZ,
                    FP8_E5M2, FP8_E5M2FNUZ, FP16, FloatFormat)
from numfmt._reference import reference_dtypes

# Every format with a reference type (numfmt.formats.REFERENCE_DTYPES): a new format joins
# every oracle test below by its entry in that table.
ORACLE = reference_dtypes()
ALL = list(ORACLE)
SMALL = [f for f in ALL if f.bits <= 8]
SIGNED = [f for f in ALL if f.signed]


def _ml_has_nan(t) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return bool(np.isnan(np.array([np.nan], np.float32).astype(t).astype(np.float64))[0])


NO_NAN = [f for f, t in ORACLE.items() if not _ml_has_nan(t)]  # ml_dtypes: float6/float4


def ml_codes(fmt, values):
    """Bit patterns ml_dtypes gives ``values`` (ml_dtypes converts float64 through float32,
    so callers pass values that float32 holds exactly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        arr = np.asarray(values, dtype=np.float64).astype(ORACLE[fmt])
    return arr.view(np.uint16 if fmt.bits > 8 else np.uint8).astype(np.int64)


# ml_dtypes before 0.7 rounded every value inside E8M0's lowest binade up to 2^-126.
ML_DTYPES_E8M0_ROUNDS_UP = tuple(int(p) for p in ml_dtypes.__version__.split(".")[:2]) < (0, 7)


def ml_round(fmt, values):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(values).astype(ORACLE[fmt]).astype(np.float64)


def ml_decode(fmt, codes):
    codes = np.asarray(codes, dtype=np.uint16 if fmt.bits > 8 else np.uint8)
    with np.errstate(invalid="ignore"):
        return codes.view(ORACLE[fmt]).astype(np.float64)


def same(a, b):
    """Equal values with NaN equal to NaN and -0.0 distinct from +0.0."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and bool(np.all(
        ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))))


# --------------------------------------------------------------------------- constants
# OCP OFP8 rev 1.0 table 1 and OCP MX v1.0 tables 2-4 (max normal, min normal, min subnormal).
OCP_TABLE = [
    (FP8_E4M3, 448.0, 2.0**-6, 2.0**-9, 8),
    (FP8_E5M2, 57344.0, 2.0**-14, 2.0**-16, 8),
    (FP6_E2M3, 7.5, 1.0, 0.125, 6),
    (FP6_E3M2, 28.0, 0.25, 0.0625, 6),
    (FP4_E2M1, 6.0, 1.0, 0.5, 4),
    (E8M0, 2.0**127, 2.0**-127, 2.0**-127, 8),
    (FP16, 65504.0, 2.0**-14, 2.0**-24, 16),
    (BF16, 3.3895313892515355e38, 2.0**-126, 2.0**-133, 16),
]


@pytest.mark.parametrize("fmt,mx,mn,ms,bits", OCP_TABLE, ids=lambda v: getattr(v, "name", ""))
def test_constants_match_published_tables(fmt, mx, mn, ms, bits):
    assert (fmt.max_value, fmt.min_normal, fmt.min_subnormal, fmt.bits) == (mx, mn, ms, bits)
    assert fmt.max_value == float(ml_dtypes.finfo(ORACLE[fmt]).max)


def test_emax_emin():
    assert (FP8_E4M3.emax, FP8_E4M3.emin) == (8, -6)
    assert (FP8_E5M2.emax, FP8_E5M2.emin) == (15, -14)
    assert (FP4_E2M1.emax, FP6_E2M3.emax, FP6_E3M2.emax) == (2, 2, 4)
    assert (E8M0.emax, E8M0.emin) == (127, -127)


def test_e2m1_values_are_the_ocp_list():
    pos = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert FP4_E2M1.values().tolist() == [-v for v in pos[:0:-1]] + pos


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_values_count(fmt):
    # Finite codes minus the duplicate zero: ieee loses a whole binade to Inf/NaN; fnuz has a
    # single zero, and its one NaN is the code -0 would have had.
    n = 1 << fmt.bits
    specials = {"ieee": 2 * (1 << fmt.man_bits), "fn": 2 if fmt.signed else 1, "none": 0,
                "fnuz": 1}
    duplicate_zero = fmt.signed and fmt.specials != "fnuz"
    expected = n - specials[fmt.specials] - (1 if duplicate_zero else 0)
    assert len(fmt.values()) == expected


# --------------------------------------------------------------------------- every code
@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_every_code_decodes_like_ml_dtypes_and_reencodes(fmt):
    codes = np.arange(1 << fmt.bits)
    ours = fmt.decode(codes)
    assert same(ours, ml_decode(fmt, codes))
    finite = np.isfinite(ours)
    # Every finite code is its own image; Inf too (ieee); NaN maps to ml_dtypes' NaN pattern.
    assert np.array_equal(fmt.encode(ours[finite], saturate=False).astype(np.int64), codes[finite])
    assert np.array_equal(fmt.encode(ours[finite]).astype(np.int64), ml_codes(fmt, ours[finite]))
    if fmt.has_inf:
        assert np.array_equal(fmt.encode([np.inf, -np.inf], saturate=False).astype(np.int64),
                              ml_codes(fmt, [np.inf, -np.inf]))
    if fmt.has_nan:
        assert np.array_equal(fmt.encode([np.nan]).astype(np.int64), ml_codes(fmt, [np.nan]))


@pytest.mark.parametrize("fmt", [f for f in ALL if f is not E8M0], ids=str)
def test_every_midpoint_rounds_to_the_even_neighbour(fmt):
    v = fmt.values()
    v = v[v >= 0]
    mid = (v[:-1] + v[1:]) / 2                         # exact in float64
    lo_code, hi_code = ml_codes(fmt, v[:-1]), ml_codes(fmt, v[1:])
    expected = np.where(lo_code % 2 == 0, v[:-1], v[1:])  # even mantissa LSB wins the tie
    assert np.array_equal(fmt.round(mid), expected)
    assert np.array_equal(fmt.round(-mid), -expected)
    assert np.array_equal(fmt.round(mid), ml_round(fmt, mid))
    assert np.all((lo_code % 2) != (hi_code % 2))


def test_e8m0_ties_round_up_as_ml_dtypes():
    x = np.array([1.5, 3.0, 6.0, 0.75, 1.5 * 2.0**-127])
    assert fmt_list(E8M0.round(x)) == [2.0, 4.0, 8.0, 1.0, 2.0**-126]
    assert same(E8M0.round(x), ml_round(E8M0, x))


def fmt_list(a):
    return [float(v) for v in a]


# --------------------------------------------------------------------------- random values
def random_float32(n, seed):
    """Normal, subnormal, overflowing, +-0, +-Inf, NaN: log-uniform magnitudes over 2^-140 .. 2^130."""
    rng = np.random.default_rng(seed)
    mag = np.exp2(rng.uniform(-140, 130, n))
    with np.errstate(over="ignore"):
        x = (mag * rng.choice([-1.0, 1.0], n)).astype(np.float32)
    k = n // 100
    x[:k] = np.float32(0.0)
    x[k:2 * k] = np.float32(-0.0)
    x[2 * k:3 * k] = np.inf
    x[3 * k:4 * k] = -np.inf
    x[4 * k:5 * k] = np.nan
    return rng.permutation(x)


X32 = random_float32(10**6, seed=1234)


@pytest.mark.parametrize("fmt", ALL, ids=str)
def test_one_million_float32_values_round_like_ml_dtypes(fmt):
    ours = fmt.round(X32, saturate=False)
    theirs = ml_round(fmt, X32)
    if fmt in NO_NAN:  # ml_dtypes turns NaN into -0 for formats without NaN: tested apart
        keep = ~np.isnan(X32)
        ours, theirs = ours[keep], theirs[keep]
    if fmt is E8M0 and ML_DTYPES_E8M0_ROUNDS_UP:  # ml_dtypes < 0.7: lowest binade, tested apart
        keep = ~((np.abs(X32) > 2.0**-127) & (np.abs(X32) < 2.0**-126))
        ours, theirs = ours[keep], theirs[keep]
    assert same(ours, theirs)


def test_e8m0_lowest_binade_rounds_to_nearest():
    # 1.2 * 2^-127 is nearer 2^-127 than 2^-126 (the tie is 1.5 * 2^-127, rounded up as E8M0's
    # ties are). ml_dtypes 0.5 and 0.6 returned 2^-126 for every value strictly inside
    # (2^-127, 2^-126); ml_dtypes 0.7 rounds to nearest, as we do.
    x = np.array([1.2, 1.49, 1.5, 1.7]) * 2.0**-127
    nearest = [2.0**-127, 2.0**-127, 2.0**-126, 2.0**-126]
    assert E8M0.round(x).tolist() == nearest
    expected = [2.0**-126] * 4 if ML_DTYPES_E8M0_ROUNDS_UP else nearest
    assert ml_round(E8M0, x).tolist() == expected


@pytest.mark.parametrize("fmt", SIGNED, ids=str)
def test_saturating_round_matches_ml_dtypes_inside_the_range(fmt):
    x = X32[np.abs(X32) <= fmt.max_value]
    assert same(fmt.round(x, saturate=True), ml_round(fmt, x))


def test_float64_is_rounded_once_not_through_float32():
    # 1 + 2^-4 is the tie between E4M3's 1.0 and 1.125; 2^-30 above it rounds up. Through
    # float32 first, the 2^-30 is lost, the tie goes to even, and the answer would be 1.0.
    x = 1.0 + 2.0**-4 + 2.0**-30
    assert np.float32(x) == np.float32(1.0625)
    assert FP8_E4M3.round(x) == 1.125
    assert FP4_E2M1.round(1.25 + 2.0**-40) == 1.5


# --------------------------------------------------------------------------- hand-derived cases
def test_e4m3_saturation_hand_cases():
    x = [448, 464, 465, 1e4, -1e4, np.nan]
    assert same(FP8_E4M3.round(x), [448, 448, 448, 448, -448, np.nan])
    assert same(FP8_E4M3.round(x, saturate=False), [448, 448, np.nan, np.nan, np.nan, np.nan])


def test_e4m3_overflow_semantics_differ_from_ml_dtypes_only_when_saturating():
    # ml_dtypes' float8_e4m3fn has no saturating cast: beyond 464 it gives NaN.
    x = np.array([465.0, 1e4, np.inf])
    assert np.isnan(ml_round(FP8_E4M3, x)).all()
    assert FP8_E4M3.round(x).tolist() == [448.0, 448.0, 448.0]


def test_e5m2_overflow_goes_to_inf_without_saturation():
    # 57344 = 1.75 * 2^15; the tie with 2^16 (61440) rounds to the even code, which is Inf.
    x = [57344.0, 61439.0, 61440.0, -1e6, np.inf]
    assert same(FP8_E5M2.round(x, saturate=False), [57344, 57344, np.inf, -np.inf, np.inf])
    assert same(FP8_E5M2.round(x), [57344, 57344, 57344, -57344, 57344])


def test_e4m3_ties_and_subnormals_hand_cases():
    x = [4.25, 4.75, 2.0**-10, 1.5 * 2.0**-9, 2.5 * 2.0**-9, 1.0001 * 2.0**-10]
    assert FP8_E4M3.round(x).tolist() == [4.0, 5.0, 0.0, 2.0**-8, 2.0**-8, 2.0**-9]


@pytest.mark.parametrize("fmt", NO_NAN, ids=str)
def test_formats_without_specials_always_saturate(fmt):
    x = [1e9, -np.inf, np.inf]
    for sat in (True, False):
        assert fmt.round(x, saturate=sat).tolist() == [fmt.max_value, -fmt.max_value, fmt.max_value]


@pytest.mark.parametrize("fmt", ALL, ids=str)
@pytest.mark.parametrize("saturate", [True, False])
def test_nan_in_gives_nan_out(fmt, saturate):
    assert np.isnan(fmt.round([np.nan, -np.nan], saturate=saturate)).all()


def test_nan_payloads_never_round_to_inf():
    odd_nan = np.array([0x7FF0000000000001, 0xFFF0000000000003], dtype=np.uint64).view(np.float64)
    for fmt in ALL:
        assert np.isnan(fmt.round(odd_nan, saturate=False)).all()


@pytest.mark.parametrize("fmt", NO_NAN, ids=str)
def test_encoding_nan_without_a_nan_pattern_raises(fmt):
    with pytest.raises(ValueError, match="no NaN"):
        fmt.encode([1.0, np.nan])


def test_signed_zero_survives():
    for fmt in [f for f in SIGNED if f.specials != "fnuz"]:
        r = fmt.round([-0.0, -1e-300, 0.0])
        assert np.signbit(r).tolist() == [True, True, False]
        assert fmt.encode([-0.0])[0] == 1 << (fmt.bits - 1)


def test_e8m0_has_no_zero_and_no_negatives():
    r = E8M0.round([0.0, -1.0, 2.0**-130, 2.0**128, np.nan], saturate=False)
    assert same(r, [np.nan, np.nan, 2.0**-127, np.nan, np.nan])
    assert E8M0.round([2.0**128])[0] == 2.0**127


def test_scalar_and_nd_inputs_keep_their_shape():
    assert FP8_E4M3.round(3.3).shape == ()
    assert FP8_E4M3.round(np.ones((2, 3, 4))).shape == (2, 3, 4)
    assert FP8_E4M3.encode(np.ones((2, 3))).dtype == np.uint8
    assert FP16.encode(np.ones(3)).dtype == np.uint16


def test_integer_input_is_accepted():
    assert FP4_E2M1.round(np.array([1, 2, 5, 7])).tolist() == [1.0, 2.0, 4.0, 6.0]


# --------------------------------------------------------------------------- stochastic rounding
@pytest.mark.parametrize("x,p", [(1.125 * 2.0**-14, 0.5), (1.0625 * 2.0**-14, 0.25)])
def test_stochastic_rounding_probability_e5m2(x, p):
    # E5M2's step at 2^-14 is 2^-16 = 0.25 * 2^-14: x lies p of the way from 2^-14 to 1.25 * 2^-14.
    n = 10**5
    r = FP8_E5M2.round(np.full(n, x), mode="stochastic", rng=np.random.default_rng(7))
    assert set(np.unique(r)) <= {2.0**-14, 1.25 * 2.0**-14}
    frac_up = np.mean(r > 2.0**-14)
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(frac_up - p) < 4 * sigma  # 4 sigma: fails by chance about once in 16,000 runs
    assert abs(r.mean() - x) < 4 * sigma * 2.0**-16


@pytest.mark.parametrize("fmt", SIGNED, ids=str)
def test_stochastic_rounding_keeps_grid_values_and_picks_a_neighbour(fmt):
    v = fmt.values()
    assert np.array_equal(fmt.round(v, mode="stochastic", rng=0), v)
    rng = np.random.default_rng(3)
    x = rng.uniform(v[0], v[-1], 10_000)
    r = fmt.round(x, mode="stochastic", rng=rng)
    idx = np.searchsorted(v, x)
    assert np.all((r == v[idx]) | (r == v[idx - 1]))


def test_stochastic_rounding_is_unbiased_and_reproducible():
    rng = np.random.default_rng(11)
    x = rng.uniform(-3.0, 3.0, 200_000)
    r1 = FP4_E2M1.round(x, mode="stochastic", rng=np.random.default_rng(5))
    r2 = FP4_E2M1.round(x, mode="stochastic", rng=np.random.default_rng(5))
    assert np.array_equal(r1, r2)
    err = r1 - x
    # Each error is bounded by the local step (at most 1 here), so its std is at most 0.5:
    # the mean of 2e5 errors lies within 4 * 0.5 / sqrt(2e5) = 0.0045 of zero.
    assert abs(err.mean()) < 4 * 0.5 / np.sqrt(x.size)
    # Nearest is unbiased here too: the grid and the data are symmetric about 0, so the mean
    # error is 0 in expectation, with the same 4-sigma band (each error is at most 0.5).
    assert abs((FP4_E2M1.round(x) - x).mean()) < 4 * 0.5 / np.sqrt(x.size)


def test_stochastic_overflow_saturates():
    assert FP8_E4M3.round([447.9, 1e5], mode="stochastic", rng=0).max() == 448.0


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("bad", [np.array(["a"]), np.array([1 + 2j]), np.array([True]),
                                 np.array([object()], dtype=object)])
def test_round_rejects_non_real_input(bad):
    with pytest.raises(TypeError, match="real numbers"):
        FP8_E4M3.round(bad)


def test_round_rejects_unknown_mode():
    with pytest.raises(ValueError, match="mode"):
        FP8_E4M3.round([1.0], mode="up")


def test_decode_rejects_bad_codes():
    with pytest.raises(ValueError, match=r"\[0, 15\]"):
        FP4_E2M1.decode([16])
    with pytest.raises(ValueError):
        FP4_E2M1.decode([-1])
    with pytest.raises(TypeError, match="integers"):
        FP4_E2M1.decode([1.0])


def test_format_definition_is_checked():
    with pytest.raises(ValueError, match="specials"):
        FloatFormat("X", 4, 3, 7, "weird")
    with pytest.raises(ValueError):
        FloatFormat("X", 0, 3, 7, "none")


@pytest.mark.parametrize("args,exc,msg", [
    (("X", 4.0, 3, 7, "fn"), TypeError, "exp_bits must be an integer"),
    (("X", 4, 3.0, 7, "fn"), TypeError, "man_bits must be an integer"),
    (("X", 4, 3, 7.5, "fn"), TypeError, "bias must be an integer"),
    (("X", True, 3, 7, "fn"), TypeError, "exp_bits must be an integer"),
    ((4, 4, 3, 7, "fn"), TypeError, "name must be a string"),
    # 64 bits: man_bits = 52 made round() fail on a negative shift; 42 bits (11 + 30 + 1)
    # silently cut codes to uint32.
    (("FP64", 11, 52, 1023, "ieee"), ValueError, "at most 32 bits"),
    (("E11M30", 11, 30, 1023, "ieee"), ValueError, "at most 32 bits"),
    # bias 0: the top binade 2^2046 is beyond float64 (max_value was Inf, with a warning);
    # bias 2000: the smallest normal 2^-1999 is below float64's normal range.
    (("X", 11, 3, 0, "ieee"), ValueError, "float64"),
    (("X", 11, 3, 2000, "ieee"), ValueError, "float64"),
])
def test_format_fields_must_be_integers_that_fit_float64(args, exc, msg):
    with pytest.raises(exc, match=msg):
        FloatFormat(*args)


def test_a_32_bit_format_with_float64_exponent_range_rounds_correctly():
    # E11M20: 1 + 11 + 20 = 32 bits, bias 1023 (float64's exponent). Hand rounding of 1e300
    # with math.frexp: keep 21 significant bits, ties to even (Python's round).
    import math
    fmt = FloatFormat("E11M20", 11, 20, 1023, "ieee")
    m, e = math.frexp(1e300)
    want = math.ldexp(round(m * 2**21), e - 21)
    assert fmt.round(1e300) == want
    code = fmt.encode(1e300)
    assert code.dtype == np.uint32 and fmt.decode(code) == want


def test_empty_round_is_empty():
    assert FP8_E4M3.round(np.array([])).shape == (0,)


def test_fp32_round_encode_decode_match_numpy_float32():
    from numfmt import FP32
    x = random_float32(100_000, seed=9).astype(np.float64) * 1.0000001   # off the float32 grid
    with np.errstate(over="ignore"):
        assert same(FP32.round(x, saturate=False), x.astype(np.float32).astype(np.float64))
    f = X32[np.isfinite(X32)][:100_000]
    codes = FP32.encode(f)
    assert codes.dtype == np.uint32 and np.array_equal(codes, f.view(np.uint32))
    assert same(FP32.decode(codes), f.astype(np.float64))
    with pytest.raises(ValueError, match="too many"):
        FP32.values()


@pytest.mark.parametrize("bad", ["no", 0, None])
def test_round_rejects_a_non_bool_saturate(bad):
    # "no" is truthy: it would silently have meant saturate=True.
    with pytest.raises(TypeError, match="saturate"):
        FP8_E4M3.round([500.0], saturate=bad)


# --------------------------------------------------------------------------- AMD's FNUZ FP8
@pytest.mark.parametrize("fmt,mx,mn,ms", [
    # Published for MI300 (AMD CDNA 3 ISA guide) and in arXiv:2206.02915: bias 8 and 16.
    (FP8_E4M3FNUZ, 240.0, 2.0**-7, 2.0**-10), (FP8_E5M2FNUZ, 57344.0, 2.0**-15, 2.0**-17)],
    ids=str)
def test_fnuz_constants(fmt, mx, mn, ms):
    assert (fmt.max_value, fmt.min_normal, fmt.min_subnormal) == (mx, mn, ms)
    assert not fmt.has_inf and fmt.has_nan and fmt.bits == 8
    assert float(ml_dtypes.finfo(ORACLE[fmt]).max) == mx


@pytest.mark.parametrize("fmt", [FP8_E4M3FNUZ, FP8_E5M2FNUZ], ids=str)
def test_fnuz_one_nan_no_negative_zero(fmt):
    v = fmt.decode(np.arange(256))
    assert np.flatnonzero(np.isnan(v)).tolist() == [0x80]
    assert np.flatnonzero(v == 0).tolist() == [0x00] and not np.signbit(v[0])
    r = fmt.round([-0.0, -1e-30, np.nan, np.inf, -1e9], saturate=False)
    assert not np.signbit(r[:2]).any() and r[0] == r[1] == 0
    assert np.isnan(r[2:]).all()  # no Inf: overflow is NaN, as ml_dtypes gives
    assert fmt.encode([-0.0, np.nan, -np.nan, np.inf], saturate=False).tolist() == [0, 0x80,
                                                                                   0x80, 0x80]
    assert fmt.round([1e9, -np.inf]).tolist() == [fmt.max_value, -fmt.max_value]


def test_formats_table_lists_every_named_constant():
    import numfmt
    named = {v for k, v in vars(numfmt).items() if isinstance(v, FloatFormat) and v.bits <= 16}
    assert named == set(FORMATS.values())
