"""numfmt.torch.gemm, lectures.gpu_timing and its timer: exactness, agreement with torch's
kernels, errors.

Oracles: int64 matrix products; torch._scaled_mm (CPU in torch 2.13, cuBLASLt on CUDA) for the
FP8 emulation; dequantize-then-multiply in float64 for block-scaled GEMMs; hand arithmetic.
"""

from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numfmt as nf  # noqa: E402
import numfmt.torch as nt  # noqa: E402
from lectures import gpu_timing as bench  # noqa: E402
from lectures import machine  # noqa: E402
from numfmt.torch import gemm  # noqa: E402
from conftest import devices  # noqa: E402

CUDA = torch.cuda.is_available()
DEVICES = devices()


def operands(m=32, k=64, n=48, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, k)) * np.exp2(rng.integers(0, 10, (m, 1))), \
        rng.standard_normal((n, k))


# ---------------------------------------------------------------- int8
def test_int32_safe_k_by_hand():
    # 2^31 - 1 = 2147483647; 2147483647 // 16384 = 131071 and // 16129 = 133144.
    assert gemm.int32_safe_k() == 131071 and 131071 * 16384 <= 2**31 - 1 < 131072 * 16384
    assert gemm.int32_safe_k(127, 127) == 133144
    assert 133144 * 16129 <= 2**31 - 1 < 133145 * 16129


@pytest.mark.parametrize("device", DEVICES)
def test_int8_mm_is_exact_below_the_limit_and_wraps_above(device):
    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (24, 512), generator=g, dtype=torch.int8).to(device)
    b = torch.randint(-128, 128, (512, 48), generator=g, dtype=torch.int8).to(device)
    got = gemm.int8_mm(a, b)
    assert got.dtype == torch.int32 and got.device.type == device
    assert torch.equal(got.cpu().to(torch.int64), gemm.int8_mm_reference(a, b))
    k = gemm.int32_safe_k() + 1
    a = torch.full((17, k), -128, dtype=torch.int8, device=device)
    b = torch.full((k, 16), -128, dtype=torch.int8, device=device)
    got = int(gemm.int8_mm(a, b)[0, 0])
    if device == "cpu":
        # 131072 * 16384 = 2^31 wraps to -2^31 in two's complement.
        assert got == -2**31
    else:
        # cuBLAS does not document int32 overflow: wrapped (-2^31) or saturated (2^31 - 1).
        assert got in (-2**31, 2**31 - 1)


@pytest.mark.parametrize("layout_a", ["row", "col"])
@pytest.mark.parametrize("layout_b", ["row", "col"])
def test_int8_mm_hands_cublas_its_one_layout(layout_a, layout_b, monkeypatch):
    # cuBLASLt's int8 GEMM takes a row-major first and a column-major second operand (torch's
    # test__int_mm: a transposed a is CUBLAS_STATUS_NOT_SUPPORTED, a row-major b fails under
    # CUDA 13). Whatever layout comes in, int8_mm passes that one, with the same values.
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-128, 128, (24, 32), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (32, 16), generator=g, dtype=torch.int8)
    a_in = a if layout_a == "row" else a.t().contiguous().t()
    b_in = b if layout_b == "row" else b.t().contiguous().t()
    seen = []
    real = torch._int_mm

    def spy(x, y):
        seen.append((x.stride(), y.stride()))
        return real(x, y)

    monkeypatch.setattr(torch, "_int_mm", spy)
    got = gemm.int8_mm(a_in, b_in)
    assert seen == [((32, 1), (1, 32))]  # (M, K) row-major, (K, N) column-major
    assert torch.equal(got.to(torch.int64), gemm.int8_mm_reference(a, b))


@pytest.mark.parametrize("device", DEVICES)
def test_int8_linear_zero_point_correction_is_exact(device):
    x, w = operands()
    x = np.abs(x)  # ReLU-like: a non-trivial zero point
    r = gemm.int8_linear(torch.from_numpy(x), torch.from_numpy(w), device=device)
    assert r.acc.dtype == torch.int32
    assert torch.equal(r.acc.cpu().to(torch.int64) - r.correction.cpu(), r.exact)
    # The oracle for the codes and the zero point is numfmt on numpy.
    q = nf.quantize_int(x, 8, symmetric=False)
    assert r.zero_point == int(q.zero_point.ravel()[0])
    exact = (q.codes - q.zero_point) @ nf.quantize_int(w, 8, granularity="channel").codes.T
    np.testing.assert_array_equal(r.exact.numpy(), exact)
    # float64 pipeline: s_x s_w times an exact integer; one rounding each, so 4 ulps bound it.
    deq = r.x_hat.cpu() @ r.w_hat.cpu().T
    assert float((r.y.cpu() - deq).abs().max()) <= 4 * np.finfo(float).eps * float(
        (r.x_hat.abs().cpu() @ r.w_hat.abs().cpu().T).max())


