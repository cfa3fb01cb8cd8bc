"""Every quantitative claim lecture 09 prints, computed by its own demo functions and asserted.

Demo 1's errors are recomputed here by hand (INT4 per row, symmetric, from intquant's
definition) and its per-channel error shares through a second formula; the real-model demos
(marked slow; they need the model package) are checked against the orderings the lecture
states, and GPTQ's first layer against numfmt.ptq.gptq fed with the harness's own Hessian.
"""

import contextlib
import io

import numpy as np
import pytest

from console import display_width
from numfmt.ptq import gptq, hessian
from lectures import lecture

L = lecture(9)


def printed(show, *args) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        show(*args)
    return buf.getvalue()


def one_line(text: str) -> str:
    """The printed text with its line wrapping undone (observations wrap at 100 columns)."""
    return " ".join(text.split())


def assert_fits(text: str) -> None:
    assert all(display_width(line) <= 100 for line in text.splitlines())


# ------------------------------------------------------------------------------- demo 1
@pytest.fixture(scope="module")
def d1():
    return L.demo1_output_error()


def int4_per_row(w):
    s = np.abs(w).max(axis=1, keepdims=True) / 7
    return np.clip(np.rint(w / s), -7, 7) * s


def test_demo1_rtn_errors_by_hand(d1):
    d = L.synthetic_layer(0)
    w, xe, xc = d["w"], d["x_eval"], d["x_calib"]
    q = int4_per_row(w)
    name, werr, ocal, oev = d1.rows[0]
    assert name.startswith("RTN")
    np.testing.assert_allclose(werr, np.linalg.norm(q - w) / np.linalg.norm(w), rtol=1e-12)
    np.testing.assert_allclose(oev, np.linalg.norm(xe @ (q - w).T) / np.linalg.norm(xe @ w.T),
                               rtol=1e-12)
    np.testing.assert_allclose(ocal, np.linalg.norm(xc @ (q - w).T) / np.linalg.norm(xc @ w.T),
                               rtol=1e-12)


def test_demo1_trace_identity(d1):
    # both sides sum the same ~3e5 products in another order: float64 agrees to ~n * 2^-53
    assert d1.identity["rel_diff"] < L.IDENTITY_BOUND == 1e-12    # the printed bound holds
    d = L.synthetic_layer(0)
    e = int4_per_row(d["w"]) - d["w"]
    np.testing.assert_allclose(d1.identity["direct"],
                               np.linalg.norm(d["x_eval"] @ e.T) ** 2 / len(d["x_eval"]),
                               rtol=1e-12)


def test_demo1_outlier_share_second_formula(d1):
    d = L.synthetic_layer(0)
    x, e = d["x_eval"], int4_per_row(d["w"]) - d["w"]
    # channel j's share of mean ||E x||^2 = mean_t x_tj * (E^T E x_t)_j
    per = np.mean(x * ((x @ e.T) @ e), axis=0)
    np.testing.assert_allclose(d1.outlier_share, per[d["outliers"]].sum() / per.sum(), rtol=1e-10)
    assert d1.outlier_share > 0.5            # printed: the 8 channels carry most of the error
    assert d1.outlier_count == 8


def test_demo1_gptq_cuts_output_error_while_weight_error_rises(d1):
    rtn_w, rtn_o = d1.errors["RTN (round to nearest)"]
    for method in ("GPTQ", "GPTQ, act-order"):
        g_w, g_o = d1.errors[method]
        assert g_o < 0.5 * rtn_o and g_w > rtn_w
    # the hand measurement on such a layer: ~27 % -> ~10 %
    assert 0.25 < rtn_o < 0.30 and 0.08 < d1.errors["GPTQ"][1] < 0.12


def test_demo1_iid_inputs(d1):
    rtn, g1k, g8k = d1.iid_rows
    assert g1k[2] < rtn[2]                   # fits its calibration tokens
    assert g1k[3] > rtn[3] and g8k[3] > rtn[3]   # but not the held-out ones
    assert g8k[3] < g1k[3]                   # more tokens, less overfitting


def test_demo1_gptq_row_is_numfmt_gptq(d1):
    d = L.synthetic_layer(0)
    g = gptq(d["w"], hessian(d["x_calib"]), 4).weight
    assert d1.rows[1][3] == L.output_error(g, d["w"], d["x_eval"])


