"""Lecture 10 and its model: every claim the lecture prints, asserted on the --quick workload
(computed once for the module), the model against plain references, and the command line.

Expected values come from elsewhere than the code under test: torch's own float16 and float8
casts for what flushes to zero, nn.Linear for the FP32 model, RoPE written as complex
multiplication, numpy for the statistics.
"""

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from console.i18n import language
from lectures.tinylm.data import Batches, corpus_bytes, split, val_windows
from lectures.tinylm.loop import train
from lectures.tinylm.model import TinyLM, TinyLMConfig, apply_rope, rope_tables
from tests.text_checks import english_runs, layout_problems, number_differences

L = importlib.import_module("lectures.10_low_precision_training")
ROOT = Path(__file__).resolve().parents[1]
SMALL = TinyLMConfig(context=16, d_model=32, n_layers=2, n_heads=2, d_ff=64)


# ----------------------------------------------------------------------------- the model
def test_rope_matches_complex_multiplication():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16, 8, dtype=torch.float64)                # (B, H, T, D)
    cos, sin = rope_tables(16, 8, 10000.0)
    got = apply_rope(x.float(), cos, sin).double()
    # reference: the pairs as complex numbers times e^{i t theta_k}, theta_k = base^(-2k/D)
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    rot = np.exp(1j * np.outer(np.arange(16), theta))                # (T, D/2)
    z = x[..., 0::2].numpy() + 1j * x[..., 1::2].numpy()
    w = z * rot
    ref = np.stack([w.real, w.imag], axis=-1).reshape(x.shape)
    np.testing.assert_allclose(got.numpy(), ref, atol=1e-5)


def test_model_is_causal():
    model = TinyLM(SMALL, "fp32", seed=0)
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    changed = idx.clone()
    changed[:, 9:] = (changed[:, 9:] + 7) % 256
    with torch.no_grad():
        a, b = model(idx), model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=1e-6)
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-3


def _as_nn_linear(model: TinyLM) -> TinyLM:
    import copy
    ref = copy.deepcopy(model)
    for name, m in list(ref.named_modules()):
        for child_name, child in list(m.named_children()):
            if child.__class__.__name__ == "QuantLinear":
                lin = nn.Linear(child.weight.shape[1], child.weight.shape[0], bias=False)
                lin.weight = nn.Parameter(child.weight.detach().clone())
                setattr(m, child_name, lin)
    return ref


def test_fp32_recipe_equals_nn_linear_bit_for_bit():
    model = TinyLM(SMALL, "fp32", seed=3)
    ref = _as_nn_linear(model)
    assert not any(m.__class__.__name__ == "QuantLinear" for m in ref.modules())
    idx = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(2))
    out, out_ref = model(idx), ref(idx)
    assert torch.equal(out, out_ref)
    out.square().mean().backward()
    out_ref.square().mean().backward()
    grads = dict(model.named_parameters())
    for name, p in ref.named_parameters():
        assert torch.equal(grads[name].grad, p.grad), name


def test_linears_are_named_by_path():
    names = list(TinyLM(SMALL, "fp32").linears())
    assert names[:7] == ["layers.0.attn.q", "layers.0.attn.k", "layers.0.attn.v",
                         "layers.0.attn.o", "layers.0.mlp.gate", "layers.0.mlp.up",
                         "layers.0.mlp.down"]
    assert names[-1] == "lm_head" and len(names) == 7 * SMALL.n_layers + 1


def test_config_rejects_bad_shapes():
    with pytest.raises(ValueError, match="d_model"):
        TinyLMConfig(d_model=30, n_heads=4)
    with pytest.raises(ValueError, match="n_layers"):
        TinyLMConfig(n_layers=0)


