"""Lecture 13: every claim it prints, asserted on the --quick workload (computed once for the
module), against torch, torchao and hand counts; the Chinese run and the command line.

Expected values come from elsewhere than the code under test: torch's own byte counts of
lecture 10's model and optimizer, torchao's quantizers and Float8Linear, torch's BF16 cast,
and counts written out by hand.
"""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch

from console.i18n import language
import numfmt.torch.train as ntt
from numfmt import memory
from tests.text_checks import english_runs, layout_problems, number_differences

L = importlib.import_module("lectures.13_memory_of_training")
ROOT = Path(__file__).resolve().parents[1]
torchao = pytest.importorskip("torchao")


@pytest.fixture(scope="module")
def runs():
    return L.run_all(L.QUICK, workers=2)


@pytest.fixture(scope="module")
def bill():
    return L.demo1_bill()


@pytest.fixture(scope="module")
def stack():
    return L.demo4_real_stack()


# ------------------------------------------------------------------------------- demo 1
def test_bill_mixed_precision_is_18_bytes_per_parameter(bill):
    p = 8_030_261_248              # Llama 3.1 8B's published parameter count
    one = bill.bills[("Llama 3.1 8B", "BF16 mixed", "dp", 1, False)]
    assert one["weights"] + one["master"] + one["gradients"] + one["moments"] == 18 * p
    assert 18 * p + one["activations"] > 80e9                     # "no single 80 GB GPU"
    small = bill.bills[("Llama 3.1 8B", "BF16 mixed, 8-bit Adam", "fsdp", 8, True)]
    assert sum(small.values()) < 80e9 / 4
    fsdp = bill.bills[("Llama 3.1 8B", "BF16 mixed", "fsdp", 8, False)]
    assert fsdp["master"] == 4 * -(-p // 8) and fsdp["activations"] == one["activations"]


def test_tiny_model_bill_is_what_torch_holds(bill):
    assert bill.tiny_measured == bill.tiny_counted
    assert bill.tiny_params == bill.tiny_shape_params == 393_856


# ------------------------------------------------------------------------------- demo 2
@pytest.fixture(scope="module")
def adam(runs):
    return L.demo2_adam_state(runs)


def test_dynamic_map_keeps_the_second_moment(adam):
    lin_rel, lin_flush = adam.errors[("v", "linear INT8")]
    dyn_rel, dyn_flush = adam.errors[("v", "dynamic map")]
    assert lin_flush > 0.05 and dyn_flush < lin_flush / 100 and dyn_rel < lin_rel
    lin_m, dyn_m = adam.errors[("m", "linear INT8")], adam.errors[("m", "dynamic map")]
    assert dyn_m[0] < lin_m[0] and dyn_m[1] < lin_m[1]


def test_dynamic_map_values_are_torchaos(adam):
    # the moments of the same run, quantized by torchao's own quantizer (block 2,048)
    from torchao.optim.quant_utils import (create_dynamic_map, dequant_with_qmap,
                                           quantize_8bit_with_qmap, scale_tensor)
    m, v = L._moments_of_a_run(adam.step)
    for x, signed in ((m, True), (v, False)):
        n = x.size - x.size % 2048
        t = torch.from_numpy(x[:n]).float()
        qmap = torch.tensor(create_dynamic_map(signed=signed), dtype=torch.float32)
        xs, scale = scale_tensor(t, 2048)
        theirs = dequant_with_qmap(quantize_8bit_with_qmap(xs, qmap), qmap, scale).double()
        ours = L.blockwise_dequantize(L.blockwise_quantize(t.numpy(), 2048, signed,
                                                           qmap=qmap.numpy()))
        rel = float(np.linalg.norm(theirs.numpy() - t.double().numpy())
                    / np.linalg.norm(t.double().numpy()))
        assert np.array_equal(ours.astype(np.float32), theirs.float().numpy())
        name = "m" if signed else "v"
        # the printed error is within float32 rounding of the moments of torchao's codes
        assert adam.errors[(name, "dynamic map")][0] == pytest.approx(rel, rel=1e-3, abs=1e-6)


def test_state_bytes_are_the_optimizers(adam):
    p = 393_856
    assert adam.state_bytes["FP32 Adam"] == 8 * p
    assert adam.state_bytes["BF16 moments"] == 4 * p
    # 8-bit: the matrices (every one >= 4,096 elements) at 1 byte + FP32 absmax per 2,048;
    # the norms' gains (128 each) keep FP32
    sizes = [q.numel() for q in L.TinyLM(L.MODEL, "fp32", seed=0).parameters()]
    eight = sum(2 * n + 8 * -(-n // 2048) if n >= 4096 else 8 * n for n in sizes)
    assert adam.state_bytes["8-bit moments"] == adam.state_bytes["FP8 moments"] == eight


def test_verdicts_use_the_seed_range(adam, runs):
    for label, c in adam.verdicts.items():
        d = [ra.final_val - rb.final_val for ra, rb in zip(runs.results[label],
                                                            runs.results["FP32 Adam"])]
        assert c["gap"] == pytest.approx(np.mean(d))
        assert c["noise"] == pytest.approx(max(d) - min(d))
        assert c["finding"] == (abs(c["gap"]) > c["noise"])


def test_fp32_adam_run_is_torchs(runs):
    # the reference label trains with torch.optim.AdamW; numfmt's fp32 AdamW gives the same
    # losses (float64: the two operation orders differ in the last bits only)
    import functools
    from lectures.tinylm.loop import train
    cfg = L.QUICK.train_config(0)
    ours = train("fp32", cfg, L.MODEL, optimizer=functools.partial(L.AdamW))
    np.testing.assert_allclose(ours.val_loss, runs.results["FP32 Adam"][0].val_loss,
                               rtol=1e-9)


# ------------------------------------------------------------------------------- demo 3
def test_lost_updates(runs):
    r = L.demo3_master_weights(runs)
    assert r.lost["BF16 weights, nearest"] > 0.05
    assert r.lost["BF16 weights, nearest"] > r.lost["BF16 weights, stochastic"]
    for label in L.MASTER_RUNS[1:]:
        assert 0 <= r.lost[label] <= 1 and 0 <= r.lost_last[label] <= 1


def test_lost_count_is_torchs_bf16_cast():
    # one step on known weights: an update is lost where torch's BF16 cast of w + u is w
    g = torch.Generator().manual_seed(0)
    w = (torch.randn(4096, generator=g, dtype=torch.float64) * 0.3).to(torch.bfloat16).double()
    p = torch.nn.Parameter(w.clone())
    o = L.AdamW([p], lr=1e-3, master="bf16")
    p.grad = torch.randn(4096, generator=g, dtype=torch.float64)
    o.step()
    # Adam's first step is lr * sign(g) (to eps): the new value, cast by torch
    new = w - 1e-3 * p.grad.sign() * (p.grad.abs() / (p.grad.abs() + 1e-8))
    lost = int((new.to(torch.bfloat16).double() == w).sum())
    assert o.lost == [lost, 4096] and 0 < lost < 4096


# ------------------------------------------------------------------------------- demo 4
def test_every_fp8_code_is_torchaos(stack):
    assert stack.available
    assert all(e == n for e, n in stack.codes_equal.values())
    # tensorwise and rowwise (917,504 codes) and torchao's MXFP8 layer (458,752)
    assert sum(n for _e, n in stack.codes_equal.values()) == 917_504 + 458_752


def test_values_within_one_ulp_and_rowwise_exact(stack):
    for (recipe, gemm, name), (equal, n, ulps) in stack.values_equal.items():
        assert ulps <= 1
        if recipe in ("rowwise", L.MX_RECIPE):       # power-of-two scales: exact
            assert equal == n and ulps == 0
    differ, total = stack.tensorwise_differ
    e5m2 = sum(n - e for (rec, _g, name), (e, n, _u) in stack.values_equal.items()
               if rec == "tensorwise" and name == "dy")
    assert differ == e5m2 == 262_144 and total == 458_752      # "all in the E5M2 gradient"


def test_torchao_gemms_within_the_bound(stack):
    assert all(stack.gemm_within.values()) and len(stack.gemm_within) == 9


def test_mx_layer_rows_are_every_operand(stack):
    # torchao's MXFP8Linear (EMULATED, RCEIL) casts all six operands; numfmt's mxfp8_rceil
    # equals each (MXTensor.to_mx against mx_quantize, scale rules: tests/test_blocks.py)
    mx = {k: v for k, v in stack.values_equal.items() if k[0] == L.MX_RECIPE}
    assert len(mx) == 6 and sum(n for _e, n, _u in mx.values()) == 458_752
    assert all(e == n for e, n, _u in mx.values())
    assert L.MX_SPEC == L.ntt.OperandSpec("e4m3", (1, 32), "e8m0", "rceil")


def test_rowwise_bound_is_needed(stack):
    # torchao's rowwise outputs are BF16-rounded: without the extra term the bound fails
    x, w, dy = L._operands()
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    lin = torch.nn.Linear(L.MODEL.d_model, L.MODEL.d_ff, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    m = torch.nn.Sequential(lin)
    convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name("rowwise"))
    y = m(x).detach()
    assert torch.equal(y, y.to(torch.bfloat16).float())          # every output is a BF16


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_emulation_recipes_are_torchaos_config(recipe):
    ours = L.TORCHAO_RECIPES[recipe]
    # converted layers: convert_to_float8_training's Float8Linear layers are the layers the
    # recipe runs in FP8 (none kept in BF16: lm_head included)
    from torchao.float8.float8_linear import Float8Linear
    theirs = {n for n, m in L.to_torchao(L.TinyLM(L.MODEL, "fp32", seed=0), recipe)
              .named_modules() if isinstance(m, Float8Linear)}
    names = set(L.TinyLM(L.MODEL, ours, seed=0).linears())
    assert "lm_head" in theirs and len(theirs) == 15
    assert {n for n in names if not ours.is_high_precision(n)} == theirs
    # output dtype: a float32 Float8Linear returns float32; tensorwise leaves the GEMMs'
    # float32 results as they are (not all BF16 values), rowwise returns BF16 values
    x, w, dy = L._operands()
    lin = torch.nn.Linear(L.MODEL.d_model, L.MODEL.d_ff, bias=False)
    with torch.no_grad():
        lin.weight.copy_(w)
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    m = convert_to_float8_training(torch.nn.Sequential(lin),
                                   config=Float8LinearConfig.from_recipe_name(recipe))
    xx = x.clone().requires_grad_(True)
    y = m(xx)
    y.backward(dy)
    outs = (y.detach(), xx.grad, m[0].weight.grad)
    assert all(t.dtype == torch.float32 for t in outs)
    bf16 = [torch.equal(t, t.to(torch.bfloat16).float()) for t in outs]
    assert bf16 == ([True] * 3 if ours.output == "bf16" else [False] * 3)
    assert ours.output == {"tensorwise": "fp32", "rowwise": "bf16"}[recipe]
    # the operands: tensorwise is lecture 10's fp8_current (HYBRID, exact FP32 scales)
    ref = L.ntt.RECIPES["fp8_current"]
    if recipe == "tensorwise":
        assert all(getattr(ours, g) == getattr(ref, g) for g in L.ntt.GEMMS)
        assert (ref.output, ref.high_precision_layers) == ("bf16", ("lm_head",))


def test_torchao_training_stays_with_numfmts(runs):
    r = L.demo4_training(runs)
    assert len(r.gaps) == len(L.QUICK.seeds) and max(r.gaps) < L.TORCHAO_TOLERANCE
    assert r.early == 10 and max(r.gaps) > 0          # float32 against float64: not identical
    # the torchao runs really trained torchao's layers, in float32, and moved the loss
    ao = runs.results["FP8 tensorwise (torchao)"][0]
    assert ao.val_loss[-1] < ao.val_loss[0]
    model = L.to_torchao(L.TinyLM(L.MODEL, "fp32", seed=0))
    from torchao.float8.float8_linear import Float8Linear
    assert sum(isinstance(m, Float8Linear) for m in model.modules()) == 15
    # and the FP8 run's verdict is the paired comparison printed
    c = L.compare(runs, "FP8 tensorwise (numfmt)", "FP32 Adam")
    assert r.verdict == c


def test_emulation_is_closer_to_torchao_than_fp8_current(runs):
    # lecture 10's fp8_current (BF16 outputs, BF16 lm_head) is not what torchao runs: its
    # early training losses stay further from torchao's than the emulation's, on every seed
    from lectures.tinylm.loop import train
    for seed, ao, ours in zip(L.QUICK.seeds, runs.results["FP8 tensorwise (torchao)"],
                              runs.results["FP8 tensorwise (numfmt)"]):
        te = train("fp8_current", L.QUICK.train_config(seed), L.MODEL)
        gap = np.max(np.abs(ours.train_loss[:10] - ao.train_loss[:10]))
        assert gap < np.max(np.abs(te.train_loss[:10] - ao.train_loss[:10])) / 2


def test_mx_status_is_what_torchao_does(stack):
    status = dict(stack.mx_status)
    assert status["EMULATED"] == "" and status["AUTO"].startswith("AssertionError")


# ------------------------------------------------------------------------------- demo 5
def test_fp8_all_gather_sends_the_linears_in_one_byte():
    r = L.demo5_communication()
    s = memory.LLAMA_3_1_8B
    a, b = r.comm[("Llama 3.1 8B", "fsdp", False)], r.comm[("Llama 3.1 8B", "fsdp", True)]
    p = 8_030_261_248
    # the layers' linears in E4M3, the embedding, head and norms (1,050,939,392) in BF16
    rest = 2 * 128256 * 4096 + (2 * 32 + 1) * 4096
    assert b["all_gather"] / a["all_gather"] == pytest.approx((p - rest + 2 * rest) / (2 * p))
    assert 0.56 < b["all_gather"] / a["all_gather"] < 0.57
    assert a["reduce_scatter"] == b["reduce_scatter"] and s.tensors == 291
    dp = r.comm[("Llama 3.1 8B", "dp", False)]
    assert sum(a.values()) < sum(dp.values())


# ------------------------------------------------------------ demo 5: FP8 primary weights
@pytest.fixture(scope="module")
def primary(runs):
    return L.demo5_fp8_weights(runs, L.run_bf16_all_gather(L.QUICK, workers=2))


def _gemm_weights(model, x, monkeypatch):
    """The weight operand (FP8 codes as uint8, its scale) of the first torch._scaled_mm a
    forward pass of ``model`` on ``x`` calls: the copy Float8Linear's GEMM reads."""
    calls = []
    real = torch._scaled_mm

    def record(a, b, *args, **kw):
        scale = kw["scale_b"] if "scale_b" in kw else args[1]
        calls.append((b.t().contiguous().view(torch.uint8), scale))
        return real(a, b, *args, **kw)
    monkeypatch.setattr(torch, "_scaled_mm", record)
    model(x)
    monkeypatch.setattr(torch, "_scaled_mm", real)
    return calls[0]


def test_fsdp2_fp8_all_gather_reads_the_fp32_masters_cast(tmp_path, monkeypatch):
    # torchao's own FSDP2 float8 all-gather on this CPU (gloo, one rank): the E4M3 weight the
    # GEMM reads, against Float8Linear's cast without FSDP and against numfmt's
    import warnings

    import torch.distributed as dist
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    from torchao.float8.fsdp_utils import precompute_float8_dynamic_scale_for_fsdp
    x, w, _dy = L._operands()
    spec = L.TORCHAO_TENSORWISE.fprop[1]

    def model(fsdp, fp8_gather, weight=w):
        m = torch.nn.Sequential(torch.nn.Linear(w.shape[1], w.shape[0], bias=False))
        with torch.no_grad():
            m[0].weight.copy_(weight)
        convert_to_float8_training(m, config=Float8LinearConfig(
            enable_fsdp_float8_all_gather=fp8_gather))
        if fsdp:
            fully_shard(m, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
            precompute_float8_dynamic_scale_for_fsdp(m)
        return m

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            plain = _gemm_weights(model(False, False), x, monkeypatch)
            fp8 = _gemm_weights(model(True, True), x, monkeypatch)
            bf16 = _gemm_weights(model(True, False), x, monkeypatch)
            bf16_copy = _gemm_weights(model(False, False, L._bf16(w)), x, monkeypatch)
    finally:
        dist.destroy_process_group()
    # FP8 all-gather under BF16 mixed precision: Float8Linear's cast of the FP32 weight, code
    # for code and the same scale
    assert torch.equal(fp8[0], plain[0]) and torch.equal(fp8[1], plain[1])
    # BF16 all-gather: the cast of the BF16 copy, which differs from the direct cast
    assert torch.equal(bf16[0], bf16_copy[0]) and torch.equal(bf16[1], bf16_copy[1])
    assert not torch.equal(bf16[0], plain[0])
    # numfmt's codes of the two copies are torchao's
    for (codes, _s), src in ((plain, w), (bf16, L._bf16(w))):
        ours = L._e4m3_codes(ntt.quantize_operand(src, spec), src, spec)
        assert torch.equal(ours, codes)


def _exact_codes(c: torch.Tensor) -> np.ndarray:
    """E4M3 codes of c * 448 / amax, the quotient in float64, cast by ml_dtypes (RNE)."""
    c64 = c.double().numpy()
    return (c64 / (np.abs(c64).max() / 448)).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)


def test_primary_weights_codes_are_the_exact_casts(primary):
    from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
    from torchao.float8.float8_training_tensor import LinearMMConfig
    model = L.TinyLM(L.MODEL, "fp32", seed=0)
    differ = total = apart = ties = 0
    for m in model.linears().values():
        w = m.weight.detach().float()
        codes = []
        for c in (w, L._bf16(w)):
            exact = _exact_codes(c)
            codes.append(exact.astype(np.int64))
            # torchao's cast equals the exact one except where its float32 product
            # x * fl32(448 / amax) lands exactly on a midpoint the exact quotient misses, and
            # the tie goes to the even code
            theirs = hp_tensor_to_float8_dynamic(c, torch.float8_e4m3fn, LinearMMConfig())
            t = theirs._data.view(torch.uint8).numpy()
            miss = t != exact
            prod = (c.numpy() * np.float32(448 / np.abs(c.double().numpy()).max()))[miss]
            lo, hi = (v.view(ml_dtypes.float8_e4m3fn).astype(np.float64)[miss]
                      for v in (exact, t))
            assert np.array_equal(prod.astype(np.float64), (lo + hi) / 2)
            ties += int(miss.sum())
        differ += int((codes[0] != codes[1]).sum())
        apart = max(apart, int(np.abs(codes[0] - codes[1]).max()))
        total += w.numel()
    assert (primary.codes_differ, primary.codes) == (differ, total) == (differ, 360_448)
    assert primary.steps_apart == apart == 1                    # "each by one code"
    assert primary.error_bf16 > primary.error_fp8               # "grows"
    assert ties <= 2                                            # the exception is rare


def test_primary_weights_bytes_by_hand(primary):
    d, f, v, n = 128, 256, 256, 2
    linear = n * (4 * d * d + 3 * d * f) + v * d                # the layers and the head
    rest = v * d + n * 2 * d + d                                # embedding and norms
    assert primary.gathered["fp8"] == 2 * 7 / 8 * (linear + 2 * rest)
    assert primary.gathered["bf16"] == 2 * 7 / 8 * 2 * (linear + rest)
    assert primary.devices == 8


def test_primary_weights_verdict_is_paired_by_seed(primary, runs):
    ours = [r.final_val for r in runs.results[L.FP8_GATHER]]
    bf16 = L.run_bf16_all_gather(L.QUICK, workers=1)
    diff = np.array([r.final_val for r in bf16]) - np.array(ours)
    assert primary.verdict["gap"] == pytest.approx(diff.mean(), abs=0)
    assert primary.verdict["noise"] == pytest.approx(np.ptp(diff), abs=0)
    assert primary.verdict["finding"] == (abs(diff.mean()) > np.ptp(diff))
    assert np.all(diff != 0)                    # the BF16 copy does change every run


def test_bf16_copy_rounds_the_value_and_passes_the_gradient():
    w = torch.randn(64, 32, dtype=torch.float64, requires_grad=True)
    y = L.BF16Copy()(w)
    assert torch.equal(y.detach(), w.detach().float().bfloat16().double())
    g = torch.randn(64, 32, dtype=torch.float64)
    y.backward(g)
    assert torch.equal(w.grad, g)


# ----------------------------------------------------------------- Chinese, command line
def test_chinese_prints_the_same_numbers(bill, adam, runs, stack, primary, capsys):
    c = L.demo5_communication()
    master = L.demo3_master_weights(runs)
    trained = L.demo4_training(runs)

    def printed(lang):
        with language(lang):
            L.show_demo1(bill)
            L.show_demo2(adam)
            L.show_demo3(master)
            L.show_demo4(stack)
            L.show_demo4_training(trained)
            L.show_demo5(c)
            L.show_demo5_fp8_weights(primary)
        return capsys.readouterr().out

    en = printed("en")
    assert layout_problems(en) == []
    zh = printed("zh")
    assert number_differences(en, zh) == []
    assert layout_problems(zh) == []
    # the table of calls a user writes stays in the libraries' own spelling
    code = "".join(b + c for _a, b, c in L.STACK) + "".join(e for _k, e in stack.mx_status)
    assert english_runs("\n".join(line for line in zh.splitlines()
                                  if not any(w in code for w in line.split()))) == []


def test_help_and_bad_flags():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = [sys.executable, str(ROOT / "lectures/13_memory_of_training.py")]
    r = subprocess.run(run + ["--help"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0 and "--quick" in r.stdout
    r = subprocess.run(run + ["--fast"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 2 and "--fast" in r.stderr


def test_source_fits_100_columns():
    for path in ("lectures/13_memory_of_training.py", "numfmt/memory.py",
                 "numfmt/optim_state.py", "numfmt/torch/train/optim.py"):
        assert all(len(line) <= 100 for line in (ROOT / path).read_text().splitlines()), path