@pytest.mark.parametrize("call,err,match", [
    (lambda: gemm.int8_mm(torch.zeros(2, 3), torch.zeros(3, 2)), TypeError, "int8"),
    (lambda: gemm.int8_mm(torch.zeros(2, 3, dtype=torch.int8),
                          torch.zeros(4, 2, dtype=torch.int8)), ValueError, "inner"),
    (lambda: gemm.int8_mm(torch.zeros(3, dtype=torch.int8),
                          torch.zeros(3, 2, dtype=torch.int8)), ValueError, "2-D"),
    (lambda: gemm.int8_mm(np.zeros((2, 2), np.int8), np.zeros((2, 2), np.int8)), TypeError,
     "torch tensors"),
    (lambda: gemm.int32_safe_k(0, 128), ValueError, "positive integer"),
    (lambda: gemm.int8_linear(np.ones((4, 8)), np.ones((4, 6))), ValueError, r"\(N, K\)"),
    (lambda: gemm.int8_linear(np.array([[1.0, np.nan]]), np.ones((2, 2))), ValueError,
     "non-finite"),
])
def test_int8_bad_input(call, err, match):
    with pytest.raises(err, match=match):
        call()


# ---------------------------------------------------------------- FP8
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", [nf.FP8_E4M3, nf.FP8_E5M2], ids=lambda f: f.name)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_fp8_quantize_elements_are_numfmt_rounding(fmt, granularity, device):
    x, _ = operands()
    q = gemm.fp8_quantize(torch.from_numpy(x), fmt, granularity, device=device)
    assert q.scale.dtype == torch.float32
    assert q.scale.shape == (() if granularity == "tensor" else (x.shape[0], 1))
    s = q.scale.cpu().double().numpy()
    amax = np.abs(x).max() if granularity == "tensor" else np.abs(x).max(1, keepdims=True)
    np.testing.assert_array_equal(s, np.float32(amax / fmt.max_value))
    np.testing.assert_array_equal(q.data.cpu().double().numpy(), fmt.round(x / s))


def _fp8_case(granularity, fx=nf.FP8_E4M3, fw=nf.FP8_E4M3, device="cpu"):
    x, w = operands(m=32, k=64, n=48)
    qx = gemm.fp8_quantize(torch.from_numpy(x), fx, granularity, device=device)
    qw = gemm.fp8_quantize(torch.from_numpy(w), fw, granularity, device=device)
    sb = qw.scale.reshape(1, -1) if granularity == "row" else qw.scale
    return qx, qw, sb


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize("fx", [nf.FP8_E4M3, nf.FP8_E5M2], ids=lambda f: f.name)
def test_scaled_mm_emulation_matches_torch_scaled_mm(fx, granularity, device):
    if device == "cuda" and not gemm.fp8_kernel_available(device):
        pytest.skip("torch._scaled_mm needs CUDA compute capability 8.9 or higher")
    qx, qw, sb = _fp8_case(granularity, fx, device=device)
    emu = gemm.scaled_mm(qx.data, qw.data.t(), qx.scale, sb, emulate=True)
    ref = torch._scaled_mm(qx.data, qw.data.t(), scale_a=qx.scale, scale_b=sb,
                           out_dtype=torch.bfloat16)
    assert emu.dtype == torch.bfloat16 and emu.shape == (32, 48)
    # Exact products; float32 sums in another order differ by a few float32 ulps, which
    # changes a bf16 rounding at most by one bf16 ulp (2^-8 relative to the value).
    emu, ref = emu.cpu().double(), ref.cpu().double()
    bound = 2.0**-7 * ref.abs()
    if device == "cuda":
        # Hopper's FP8 MMA keeps about 14 bits while it sums a K = 32 slice (DeepSeek-V3
        # report, 3.3.2): each of the 32 products can lose 2^-13 of the slice's largest, so
        # at most 2^-8 of sum |products| per slice; 2^-7 leaves room for the bf16 rounding.
        bound = bound + 2.0**-7 * _abs_product(qx, qw, sb)
    assert bool(((emu - ref).abs() <= bound).all())
    # Mostly the same bf16 value on the CPU. Two float32 summation orders over K = 64 differ by
    # at most 2 (K - 1) 2^-24 sum|products| (Higham, Accuracy and Stability, 2nd ed., eq. 3.5);
    # a difference D flips the bf16 rounding with probability at most D / ulp_bf16(value), with
    # the value uniform within its ulp. Mismatches stay below the mean of that plus 4 binomial
    # sigma (about 5% here). On a GPU, Hopper's 2^-8 sum|products| above exceeds a bf16 ulp
    # (2^-8 of the value, and sum|products| >= |value|), so no equality rate follows and none
    # is asserted there.
    if device == "cpu":
        flip = 2 * 63 * 2.0**-24 * _abs_product(qx, qw, sb) / 2.0 ** (ref.abs().log2().floor() - 7)
        p = float(flip.clamp(max=1).mean())
        assert float((emu != ref).double().mean()) <= p + 4 * np.sqrt(p * (1 - p) / ref.numel())