def test_synthetic_lecture_output_is_deterministic_and_fits():
    outs = []
    for _ in range(2):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            L.main(["--synthetic"])
        outs.append(buf.getvalue())
    assert outs[0] == outs[1]
    assert_fits(outs[0])
    assert "Demo 1" in outs[0] and "Demo 2" not in outs[0]


def test_hadamard_factors_are_the_kronecker_form():
    from numfmt.ptq import fuse_rotation, hadamard
    torch = pytest.importorskip("torch")
    for n, (p, q) in L.HADAMARD_FACTORS.items():
        np.testing.assert_array_equal(hadamard(n, False),
                                      np.kron(hadamard(p, False), hadamard(q, False)))
        x = torch.randn(3, n, dtype=torch.float64)
        np.testing.assert_allclose(L.rotate(x, n).numpy(), x.numpy() @ hadamard(n), atol=1e-12)
        np.testing.assert_allclose(L.rotate(x, n, transpose=True).numpy(),
                                   x.numpy() @ hadamard(n).T, atol=1e-12)
        # W4A4 fuses its weights through rotate: W·H as numfmt.ptq.fuse_rotation gives it
        np.testing.assert_allclose(L.rotate(x, n).numpy(), fuse_rotation(x.numpy(), hadamard(n)),
                                   atol=1e-12)


# ------------------------------------------------------------------------ the real model
@pytest.fixture(scope="module")
def model(checkpoint):
    """Lecture 09's model bundle around conftest's once-per-session checkpoint (or its skip),
    on the lecture's --quick workload: the same code on 2 windows of 256 tokens for evaluation
    and calibration, and the first two weight settings (INT4 g128, INT3 g128)."""
    return L.load_model(checkpoint, L.QUICK)


@pytest.mark.long
def test_batched_perplexity_equals_one_window_at_a_time(model):
    """L.ppl runs all windows in one forward pass of the float64 model; the number is the one
    a window-by-window run gives, also with a per-tensor activation quantizer (NVFP4's FP32
    scale must not span two windows: the hooks quantize each window alone)."""
    import torch
    from lectures import llm
    lm, windows = model.model, model.eval_windows
    # the demos run a float64 copy of the checkpoint's model, whose float32 weights it holds
    # exactly; the shared checkpoint stays float32
    assert {p.dtype for p in lm.parameters()} == {torch.float64}
    assert {p.dtype for p in model.ck.model.parameters()} == {torch.float32}
    for a, b in zip(lm.parameters(), model.ck.model.parameters()):
        assert torch.equal(a, b.double())
    assert L.ppl(model) == pytest.approx(llm.perplexity(lm, windows, batch_size=1), rel=1e-6)
    nvfp4 = llm.ActFormat("NVFP4", "nvfp4")
    with llm.quantized_inputs(lm, nvfp4):
        one = llm.perplexity(lm, windows, batch_size=1)
    assert L.ppl(model, inputs=nvfp4) == pytest.approx(one, rel=1e-6)


@pytest.fixture(scope="module")
def d2(model):
    return L.demo2_gptq(model)


@pytest.fixture(scope="module")
def d3(model, d2):
    return L.demo3_awq(model, d2)


@pytest.fixture(scope="module")
def d4(model):
    return L.demo4_activations(model)


@pytest.fixture(scope="module")
def d5(model, d4):
    return L.demo5_calibration(model, activations=d4)


@pytest.mark.long
def test_demo2_gptq_beats_rtn_more_at_three_bits(d2):
    gains = {}
    settings = L.QUICK.settings
    assert (4, 128) in settings and (3, 128) in settings
    for bits, group in settings:
        rtn = d2.ppl[("RTN", bits, group)]
        # the probe (act-order, float-model Hessians): 20.3 -> 17.4, 78.1 -> 42.8,
        # 31.7 -> 24.1; sequential calibration must not lose that
        assert d2.ppl[("GPTQ-act", bits, group)] < rtn
        gains[(bits, group)] = rtn - d2.ppl[("GPTQ-act", bits, group)]
    assert gains[(3, 128)] > gains[(4, 128)]       # printed: the gain is largest at 3 bits
    assert max(gains, key=gains.get)[0] == 3
    c = L.gptq_counts(d2)
    assert c["act"] == len(settings)
    assert c["plain"] == sum(d2.ppl[("GPTQ", b, g)] < d2.ppl[("RTN", b, g)]
                             for b, g in settings)
    assert all(d2.ppl[k] > d2.reference for k in d2.ppl)
    assert_fits(printed(L.show_demo2, d2))