# ------------------------------------------------------------------------------ the data
def test_data_is_the_language_reference_split_disjointly():
    from pydoc_data.topics import topics
    raw = corpus_bytes()
    assert raw == "\n\n".join(topics[k].strip() for k in sorted(topics)).encode("utf-8")
    s = split()
    n = len(raw) // 1024
    assert len(s.train) + len(s.val) == n and len(s.val) == n // 10
    chunks = np.frombuffer(raw[: n * 1024], dtype=np.uint8).reshape(n, 1024)
    np.testing.assert_array_equal(s.val, chunks[9::10])
    x, y = val_windows(s, 64, 16)
    assert x.shape == (16, 64)
    torch.testing.assert_close(x[:, 1:], y[:, :-1])
    b = Batches(s, 4, 64, seed=0)
    bx, by = b.next()
    assert bx.shape == (4, 64) and torch.equal(bx[:, 1:], by[:, :-1])


def test_batches_repeat_with_the_seed():
    s = split()
    a, b = Batches(s, 4, 32, seed=5), Batches(s, 4, 32, seed=5)
    for _ in range(3):
        assert torch.equal(a.next()[0], b.next()[0])


# ----------------------------------------------------------------------- the lecture
@pytest.fixture(scope="module")
def lec():
    return L.compute(L.QUICK, workers=2)


@pytest.fixture(scope="module")
def text(lec):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        L.show(lec)
    return buf.getvalue()


def test_every_recipe_ran_for_its_seeds(lec):
    w = lec.runs.workload
    for label, results in lec.runs.results.items():
        seeds = w.seeds[:1] if label in w.single_seed else w.seeds
        assert [r.seed for r in results] == list(seeds), label
        for r in results:
            assert len(r.train_loss) == w.steps
            assert r.val_steps[-1] == w.steps


def test_a_sub_run_repeats_bit_for_bit_in_this_process(lec):
    # the workers ran with one thread each; the same run here, also one thread, gives the
    # same bytes (the printed numbers do not depend on the process or the thread count)
    w = lec.runs.workload
    for label in ("BF16", "NVFP4 (full recipe)"):
        again = train(L.recipes()[label], w.train_config(w.seeds[-1]), L.MODEL)
        first = lec.runs.results[label][-1]
        np.testing.assert_array_equal(again.train_loss, first.train_loss)
        assert again.val_loss == first.val_loss


def test_learning_happens(lec):
    for label in ("FP32", "BF16"):
        for r in lec.runs.results[label]:
            assert r.val_loss[-1] < 6.0 < 8.0 < r.train_loss[0] + 0.5


def test_gemm_shapes_and_decades(lec):
    op = lec.probe.operands["layers.1.mlp.down"]
    n, d_in = op["x"].shape
    assert (n, d_in) == (L.BATCH * L.MODEL.context, L.MODEL.d_ff)
    assert [r[3] for r in lec.gemm.shapes] == [d_in, L.MODEL.d_model, n]
    for row, key in zip(lec.gemm.decades, ("x", "w", "dy")):
        a = op[key].abs().double().numpy().ravel()
        nz = a[a > 0]
        p1, med = np.quantile(nz, [0.01, 0.5])          # numpy's linear interpolation
        assert row[2:] == [f"{med:.2e}", f"{p1:.2e}", f"{np.log10(a.max() / p1):.1f}"]
    dy = np.concatenate([o["dy"].numpy().ravel() for o in lec.probe.operands.values()])
    dy = np.abs(dy[dy != 0]).astype(np.float64)
    np.testing.assert_allclose(lec.gemm.dy_range, [*np.quantile(dy, [0.01, 0.5, 0.99]),
                                                   dy.max()], rtol=1e-12)
    # printed: the 1st percentile lies below FP16's subnormals, the 99th among its normals
    assert lec.gemm.dy_range[0] < 2.0 ** -24 and lec.gemm.dy_range[2] > 2.0 ** -14


def test_fp16_flush_fractions_against_torch_half(lec):
    dy = torch.cat([o["dy"].flatten() for o in lec.probe.operands.values()])
    dy = dy[dy != 0]
    half = dy.half()
    assert lec.gemm.flush == pytest.approx(float((half == 0).double().mean()), abs=0)
    sub = (dy.abs() < 2.0 ** -14) & (half != 0)
    assert lec.gemm.subnormal == pytest.approx(float(sub.double().mean()), abs=0)
    scaled = (dy * 2.0 ** 16).half()
    assert lec.gemm.flush_scaled == pytest.approx(float((scaled == 0).double().mean()), abs=0)
    assert lec.gemm.flush > 0.01 > lec.gemm.flush_scaled      # printed: scaling rescues them


