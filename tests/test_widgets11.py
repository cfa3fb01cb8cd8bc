"""Notebook 11's plots and explorer, on a made-up Results and on the stored run."""

import numpy as np
import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from lecture11_results import fake_results  # noqa: E402
from lectures.widgets import lecture11 as W  # noqa: E402

L = W.L


def test_plots_draw_every_method():
    r = fake_results()
    fig = W.plot_curves(r)
    ax = fig.axes[0]
    assert len(ax.lines) == len(r.runs()) + 1                 # every method and the float line
    assert ax.get_ylabel().startswith("perplexity")
    fig = W.plot_summary(r)
    assert len(fig.axes[0].patches) == 1 + len(r.ptq) + len(r.runs())   # float, PTQ, trained


def test_method_explorer_follows_its_menu():
    """The noise band is half the 95% t-interval of the paired per-window log-ratio against
    float, in perplexity: ppl · (exp(t · sd / sqrt(n)) - 1), t = 3.182 for the 4 windows' 3
    degrees of freedom (any table of Student's t)."""
    r = fake_results()
    e = W.method_explorer(r)
    assert e.state["method"] == "full fine-tuning (float)"
    e.controls["method"].value = "LoRA (float base)"
    nll = r.lora.nll
    ppl = np.exp(nll.mean())
    assert e.state["ppl"] == pytest.approx(ppl, rel=1e-12)
    assert e.state["trainable"] == 325_632 and e.state["curve"] == r.lora.curve
    d = nll - r.float_nll
    assert len(d) == 4
    assert e.state["noise"] == pytest.approx(ppl * np.expm1(3.182 * d.std(ddof=1) / 2), rel=1e-12)


def test_bad_inputs():
    with pytest.raises(TypeError, match="run_all"):
        W.plot_curves({"x": 1})
    with pytest.raises(TypeError, match="run_all"):
        W.method_explorer(object())
    with pytest.raises(ValueError, match="method"):
        W.method_point(fake_results(), "nope")


@pytest.fixture(scope="module")
def stored():
    return W.load_stored()["run"]


def test_stored_run_is_the_full_workload(stored):
    assert stored.workload == L.FULL
    methods = [row[0] for row in L.demo6_rows(stored)]
    assert methods[0] == "float32 (reference)"
    assert {"full fine-tuning (float)", "LoRA (float base)", "QLoRA (NF4 base)"} <= set(methods)
    for run in stored.runs():
        assert [s for s, _p in run.curve] == L.curve_points(L.FULL)
    for run in stored.qat.values():
        assert 0 <= run.info["codes_changed"] <= run.info["codes"]


def test_stored_run_prints_every_demo_in_both_languages(stored):
    """The notebook's stored cells: every demo printed from the data, in English and in
    Chinese, with the same numbers."""
    from text_checks import english_runs, number_differences, render
    en, zh = render(L.show_demos, stored, "en"), render(L.show_demos, stored, "zh")
    for n in range(1, 7):
        assert f"Demo {n}:" in en and f"演示 {n}" in zh
    assert "What to notice" in en and "memory bill" in en and "chosen" in en
    assert number_differences(en, zh) == []
    assert english_runs(zh, allowed=("LoRA", "QLoRA", "NF4", "QAT", "LSQ", "RTN", "GPTQ", "INT3",
                                     "INT4", "Adam", "STE", "FP32", "MiB", "qweight", "qzeros",
                                     "Dettmers et al", "KD-QAT", "LLM-QAT", "Liu et al",
                                     "float32", "Kingma & Ba", "Esser et al")) == []
    assert "95%" in en and "95 %" not in en + zh
    for m, _b, _n, _c, ppl, _nll in L.demo6_rows(stored):
        assert f"{ppl:.2f}" in en


def test_a_quick_or_partial_file_is_refused(tmp_path, stored):
    from lectures import llm
    quick = llm.save_results(tmp_path / "quick.json", {"run": stored},
                             {"command": "11_quantized_finetuning.py --quick"})
    with pytest.raises(ValueError, match="not a full run"):
        W.load_stored(quick)
    partial = llm.save_results(tmp_path / "partial.json", {"demo1": 1},
                               {"command": "11_quantized_finetuning.py"})
    with pytest.raises(ValueError, match="not a full run"):
        W.load_stored(partial)


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_figures_and_explorer_in_chinese():
    import matplotlib
    from matplotlib.text import Text

    from console.i18n import language
    from lectures.widgets.fonts import use_language_fonts
    from text_checks import english_runs
    r = fake_results()
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()   # Noto Sans SC: the explorer draws its figure
        figs = [W.plot_curves(r), W.plot_summary(r)]
        e = W.method_explorer(r)
        figs.append(e.figure)
        labels = e.controls["method"].options
        description, title = e.controls["method"].description, e.title
    for fig in figs:
        ax = fig.axes[0]
        assert _is_cjk(ax.get_title()) and _is_cjk(ax.get_xlabel()), ax.get_title()
        drawn = "\n".join(t.get_text() for t in fig.findobj(Text) if t.get_text())
        assert english_runs(drawn) == []
    assert _is_cjk(figs[0].axes[0].get_ylabel())
    assert _is_cjk(description) and _is_cjk(title)
    assert [value for _label, value in labels] == [run.method for run in r.runs()]
    assert all(_is_cjk(label) for label, _value in labels)
