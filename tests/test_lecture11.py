"""Lecture 11 (QAT and QLoRA on SmolLM2-135M): every printed claim, computed by the lecture's
own functions on a small workload (the quick one, shorter: :data:`TESTS`) and asserted; the
harness's training windows and tail evaluation against independent references; the bad
settings."""

import contextlib
import importlib
import io
from dataclasses import replace

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


def test_paired_ratio_by_hand():
    """versus(): B's perplexity over A's with the 95 % t-interval of the paired per-window
    differences (t = 3.182 for 3 degrees of freedom, from any table of Student's t)."""
    a = np.array([2.0, 2.1, 2.2, 2.3])
    d = np.array([0.1, 0.12, 0.08, 0.1])
    c = L.versus(a - d, a)
    half = 3.182 * d.std(ddof=1) / 2
    assert c.ratio == pytest.approx(np.exp(-0.1), rel=1e-12)
    assert (c.low, c.high) == pytest.approx((np.exp(-0.1 - half), np.exp(-0.1 + half)))
    assert L.verdict(c) == "a finding"
    assert L.half_width(c) == pytest.approx(np.expm1(half))
    assert L.interval(c) == f"[{100 * (c.low - 1):+.1f}%, {100 * (c.high - 1):+.1f}%]"
    assert L.verdict(L.versus(a + np.array([0.1, -0.1, 0.1, -0.1]), a)) == "within noise"


