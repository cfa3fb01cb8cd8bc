"""numfmt.torch against numfmt (numpy), bit for bit, and against torch's native dtypes.

The numpy implementation is the oracle for the torch port (it is itself checked against
ml_dtypes). Torch's own float8/float16/bfloat16 casts are a second, independent oracle; where
torch 2.13 defines a case differently from OCP/ml_dtypes, the test name says so and asserts
exactly what torch does.
"""

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numfmt as nf  # noqa: E402
import numfmt.torch as nt  # noqa: E402
from conftest import devices  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = devices()
FORMATS = list(nf.FORMATS.values())
N_RANDOM = 1_000_000


def bits(a) -> np.ndarray:
    """float64 bit patterns, so that -0.0 != +0.0, with every NaN made the quiet NaN of its sign.

    A NaN's payload is not part of any result (torch's vectorized CPU kernels return the
    all-ones payload where numpy returns 0x...8000...); its sign is, because encode stores it.
    """
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    a = np.array(a, dtype=np.float64)
    nan = np.isnan(a)
    a[nan] = np.copysign(np.nan, np.where(np.signbit(a[nan]), -1.0, 1.0))
    return a.view(np.int64)


def assert_same_bits(got, want):
    g, w = bits(got), bits(want)
    assert g.shape == w.shape
    bad = np.flatnonzero(g.ravel() != w.ravel())
    assert bad.size == 0, (f"{bad.size} differ, first at {bad[0]}: got "
                           f"{g.ravel()[bad[0]].view(np.float64)!r} want "
                           f"{w.ravel()[bad[0]].view(np.float64)!r}")