@pytest.mark.long
def test_demo2_first_layer_is_gptq_on_the_harness_hessian(model, d2):
    # Layer 0 sees the float model's inputs in any calibration, so its GPTQ weights must be
    # numfmt.ptq.gptq on the Hessian the harness accumulates (2 * sum x x^T / n): equal but
    # for rounding flips where the two float64 sums of 2048 terms differ in the last bits.
    from lectures import llm
    names = ["model.layers.0.self_attn.q_proj", "model.layers.0.mlp.down_proj"]
    caps = llm.capture_linear_inputs(model.model, model.calib_windows, names, hessian=True)
    w = L.float_weights(model)
    for n in names:
        h = 2 * caps[n].hessian / caps[n].n_tokens
        if n.endswith("q_proj"):   # q, k, v were quantized as one stacked matrix
            stacked = np.concatenate([w[n.replace("q_proj", k)] for k in ("q_proj", "k_proj",
                                                                           "v_proj")])
            expect = gptq(stacked, h, 4, 128, False, True, partial_last_group=True).weight
            expect = expect[:w[n].shape[0]]
        else:
            expect = gptq(w[n], h, 4, 128, False, True, partial_last_group=True).weight
        got = d2.weights[("GPTQ-act", 4, 128)][n]
        assert np.mean(np.isclose(got, expect, rtol=1e-9, atol=0)) > 0.999


@pytest.mark.long
def test_demo3_awq_beats_rtn(d3):
    for s, rtn, awq, _ in d3.rows:
        assert awq < rtn, s
    for al in d3.alphas.values():
        assert all(0.0 <= a < 1.0 for a in al) and len(al) == 4 * 30
    assert_fits(printed(L.show_demo3, d3))


@pytest.mark.long
def test_demo4_claims(model, d4):
    assert min(v for a, v in d4.smooth_ppl.items() if a is not None) < d4.smooth_ppl[None]
    assert d4.rotation_ppl[True] < d4.rotation_ppl[False]
    o = d4.outlier
    assert o["after_max"] < o["before_max"]
    assert o["after_max"] / o["after_median"] < o["before_max"] / o["before_median"]
    for name, share, err, plain in d4.int8_rows:
        if share > 0:
            assert err < plain, name           # printed as "n of n"
        else:                                  # no float channel: plain INT8 exactly
            assert err == plain, name
        assert 0.0 <= share < 0.5              # measured: at most 23% (layer 29 down_proj)
    # the share of float channels, recomputed from the harness's own absmax
    from lectures import llm
    caps = llm.capture_linear_inputs(model.model, model.calib_windows)
    over = sum(int((c.absmax > 6.0).sum()) for c in caps.values())
    total = sum(c.absmax.size for c in caps.values())
    assert d4.int8_float_share == over / total
    assert_fits(printed(L.show_demo4, d4))


@pytest.mark.long
def test_demo5_claims(d5):
    static = {k: d5.ppl[k] for k in L.CALIBRATORS}
    # printed: the calibrator that clips hardest is the worst (massive activations are signal)
    hardest = min(d5.clip_ratio, key=d5.clip_ratio.get)
    assert max(static, key=static.get) == hardest
    assert d5.tokens == 512                    # 2 windows of 256 in the quick workload
    assert d5.clip_ratio["min-max"] == 1.0
    assert all(0.0 < r <= 1.0 for r in d5.clip_ratio.values())
    assert_fits(printed(L.show_demo5, d5))


@pytest.mark.long
def test_demo5_reuses_demo4s_w8a8_exactly(model, d4, d5):
    # demo 4's W8A8 without smoothing (s = 1) is demo 5's dynamic per-tensor model: measured
    # here the way demo 5 measured it on its own
    weights = L.float_weights(model)
    wq = {n: L.quantize_int(w, 8, granularity="channel").values for n, w in weights.items()}
    assert L.ppl(model, wq, lambda x, n: L._per_tensor(x)) == d5.ppl["dynamic per-tensor"]
    assert d5.ppl["dynamic per-tensor"] == d4.smooth_ppl[None]


