"""Lecture 12: counts checked exactly against hand derivations and numfmt.packing's layouts;
measured speeds checked only through relations that hold on any machine (never an absolute
time): a roofline is an upper bound, spreads are ordered, int8 codes are numfmt's.

The model tests run the demos once per module on a small workload (a few decode steps, two
small prefills).
"""

import importlib
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from console import display_width
from numfmt import cost

L = importlib.import_module("lectures.12_time_and_memory")
from lectures import machine  # noqa: E402

from lectures.llm import speed  # noqa: E402

# Speeds measured here are checked against ceilings measured here: no other test may run meanwhile.
pytestmark = pytest.mark.alone

ROOT = Path(__file__).resolve().parents[1]
TINY = L.Workload(repeats=3, prompt=8, new_tokens=2, decode_repeats=2, slow_tokens=1,
                  passes=((1, 8), (2, 32)), pass_repeats=2)
# SmolLM2-135M's config.json (HuggingFaceTB/SmolLM2-135M on the Hugging Face hub), typed here.
PUBLISHED = SimpleNamespace(num_hidden_layers=30, hidden_size=576, intermediate_size=1536,
                            num_attention_heads=9, num_key_value_heads=3, vocab_size=49152,
                            tie_word_embeddings=True)


# ---------------------------------------------------------------------------------------------
# numfmt.cost: hand derivations
# ---------------------------------------------------------------------------------------------
def test_kv_cache_bytes_by_hand():
    # K and V, 30 layers, 3 K/V heads of 64, 2 bytes each: 2 * 30 * 3 * 64 * 2 = 23,040.
    assert cost.kv_cache_bytes(30, 3, 64) == 23_040
    assert cost.kv_cache_bytes(30, 3, 64, tokens=8192) == 23_040 * 8192 == 188_743_680
    assert cost.kv_cache_bytes(30, 3, 64, tokens=100, batch=4, bits=8) == 11_520 * 400
    assert cost.kv_cache_bytes(30, 3, 64, tokens=0) == 0


def test_attention_flops_against_a_loop():
    layers, heads, d = 2, 3, 4
    for context, new in ((0, 1), (5, 1), (0, 7), (3, 4)):
        loop = sum(layers * heads * (2 * d * (context + i) + 2 * d * (context + i))
                   for i in range(1, new + 1))
        assert cost.attention_flops(layers, heads, d, context, new) == loop


def test_roofline_by_hand():
    assert cost.ridge_point(100e9, 20e9) == 5.0
    assert cost.attainable(1.0, 100e9, 20e9) == 20e9              # memory side
    assert cost.attainable(50.0, 100e9, 20e9) == 100e9            # compute side
    assert cost.roofline_seconds(1e9, 1e9, 1e10, 1e9) == 1.0       # memory-bound: 1 GB at 1 GB/s
    assert cost.roofline_seconds(1e11, 1e9, 1e10, 1e9) == 10.0     # compute-bound
    assert cost.roofline_seconds([1e10, 1e10], 0.0, [1e10, 2e10], 1e9) == 1.5
    assert cost.weight_bytes(1000, 4.5) == 562.5
    assert cost.arithmetic_intensity(10.0, 4.0) == 2.5