def _abs_product(qx, qw, sb) -> torch.Tensor:
    """sum_k |a_mk b_kn| * scale_a * scale_b in float64 on the CPU: the size of the terms
    whose partial sums an accumulator rounds."""
    a, b = qx.data.cpu().double().abs(), qw.data.cpu().double().abs().T
    return (a @ b) * qx.scale.cpu().double() * sb.cpu().double()


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_linear_error_against_a_float64_oracle(device):
    x, w = operands(m=32, k=64, n=48)
    for gran in ("tensor", "row"):
        y = gemm.fp8_linear(torch.from_numpy(x), torch.from_numpy(w), granularity=gran,
                            device=device).cpu().double()
        qx, qw, sb = _fp8_case(gran)
        deq = (qx.data.double() * qx.scale.double()) @ (qw.data.double() * qw.scale.double()).T
        # Only the fp32 accumulation and the final bf16 rounding separate y from deq.
        bound = (2.0**-8 + 1e-6) * deq.abs()
        if device == "cuda":  # Hopper's narrower FP8 accumulation, as in the test above
            bound = bound + 2.0**-7 * _abs_product(qx, qw, sb)
        assert bool(((y - deq).abs() <= bound).all())


# torch's meta kernel for _scaled_mm applies the CUDA kernel's rules to meta tensors (row-major
# a, column-major b, K and N multiples of 16, fp32 scales of one element or contiguous (M, 1)
# and (1, N)): the arguments scaled_mm builds on the CPU are checked against them here.
@pytest.mark.parametrize("granularity", ["tensor", "row"])
@pytest.mark.parametrize("fx,fw", [(nf.FP8_E4M3, nf.FP8_E4M3), (nf.FP8_E5M2, nf.FP8_E4M3),
                                   (nf.FP8_E4M3, nf.FP8_E5M2)], ids=["E4M3xE4M3", "E5M2xE4M3",
                                                                     "E4M3xE5M2"])
def test_scaled_mm_arguments_pass_torch_cuda_rules_on_meta_tensors(fx, fw, granularity):
    qx, qw, sb = _fp8_case(granularity, fx, fw)
    args = [t.to("meta") for t in (qx.data, qw.data.t(), qx.scale, sb)]
    assert args[1].stride() == (1, 64)  # .to("meta") keeps the column-major layout
    y = gemm.scaled_mm(*args, emulate=False)
    assert y.device.type == "meta" and y.shape == (32, 48) and y.dtype == torch.bfloat16


