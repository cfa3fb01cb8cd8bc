"""
Lecture 13: the memory of training and the real stack.

The question
    Where do the bytes of training go, and how do the libraries practitioners call cut them?
    Most of them are not in the GEMMs that lecture 10 quantized: FP32 master weights, Adam's
    two moments, gradients, the activations saved for the backward, and what crosses the
    network. And does the course's emulation compute what the real libraries compute?

      Demo 1  The bill: every byte of a training step of Llama 3.2 1B and Llama 3.1 8B, per GPU,
              from their configurations (exact counts), under data parallel and FSDP over
              8 GPUs, with and without activation checkpointing; lecture 10's model counted
              by torch itself.
      Demo 2  8-bit Adam: the dynamic map against linear INT8 on the moments of a real run,
              and lecture 10's model trained with FP32, BF16, 8-bit and FP8 moments.
      Demo 3  BF16 master weights: the updates round-to-nearest loses, and stochastic
              rounding and Kahan compensation bringing them back, measured.
      Demo 4  The real stack: the calls a user writes for each recipe of lecture 10
              (TransformerEngine, torchao); torchao's Float8Linear (tensorwise and rowwise
              recipes) run on this CPU beside numfmt's emulation of the same recipe, operand
              by operand; then lecture 10's model trained by both.
      Demo 5  FP8 communication: the bytes an FSDP step all-gathers and reduce-scatters, in
              BF16 and with torchao's FP8 all-gather; then FP8 primary weights as that
              all-gather keeps them, in a training run of lecture 10's model beside a BF16
              all-gather, paired by seed.

How to read the output
    Counts (bytes, parameters) are exact and the same on every machine. Losses are
    cross-entropies in bits per byte on lecture 10's validation windows, trained in float64
    (lecture 10 says why), so they too print the same on every machine; a difference between
    two runs is a finding only when their per-seed difference (same data, same initial weights)
    exceeds its range across seeds, which is printed, and "within noise" otherwise. The
    torchao comparison prints what is exact (FP8 codes, scales, values within float32 ulps)
    and checks torchao's float32 GEMM outputs and training losses against a bound instead of
    printing them: their last bits depend on the CPU's kernels.

Run
    python lectures/13_memory_of_training.py           (120 steps, 3 seeds: about 340
                                                         CPU-seconds, 3 min on 2 idle cores)
    python lectures/13_memory_of_training.py --quick   (12 steps, 2 seeds: under a minute)
    Needs torchao (pip install --no-deps torchao==0.18.0) for demo 4; transformers is not
    needed. Training runs use 2 worker processes with one torch thread each.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import time
from dataclasses import dataclass, replace

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import numfmt.torch.train as ntt  # noqa: E402
from console import (lecture_parser, print_header, print_observations,  # noqa: E402
                     print_paragraph, print_table, print_title, run_lecture)
from console.i18n import N_  # noqa: E402
from lectures.i18n import domain  # noqa: E402
from lectures.machine import quiet_torch  # noqa: E402
from lectures.tinylm import runs as tinylm_runs  # noqa: E402
from lectures.tinylm.loop import TrainConfig, train  # noqa: E402
from lectures.tinylm.model import TinyLM, TinyLMConfig  # noqa: E402
from lectures.tinylm.runs import (Runs, in_processes, progress_lines,  # noqa: E402
                                  run_line_with_time)
from numfmt import FP8_E4M3, memory  # noqa: E402
from numfmt.blocks import mx_quantize  # noqa: E402
from numfmt.optim_state import blockwise_dequantize, blockwise_quantize  # noqa: E402
from numfmt.torch.train.optim import AdamW  # noqa: E402

_ = domain("lecture13").gettext

MODEL = TinyLMConfig()                      # lecture 10's model: d 128, 2 layers, context 64
BATCH = 8
GB = 1e9


@dataclass(frozen=True)
class Workload:
    steps: int
    seeds: tuple
    eval_every: int
    val_windows: int

    def train_config(self, seed: int) -> TrainConfig:
        evals = tuple(range(self.eval_every, self.steps + 1, self.eval_every))
        return TrainConfig(steps=self.steps, batch=BATCH, warmup=max(1, self.steps // 10),
                           eval_steps=evals, val_windows=self.val_windows, seed=seed)


FULL = Workload(steps=120, seeds=(0, 1, 2), eval_every=30, val_windows=64)
QUICK = Workload(steps=12, seeds=(0, 1), eval_every=6, val_windows=8)


# ---------------------------------------------------------------------------- the runs
#: numfmt's emulation of torchao's tensorwise recipe as convert_to_float8_training runs it on
#: a float32 model: lecture 10's fp8_current operands (E4M3 x and W, E5M2 dy, one exact FP32
#: scale per tensor, current scaling), with float32 GEMM outputs (Float8Linear returns its
#: input's dtype) and every linear converted, lm_head included. Lecture 10's fp8_current
#: instead rounds its outputs to BF16 and keeps lm_head in BF16, as TransformerEngine runs a
#: BF16 model.
TORCHAO_TENSORWISE = replace(ntt.RECIPES["fp8_current"], name="torchao_tensorwise",
                             output="fp32", high_precision_layers=())
#: torchao's rowwise recipe: E4M3 everywhere, one power-of-two (RCEIL) scale per row of each
#: operand along its GEMM's inner dimension, every linear converted. Its outputs are BF16:
#: torch._scaled_mm has no float32 output with rowwise scales (torchao/float8/float8_ops.py).
_ROW = ntt.OperandSpec("e4m3", "row", "e8m0", "rceil")
TORCHAO_ROWWISE = ntt.Recipe("torchao_rowwise", (_ROW, _ROW), (_ROW, _ROW), (_ROW, _ROW),
                             output="bf16")

#: label -> (recipe, optimizer keywords of numfmt's AdamW; None: torch.optim.AdamW)
RUNS = {
    "FP32 Adam": ("fp32", None),
    "BF16 moments": ("fp32", {"state": "bf16"}),
    "8-bit moments": ("fp32", {"state": "int8"}),
    "FP8 moments": ("fp32", {"state": "fp8"}),
    "BF16 weights, nearest": ("fp32", {"master": "bf16"}),
    "BF16 weights, stochastic": ("fp32", {"master": "bf16_sr"}),
    "BF16 weights, Kahan": ("fp32", {"master": "bf16_kahan"}),
    "FP8 tensorwise (numfmt)": (TORCHAO_TENSORWISE, None),
    "FP8 tensorwise (torchao)": ("torchao:tensorwise", None),
}
N_("FP32 Adam"), N_("BF16 moments"), N_("8-bit moments"), N_("FP8 moments")
N_("BF16 weights, nearest"), N_("BF16 weights, stochastic"), N_("BF16 weights, Kahan")
MOMENT_RUNS = ("FP32 Adam", "BF16 moments", "8-bit moments", "FP8 moments")
MASTER_RUNS = ("FP32 Adam", "BF16 weights, nearest", "BF16 weights, stochastic",
               "BF16 weights, Kahan")
STACK_RUNS = ("FP32 Adam", "FP8 tensorwise (numfmt)", "FP8 tensorwise (torchao)")
N_("FP8 tensorwise (numfmt)"), N_("FP8 tensorwise (torchao)")
#: torchao trains the "FP8 tensorwise (torchao)" runs and runs demo 4; without it they are skipped
HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
#: How close torchao's float32 training losses must stay to numfmt's float64 emulation
#: (TORCHAO_TENSORWISE) over the first EARLY_STEPS steps, in bits/byte. Measured here: 0.0040,
#: 0.0012 and 0.0080 on the full run's 3 seeds, 0.0019 and 0.0011 on the quick run's 2;
#: lecture 10's fp8_current (BF16 outputs and head) reaches 0.0072, 0.0060 and 0.0147. Later
#: the two drift apart as any two runs whose last bits differ do (measured here over 120
#: steps: up to 0.3 bits/byte in a step's training loss, about what separates two seeds).
TORCHAO_TOLERANCE = 0.01
EARLY_STEPS = 10


def to_torchao(model: TinyLM, recipe: str = "tensorwise") -> TinyLM:
    """``model`` with every QuantLinear replaced by a torch.nn.Linear holding the same weights,
    converted by torchao's ``convert_to_float8_training`` under ``recipe`` (in place)."""
    with quiet_torch():
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, ntt.QuantLinear):
                lin = torch.nn.Linear(child.in_features, child.out_features, bias=False,
                                      dtype=child.weight.dtype, device=child.weight.device)
                with torch.no_grad():
                    lin.weight.copy_(child.weight)
                setattr(module, name, lin)
    return convert_to_float8_training(
        model, config=Float8LinearConfig.from_recipe_name(recipe))


