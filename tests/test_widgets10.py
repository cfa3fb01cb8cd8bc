"""Notebook 10's plots and widgets: the recipe builder by hand, the plots on a tiny workload,
the stored run (what the lecture printed, printed again from the saved data), and the
explorer's callback driven by setting widget values (no browser)."""

import contextlib
import importlib
import io
from dataclasses import replace

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import numfmt.torch.train as ntt  # noqa: E402
from console.i18n import language  # noqa: E402
from lectures import results  # noqa: E402
from lectures.tinylm import loop, runs as tinylm_runs  # noqa: E402
from lectures.widgets import lecture10 as W  # noqa: E402
from tests.test_results import assert_same  # noqa: E402

L = importlib.import_module("lectures.10_low_precision_training")
TINY = L.Workload(steps=4, seeds=(0, 1), eval_every=2, val_windows=4, probe_steps=2,
                  probe_batches=2,
                  spike_step=2)


def assert_labelled(fig):
    for ax in fig.get_axes():
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None


def test_custom_recipe_changes_only_what_was_asked():
    base = ntt.RECIPES["fp8_current"]
    assert W.custom_recipe("fp8_current").fprop == base.fprop
    r = W.custom_recipe("fp8_current", dy="e4m3")
    assert r.dgrad[0] == ntt.OperandSpec("e4m3", "tensor", "exact") == r.wgrad[0]
    assert r.fprop == base.fprop and r.dgrad[1] == base.dgrad[1]
    r = W.custom_recipe("fp8_current", w="bf16")
    assert r.fprop[1] == ntt.OperandSpec("bf16") == r.dgrad[1]
    r = W.custom_recipe("nvfp4", sr=False, rht=False)
    assert r.dgrad[0].mode == r.wgrad[0].mode == "nearest"
    assert not r.wgrad[0].rht and not r.wgrad[1].rht
    r = W.custom_recipe("fp8_current", x="e2m1")
    assert r.fprop[0] == ntt.OperandSpec("e2m1", (1, 16), "e4m3")
    with pytest.raises(ValueError, match="mode"):
        W.custom_recipe("bf16", sr=True)


def test_format_ranges_from_the_standards():
    assert W.format_range("FP16") == (2.0 ** -24, 2.0 ** -14, 65504.0)
    assert W.format_range("E4M3") == (2.0 ** -9, 2.0 ** -6, 448.0)
    assert W.format_range("E5M2") == (2.0 ** -16, 2.0 ** -14, 57344.0)


