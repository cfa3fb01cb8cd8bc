"""Fine-tuning the last decoder layers of the real model: a short, plain training loop.

Lecture 11 fine-tunes only the last ``L - first`` decoder layers of SmolLM2-135M (the
others stay frozen, float or quantized). The frozen layers then compute the same hidden
states for a window at every step, so they run once per window (:func:`layer_inputs`), and
each training step and each evaluation runs the trained tail alone (:func:`tail_logits`):
layers ``first..L-1``, the final RMSNorm and the output projection.

    states = layer_inputs(model, windows, first, batch_size)    # [(hidden (B,T,C), kwargs)]
    nll = tail_window_nll(model, first, states, windows)        # float64 (n,), nats/token
    curve = train(model, first, params, train_states, train_windows, steps=..., lr=...)

The loop is next-token cross-entropy on the training windows (or distillation from a
teacher's log-probabilities, :func:`distillation_loss`), Adam (Kingma & Ba 2015) at a fixed
learning rate, one batch per step, no batch used twice; a run stopped at some step goes on
from its optimizer exactly as if it had not stopped (``train(..., start=, optimizer=)``).
Evaluation uses :func:`lectures.llm.evaluate.token_nll` (a float64 log-softmax), as
:func:`perplexity` does.

In lecture 11 the model that computes is ``Lab.model``, a float64 copy of the checkpoint's
float32 model (:func:`lectures.llm.float64_copy`). What trains stays float32, as in a real run
(master weights, LSQ's scales, LoRA's adapters, Adam's state: :func:`master_linear` and the
modules of numfmt.torch.train compute in their input's dtype), while every product and sum is
float64's, where each float32 value is exact: no order of a CPU's sums reaches a printed digit.

Lecture 11's lab sits here too: :func:`open_lab` (the model and its evaluation, calibration
and training windows), :func:`frozen_states` (the frozen prefix run once, float or as some
method stores it), :class:`StoredInt` and :func:`pack` (a linear as a GPTQ checkpoint stores
it), :func:`rtn_stored`, :func:`gptq_stored` and :func:`make_start` (a PTQ model to fine-tune
from, its frozen layers served from the packed form).
"""

from __future__ import annotations

import contextlib
import math
import numbers
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from lectures.llm.evaluate import token_nll
from lectures.llm.hooks import check_first_layer as _check_first, layer_inputs


def tail_logits(model, first: int, hidden, kwargs: dict):
    """Logits (B, T, V) float32 from layer ``first``'s input: the remaining decoder layers,
    the final norm and the output projection, exactly the model's own modules."""
    h = hidden
    for layer in model.model.layers[first:]:
        h = layer(h, **kwargs)                                        # (B, T, C)
    return model.lm_head(model.model.norm(h))                         # (B, T, V)


def tail_window_nll(model, first: int, states: list, windows) -> np.ndarray:
    """Mean NLL per window (nats per token), float64 (n,), of the model from ``states``
    (:func:`layer_inputs` of the same ``windows``): :func:`lectures.llm.window_nll` of the
    whole model, the frozen layers having run once.

    Raises ValueError naming ``windows`` if its rows are not the states' windows (one per
    row of the states' batches)."""
    import torch

    _check_windows(windows, states, len(states), exact=True)
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    out, i = [], 0
    with torch.no_grad():
        for hidden, kwargs in states:
            logits = tail_logits(model, first, hidden, kwargs)
            for row in logits:
                seq = ids[i].to(row.device)
                out.append(float(token_nll(row[:-1].cpu(), seq[1:].cpu()).mean()))
                i += 1
    return np.array(out, dtype=np.float64)


def _check_windows(windows, states, n_batches: int, exact: bool) -> None:
    """``windows`` must be a 2-D integer array with a row for each window of the first
    ``n_batches`` batches of ``states`` (exactly as many, with ``exact``)."""
    arr = np.asarray(windows)
    if arr.ndim != 2 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"windows must be a 2-D integer array (n, T), got dtype {arr.dtype} "
                         f"shape {arr.shape}")
    need = sum(len(hidden) for hidden, _ in states[:n_batches])
    if arr.shape[0] < need or (exact and arr.shape[0] != need):
        raise ValueError(f"windows has {arr.shape[0]} rows; the states' batches hold {need} "
                         "windows (windows must be those the states were computed from)")


