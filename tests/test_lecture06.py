"""Lecture 06: every claim in its text, asserted on the demo functions' results."""

import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from console import display_width

L = importlib.import_module("lectures.06_quantization_aware_training")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ste():
    return L.ste_demo()


@pytest.fixture(scope="module")
def master():
    return L.master_weights_demo()


@pytest.fixture(scope="module")
def digits():
    return L.ptq_vs_qat()


@pytest.fixture(scope="module")
def spread():
    return L.seed_spread()


def test_ste_example_rows(ste):
    assert [r[2] for r in ste.example] == [0, 1, 1, 1, 1, 0]
    assert [r[1] for r in ste.example] == ["-8", "-8", "-8", "+7", "+7", "+7"]


def test_staircase_mask_is_one_exactly_inside_the_rounded_range(ste):
    inside = (ste.x > -8.5) & (ste.x < 7.5)     # codes -8..7 (ties at -8.5 -> -8, 7.5 -> 8)
    inside |= ste.x == -8.5
    np.testing.assert_array_equal(ste.mask, inside.astype(float))


def test_true_gradient_never_moves_and_ste_hovers_around_the_target(ste):
    assert np.all(ste.w_true == ste.w_true[0])
    tail = ste.q_ste[-20:]
    assert set(tail) == {2.0, 3.0}               # both grid points around 2.6 occur
    assert np.all(np.abs(ste.w_ste[-20:] - 2.5) < 0.2)   # at the rounding boundary


def test_master_weight_claims(master):
    c = master.curves
    rows = {r[0]: r for r in master.rows}
    assert rows["INT4 store, nearest"][3] == "0%"
    assert c["INT4 store, nearest"][-1] == c["INT4 store, nearest"][0]     # stalled at start
    assert master.lr < master.int4_step / 2                                # why it stalls
    e4 = c["E4M3 store, nearest"]
    assert e4[-1] < e4[0] and e4[-1] > 0.25 * e4[0]       # moved, then stalled far from 0
    assert np.ptp(e4[-100:]) < 0.01 * e4[-1]              # under 1 % change in the last 100
    for fmt in ("INT4", "E4M3"):
        m = c[f"{fmt} view of FP32 master"][-1]
        s = c[f"{fmt} store, stochastic"][-1]
        n = c[f"{fmt} store, nearest"][-1]
        assert m < 0.1 * n and s < 0.1 * n                # master and SR both train
    assert c["FP32"][-1] < 5e-5                           # prints as 0.0000


def test_ptq_vs_qat_claims(digits):
    a, f = digits.accuracy, digits.fp32_accuracy
    for acts in (None, 8):
        assert a[("QAT", "INT2", acts)] > a[("PTQ", "INT2", acts)] + 0.2   # tens of points
        assert a[("QAT", "INT4", acts)] > a[("PTQ", "INT4", acts)]
    assert abs(f - a[("PTQ", "INT8", 8)]) <= 0.01          # INT8: within 1 point of FP32
    assert a[("QAT", "INT2", None)] < f - 0.05              # INT2 stays well short of FP32
    assert abs(a[("QAT", "NVFP4", None)] - a[("QAT", "INT4", None)]) <= 0.01   # close to INT4
    assert a[("PTQ", "INT4", None)] < f                      # PTQ at INT4 loses a little
    assert digits.n_train + digits.n_test == 1797 and digits.n_test == 360
    assert len(digits.curves["FP32"]) == digits.config.epochs + digits.config.qat_epochs


def test_seed_spread_claims(spread):
    assert min(spread.gains["INT2"]) > 10                    # large for every seed (points)
    assert np.mean(spread.gains["INT4"]) > 0                 # small but positive on average
    assert max(abs(g) for g in spread.gains["INT4"]) < 3     # "the size of a few images"


def test_training_is_deterministic():
    cfg = L.DigitsConfig(epochs=2, qat_epochs=1)
    r1 = L.ptq_vs_qat(cfg, ("INT4",), acts=(8,))
    r2 = L.ptq_vs_qat(cfg, ("INT4",), acts=(8,))
    assert r1.accuracy == r2.accuracy and r1.curves == r2.curves


def test_printing(ste, master, digits, spread, capsys):
    L.print_ste(ste)
    L.print_master_weights(master)
    L.print_ptq_vs_qat(digits)
    L.print_seed_spread(spread)
    out = capsys.readouterr().out
    assert "What to notice" in out and "{" not in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert " %" not in out                      # "96.7%", as every other lecture writes it
    assert "Across seeds: QAT minus PTQ" in out and "1. QAT minus PTQ" not in out


def test_main_opens_with_the_title_and_labels_every_demo(ste, master, digits, spread, capsys,
                                                         monkeypatch):
    # the demos' results come from the fixtures, so main() only prints
    for name, value in (("ste_demo", ste), ("master_weights_demo", master),
                        ("ptq_vs_qat", digits), ("seed_spread", spread)):
        monkeypatch.setattr(L, name, lambda *a, _v=value, **k: _v)
    L.main()
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("Lecture 06:")
    headers = [line for prev, line, nxt in zip(lines, lines[1:], lines[2:])
               if prev == nxt and set(prev) == {"="}]          # section titles between rules
    assert [h.split(":")[0] for h in headers] == ["Demo 1", "Demo 2", "Demo 3"]
    assert max(display_width(line) for line in lines) <= 100   # fits a 100-column terminal


@pytest.mark.long
def test_script_output_is_identical_from_root_and_from_lectures_dir(english_run):
    import lecture_runs
    script = "06_quantization_aware_training.py"
    a = english_run(script)                                 # python lectures/06_... from ROOT
    b = lecture_runs.run(script, cwd=ROOT / "lectures")     # python 06_... from lectures/
    assert a == b and a.startswith("#") and "Demo 3:" in a


@pytest.mark.parametrize("args, env, opening", [
    ([], {"LANG": "C.UTF-8"}, "Lecture 06 needs torch"),
    (["--lang", "zh"], {"LANG": "C.UTF-8"}, "第 06 讲需要 torch"),
    ([], {"LANG": "zh_CN.UTF-8"}, "第 06 讲需要 torch"),
])
def test_without_torch_the_script_names_the_install_command_in_its_language(tmp_path, args, env,
                                                                            opening):
    # a package called torch that cannot be imported stands in for a machine without torch
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    clean = {k: v for k, v in os.environ.items()
             if k not in ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")}
    clean.update(env, PYTHONPATH=f"{tmp_path}:{ROOT}", PYTHONIOENCODING="utf-8")
    r = subprocess.run([sys.executable, "lectures/06_quantization_aware_training.py", *args],
                       cwd=ROOT, env=clean, capture_output=True, text=True, encoding="utf-8",
                       timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.startswith(opening) and "Traceback" not in r.stderr
    assert "pip install -e '.[lectures]'" in r.stderr and "README" in r.stderr