def _run_job(job):
    """One training run (a module-level function: worker processes import it)."""
    label, seed, cfg = job
    recipe, kw = RUNS[label]
    if _is_torchao(recipe):             # torchao's layers compute in float32 (or BF16)
        transform = functools.partial(to_torchao, recipe=recipe.split(":", 1)[1])
        return train("fp32", replace(cfg, dtype="float32"), MODEL, model_transform=transform)
    lost = []
    opt = None if kw is None else functools.partial(AdamW, seed=seed, **kw)
    result = train(recipe, cfg, MODEL, optimizer=_recording(opt, lost) if opt else None)
    result.extras["lost"] = lost
    return result


def _is_torchao(recipe) -> bool:
    """Whether a recipe of :data:`RUNS` is one torchao trains ("torchao:<recipe name>")."""
    return isinstance(recipe, str) and recipe.startswith("torchao:")


def _recording(factory, lost):
    """An optimizer factory whose optimizer appends its ``lost`` counts after every step."""
    def build(groups, **kw):
        o = factory(groups, **kw)
        step = o.step

        def recorded_step(closure=None):
            out = step(closure)
            lost.append(tuple(o.lost))
            return out
        o.step = recorded_step
        return o
    return build


def run_line(i: int, n: int, label: str, r) -> str:
    """The progress line of a finished run (a torchao run's loss is float32: its digits vary
    by CPU, so it is not printed)."""
    fields = dict(i=i, n=n, label=_(label), seed=r.seed, loss=r.final_val)
    if _is_torchao(RUNS[label][0]):
        return _("run {i}/{n}: {label}, seed {seed}: done").format(**fields)
    return _("run {i}/{n}: {label}, seed {seed}: validation {loss:.3f} bits/byte").format(
        **fields)


def run_all(w: Workload, workers: int = 2) -> Runs:
    """Train every label of :data:`RUNS` for every seed of the workload."""
    labels = [label for label in RUNS
              if HAS_TORCHAO or not _is_torchao(RUNS[label][0])]
    jobs = [(label, (label, seed, w.train_config(seed))) for label in labels
            for seed in w.seeds]
    update, _close = progress_lines(len(jobs), run_line)
    return tinylm_runs.run_all(w, jobs, _run_job, workers=workers, progress=update)


def compare(results: Runs, a: str, b: str) -> dict:
    """Final loss of a minus b, paired by seed (same data, same initial weights): the mean
    difference, and the noise: the range of the per-seed differences. A finding when the
    mean exceeds that range (so every seed's difference has the mean's sign)."""
    return tinylm_runs.compare(results, a, b, noise="range")


def verdict_cells(c: dict) -> list:
    """[difference, paired range, verdict] as table cells."""
    return [f"{c['gap']:+.4f}", f"{c['noise']:.4f}",
            _("beyond noise") if c["finding"] else _("within noise")]


VERDICT_HEADERS = (N_("Δ loss vs FP32 Adam"), N_("paired range"), N_("verdict"))


def curve_rows(runs: Runs, labels) -> tuple:
    """Validation loss at each evaluation step, mean over seeds: (steps, rows)."""
    steps = runs.results[labels[0]][0].val_steps
    rows = [[_(label)] + [f"{v:.3f}" for v in
                          np.mean([r.val_loss for r in runs.results[label]], axis=0)]
            for label in labels]
    return steps, rows


# ----------------------------------------------------------------------- demo 1: the bill
SHAPES = {"Llama 3.2 1B": memory.LLAMA_3_2_1B, "Llama 3.1 8B": memory.LLAMA_3_1_8B}
SEQ = 4096                                   # one sequence of 4,096 tokens per GPU
BILL_PRECISIONS = ("BF16 mixed", "BF16 mixed, 8-bit Adam", "FP8 weights, 8-bit Adam",
                   "pure BF16 + Kahan")
N_("BF16 mixed"), N_("BF16 mixed, 8-bit Adam"), N_("FP8 weights, 8-bit Adam")
N_("pure BF16 + Kahan"), N_("FP32")
SETUPS = (("dp", 1, False), ("fsdp", 8, False), ("fsdp", 8, True))
#: The recipes' labels in the bill's table (numfmt.memory.PRECISIONS names them in full)
BILL_LABELS = {"BF16 mixed": N_("BF16 mixed"), "BF16 mixed, 8-bit Adam": N_("+ 8-bit Adam"),
               "FP8 weights, 8-bit Adam": N_("FP8 W + 8-bit Adam"),
               "pure BF16 + Kahan": N_("pure BF16 + Kahan")}


@dataclass
class BillResult:
    params: dict            # model -> parameter count
    bills: dict             # (model, precision, sharding, devices, checkpointing) -> bill
    tiny_params: int        # lecture 10's model, counted by torch
    tiny_shape_params: int  # the same from numfmt.memory's count of its shape
    tiny_measured: dict     # item -> bytes torch holds after one AdamW step
    tiny_counted: dict      # item -> bytes numfmt.memory counts (FP32 training)


def tiny_shape(cfg: TinyLMConfig = MODEL) -> memory.DecoderShape:
    return memory.DecoderShape(cfg.n_layers, cfg.d_model, cfg.d_ff, cfg.n_heads, cfg.n_heads,
                               cfg.head_dim, cfg.vocab_size, tied=False)


def tiny_measured(cfg: TinyLMConfig = MODEL) -> dict:
    """Bytes torch holds for lecture 10's model in FP32 after one torch.optim.AdamW step."""
    model = TinyLM(cfg, "fp32", seed=0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, cfg.vocab_size, (2, cfg.context))
    model(x).float().logsumexp(-1).mean().backward()
    opt.step()
    params = list(model.parameters())
    moments = sum(s[k].nbytes for s in opt.state.values() for k in ("exp_avg", "exp_avg_sq"))
    return {"weights": sum(p.nbytes for p in params),
            "gradients": sum(p.grad.nbytes for p in params), "moments": moments}