def _noise(lec, a, b):
    # the paired 95% t interval of the mean per-seed difference (scipy's t quantile)
    from scipy import stats
    d = np.array([r.val_loss[-1] for r in lec.runs.results[a]]) - np.array(
        [r.val_loss[-1] for r in lec.runs.results[b]])
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return d.mean(), half, abs(d.mean()) > half


@pytest.mark.parametrize("a,b", [("FP16, no loss scaling", "BF16"), ("FP16 + loss scaling", "BF16"),
                                 ("FP16, no loss scaling", "FP16 + loss scaling"),
                                 ("FP8 delayed", "FP8 current"),
                                 ("FP8 blockwise (DeepSeek-V3)", "BF16"),
                                 ("MXFP8, floor scales", "MXFP8, RCEIL scales"),
                                 ("NVFP4 (full recipe)", "BF16"),
                                 ("MXFP4", "NVFP4, round-to-nearest"),
                                 ("MXFP4 (full recipe)", "NVFP4 (full recipe)")])
def test_each_verdict_follows_the_paired_interval(lec, text, a, b):
    gap, noise, finding = _noise(lec, a, b)
    c = L.compare(lec.runs, a, b)
    assert c["gap"] == pytest.approx(gap, abs=1e-12) and c["finding"] == finding
    assert c["noise"] == pytest.approx(noise, rel=1e-3)     # the table's t to 3 decimals
    assert L.verdict(c) in " ".join(text.split())        # the text wraps lines
    assert ("within noise" in L.verdict(c)) == (not finding)


def test_fp8_underflow_against_torch_float8(lec):
    # per-tensor current scaling: scale = max / amax, values cast to torch's float8 dtypes
    nz = zero4 = zero5 = 0
    for o in lec.probe.operands.values():
        dy = o["dy"]
        amax = dy.abs().max()
        for fmt, dt, top in (("E4M3", torch.float8_e4m3fn, 448.0),
                             ("E5M2", torch.float8_e5m2, 57344.0)):
            q = (dy * (top / amax)).to(dt).float()
            z = int(((q == 0) & (dy != 0)).sum())
            if fmt == "E4M3":
                zero4 += z
            else:
                zero5 += z
        nz += int((dy != 0).sum())
    assert lec.fp8.underflow["E4M3"] == pytest.approx(zero4 / nz, abs=2e-4)
    assert lec.fp8.underflow["E5M2"] == pytest.approx(zero5 / nz, abs=2e-4)
    assert lec.fp8.underflow["E4M3"] > lec.fp8.underflow["E5M2"]


