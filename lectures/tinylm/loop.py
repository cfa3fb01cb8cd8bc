"""A short, seeded training loop for :class:`~lectures.tinylm.model.TinyLM`
(:mod:`lectures.tinylm.runs` runs many of them on worker processes).

One run: AdamW (Loshchilov and Hutter 2019), linear warmup then cosine decay, gradient-norm
clipping at 1, and, when the recipe asks for it (FP16), the
:class:`numfmt.torch.train.DynamicLossScaler`. The loss is reported in bits per byte
(cross-entropy in nats / ln 2). Validation runs on fixed windows at a few steps.

Determinism: a run sets torch to one thread, so its numbers do not depend on how many cores the
machine has or how many runs share it; the data order, the initial weights and every
quantizer's random draws come from the run's seed. And by default a run computes in float64:
the weights, the optimizer state, every activation and gradient, and the GEMMs, whose operands
the recipe quantizes exactly as it would FP32 ones (the library's float64 emulation, see
:class:`numfmt.torch.train.QuantLinear`). In float32 the printed losses would depend on the
CPU: AVX2 and AVX-512 kernels (ATen's, MKL's) add in different orders, a last-bit difference
moves a value across a rounding boundary of some quantizer, and training amplifies it into the
third decimal of the loss. In float64 the kernels still differ in the last bits, but a float64
last bit is 2^-29 of a float32 one: no quantizer's decision moves, and the loss stays the same
to every printed digit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F

import numfmt.torch.train as ntt
from lectures.tinylm.data import Batches, split, val_windows
from lectures.tinylm.model import TinyLM, TinyLMConfig

LN2 = math.log(2.0)


@dataclass(frozen=True)
class TrainConfig:
    """One training run's settings (the model's shape is :class:`TinyLMConfig`)."""
    steps: int = 200
    batch: int = 8                 # sequences per step (tokens per step = batch * context)
    lr: float = 3e-3
    warmup: int = 20
    weight_decay: float = 0.1
    clip: float = 1.0
    eval_steps: tuple = ()         # steps after which validation runs (the last always does)
    val_windows: int = 64
    seed: int = 0
    spike: tuple | None = None     # (step, layer name, factor): that step's input to the layer
                                   # is multiplied by factor (demo 2's outlier)
    dtype: str = "float64"         # what the run computes in: "float64" or "float32"
    loss_scaler: tuple = (2.0 ** 16, 2.0, 0.5, 2000)   # DynamicLossScaler's init_scale,
                                   # growth_factor, backoff_factor, growth_interval (these
                                   # defaults are torch.amp.GradScaler's), for FP16 recipes

    def schedule(self, step: int) -> float:
        """Learning-rate multiplier at ``step`` (0-based): linear warmup, cosine to 10%."""
        if step < self.warmup:
            return (step + 1) / self.warmup
        t = (step - self.warmup) / max(1, self.steps - self.warmup)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t))


@dataclass
class RunResult:
    """What one run measured. Losses in bits per byte."""
    recipe: str
    seed: int
    train_loss: np.ndarray                     # (steps,) float64, the loss of each step's batch
    val_steps: list                            # steps after which validation ran
    val_loss: list                             # its loss at each of them
    skipped: int = 0                           # optimizer steps skipped by the loss scaler
    loss_scale: list = field(default_factory=list)   # scaler's scale after each step
    finite: bool = True                        # every training loss finite
    extras: dict = field(default_factory=dict)       # what a probe recorded

    @property
    def final_val(self) -> float:
        return self.val_loss[-1]


@torch.no_grad()
def evaluate(model: TinyLM, x: torch.Tensor, y: torch.Tensor, batch: int = 16) -> float:
    """Mean next-byte cross-entropy in bits per byte over windows x, y (each (N, T) int64)."""
    total = 0.0
    for i in range(0, len(x), batch):
        logits = model(x[i:i + batch])                               # (b, T, vocab)
        total += F.cross_entropy(logits.flatten(0, 1), y[i:i + batch].flatten(),
                                 reduction="sum").item()
    return total / y.numel() / LN2


def train(recipe, cfg: TrainConfig = TrainConfig(), model_cfg: TinyLMConfig = TinyLMConfig(),
          *, probe=None, capture: bool = False, device: str = "cpu",
          threads: int | None = 1, optimizer=None, model_transform=None) -> RunResult:
    """Train a fresh TinyLM under ``recipe`` and return its losses.

    Parameters
    ----------
    recipe : str or numfmt.torch.train.Recipe
    cfg, model_cfg : the run's and the model's settings
    probe : callable(step, model, loss, batch) or None
        Called after each backward pass, before the optimizer step (gradients are the scaled
        ones when a loss scaler is on), with the step's ``batch`` (x, y); what it returns, if
        not None, is stored in ``extras[step]``. Use it to read the captured GEMM operands.
        It must leave the model's weights and gradients as it found them.
    device : "cpu" or "cuda"
    capture : keep every linear's raw GEMM operands of the latest step (``last_operands``)
    threads : torch's CPU threads for the run (None leaves the setting alone)
    optimizer : callable(param_groups, lr=, betas=) -> torch.optim.Optimizer, optional
        Builds the optimizer instead of torch.optim.AdamW (e.g. a
        ``functools.partial(numfmt.torch.train.optim.AdamW, state="int8")``).
    model_transform : callable(TinyLM) -> torch.nn.Module, optional
        Applied to the fresh model before training (e.g. swapping its linears for another
        library's training layers).

    Returns
    -------
    RunResult
    """
    if threads is not None:
        torch.set_num_threads(threads)
    rec = ntt.get_recipe(recipe)
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f"TrainConfig.dtype must be 'float32' or 'float64', got {cfg.dtype!r}")
    model = TinyLM(model_cfg, rec, seed=cfg.seed).to(device=device,
                                                      dtype=getattr(torch, cfg.dtype))
    for m in model.linears().values():
        m.capture = capture
    if model_transform is not None:
        model = model_transform(model)
    data = split()
    batches = Batches(data, cfg.batch, model_cfg.context, cfg.seed, device)
    vx, vy = (t.to(device) for t in val_windows(data, model_cfg.context, cfg.val_windows))
    decay = [p for n, p in model.named_parameters() if p.dim() == 2 and "embed" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() == 2 and "embed" not in n)]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    opt = (optimizer(groups, lr=cfg.lr, betas=(0.9, 0.95)) if optimizer is not None else
           torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.95), foreach=False))
    params = [p for g in opt.param_groups for p in g["params"]]
    scaler = ntt.DynamicLossScaler(*cfg.loss_scaler) if rec.loss_scaling else None
    spike_handle = None
    losses, val_steps, val_loss, scales, extras = [], [], [], [], {}
    skipped = 0
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = cfg.lr * cfg.schedule(step)
        if cfg.spike is not None and step == cfg.spike[0]:
            layer, factor = model.linears()[cfg.spike[1]], cfg.spike[2]
            spike_handle = layer.register_forward_pre_hook(lambda m, a: (a[0] * factor,))
        x, y = batches.next()
        logits = model(x)                                            # (B, T, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())    # nats
        if spike_handle is not None:
            spike_handle.remove()
            spike_handle = None
        opt.zero_grad(set_to_none=True)
        (scaler.scale_loss(loss) if scaler else loss).backward()
        if probe is not None:
            out = probe(step, model, loss, (x, y))
            if out is not None:
                extras[step] = out
        if scaler is not None:
            found_inf = scaler.unscale_(params)
            if not found_inf:
                torch.nn.utils.clip_grad_norm_(params, cfg.clip)
                opt.step()
            else:
                skipped += 1
            scaler.update(found_inf)
            scales.append(float(scaler.scale))
        else:
            torch.nn.utils.clip_grad_norm_(params, cfg.clip)
            opt.step()
        losses.append(loss.item() / LN2)
        if step + 1 in cfg.eval_steps or step + 1 == cfg.steps:
            val_steps.append(step + 1)
            val_loss.append(evaluate(model, vx, vy))
    train_loss = np.array(losses)
    return RunResult(rec.name, cfg.seed, train_loss, val_steps, val_loss, skipped, scales,
                     bool(np.isfinite(train_loss).all()), extras)


def train_job(job) -> RunResult:
    """``train(recipe, cfg, model_cfg)`` for ``job = (recipe, cfg, model_cfg[, device])``: one
    job of :func:`lectures.tinylm.runs.run_all` (one torch thread on the CPU)."""
    recipe, cfg, model_cfg, *rest = job
    device = rest[0] if rest else "cpu"
    return train(recipe, cfg, model_cfg, device=device, threads=1 if device == "cpu" else None)