@pytest.mark.parametrize("call, match", [
    (lambda: cost.kv_cache_bytes(-1, 3, 64), "layers"),
    (lambda: cost.kv_cache_bytes(30, 3.0, 64), "kv_heads"),
    (lambda: cost.kv_cache_bytes(30, 3, 64, bits=0), "bits"),
    (lambda: cost.weight_bytes(10, -4), "bits_per_weight"),
    (lambda: cost.attention_flops(1, 1, 1, context=-2), "context"),
    (lambda: cost.ridge_point(0, 1), "peak_flops"),
    (lambda: cost.attainable(-1, 1, 1), "intensity"),
    (lambda: cost.roofline_seconds([1, 2], 1, [1], 1), "length"),
    (lambda: cost.roofline_seconds(1, 1, 1, 0), "bandwidth"),
    (lambda: cost.arithmetic_intensity(1, 0), "nbytes"),
])
def test_cost_bad_inputs(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------------------------------------
# The model's counts
# ---------------------------------------------------------------------------------------------
def test_published_shape():
    assert speed.ModelShape.of(PUBLISHED) == L.SMOLLM2     # head_dim from 576 / 9
    s = L.SMOLLM2
    per_layer = 576 * 576 * 2 + 192 * 576 * 2 + 1536 * 576 * 3
    assert s.linear_params == 30 * per_layer == 106_168_320
    assert s.head_params == 49152 * 576
    # every weight: the tied embedding, 30 layers (linears + 2 norm gains), the final norm
    assert s.params == 49152 * 576 + 30 * (per_layer + 2 * 576) + 576 == 134_515_008
    assert s.kv_bytes(1, 16) == 23_040


def test_pass_cost_by_hand():
    s = L.SMOLLM2
    c = speed.pass_cost(s, 4.5, context=100, head_bits=16, kv_bits=16)
    assert c.weight_bytes == 106_168_320 * 4.5 / 8 + 49152 * 576 * 2 + 576 * 61 * 4
    assert c.kv_bytes == 23_040 * 101
    assert c.linear_flops == 2 * 106_168_320
    assert c.other_flops == 2 * 49152 * 576 + 4 * 30 * 9 * 64 * 101
    p = speed.pass_cost(s, 32, new_tokens=16, batch=2, all_logits=True)
    assert p.tokens == 32 and p.linear_flops == 2 * 106_168_320 * 32
    assert p.other_flops == 2 * 49152 * 576 * 32 + 2 * 4 * 30 * 9 * 64 * (16 * 17 // 2)


def test_bits_per_weight_match_numfmt_packing():
    """The formula's bits per weight are the bytes numfmt.packing's layouts really take."""
    from numfmt import mx_quantize, nvfp4_quantize, FP4_E2M1, quantize_int
    from numfmt.packing import pack_block_fp4, pack_int4, qlora_quantize

    rng = np.random.default_rng(0)
    w = rng.standard_normal((192, 576))
    bits = L.format_bits(speed.ModelShape(1, 576, 1536, 3, 3, 64, 10))   # mixed shapes
    mx = pack_block_fp4(mx_quantize(w, FP4_E2M1, 32), "mxfp4")
    assert 8 * mx.nbytes / w.size == bits["MXFP4 (E2M1, E8M0 per 32)"] == 4.25
    nv = pack_block_fp4(nvfp4_quantize(w, 16), "nvfp4")
    assert 8 * (nv.nbytes - 4) / w.size == bits["NVFP4 (E2M1, E4M3 per 16)"]  # less the FP32
    q = quantize_int(w, 4, True, "group", 32)
    codes = np.rint(q.values / np.repeat(q.scale.reshape(192, -1), 32, axis=1)).astype(int)
    packed = pack_int4(codes)
    scale_bytes = 2 * (w.size // 32)                         # an FP16 scale per group
    assert 8 * (packed.nbytes + scale_bytes) / w.size == bits["INT4, groups of 32"]
    nf4 = qlora_quantize(w, double_quant=False)
    assert 8 * nf4.nbytes / w.size == bits["NF4 (per 64, FP32 absmax)"]


def test_demo2_bytes_per_token():
    r = L.demo2_bytes_per_token(L.SMOLLM2, 20e9)
    assert list(r.bits)[:2] == ["float32", "BF16"]
    assert len(r.bits) == 2 + len(L.WEIGHT_FORMATS)
    norms = 576 * 61 * 4
    for label, b in r.bits.items():
        head = 49152 * 576 * (4 if label == "float32" else 2)    # the float32 model: float32
        linears = 106_168_320 * b / 8
        assert r.token_bytes[label, 0] == linears + head + norms + 23_040
        assert r.token_bytes[label, 8192] == linears + head + norms + 23_040 * 8193
        assert r.predicted[label, 0] == 20e9 / r.token_bytes[label, 0]
    assert r.kv["BF16"] == 23_040 and r.kv["INT8, per token"] == 11_520 * 8.25 / 8
    # The claims of the observations.
    assert r.token_bytes["float32", 0] / r.token_bytes["INT4, groups of 32", 0] < 8
    assert r.kv["BF16"] * 8192 > r.token_bytes["INT4, groups of 32", 0]


def test_decode_point():
    p = L.decode_point("INT4, groups of 32", "BF16", 1024, 4, 20e9, 100e9)
    c = speed.pass_cost(L.SMOLLM2, 4.5, context=1024, batch=4, head_bits=16, kv_bits=16)
    assert p["tokens_per_s"] == 4 / max(c.flops / 100e9, c.nbytes / 20e9)
    assert p["kv_cache_mb"] == 23_040 * 1024 * 4 / 1e6
    assert p["bound"] == "compute"     # 1.36 G op in 13.6 ms against 211 MB in 10.5 ms
    one = L.decode_point("INT4, groups of 32", "BF16", 1024, 1, 20e9, 100e9)
    assert one["bound"] == "memory"    # 0.34 G op in 3.4 ms against 140 MB in 7.0 ms
    assert one["tokens_per_s"] < p["tokens_per_s"] < 4 * one["tokens_per_s"]
    with pytest.raises(ValueError, match="weights"):
        L.decode_point("INT5", "BF16", 0, 1, 1e9, 1e9)
    with pytest.raises(ValueError, match="kv"):
        L.decode_point("float32", "FP16", 0, 1, 1e9, 1e9)


# ---------------------------------------------------------------------------------------------
# The machine: structure and order, never values
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def m():
    return L.demo1_machine(TINY)


def test_machine(m, capsys):
    assert m.cpu and m.cores >= 1 and m.threads >= 1
    assert set(m.bandwidth) == {"triad", "read"}
    assert set(m.matmul) | set(m.missing) == set(machine.MATMUL_DTYPES)
    assert "float32" in m.matmul
    for s in [*m.bandwidth.values(), *m.matmul.values()]:
        assert 0 < s.low <= s.median <= s.high and s.repeats == TINY.repeats
    assert m.best_bandwidth == max(s.high for s in m.bandwidth.values())
    assert m.ridge("float32") == m.peak("float32") / m.best_bandwidth
    L.show_demo1(m)
    out = capsys.readouterr().out
    assert m.cpu in out and f"{m.best_bandwidth / 1e9:.1f} GB/s" in out
    assert all(display_width(line) <= 100 for line in out.splitlines())


def test_spread_and_bad_inputs():
    s = machine.Spread.of([2.0, 1.0, 4.0])
    assert (s.median, s.low, s.high) == (2.0, 1.0, 4.0)
    r = s.inverse(8.0)
    assert (r.median, r.low, r.high) == (4.0, 2.0, 8.0)
    with pytest.raises(ValueError):
        machine.Spread.of([])
    with pytest.raises(ValueError, match="dtype"):
        machine.matmul_throughput("float16")
    with pytest.raises(ValueError, match="n"):
        machine.matmul_throughput("float32", 12)
    with pytest.raises(ValueError, match="numel"):
        machine.stream_bandwidth(0)
    with pytest.raises(ValueError, match="repeats"):
        machine.repeat_seconds(lambda: None, 0)


# ---------------------------------------------------------------------------------------------
# The real kernels: torch's int8 against numfmt, on a small layer
# ---------------------------------------------------------------------------------------------
def test_dynamic_int8_linear_is_numfmts_arithmetic():
    """torch's dynamic int8 linear = int8 codes of x (per tensor, affine) and of w (per row)
    multiplied exactly in integers and scaled: emulated with numfmt's quantize_affine and an
    int64 product, equal to float32 rounding."""
    torch = pytest.importorskip("torch")
    from numfmt import quantize_affine

    torch.manual_seed(0)
    lin = torch.nn.Linear(96, 64, bias=False)
    q = speed.int8_dynamic_module(lin)
    x = torch.randn(5, 96)
    y = q(x).numpy()
    qw = q.weight()
    sw = qw.q_per_channel_scales().numpy()
    wc = qw.int_repr().numpy().astype(np.int64)
    # The activation's qparams as torch chooses them (x86: 7-bit range [0, 127]).
    sx, zx = speed.dynamic_input_qparams(x)
    top = 127 if torch.backends.quantized.engine in ("x86", "fbgemm") else 255
    xc = quantize_affine(x.numpy(), sx, zx, 0, top).astype(np.int64)
    acc = (xc - zx) @ wc.T                                   # exact int64
    emul = acc * (sx * sw)[None, :]
    np.testing.assert_allclose(y, emul, rtol=1e-5, atol=1e-6 * np.abs(emul).max())
    # The weight codes are numfmt's at torch's scales, ties apart.
    ref = quantize_affine(lin.weight.detach().numpy(), sw[:, None], 0, -128, 127)
    off = ref != qw.int_repr().numpy()
    t = lin.weight.detach().numpy()[off] / np.broadcast_to(sw[:, None], off.shape)[off]
    assert np.all(np.abs(np.abs(t - np.floor(t)) - 0.5) < L.TIE)


# ---------------------------------------------------------------------------------------------
# The model: demos 3 and 4
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def paths(checkpoint):
    return L.build_paths(checkpoint)


@pytest.fixture(scope="module")
def d3(checkpoint, m, paths):
    return L.demo3_decode(checkpoint, m, *paths, TINY)


@pytest.fixture(scope="module")
def d4(checkpoint, m, d3, paths):
    return L.demo4_operating_points(checkpoint, m, d3, paths[0], TINY)


@pytest.mark.long
def test_model_shape_is_the_published_one(checkpoint):
    model = checkpoint.model
    assert speed.ModelShape.of(model.config) == L.SMOLLM2
    from lectures import llm
    got = [tuple(lin.weight.shape) for lin in llm.decoder_linears(model).values()]
    assert got == L.SMOLLM2.linear_shapes()
    assert model.model.embed_tokens.weight.numel() == L.SMOLLM2.head_params
    norms = sum(p.numel() for n, p in model.named_parameters() if "norm" in n)
    assert norms == L.SMOLLM2.norm_params


@pytest.mark.long
def test_demo3_decode(d3, m, capsys):
    labels = [t.label for t in d3.rows]
    assert labels[:2] == ["float32", "W8A8 dynamic (torch.ao)"]
    for t in d3.rows:
        # The roofline is an upper bound. Its ceilings are measurements too, known to within
        # their own repeats' spread: the bound is checked with that allowance.
        slack = 1 + max(m.bandwidth["read"].relative, m.matmul["float32"].relative)
        assert t.measured.median <= t.predicted * slack
        assert t.measured.low <= t.measured.median <= t.measured.high
    assert d3.rows[0].bits == 32 and 8 < d3.rows[1].bits < 8.1
    # torch's int8 codes are numfmt's, except at ties (each differing code is a tie).
    c = d3.codes
    assert c.total == L.SMOLLM2.linear_params
    assert c.differ == c.at_ties
    assert c.differ < 155_520                     # at most one per row (the row's amax)
    assert 0.999999 < c.largest_ratio < 1.000001  # scale = amax / 127.5
    if importlib.util.find_spec("torchao") is None:
        assert all(speed.TORCHAO_INSTALL in why for why in d3.unavailable.values())
    if importlib.util.find_spec("llama_cpp") is None:
        assert "llama-cpp-python" in d3.llama_cpp
    L.show_demo3(d3)
    out = capsys.readouterr().out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    assert f"{c.differ:,} of {c.total:,}" in out
    for t in d3.rows[1:]:
        verdict = L.compare(t.measured, d3.rows[0].measured)
        assert f"{t.label} against float32: {verdict}" in " ".join(out.split())


@pytest.mark.long
def test_demo4_operating_points(d4, m, capsys):
    fp = [p for p in d4.points if p.path == "float32"]
    assert [(p.batch, p.tokens) for p in fp] == [(1, 1)] + list(TINY.passes)
    intensities = [p.cost.intensity for p in fp]
    assert intensities == sorted(intensities)                 # more tokens, more op/B
    assert fp[0].bound == "memory"
    for p in d4.points:
        slack = 1 + max(m.bandwidth["read"].relative, *(s.relative for s in m.matmul.values()))
        assert p.measured.median <= p.predicted * slack
    sp = d4.predicted_speedup
    assert sp["W8A8", "decode"] > 1 and sp["W4A32", "decode"] > sp["W8A8", "decode"]
    assert sp["W4A32", "prefill"] >= 1
    if fp[-1].bound == "compute":      # the same products: fewer bytes do not help there
        assert sp["W4A32", "prefill"] == pytest.approx(1.0, rel=1e-12)
    L.show_demo4(d4)
    out = capsys.readouterr().out
    assert all(display_width(line) <= 100 for line in out.splitlines())


def test_demo5_on_the_cpu(capsys):
    r = L.demo5_gpu()
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        assert r.rows == [] and r.note == L.GPU_NOTE
    small = L.demo5_gpu(device="cpu", sizes=(32,), iters=1)
    assert [g["kind"] for g in small.rows][0] == "bf16"
    assert all(g["peak"] is None for g in small.rows)
    L.show_demo5(small)
    assert "GEMM" in capsys.readouterr().out


def test_cli():
    run = [sys.executable, str(ROOT / "lectures" / "12_time_and_memory.py")]
    out = subprocess.run(run + ["--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0 and "--quick" in out.stdout
    bad = subprocess.run(run + ["--fast"], capture_output=True, text=True, cwd=ROOT)
    assert bad.returncode == 2 and "--fast" in bad.stderr


def test_lecture_source_fits_100_columns():
    for path in ("lectures/12_time_and_memory.py", "lectures/machine.py",
                 "lectures/llm/speed.py", "numfmt/cost.py", "lectures/widgets/lecture12.py"):
        assert all(len(line) <= 100 for line in (ROOT / path).read_text().splitlines()), path


def test_chinese_prints_the_same_numbers(m, capsys):
    """Demos 1-2 in Chinese: the English numbers, no English left in the text, tables aligned."""
    sys.path.insert(0, str(ROOT / "tests"))
    from text_checks import english_runs, layout_problems, number_differences
    from console.i18n import language

    b = L.demo2_bytes_per_token(L.SMOLLM2, m.best_bandwidth)
    with language("en"):
        L.show_demo1(m)
        L.show_demo2(b)
    en = capsys.readouterr().out
    with language("zh"):
        L.show_demo1(m)
        L.show_demo2(b)
    zh = capsys.readouterr().out
    assert number_differences(en, zh) == []
    assert english_runs(zh.replace(m.cpu, "")) == []
    assert layout_problems(zh) == []


def test_int8_ceiling_is_the_faster_of_torchs_two_int8_kernels(monkeypatch):
    """The int8 roofline comes from whichever int8 kernel runs faster here: torch._int_mm is a
    slow loop on AVX2 CPUs, where fbgemm's dynamic linear (lecture 12's W8A8 path) is fast."""
    import torch
    if "fbgemm" not in torch.backends.quantized.supported_engines:
        pytest.skip("no fbgemm engine in this torch build")
    seen = []

    def fake_repeat(fn, repeats=5, warmup=1):
        fn()
        seen.append(fn)
        # the first kernel timed (torch._int_mm) takes 1 s, the second (fbgemm) 0.25 s
        return machine.Spread.of([1.0] if len(seen) == 1 else [0.25])

    monkeypatch.setattr(machine, "repeat_seconds", fake_repeat)
    r = machine.matmul_throughput("int8", n=64, repeats=1)
    assert len(seen) == 2 and r.median == pytest.approx(2 * 64**3 / 0.25)
    seen.clear()
    monkeypatch.setattr(machine, "repeat_seconds",
                        lambda fn, repeats=5, warmup=1: (seen.append(fn), fn(),
                                                          machine.Spread.of([0.5 + len(seen)]))[2])
    r = machine.matmul_throughput("int8", n=64, repeats=1)   # _int_mm 1.5 s, fbgemm 2.5 s
    assert r.median == pytest.approx(2 * 64**3 / 1.5)


def test_ridge_points_keep_two_digits_below_one():
    """bfloat16 on a CPU without native BF16 matmul has its ridge near 0.04 op/B: printed with
    one decimal it read 0.0."""
    assert [L.op_per_byte(x) for x in (0.0432, 0.5, 0.94, 0.96, 5.66, 16.25)] == \
        ["0.043", "0.5", "0.94", "1.0", "5.7", "16.2"]


def test_spans_by_hand():
    """Three significant digits, whole numbers from 100 on, two decimals below 1."""
    S = machine.Spread
    assert [L.span(S(*t, 3)) for t in [(12.04, 11.9, 12.1), (130.4, 126.2, 135.1),
                                      (0.184, 0.147, 0.246), (4.39, 4.21, 4.58)]] == \
        ["12 [11.9-12.1]", "130 [126-135]", "0.18 [0.15-0.25]", "4.39 [4.21-4.58]"]
    assert L.span(S(2e9, 1.5e9, 3e9, 3), 1e9) == "2 [1.5-3]"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_demo4_table_fits_100_columns_on_a_slow_or_fast_machine(lang, capsys):
    """A loaded machine measures below 1 G op/s with a wide spread, a fast one thousands, and
    a measurement can exceed the roofline (103%): every row fits 100 columns."""
    from console.i18n import language
    c = speed.pass_cost(L.SMOLLM2, 8.05, new_tokens=128, all_logits=True)   # 155 op/B
    spreads = [machine.Spread(m * 1e9, lo * 1e9, hi * 1e9, 3) for m, lo, hi in
               [(0.184, 0.147, 0.246), (0.998, 0.812, 1.02), (99.96, 99.2, 100.4),
                (4.39, 4.21, 4.58), (9876, 9012, 9999)]]
    points = [L.OperatingPoint(path.label, 1, 128, False, c, s.median / share, s, "compute")
              for path in L.PATHS[:2] for s in spreads for share in (0.62, 1.03)]
    r = L.OperatingResult(points, {"float32": 7.0, "bfloat16": 0.0432, "int8": 11.0}, 21.6e9,
                          {"float32": 151.7e9}, "AMD EPYC")
    with language(lang):
        L.show_demo4(r)
    out = capsys.readouterr().out
    assert max(display_width(line) for line in out.splitlines()) <= 100
    assert "0.18 [0.15-0.25]" in out and "9876 [9012-9999]" in out


def test_bf16_note_only_without_bf16_instructions():
    from lectures.machine import Spread
    rates = {"float32": Spread(100e9, 90e9, 110e9, 3), "bfloat16": Spread(5e9, 4e9, 6e9, 3)}
    r = L.MachineResult("cpu", 2, 2, {"read": Spread(20e9, 19e9, 21e9, 3)}, rates, {}, 512)
    (line,) = L.bf16_note(r, flags={"avx2", "avx512f"})
    assert "0.05x float32's rate" in line and "AVX-512 BF16" in line
    assert f"({L.op_per_byte(6e9 / 21e9)} op/B)" in line
    assert L.bf16_note(r, flags={"avx512f", "avx512_bf16"}) == []       # it has them
    assert L.bf16_note(r, flags=set()) == []                           # flags unknown
    fast = dict(rates, bfloat16=Spread(200e9, 190e9, 210e9, 3))
    assert L.bf16_note(L.MachineResult("cpu", 2, 2, r.bandwidth, fast, {}, 512),
                       flags={"avx2"}) == []


def test_one_float32_model_in_demos_2_and_3():
    """The float32 row of demo 2 reads a float32 output projection, as demo 3's float32 path
    (the model as loaded) does; every other format keeps it in BF16."""
    assert L.head_bits("float32") == 32.0
    assert {L.head_bits(label) for label in L.format_bits() if label != "float32"} == {16}