@pytest.mark.long
def test_demo6_summary(model, d2, d3):
    rows = L.demo6_summary(model, d2, d3)
    assert len(rows) == 1 + 4 * len(model.workload.settings)
    # bits per weight by hand: 4 + 20 / 128 on 1536-input linears, 4 groups + 1 of 64 on 576
    bpw = float(next(r for r in rows if r[0] == "RTN INT4 g128")[1])
    assert 4 + 20 / 128 < bpw < 4 + 5 * 20 / 576
    assert_fits(printed(L.show_demo6, rows))


@pytest.mark.long
def test_saved_results_print_the_same(tmp_path, model, d2, d3, d4, d5):
    """What --save writes (the form a notebook's stored run takes) prints, demo by demo, what
    the run printed."""
    import dataclasses

    from lectures import llm
    results = {"demo2": dataclasses.replace(d2, weights={}), "demo3": d3, "demo4": d4,
               "demo5": d5, "demo6": L.demo6_summary(model, d2, d3)}
    back, _ = llm.load_results(llm.save_results(tmp_path / "r.json", results), L)
    for name, r in results.items():
        show = getattr(L, "show_" + name)
        assert printed(show, back[name]) == printed(show, r), name


def test_stored_full_run_prints_the_same_after_a_round_trip(tmp_path):
    """Notebook 09's stored run (a full run's results, lectures/widgets/lecture09_stored.json)
    holds every demo of the full workload and prints, demo by demo, the same text after being
    saved and read back: the notebook's stored cells need no model and no rerun."""
    import dataclasses
    import json

    from lectures import llm
    from lectures.widgets import lecture09 as W
    stored, about = llm.load_results(W.STORED, L)
    # about is plain JSON: the workload's tuples come back as lists
    assert about["workload"] == json.loads(json.dumps(dataclasses.asdict(L.FULL)))
    assert stored["demo2"].rows and [row[0] for row in stored["demo2"].rows] == [
        f"INT{b} g{g}" for b, g in L.FULL.settings]
    assert stored["demo2"].tokens == (L.FULL.n_calib * L.FULL.seq_len,
                                      L.FULL.n_eval * L.FULL.seq_len)
    results = {k: stored[k] for k in W.STORED_DEMOS}
    back, _ = llm.load_results(llm.save_results(tmp_path / "r.json", results, about), L)
    for name, r in results.items():
        show = getattr(L, "show_" + name)
        text = printed(show, r)
        assert printed(show, back[name]) == text and text.strip(), name
        assert_fits(text)


# ----------------------------------------------------------------------- the text in Chinese
# Every demo's result (the fixtures above, nothing computed again) printed in English and in
# Chinese: the same numbers, no English prose left, 100 columns and aligned tables, the same
# text twice. Row labels are data the demos build; those printed as they are:
CODE_LABELS = {"GPTQ", "MSE", "min-max"}


def untranslated_labels(labels) -> list:
    from console.i18n import language
    with language("zh"):
        return [s for s in labels if s not in CODE_LABELS and L.label(s) == s]


def assert_chinese(show, result, allowed=(), layout=True) -> None:
    from text_checks import english_runs, layout_problems, number_differences, render
    en, zh = render(show, result, "en"), render(show, result, "zh")
    assert zh != en and "演示" in zh
    assert number_differences(en, zh) == []
    assert english_runs(zh, allowed) == []
    if layout:
        assert layout_problems(zh) == [] and layout_problems(en) == []
    assert render(show, result, "zh") == zh


def test_title_and_demo1_in_chinese(d1, monkeypatch):
    monkeypatch.setattr(L, "demo1_output_error", lambda: d1)      # main() prints the fixture's
    assert_chinese(lambda _: L.main(["--synthetic"]), None)
    assert untranslated_labels([row[0] for row in d1.rows + d1.iid_rows]) == []