def test_pow2_tiles_against_ml_dtypes(lec, text):
    """Demo 3's count of values that 1x128 and 1x32 power-of-two blocks round differently:
    each block's scale 2^ceil(log2(amax / 448)) (RCEIL), the quotient cast by ml_dtypes."""
    ml_dtypes = pytest.importorskip("ml_dtypes")

    def cast(t, width):
        v = t.numpy().reshape(t.shape[0], -1, width)
        amax = np.abs(v).max(-1, keepdims=True)
        scale = np.exp2(np.ceil(np.log2(np.where(amax > 0, amax, 1.0) / 448.0)))
        q = (v / scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale
        return q.reshape(t.shape)
    values = differ = 0
    worst = 0.0
    for ops in lec.probe.operands.values():
        for t in (ops["x"], ops["dy"]):
            moved = cast(t, 128) != cast(t, 32)
            a = np.abs(t.numpy()).reshape(t.shape[0], -1, 128)
            tile = a.max(-1, keepdims=True)
            ratio = np.divide(a, tile, out=np.zeros_like(a), where=tile > 0).reshape(t.shape)
            values, differ = values + t.numel(), differ + int(moved.sum())
            worst = max(worst, float(ratio[moved].max()) if moved.any() else 0.0)
    got = lec.probe.tiles
    assert (got["values"], got["differ"]) == (values, differ)
    assert 0 < differ < values * 1e-3                  # rare: only among E4M3's subnormals
    assert worst < 2.0 ** -got["below"] <= 2 * worst
    assert got["below"] >= 13                          # 2^-6 / 448 of a tile's amax, or less
    assert f"{differ:,} ({differ / values:.3%}) round differently" in " ".join(text.split())


def test_spike_claims(lec, text):
    s = lec.fp8.spike
    x = lec.probe.operands[L.SPIKE[0]]["x"]
    assert s["saturated"] == pytest.approx(
        float(((x * L.SPIKE[1]).abs() > x.abs().max()).double().mean()), abs=0)
    assert s["saturated"] > 0
    assert s["error_delayed"] > s["error_current"]
    assert s["zero_after"] > s["zero_plain"]
    # the spike table: the same seed with and without the spike, identical before it
    w = lec.runs.workload
    rows = L.spike_rows(lec.runs)
    for row, (spiked, plain) in zip(rows, (("FP8 delayed + spike", "FP8 delayed"),
                                           ("FP8 current + spike", "FP8 current"))):
        a, b = lec.runs.results[spiked][0], lec.runs.results[plain][0]
        assert a.seed == b.seed == w.seeds[0]
        np.testing.assert_array_equal(a.train_loss[:w.spike_step], b.train_loss[:w.spike_step])
        assert row[1] == a.train_loss[w.spike_step] - b.train_loss[w.spike_step]
        assert row[4] == a.final_val - b.final_val
    # printed: current scaling lets the spike through, so its spike step costs more
    assert rows[1][1] > rows[0][1] > 0
    # printed: delayed scaling's extra cost after the spike is below the spike step's own cost
    # (0.001 against 7.42 in the full run, 0.005 against 0.043 in the quick one), because the
    # stale scale raises x's error only a little (less than twice its error under its own amax)
    extra = rows[0][2] - rows[1][2]
    assert abs(extra) < abs(rows[1][1])
    assert s["error_plain"] < s["error_after"] < 2 * s["error_plain"]
    flat = " ".join(text.split())
    assert f"extra cost beyond current scaling's is {L.signed(extra)} bits/byte" in flat


def test_why_claims(lec):
    d = lec.why
    # round-to-nearest gives the same dW on every draw; the mean of SR draws improves
    assert all(r[1] == d.bias_rows[0][1] for r in d.bias_rows)
    ks = sorted(d.sr_errors)
    assert all(d.sr_errors[a] > d.sr_errors[b] for a, b in zip(ks, ks[1:]))
    assert d.rne_error > d.sr_errors[ks[-1]]
    # printed: SR's mean converges to dyᵀ Q(x), whose error is the floor
    assert d.floor < d.sr_errors[ks[-1]] < d.floor * 1.1 + 0.01
    assert d.sr_errors[ks[-1]] > d.sr_errors[1] / np.sqrt(ks[-1])
    assert d.transpose["16x16"] == 0.0 < d.transpose["1x16"]
    op = lec.probe.operands[d.layer]
    for key in ("dy", "x"):
        v = op[key].double().numpy().ravel()
        v = v - v.mean()
        assert d.rht[f"kurtosis_{key}"][0] == pytest.approx(
            (v ** 4).mean() / (v ** 2).mean() ** 2, rel=1e-9)
    # the transform is orthonormal: dW from the transformed operands, unquantized, is dW
    h = L.ntt.random_hadamard(16, generator=torch.Generator().manual_seed(0)).double()
    torch.testing.assert_close(h @ h.T, torch.eye(16, dtype=torch.float64), rtol=0, atol=1e-12)
    # the printed amax / rms after the RHT is TE's transform (diag(s) H, scipy's Hadamard)
    import scipy.linalg
    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (16,), generator=g, dtype=torch.int64) * 2 - 1
    te = torch.diag(signs.double()) @ torch.from_numpy(scipy.linalg.hadamard(16) / 4.0)
    xt = op["x"].T.contiguous().double()
    xh = (xt.reshape(-1, 16) @ te).reshape(xt.shape)
    b = xh.reshape(xt.shape[0], -1, 16)
    ratio = float((b.abs().amax(-1) / b.pow(2).mean(-1).sqrt()).mean())
    assert d.rht["amax_rms_x"][1] == pytest.approx(ratio, rel=1e-12)


