"""Notebook 11's plots and explorer, on a summary written here and on the stored one."""

import json

import pytest

pytest.importorskip("ipywidgets")
pytest.importorskip("matplotlib")

from lectures.widgets import lecture11 as W  # noqa: E402


def fake_summary():
    curves = {"QAT INT3 g128 from RTN": [[0, 130.0], [6, 120.0], [12, 118.0]],
              "LoRA (float base)": [[0, 40.0], [6, 39.0], [12, 38.5]]}
    table = [["float32 (reference)", 32.0, 0, 0.0, 40.0],
             ["RTN INT3 g128", 3.16, 0, 5.0, 130.0],
             ["QAT INT3 g128 from RTN", 3.16, 14_155_776, 50.0, 118.0],
             ["LoRA (float base)", 32.01, 325_632, 40.0, 38.5]]
    return {"steps": 12, "train_len": 128, "n_eval": 4, "eval_len": 128, "float_ppl": 40.0,
            "machine": "test", "curves": curves, "table": table,
            "noise": {"QAT INT3 g128 from RTN": 1.5, "LoRA (float base)": 0.3}}


def test_plots_draw_every_method():
    s = fake_summary()
    fig = W.plot_curves(s)
    ax = fig.axes[0]
    assert len(ax.lines) == 3                           # two methods and the float line
    assert ax.get_ylabel().startswith("perplexity")
    fig = W.plot_summary(s)
    assert len(fig.axes[0].patches) == len(s["table"])


def test_save_and_load_round_trip(tmp_path):
    s = fake_summary()
    path = W.save_summary(s, tmp_path / "s.json")
    assert W.load_summary(path) == json.loads(json.dumps(s))


def test_method_explorer_follows_its_menu():
    s = fake_summary()
    e = W.method_explorer(s)
    assert e.state["method"] == "QAT INT3 g128 from RTN" and e.state["ppl"] == 118.0
    e.controls["method"].value = "LoRA (float base)"
    assert e.state["ppl"] == 38.5 and e.state["trainable"] == 325_632
    assert e.state["noise"] == 0.3


def test_bad_inputs():
    with pytest.raises(TypeError, match="summary"):
        W.plot_curves({"x": 1})
    with pytest.raises(ValueError, match="method"):
        W.method_point(fake_summary(), "nope")
    with pytest.raises(TypeError, match="run_all"):
        W.summary(object())


def test_stored_run_is_complete():
    s = W.load_summary()
    methods = [row[0] for row in s["table"]]
    assert methods[0] == "float32 (reference)"
    assert {"full fine-tuning (float)", "LoRA (float base)", "QLoRA (NF4 base)"} <= set(methods)
    assert set(s["curves"]) <= set(methods)
    for curve in s["curves"].values():
        assert curve[0][0] == 0 and curve[-1][0] == s["steps"]


def test_stored_run_is_the_full_workload():
    s = W.load_summary()
    w = W.L.FULL
    assert (s["steps"], s["train_len"], s["n_eval"], s["eval_len"]) == \
        (w.steps, w.train_len, w.n_eval, w.eval_len)
    qat = {m for m in s["curves"] if m.startswith(("QAT", "KD-QAT", "LSQ"))}
    assert set(s["codes_changed"]) == qat
    for changed, total in s["codes_changed"].values():
        assert 0 <= changed <= total


def _old_cell_print(s) -> str:
    """What notebook 11's first cell printed before print_summary existed: its f-strings,
    written out here as the independent reference for the English bytes."""
    lines = [f"float32: perplexity {s['float_ppl']:.2f} on {s['n_eval']} windows of "
             f"{s['eval_len']} tokens; {s['steps']} steps of {s['train_len']} tokens per method"]
    for method, bits, trainable, cpu, ppl in s["table"]:
        lines.append(f"{method:32s} {bits:6.3f} bits/weight {trainable:>12,} trainable  "
                     f"perplexity {ppl:6.2f}")
    for method, (changed, total) in s["codes_changed"].items():
        lines.append(f"{method}: {changed:,} of {total:,} trained codes changed")
    return "\n".join(lines) + "\n"


def _printed(s, lang) -> str:
    import io
    from contextlib import redirect_stdout

    from console.i18n import language
    buf = io.StringIO()
    with language(lang), redirect_stdout(buf):
        W.print_summary(s)
    return buf.getvalue()


def test_print_summary_english_bytes_and_chinese_numbers():
    from console import display_width
    from text_checks import english_runs, number_differences
    s = W.load_summary()
    en, zh = _printed(s, "en"), _printed(s, "zh")
    assert en == _old_cell_print(s)
    assert number_differences(en, zh) == [] and english_runs(zh) == []
    assert sum("\u4e00" <= ch <= "\u9fff" for ch in zh) > 50
    rows = zh.splitlines()[1:1 + len(s["table"])]
    assert len({display_width(row) for row in rows}) == 1, rows   # the columns stay aligned
    with pytest.raises(TypeError, match="summary"):
        W.print_summary({"x": 1})


def _is_cjk(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


def test_figures_and_explorer_in_chinese():
    import matplotlib
    from matplotlib.text import Text

    from console.i18n import language
    from lectures.widgets.fonts import use_language_fonts
    from text_checks import english_runs
    s = fake_summary()
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()   # Noto Sans SC: the explorer draws its figure
        figs = [W.plot_curves(s), W.plot_summary(s)]
        e = W.method_explorer(s)
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
    assert [value for _label, value in labels] == list(s["curves"])
    assert all(_is_cjk(label) for label, _value in labels)


def test_print_run_prints_the_stored_demos_in_the_notebooks_language(capsys):
    from console.i18n import language
    s = dict(fake_summary(), printed={"en": "Demo 1: the gap\n", "zh": "演示 1：差距\n"})
    with language("en"):
        W.print_run(s)
    assert capsys.readouterr().out == "Demo 1: the gap\n"
    with language("zh"):
        W.print_run(s)
    assert capsys.readouterr().out == "演示 1：差距\n"
    with pytest.raises(TypeError, match="summary"):
        W.print_run({"x": 1})



def test_stored_run_holds_what_the_lecture_printed():
    """The stored run keeps the demos' tables and observations, in both languages, with the
    same numbers (the notebook's reader sees the interpretation, not only the figures)."""
    from text_checks import number_differences
    s = W.load_summary()
    en, zh = s["printed"]["en"], s["printed"]["zh"]
    for n in range(1, 7):
        assert f"Demo {n}:" in en and f"演示 {n}" in zh
    assert "What to notice" in en and "memory bill" in en and "chosen" in en
    assert number_differences(en, zh) == []
    for method, bits, trainable, cpu, ppl in s["table"]:
        assert f"{ppl:.2f}" in en