def test_adam_moves_a_weight_at_most_its_bound_per_step():
    """Kingma & Ba 2015, section 2.1: |Δ| <= lr · (1 - β1) / sqrt(1 - β2) per step when
    1 - β1 > sqrt(1 - β2); checked on torch.optim.Adam with random spiky gradients, and
    nearly reached by its worst case, one gradient after thousands of zero ones."""
    import torch
    assert L.ADAM_MAX_STEP == pytest.approx(0.1 / 0.001 ** 0.5)
    lr = 1e-3

    def largest_step(grads):
        p = torch.zeros(grads.shape[1], dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([p], lr=lr)
        worst = 0.0
        for row in grads:
            before = p.detach().clone()
            p.grad = torch.from_numpy(row)
            opt.step()
            worst = max(worst, float((p.detach() - before).abs().max()) / lr)
        return worst

    rng = np.random.default_rng(0)
    spiky = rng.standard_normal((300, 256)) * (rng.random((300, 256)) < 0.02) \
        * 10 ** rng.uniform(-3, 3, (300, 256))
    assert largest_step(spiky) <= L.ADAM_MAX_STEP * (1 + 1e-9)
    late = np.zeros((3000, 1))
    late[-1] = 1.0
    assert 3.0 < largest_step(late) <= L.ADAM_MAX_STEP * (1 + 1e-9)


def test_adam_cancels_a_constant_gradient_scale():
    """The lecture's claim about LSQ's g = 1/sqrt(N·Q_P) under Adam: the same gradients
    times g give the same steps (up to Adam's eps, 1e-8 against gradients of order 1)."""
    import torch
    rng = np.random.default_rng(1)
    grads = rng.standard_normal((20, 32))
    g = 1 / np.sqrt(128 * 7)
    out = []
    for scale in (1.0, g):
        p = torch.zeros(32, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.Adam([p], lr=1e-3)
        for row in grads:
            p.grad = torch.from_numpy(row * scale)
            opt.step()
        out.append(p.detach().numpy().copy())
    np.testing.assert_allclose(out[1], out[0], rtol=0, atol=1e-4 * 1e-3)   # 1e-4 of a step


def test_grid_reach_by_hand():
    """A weight on a grid point changes code only past half a step; Adam's bound limits the
    move to ADAM_MAX_STEP · lr · steps."""
    from types import SimpleNamespace
    scales = np.array([[0.001, 0.01], [0.002, 0.04]], dtype=np.float16)     # (out 2, G 2)
    tail = {"a": L.StoredInt(np.zeros((2, 8), np.uint8), scales, np.zeros((2, 2), int), 4)}
    start = SimpleNamespace(tail=tail)
    lr, steps = 1e-5, 20
    reach = L.ADAM_MAX_STEP * lr * steps                      # 6.3e-4
    half = np.repeat(scales.astype(np.float64) / 2, 4, axis=1)   # per weight
    got = L.grid_reach(start, lr, steps)
    assert got["reach"] == pytest.approx(reach)
    assert got["reachable"] == np.mean(half <= reach) == 0.25        # the 0.001 group only
    assert got["median_steps"] == int(np.ceil(np.median(half) / (L.ADAM_MAX_STEP * lr)))


def test_command_line(capsys):
    with pytest.raises(SystemExit) as e:
        L.parse_args(["--help"])
    assert e.value.code == 0 and "--quick" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        L.parse_args(["--unknown"])
    assert e.value.code == 2
    for steps in ("0", "2"):          # the sweep needs 2 steps, and one more to go on
        with pytest.raises(SystemExit):
            L.parse_args(["--steps", steps])
        assert "--steps" in capsys.readouterr().err
    w = L.workload_for(L.parse_args(["--steps", "3"]))
    assert (w.steps, w.sweep_steps) == (3, 2)


def test_stored_results_round_trip_exactly(tmp_path):
    """Every type a Results holds (nested dataclasses, per-window float64 arrays, dicts keyed
    by learning rates and by (method, setting) tuples, curves as lists of tuples) comes back
    from save_results equal, and prints every demo as before, in both languages."""
    from lecture11_results import fake_results
    from lectures import llm
    from text_checks import render
    r = fake_results()
    path = llm.save_results(tmp_path / "r.json", {"run": L.stored_results(r)})
    back = llm.load_results(path, L)[0]["run"]
    assert_same(back, r)
    assert type(back.ptq) is dict and list(back.ptq) == [("RTN", "INT3 g128")]
    assert list(back.full.info["sweep"].losses) == list(L.QUICK.rates_full)
    for lang in ("en", "zh"):
        assert render(L.show_demos, back, lang) == render(L.show_demos, r, lang)


def test_demo5_says_where_the_chosen_rate_lies_in_its_sweep():
    """An interior best rate is said to be bracketed, with its neighbours' scores; a best rate
    at the end of the grid is said to be one (the made-up run: full fine-tuning and LoRA best
    at their middle rate, QLoRA at its largest)."""
    from lecture11_results import fake_results
    r = fake_results()
    out = " ".join(printed(L.show_demo5, r).split())
    for run in (r.full, r.lora):
        sw = run.info["sweep"]
        low, mid, high = sorted(sw.losses)
        assert sw.chosen == mid
        ppl = {lr: np.exp(np.mean(sw.losses[lr])) for lr in (low, mid, high)}
        assert ppl[low] > ppl[mid] < ppl[high]
        assert (f"{run.method}: the best rate, {mid:g}, lies inside the sweep: {low:g} and "
                f"{high:g} on either side train worse over steps 2-{L.QUICK.sweep_steps} "
                f"({ppl[low]:.2f} and {ppl[high]:.2f} against {ppl[mid]:.2f})") in out
    sw = r.qlora.info["sweep"]
    assert sw.chosen == max(sw.losses)
    assert f"QLoRA (NF4 base): the best rate, {sw.chosen:g}, is the largest swept" in out
    assert out.count("lies inside the sweep") == 2


def assert_same(a, b, where="r"):
    """``a`` equals ``b`` with the same types all the way down (arrays: dtype and values)."""
    import dataclasses
    assert type(a) is type(b), f"{where}: {type(a).__name__} against {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_save_target_is_checked_before_the_run(tmp_path, capsys):
    for bad, why in ((tmp_path / "no" / "s.json", "does not exist"), (tmp_path, "directory")):
        with pytest.raises(SystemExit) as e:
            L.parse_args(["--save", str(bad)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert "--save" in err and why in err
    assert L.parse_args(["--save", str(tmp_path / "s.json")]).save == tmp_path / "s.json"


# ---------------------------------------------------------------------------------------------
# The harness's tail evaluation and training loop on the real model
# ---------------------------------------------------------------------------------------------
#: The tests' workload: the lecture's --quick with 8 training steps of 64 tokens (its sweep of
#: 4 steps and 4 evaluation windows of 128 tokens kept), a third of its training arithmetic.
TESTS = replace(L.QUICK, steps=8, train_len=64)


@pytest.fixture(scope="module")
def lab(checkpoint):
    return L.open_lab(TESTS, ck=checkpoint)


@pytest.mark.long
def test_tail_evaluation_equals_the_whole_model(lab):
    from lectures import llm
    states = L.float_states(lab)
    tail = L.tail_nll(lab, states)
    whole = llm.window_nll(lab.model, lab.eval_windows, batch_size=len(lab.eval_windows))
    np.testing.assert_array_equal(tail, whole)
    # what computes is a float64 copy of the checkpoint's float32 model, the same weights
    import torch
    assert next(lab.model.parameters()).dtype == torch.float64
    for n, m in lab.tail.items():
        assert m.weight.dtype == torch.float32
        assert torch.equal(lab.model.get_submodule(n).weight, m.weight.double())


@pytest.mark.long
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


@pytest.mark.long
def test_demo1_gap(results):
    rows = L.demo1_gap(results)
    assert [row[:2] for row in rows] == [["INT3 g128", "RTN"]]
    for s, m, bpw, packed, ppl, gap, c in rows:
        assert gap > 0
        assert c == L.versus(results.ptq[(m, s)][0], results.float_nll)
        # bits per weight: 3-bit codes + a 16-bit scale and a 3-bit zero point per row and
        # group of 128 inputs (576 inputs: 5 groups, the last of 64; 1536 inputs: 12 groups)
        shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576),
                  (576, 1536)]                           # q k v o gate up down: (out, in)
        groups = [(o, -(-i // 128)) for o, i in shapes]
        weights = sum(o * i for o, i in shapes)
        assert bpw == pytest.approx(3 + 19 * sum(o * g for o, g in groups) / weights, rel=1e-12)
        # GPTQ's layout: codes and zero points in 4-bit nibbles, float16 scales, an int32
        # g_idx per input column
        bits = sum(4 * o * i + (16 + 4) * o * g + 32 * i
                   for (o, i), (_o, g) in zip(shapes, groups))
        assert packed == pytest.approx(bits / weights, rel=1e-12)
        assert 4.15 < packed < 4.25
    out = " ".join(printed(L.show_demo1, results).split())      # lines rewrapped
    assert ("the loss is real" in out) == all(not row[6].within_noise for row in rows)


@pytest.mark.long
def test_demo2_qat_export_and_claims(results, lab):
    rows = L.demo2_rows(results)
    assert rows
    for m, start, end, share, codes, packed, exact, v in rows:
        run = results.qat[m]
        assert exact, "the packed model must score exactly as the fake-quantized one"
        assert packed == end
        # step 0 of QAT is the PTQ model as stored
        label, setting = m.split(" from ")[1], m.split(" ")[1] + " " + m.split(" ")[2]
        np.testing.assert_array_equal(run.start_nll, results.ptq[(label, setting)][0])
        assert share == pytest.approx((start - end) / (start - results.float_ppl))
        assert 0 <= codes <= 100
        assert len(run.curve) == len(results.full.curve)
    out = printed(L.show_demo2, results)
    assert f"({len(rows)} of {len(rows)} models)" in out
    for m, run in results.qat.items():
        assert 0 <= run.info["codes_changed"] <= run.info["codes"]
        assert run.info["codes"] == sum(x.weight.numel() for x in lab.tail.values())
    assert results.reach == {}                       # the quick workload has no GPTQ start


@pytest.mark.long
def test_saved_results_print_the_same(results, tmp_path):
    """What --save writes (the Results as data) prints every demo as the run printed it, in
    English and in Chinese."""
    from lectures import llm
    from text_checks import render
    path = llm.save_results(tmp_path / "r.json", {"run": L.stored_results(results)},
                            {"command": "11_quantized_finetuning.py --quick"})
    back = llm.load_results(path, L)[0]["run"]
    for lang in ("en", "zh"):
        assert render(L.show_demos, back, lang) == render(L.show_demos, results, lang)
    assert all(set(run.info).isdisjoint(L.LIVE_INFO) for run in back.runs())
    assert {"train", "modules"} <= set(results.full.info)      # the live run keeps them


@pytest.mark.long
def test_demo4_lsq(results, lab):
    rows = L.demo4_rows(results)
    assert [row[0] for row in rows] == ["INT3 g128 from RTN"]
    for s, fixed, lsq, c, median, change, n, codes, fixed_codes in rows:
        assert (codes, fixed_codes) == (results.qat["LSQ " + s].info["codes_changed"],
                                        results.qat["QAT " + s].info["codes_changed"])
        assert c == L.versus(results.qat["LSQ " + s].nll, results.qat["QAT " + s].nll)
        assert c.ratio == pytest.approx(lsq / fixed, rel=1e-12)
        assert n == sum(m.weight.shape[0] * -(-m.weight.shape[1] // 128)
                        for m in lab.tail.values())       # one scale per row and group
        assert 0 < median <= change                       # the scales did move
    out = printed(L.show_demo4, results)
    assert ("a finding" in out) == (not rows[0][3].within_noise)
    assert "0.0334" in out                   # g = 1/sqrt(128 · 7)


@pytest.mark.long
def test_demo5_memory_bill_and_counts(results, lab):
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
    out = printed(L.show_demo5, results)
    assert "yes" in out and " no " not in out
    # base bits per weight leave the adapters out; they are counted apart
    from lectures import llm
    n_lin = sum(m.weight.numel() for m in llm.decoder_linears(lab.ck.model).values())
    assert results.lora.bits == 32.0
    assert results.lora.info["adapter_bits"] == 32 * results.lora.trainable / n_lin


@pytest.mark.long
def test_demo6_table_and_noise(results):
    rows = L.demo6_rows(results)
    methods = [row[0] for row in rows]
    assert methods[0] == "float32 (reference)"
    assert {"full fine-tuning (float)", "LoRA (float base)", "QLoRA (NF4 base)"} <= set(methods)
    for m, bpw, n, cpu, ppl, nll in rows:
        assert ppl == pytest.approx(np.exp(nll.mean()), rel=1e-15)
    out = printed(L.show_demo6, results)
    assert all(display_width(line) <= 100 for line in out.splitlines())


@pytest.mark.long
def test_printed_in_chinese_keeps_the_numbers(results):
    from text_checks import english_runs, number_differences, render
    for show in (L.show_demo2, L.show_demo3, L.show_demo5):
        en = render(show, results, "en")
        zh = render(show, results, "zh")
        assert zh != en and "演示" in zh
        assert number_differences(en, zh) == []
        assert english_runs(zh, allowed=("LoRA", "QLoRA", "NF4", "QAT", "LSQ", "RTN", "GPTQ",
                                         "INT3", "Adam", "STE", "FP32", "MiB", "qweight",
                                         "qzeros", "GPTQ's", "Dettmers et al",        # citations stay
                                         "KD-QAT", "LLM-QAT", "Liu et al", "float32",
                                         "Kingma & Ba")) == []


# ---------------------------------------------------------------------------------------------
# Distillation and the learning-rate sweep
# ---------------------------------------------------------------------------------------------
def test_distillation_loss_is_torch_cross_entropy_with_soft_targets():
    import torch
    from torch.nn import functional as F

    from lectures.llm.finetune import distillation_loss
    gen = torch.Generator().manual_seed(0)
    student = (3 * torch.randn(2, 5, 11, generator=gen, dtype=torch.float64)).requires_grad_()
    teacher = torch.log_softmax(3 * torch.randn(2, 5, 11, generator=gen,
                                                dtype=torch.float64), -1)
    loss = distillation_loss(student, teacher)
    # torch's cross-entropy with class probabilities as the target
    soft = F.cross_entropy(student.reshape(-1, 11), teacher.exp().reshape(-1, 11))
    torch.testing.assert_close(loss, soft, rtol=1e-12, atol=0)
    # = KL(p_T || p_S) + H(p_T), per position: the same gradient as torch's KL divergence
    kl = F.kl_div(torch.log_softmax(student, -1).reshape(-1, 11), teacher.reshape(-1, 11),
                  log_target=True, reduction="batchmean")
    entropy = -(teacher.exp() * teacher).sum(-1).mean()
    torch.testing.assert_close(loss, kl + entropy, rtol=1e-12, atol=0)
    g_loss, = torch.autograd.grad(loss, student)
    g_kl, = torch.autograd.grad(kl, student)
    torch.testing.assert_close(g_loss, g_kl, rtol=1e-10, atol=1e-15)
    # a student equal to the teacher sits at the minimum: the loss is the teacher's entropy
    torch.testing.assert_close(distillation_loss(teacher, teacher), entropy, rtol=1e-12, atol=0)
    # a float32 teacher (lecture 11's storage) is exponentiated in the student's float64
    t32 = teacher.float()
    assert distillation_loss(student, t32).dtype == torch.float64
    torch.testing.assert_close(distillation_loss(student, t32),
                               F.cross_entropy(student.reshape(-1, 11),
                                               t32.double().exp().reshape(-1, 11)),
                               rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="same shape"):
        distillation_loss(student, teacher[:, :4])


def test_bad_sweeps_name_the_setting():
    from dataclasses import replace
    with pytest.raises(ValueError, match="sweep_steps"):
        L.check_workload(replace(L.QUICK, sweep_steps=L.QUICK.steps))
    with pytest.raises(ValueError, match="sweep_steps"):
        L.check_workload(replace(L.QUICK, sweep_steps=1))
    with pytest.raises(ValueError, match="rates_lora"):
        L.check_workload(replace(L.QUICK, rates_lora=(1e-3, 0)))
    with pytest.raises(ValueError, match="kd"):
        L.check_workload(replace(L.QUICK, kd=((4, 128),)))


@pytest.mark.long
def test_teacher_log_probs_are_the_whole_float_models(lab):
    import torch

    from lectures.llm.finetune import teacher_log_probs
    states = L.float_states(lab)
    teacher = teacher_log_probs(lab.model, lab.w.first, states.train[:2])
    with torch.no_grad():
        logits = lab.model(input_ids=torch.as_tensor(lab.train_windows[:2])).logits
    want = torch.log_softmax(logits[:, :-1].double(), -1)
    got = torch.cat(teacher)
    assert got.dtype == torch.float32
    assert got.shape == want.shape == (2, lab.w.train_len - 1, 49152)
    # the same modules in float64 (the tail's GEMMs are shaped differently from the whole
    # model's, so their last bits may differ): stored as float32, within one float32 rounding
    torch.testing.assert_close(got.double(), want, rtol=2**-23, atol=0)


@pytest.mark.long
def test_a_continued_run_is_the_run_that_never_stopped(lab):
    """The sweep's chosen run goes on from its optimizer: 1 + 2 steps equal 3 steps."""
    from lectures.llm.finetune import master_linear, replaced_modules, train
    states = L.float_states(lab)
    final = {}
    for split in (None, 1):
        modules = {n: master_linear(m) for n, m in lab.tail.items()}
        params = [m.weight for m in modules.values()]
        with replaced_modules(lab.model, modules):
            if split is None:
                r = train(lab.model, lab.w.first, params, states.train, lab.train_windows,
                          3, 1e-4)
                losses = r.losses
            else:
                a = train(lab.model, lab.w.first, params, states.train, lab.train_windows,
                          split, 1e-4)
                b = train(lab.model, lab.w.first, params, states.train, lab.train_windows,
                          3, 1e-4, start=split, optimizer=a.extra["optimizer"])
                losses = a.losses + b.losses
        final[split] = (losses, [p.detach().clone() for p in params])
    assert final[None][0] == final[1][0]
    for x, y in zip(final[None][1], final[1][1]):
        assert torch_equal(x, y)


def torch_equal(a, b) -> bool:
    import torch
    return bool(torch.equal(a, b))


@pytest.mark.long
def test_demo3_distillation(results, lab):
    rows = L.demo3_rows(results)
    assert [row[0] for row in rows] == ["INT3 g128 from RTN"]
    for s, start, qat, kd, c in rows:
        assert qat.method == "QAT " + s and kd.method == "KD-QAT " + s
        # the same start, windows and steps: only the loss differs
        np.testing.assert_array_equal(kd.start_nll, qat.start_nll)
        assert kd.tokens == qat.tokens and kd.curve[0] == qat.curve[0]
        assert kd.nll is not qat.nll and not np.array_equal(kd.nll, qat.nll)
        assert c == L.versus(kd.nll, qat.nll)
        assert kd.info["packed_nll"].tolist() == kd.nll.tolist()
    t = results.teacher
    # full vocabulary, float32, one (T-1, V) block per training window
    assert t["bytes"] == 4 * t["windows"] * (TESTS.train_len - 1) * t["vocab"]
    assert t["vocab"] == 49152 and t["windows"] == TESTS.steps
    out = " ".join(printed(L.show_demo3, results).split())
    assert f"{rows[0][4].percent()}, {L.verdict(rows[0][4])}" in out


@pytest.mark.long
def test_demo5_sweep_chooses_on_fresh_training_windows(results):
    for run, rates in ((results.full, TESTS.rates_full), (results.lora, TESTS.rates_lora),
                       (results.qlora, TESTS.rates_lora)):
        sw = run.info["sweep"]
        assert sorted(sw.losses) == sorted(rates)
        means = {lr: float(np.mean(v)) for lr, v in sw.losses.items()}
        assert sw.chosen == min(means, key=means.get)
        # the chosen run is the sweep's run at that rate, gone on: the same losses first
        n = TESTS.sweep_steps
        assert run.info["train"].losses[1:n] == sw.losses[sw.chosen].tolist()
        assert len(run.info["train"].losses) == TESTS.steps
        assert [s for s, _p in run.curve] == L.curve_points(TESTS)
    out = printed(L.show_demo5, results)
    assert "chosen" in out and "steps 2-4" in out


def test_the_machine_is_named_in_the_readers_language():
    """machine_name()'s English "<cpu>, <n> thread(s)" is stored with a run; demo 6 prints it
    in the reader's language, and a name of another shape (a GPU's) as it is."""
    import dataclasses

    from lecture11_results import fake_results
    from text_checks import render
    r = fake_results()
    for machine, en, zh in (("x86_64, 1 thread", "(x86_64, 1 thread)", "（x86_64，1 个线程）"),
                            ("x86_64, 16 threads", "(x86_64, 16 threads)",
                             "（x86_64，16 个线程）"),
                            ("NVIDIA H100 80GB HBM3", "(NVIDIA H100 80GB HBM3)",
                             "（NVIDIA H100 80GB HBM3）")):
        run = dataclasses.replace(r, machine=machine)
        assert en in " ".join(render(L.show_demo6, run, "en").split())
        # Chinese lines wrap at any character: compare with every space and line break removed
        assert "".join(zh.split()) in "".join(render(L.show_demo6, run, "zh").split())


def test_master_linear_is_a_float32_copy_that_computes_in_its_inputs_dtype():
    """Full fine-tuning's module: a trainable float32 copy of the weight (the original left
    alone), its bias frozen, a float64 input computed in float64 on the float32 values."""
    import torch

    from lectures.llm.finetune import master_linear
    gen = torch.Generator().manual_seed(1)
    lin = torch.nn.Linear(6, 4).requires_grad_(False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(4, 6, generator=gen))
    before = lin.weight.clone()
    m = master_linear(lin)
    assert m.weight.dtype == torch.float32 and m.weight.requires_grad
    assert m.weight.data_ptr() != lin.weight.data_ptr() and torch.equal(m.weight, lin.weight)
    assert [name for name, _p in m.named_parameters()] == ["weight"]      # the bias is frozen
    x = torch.randn(3, 6, generator=gen, dtype=torch.float64)
    y = m(x)
    want = x.numpy() @ lin.weight.double().numpy().T + lin.bias.double().numpy()
    assert y.dtype == torch.float64
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-14, atol=1e-14)
    y.sum().backward()
    assert m.weight.grad.dtype == torch.float32
    with torch.no_grad():
        m.weight.add_(1.0)
    assert torch.equal(lin.weight, before)