@pytest.mark.parametrize("granularity", ["tensor", "row"])
def test_scaled_mm_refuses_what_the_cuda_kernel_refuses(granularity):
    # Each layout or scale that gemm.scaled_mm refuses, torch's kernel rules refuse as well.
    qx, qw, sb = _fp8_case(granularity)
    a, b, sa, sb = (t.to("meta") for t in (qx.data, qw.data.t(), qx.scale, sb))
    cases = [(a, b.contiguous(), sa, sb, "col_major"),
             (a.t().contiguous().t(), b, sa, sb, "row_major"),
             (a[:, :40], b[:40], sa, sb, "divisible by 16")]
    if granularity == "row":
        strided = torch.empty(32, 2, device="meta")[:, :1]  # (M, 1) but not contiguous
        cases.append((a, b, strided, sb, "contiguous"))
    for x, y, s1, s2, kernel_says in cases:
        with pytest.raises(RuntimeError, match=kernel_says):
            torch._scaled_mm(x, y, s1, s2, out_dtype=torch.bfloat16)
        with pytest.raises(ValueError):
            gemm.scaled_mm(x, y, s1, s2, emulate=False)


@pytest.mark.parametrize("call,err,match", [
    (lambda q, s: gemm.scaled_mm(q.data.float(), q.data.t(), q.scale, q.scale), TypeError,
     "float8"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale.to("meta"), q.scale), ValueError,
     "same device"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale, q.scale,
                                 out_dtype=torch.float8_e4m3fn), ValueError, "out_dtype"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale.new_ones(32, 2)[:, :1],
                                 q.scale.new_ones(1, 32)), ValueError, "contiguous"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t().contiguous(), q.scale, q.scale), ValueError,
     "column-major"),
    (lambda q, s: gemm.scaled_mm(q.data.t().contiguous().t(), q.data.t(), q.scale, q.scale),
     ValueError, "row-major"),
    (lambda q, s: gemm.scaled_mm(q.data[:, :40], q.data[:, :40].t(), q.scale, q.scale),
     ValueError, "multiples of 16"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data[:24].t(), q.scale, q.scale), ValueError,
     "multiples of 16"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale.double(), q.scale), TypeError,
     "float32"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale * np.inf, q.scale), ValueError,
     "positive and finite"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale * 0, q.scale), ValueError,
     "positive and finite"),
    (lambda q, s: gemm.scaled_mm(q.data, q.data.t(), q.scale.new_ones(32, 1),
                                 q.scale.new_ones(48, 1)), ValueError, "per row"),
    (lambda q, s: gemm.scaled_mm(q.data, gemm.fp8_quantize(np.ones((16, 32))).data.t(),
                                 q.scale, q.scale), ValueError, "inner"),
    (lambda q, s: gemm.scaled_mm(s.data, s.data.t(), s.scale, s.scale), ValueError, "E5M2 x E5M2"),
    (lambda q, s: gemm.fp8_quantize(np.ones((2, 16)), nf.FP4_E2M1), TypeError, "FP8_E4M3"),
    (lambda q, s: gemm.fp8_quantize(np.ones(16)), ValueError, "2-D"),
    (lambda q, s: gemm.fp8_quantize(np.ones((2, 16)), granularity="block"), ValueError,
     "granularity"),
    (lambda q, s: gemm.fp8_quantize(np.full((2, 16), np.inf)), ValueError, "non-finite"),
])
def test_scaled_mm_bad_input(call, err, match):
    x = np.random.default_rng(0).standard_normal((32, 48))
    q = gemm.fp8_quantize(x)
    s = gemm.fp8_quantize(x, nf.FP8_E5M2)
    with pytest.raises(err, match=match):
        call(q, s)


# ---------------------------------------------------------------- block-scaled
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("quantize", [
    lambda t, device=None: nt.mx_quantize(t, nf.FP8_E4M3, device=device),
    lambda t, device=None: nt.mx_quantize(t, nf.FP4_E2M1, device=device),
    lambda t, device=None: nt.nvfp4_quantize(t, device=device),
], ids=["MXFP8", "MXFP4", "NVFP4"])
def test_block_scaled_mm_equals_dequantize_then_multiply(quantize, device):
    x, w = operands(m=16, k=128, n=24)
    y, qx, qw = gemm.block_scaled_linear(torch.from_numpy(x), torch.from_numpy(w), quantize,
                                         device=device)
    # Oracle: numpy float64 product of numfmt's dequantized values (numfmt.torch's values are
    # bit-identical to them). Different summation orders: bound by K ulps of sum |x||w|.
    deq = qx.values.cpu().numpy() @ qw.values.cpu().numpy().T
    bound = 128 * np.finfo(float).eps * (np.abs(qx.values.cpu().numpy())
                                         @ np.abs(qw.values.cpu().numpy()).T)
    assert np.all(np.abs(y.cpu().numpy() - deq) <= bound)