def demo1_bill() -> BillResult:
    """The bill of a training step, per GPU, for a 1B and an 8B model.

    Notice: in mixed precision the weights the GEMMs read are the smallest line; FP32 master
    weights, gradients and Adam's moments are 16 of the 18 bytes per parameter. 8-bit Adam
    cuts the moments from 8 to 2 bytes; FSDP divides everything but the activations by the
    number of GPUs, and activation checkpointing divides those by the layers' count.
    """
    bills, params = {}, {}
    for name, shape in SHAPES.items():
        params[name] = shape.params
        for prec in BILL_PRECISIONS:
            for sharding, n, ck in SETUPS:
                bills[(name, prec, sharding, n, ck)] = memory.memory_bill(
                    shape, memory.PRECISIONS[prec], 1, SEQ, devices=n, sharding=sharding,
                    checkpointing=ck)
    shape = tiny_shape()
    measured = tiny_measured()
    p = shape.params
    counted = {"weights": 4 * p, "gradients": 4 * p, "moments": 8 * p}
    tiny = TinyLM(MODEL, "fp32", seed=0)
    return BillResult(params, bills, sum(q.numel() for q in tiny.parameters()), p,
                      measured, counted)


ITEM_NAMES = {"weights": N_("weights (GEMM copy)"), "master": N_("master weights"),
              "gradients": N_("gradients"), "moments": N_("Adam moments"),
              "compensation": N_("Kahan buffer"), "activations": N_("activations"),
              "gathered": N_("all-gathered layer")}
#: The bill's columns: short names, the Kahan buffer counted with the master weights
COLUMNS = (("weights", ("weights",)), ("master", ("master", "compensation")),
           ("grads", ("gradients",)), ("m, v", ("moments",)), ("acts", ("activations",)),
           ("gather", ("gathered",)))
N_("weights"), N_("master"), N_("grads"), N_("m, v"), N_("acts"), N_("gather")


def setup_label(sharding: str, n: int, ck: bool) -> str:
    base = "DP" if sharding == "dp" else _("FSDP×{n}").format(n=n)
    return base + (_(" + ckpt") if ck else "")


def show_demo1(r: BillResult) -> None:
    print_header(_("Demo 1: the bill of a training step, per GPU"))
    print_paragraph(_("Exact byte counts from each model's configuration (Llama 3.2 1B: "
                      "{p1:,} parameters; Llama 3.1 8B: {p8:,}), one sequence of {seq:,} "
                      "tokens per GPU, BF16 activations as transformers' LLaMA saves them "
                      "(numfmt.memory; its test measures them with torch). In GB (10^9 "
                      "bytes).").format(p1=r.params["Llama 3.2 1B"],
                                        p8=r.params["Llama 3.1 8B"], seq=SEQ))
    print_paragraph(_("Columns: the GEMMs' copy of the weights, the master weights (with the "
                      "Kahan buffer of pure BF16), gradients, Adam's m and v, activations, and "
                      "the largest unit FSDP all-gathers at a time. Recipes: BF16 mixed "
                      "precision (FP32 master weights and moments); + 8-bit Adam: its moments in "
                      "8 bits; FP8 W: the layers' linears in FP8 for the GEMMs (embedding, head "
                      "and norms in BF16) and BF16 gradients; pure BF16: "
                      "no FP32 copy. FSDP×8: sharded over 8 GPUs; ckpt: activation "
                      "checkpointing."))
    for name in SHAPES:
        rows = []
        for prec in BILL_PRECISIONS:
            for sharding, n, ck in SETUPS:
                bill = r.bills[(name, prec, sharding, n, ck)]
                rows.append([_(BILL_LABELS[prec]), setup_label(sharding, n, ck)]
                            + [f"{sum(bill[k] for k in keys) / GB:.2f}" for _c, keys in COLUMNS]
                            + [f"{sum(bill.values()) / GB:.2f}"])
        print_table([name, _("sharding")] + [_(c) for c, _k in COLUMNS] + [_("total")], rows)
    b = r.bills
    one = b[("Llama 3.1 8B", "BF16 mixed", "dp", 1, False)]
    eight = b[("Llama 3.1 8B", "BF16 mixed, 8-bit Adam", "fsdp", 8, True)]
    print_table([_("lecture 10's model, FP32 training"), _("torch holds (bytes)"),
                 _("numfmt.memory counts")],
                [[_(ITEM_NAMES[k]), f"{v:,}", f"{r.tiny_counted[k]:,}"]
                 for k, v in r.tiny_measured.items()])
    print_observations([
        _("Llama 3.1 8B in BF16 mixed precision on one GPU: {states:.1f} GB of weights, "
          "master weights, gradients and moments, {acts:.1f} GB of activations for one "
          "sequence of {seq:,} tokens: no single 80 GB GPU holds it.").format(
            states=(one["weights"] + one["master"] + one["gradients"] + one["moments"]) / GB,
            acts=one["activations"] / GB, seq=SEQ),
        _("With 8-bit Adam, FSDP over 8 GPUs and activation checkpointing: {total:.1f} GB "
          "per GPU.").format(total=sum(eight.values()) / GB),
        _("Lecture 10's model: torch counts {p:,} parameters and numfmt.memory {q:,}; the "
          "bytes torch holds for weights, gradients and moments equal the count.").format(
            p=r.tiny_params, q=r.tiny_shape_params),
    ])


# ---------------------------------------------------------------------- demo 2: 8-bit Adam
@dataclass
class AdamStateResult:
    step: int
    rows: list          # [moment, format, relative error, share flushed to 0]
    errors: dict        # (moment, format) -> (relative error, flushed share)
    steps: list
    curves: list        # rows of curve_rows
    verdicts: dict      # label -> compare() against FP32 Adam
    state_bytes: dict   # label -> bytes of the moments of lecture 10's model


def _moments_of_a_run(steps: int) -> tuple:
    """Adam's m and v of every 2-D weight of lecture 10's model after ``steps`` FP32 steps."""
    keep = {}

    def grab(groups, **kw):
        o = torch.optim.AdamW(groups, foreach=False, **kw)
        keep["opt"] = o
        return o
    train("fp32", TrainConfig(steps=steps, batch=BATCH, warmup=2, val_windows=2),
          MODEL, optimizer=grab)
    st = [s for s in keep["opt"].state.values() if s["exp_avg"].dim() == 2]
    m = np.concatenate([s["exp_avg"].numpy().reshape(-1) for s in st])
    v = np.concatenate([s["exp_avg_sq"].numpy().reshape(-1) for s in st])
    return m, v


def linear_int8(x: np.ndarray, block: int = 2048, signed: bool = True) -> np.ndarray:
    """Block-wise linear 8-bit codes (step absmax / 127, or / 255 unsigned), dequantized."""
    n = x.size - x.size % block
    blocks = x[:n].reshape(-1, block)
    amax = np.abs(blocks).max(axis=1, keepdims=True)
    q = 127 if signed else 255
    safe = np.where(amax > 0, amax, 1.0)
    return (np.round(blocks / safe * q) * safe / q).reshape(-1), n


def demo2_adam_state(runs: Runs, steps: int = 10) -> AdamStateResult:
    """The moments of a real run in 8 bits, and training with them.

    Notice: v, the second moment, spans decades inside a block; linear INT8 rounds its small
    values to 0 (where Adam then divides by eps alone), the dynamic map keeps every one. The
    training runs show whether the moments' format moves the loss beyond the seeds' noise.
    """
    m, v = _moments_of_a_run(steps)
    rows, errors = [], {}
    for name, x, signed in (("m", m, True), ("v", v, False)):
        lin, n = linear_int8(x, signed=signed)
        dyn = blockwise_dequantize(blockwise_quantize(x[:n], 2048, signed))
        for fmt, y in ((N_("linear INT8"), lin), (N_("dynamic map"), dyn)):
            rel = float(np.linalg.norm(y - x[:n]) / np.linalg.norm(x[:n]))
            flushed = float(((y == 0) & (x[:n] != 0)).mean())
            errors[(name, fmt)] = (rel, flushed)
            rows.append([name, _(fmt), f"{rel:.4f}", f"{flushed:.1%}"])
    steps_, curves = curve_rows(runs, MOMENT_RUNS)
    verdicts = {label: compare(runs, label, "FP32 Adam") for label in MOMENT_RUNS[1:]}
    state_bytes = {label: _state_nbytes((RUNS[label][1] or {}).get("state", "fp32"))
                   for label in MOMENT_RUNS}
    return AdamStateResult(steps, rows, errors, steps_, curves, verdicts, state_bytes)