def test_labels_with_numbers_round_trip():
    """label() matches a numbered label whole: English comes back unchanged, Chinese keeps the
    numbers; an unknown label is printed as it is."""
    from console.i18n import language
    from text_checks import number_differences
    labels = ["GPTQ, 8192 calibration tokens", "layer 29 down_proj", "256 tokens, 10 α × 5 clips",
              "2048 tokens, Hessians, sequential", "2048 tokens, as GPTQ, by diag H"]
    with language("en"):
        assert [L.label(s) for s in labels] == labels
    with language("zh"):
        zh = [L.label(s) for s in labels]
        assert L.label("GPTQ, 8192 calibration tokens, and more") == (
            "GPTQ, 8192 calibration tokens, and more")
    assert all(z != s and number_differences(s, z) == [] for s, z in zip(labels, zh))


def test_skip_messages_in_chinese(monkeypatch, tmp_path):
    # the harness's message is one line of print(), in English too as long as its path
    llm = pytest.importorskip("lectures.llm")
    monkeypatch.setattr(L, "load_model",
                        lambda **kw: llm.verify_gguf(tmp_path / "missing.gguf"))
    assert_chinese(lambda _: L.real_model_demos(), None, layout=False)


@pytest.fixture(scope="module")
def d6(model, d2, d3):
    return L.demo6_summary(model, d2, d3)


@pytest.mark.long
@pytest.mark.parametrize("demo", [2, 3, 4, 5, 6])
def test_real_model_demo_in_chinese(request, demo):
    assert_chinese(getattr(L, f"show_demo{demo}"), request.getfixturevalue(f"d{demo}"))


@pytest.mark.long
def test_real_model_row_labels_are_translated(d4, d5, d6):
    labels = ([row[0] for row in d4.smooth_rows if row[0] == "none"] + [d4.rotation_rows[1][0]]
              + [row[0] for row in d4.int8_rows] + [row[0] for row in d5.rows]
              + [d6[0][0]] + [row[3] for row in d6[1:]])
    assert untranslated_labels(labels) == []


# ---------------------------------------------------------------------------------------------
# Noise, attribution and storage claims of the real-model demos
# ---------------------------------------------------------------------------------------------
def _t_interval(nll_a, nll_b):
    """exp of the 95% Student-t interval of the mean paired NLL difference (scipy's t)."""
    stats = pytest.importorskip("scipy.stats")
    d = np.asarray(nll_b) - np.asarray(nll_a)
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return np.exp(d.mean() - half), np.exp(d.mean() + half)


@pytest.mark.long
def test_demo2_counts_beyond_noise_and_prints_act_orders_interval(d2):
    from lectures import llm
    c = L.gptq_counts(d2)
    settings = L.QUICK.settings
    for key, (a, b) in {"plain_sure": ("RTN", "GPTQ"), "act_sure": ("RTN", "GPTQ-act"),
                        "act_better_sure": ("GPTQ", "GPTQ-act")}.items():
        sure = 0
        for bits, group in settings:
            lo, hi = _t_interval(d2.nll[(a, bits, group)], d2.nll[(b, bits, group)])
            sure += d2.ppl[(b, bits, group)] < d2.ppl[(a, bits, group)] and not lo <= 1 <= hi
        assert c[key] == sure
    for row, (bits, group) in zip(d2.rows, settings):
        p = llm.paired_ratio(d2.nll[("RTN", bits, group)], d2.nll[("GPTQ-act", bits, group)])
        assert row[5] == p.percent()
        assert (p.low, p.high) == pytest.approx(
            _t_interval(d2.nll[("RTN", bits, group)], d2.nll[("GPTQ-act", bits, group)]),
            rel=1e-3)
    out = printed(L.show_demo2, d2)
    assert "IST-DASLab/gptq" in out and "section 3" in out and "section 4" not in out


@pytest.mark.long
def test_act_order_g_idx_costs_0_045_bits_per_weight(model, d2, d6):
    # one decoder layer of SmolLM2-135M: q, o 576 x 576; k, v 192 x 576; gate, up 1536 x 576;
    # down 576 x 1536: 3,538,944 weights and 6 x 576 + 1536 input columns of 32 bits each
    per_layer = 2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576
    assert per_layer == 3_538_944
    assert d2.g_idx_bits == pytest.approx(32 * (6 * 576 + 1536) / per_layer, rel=1e-12)
    assert f"{d2.g_idx_bits:.3f}" == "0.045"
    bits = {row[0]: float(row[1]) for row in d6[1:]}
    for b, g in L.QUICK.settings:
        assert bits[f"GPTQ-act INT{b} g{g}"] == pytest.approx(
            bits[f"GPTQ INT{b} g{g}"] + 0.045, abs=1.5e-3)