def test_block_scaled_mm_bad_input():
    a = nt.mx_quantize(np.ones((4, 64)), nf.FP4_E2M1)
    b = nt.nvfp4_quantize(np.ones((4, 64)))
    with pytest.raises(ValueError, match="block sizes differ"):
        gemm.block_scaled_mm(a, b)
    with pytest.raises(ValueError, match=r"\(M, K\)"):
        gemm.block_scaled_mm(a, nt.mx_quantize(np.ones((4, 32)), nf.FP4_E2M1))


def test_native_block_scaled_needs_cuda_capability_10():
    # Every Blackwell part, sm_100 and sm_120 alike, has block-scaled MMA: torch's own test
    # suite gates MX GEMMs on SM100OrLater (capability >= (10, 0)); Hopper (9.0) has none.
    want = CUDA and torch.cuda.get_device_capability() >= (10, 0)
    assert gemm.native_block_scaled_available() == want
    assert gemm.native_block_scaled_available("cpu") is False


def test_fp8_kernel_needs_cuda_capability_8_9():
    want = CUDA and torch.cuda.get_device_capability() >= (8, 9)
    assert gemm.fp8_kernel_available() == want
    assert gemm.fp8_kernel_available("cpu") is False
    assert gemm.fp8_kernel_available("meta") is False


# ---------------------------------------------------------------- bench (CPU smoke tests)
def test_repeat_seconds_is_the_median_of_the_runs(monkeypatch):
    # A fake clock: each call of fn advances it by the next duration (in seconds). Warm-up
    # runs take 100 s and must not count; the 5 timed runs take 9, 1, 4, 2, 3 ms, whose
    # median is 3 ms (the mean would be 3.8 ms, the minimum 1 ms).
    durations = iter([100.0, 100.0, 9e-3, 1e-3, 4e-3, 2e-3, 3e-3])
    clock = [0.0]

    def fn():
        clock[0] += next(durations)

    monkeypatch.setattr(machine, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    t = machine.repeat_seconds(fn, repeats=5, warmup=2, device="cpu")
    # rel=1e-9: float rounding of the clock differences
    assert (t.median, t.low, t.high) == pytest.approx((3e-3, 1e-3, 9e-3), rel=1e-9)
    assert next(durations, None) is None       # fn ran exactly 2 + 5 times
    with pytest.raises(ValueError, match="repeats"):
        machine.repeat_seconds(lambda: None, repeats=0, device="cpu")


def test_repeat_seconds_on_cuda_records_events_and_waits_only_at_both_ends(monkeypatch):
    # The CUDA branch with stand-ins for torch.cuda's events and synchronize: every run sits
    # between its own two events, the host waits before the first and after the last run
    # only, and the result is the median of the event intervals.
    log, gaps = [], iter([5.0, 1.0, 3.0])

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self):
            log.append("record")

        def elapsed_time(self, end):
            assert log[-1] == "sync"  # read only after the final wait
            return next(gaps)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("sync"))
    t = machine.repeat_seconds(lambda: log.append("run"), repeats=3, warmup=2, device="cuda")
    assert log == ["run", "run", "sync"] + ["record", "run", "record"] * 3 + ["sync"]
    assert t.median == pytest.approx(3e-3, rel=1e-12)   # events give ms


@pytest.mark.parametrize("kind", bench.GEMM_KINDS)
def test_gemm_setup_arguments_pass_torch_cuda_rules_on_meta_tensors(kind, monkeypatch):
    # On meta tensors torch's _scaled_mm applies the CUDA kernel's layout and scale rules; for
    # _int_mm the layout cuBLASLt takes (row-major a, column-major b) is checked by a spy.
    layouts = []
    real = torch._int_mm
    monkeypatch.setattr(torch, "_int_mm",
                        lambda a, b: layouts.append((a.stride(), b.stride())) or real(a, b))
    out = bench.gemm_setup(kind, 64, "meta")()
    assert out.device.type == "meta" and out.shape == (64, 64)
    assert out.dtype == (torch.int32 if kind == "int8" else torch.bfloat16)
    assert layouts == ([((64, 1), (1, 64))] if kind == "int8" else [])