def _state_nbytes(state: str) -> int:
    """Bytes of Adam's moments of lecture 10's model under ``state``, as numfmt's AdamW stores
    them after one step."""
    model = TinyLM(MODEL, "fp32", seed=0)
    opt = AdamW(model.parameters(), state=state)
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    opt.step()
    return opt.state_nbytes()


def show_demo2(r: AdamStateResult) -> None:
    print_header(_("Demo 2: 8-bit Adam"))
    print_paragraph(_("Adam's moments of every weight matrix of lecture 10's model after {n} "
                      "FP32 steps, quantized in blocks of 2,048 with one FP32 absmax each "
                      "(Dettmers et al. 2022, section 2): relative error (L2) and the share of "
                      "nonzero values that become 0.").format(n=r.step))
    print_table([_("moment"), _("8-bit format"), _("relative error"), _("flushed to 0")],
                r.rows)
    print_table([_("moments, validation bits/byte")] + [str(s) for s in r.steps], r.curves)
    print_table([_("moments"), _("bytes of m and v")] + [_(h) for h in VERDICT_HEADERS],
                [[_(label), f"{r.state_bytes[label]:,}"]
                 + (verdict_cells(r.verdicts[label]) if label in r.verdicts else ["-"] * 3)
                 for label in MOMENT_RUNS])
    print_paragraph(_("Δ loss: final validation loss minus FP32 Adam's, in bits/byte, the "
                      "mean over seeds of the per-seed difference; paired range: the range of "
                      "those differences."))
    lin, dyn = r.errors[("v", "linear INT8")], r.errors[("v", "dynamic map")]
    print_observations([
        _("Linear INT8 flushes {a:.1%} of v to 0 (relative error {e1:.3f}); the dynamic map "
          "flushes {b:.1%} (relative error {e2:.3f}).").format(
            a=lin[1], b=dyn[1], e1=lin[0], e2=dyn[0]),
        _("Tensors under 4,096 elements (the norms' gains) keep FP32 moments, as in "
          "bitsandbytes and torchao."),
    ])


# ------------------------------------------------------------- demo 3: BF16 master weights
@dataclass
class MasterResult:
    steps: list
    curves: list
    verdicts: dict          # label -> compare() against FP32 Adam
    lost: dict              # label -> share of updates lost, over the run (mean over seeds)
    lost_last: dict         # label -> the same in the last step


def demo3_master_weights(runs: Runs) -> MasterResult:
    """BF16 weights without an FP32 master copy.

    Notice: with round-to-nearest a large share of Adam's updates is smaller than half a BF16
    ulp of its weight and vanishes (lecture 02's story, here in a real run); stochastic
    rounding keeps them on average and Kahan compensation carries the remainder over.
    """
    steps, curves = curve_rows(runs, MASTER_RUNS)
    verdicts = {label: compare(runs, label, "FP32 Adam") for label in MASTER_RUNS[1:]}
    lost, last = {}, {}
    for label in MASTER_RUNS[1:]:
        per_seed = [np.array(r.extras["lost"], dtype=float) for r in runs.results[label]]
        lost[label] = float(np.mean([a[:, 0].sum() / a[:, 1].sum() for a in per_seed]))
        last[label] = float(np.mean([a[-1, 0] / a[-1, 1] for a in per_seed]))
    return MasterResult(steps, curves, verdicts, lost, last)


def show_demo3(r: MasterResult) -> None:
    print_header(_("Demo 3: BF16 master weights"))
    print_paragraph(_("Weights stored in BF16, Adam's step computed in high precision and "
                      "written back rounded: to nearest, stochastically, or to nearest with "
                      "the rounding error kept in a BF16 buffer (Kahan). A lost update is a "
                      "weight whose nonzero step left it unchanged."))
    print_table([_("master weights, validation bits/byte")] + [str(s) for s in r.steps],
                r.curves)
    print_table([_("master weights"), _("updates lost")] + [_(h) for h in VERDICT_HEADERS],
                [[_(label), f"{r.lost[label]:.1%}"] + verdict_cells(r.verdicts[label])
                 for label in MASTER_RUNS[1:]])
    print_observations([
        _("Round-to-nearest loses {a:.1%} of the updates over the run and {b:.1%} in the "
          "last step, where the learning rate has decayed.").format(
            a=r.lost["BF16 weights, nearest"],
            b=r.lost_last["BF16 weights, nearest"]),
        _("A stochastically rounded weight may also stay put on a step, but only with the "
          "probability that keeps its expected value exact."),
    ])


# ---------------------------------------------------------------- demo 4: the real stack
STACK = [
    # (lecture 10 recipe, TransformerEngine, torchao): each line at most 80 characters
    ("FP8 delayed", "DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=1024, "
     "margin=0)", "-"),
    ("FP8 current", "Float8CurrentScaling(fp8_format=Format.HYBRID)",
     "convert_to_float8_training(m, config=Float8LinearConfig.from_recipe_name"
     "('tensorwise'))"),
    ("FP8 rowwise", "-",
     "Float8LinearConfig.from_recipe_name('rowwise')  (E4M3, power-of-two scales)"),
    ("FP8 blockwise (DeepSeek-V3)", "Float8BlockScaling()  (power-of-two scales by default)",
     "prototype.blockwise_fp8_training"),
    ("MXFP8, RCEIL scales", "MXFP8BlockScaling()  (E4M3, 1x32, E8M0 rounded up)",
     "prototype.moe_training MXFP8Linear(scale_calculation_mode=RCEIL)"),
    ("NVFP4 (full recipe)", "NVFP4BlockScaling()  (RHT on wgrad, 16x16 W, SR on dy)",
     "prototype.moe_training.nvfp4_training"),
]
N_("FP8 delayed"), N_("FP8 current"), N_("FP8 rowwise"), N_("FP8 blockwise (DeepSeek-V3)")
N_("MXFP8, RCEIL scales"), N_("NVFP4 (full recipe)")
STACK_NOTE = N_("With TE, every recipe runs inside `with te.fp8_autocast(enabled=True, "
                "fp8_recipe=recipe):` around te.Linear layers.")


@dataclass
class StackResult:
    rows: list              # [recipe, GEMM, operand, elements, codes equal, values equal,
                            #  max ulps]
    codes_equal: dict       # (recipe, gemm, operand) -> (equal, total)
    values_equal: dict      # (recipe, gemm, operand) -> (equal, total, max ulps)
    gemm_within: dict       # (recipe, gemm) -> True when every element is within the bound
    mx_status: list         # torchao's MXFP8 training layer here: (kernel preference, error
                            # or "" where forward and backward ran)
    available: bool
    error: str = ""

    @property
    def tensorwise_differ(self) -> tuple:
        """(values that differ, values) over the tensorwise recipe's six operands."""
        v = [x for k, x in self.values_equal.items() if k[0] == "tensorwise"]
        return sum(n - e for e, n, _u in v), sum(n for _e, n, _u in v)