def test_summary_bits_are_the_formats_bits(lec):
    from dataclasses import replace
    bf16 = L.bits_per_gemm(L.recipes()["BF16"])
    assert bf16 == (16.0, 16.0, 16.0)
    assert L.bits_per_gemm(L.recipes()["FP32"]) == (32.0, 32.0, 32.0)
    mx = L.bits_per_gemm(replace(L.recipes()["MXFP8, RCEIL scales"], high_precision_layers=()))
    assert all(b == pytest.approx(8 + 8 / 32) for b in mx)       # OCP MX: an 8-bit scale per 32


def test_high_precision_shares_by_hand():
    # 2 blocks of q, k, v, o (128 x 128) and gate, up, down (128 x 256), lm_head 128 x 256
    total = 2 * (4 * 128 * 128 + 3 * 128 * 256) + 128 * 256
    rec = L.recipes()
    assert L.high_precision_share(rec["NVFP4 (full recipe)"]) == pytest.approx(
        (2 * 128 * 256 / total,) * 2)
    for label in ("FP8 delayed", "FP8 current", "FP8 blockwise (DeepSeek-V3)",
                  "MXFP8, floor scales", "MXFP8, RCEIL scales", "NVFP4 + BF16 output head"):
        assert rec[label].is_high_precision("lm_head"), label       # DeepSeek-V3 3.3.1
        assert L.high_precision_share(rec[label])[0] == pytest.approx(128 * 256 / total)
    for label in ("NVFP4, round-to-nearest", "MXFP4", "BF16"):
        assert L.high_precision_share(rec[label]) == (0.0, 0.0)
    # MXFP4 like for like: the full NVFP4 recipe's BF16 layers, SR and RHT
    m, n = rec["MXFP4 (full recipe)"], rec["NVFP4 (full recipe)"]
    assert m.high_precision_layers == n.high_precision_layers
    assert m.wgrad[0].mode == n.wgrad[0].mode == "stochastic" and m.wgrad[0].rht and n.wgrad[1].rht


def test_scaler_constants_are_gradscalers_but_the_interval(lec):
    import inspect
    defaults = inspect.signature(torch.amp.GradScaler.__init__).parameters
    assert L.SCALER[:3] == tuple(defaults[k].default for k in ("init_scale", "growth_factor",
                                                                "backoff_factor"))
    assert defaults["growth_interval"].default == 2000 > L.FULL.steps > L.SCALER[3]
    # printed: the scaler acts within the run (its scale changes)
    for r in lec.runs.results["FP16 + loss scaling"]:
        assert len(set(r.loss_scale)) > 1


def test_fp16_layer_rows_against_torch_half():
    # the gradient probe's flushed fractions, on the captured dy of an FP16 backward
    import copy

    from lectures.tinylm.probe import gradient_errors
    from torch.nn import functional as F
    model = TinyLM(SMALL, "fp32", seed=0).double()
    for m in model.linears().values():
        m.capture = True
    x = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    y = torch.roll(x, -1, 1)
    F.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
    before = {n: p.grad.clone() for n, p in model.named_parameters()}
    ref = copy.deepcopy(model)
    out = gradient_errors(model, (x, y), {"FP16": L.ntt.RECIPES["fp16"],
                                          "FP32": L.ntt.RECIPES["fp32"]})
    assert out["FP32"]["error"] == 0.0 and out["FP32"]["cosine"] == pytest.approx(1.0)
    for n, p in model.named_parameters():               # the model is left as it was
        assert torch.equal(p.grad, before[n]), n
    # FP16's dW, again by hand: the same model under the fp16 recipe
    ref.set_recipe("fp16")
    ref.zero_grad()
    F.cross_entropy(ref(x).flatten(0, 1), y.flatten()).backward()
    for name, m in ref.linears().items():
        dy = m.last_operands["dy"]
        nz = dy != 0
        flushed = float(((dy.float().half() == 0) & nz).sum()) / int(nz.sum())
        assert out["FP16"]["flushed"][name] == flushed, name
        e = float((m.weight.grad - before[name + ".weight"]).norm()
                  / before[name + ".weight"].norm())
        assert out["FP16"]["layer_error"][name] == pytest.approx(e, rel=1e-12), name