@pytest.fixture(scope="module")
def tiny_lecture():
    """The lecture on the tiny workload, run as the script runs it (each demo printed as its
    runs finish), and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        lec = L.compute(TINY, workers=1, stream=True)
    return lec, out.getvalue()


@pytest.fixture(scope="module")
def tiny(tiny_lecture):
    lec, _printed = tiny_lecture
    return lec.runs, lec.probe


def test_plots_are_labelled(tiny):
    runs, probe = tiny
    for fig in (W.plot_loss_curves(runs), W.plot_gradient_histogram(probe),
                W.plot_ablation(runs)):
        assert_labelled(fig)
    with pytest.raises(TypeError, match="run_all"):
        W.plot_ablation(probe)


# ------------------------------------------------------------------------------ the stored run
def _load(path):
    return results.load_results(path, loop, tinylm_runs, L)


def _shown(lec, lang="en") -> str:
    buf = io.StringIO()
    with language(lang), contextlib.redirect_stdout(buf):
        L.show(lec)
    return buf.getvalue()


def test_stored_run_prints_the_bytes_the_lecture_printed(tiny_lecture, tmp_path):
    lec, printed = tiny_lecture
    path = L.save(lec, tmp_path / "lecture10.json")
    back, about = _load(path)
    assert about["command"] == L.SCRIPT and about["workload"]["steps"] == TINY.steps
    stored = back["lecture"]
    assert_same(stored, L.stored_lecture(lec))          # every type round-trips
    assert stored.probe.operands == {}
    assert {k for b in stored.probe.grads[1] for g in b.values() for k in g} == {"error"}
    assert printed.count("Demo ") >= 6 and _shown(stored) == printed
    assert _shown(stored, "zh") == _shown(lec, "zh")     # Chinese, from the catalogs
    assert "演示 6：" in _shown(stored, "zh")


def test_stored_histogram_draws_what_the_values_draw(tiny):
    import matplotlib.pyplot as plt
    _runs, probe = tiny
    dy = torch.cat([o["dy"].flatten() for o in probe.operands.values()])
    a = dy[dy != 0].abs().double()
    h = probe.dy_histogram
    lo, hi = np.log2(float(a.min())), np.log2(float(a.max()))
    assert h.counts.sum() == len(a) and len(h.counts) == 120
    assert h.edges[0] == lo and h.edges[-1] == hi
    # each value's bin from the definition: 120 equal widths from the smallest to the largest
    k = ((torch.log2(a) - lo) / (hi - lo) * 120).floor().clamp(max=119).long()
    np.testing.assert_array_equal(h.counts, torch.bincount(k, minlength=120).numpy())
    # the plot's bars, drawn from the counts, are the bars matplotlib draws from the values
    fig = W.plot_gradient_histogram(L.stored_lecture(L.Lecture(*tiny, None, None, None)).probe)
    ax = plt.figure().subplots()
    _n, _bins, bars = ax.hist(np.log2(a.numpy()), bins=120)
    drawn = fig.axes[0].patches[:120]
    assert [r.get_height() for r in drawn] == [r.get_height() for r in bars]
    assert [r.get_x() for r in drawn] == [r.get_x() for r in bars]
    plt.close("all")


def test_save_option_and_what_load_stored_refuses(tiny_lecture, tmp_path, monkeypatch):
    lec, _printed = tiny_lecture
    monkeypatch.setattr(L, "compute", lambda w, workers=2, stream=False: lec)
    quick, other, full = (tmp_path / f"{n}.json" for n in ("quick", "other", "full"))
    L.main(["--quick", "--save", str(quick)])
    assert _load(quick)[1]["command"] == L.SCRIPT + " --quick"
    with pytest.raises(ValueError, match="not a full run"):
        W.load_stored(quick)
    L.main(["--save", str(other)])                  # the full command, another workload
    with pytest.raises(ValueError, match="full one"):
        W.load_stored(other)
    L.save(replace(lec, runs=L.Runs(L.FULL, lec.runs.results)), full)
    assert W.load_stored(full).runs.workload == L.FULL


def test_the_stored_full_run():
    lec = W.load_stored()
    assert W.STORED.stat().st_size < 1_000_000
    assert lec.runs.workload == L.FULL and lec.probe.operands == {}
    assert set(lec.runs.results) == set(L.recipes())
    text = _shown(lec)
    assert all(f"Demo {k}:" in text for k in range(1, 7))
    for fig in (W.plot_loss_curves(lec.runs), W.plot_gradient_histogram(lec.probe),
                W.plot_ablation(lec.runs)):
        assert_labelled(fig)


def test_explorer_trains_what_the_controls_say(monkeypatch):
    monkeypatch.setattr(W, "EXPLORER_STEPS", 2)
    e = W.recipe_explorer()
    assert e.state["error"] is None and e.state["recipe"].fprop == \
        ntt.RECIPES["fp8_current"].fprop
    e.controls["dy"].value = "e4m3"
    assert e.state["recipe"].wgrad[0].fmt == "e4m3"
    assert len(e.state["run"].train_loss) == W.EXPLORER_STEPS
    # the probe: dW error against FP32 on one batch, repeatable, and zero for FP32 itself
    err = e.state["dw_error"]
    assert 0 < err["bf16"] < err["recipe"] and W.gradient_error(e.state["recipe"]) == err
    assert W.gradient_error(ntt.RECIPES["fp32"])["recipe"] == 0.0
    assert W.gradient_error(ntt.RECIPES["fp8_delayed"]) is None
    e.controls["base"].value = "bf16"
    e.controls["dy"].value = "base"
    e.controls["sr"].value = "on"
    assert e.state["error"] is not None and "mode" in e.state["error"]


def test_plots_in_chinese(tiny):
    from matplotlib.text import Text

    from console.i18n import language
    from lectures.widgets.fonts import use_language_fonts
    from text_checks import english_runs
    runs, probe = tiny

    def cjk(text):
        return any("\u4e00" <= ch <= "\u9fff" for ch in text)
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()   # Noto Sans SC, as a Chinese notebook draws
        figs = [W.plot_loss_curves(runs), W.plot_gradient_histogram(probe),
                W.plot_ablation(runs)]
    for fig in figs:
        for ax in fig.get_axes():
            assert cjk(ax.get_title()) and cjk(ax.get_ylabel()), ax.get_title()
        drawn = "\n".join(t.get_text() for t in fig.findobj(Text) if t.get_text())
        assert english_runs(drawn) == [], drawn
    ax = figs[2].axes[0]
    assert cjk(ax.get_xlabel())
    assert any(cjk(t.get_text()) for t in ax.get_xticklabels())   # the recipes' names


def test_recipe_names_in_chinese():
    """The explorer's recipe menu shows the lecture's names, translated; the values stay the
    keys of RECIPES."""
    from console.i18n import language
    assert set(W.RECIPE_NAMES) == set(ntt.RECIPES)
    with language("zh"):
        options = W.recipe_explorer().controls["base"].options
    assert [v for _, v in options] == list(ntt.RECIPES)
    names = dict((v, k) for k, v in options)
    assert names["fp8_current"] == "FP8 即时缩放" and names["fp8_blockwise"] == "FP8 分块（DeepSeek-V3）"
    assert not any("_" in k for k, _ in options)


def test_invalid_combinations_explained_in_chinese():
    """Each ValueError custom_recipe can raise (SR on a plain cast; RHT on one wgrad operand)
    gets the explorer's own sentence, Chinese in Chinese; the state keeps numfmt's message."""
    from console.i18n import language
    from text_checks import english_runs
    errors = []
    for args in (("bf16", None, None, None, True, None),      # SR on dy, a BF16 cast
                 ("nvfp4", None, None, "bf16", None, None)):  # RHT left on x alone
        with pytest.raises(ValueError) as err:
            W.custom_recipe(*args)
        errors.append(str(err.value))
    assert "mode" in errors[0] and "rht" in errors[1]
    for message in errors:
        assert W.invalid_reason(message) != message           # recognized, English sentence
        with language("zh"):
            reason = W.invalid_reason(message)
        assert any("\u4e00" <= ch <= "\u9fff" for ch in reason), reason
        assert english_runs(reason) == [], reason
    with language("zh"):
        assert "BF16" in W.invalid_reason(errors[0])          # the format it names
        assert W.invalid_reason("some other message") == "some other message"


def test_operand_labels_in_chinese():
    """An operand's label: describe()'s text in English; in Chinese its words translated, the
    format names, block shapes and abbreviations kept."""
    from console.i18n import language
    delayed = ntt.RECIPES["fp8_delayed"].fprop[0]
    nvfp4_dy = ntt.RECIPES["nvfp4"].wgrad[0]
    assert W.spec_label(delayed) == "E4M3 tensor exact delayed"     # as describe() reads
    assert W.spec_label(nvfp4_dy) == "E2M1 1x16 e4m3 SR RHT"
    with language("zh"):
        assert W.spec_label(delayed) == "E4M3 逐张量 精确 延迟缩放"
        assert W.spec_label(nvfp4_dy) == "E2M1 1x16 e4m3 SR RHT"