def _operands(seed: int = 0):
    """A linear of lecture 10's model (layers.0.mlp.up, its initial weights) and a batch:
    x (512, 128) with an outlier channel, dy (512, 256) at a gradient's scale; float32."""
    g = torch.Generator().manual_seed(seed)
    w = TinyLM(MODEL, "fp32", seed=0).linears()["layers.0.mlp.up"].weight.detach().float()
    x = torch.randn(512, MODEL.d_model, generator=g)
    x[:, 3] *= 20.0
    dy = torch.randn(512, MODEL.d_ff, generator=g) * 1e-4
    return x, w, dy


def _ulps(a: torch.Tensor, b: torch.Tensor) -> int:
    return int((a.view(torch.int32).long() - b.view(torch.int32).long()).abs().max())


#: torchao's recipe name -> numfmt's emulation of it
TORCHAO_RECIPES = {"tensorwise": TORCHAO_TENSORWISE, "rowwise": TORCHAO_ROWWISE}


def demo4_real_stack(device: str = "cpu") -> StackResult:
    """torchao's Float8Linear on this CPU (or ``device``) beside numfmt's emulation of the
    same recipe.

    Notice: every FP8 code and scale torchao computes is numfmt's; torchao multiplies by a
    float32 reciprocal of its scale where numfmt divides exactly, so dequantized values differ
    by at most one float32 ulp under tensorwise scaling and not at all under rowwise scaling,
    whose scales are powers of two. The GEMM outputs differ only by float32 accumulation.
    """
    try:
        with quiet_torch():
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            from torchao.float8.config import ScalingGranularity
            from torchao.float8.float8_scaling_utils import hp_tensor_to_float8_dynamic
            from torchao.float8.float8_training_tensor import LinearMMConfig
    except ImportError as err:
        return StackResult([], {}, {}, {}, [], False, str(err))
    x, w, dy = (t.to(device) for t in _operands())
    rows, codes_eq, values_eq, within = [], {}, {}, {}
    fp8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
    # each operand laid out (rows, inner) as numfmt takes it, and torchao's axiswise dim
    layout = {("fprop", "x"): (x, -1), ("fprop", "w"): (w, -1), ("dgrad", "dy"): (dy, -1),
              ("dgrad", "w"): (w, 0), ("wgrad", "dy"): (dy, 0), ("wgrad", "x"): (x, 0)}
    for recipe, rec in TORCHAO_RECIPES.items():
        cfg = Float8LinearConfig.from_recipe_name(recipe)
        quantized = {}
        for gemm in ntt.GEMMS:
            for k, name in enumerate(ntt.OPERANDS[gemm]):
                t, dim = layout[(gemm, name)]
                spec = getattr(rec, gemm)[k]
                lay = t if dim == -1 else t.t()
                ours = ntt.quantize_operand(lay, spec)
                if spec.block == "tensor":
                    f = hp_tensor_to_float8_dynamic(t, fp8[spec.fmt], LinearMMConfig())
                else:
                    f = hp_tensor_to_float8_dynamic(
                        t, fp8[spec.fmt], LinearMMConfig(),
                        scaling_granularity=ScalingGranularity.AXISWISE, axiswise_dim=dim,
                        round_scales_to_power_of_2=True)
                theirs = f._data.float() * f._scale.reciprocal()      # torchao's dequantize
                theirs = theirs if dim == -1 else theirs.t()
                codes = (f._data.view(torch.uint8) if dim == -1
                         else f._data.view(torch.uint8).t())
                # numfmt's codes: its values divided by its exact scale, cast to FP8
                amax = lay.abs().amax(dim=1 if spec.block == "row" else None, keepdim=True)
                scale = _numfmt_scale(amax.double(), spec)
                ours_codes = (ours.double() / scale).to(fp8[spec.fmt]).view(torch.uint8)
                key = (recipe, gemm, name)
                n = ours.numel()
                codes_eq[key] = (int((ours_codes == codes).sum()), n)
                values_eq[key] = (int((ours == theirs).sum()), n, _ulps(ours, theirs))
                quantized[(gemm, name)] = (ours.double(), theirs.double())
                rows.append([recipe, gemm, name, spec.fmt.upper(),
                             f"{codes_eq[key][0]:,} / {n:,}", f"{values_eq[key][0]:,} / {n:,}",
                             str(values_eq[key][2])])
        lin = torch.nn.Linear(MODEL.d_model, MODEL.d_ff, bias=False, device=device)
        with torch.no_grad():
            lin.weight.copy_(w)
        model = torch.nn.Sequential(lin)
        convert_to_float8_training(model, config=cfg)
        xx = x.clone().requires_grad_(True)
        y = model(xx)
        y.backward(dy)
        outs = {"fprop": y.detach(), "dgrad": xx.grad, "wgrad": model[0].weight.grad}
        for gemm, out in outs.items():
            a, b = (quantized[(gemm, n)][1] for n in ntt.OPERANDS[gemm])
            within[(recipe, gemm)] = _within_bound(out, a, b, OUTPUT_ROUNDING[recipe])
    if device == "cpu":
        _mx_rows(x, w, dy, layout, rows, codes_eq, values_eq, within)
    return StackResult(rows, codes_eq, values_eq, within,
                       _mx_status() if device == "cpu" else [], True)


#: The name of torchao's MXFP8 training layer in demo 4's table (EMULATED: the kernels that
#: run on a CPU; RCEIL scales, MXFP8Linear's default)
MX_RECIPE = "mxfp8 (emulated)"
MX_SPEC = ntt.RECIPES["mxfp8_rceil"].fprop[0]


def _mx_rows(x, w, dy, layout, rows, codes_eq, values_eq, within) -> None:
    """torchao's MXFP8 training layer (MXFP8Linear, EMULATED, RCEIL) beside numfmt's
    ``mxfp8_rceil`` operands: each operand's E4M3 codes and values from torchao's
    MXTensor.to_mx along the GEMM's inner dimension, as MXFP8Linear casts it, and the layer's
    three GEMM outputs against the bound. Appends to the tables of :func:`demo4_real_stack`;
    leaves them as they are where torchao's MX code is missing."""
    try:
        with quiet_torch():
            from torchao.prototype.moe_training.mxfp8_linear import MXFP8Linear
            from torchao.prototype.mx_formats.config import ScaleCalculationMode
            from torchao.prototype.mx_formats.mx_tensor import MXTensor
            from torchao.quantization.quantize_.common.kernel_preference import \
                KernelPreference
    except ImportError:
        return
    quantized = {}
    for gemm in ntt.GEMMS:
        for name in ntt.OPERANDS[gemm]:
            t, dim = layout[(gemm, name)]
            lay = (t if dim == -1 else t.t()).contiguous()
            mx = MXTensor.to_mx(lay, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)
            theirs = mx.dequantize(torch.float32)
            ours = ntt.quantize_operand(lay, MX_SPEC)
            r = mx_quantize(lay.double().numpy(), FP8_E4M3, 32, scale_rule="rceil")
            ours_codes = torch.from_numpy(r.values / np.repeat(r.scales, 32, axis=-1)).to(
                torch.float8_e4m3fn)
            key = (MX_RECIPE, gemm, name)
            n = ours.numel()
            codes_eq[key] = (int((ours_codes.view(torch.uint8) == mx.qdata.view(torch.uint8))
                                 .sum()), n)
            values_eq[key] = (int((ours == theirs).sum()), n, _ulps(ours, theirs))
            quantized[(gemm, name)] = theirs.double()
            rows.append([MX_RECIPE, gemm, name, "E4M3", f"{codes_eq[key][0]:,} / {n:,}",
                         f"{values_eq[key][0]:,} / {n:,}", str(values_eq[key][2])])
    layer = MXFP8Linear(MODEL.d_model, MODEL.d_ff, bias=False,
                        kernel_preference=KernelPreference.EMULATED,
                        scale_calculation_mode=ScaleCalculationMode.RCEIL)
    with torch.no_grad():
        layer.weight.copy_(w)
    xx = x.clone().requires_grad_(True)
    y = layer(xx)
    y.backward(dy)
    for gemm, out in (("fprop", y.detach()), ("dgrad", xx.grad), ("wgrad", layer.weight.grad)):
        a, b = (quantized[(gemm, n)] for n in ntt.OPERANDS[gemm])
        within[(MX_RECIPE, gemm)] = _within_bound(out, a, b)