# ------------------------------------------------------------- the probe's batches
def test_sign_test_is_scipys_binomial_test():
    from scipy import stats

    from lectures.tinylm.probe import sign_test
    for n in (1, 4, 9, 12, 24):
        for k in range(n + 1):
            assert sign_test(k, n) == pytest.approx(stats.binomtest(k, n).pvalue, rel=1e-12)
    for k, n in ((5, 4), (-1, 4), (0, 0)):
        with pytest.raises(ValueError, match="k <= n"):
            sign_test(k, n)


def test_paired_errors_by_hand():
    from lectures.tinylm.probe import paired_errors
    c = paired_errors([1.0, 2.0, 3.0, 4.0], [2.0, 1.0, 6.0, 8.0])   # ratios 1/2, 2, 1/2, 1/2
    assert (c["n"], c["better"], c["low"], c["median"], c["high"]) == (4, 3, 0.5, 0.5, 2.0)
    assert c["p"] == pytest.approx(10 / 16) and not c["finding"]     # 2 (1 + 4) / 2^4
    c = paired_errors([1.0] * 6, [2.0] * 6)
    assert c["better"] == 6 and c["p"] == pytest.approx(2 / 64) and c["finding"]
    for a, b in (([1.0], [1.0, 2.0]), ([], []), ([[1.0]], [[1.0]])):
        with pytest.raises(ValueError, match="same length"):
            paired_errors(a, b)


def test_gradient_errors_batches_is_gradient_errors_batch_by_batch():
    import copy

    from lectures.tinylm.probe import gradient_errors, gradient_errors_batches
    from torch.nn import functional as F
    model = TinyLM(SMALL, "fp32", seed=0).double()
    for m in model.linears().values():
        m.capture = True
    g = torch.Generator().manual_seed(1)
    batches = [(x, torch.roll(x, -1, 1)) for x in
               (torch.randint(0, 256, (2, 16), generator=g) for _ in range(3))]
    F.cross_entropy(model(batches[0][0]).flatten(0, 1), batches[0][1].flatten()).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    ops = {n: m.last_operands for n, m in model.linears().items()}
    fresh = copy.deepcopy(model)
    rec = {"BF16": L.ntt.RECIPES["bf16"], "FP8": L.ntt.RECIPES["fp8_current"]}
    out = gradient_errors_batches(model, batches, rec)
    assert len(out) == 3
    for n, p in model.named_parameters():           # left as found: batch 0's gradients
        assert torch.equal(p.grad, grads[n]), n
    assert all(m.last_operands is ops[n] for n, m in model.linears().items())
    for (x, y), got in zip(batches, out):           # each batch on its own, FP32's grads first
        m = copy.deepcopy(fresh)
        m.zero_grad()
        F.cross_entropy(m(x).flatten(0, 1), y.flatten()).backward()
        want = gradient_errors(m, (x, y), rec)
        for label in rec:
            assert got[label]["error"] == pytest.approx(want[label]["error"], rel=1e-12)
    assert out[1]["BF16"]["error"] != out[0]["BF16"]["error"]


def test_probe_compares_every_recipe_on_the_same_batches(lec):
    w = lec.runs.workload
    assert sorted(lec.probe.grads) == sorted(w.grad_steps)
    labels = set(L.probe_recipes())
    for step, per_batch in lec.probe.grads.items():
        assert len(per_batch) == w.probe_batches
        assert all(set(g) == labels for g in per_batch)
    # batch 0 is the training step's own batch (seed 0's stream); the others differ from it
    from lectures.tinylm.data import Batches, split
    stream = Batches(split(), L.BATCH, L.MODEL.context, w.seeds[0])
    train_batches = [stream.next() for _ in range(max(w.grad_steps) + 1)]
    step = max(w.grad_steps)
    b = L.probe_batches(w, step, train_batches[step])
    assert torch.equal(b[0][0], train_batches[step][0])
    assert len({tuple(x.flatten().tolist()) for x, _y in b}) == w.probe_batches