@pytest.mark.long
def test_demo3_awq_and_gptq_calibrate_on_the_same_tokens_and_print_both(model, d3):
    n = model.calib_windows.size
    assert n == 512 and d3.tokens == (n, n)              # 2 windows of 256 in --quick
    out = printed(L.show_demo3, d3)
    assert f"{n} tokens for AWQ's search, {n} for GPTQ's Hessians" in out
    assert f"{n} tokens per layer group" in out and f"over {n}," in out
    assert "on the same calibration tokens" in out


@pytest.mark.long
def test_out_of_domain_rows_follow_their_intervals(model, d2, d3):
    from lectures import llm
    assert model.ood_windows.shape == model.calib_windows.shape
    ood = llm.ood_calibration_windows(llm.ood_tokens(model.ck.tokenizer), *model.ood_windows.shape)
    np.testing.assert_array_equal(model.ood_windows, ood)
    bits, group = d3.ood_setting
    assert (bits, group) == L.QUICK.settings[-1]
    # in-domain GPTQ is demo 2's own measurement, not a second calibration
    assert np.array_equal(d3.nll[("GPTQ-act", bits, group)], d2.nll[("GPTQ-act", bits, group)])
    rows = L.ood_rows(d3)
    assert [r[0] for r in rows] == ["AWQ", "GPTQ act-order"]
    out = one_line(printed(L.show_demo3, d3))
    for (name, inside, outside, p), key in zip(rows, ("AWQ", "GPTQ-act")):
        a, b = d3.nll[(key, bits, group)], d3.nll[(f"{key}-ood", bits, group)]
        assert inside == pytest.approx(np.exp(a.mean()), rel=1e-12)
        assert outside == pytest.approx(np.exp(b.mean()), rel=1e-12)
        lo, hi = _t_interval(a, b)
        assert (p.low, p.high) == pytest.approx((lo, hi), rel=1e-3)
        within = lo <= 1 <= hi
        assert f"{name} {inside:.2f} -> {outside:.2f} ({p.percent()}, " + (
            "within noise" if within else "beyond noise") + ")" in out
    if all(r[3].within_noise for r in rows):
        assert "Neither change is beyond noise" in out
    assert "argparse.py" in out and "(out-of-domain)" in out


@pytest.mark.long
def test_act_order_static_groups_separate_order_from_regrouping(d2):
    bits, group = d2.order_setting
    assert (bits, group) == L.QUICK.settings[-1]
    plain, static, act = (d2.nll[(k, bits, group)] for k in ("GPTQ", "GPTQ-static", "GPTQ-act"))
    assert d2.ppl[("GPTQ-static", bits, group)] == pytest.approx(np.exp(static.mean()), rel=1e-12)
    out = one_line(printed(L.show_demo2, d2))
    for a, b in ((plain, static), (static, act)):
        from lectures import llm
        p = llm.paired_ratio(a, b)
        lo, hi = _t_interval(a, b)
        assert (p.low, p.high) == pytest.approx((lo, hi), rel=1e-3)
        assert f"({p.percent()}, {'within noise' if lo <= 1 <= hi else 'beyond noise'})" in out
    assert "--static-groups" in out and f"INT{bits} g{group}:" in out