def _numfmt_scale(amax: torch.Tensor, spec) -> torch.Tensor:
    """The scale numfmt divides by: exact amax / max, or RCEIL's power of two."""
    fmt = spec.format
    exact = amax / fmt.max_value
    if spec.scale_format == "exact":
        return exact
    return torch.pow(2.0, torch.ceil(torch.log2(exact)))


#: The relative rounding of torchao's GEMM outputs beyond float32 accumulation: rowwise
#: scaling computes in BF16 (torchao/float8/float8_ops.py: torch._scaled_mm has no float32
#: output with rowwise scales, so the output is BF16, multiplied by the scales in BF16 and
#: cast to float32): two BF16 roundings of at most 2^-9 each.
OUTPUT_ROUNDING = {"tensorwise": 0.0, "rowwise": 2 * 2.0 ** -9}


def _within_bound(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor,
                  rounding: float = 0.0) -> bool:
    """Is torchao's GEMM output within float32 accumulation error of the exact product of
    its own operands: |out - a b| <= (K + 2) 2^-24 (|a| |b|) + rounding |a b| (+ its square),
    elementwise (Higham, "Accuracy and Stability of Numerical Algorithms", 2002, 3.1)."""
    k = a.shape[1]
    exact = a @ b.t()
    bound = ((k + 2) * 2.0 ** -24 * (a.abs() @ b.abs().t()) * (1 + rounding)
             + (rounding + rounding ** 2) * exact.abs())
    return bool(((out.double() - exact).abs() <= bound).all())


def _mx_status() -> list:
    """What torchao's MXFP8 training layer does on this CPU: run it under each kernel
    preference; [(preference, "" or the error it raised)]."""
    try:
        with quiet_torch():
            from torchao.prototype.moe_training.mxfp8_linear import MXFP8Linear
            from torchao.quantization.quantize_.common.kernel_preference import \
                KernelPreference
    except ImportError as err:
        return [("import", f"{type(err).__name__}: {err}")]
    out = []
    for kp in (KernelPreference.AUTO, KernelPreference.EMULATED):
        try:
            m = MXFP8Linear(MODEL.d_model, 64, bias=False, kernel_preference=kp)
            xx = torch.randn(32, MODEL.d_model, requires_grad=True)
            m(xx).sum().backward()
            out.append((kp.name, ""))
        except Exception as err:                     # noqa: BLE001 - the error is the finding
            out.append((kp.name, f"{type(err).__name__}: {str(err).splitlines()[0]}"))
    return out


def mx_text(status: list) -> str:
    return "; ".join(_("{kp}: forward and backward run").format(kp=kp) if not err
                     else _("{kp}: {err}").format(kp=kp, err=err) for kp, err in status)


@dataclass
class StackTraining:
    steps: list
    curves: list            # rows of curve_rows for FP32 Adam and numfmt's FP8 tensorwise
    verdict: dict           # compare() of numfmt's FP8 tensorwise against FP32 Adam
    gaps: list              # per seed: max |torchao - numfmt| of the training loss over the
                            # first EARLY_STEPS steps, bits/byte
    early: int              # how many steps that is


def demo4_training(runs: Runs) -> StackTraining:
    """Lecture 10's model trained under torchao's tensorwise FP8 recipe by numfmt's emulation
    (:data:`TORCHAO_TENSORWISE`, float64) and by torchao's Float8Linear (float32, this CPU's
    kernels), same seeds.

    Notice: the two libraries' runs start together, step for step; then they drift apart as
    any two runs whose arithmetic differs in the last bits do (float32 against float64).
    """
    steps, curves = curve_rows(runs, STACK_RUNS[:2])
    early = min(EARLY_STEPS, runs.workload.steps)
    gaps = [float(np.max(np.abs(a.train_loss[:early] - b.train_loss[:early])))
            for a, b in zip(runs.results.get(STACK_RUNS[2], []), runs.results[STACK_RUNS[1]])]
    return StackTraining(steps, curves, compare(runs, STACK_RUNS[1], "FP32 Adam"), gaps, early)


def show_demo4_training(r: StackTraining) -> None:
    print_paragraph(_("Lecture 10's model trained under torchao's tensorwise FP8 recipe, the "
                      "same seeds: numfmt's emulation in float64 against FP32."))
    print_paragraph(_("The emulation runs what torchao runs, which is not lecture 10's "
                      "fp8_current: the same FP8 operands and scales, but float32 GEMM outputs "
                      "and every linear in FP8, lm_head included, since torchao's Float8Linear "
                      "returns a float32 model's dtype and convert_to_float8_training converts "
                      "every linear; lecture 10's fp8_current rounds its outputs to BF16 and "
                      "keeps lm_head in BF16, as TransformerEngine runs a BF16 model."))
    print_table([_("recipe, validation bits/byte")] + [str(s) for s in r.steps], r.curves)
    print_table([_("recipe")] + [_(h) for h in VERDICT_HEADERS],
                [[_(STACK_RUNS[1])] + verdict_cells(r.verdict)])
    if not r.gaps:
        print_paragraph(_("torchao is not installed: its training run is skipped."))
        return
    print_observations([
        _("torchao's Float8Linear, trained from the same weights on the same batches: its "
          "training loss stays within {tol} bits/byte of numfmt's at each of the first {k} "
          "steps of every seed: {ok}. Later the two runs drift apart, as two runs do whose "
          "arithmetic differs in the last bits (torchao's float32 against the emulation's "
          "float64), and training amplifies it as it does a change of seed.").format(
            tol=TORCHAO_TOLERANCE, k=r.early, ok=_yes(max(r.gaps) < TORCHAO_TOLERANCE)),
        _("torchao's losses are not printed: they are float32 runs, whose last digits depend "
          "on this CPU's kernels (the notebook draws them)."),
    ])


def _yes(flag: bool) -> str:
    return _("yes") if flag else _("no")