@contextlib.contextmanager
def replaced_modules(model, modules: dict):
    """Within the block, ``model.get_submodule(name)`` is ``modules[name]``; restored on exit.

    Raises
    ------
    ValueError
        If a name is not a submodule of ``model``.
    """
    saved = {}
    try:
        for name, new in modules.items():
            parent_name, _, child = name.rpartition(".")
            try:
                parent = model.get_submodule(parent_name)
                saved[name] = (parent, child, getattr(parent, child))
            except AttributeError as err:
                raise ValueError(f"{name!r} is not a submodule of the model") from err
            setattr(parent, child, new)
        yield
    finally:
        for parent, child, old in saved.values():
            setattr(parent, child, old)


@dataclass
class TrainResult:
    """What :func:`train` did: the curve, the losses and the cost."""

    curve: list                      #: [(step, value of evaluate())], step 0 first
    losses: list                     #: training loss (nats/token) of every step
    tokens: int                      #: tokens trained on (predicted positions + 1 per window)
    cpu_s: float                     #: process CPU time of the loop, evaluations excluded
    extra: dict = field(default_factory=dict)


def train(model, first: int, params, states: list, windows, steps: int, lr: float,
          evaluate: Callable | None = None, eval_at=(), progress: Callable | None = None,
          *, start: int = 0, optimizer=None, teacher: list | None = None) -> TrainResult:
    """Fine-tune ``params`` for ``steps`` steps of Adam on next-token cross-entropy (or, with
    ``teacher``, on distillation from the teacher's log-probabilities).

    Parameters
    ----------
    model : the transformers model, its tail (layers ``first``..) holding the trainable modules
    first : int, the first trained layer
    params : iterable of tensors with ``requires_grad`` (their values change in place), or of
        Adam parameter groups (dicts with "params" and optionally their own "lr")
    states : list of (hidden, kwargs), one batch per step (:func:`layer_inputs` of ``windows``)
    windows : integer array (n, T), the training windows, in the batches of ``states``
    steps : int >= 1, at most ``len(states)`` (no batch is used twice)
    lr : float > 0, Adam's learning rate (betas 0.9, 0.999; no weight decay)
    evaluate : callable () -> float, optional, called at step 0 and after each step in ``eval_at``
    progress : callable wrapping the step range (e.g. tqdm), optional
    start : int, the step to begin at (0: the first batch): with ``optimizer``, a run that
        stopped at ``start`` goes on exactly as if it had never stopped (Adam at a fixed
        learning rate has no schedule to resume); the curve then begins at ``start`` only if
        ``start`` is in ``eval_at``
    optimizer : the torch.optim.Adam of the run being continued (its state carries over);
        None builds a new one over ``params``
    teacher : list, optional, one float32 tensor (B, T-1, V) of log-probabilities per batch
        (:func:`teacher_log_probs`): the loss is then :func:`distillation_loss`

    Raises
    ------
    ValueError
        If ``steps`` is not a positive integer or exceeds the batches, ``lr`` is not a
        positive finite number (numpy reals accepted), or ``windows`` has fewer rows than the
        batches of the ``steps`` steps hold.
    """
    import time

    import torch
    from torch.nn import functional as F

    _check_first(model, first)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    if steps > len(states):
        raise ValueError(f"steps={steps} needs {steps} batches of training windows, "
                         f"got {len(states)}")
    if (isinstance(lr, (bool, np.bool_)) or not isinstance(lr, numbers.Real)
            or not 0 < float(lr) < math.inf):
        raise ValueError(f"lr must be a positive finite number, got {lr!r}")
    lr = float(lr)
    if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < steps:
        raise ValueError(f"start must be an integer in [0, steps), got {start!r}")
    if teacher is not None and len(teacher) < steps:
        raise ValueError(f"teacher has {len(teacher)} batches; steps={steps} needs {steps}")
    _check_windows(windows, states, steps, exact=False)
    if optimizer is None:
        params = list(params)
        if not (params and isinstance(params[0], dict)):      # else Adam's parameter groups
            params = [p for p in params if p.requires_grad]
        opt = torch.optim.Adam(params, lr=lr, foreach=False)
    else:
        opt = optimizer
    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    curve = ([(start, evaluate())] if evaluate is not None and (start == 0 or start in eval_at)
             else [])
    losses, tokens, cpu = [], 0, 0.0
    i = sum(len(hidden) for hidden, _kw in states[:start])
    rng = range(start, steps) if progress is None else progress(range(start, steps))
    for step in rng:
        t0 = time.process_time()
        hidden, kwargs = states[step]
        batch = ids[i:i + len(hidden)].to(hidden.device)                 # (B, T)
        i += len(hidden)
        logits = tail_logits(model, first, hidden, kwargs)                # (B, T, V)
        if teacher is None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                   batch[:, 1:].reshape(-1))
        else:
            loss = distillation_loss(logits[:, :-1], teacher[step].to(logits.device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        tokens += batch.numel()
        cpu += time.process_time() - t0
        if evaluate is not None and step + 1 in eval_at:
            curve.append((step + 1, evaluate()))
    return TrainResult(curve, losses, tokens, cpu, {"optimizer": opt})


def teacher_log_probs(model, first: int, states: list) -> list:
    """The model's log-probabilities of every next token, float32 (B, T-1, V) per batch of
    ``states`` (:func:`layer_inputs`), computed once under no_grad: a distillation teacher.
    The log-softmax is float64's (the logits' own dtype in lecture 11's float64 model), rounded
    once to float32 for storage."""
    import torch

    _check_first(model, first)
    out = []
    with torch.no_grad():
        for hidden, kwargs in states:
            logits = tail_logits(model, first, hidden, kwargs)[:, :-1]   # (B, T-1, V)
            out.append(torch.log_softmax(logits.double(), dim=-1).float())
    return out


def distillation_loss(student_logits, teacher_log_probs):
    """Knowledge distillation's loss: the cross-entropy of the student's next-token
    distribution against the teacher's, ``-Σ_v p_T(v) log p_S(v)``, averaged over positions
    (nats per token; temperature 1, the full vocabulary).

    This is LLM-QAT's loss (Liu et al. 2023, arXiv 2305.17888, eq. 1): it equals the KL
    divergence KL(p_T || p_S) plus the teacher's entropy, which does not depend on the
    student, so both have the same gradient.

    Parameters
    ----------
    student_logits : float tensor (..., V)
    teacher_log_probs : float tensor of the same shape, log-probabilities (each row's
        logsumexp is 0); taken to the student's dtype before ``exp`` (float32 teacher
        storage, float64 arithmetic in lecture 11)

    Raises
    ------
    ValueError
        If the shapes differ.
    """
    import torch

    if student_logits.shape != teacher_log_probs.shape:
        raise ValueError(f"student_logits {tuple(student_logits.shape)} and teacher_log_probs "
                         f"{tuple(teacher_log_probs.shape)} must have the same shape")
    log_p = torch.log_softmax(student_logits, dim=-1)
    return -(teacher_log_probs.to(log_p.dtype).exp() * log_p).sum(-1).mean()


def master_linear(linear):
    """Full fine-tuning's module for ``linear``: a trainable float32 copy of its weight (its
    bias copied, frozen) that computes in its input's dtype, so that it can sit in the float64
    model that computes (float32 values are exact in float64; the weight's gradient is rounded
    once, to float32). The original is left as it was.

    Parameters
    ----------
    linear : torch.nn.Linear, weight (out, in), bias (out,) or None

    Returns
    -------
    torch.nn.Module with ``weight`` a float32 Parameter (out, in), ``bias`` a float32 buffer
    or None; ``forward(x)`` maps (..., in) to (..., out) in ``x``'s dtype:
    ``x Wᵀ + b`` (``torch.nn.functional.linear``).
    """
    import torch
    from torch import nn

    from numfmt.torch.train.linear import linear_in_input_dtype

    class MasterLinear(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(linear.weight.detach().float().clone())
            self.register_buffer("bias", None if linear.bias is None
                                 else linear.bias.detach().float().clone())
            self.in_features, self.out_features = linear.in_features, linear.out_features

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return linear_in_input_dtype(x, self.weight, self.bias)

    return MasterLinear()


def tensor_bytes(tensors) -> int:
    """Bytes held by the distinct storages of ``tensors`` (None skipped): what torch holds."""
    seen, total = set(), 0
    for t in tensors:
        if t is None:
            continue
        key = (t.untyped_storage().data_ptr(), t.device)
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def optimizer_state_bytes(opt) -> int:
    """Bytes of the optimizer's state tensors (Adam: step, exp_avg, exp_avg_sq per parameter)."""
    return tensor_bytes(v for state in opt.state.values() for v in state.values()
                        if hasattr(v, "untyped_storage"))


# ---------------------------------------------------------------------------------------------
# Lecture 11's lab: the model, its three sets of windows, frozen-prefix states, PTQ as stored
# ---------------------------------------------------------------------------------------------
@dataclass
class Lab:
    """The model and the windows a fine-tuning lecture reads, split into trained tail and
    frozen prefix."""

    ck: object                      # lectures.llm.Checkpoint
    w: object                       # the lecture's workload (see :func:`open_lab`)
    eval_windows: np.ndarray        # (n_eval, eval_len)
    calib_windows: np.ndarray       # (n_calib, calib_len)
    train_windows: np.ndarray       # (steps, train_len)
    tail: dict                      # name -> nn.Linear of the trained layers
    prefix: list                    # names of the frozen linears before them
    progress: object = None         # a tqdm bar, or None
    device: str = "cpu"
    model: object = None            # what computes: float64_copy(ck.model) (open_lab)


def open_lab(w, ck=None) -> Lab:
    """Load the model (``ck``: an already loaded Checkpoint) and cut the three sets of windows:
    evaluation and calibration as lectures 08-09, training from the tokens they leave free.

    ``w`` is a workload with ``n_eval``, ``eval_len``, ``n_calib``, ``calib_len``, ``steps``,
    ``train_len`` and ``first`` (the first trained decoder layer)."""
    from lectures.llm.checkpoint import load_checkpoint
    from lectures.llm.hooks import decoder_linears, layer_of
    from lectures.llm.lab import float64_copy
    from lectures.llm.text import (calibration_windows, corpus_tokens, eval_windows,
                                   training_windows)

    ck = load_checkpoint() if ck is None else ck
    tokens = corpus_tokens(ck.tokenizer)
    ev = eval_windows(tokens, w.n_eval, w.eval_len)
    cal = calibration_windows(tokens, w.n_calib, w.calib_len)
    tr = training_windows(tokens, w.steps, w.train_len,
                          avoid=((w.n_eval, w.eval_len, 0), (w.n_calib, w.calib_len, 1)))
    linears = decoder_linears(ck.model)
    tail = {n: m for n, m in linears.items() if layer_of(n)[0] >= w.first}
    prefix = [n for n in linears if n not in tail]
    device = str(next(ck.model.parameters()).device)
    return Lab(ck, w, ev, cal, tr, tail, prefix, None, device, float64_copy(ck.model))


def tick(lab: Lab, n: int = 1) -> None:
    """Advance the lab's progress bar (if any) by ``n`` evaluations."""
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
    from lectures.llm.hooks import swapped_weights

    model = lab.model
    with contextlib.ExitStack() as stack:
        if prefix_weights:
            stack.enter_context(swapped_weights(model, prefix_weights))
        ev = layer_inputs(model, lab.eval_windows, lab.w.first, batch_size=len(lab.eval_windows))
        tr = layer_inputs(model, lab.train_windows, lab.w.first, batch_size=1)
    return States(ev, tr)


def tail_nll(lab: Lab, states: States) -> np.ndarray:
    """Per-window NLL (nats/token) of the model as it is now, from frozen-prefix states."""
    tick(lab)
    return tail_window_nll(lab.model, lab.w.first, states.eval, lab.eval_windows)


def ppl_of(nll: np.ndarray) -> float:
    """Perplexity, exp(mean NLL), of per-window NLLs (nats per token)."""
    return float(np.exp(np.mean(nll)))


#: A stored scale: float16, as GPTQ checkpoints (numfmt.packing.gptq).
SCALE_BITS = 16


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
    from lectures.llm.hooks import decoder_linears
    from numfmt.ptq import rtn

    def one(mod):
        w = mod.weight.detach().cpu().numpy()                            # float32 (out, in)
        r = rtn(w.astype(np.float64), bits, group, symmetric=False, partial_last_group=True)
        s16 = r.scales.astype(np.float16)
        g = np.arange(w.shape[1]) // group
        codes = np.clip(np.rint(w / s16.astype(np.float32)[:, g]) + r.zeros[:, g], 0,
                        2**bits - 1)
        return StoredInt(codes.astype(np.uint8), s16, r.zeros, group)
    return {n: one(m) for n, m in decoder_linears(lab.ck.model).items()}


def gptq_stored(lab: Lab, bits: int, group: int) -> dict:
    """GPTQ on every decoder linear, calibrated layer by layer on the calibration windows with
    lecture 09's loop (sequential: later layers see the earlier ones as stored)."""
    from lectures.llm.calibrate import INPUT_GROUPS, calibrate_layers
    from lectures.llm.hooks import decoder_linears
    from numfmt.ptq import gptq, hessian

    def q(w, x):          # its .weight is what the next layers see: the model as stored
        return stored_from(gptq(w, hessian(x), bits, group, symmetric=False,
                                partial_last_group=True), group)

    results = {}
    calibrate_layers(lab.model, lab.calib_windows, q, desc=f"GPTQ INT{bits} g{group}",
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
    return {n: out[n] for n in decoder_linears(lab.ck.model)}


def bits_per_weight(lab: Lab, bits: int, group: int) -> float:
    """Codes plus a float16 scale and a ``bits``-bit zero point per row and group, averaged
    over every decoder linear (lecture 09's count)."""
    from lectures.llm.hooks import decoder_linears
    shapes = [tuple(m.weight.shape) for m in decoder_linears(lab.ck.model).values()]
    total = sum(o * i for o, i in shapes)
    return bits + sum(o * -(-i // group) * (SCALE_BITS + bits) for o, i in shapes) / total


@dataclass
class Start:
    """A PTQ model the fine-tuning starts from: its frozen layers packed, its tail as stored."""

    label: str                  # "RTN" or "GPTQ"
    bits: int
    group: int
    packed: dict                # frozen linear name -> numfmt.packing.GPTQWeight
    tail: dict                  # trained linear name -> StoredInt
    states: States
    bits_per_weight: float      # codes, scales and zero points at their own widths
    packed_bits: float          # the same in GPTQ's layout (qweight, scales, qzeros, g_idx)

    @property
    def setting(self) -> str:
        return f"INT{self.bits} g{self.group}"


def make_start(lab: Lab, label: str, bits: int, group: int) -> Start:
    """Quantize every decoder linear (``label`` "RTN" or "GPTQ"), pack the frozen ones in
    GPTQ's layout and run the frozen layers, served from the packed form, over every window
    once."""
    import torch

    stored = rtn_stored(lab, bits, group) if label == "RTN" else gptq_stored(lab, bits, group)
    packed = {n: pack(stored[n]) for n in lab.prefix}
    tail = {n: stored[n] for n in lab.tail}
    n_weights = sum(s.codes.size for s in stored.values())
    packed_bytes = (sum(gw.nbytes for gw in packed.values())
                    + sum(pack(s).nbytes for s in tail.values()))
    del stored
    weights = {n: torch.from_numpy(unpack(gw)) for n, gw in packed.items()}
    states = frozen_states(lab, weights)
    return Start(label, bits, group, packed, tail, states, bits_per_weight(lab, bits, group),
                 8 * packed_bytes / n_weights)


def packed_model_nll(lab: Lab, packed: dict) -> np.ndarray:
    """Per-window NLL of the whole model with every decoder linear unpacked from ``packed``
    (name -> GPTQWeight): a plain forward pass over the evaluation windows, no fake quantizer."""
    import torch
    from lectures.llm.evaluate import window_nll
    from lectures.llm.hooks import swapped_weights

    weights = {n: torch.from_numpy(unpack(gw)) for n, gw in packed.items()}
    tick(lab)
    with swapped_weights(lab.model, weights):
        return window_nll(lab.model, lab.eval_windows, batch_size=len(lab.eval_windows))


__all__ = ["layer_inputs", "tail_logits", "tail_window_nll", "replaced_modules", "train",
           "TrainResult", "teacher_log_probs", "distillation_loss", "master_linear", "tensor_bytes",
           "optimizer_state_bytes", "Lab", "open_lab", "tick", "States", "frozen_states",
           "tail_nll", "ppl_of", "SCALE_BITS", "StoredInt", "stored_from", "pack", "unpack",
           "rtn_stored", "gptq_stored", "bits_per_weight", "Start", "make_start",
           "packed_model_nll"]
