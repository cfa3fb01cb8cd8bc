"""Lecture 11 (QAT and QLoRA on SmolLM2-135M): every printed claim, computed by the lecture's
own functions on the quick workload and asserted; the harness's training windows and tail
evaluation against independent references; the bad settings."""

import contextlib
import importlib
import io

import numpy as np
import pytest

from console import display_width

L = importlib.import_module("lectures.11_quantized_finetuning")


def printed(show, *args) -> str:
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        show(*args)
    return buf.getvalue()


# ---------------------------------------------------------------------------------------------
# Training windows (no model needed)
# ---------------------------------------------------------------------------------------------
def test_training_windows_share_no_token_position():
    from lectures.llm.text import calibration_windows, eval_windows, training_windows
    tokens = np.arange(20_000)                       # token id = position: overlap is visible
    ev, cal = eval_windows(tokens, 8, 256), calibration_windows(tokens, 4, 512)
    tr = training_windows(tokens, 30, 256, avoid=((8, 256, 0), (4, 512, 1)))
    assert tr.shape == (30, 256)
    assert not set(tr.ravel()) & (set(ev.ravel()) | set(cal.ravel()))
    assert len(set(tr.ravel())) == tr.size           # no token twice
    assert np.all(np.diff(tr, axis=1) == 1)          # consecutive text
    # the evaluation and calibration windows themselves are those of lectures 08-09
    starts = np.arange(20_000 // 256)[0::2] * 256
    assert ev[0, 0] == starts[0] and ev[-1, 0] == starts[-1]


def test_training_windows_bad_requests():
    from lectures.llm.text import training_windows
    tokens = np.arange(5_000)
    with pytest.raises(ValueError, match="n="):
        training_windows(tokens, 100, 256, avoid=((4, 256, 0),))
    with pytest.raises(ValueError, match="n must"):
        training_windows(tokens, 0, 256)


def test_bad_workloads_name_the_setting():
    from dataclasses import replace
    with pytest.raises(ValueError, match="steps"):
        L.check_workload(replace(L.QUICK, steps=0))
    with pytest.raises(ValueError, match="settings"):
        L.check_workload(replace(L.QUICK, settings=((5, 128),)))          # unknown format
    with pytest.raises(ValueError, match="gptq"):
        L.check_workload(replace(L.QUICK, gptq=((4, 128),)))
    with pytest.raises(ValueError, match="rank"):
        L.check_workload(replace(L.QUICK, rank=0))


def test_paired_comparison_by_hand():
    a = np.array([2.0, 2.1, 2.2, 2.3])
    b = a - np.array([0.1, 0.12, 0.08, 0.1])
    c = L.compare(a, b)
    d = a - b
    assert c.mean_diff == pytest.approx(0.1)
    assert c.two_se == pytest.approx(2 * d.std(ddof=1) / 2)
    assert c.finding
    assert not L.compare(a, a + np.array([0.1, -0.1, 0.1, -0.1])).finding


def test_largest_move_and_the_half_step_rule():
    """A weight that starts on a grid point keeps its code while it moves less than half a
    step (the codes recomputed here with numpy), and largest_move measures the move in steps."""
    import torch
    from numfmt.torch.train.lsq import GroupQuantLinear
    rng = np.random.default_rng(0)
    out, k, group, bits = 6, 40, 16, 3
    scales = rng.uniform(0.01, 0.05, (out, 3)).astype(np.float16)
    zeros = rng.integers(0, 2**bits, (out, 3))
    codes = rng.integers(0, 2**bits, (out, k))
    g = np.arange(k) // group
    s = scales.astype(np.float64)[:, g]
    w0 = ((codes - zeros[:, g]) * s).astype(np.float32)
    frac = rng.uniform(-0.49, 0.49, (out, k))
    w1 = (w0 + frac * s).astype(np.float32)
    m = GroupQuantLinear(torch.from_numpy(w1), torch.from_numpy(scales.astype(np.float32)),
                         torch.from_numpy(zeros), bits, group)
    move = L.largest_move(m.weight, torch.from_numpy(w0), scales, group)
    assert move == pytest.approx((np.abs(w1.astype(np.float64) - w0) / s).max(), rel=1e-12)
    assert move < 0.5
    np.testing.assert_array_equal(m.codes().numpy(), codes)
    # past half a step (away from the grid's ends) the code changes
    inner = (codes > 0) & (codes < 2**bits - 1)
    w2 = np.where(inner, w0 + 0.6 * s, w0).astype(np.float32)
    m2 = GroupQuantLinear(torch.from_numpy(w2), torch.from_numpy(scales.astype(np.float32)),
                          torch.from_numpy(zeros), bits, group)
    np.testing.assert_array_equal(m2.codes().numpy(), np.where(inner, codes + 1, codes))


def test_on_grid_line_follows_the_measurement():
    from types import SimpleNamespace
    r = SimpleNamespace(workload=L.FULL)
    still = SimpleNamespace(method="QAT INT3 g128 from GPTQ",
                            info={"max_move": 0.04, "codes_changed": 0})
    out = L.on_grid_line(r, still)
    assert "no code changed" in out and "0.040" in out and f"{L.FULL.steps} × 2e-05" in out
    moved = SimpleNamespace(method="QAT INT3 g128 from GPTQ",
                            info={"max_move": 0.7, "codes_changed": 1234})
    out = L.on_grid_line(r, moved)
    assert "1,234 codes changed" in out and "0.70" in out


def test_command_line(capsys):
    with pytest.raises(SystemExit) as e:
        L.parse_args(["--help"])
    assert e.value.code == 0 and "--quick" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        L.parse_args(["--unknown"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        L.parse_args(["--steps", "0"])
    assert "--steps" in capsys.readouterr().err


def test_save_leaves_every_other_file_alone(tmp_path):
    import json
    mine = tmp_path / "run.tmp"              # a user's file beside the target
    mine.write_text("mine")
    path = L.save_summary({"a": 1}, tmp_path / "run.json")
    assert json.loads(path.read_text()) == {"a": 1}
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json", "run.tmp"]


def test_save_target_is_checked_before_the_run(tmp_path, capsys):
    for bad, why in ((tmp_path / "no" / "s.json", "does not exist"), (tmp_path, "directory")):
        with pytest.raises(SystemExit) as e:
            L.parse_args(["--save", str(bad)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--save" in err and why in err
    assert L.parse_args(["--save", str(tmp_path / "s.json")]).save == str(tmp_path / "s.json")


# ---------------------------------------------------------------------------------------------
# The harness's tail evaluation and training loop on the real model
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lab(checkpoint):
    return L.open_lab(L.QUICK, ck=checkpoint)


@pytest.mark.slow
def test_tail_evaluation_equals_the_whole_model(lab):
    from lectures import llm
    states = L.float_states(lab)
    tail = L.tail_nll(lab, states)
    whole = llm.window_nll(lab.ck.model, lab.eval_windows, batch_size=len(lab.eval_windows))
    np.testing.assert_array_equal(tail, whole)


@pytest.mark.slow
def test_train_refuses_bad_steps(lab):
    from lectures.llm.finetune import train
    with pytest.raises(ValueError, match="steps"):
        train(lab.ck.model, lab.w.first, [], [], lab.train_windows, 0, 1e-3)
    with pytest.raises(ValueError, match="lr"):
        train(lab.ck.model, lab.w.first, [], [None], lab.train_windows, 1, 0.0)
    with pytest.raises(ValueError, match="first"):
        train(lab.ck.model, 30, [], [None], lab.train_windows, 1, 1e-3)


# ---------------------------------------------------------------------------------------------
# The lecture's quick run, once
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results(lab):
    return L.run_all(lab)


@pytest.mark.slow
def test_demo1_gap(results):
    rows = L.demo1_gap(results)
    assert [row[:2] for row in rows] == [["INT3 g128", "RTN"]]
    for s, m, bpw, ppl, gap, noise, finding in rows:
        assert gap > 0
        assert finding == (L.compare(results.ptq[(m, s)][0], results.float_nll).finding)
        # bits per weight: 3-bit codes + a 16-bit scale and a 3-bit zero point per row and
        # group of 128 inputs (576 inputs: 5 groups, the last of 64; 1536 inputs: 12 groups)
        meta = 19 * ((576 + 192 + 192 + 576 + 1536 + 1536) * 5 + 576 * 12)
        weights = 2 * 576 * 576 + 2 * 192 * 576 + 3 * 1536 * 576
        assert bpw == pytest.approx(3 + meta / weights, rel=1e-12)
    out = " ".join(printed(L.show_demo1, results, rows).split())      # lines rewrapped
    assert ("the loss is real" in out) == all(row[6] for row in rows)


@pytest.mark.slow
def test_demo2_qat_export_and_claims(results, lab):
    rows = L.demo2_rows(results)
    assert rows
    for m, start, end, share, codes, packed, exact in rows:
        run = results.qat[m]
        assert exact, "the packed model must score exactly as the fake-quantized one"
        assert packed == end
        # step 0 of QAT is the PTQ model as stored
        label, setting = m.split(" from ")[1], m.split(" ")[1] + " " + m.split(" ")[2]
        np.testing.assert_array_equal(run.start_nll, results.ptq[(label, setting)][0])
        assert share == pytest.approx((start - end) / (start - results.float_ppl))
        assert 0 <= codes <= 100
        assert len(run.curve) == len(results.full.curve)
    out = printed(L.show_demo2, results, rows)
    assert f"({len(rows)} of {len(rows)} models)" in out
    for m, run in results.qat.items():
        assert 0 <= run.info["codes_changed"] <= run.info["codes"]
        assert run.info["codes"] == sum(x.weight.numel() for x in lab.tail.values())
        assert run.info["max_move"] >= 0


@pytest.mark.slow
def test_summary_saved_by_the_command_line_option(results, tmp_path):
    import json
    s = L.summary(results)
    path = L.save_summary(s, tmp_path / "s.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(s))
    assert s["steps"] == L.QUICK.steps and s["float_ppl"] == results.float_ppl
    for m, (changed, total) in s["codes_changed"].items():
        run = results.qat[m]
        assert (changed, total) == (run.info["codes_changed"], run.info["codes"])


@pytest.mark.slow
def test_demo3_lsq(results, lab):
    rows = L.demo3_rows(results)
    assert [row[0] for row in rows] == ["INT3 g128 from RTN"]
    for s, fixed, lsq, c, change, n in rows:
        assert c.ppl_a == lsq and c.ppl_b == fixed
        assert n == sum(m.weight.shape[0] * -(-m.weight.shape[1] // 128)
                        for m in lab.tail.values())       # one scale per row and group
        assert change > 0                               # the scales did move
    out = printed(L.show_demo3, results, rows)
    assert ("a finding" in out) == rows[0][3].finding


@pytest.mark.slow
def test_demo4_memory_bill_and_counts(results, lab):
    for b in results.bills:
        assert L.bill_matches(b), b
    tail_shapes = [tuple(m.weight.shape) for m in lab.tail.values()]
    from numfmt.torch.train.lora import lora_parameter_count
    assert results.lora.trainable == results.qlora.trainable == \
        lora_parameter_count([(o, i) for o, i in tail_shapes], L.QUICK.rank)
    assert results.full.trainable == sum(o * i for o, i in tail_shapes)
    d = results.nf4_bytes
    # double quantization: 4 + 8/64 + 32/(64·256) bits against 4 + 32/64, up to per-tensor
    # rounding (every linear has a whole number of 64-blocks; 256-blocks may be partial)
    assert 8 * d["double_quant"] / d["params"] == pytest.approx(4.127, abs=2e-3)
    assert 8 * d["fp32_absmax"] / d["params"] == pytest.approx(4.5, abs=1e-9)
    out = printed(L.show_demo4, results)
    assert "yes" in out and " no " not in out


@pytest.mark.slow
def test_demo5_table_and_noise(results):
    rows = L.demo5_rows(results)
    methods = [row[0] for row in rows]
    assert methods[0] == "float32 (reference)"
    assert {"full fine-tuning (float)", "LoRA (float base)", "QLoRA (NF4 base)"} <= set(methods)
    for m, bpw, n, cpu, ppl, nll in rows:
        assert ppl == pytest.approx(np.exp(nll.mean()), rel=1e-15)
    out = printed(L.show_demo5, results, rows)
    assert all(display_width(line) <= 100 for line in out.splitlines())


@pytest.mark.slow
def test_printed_in_chinese_keeps_the_numbers(results):
    from text_checks import english_runs, number_differences, render
    for show, args in ((L.show_demo2, (results, L.demo2_rows(results))),
                       (L.show_demo4, (results,))):
        en = render(lambda a: show(*a), args, "en")
        zh = render(lambda a: show(*a), args, "zh")
        assert zh != en and "演示" in zh
        assert number_differences(en, zh) == []
        assert english_runs(zh, allowed=("LoRA", "QLoRA", "NF4", "QAT", "LSQ", "RTN", "GPTQ",
                                         "INT3", "Adam", "STE", "FP32", "MiB", "qweight",
                                         "qzeros", "GPTQ's")) == []