def show_demo4(r: StackResult) -> None:
    print_header(_("Demo 4: the real stack"))
    print_paragraph(_("The calls a user writes for each recipe of lecture 10 (defaults "
                      "named):"))
    for recipe, te, ao in STACK:
        print(f"  {_(recipe)}")
        print(f"    TE       {te}")
        print(f"    torchao  {ao}")
    print_paragraph(_(STACK_NOTE))
    if not r.available:
        print_paragraph(_("torchao is not installed ({err}): the comparison is skipped.")
                        .format(err=r.error))
        return
    print_paragraph(_("torchao's Float8Linear on this CPU against numfmt's quantize_operand "
                      "on one linear of lecture 10's model (512 tokens, 128 -> 256), each "
                      "operand laid out as its GEMM reads it. Values: torchao's code times "
                      "the float32 reciprocal of its scale, against numfmt's."))
    print_table([_("torchao recipe"), _("GEMM"), _("operand"), _("format"), _("codes equal"),
                 _("values equal"), _("max ulps")], r.rows)
    print_observations([
        _("Every FP8 code equal in every recipe: {a:,} of {b:,}.").format(
            a=sum(v[0] for v in r.codes_equal.values()),
            b=sum(v[1] for v in r.codes_equal.values())),
        _("Tensorwise: torchao multiplies each code by fl32(1/fl32(max/amax)), numfmt by the "
          "exact amax/max; here {e:,} of {n:,} values differ, each by one float32 ulp at most "
          "(all in the E5M2 gradient). Rowwise scales are powers of two: every value is "
          "equal.").format(e=r.tensorwise_differ[0], n=r.tensorwise_differ[1]),
        _("torchao's outputs of fprop, dgrad and wgrad lie within float32 accumulation error "
          "((K+2)·2^-24·|a||b|) of the exact product of its operands: {t}; rowwise, whose "
          "outputs torchao rounds to BF16 twice (torch._scaled_mm has no float32 output with "
          "rowwise scales), within that bound plus 2·2^-9 relative: {r}.").format(
            t=_yes(all(v for (rec, _g), v in r.gemm_within.items() if rec == "tensorwise")),
            r=_yes(all(v for (rec, _g), v in r.gemm_within.items() if rec == "rowwise"))),
        _("torchao's MXFP8 training layer on this CPU: {status}.").format(
            status=mx_text(r.mx_status)),
        _("Under EMULATED, MXFP8Linear casts each operand with MXTensor.to_mx (E4M3, blocks "
          "of 32 along the GEMM's inner dimension, RCEIL scales): every value equal to "
          "numfmt's mxfp8_rceil operands, {a:,} of {b:,}, and its fprop, dgrad and wgrad "
          "within float32 accumulation error of the exact product: {ok}.").format(
            a=sum(v[0] for k, v in r.values_equal.items() if k[0] == MX_RECIPE),
            b=sum(v[1] for k, v in r.values_equal.items() if k[0] == MX_RECIPE),
            ok=_yes(all(v for (rec, _g), v in r.gemm_within.items() if rec == MX_RECIPE))),
    ])


# ---------------------------------------------------------------- demo 5: communication
@dataclass
class CommResult:
    devices: int
    rows: list
    comm: dict          # (model, setup) -> communication_bytes dict


COMM_SETUPS = (("dp", False, 4), ("fsdp", False, 2), ("fsdp", True, 2))


def demo5_communication(devices: int = 8) -> CommResult:
    """The bytes one step moves per GPU, and what FP8 all-gather saves.

    Notice: FSDP moves 1.5 times what data parallel's all-reduce moves in BF16 (weights twice,
    gradients once); sending the linears' weights in FP8 nearly halves the all-gathers and
    leaves the gradients' reduce-scatter as it was.
    """
    rows, comm = [], {}
    for name, shape in SHAPES.items():
        for sharding, fp8, grad in COMM_SETUPS:
            c = memory.communication_bytes(shape, devices, sharding, weight_bytes=2,
                                           grad_bytes=grad, fp8_all_gather=fp8)
            comm[(name, sharding, fp8)] = c
            label = (_("DP, FP32 gradients") if sharding == "dp" else
                     _("FSDP, FP8 all-gather") if fp8 else _("FSDP, BF16"))
            rows.append([name, label] + [f"{c[k] / GB:.2f}" for k in
                                         ("all_gather", "reduce_scatter", "all_reduce")]
                        + [f"{sum(c.values()) / GB:.2f}"])
    return CommResult(devices, rows, comm)


def show_demo5(r: CommResult) -> None:
    print_header(_("Demo 5: what a step moves over the network"))
    print_paragraph(_("Bytes each of {n} GPUs sends in one step under ring collectives "
                      "((N-1)/N of the buffer per all-gather or reduce-scatter, twice that "
                      "per all-reduce), in GB.").format(n=r.devices))
    print_table([_("model"), _("setup"), _("all-gather"), _("reduce-scatter"),
                 _("all-reduce"), _("total")], r.rows)
    a = r.comm[("Llama 3.1 8B", "fsdp", False)]
    b = r.comm[("Llama 3.1 8B", "fsdp", True)]
    print_observations([
        _("Llama 3.1 8B under FSDP: the FP8 all-gather moves {x:.2f} GB instead of {y:.2f} GB "
          "per step ({r:.3f} of it): one byte per weight of the layers' linears, while the "
          "embedding, the head and the norms travel in BF16, and an all-reduce of one FP32 "
          "amax per linear sets the scales.")
        .format(x=b["all_gather"] / GB, y=a["all_gather"] / GB,
                r=b["all_gather"] / a["all_gather"]),
    ])


# ------------------------------------------------------ demo 5, continued: FP8 primary weights
#: The run whose GEMMs read a BF16 all-gathered copy of the weights (FSDP2 with
#: MixedPrecisionPolicy(param_dtype=torch.bfloat16), Float8Linear casting that copy to E4M3);
#: its pair, the FP8 all-gather, is "FP8 tensorwise (numfmt)" of :data:`RUNS` itself.
BF16_GATHER = "BF16 all-gather"
FP8_GATHER = "FP8 tensorwise (numfmt)"
N_("BF16 all-gather")


class BF16Copy(torch.nn.Module):
    """A weight's BF16 copy as FSDP2's BF16 all-gather delivers it: the FP32 value (its
    float32 rounding, for a float64 emulation) rounded to BF16. The gradient passes straight
    through to the master weight, so only the copy the GEMMs read differs."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        copy = w.float().to(torch.bfloat16).to(w.dtype)
        return w + (copy - w).detach()          # exact: copy - w and the sum are exact


def bf16_all_gather(model: TinyLM) -> TinyLM:
    """``model`` with every linear reading the BF16 copy of its weight (in place)."""
    from torch.nn.utils import parametrize
    for m in model.linears().values():
        parametrize.register_parametrization(m, "weight", BF16Copy())
    return model


def _all_gather_job(job):
    """One run of torchao's tensorwise recipe reading BF16 all-gathered weights."""
    seed, cfg = job
    return train(TORCHAO_TENSORWISE, cfg, MODEL, model_transform=bf16_all_gather)


def run_bf16_all_gather(w: Workload, workers: int = 2) -> list:
    """The BF16 all-gather run for every seed of the workload, in seed order."""
    jobs = [(seed, w.train_config(seed)) for seed in w.seeds]
    out, start = {}, time.monotonic()

    def done(i, r):
        out[jobs[i][0]] = r
        line = _("run {i}/{n}: {label}, seed {seed}: validation {loss:.3f} bits/byte").format(
            i=len(out), n=len(jobs), label=_(BF16_GATHER), seed=r.seed, loss=r.final_val)
        print(run_line_with_time(line, len(out), len(jobs), start), file=sys.stderr, flush=True)

    if workers > 1:
        in_processes(_all_gather_job, jobs, workers, done)
    else:
        for i, job in enumerate(jobs):
            done(i, _all_gather_job(job))
    return [out[s] for s in w.seeds]


@dataclass
class PrimaryWeightsResult:
    codes_differ: int       # E4M3 weight values of lecture 10's initial model that differ
    codes: int              # between the FP8 and the BF16 all-gather, of this many
    steps_apart: int        # the most E4M3 codes between the two casts of one weight
    error_fp8: float        # relative error (L2) of the E4M3 weights against the FP32 master
    error_bf16: float       # the same through the BF16 copy
    gathered: dict          # "bf16" / "fp8" -> bytes each of `devices` GPUs all-gathers a step
    devices: int
    steps: list
    curves: list            # validation curves of the two runs, mean over seeds
    verdict: dict           # compare() of the BF16 all-gather against the FP8 all-gather


def _bf16(w: torch.Tensor) -> torch.Tensor:
    return w.to(torch.bfloat16).to(w.dtype)