def _sign(lec, a, b):
    # a's errors against b's, every probe batch, with scipy's binomial test
    from scipy import stats
    g = lec.probe.grads
    ea = np.array([x[a]["error"] for s in sorted(g) for x in g[s]])
    eb = np.array([x[b]["error"] for s in sorted(g) for x in g[s]])
    k = int((ea < eb).sum())
    return k, len(ea), stats.binomtest(k, len(ea)).pvalue, ea / eb


BATCH_PAIRS = [("FP16, no loss scaling", "FP16 + loss scaling"),
               ("FP8 blockwise, power-of-two scales", "FP8 blockwise (DeepSeek-V3)"),
               ("MXFP8, floor scales", "MXFP8, RCEIL scales"),
               ("MXFP4", "NVFP4, round-to-nearest"),
               ("MXFP4 (full recipe)", "NVFP4 (full recipe)")]


@pytest.mark.parametrize("a,b", BATCH_PAIRS)
def test_each_batch_verdict_follows_the_sign_test(lec, text, a, b):
    k, n, p, ratio = _sign(lec, a, b)
    c = L.paired_probe(lec.probe, a, b)
    assert (c["better"], c["n"]) == (k, n) and c["p"] == pytest.approx(p, rel=1e-12)
    assert (c["low"], c["median"], c["high"]) == pytest.approx(
        (ratio.min(), np.median(ratio), ratio.max()), rel=1e-12)
    v = L.batch_verdict(lec.probe, a, b)
    assert v in " ".join(text.split())
    assert ("beyond the batch-to-batch noise" in v) == (p < 0.05)


def test_fp4_table_pairs_each_rung_with_its_base(lec, text):
    rows = L.fp4_rows(lec.runs, lec.probe)
    assert [r[0] for r in rows] == L.FP4_ROWS
    for row in rows:
        base = L.FP4_BASE.get(row[0])
        g = lec.probe.grads
        e = [x[row[0]]["error"] for s in sorted(g) for x in g[s]]
        assert row[3] == f"{np.median(e):.2%}"
        if base is None:
            assert row[2] == row[4] == ""
            continue
        k, n, p, ratio = _sign(lec, row[0], base)
        assert row[4] == f"{k}/{n}, x{np.median(ratio):.2f}" + ("" if p < 0.05 else " ~")
    # the ladder's bases: each rung adds one technique to the row above it
    assert [L.FP4_BASE[x] for x in L.LADDER[1:]] == L.LADDER[:-1]
    # what each technique buys, in the text: the same count and median ratio
    flat = " ".join(text.split())
    for label in L.LADDER[1:]:
        k, n, p, ratio = _sign(lec, label, L.FP4_BASE[label])
        noise = "" if p < 0.05 else ", within noise"
        assert f"x{np.median(ratio):.2f} ({k} of {n} batches lower{noise})" in flat, label


def test_each_demo_reads_only_the_runs_it_waits_for(lec, text):
    # each demo printed from Runs holding only the labels DEMO_RUNS lists for it gives the
    # text it gives from all the runs (so printing it when those are done is safe)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        L.print_title(L.title(), L.intro(lec.runs.workload))
        for labels, print_demo in L.demos(lec.gemm, lec.fp8, lec.why, lec.probe):
            keep = lec.runs.results if labels is None else {k: lec.runs.results[k]
                                                            for k in labels}
            print_demo(L.Runs(lec.runs.workload, keep))
    assert buf.getvalue() == text


def test_streamed_lecture_prints_each_demo_when_its_runs_are_done(lec, text, monkeypatch,
                                                                   capsys):
    # run_all replayed from the fixture's runs, label by label in the lecture's order
    seen = {}

    def replay(w, jobs, fn, workers=2, progress=None, on_label=None, meanwhile=None):
        assert [label for label, _job in jobs] == [label for label, results in
                                                   lec.runs.results.items() for _r in results]
        meanwhile()
        runs = L.Runs(w, {})
        for label, results in lec.runs.results.items():
            runs.results[label] = results
            on_label(runs)
            seen[label] = capsys.readouterr().out
        return runs
    monkeypatch.setattr(L, "run_all", replay)
    monkeypatch.setattr(L, "probe_run", lambda w, device=None: lec.probe)
    capsys.readouterr()
    L.compute(lec.runs.workload, stream=True)
    assert "".join(seen.values()) == text           # the same bytes as show()
    assert text.startswith(seen["FP32"]) and "Demo" not in seen["FP32"]   # the title first
    first = {n: next(k for k, v in seen.items() if f"Demo {n}:" in v) for n in range(1, 7)}
    assert first == {1: "FP16 + loss scaling", 2: "FP8 current + spike",
                     3: "MXFP8, RCEIL scales", 4: "MXFP4 (full recipe)",
                     5: "MXFP4 (full recipe)", 6: "MXFP4 (full recipe)"}