def test_static_groups_keep_g_idx_in_column_order():
    # what the printed "g_idx is column // group" rests on, on a layer with a skewed Hessian
    rng = np.random.default_rng(1)
    w, x = rng.standard_normal((8, 80)), rng.standard_normal((400, 80)) * np.linspace(0.1, 3, 80)
    r = gptq(w, hessian(x), 3, 32, symmetric=False, act_order=True, static_groups=True,
             partial_last_group=True)
    np.testing.assert_array_equal(r.g_idx, np.arange(80) // 32)
    assert not np.array_equal(r.perm, np.arange(80))     # the order did change
    assert L.gptq_quantizer(3, 32, True, True)(w, x).tolist() == r.weight.tolist()


def test_rotated_gptq_undoes_its_rotation_and_is_gptq_on_the_rotated_layer():
    from numfmt.ptq import hadamard
    rng = np.random.default_rng(2)
    w, x = rng.standard_normal((16, 576)) * 0.02, rng.standard_normal((700, 576))
    h = hadamard(576)
    got = L.rotated_gptq(4, 32)(w, x)
    expect = gptq(w @ h, hessian(x @ h), 4, 32, symmetric=True).weight @ h.T
    np.testing.assert_allclose(got, expect, atol=1e-12)
    # at 16 bits the rounding is almost nothing: the weight comes back in the original basis
    # (GPTQ's updates move it by a few 16-bit steps, 2 max|W·H| / 65535 each)
    np.testing.assert_allclose(L.rotated_gptq(16, 32)(w, x), w, atol=1e-4 * np.abs(w).max())
    assert np.abs(L.rotated_gptq(4, 32)(w, x) - w).max() > 1e-2 * np.abs(w).max()


@pytest.mark.long
def test_rotation_with_gptq_row_follows_its_interval(d4):
    from lectures import llm
    a, b = d4.rotation_nll[True], d4.rotation_nll["GPTQ"]
    p = llm.paired_ratio(a, b)
    lo, hi = _t_interval(a, b)
    assert d4.rotation_ppl["GPTQ"] == pytest.approx(np.exp(b.mean()), rel=1e-12)
    out = one_line(printed(L.show_demo4, d4))
    assert (f"{d4.rotation_ppl[True]:.2f} -> {d4.rotation_ppl['GPTQ']:.2f} ({p.percent()}, "
            + ("within noise" if lo <= 1 <= hi else "beyond noise") + ")") in out
    assert d4.rotation_rows[1] == ["W4A4 INT4 g32, GPTQ weights", None, d4.rotation_ppl["GPTQ"]]


@pytest.mark.long
def test_smoothquant_and_rotation_text_follow_the_intervals(d4, d5):
    from lectures import llm
    out = printed(L.show_demo4, d4)
    rotation = llm.paired_ratio(d4.rotation_nll[False], d4.rotation_nll[True])
    assert f"{rotation.percent()}, {L.verdict(rotation)}" in out
    assert "QuaRot's idea" in out and "not its recipe" in out
    alpha, p, nll = d5.smoothquant
    assert p == min(v for a, v in d4.smooth_ppl.items() if a is not None)
    assert np.array_equal(nll, d4.smooth_nll[alpha])
    assert np.array_equal(d5.nll["dynamic per-tensor"], d4.smooth_nll[None])
    assert "leaves unsmoothed" in printed(L.show_demo5, d5)


def test_kl_uses_tensorrts_2048_bins(monkeypatch):
    seen = {}
    monkeypatch.setattr(L, "calibrate_kl", lambda x, bits, bins: seen.setdefault("bins", bins))
    calibrate, threaded = L.CALIBRATORS["KL (entropy)"]
    calibrate(np.ones(4))
    assert seen["bins"] == 2048 and not threaded


def test_counted_logs_each_perplexity_when_stderr_is_a_file(capsys):
    """Off a terminal (pytest's stderr), a demo run through ``counted`` writes one line per
    perplexity it computes, and leaves the model without a log afterwards."""
    import types
    m = types.SimpleNamespace(progress=None)

    def demo(m, k, twice=False):
        for _ in range(k * (2 if twice else 1)):
            m.progress.update(1)
        return "done"

    assert L.counted(m, 3, demo, 2, twice=True) == "done"
    lines = capsys.readouterr().err.splitlines()
    assert [line.split(" (")[0] for line in lines] == [f"Demo 3: perplexities: {i}"
                                                       for i in range(1, 5)]
    assert m.progress is None


def test_loading_the_model_is_announced_on_stderr(monkeypatch, tmp_path, capsys):
    """Before the minutes of loading, a log gets a line (stdout stays the lecture's)."""
    llm = pytest.importorskip("lectures.llm")
    monkeypatch.setattr(L, "load_model",
                        lambda **kw: llm.verify_gguf(tmp_path / "missing.gguf"))
    L.real_model_demos()
    out, err = capsys.readouterr()
    assert err == "Demos 2-6: loading SmolLM2-135M and its reference perplexity\n"
    assert "reference perplexity" not in out