def _e4m3_codes(values: torch.Tensor, source: torch.Tensor, spec) -> torch.Tensor:
    """The E4M3 codes (uint8) behind numfmt's tensorwise ``values`` of ``source``."""
    scale = _numfmt_scale(source.abs().amax().double(), spec)
    return (values.double() / scale).to(torch.float8_e4m3fn).view(torch.uint8)


def gathered_bytes(fp8: bool, devices: int = 8, cfg: TinyLMConfig = MODEL) -> float:
    """Bytes each GPU all-gathers in one FSDP step of lecture 10's model (ring, forward and
    backward): every linear in E4M3 under FP8 all-gather (the runs here convert them all),
    the embedding and norms in BF16."""
    model = TinyLM(cfg, "fp32", seed=0)
    linear = sum(m.weight.numel() for m in model.linears().values())
    rest = sum(p.numel() for p in model.parameters()) - linear
    return 2 * (devices - 1) / devices * (linear * (1 if fp8 else 2) + 2 * rest)


def demo5_fp8_weights(runs: Runs, bf16_runs: list, devices: int = 8) -> PrimaryWeightsResult:
    """FP8 primary weights as torchao's FSDP2 float8 all-gather keeps them, in training.

    Notice: the FP8 all-gather casts the FP32 master straight to E4M3, with the scale of the
    FP32 amax: the very cast Float8Linear makes without FSDP. The BF16 all-gather rounds
    twice (FP32 to BF16 to E4M3, the scale from the BF16 amax), which moves a few codes by
    one step; training does not tell the two apart beyond the seeds' noise.
    """
    model = TinyLM(MODEL, "fp32", seed=0)
    spec = TORCHAO_TENSORWISE.fprop[1]
    differ = total = steps_apart = 0
    err = {"fp8": 0.0, "bf16": 0.0}
    norm = 0.0
    for m in model.linears().values():
        w = m.weight.detach().float()
        direct, twice = (ntt.quantize_operand(c, spec) for c in (w, _bf16(w)))
        codes = [_e4m3_codes(q, c, spec) for q, c in ((direct, w), (twice, _bf16(w)))]
        apart = (codes[0].long() - codes[1].long()).abs()     # same signs: adjacent codes
        differ += int((apart > 0).sum())
        steps_apart = max(steps_apart, int(apart.max()))
        total += w.numel()
        err["fp8"] += float((direct.double() - w.double()).square().sum())
        err["bf16"] += float((twice.double() - w.double()).square().sum())
        norm += float(w.double().square().sum())
    both = Runs(runs.workload, {FP8_GATHER: runs.results[FP8_GATHER],
                                BF16_GATHER: bf16_runs})
    steps, curves = curve_rows(both, (FP8_GATHER, BF16_GATHER))
    return PrimaryWeightsResult(
        differ, total, steps_apart, (err["fp8"] / norm) ** 0.5, (err["bf16"] / norm) ** 0.5,
        {k: gathered_bytes(k == "fp8", devices) for k in ("bf16", "fp8")}, devices,
        steps, curves, compare(both, BF16_GATHER, FP8_GATHER))


def show_demo5_fp8_weights(r: PrimaryWeightsResult) -> None:
    print_paragraph(_("FP8 primary weights, as torchao's FSDP2 float8 all-gather keeps them "
                      "(Float8LinearConfig(enable_fsdp_float8_all_gather=True)): each GPU "
                      "holds its shard of the FP32 master weights; before the all-gather, "
                      "each linear's shard is cast to E4M3 with one tensorwise scale, 448 / "
                      "amax of the whole weight (precompute_float8_dynamic_scale_for_fsdp "
                      "all-reduces the amax once per step), and every GEMM reads the gathered "
                      "E4M3 copy. Under BF16 mixed precision without it, FSDP2 gathers a BF16 "
                      "copy, which Float8Linear then casts to E4M3."))
    print_paragraph(_("Lecture 10's model under torchao's tensorwise recipe (numfmt's "
                      "emulation), the two runs differing only in the copy of the weights the "
                      "GEMMs read; {n} GPUs.").format(n=r.devices))
    print_table([_("all-gather"), _("weights the GEMMs read"), _("kB per GPU and step"),
                 _("error vs FP32 master")],
                [["FP8", _("E4M3 of the FP32 master"), f"{r.gathered['fp8'] / 1e3:,.1f}",
                  f"{r.error_fp8:.5f}"],
                 ["BF16", _("E4M3 of the BF16 copy"), f"{r.gathered['bf16'] / 1e3:,.1f}",
                  f"{r.error_bf16:.5f}"]])
    print_paragraph(_("kB: what each GPU all-gathers in one step (forward and backward, ring); "
                      "error: relative error (L2) of all the initial model's E4M3 weights "
                      "against the FP32 master."))
    labels = {FP8_GATHER: _("FP8 all-gather"), BF16_GATHER: _(BF16_GATHER)}
    print_table([_("all-gather, validation bits/byte")] + [str(s) for s in r.steps],
                [[labels[FP8_GATHER]] + row[1:] for row in r.curves[:1]]
                + [[labels[BF16_GATHER]] + row[1:] for row in r.curves[1:]])
    print_table([_("run"), _("Δ loss vs FP8 all-gather"), _("paired range"), _("verdict")],
                [[_(BF16_GATHER)] + verdict_cells(r.verdict)])
    print_observations([
        _("The FP8 all-gather is the cast Float8Linear makes anyway from FP32 weights: the "
          "same E4M3 codes and scale, so the GEMMs compute what they compute without FSDP, "
          "and only the bytes change: {a:.3f} of the BF16 all-gather's.").format(
            a=r.gathered["fp8"] / r.gathered["bf16"]),
        _("The BF16 copy rounds twice, and its amax, hence its scale, is the BF16 one: "
          "{d:,} of the {n:,} E4M3 codes of the initial model ({p:.1%}) differ from the "
          "direct cast's, each by one code, and the error against the FP32 master grows from "
          "{e1:.5f} to {e2:.5f}.").format(
            d=r.codes_differ, n=r.codes, p=r.codes_differ / r.codes,
            e1=r.error_fp8, e2=r.error_bf16),
        (_("In training the difference is beyond the seeds' noise: every seed's final loss "
           "moves the same way.") if r.verdict["finding"]
         else _("In training the difference is within the seeds' noise: the double rounding "
                "moves a few codes by one step, far less than the E4M3 rounding every weight "
                "undergoes in both runs.")),
    ])


# ---------------------------------------------------------------------------------------------
def build_parser():
    parser = lecture_parser(_("Lecture 13: the memory of training and the real stack."))
    parser.add_argument("--quick", action="store_true",
                        help=_("fewer steps and seeds (under a minute)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    w = QUICK if args.quick else FULL
    print_title(_("Lecture 13: the memory of training and the real stack"), [
        _("Where the bytes of training go (weights, master weights, gradients, Adam's "
          "moments, activations, the network) and how 8-bit optimizer state, BF16 master "
          "weights and FP8 communication cut them; then torchao's FP8 training run beside "
          "numfmt's emulation."),
        _("Counts are exact; losses are float64 runs of lecture 10's model, the same on every "
          "machine, compared against their seed range."),
    ])
    show_demo1(demo1_bill())
    runs = run_all(w)
    show_demo2(demo2_adam_state(runs))
    show_demo3(demo3_master_weights(runs))
    show_demo4(demo4_real_stack())
    show_demo4_training(demo4_training(runs))
    show_demo5(demo5_communication())
    show_demo5_fp8_weights(demo5_fp8_weights(runs, run_bf16_all_gather(w)))


if __name__ == "__main__":
    run_lecture(main, build_parser)