def test_text_fits_and_is_complete(text):
    assert layout_problems(text) == []
    for n in range(1, 7):
        assert f"Demo {n}:" in text
    assert "nan" not in text.replace("nan ", "")


def test_chinese_text_has_the_same_numbers_and_no_english(lec, text):
    buf = io.StringIO()
    with language("zh"), contextlib.redirect_stdout(buf):
        L.show(lec)
    zh = buf.getvalue()
    assert number_differences(text, zh) == []
    assert english_runs(zh) == []
    assert layout_problems(zh) == []


# --------------------------------------------------------------------- the command line
def _run(*args):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, str(ROOT / "lectures/10_low_precision_training.py"),
                           *args], capture_output=True, text=True, env=env, timeout=120)


def test_help_and_bad_flags():
    r = _run("--help")
    assert r.returncode == 0 and all(f in r.stdout for f in ("--quick", "--workers", "--save"))
    r = _run("--no-such-flag")
    assert r.returncode == 2 and "--no-such-flag" in r.stderr
    r = _run("--workers", "0")
    assert r.returncode == 2 and "--workers" in r.stderr
    # a --save target that could not be written is refused before any training
    for target, why in ((ROOT, "is a directory"), (ROOT / "no-such-dir" / "r.json",
                                                   "does not exist")):
        r = _run("--save", str(target))
        assert r.returncode == 2 and "--save" in r.stderr and why in r.stderr, r.stderr
        assert r.stdout == ""


def test_progress_is_one_line_per_run_off_a_terminal(capsys, monkeypatch):
    """Each finished run's line says the seconds spent and, while runs remain, the seconds
    left (30 s for the first of 4 runs: about 90 s left; fake clock)."""
    from lectures.tinylm import runs

    class R:
        recipe, seed, final_val = "BF16", 1, 4.25
    clock = iter([100.0, 130.0, 220.0, 221.0, 222.0, 223.0])
    monkeypatch.setattr(runs.time, "monotonic", lambda: next(clock))
    update, close = L.progress(4)             # pytest's stderr is not a terminal
    update("BF16", R())
    update("BF16", R())
    close()
    assert capsys.readouterr().err.splitlines() == [
        "run 1/4: BF16, seed 1: validation 4.250 bits/byte (30 s, about 90 s left)",
        "run 2/4: BF16, seed 1: validation 4.250 bits/byte (120 s, about 120 s left)"]


def test_progress_in_a_notebook_keeps_times_out_of_the_stored_lines(monkeypatch):
    """A notebook stores stderr with its outputs (nbval compares it): no times there."""
    import io
    OutStream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    err = OutStream()
    monkeypatch.setattr(sys, "stderr", err)

    class R:
        recipe, seed, final_val = "BF16", 0, 4.5
    update, close = L.progress(2)
    update("BF16", R())
    close()
    assert err.getvalue() == "run 1/2: BF16, seed 0: validation 4.500 bits/byte\n"


def test_progress_is_a_tqdm_bar_on_a_terminal(monkeypatch):
    import tqdm.auto
    calls = []

    class Bar:
        def __init__(self, total, **kw):
            calls.append(("new", total))

        def update(self, n):
            calls.append(("update", n))

        def close(self):
            calls.append(("close",))
    monkeypatch.setattr(tqdm.auto, "tqdm", Bar)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    update, close = L.progress(3)
    update("BF16", None)
    close()
    assert calls == [("new", 3), ("update", 1), ("close",)]