@pytest.mark.parametrize("kind", bench.GEMM_KINDS)
def test_gemm_setup_runs_each_kind_on_the_cpu(kind):
    out = bench.gemm_setup(kind, 32, "cpu")()
    assert out.shape == (32, 32)
    assert out.dtype == (torch.int32 if kind == "int8" else torch.bfloat16)
    r = bench.gemm_tflops(kind, 32, "cpu", warmup=1, iters=2)
    assert r["tflops"] == pytest.approx(2 * 32**3 / (r["ms"] * 1e-3) / 1e12)


def test_throughput_rows_and_quantize_bandwidth_on_the_cpu():
    rows = bench.throughput_rows((32,), "cpu", iters=2)
    assert [r["kind"] for r in rows] == list(bench.GEMM_KINDS)
    assert rows[0]["vs_bf16"] == 1.0
    for kernel in bench.QUANT_KERNELS:
        q = bench.quantize_bandwidth(kernel, 4096, "cpu", warmup=1, iters=2)
        # amax reads 2 bytes per bf16 element; the casts read 2 and write 1.
        assert q["gbytes"] == (2 if kernel == "amax" else 3) * 4096 / 1e9
        assert q["gbs"] == pytest.approx(q["gbytes"] / (q["ms"] * 1e-3))


def test_a_failing_kernel_becomes_a_row_when_asked(monkeypatch):
    real = bench.gemm_tflops

    def flaky(kind, n, device, **kw):
        if kind == "fp8 per-row":
            raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED\nmore lines")
        return real(kind, n, device, **kw)

    monkeypatch.setattr(bench, "gemm_tflops", flaky)
    rows = bench.throughput_rows((32,), "cpu", iters=2, errors="record")
    assert [r["kind"] for r in rows] == list(bench.GEMM_KINDS)
    bad = rows[2]
    assert bad["error"] == "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED"
    assert np.isnan(bad["tflops"]) and np.isnan(bad["vs_bf16"])
    assert all("error" not in r for r in rows[:2] + rows[3:])
    with pytest.raises(RuntimeError, match="CUBLAS"):
        bench.throughput_rows((32,), "cpu", iters=2)
    with pytest.raises(ValueError, match="errors"):
        bench.throughput_rows((32,), "cpu", errors="ignore")
    # The quantize kernels likewise; 4096 bf16 elements: amax counts 2 bytes each, casts 3.
    monkeypatch.setattr(bench, "quantize_bandwidth", lambda *a, **k: 1 / 0)
    q = bench.quantize_rows(4096, "cpu", errors="record", peak_gbs=100.0)
    assert [r["error"] for r in q] == ["ZeroDivisionError: division by zero"] * 3
    assert [r["gbytes"] for r in q] == [2 * 4096 / 1e9, 3 * 4096 / 1e9, 3 * 4096 / 1e9]
    with pytest.raises(ZeroDivisionError):
        bench.quantize_rows(4096, "cpu")


def test_error_text_keeps_the_first_line_within_the_width():
    assert bench.error_text(ValueError("a\nb")) == "ValueError: a"
    long = bench.error_text(RuntimeError("x" * 500), width=40)
    assert len(long) == 40 and long.endswith("...")


def test_peak_bandwidth_by_name_and_from_clock():
    class P:
        name, memory_clock_rate, memory_bus_width = "NVIDIA H200", 2_619_000, 6144
    assert bench.peak_from_properties(P) == 4800.0
    P.name = "NVIDIA GH200 480GB"  # holds "H200": the GH200 entry (4.0 TB/s) must win
    assert bench.peak_from_properties(P) == 4000.0
    P.name = "NVIDIA H100 80GB HBM3"
    assert bench.peak_from_properties(P) == 3350.0
    P.name = "Some GPU"
    # 2 (double data rate) * 2.619e9 Hz * 6144 bits / 8 = 4022.8 GB/s.
    assert bench.peak_from_properties(P) == pytest.approx(2 * 2.619e9 * 768 / 1e9)
    assert bench.peak_bandwidth_gbs("cpu") is None


@pytest.mark.parametrize("call,match", [
    (lambda: bench.gemm_setup("fp16", 32, "cpu"), "kind"),
    (lambda: bench.gemm_setup("bf16", 40, "cpu"), "multiple of 16"),
    (lambda: bench.quantize_setup("cast", 10, "cpu"), "kernel"),
    (lambda: bench.quantize_setup("amax", 0, "cpu"), "positive"),
])
def test_bench_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