def random_values(fmt, n=N_RANDOM, seed=0) -> np.ndarray:
    """n float64 values that exercise every branch of rounding into ``fmt``.

    Log-uniform magnitudes from far below the smallest subnormal to far above the maximum,
    exact grid values, exact midpoints between neighbours (the ties) and their float64
    neighbours, the subnormal range, overflow, and the specials +-0, +-inf, +-NaN, float64
    subnormals and the float64 maximum.
    """
    rng = np.random.default_rng(seed)
    grid = fmt.values()
    grid = grid[grid >= 0]
    mids = (grid[:-1] + grid[1:]) / 2
    k = n // 8
    lo, hi = np.log2(fmt.min_subnormal) - 4, np.log2(fmt.max_value) + 4
    parts = [
        np.exp2(rng.uniform(lo, hi, 3 * k)),
        rng.choice(grid, k),
        rng.choice(mids, k),
        np.nextafter(rng.choice(mids, k // 2), np.inf),
        np.nextafter(rng.choice(mids, k // 2), 0.0),
        rng.uniform(0, fmt.min_normal, k // 2),
        np.exp2(rng.uniform(np.log2(fmt.max_value), 1000, k // 2)),
    ]
    specials = np.array([0.0, np.inf, np.nan, 5e-324, 1e-310, np.finfo(np.float64).max,
                         fmt.max_value, fmt.min_subnormal, fmt.min_subnormal / 2])
    body = np.concatenate(parts)
    body = np.concatenate([body, np.full(n - body.size - 2 * specials.size, 1.0)])
    x = np.concatenate([body, specials, -specials])
    signs = np.where(rng.random(x.size) < 0.5, -1.0, 1.0)
    signs[-2 * specials.size:] = 1.0  # the specials keep the signs written above
    return rng.permutation(x * signs)


# ---------------------------------------------------------------- rounding, codes, values
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_code_decodes_as_numpy(fmt, device):
    codes = np.arange(1 << fmt.bits)
    got = nt.decode(torch.from_numpy(codes).to(device), fmt)
    assert got.device.type == device
    assert_same_bits(got, fmt.decode(codes))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_every_value_rounds_to_itself_and_encodes_as_numpy(fmt, device):
    values = fmt.decode(np.arange(1 << fmt.bits))
    keep = ~np.isnan(values) if not fmt.has_nan else np.ones(values.size, bool)
    t = torch.from_numpy(values[keep]).to(device)
    assert_same_bits(nt.round(t, fmt, saturate=False), fmt.round(values[keep], saturate=False))
    got = nt.encode(t, fmt, saturate=False).cpu().numpy().astype(np.int64)
    np.testing.assert_array_equal(got, fmt.encode(values[keep], saturate=False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_round_million_random_values_bit_identical(fmt, saturate, device):
    x = random_values(fmt)
    got = nt.round(torch.from_numpy(x).to(device), fmt, saturate=saturate)
    assert got.dtype == torch.float64 and got.device.type == device
    assert_same_bits(got, fmt.round(x, saturate=saturate))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_encode_million_random_values_bit_identical(fmt, device):
    x = random_values(fmt, seed=1)
    if not fmt.has_nan:
        x = x[~np.isnan(x)]
    got = nt.encode(torch.from_numpy(x).to(device), fmt)
    assert got.dtype == (torch.uint8 if fmt.bits <= 8 else torch.int32)
    np.testing.assert_array_equal(got.cpu().numpy().astype(np.int64), fmt.encode(x))


@pytest.mark.filterwarnings("ignore:overflow encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_stochastic_rounding_on_the_same_draws_is_bit_identical(fmt, device):
    x = random_values(fmt, n=200_000, seed=2)
    u = np.random.default_rng(7).random(x.size)  # exactly the draws fmt.round(rng=7) makes
    got = nt.round(torch.from_numpy(x).to(device), fmt, mode="stochastic",
                   u=torch.from_numpy(u).to(device))
    assert_same_bits(got, fmt.round(x, mode="stochastic", rng=7))


@pytest.mark.parametrize("device", DEVICES)
def test_stochastic_rounding_with_a_generator_is_unbiased(device):
    # 1 + 3/8 lies 3/8 of the way from E4M3's 1.25 to 1.5 (spacing 2^-3 in [1, 2)).
    n = 400_000
    g = torch.Generator(device=device).manual_seed(0)
    r = nt.round(torch.full((n,), 1.375 - 0.125 * 5 / 8, dtype=torch.float64, device=device),
                 nf.FP8_E4M3, mode="stochastic", generator=g)
    assert set(torch.unique(r).tolist()) == {1.25, 1.375}
    p_up = float((r == 1.375).double().mean())
    # Up with probability 3/8; 5 binomial standard deviations of a mean of n draws.
    assert abs(p_up - 3 / 8) < 5 * np.sqrt(3 / 8 * 5 / 8 / n)
    g2 = torch.Generator(device=device).manual_seed(0)
    r2 = nt.round(torch.full((n,), 1.296875, dtype=torch.float64, device=device),
                  nf.FP8_E4M3, mode="stochastic", generator=g2)
    assert torch.equal(r, r2)  # the same seed gives the same draws


# ---------------------------------------------------------------- float32 tensors (no float64 copy)
def float32_patterns(n_random=1 << 16, seed=8) -> np.ndarray:
    """float32 values by bit pattern: every sign and exponent field with the mantissa heads and
    tails where rounding to 1-10 bits is decided, NaN payloads of both signs (signalling
    ones included), +-0, +-Inf, float32 subnormals, and random patterns. More than two of
    numfmt.torch's CPU chunks, so chunk boundaries are crossed."""
    tails = np.array([0, 1, 0x7FF, 0x800, 0x801, 0xFFF, 0x1FFF, 0x2000, 0x7FFF, 0x8000, 0x8001,
                      0xFFFF, 0x3_FFFF, 0x4_0000, 0x7F_FFFF], dtype=np.uint32)
    exps = np.arange(256, dtype=np.uint32) << 23
    grid = (exps[:, None] | tails[None, :]).ravel()
    nans = np.array([0x7F80_0001, 0x7FBF_FFFF, 0x7FC0_0000, 0x7FC0_0001, 0x7FFF_FFFF],
                    dtype=np.uint32)
    rand = np.random.default_rng(seed).integers(0, 1 << 32, n_random, dtype=np.uint32)
    pos = np.concatenate([grid, nans])
    x = np.concatenate([pos, pos | np.uint32(1 << 31), rand])
    return np.tile(x, -(-(2 * nt.formats.CHUNK + 1) // x.size)).view(np.float32)


def raw_bits(a) -> np.ndarray:
    """float64 bit patterns, NaN payload included (both twins return the canonical quiet NaN
    with the input's sign)."""
    a = a.detach().cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_float32_tensors_round_and_encode_as_numpy_bit_for_bit(fmt, saturate, device):
    x = float32_patterns()
    with np.errstate(invalid="ignore"):  # numpy widens signalling NaNs
        want = fmt.round(x, saturate=saturate)
    got = nt.round(torch.from_numpy(x).to(device), fmt, saturate=saturate)
    assert got.dtype == torch.float64 and got.device.type == device
    np.testing.assert_array_equal(raw_bits(got), raw_bits(want))
    if not fmt.has_nan:
        with pytest.raises(ValueError, match="no NaN"):
            nt.encode(torch.from_numpy(x).to(device), fmt, saturate=saturate)
        x = x[~np.isnan(x)]
    with np.errstate(invalid="ignore"):
        want = fmt.encode(x, saturate=saturate)
    got = nt.encode(torch.from_numpy(x).to(device), fmt, saturate=saturate)
    np.testing.assert_array_equal(got.cpu().numpy().astype(np.int64), want.astype(np.int64))


FPU32 = [f for f in FORMATS if f._float32_path == "fpu"]


@pytest.mark.parametrize("fmt", FPU32, ids=lambda f: f.name)
def test_float32_fpu_round_on_the_cpu_equals_ml_dtypes_bit_for_bit(fmt):
    # The CPU loop for float32 input (numfmt.torch.formats._round_fpu32_cpu) against the
    # independent oracle: ml_dtypes' (numpy's for FP16) cast of the same float32 values,
    # non-saturating and of the clamped values, on every exponent field with the mantissa
    # tails where rounding decides, NaN payloads of both signs, over several chunks.
    from test_formats_fastpath import CANONICAL_NAN, ORACLE, bits, checkable, edge_patterns, \
        ml_round
    x = edge_patterns(fmt.man_bits)
    x = np.tile(x, -(-(2 * nt.formats.CHUNK + 3) // x.size))
    top = np.float32(fmt.max_value)
    for saturate in (False, True):
        if saturate:
            want = ml_round(fmt, np.clip(x, -top, top))  # NaN stays NaN
        elif fmt.has_nan:
            want = ml_round(fmt, x)
        else:  # E2M3, E3M2, E2M1 have neither Inf nor NaN: numfmt always saturates
            continue
        got = nt.round(torch.from_numpy(x), fmt, saturate=saturate).numpy()
        keep = checkable(fmt, x)
        assert fmt in ORACLE and np.array_equal(bits(got[keep]), bits(want[keep]))
        sign = (x.view(np.uint32) >> 31).astype(np.uint64) << 63
        nan = ~keep
        assert np.array_equal(bits(got[nan]), (np.uint64(CANONICAL_NAN) | sign)[nan])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_chunks_with_and_without_nan_or_overflow_round_as_numpy(fmt, saturate, dtype):
    # On the CPU a chunk's max |x| decides whether NaN and saturation need work: chunk 1 holds
    # neither, chunk 2 one NaN, chunk 3 one value beyond max_value, chunk 4 a -NaN and +-Inf.
    c = nt.formats.CHUNK
    x = np.random.default_rng(13).standard_normal(4 * c) * fmt.min_normal * 4
    x = np.abs(x) if not fmt.signed else x
    x[c + 5] = np.nan
    x[2 * c + 7] = fmt.max_value * 1.5
    x[3 * c + 1], x[3 * c + 2], x[3 * c + 3] = -np.nan, np.inf, -np.inf
    with np.errstate(over="ignore"):  # BF16's 1.5 * max is beyond float32: Inf, also fine
        x = x.astype(dtype)
    got = nt.round(torch.from_numpy(x), fmt, saturate=saturate)
    np.testing.assert_array_equal(raw_bits(got), raw_bits(fmt.round(x, saturate=saturate)))


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f.bits <= 8 and f._float32_path],
                         ids=lambda f: f.name)
def test_every_8_bit_code_encodes_from_float32_by_its_field_definition(fmt):
    # The codes from a hand construction of the grid: code (s, e, m) has the value
    # (-1)^s * 2^(e - bias) * (1 + m / 2^M), or 2^(1 - bias) * m / 2^M when e = 0.
    m, eb = fmt.man_bits, fmt.exp_bits
    want, values = [], []
    for code in range(1 << fmt.bits):
        sign, e, mant = code >> (fmt.bits - 1), (code >> m) & ((1 << eb) - 1), code & ((1 << m) - 1)
        if fmt.specials == "ieee" and e == (1 << eb) - 1:
            continue  # Inf and NaN: their codes are tested above
        if fmt.specials == "fn" and e == (1 << eb) - 1 and mant == (1 << m) - 1:
            continue  # NaN
        v = 2.0 ** (e - fmt.bias) * (1 + mant / 2**m) if e else 2.0 ** (1 - fmt.bias) * mant / 2**m
        values.append(-v if sign else v)
        want.append(code)
    got = nt.encode(torch.tensor(values, dtype=torch.float32), fmt)
    assert got.tolist() == want


def test_float32_signed_zeros_nan_signs_and_subnormals_by_hand():
    # Hand values: E4M3's smallest subnormal is 2^-9; 2^-10 is the tie to 0 (even), just
    # above it rounds up; 464 is the tie between 448 and 480 (448 even: saturation starts
    # above); E4M3 NaN keeps the sign: codes 0x7F / 0xFF; 1e-45 (float32's smallest
    # subnormal) rounds to 0.
    x = torch.tensor([-0.0, 0.0, 2.0**-10, -(2.0**-10 * 1.0001), 464.0, -465.0, float("nan"),
                      -float("nan"), float("inf"), 1e-45], dtype=torch.float32)
    r = nt.round(x, nf.FP8_E4M3)
    assert [np.signbit(v) for v in r[:2].tolist()] == [True, False]
    assert r[2:6].tolist() == [0.0, -(2.0**-9), 448.0, -448.0]
    assert [np.signbit(v) for v in r[6:8].tolist()] == [False, True] and r[6:8].isnan().all()
    assert r[8:].tolist() == [448.0, 0.0]
    assert nt.encode(x, nf.FP8_E4M3).tolist() == [0x80, 0, 0, 0x81, 0x7E, 0xFE, 0x7F, 0xFF,
                                                   0x7E, 0]
    # BF16's subnormals are float32's with 7 mantissa bits: the smallest is 2^-133 (code 1);
    # 2^-134 is the tie to 0 (even), 1.5 * 2^-134 rounds up to it.
    y = torch.tensor([2.0**-133, 2.0**-134, -1.5 * 2.0**-134, 3.4e38], dtype=torch.float32)
    b = nt.round(y, nf.BF16, saturate=False)
    assert b.tolist() == [2.0**-133, 0.0, -(2.0**-133), float("inf")]  # > 3.396e38, the midpoint
    assert nt.encode(y, nf.BF16).tolist() == [1, 0, 0x8001, 0x7F7F]  # 0x7F7F: max, saturated


def test_grad_requiring_float32_tensor_rounds_with_zero_gradient():
    x = torch.tensor([0.3, -1.7, 2.2], requires_grad=True)
    r = nt.round(x, nf.FP8_E4M3)
    assert r.tolist() == [0.3125, -1.75, 2.25]  # E4M3 spacing 2^-5 in [0.25, 0.5), 2^-2 in [2, 4)
    r.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


def test_results_are_ordinary_writable_cpu_tensors():
    r = nt.round(torch.ones(3 * nt.formats.CHUNK, dtype=torch.float32), nf.FP8_E4M3)
    r += 1.0
    assert r.is_contiguous() and float(r.sum()) == 2.0 * r.numel()
    q = nt.quantize_int(torch.ones(4, 8), 8)
    q.values.mul_(2.0)
    assert q.values.tolist() == [[2.0] * 8] * 4


def _float32_matrix(seed=10) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=(3 * 4096, 96)) * np.exp2(rng.integers(-30, 30, (3 * 4096, 1)))
    x = x.astype(np.float32)
    x[0] = 0.0                       # all-zero blocks and groups
    x[1] = -0.0                      # ... of negative zeros
    x[2, :48] = 1e-40                # float32 subnormals (an E4M3 scale underflows: NVFP4)
    x[3, 7] = -x[3].max() * 1e4      # one large element: the rest of its block flushes
    x[4] = 3e38                      # near float32's max: a sum of them overflows
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", [
    ("MXFP8 E4M3", lambda m, x, **k: m.mx_quantize(x, nf.FP8_E4M3, **k)),
    ("MXFP8 E5M2 rceil", lambda m, x, **k: m.mx_quantize(x, nf.FP8_E5M2, scale_rule="rceil",
                                                         **k)),
    ("MXFP6 E3M2", lambda m, x, **k: m.mx_quantize(x, nf.FP6_E3M2, **k)),
    ("MXFP4", lambda m, x, **k: m.mx_quantize(x, nf.FP4_E2M1, **k)),
    ("NVFP4", lambda m, x, **k: m.nvfp4_quantize(x, **k)),
    ("exact/32 E4M3", lambda m, x, **k: m.block_quantize(x, nf.FP8_E4M3, 32, "exact", **k)),
])
def test_block_quantizers_on_float32_tensors_bit_identical(name, fn, device):
    x = _float32_matrix()
    got = fn(nt, torch.from_numpy(x).to(device))
    _assert_quantized_equal(got, fn(nf, x))
    # A block of -0 has scale 1 (E8M0, exact) and keeps its -0 elements; an E4M3 scale of 0
    # (NVFP4) flushes the block to +0.
    assert np.signbit(got.elements[1].cpu().numpy()).all() == (name != "NVFP4")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("granularity,group", [("tensor", None), ("channel", None),
                                               ("group", 32)])
@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_int_on_float32_tensors_bit_identical(symmetric, granularity, group, device):
    x = _float32_matrix()
    x[4] = 1.0  # a range of 6e38 would reach beyond float64's grid ends with no harm, but
    #             numpy then refuses asymmetric grids: keep the finite-sum case for blocks only
    got = nt.quantize_int(torch.from_numpy(x).to(device), 4, symmetric, granularity, group)
    _assert_quantized_equal(got, nf.quantize_int(x, 4, symmetric, granularity, group))


def test_float32_input_whose_sum_overflows_is_still_finite():
    # The finiteness check sums the tensor; 2 * 3e38 overflows float32 to Inf, which must not
    # be mistaken for an Inf in x.
    x = torch.full((2, 32), 3e38, dtype=torch.float32)
    assert torch.isinf(x.sum())
    q = nt.quantize_int(x, 8)
    assert q.codes.unique().tolist() == [127]
    # MX floor: 3e38 / 2^(127 - 8) = 451.4 > 448 saturates (numpy agrees, element for element)
    _assert_quantized_equal(nt.mx_quantize(x, nf.FP8_E4M3), nf.mx_quantize(x.numpy(),
                                                                            nf.FP8_E4M3))
    with pytest.raises(ValueError, match="non-finite value \\(inf at flat index 3\\)"):
        nt.quantize_int(torch.tensor([1.0, 2.0, 3.0, float("inf")]), 8)
    with pytest.raises(ValueError, match="non-finite"):
        nt.mx_quantize(torch.tensor([float("nan")] * 32), nf.FP8_E4M3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
def test_stochastic_rounding_with_a_generator_uses_its_draws_in_order(fmt, device):
    # A seeded generator gives the result of u = its first x.numel() float64 draws (and
    # rounding with explicit draws is numpy's, bit for bit, above): same seed, same bits.
    x = torch.from_numpy(random_values(fmt, n=50_000, seed=12)).to(device)
    u = torch.rand(x.numel(), dtype=torch.float64, device=device,
                   generator=torch.Generator(device=device).manual_seed(3))
    got = nt.round(x, fmt, mode="stochastic",
                   generator=torch.Generator(device=device).manual_seed(3))
    assert_same_bits(got, nt.round(x, fmt, mode="stochastic", u=u))


# ---------------------------------------------------------------- integer and block quantization
def _assert_quantized_equal(got, want):
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            if w.dtype.kind == "f":
                assert_same_bits(g, w)
            else:
                np.testing.assert_array_equal(g.cpu().numpy(), w)
        else:
            assert g == w  # Python floats: tensor scale, clipped fraction, bits per element


def _test_matrix(seed=3):
    rng = np.random.default_rng(seed)
    x = rng.standard_t(3, size=(48, 64)) * np.exp2(rng.integers(-20, 20, (48, 1)))
    x[0] = 0.0            # an all-zero row: scale 1, codes 0
    x[1, :32] = 1e-300    # blocks whose E4M3 scale underflows to zero (NVFP4)
    x[2, 5] = -x[2].max() * 1e6
    return x


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("granularity,group", [("tensor", None), ("channel", None),
                                               ("group", 16)])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("bits_", [2, 4, 8, 16])
def test_quantize_int_bit_identical(bits_, symmetric, granularity, group, device):
    x = _test_matrix()
    for clip in (1.0, 0.5):
        got = nt.quantize_int(torch.from_numpy(x).to(device), bits_, symmetric, granularity,
                              group, clip)
        want = nf.quantize_int(x, bits_, symmetric, granularity, group, clip)
        assert got.codes.dtype == torch.int64 and got.zero_point.dtype == torch.int64
        _assert_quantized_equal(got, want)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,fn", [
    ("MXFP8 E4M3", lambda m, x, **k: m.mx_quantize(x, nf.FP8_E4M3, **k)),
    ("MXFP8 E5M2", lambda m, x, **k: m.mx_quantize(x, nf.FP8_E5M2, **k)),
    ("MXFP6 E2M3", lambda m, x, **k: m.mx_quantize(x, nf.FP6_E2M3, **k)),
    ("MXFP6 E3M2", lambda m, x, **k: m.mx_quantize(x, nf.FP6_E3M2, **k)),
    ("MXFP4", lambda m, x, **k: m.mx_quantize(x, nf.FP4_E2M1, **k)),
    ("NVFP4", lambda m, x, **k: m.nvfp4_quantize(x, **k)),
    ("exact/16 E2M1", lambda m, x, **k: m.block_quantize(x, nf.FP4_E2M1, 16, "exact", **k)),
    ("e4m3/32 E2M3", lambda m, x, **k: m.block_quantize(x, nf.FP6_E2M3, 32, "e4m3", **k)),
    ("tensor E4M3", lambda m, x, **k: m.tensor_scaled(x, nf.FP8_E4M3, **k)),
    ("tensor E2M1", lambda m, x, **k: m.tensor_scaled(x, nf.FP4_E2M1, **k)),
])
def test_block_quantizers_bit_identical(name, fn, device):
    x = _test_matrix()
    got = fn(nt, torch.from_numpy(x), device=device)
    assert got.values.device.type == device
    _assert_quantized_equal(got, fn(nf, x))


EXTREME_INPUTS = {
    # amax / (amax / max_value) can be max_value * (1 + 2^-52): not clipping, in both twins.
    "student-t": np.random.default_rng(0).standard_t(5, (64, 32)) * 0.02,
    "subnormal": np.array([[5e-324, 0.0, -5e-324, 0.0]] * 8),  # exact scale underflows to 0
    "1e300": np.full((2, 32), 1e300),     # NVFP4's FP32 tensor scale would overflow
    "1e-300": np.full((2, 32), 1e-300),   # ... or underflow
}


@pytest.mark.parametrize("x", EXTREME_INPUTS.values(), ids=EXTREME_INPUTS.keys())
@pytest.mark.parametrize("fn", [
    lambda m, x: m.tensor_scaled(x, nf.FP8_E4M3),
    lambda m, x: m.tensor_scaled(x, nf.FP4_E2M1),
    lambda m, x: m.mx_quantize(x, nf.FP8_E4M3, 4),
    lambda m, x: m.nvfp4_quantize(x, 4),
    lambda m, x: m.block_quantize(x, nf.FP8_E4M3, 4, "exact"),
    lambda m, x: m.block_quantize(x, nf.FP6_E3M2, 4, "exact"),
    lambda m, x: m.block_quantize(x, nf.FP4_E2M1, 4, "exact"),
], ids=["tensor-E4M3", "tensor-E2M1", "mx-E4M3", "nvfp4", "exact-E4M3", "exact-E3M2",
        "exact-E2M1"])
def test_block_quantizers_agree_with_numpy_at_extremes(fn, x):
    # Same values, scales, tensor scale and clipped fraction as numpy, and no NaN anywhere.
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got, want = fn(nt, torch.from_numpy(x)), fn(nf, x)
    _assert_quantized_equal(got, want)
    assert np.all(np.isfinite(want.values))

@pytest.mark.parametrize("granularity,group", [("tensor", None), ("channel", None),
                                               ("group", 2)])
def test_quantize_int_range_beyond_float64_max_matches_numpy(granularity, group):
    # max - min = 2.6e308 overflows float64 (numpy's hand case in test_intquant): no NaN.
    x = np.array([[-1e308, 1.6e308], [-1e308, 1.6e308]])
    got = nt.quantize_int(torch.from_numpy(x), 8, False, granularity, group)
    want = nf.quantize_int(x, 8, False, granularity, group)
    _assert_quantized_equal(got, want)
    assert np.all(np.isfinite(want.values))

def test_integer_parameters_accept_numpy_scalars_as_numpy_does():
    # clip as np.float32 and a broadcasting zero point: as numfmt (test_intquant's hand case).
    got = nt.quantize_int(torch.tensor([1.0, -0.5]), 8, clip=np.float32(0.5))
    assert got.scale.item() == 0.5 / 127
    codes = nt.quantize_affine(torch.tensor(1.0), np.float32(0.5), torch.tensor([0, 3]),
                               np.int8(-8), np.int64(7))
    assert codes.tolist() == [2, 5]
    assert nt.dequantize_affine(codes, 0.5, torch.tensor([0, 3])).tolist() == [1.0, 1.0]

@pytest.mark.parametrize("device", DEVICES)
def test_quantize_affine_and_dequantize_match_numpy(device):
    x = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, 1e9, -np.inf])
    got = nt.quantize_affine(torch.from_numpy(x).to(device), 0.5, 3, -8, 7)
    np.testing.assert_array_equal(got.cpu().numpy(), nf.quantize_affine(x, 0.5, 3, -8, 7))
    # Hand derivation: x / 0.5 = -5, -1, 1, 3, 5 (no ties), + 3, clamped to [-8, 7].
    np.testing.assert_array_equal(got.cpu().numpy(), [-2, 2, 4, 6, 7, 7, -8])
    assert_same_bits(nt.dequantize_affine(got, 0.5, 3), nf.dequantize_affine(got.cpu().numpy(),
                                                                              0.5, 3))


@pytest.mark.parametrize("fmt", [nf.FP32, nf.FloatFormat("E11M20", 11, 20, 1023, "ieee")],
                         ids=str)
def test_32_bit_codes_are_the_unsigned_patterns_numpy_gives(fmt):
    # A negative FP32 value has bit 31 set: -1.0 is 0xBF800000 (numpy's float32 view, an
    # independent oracle for FP32). The torch code must hold that value, not wrap to an
    # int32 below zero, and decode back.
    x = np.array([-1.0, 1.0, -np.inf, np.nan, -0.0, -3e-45, 1e300])
    got = nt.encode(x, fmt, saturate=False)
    want = fmt.encode(x, saturate=False)
    assert got.dtype == torch.int64 and got.min() >= 0
    np.testing.assert_array_equal(got.numpy(), want.astype(np.int64))
    if fmt is nf.FP32:
        assert got[0].item() == int(np.array(-1.0, np.float32).view(np.uint32)) == 0xBF800000
    assert_same_bits(nt.decode(got, fmt), fmt.decode(want))

@pytest.mark.parametrize("device", DEVICES)
def test_metrics_agree_with_numpy_to_summation_order(device):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(100_000)
    q = nf.FP8_E4M3.round(x)
    tx, tq = torch.from_numpy(x).to(device), torch.from_numpy(q).to(device)
    # Sums of 1e5 float64 terms in different orders differ by about n * 2^-53 ~ 1e-11 at most.
    assert nt.rel_error(tq, tx) == pytest.approx(nf.rel_error(q, x), rel=1e-11)
    assert nt.sqnr_db(tq, tx) == pytest.approx(nf.sqnr_db(q, x), rel=1e-11)
    assert nt.sqnr_db(tx, tx) == float("inf")



@pytest.mark.parametrize("c", [1e-320, 1e-300, 1e-200, 1.0, 1e200, 1e300])
def test_metrics_are_scale_invariant_at_extreme_magnitudes(c):
    # Hand case as in test_metrics: q = [2, 1] c, x = [1, 1] c gives rel_error 1/sqrt(2) and
    # SQNR 10 log10(2) dB at every magnitude c, though the squares overflow or underflow.
    q, x = torch.tensor([2.0, 1.0], dtype=torch.float64) * c, torch.ones(2, dtype=torch.float64) * c
    assert nt.rel_error(q, x) == pytest.approx(1 / np.sqrt(2), rel=1e-12)
    assert nt.sqnr_db(q, x) == pytest.approx(10 * np.log10(2), rel=1e-12)


def test_metrics_noise_far_below_the_signal_is_not_reported_as_exact():
    # (1e-170)^2 underflows float64: rel_error is still 1e-170 and SQNR 3400 dB, as numpy.
    q, x = torch.tensor([1.0, 1e-170], dtype=torch.float64), torch.tensor([1.0, 0.0],
                                                                           dtype=torch.float64)
    assert nt.rel_error(q, x) == pytest.approx(1e-170, rel=1e-12, abs=0)
    assert nt.sqnr_db(q, x) == pytest.approx(3400.0, rel=1e-12)

# ---------------------------------------------------------------- torch native dtypes
def _float32_sample(fmt, n=200_000, seed=5) -> np.ndarray:
    """float32 values (so torch's cast rounds once) covering every branch of ``fmt``."""
    with np.errstate(over="ignore"):  # values beyond float32's range become +-inf on purpose
        x = random_values(fmt, n, seed).astype(np.float32)
    return x.astype(np.float64)


def _native(x64, dtype, device):
    return torch.from_numpy(x64.astype(np.float32)).to(device).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", [nf.FP16, nf.BF16], ids=lambda f: f.name)
def test_fp16_bf16_native_casts_agree_with_round_non_saturating(fmt, device):
    x = _float32_sample(fmt)
    native = _native(x, nt.NATIVE_DTYPES[fmt.name], device).to(torch.float64)
    want = fmt.round(x, saturate=False)
    nan = np.isnan(want)
    np.testing.assert_array_equal(torch.isnan(native).cpu().numpy(), nan)
    assert_same_bits(native.cpu().numpy()[~nan], want[~nan])


@pytest.mark.parametrize("device", DEVICES)
def test_e4m3_native_cast_saturates_overflow_and_inf_in_torch_2_13(device):
    """torch 2.13's float32 -> float8_e4m3fn clamps |x| > 448, and +-inf, to +-448.

    OCP FP8 leaves the overflow policy to the implementation; ml_dtypes gives NaN. Here torch's
    cast equals numfmt's E4M3 round with saturate=True on every non-NaN input, and its codes
    equal numfmt's encode (NaN: 0x7F / 0xFF, sign kept, the same as numfmt).
    """
    x = _float32_sample(nf.FP8_E4M3)
    native = _native(x, torch.float8_e4m3fn, device)
    assert_same_bits(native.to(torch.float64), nf.FP8_E4M3.round(x, saturate=True))
    codes = native.view(torch.uint8).cpu().numpy()
    np.testing.assert_array_equal(codes, nf.FP8_E4M3.encode(x, saturate=True))
    # Hand derivation: the largest E4M3 value is 1.75 * 2^8 = 448 (code 0x7E).
    edge = _native(np.array([464.0, 1e30, np.inf, -np.inf]), torch.float8_e4m3fn, device)
    assert edge.to(torch.float64).tolist() == [448.0, 448.0, 448.0, -448.0]


@pytest.mark.parametrize("device", DEVICES)
def test_e5m2_native_cast_overflows_to_inf_and_writes_nan_as_0x7f(device):
    """torch 2.13's float32 -> float8_e5m2 is IEEE-like: overflow rounds to +-inf.

    It equals numfmt's E5M2 round with saturate=False on every input. The one difference in
    codes: torch writes NaN as 0x7F (0xFF negative), numfmt and ml_dtypes as 0x7E (0xFE);
    both are NaN in E5M2 (exponent 11111, mantissa non-zero).
    """
    x = _float32_sample(nf.FP8_E5M2)
    native = _native(x, torch.float8_e5m2, device)
    want = nf.FP8_E5M2.round(x, saturate=False)
    got = native.to(torch.float64)
    nan = np.isnan(want)
    np.testing.assert_array_equal(torch.isnan(got).cpu().numpy(), nan)
    assert_same_bits(got.cpu().numpy()[~nan], want[~nan])
    codes = native.view(torch.uint8).cpu().numpy()
    np.testing.assert_array_equal(codes[~nan], nf.FP8_E5M2.encode(x[~nan], saturate=False))
    assert set(np.unique(codes[nan] & 0x7F)) == {0x7F}
    assert set(np.unique(nf.FP8_E5M2.encode(x[nan]) & 0x7F)) == {0x7E}
    # Hand derivation: max 1.75 * 2^15 = 57344; 61440 is the midpoint to 2^16 (which would be
    # the next binade, i.e. inf) and its last mantissa bit is odd, so the tie goes to inf.
    edge = _native(np.array([61439.0, 61440.0, -1e9]), torch.float8_e5m2, device)
    assert edge.to(torch.float64).tolist() == [57344.0, np.inf, -np.inf]


E8M0_NATIVE = pytest.mark.skipif(not hasattr(torch, "float8_e8m0fnu"),
                                 reason="torch has no float8_e8m0fnu")


@E8M0_NATIVE
@pytest.mark.parametrize("device", DEVICES)
def test_e8m0_native_cast_rounds_ties_up_on_positive_values(device):
    """On positive finite float32, torch 2.13's cast to float8_e8m0fnu equals numfmt E8M0.

    Both round to the nearest power of two with ties upward (1.5 -> 2, 3 -> 4, 0.75 -> 1),
    clamp below 2^-127 to 2^-127 and send what rounds past 2^127 to NaN (code 0xFF). The
    lowest binade (2^-127, 2^-126), float32 subnormals, is the exception tested below.
    """
    rng = np.random.default_rng(6)
    with np.errstate(over="ignore"):  # 2^128 and above overflow float32 to inf, removed next
        x = np.exp2(rng.uniform(-126, 129, 200_000)).astype(np.float32).astype(np.float64)
    x = x[np.isfinite(x)]
    x = np.concatenate([x, [1.5, 3.0, 0.75, 1.4999999, 2.0**127 * 1.5, 2.0**-130]])
    native = _native(x, torch.float8_e8m0fnu, device)
    codes = native.view(torch.uint8).cpu().numpy()
    np.testing.assert_array_equal(codes, nf.E8M0.encode(x, saturate=False))
    # Hand derivation: code = biased exponent, 2^e <-> e + 127; 1.5 -> 2 -> 128.
    np.testing.assert_array_equal(codes[-6:], [128, 129, 127, 127, 255, 0])


@E8M0_NATIVE
@pytest.mark.parametrize("device", DEVICES)
def test_e8m0_native_cast_sends_the_lowest_binade_up_to_2_pow_minus_126(device):
    """torch 2.13 (like ml_dtypes 0.6) maps every x in (2^-127, 2^-126) to 2^-126 (code 1).

    Rounded to nearest, x = 1.2 * 2^-127 is closer to 2^-127 (code 0), which numfmt returns;
    from 1.5 * 2^-127 upward both give code 1. At or below 2^-127 both give code 0.
    """
    m = np.array([0.5, 1.0, 1.0001, 1.2, 1.49, 1.5, 1.9])
    x = m * 2.0**-127
    codes = _native(x, torch.float8_e8m0fnu, device).view(torch.uint8).cpu().numpy()
    np.testing.assert_array_equal(codes, [0, 0, 1, 1, 1, 1, 1])
    np.testing.assert_array_equal(nf.E8M0.encode(x), [0, 0, 0, 0, 0, 1, 1])


@E8M0_NATIVE
@pytest.mark.parametrize("device", DEVICES)
def test_e8m0_native_cast_maps_zero_to_smallest_and_drops_the_sign(device):
    """Where torch 2.13 and OCP MX / numfmt differ for E8M0: zero and negative inputs.

    E8M0 has neither zero nor sign. numfmt (like ml_dtypes) gives NaN for x <= 0; torch gives
    code 0 (2^-127) for +-0 and the code of |x| for negative x. +-inf is NaN in both.
    """
    x = np.array([0.0, -0.0, -1.0, -3.0, np.inf, -np.inf])
    codes = _native(x, torch.float8_e8m0fnu, device).view(torch.uint8).cpu().numpy()
    np.testing.assert_array_equal(codes, [0, 0, 127, 129, 255, 255])
    assert np.isnan(nf.E8M0.round(x[:4])).all()


@pytest.mark.parametrize("device", DEVICES)
def test_native_cast_from_float64_rounds_twice_through_float32(device):
    """torch converts float64 to float8 via float32, so it can round twice; numfmt rounds once.

    x = 1 + 2^-4 + 2^-40 lies just above the E4M3 midpoint between 1 and 1.125: rounded once
    it goes up to 1.125. float32 (24-bit significand) first rounds x to the midpoint 1 + 2^-4,
    whose tie then goes to the even neighbour 1.0. Use float32 inputs to compare with torch.
    """
    x = torch.tensor([1 + 2**-4 + 2**-40], dtype=torch.float64, device=device)
    assert x.to(torch.float8_e4m3fn).to(torch.float64).item() == 1.0
    assert nt.round(x, nf.FP8_E4M3).item() == 1.125
    assert nt.to_native(x, nf.FP8_E4M3).to(torch.float64).item() == 1.125


# ---------------------------------------------------------------- devices and imports
def test_default_device_is_cuda_exactly_when_available():
    assert nt.default_device().type == ("cuda" if CUDA else "cpu")
    assert nt.round([1.3], nf.BF16).device.type == nt.default_device().type
    t = torch.tensor([1.3])
    assert nt.round(t, nf.BF16).device == t.device
    assert nt.round(t, nf.BF16, device="cpu").device.type == "cpu"


def test_numfmt_imports_without_torch_and_numfmt_torch_says_what_is_missing():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numfmt; assert numfmt.FP8_E4M3.max_value == 448.0\n"
            "try:\n    import numfmt.torch\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "numfmt.torch needs PyTorch" in out.stdout


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("call,err,match", [
    (lambda: nt.round(torch.tensor([True]), nf.FP8_E4M3), TypeError, "real numbers"),
    (lambda: nt.round(torch.tensor([1j]), nf.FP8_E4M3), TypeError, "real numbers"),
    (lambda: nt.round(["a"], nf.FP8_E4M3), TypeError, "real numbers"),
    (lambda: nt.round([1.0], "E4M3"), TypeError, "FloatFormat"),
    (lambda: nt.round([1.0], nf.FP8_E4M3, mode="up"), ValueError, "mode"),
    (lambda: nt.round([1.0, 2.0], nf.FP8_E4M3, mode="stochastic", u=[0.5]), ValueError,
     "one draw per element"),
    (lambda: nt.round([1.0], nf.FP8_E4M3, mode="stochastic", u=[1.0]), ValueError, r"\[0, 1\)"),
    (lambda: nt.encode([np.nan], nf.FP4_E2M1), ValueError, "no NaN"),
    (lambda: nt.decode(torch.tensor([1.0]), nf.FP8_E4M3), TypeError, "integers"),
    (lambda: nt.decode([256], nf.FP8_E4M3), ValueError, r"\[0, 255\]"),
    (lambda: nt.decode([-1], nf.FP4_E2M1), ValueError, r"\[0, 15\]"),
    (lambda: nt.to_native([1.0], nf.FP4_E2M1), ValueError, "no native dtype"),
    (lambda: nt.quantize_int(torch.tensor([1.0, np.nan]), 8), ValueError, "non-finite"),
    (lambda: nt.quantize_int(torch.tensor([]), 8), ValueError, "empty"),
    (lambda: nt.quantize_int([1.0], 1), ValueError, "bits"),
    (lambda: nt.quantize_int([1.0], 8, clip=0.0), ValueError, "clip"),
    (lambda: nt.quantize_int([1.0], 8, granularity="row"), ValueError, "granularity"),
    (lambda: nt.quantize_int(np.ones((2, 6)), 8, granularity="group", group=4), ValueError,
     "does not divide"),
    (lambda: nt.quantize_affine([1.0], 0.0), ValueError, "positive and finite"),
    (lambda: nt.quantize_affine([1.0], np.inf), ValueError, "positive and finite"),
    (lambda: nt.quantize_affine([np.nan], 1.0), ValueError, "NaN"),
    (lambda: nt.quantize_affine([1.0], 1.0, 0.5), TypeError, "zero_point must hold integers"),
    (lambda: nt.quantize_affine([1.0], 1.0, torch.tensor(0.5)), TypeError,
     "zero_point must hold integers"),
    (lambda: nt.quantize_affine([1.0], 1.0, 0, -127.5, 127), TypeError, "qmin must be an int"),
    (lambda: nt.quantize_affine([1.0], "1.0"), TypeError, "scale must hold real numbers"),
    (lambda: nt.dequantize_affine([1], 0.5, 0.5), TypeError, "zero_point must hold integers"),
    (lambda: nt.dequantize_affine(["1"], 0.5), TypeError, "codes must hold real numbers"),
    (lambda: nt.dequantize_affine([1], 0.0), ValueError, "positive and finite"),
    (lambda: nt.quantize_int([1.0], 8, clip=True), TypeError, "clip must be a real number"),
    (lambda: nt.mx_quantize(np.ones((2, 48)), nf.FP4_E2M1), ValueError, "does not divide"),
    (lambda: nt.mx_quantize(np.ones(32), nf.E8M0), TypeError, "signed FloatFormat"),
    (lambda: nt.block_quantize(np.ones(32), nf.FP4_E2M1, 32, "ue8m0"), ValueError,
     "scale_format"),
    (lambda: nt.nvfp4_quantize(torch.tensor([np.inf] * 16)), ValueError, "non-finite"),
    (lambda: nt.tensor_scaled(torch.tensor([], dtype=torch.float64), nf.FP8_E4M3), ValueError,
     "empty"),
    (lambda: nt.rel_error(torch.ones(3), torch.ones(4)), ValueError, "same shape"),
    (lambda: nt.sqnr_db(torch.ones(3), torch.zeros(3)), ValueError, "all zero"),
    (lambda: nt.rel_error(torch.tensor([np.nan]), torch.ones(1)), ValueError, "finite"),
])
def test_bad_input_raises_a_clear_error(call, err, match):
    with pytest.raises(err, match=match):
        call()
