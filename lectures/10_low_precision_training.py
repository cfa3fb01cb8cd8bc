"""
Lecture 10: training in low precision: FP16 loss scaling, FP8 recipes, MXFP8 and NVFP4.

The question
    A linear layer's training step is three GEMMs: forward y = x Wᵀ (fprop), the data gradient
    dx = dy W (dgrad) and the weight gradient dW = dyᵀ x (wgrad). Which of their six operands
    survive 16, 8 or 4 bits, and what does each published recipe do so that training still
    converges? A tiny LLaMA-style model (RMSNorm, SwiGLU, RoPE) is trained from scratch on the
    bytes of CPython's language reference under each recipe of numfmt.torch.train:

      Demo 1  The three GEMMs and real gradients: the range they span; FP16 without loss
              scaling (what flushes to zero layer by layer, and the loss curve), with the
              scaler (its scale over the steps, the steps it skips), and BF16.
      Demo 2  FP8 per tensor: delayed against current scaling, E5M2 against E4M3 gradients,
              and what one activation spike does to delayed scaling (the same seed with and
              without it).
      Demo 3  Fine-grained FP8: DeepSeek-V3's 1x128 / 128x128 tiles (FP32 and TE's
              power-of-two scales) and MXFP8 (E8M0 scales, the OCP floor rule against RCEIL).
      Demo 4  FP4: the NVFP4 recipe built up technique by technique (the output head and the
              BF16 layers apart), against MXFP4 bare and with the same techniques.
      Demo 5  Why each technique works, measured on this run's tensors: round-to-nearest's
              bias against stochastic rounding, the random Hadamard transform's effect on
              block amax and kurtosis, and Q(W)ᵀ against Q(Wᵀ) with 1x16 and 16x16 blocks.
      Demo 6  One table: recipe -> operand formats, bits moved per GEMM, the share kept in
              BF16, validation loss and its paired gap to BF16.

How to read the output
    Losses are cross-entropies in bits per byte (8 is a uniform guess over 256 byte values;
    lower is better), on fixed validation windows that share no byte with training. Every
    recipe is trained with the same seeds: a seed fixes the initial weights, the batches and
    every stochastic-rounding and Hadamard draw. Recipes are compared paired, seed by seed: a
    difference is a finding only when the 95% t interval of its mean over seeds excludes zero
    (the interval and the per-seed differences are printed); otherwise the text says "within
    noise". Beside the training runs, a probe compares every recipe's weight gradient with
    FP32's on the same weights and batches, without training noise: two techniques are
    compared batch by batch, and a difference is a finding when the sign test says that the
    count of batches on which one is better would be unlikely by chance (p < 0.05). Operand
    formats are emulated (fake quantization: values rounded onto the format's grid), so no
    timing here says anything about hardware. The
    emulation computes in float64, weights and optimizer state included, quantizes each
    operand as its float32 rounding would be, and rounds each GEMM's output (y, dx, dW) to the
    recipe's output format as torch.autocast and TransformerEngine return it (FP16 for FP16,
    BF16 otherwise): the FP32 run is the unquantized reference. Float64 is what makes every
    printed loss the same on every CPU (lectures/tinylm/loop.py says why float32 would not).

Run
    python lectures/10_low_precision_training.py            (full: 120 steps, 3 seeds, about
                                                             7.5 min on 2 cores)
    python lectures/10_low_precision_training.py --quick    (20 steps, 2 seeds, about 1 min:
                                                             the tests' workload)
    python lectures/10_low_precision_training.py --save r.json   (also the results as JSON:
                                                             what notebook 10 prints and draws)
    Runs train on 2 worker processes with one torch thread each (the printed numbers do not
    depend on the number of threads); on CUDA they run one after another on the GPU. Each
    demo prints as soon as the runs it reads are done. Progress goes to stderr: a tqdm bar on
    a terminal, one line per finished run otherwise.
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import numfmt.torch.train as ntt  # noqa: E402
from console import (lecture_parser, print_header, print_observations,  # noqa: E402
                     print_paragraph, print_table, print_title, run_lecture, save_path)
from console.i18n import N_, sentences  # noqa: E402
from lectures.i18n import domain  # noqa: E402
from lectures.hardware import DATASHEETS  # noqa: E402
from lectures.results import save_results  # noqa: E402
from lectures.tinylm.loop import TrainConfig, train, train_job  # noqa: E402
from lectures.tinylm.model import TinyLMConfig  # noqa: E402
from lectures.tinylm.data import Batches, split  # noqa: E402
from lectures.tinylm.probe import (gradient_errors_batches, paired_errors,  # noqa: E402
                                   without_residues)
from lectures.tinylm.runs import (Runs, compare, demo_queue, finals,  # noqa: E402
                                  progress_lines, run_all)

_ = domain("lecture10").gettext

SCRIPT = Path(__file__).name                # the command a stored run names

H100 = DATASHEETS["H100"]                   # the data sheet the summary quotes
MODEL = TinyLMConfig()                      # d 128, 2 layers, SwiGLU 256, context 64
BATCH = 8                                   # 8 x 64 = 512 tokens a step
#: The NVFP4 recipe's BF16 layers: the output head (as every FP8 and FP4 recipe here keeps it)
#: and the last block's down projection: 18 % of the linear weights, near the paper's ~16 %.
HIGH_PRECISION = ("lm_head", "layers.1.mlp.down")
#: The loss scaler's constants: torch.amp.GradScaler's (init_scale 2^16, growth x2, backoff
#: x0.5) but a growth interval of 10 steps instead of 2,000, so that it acts within the run.
SCALER = (2.0 ** 16, 2.0, 0.5, 10)


@dataclass(frozen=True)
class Workload:
    steps: int
    seeds: tuple
    eval_every: int
    val_windows: int
    probe_steps: int           # steps of the in-process run whose tensors demos 1, 2 and 5 read
    probe_batches: int         # batches on which the probe compares each recipe's dW with FP32's
    spike_step: int
    single_seed: tuple = ()    # labels trained with the first seed only

    def train_config(self, seed: int, spike=None) -> TrainConfig:
        evals = tuple(range(self.eval_every, self.steps + 1, self.eval_every))
        return TrainConfig(steps=self.steps, batch=BATCH, warmup=max(1, self.steps // 10),
                           eval_steps=evals, val_windows=self.val_windows, seed=seed,
                           spike=spike, loss_scaler=SCALER)

    @property
    def grad_steps(self) -> tuple:
        """Steps of the probe run at which every recipe's dW is compared with FP32's."""
        return (self.probe_steps // 4, self.probe_steps // 2, self.probe_steps - 1)


FULL = Workload(steps=120, seeds=(0, 1, 2), eval_every=30, val_windows=64, probe_steps=60,
                probe_batches=8, spike_step=80,
                single_seed=("FP8 delayed + spike", "FP8 current + spike"))
QUICK = Workload(steps=20, seeds=(0, 1), eval_every=10, val_windows=16, probe_steps=10,
                 probe_batches=4, spike_step=12,
                 single_seed=("FP8 delayed + spike", "FP8 current + spike"))
SPIKE = ("layers.1.mlp.down", 2.0 ** 10)    # the layer whose input spikes, and by how much


# ------------------------------------------------------------------------------- the recipes
def with_gradients(recipe, fmt: str, name: str):
    """``recipe`` with the gradient operand dy of dgrad and wgrad in element format ``fmt``."""
    dgrad = (replace(recipe.dgrad[0], fmt=fmt), recipe.dgrad[1])
    wgrad = (replace(recipe.wgrad[0], fmt=fmt), recipe.wgrad[1])
    return replace(recipe, name=name, dgrad=dgrad, wgrad=wgrad)


def recipes() -> dict:
    """Every recipe the lecture trains, by its label (labels are data; printed translated)."""
    R = ntt.RECIPES
    plain = dict(high_precision_layers=())
    ladder = [
        ("NVFP4, round-to-nearest", dict(stochastic_rounding=False, rht=False, weight_2d=False,
                                         **plain)),
        ("NVFP4 + SR", dict(stochastic_rounding=True, rht=False, weight_2d=False, **plain)),
        ("NVFP4 + SR + RHT", dict(stochastic_rounding=True, rht=True, weight_2d=False, **plain)),
        ("NVFP4 + SR + RHT + 2D", dict(stochastic_rounding=True, rht=True, weight_2d=True,
                                       **plain)),
        ("NVFP4 + BF16 output head", dict(high_precision_layers=("lm_head",))),
        ("NVFP4 (full recipe)", dict(high_precision_layers=HIGH_PRECISION)),
    ]
    out = {
        "FP32": R["fp32"],
        "BF16": R["bf16"],
        "FP16, no loss scaling": replace(R["fp16"], name="fp16_unscaled", loss_scaling=False),
        "FP16 + loss scaling": R["fp16"],
        "FP8 delayed": R["fp8_delayed"],
        "FP8 current": R["fp8_current"],
        "FP8 current, E4M3 gradients": with_gradients(R["fp8_current"], "e4m3",
                                                      "fp8_current_e4m3_grads"),
        "FP8 delayed + spike": R["fp8_delayed"],
        "FP8 current + spike": R["fp8_current"],
        "FP8 blockwise (DeepSeek-V3)": R["fp8_blockwise"],
        "MXFP8, floor scales": R["mxfp8_floor"],
        "MXFP8, RCEIL scales": R["mxfp8_rceil"],
    }
    for label, kw in ladder:
        out[label] = ntt.nvfp4_recipe(**kw)
    out["MXFP4"] = R["mxfp4"]
    out["MXFP4 (full recipe)"] = ntt.mxfp4_recipe(high_precision_layers=HIGH_PRECISION)
    # each recipe named by its label, so a finished run says which one it was
    return {label: replace(r, name=label) for label, r in out.items()}


#: Recipes the gradient probe compares with FP32 but the lecture does not train.
PROBE_ONLY = {"FP8 blockwise, power-of-two scales": "fp8_blockwise_pow2"}


def probe_recipes() -> dict:
    """The recipes whose dW the probe compares with FP32's: every trained one without delayed
    scaling or a spike, and :data:`PROBE_ONLY`."""
    out = {label: r for label, r in recipes().items() if label != "FP32"
           and "spike" not in label and not any(s.scaling == "delayed" for g in ntt.GEMMS
                                                for s in getattr(r, g))}
    out.update({label: replace(ntt.RECIPES[k], name=label) for label, k in PROBE_ONLY.items()})
    return out


N_("FP32"), N_("BF16"), N_("FP16, no loss scaling"), N_("FP16 + loss scaling")
N_("FP8 delayed"), N_("FP8 current"), N_("FP8 current, E4M3 gradients")
N_("FP8 delayed + spike"), N_("FP8 current + spike"), N_("FP8 blockwise (DeepSeek-V3)")
N_("MXFP8, floor scales"), N_("MXFP8, RCEIL scales"), N_("NVFP4, round-to-nearest")
N_("NVFP4 + SR"), N_("NVFP4 + SR + RHT"), N_("NVFP4 + SR + RHT + 2D"), N_("NVFP4 (full recipe)")
N_("NVFP4 + BF16 output head"), N_("MXFP4"), N_("MXFP4 (full recipe)")
N_("FP8 blockwise, power-of-two scales")


# ---------------------------------------------------------------------------- all the runs
def device_name() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def jobs(w: Workload, device: str = "cpu") -> list:
    """``(label, job)`` for every run the lecture trains, in the order the demos print them:
    every recipe of :func:`recipes` for the workload's seeds, the spike runs and any
    ``single_seed`` labels for the first seed only."""
    out = []
    for label, recipe in recipes().items():
        spike = (w.spike_step, *SPIKE) if label.endswith("+ spike") else None
        for seed in (w.seeds[:1] if label in w.single_seed else w.seeds):
            out.append((label, (recipe, w.train_config(seed, spike), MODEL, device)))
    return out


def progress(total: int):
    """``(update, close)`` for the runs' progress on stderr (a tqdm bar on a terminal)."""
    return progress_lines(total, lambda i, n, label, r: _(
        "run {i}/{n}: {recipe}, seed {seed}: validation {loss:.3f} bits/byte").format(
            i=i, n=n, recipe=_(r.recipe), seed=r.seed, loss=r.final_val),
        desc=_("training runs"), unit=_("run"))


def signed(v: float, digits: int = 3) -> str:
    """``v`` with its sign, never "-0.000" for a value that rounds to zero."""
    text = f"{v:+.{digits}f}"
    return text.replace("-", "+") if float(text) == 0 else text


def verdict(c: dict) -> str:
    per = ", ".join(signed(d) for d in c["diffs"])
    if c["finding"]:
        return _("{gap} bits/byte, 95% interval [{low}, {high}] (per seed {per})").format(
            gap=signed(c["gap"]), low=signed(c["low"]), high=signed(c["high"]), per=per)
    return _("{gap} bits/byte, within noise: 95% interval [{low}, {high}] (per seed {per})"
             ).format(gap=signed(c["gap"]), low=signed(c["low"]), high=signed(c["high"]),
                      per=per)


def curve_rows(runs: Runs, labels) -> list:
    """Validation loss at each evaluation step, mean over seeds, one row per label."""
    steps = runs.results[labels[0]][0].val_steps
    rows = []
    for label in labels:
        vals = np.mean([r.val_loss for r in runs.results[label]], axis=0)
        rows.append([_(label)] + [f"{v:.3f}" if np.isfinite(v) else "nan" for v in vals])
    return [[_("step")] + [str(s) for s in steps]], rows


def print_curves(runs: Runs, labels) -> None:
    header, rows = curve_rows(runs, labels)
    print_table([_("recipe, validation bits/byte")] + header[0][1:], rows)


# --------------------------------------------------------------- the probe run's tensors
@dataclass
class Probe:
    """The raw GEMM operands of every linear after ``step`` steps of FP32 training, and every
    probed recipe's weight gradients against FP32's on several batches at each of the
    workload's ``grad_steps``."""
    step: int
    operands: dict      # layer name -> {"x": (N, in), "w": (out, in), "dy": (N, out)} float64,
                        # dy without its rounding residues (tinylm.probe.without_residues)
    grads: dict = None  # step -> [per batch {label: {"error", "cosine", "layer_error",
                        # "flushed"}}] (gradient_errors_batches); batch 0 is the step's own
    tiles: dict = None  # power-of-two 1x128 tiles against 1x32 blocks (pow2_tiles)
    dy_histogram: Histogram = None      # log2 |dy| of every linear's nonzero dy (notebook 10)


@dataclass
class Histogram:
    """Counts of log2 |v| over the nonzero values of a tensor, in equal bins from the smallest
    value to the largest: what notebook 10 draws of dy (the values themselves, 1.3 M of them
    in the full run, are not kept)."""
    edges: np.ndarray       # (bins + 1,) float64, log2 |v| at the edges of the bins
    counts: np.ndarray      # (bins,) int64


def log2_histogram(values, bins: int = 120) -> Histogram:
    """:class:`Histogram` of log2 |v| over the nonzero entries of ``values`` (any shape), as
    ``numpy.histogram`` bins them (and ``matplotlib``'s ``hist`` draws them)."""
    a = np.abs(np.asarray(values, dtype=np.float64).ravel())
    counts, edges = np.histogram(np.log2(a[a > 0]), bins=bins)
    return Histogram(edges, counts)


#: The fixed loss scale of the gradient probe's "FP16 + loss scaling" (GradScaler's initial).
PROBE_SCALE = 2.0 ** 16
#: The seed of the probe's extra batches at step s is PROBE_SEED + s: training never draws them.
PROBE_SEED = 10_000


def probe_batches(w: Workload, step: int, first, device: str = "cpu") -> list:
    """The probe's batches at ``step``: the training step's own (``first``), then
    ``probe_batches - 1`` more of the training text from their own seeded stream."""
    more = Batches(split(), BATCH, MODEL.context, PROBE_SEED + step, device)
    return [first] + [more.next() for _ in range(w.probe_batches - 1)]


def probe_run(w: Workload, device: str | None = None) -> Probe:
    """Train FP32 for ``probe_steps`` steps with capture on and keep the last step's operands;
    at each of the workload's ``grad_steps``, compare every recipe of :func:`probe_recipes`
    with FP32 on that step's weights and on the same ``probe_batches`` batches
    (:func:`lectures.tinylm.probe.gradient_errors_batches`).

    dy is the gradient of the mean loss in nats (no loss scale), as an FP16 run without
    loss scaling would see it.
    """
    device = device or device_name()
    keep, grads = {}, {}
    rec = probe_recipes()
    scales = {"FP16 + loss scaling": PROBE_SCALE}

    def probe(step, model, loss, batch):
        if step == w.probe_steps - 1:
            for name, m in model.linears().items():
                keep[name] = {k: v.detach().cpu().clone() for k, v in m.last_operands.items()}
                keep[name]["dy"] = without_residues(keep[name]["dy"])
        if step in w.grad_steps:
            grads[step] = gradient_errors_batches(model, probe_batches(w, step, batch, device),
                                                  rec, scales)

    train("fp32", replace(w.train_config(0), steps=w.probe_steps, eval_steps=()), MODEL,
          probe=probe, device=device, capture=True)
    dy = torch.cat([o["dy"].flatten() for o in keep.values()])
    return Probe(w.probe_steps, keep, grads, tiles=pow2_tiles(keep),
                 dy_histogram=log2_histogram(dy.numpy()))


def pow2_tiles(operands: dict) -> dict:
    """Where E4M3 with power-of-two (E8M0, RCEIL) scales rounds a value differently in 1x128
    tiles (TransformerEngine's Float8BlockScaling with its default power-of-two scales) than in
    1x32 blocks (MXFP8), over the x and dy of every linear, blocks along each row.
    ``operands`` is :attr:`Probe.operands`: layer name -> {"x": (N, in), "dy": (N, out), ...},
    float64, every width a multiple of 128 (as this model's are).

    Notice: multiplying by 2^k moves a value by whole binades and leaves E4M3's 3-bit
    mantissa rounding as it was, so the block a value sits in matters only where the scaled
    value falls among E4M3's subnormals (below 2^-6), far under its block's amax.

    Returns {"values": how many, "differ": how many round differently, "below": the largest
    |v| / (amax of its 1x128 tile) among those, as a power of two (an integer k with every
    such value under 2^-k of that amax; None when none differ)}.
    """
    tile = ntt.OperandSpec("e4m3", (1, 128), "e8m0", "rceil")
    block = ntt.OperandSpec("e4m3", (1, 32), "e8m0", "rceil")
    values = differ = 0
    worst = 0.0
    for ops in operands.values():
        for t in (ops["x"], ops["dy"]):
            moved = ntt.quantize_operand(t, tile) != ntt.quantize_operand(t, block)
            amax = t.abs().reshape(t.shape[0], -1, 128).amax(-1, keepdim=True)
            ratio = (t.abs().reshape(t.shape[0], -1, 128) / amax).reshape(t.shape)
            values += t.numel()
            differ += int(moved.sum())
            if moved.any():
                worst = max(worst, float(ratio[moved].max()))
    below = math.floor(-math.log2(worst)) if differ else None
    return {"values": values, "differ": differ, "below": below}


def probe_errors(p: Probe, label: str) -> list:
    """The dW error of ``label`` against FP32's on each probe batch, step by step (fractions)."""
    return [g[label]["error"] for s in sorted(p.grads) for g in p.grads[s]]


def error_row(p: Probe, label: str) -> list:
    """``label``'s dW error: the median over the batches at each probe step, then the range
    over every batch (table cells)."""
    meds = [float(np.median([g[label]["error"] for g in p.grads[s]])) for s in sorted(p.grads)]
    e = probe_errors(p, label)
    return [f"{m:.2%}" for m in meds] + [f"{min(e):.2%}-{max(e):.2%}"]


def error_headers(p: Probe) -> list:
    return [_("step {s}").format(s=s) for s in sorted(p.grads)] + [_("range")]


def probe_paragraph(p: Probe) -> str:
    steps = sorted(p.grads)
    return _("dW error: the relative error of all linears' weight gradients against FP32's on "
             "the same weights and batch: at steps {steps} of the FP32 run, on {b} batches "
             "each (the step's own and {more} more, the same for every recipe): deterministic, "
             "no training noise.").format(steps=", ".join(str(s) for s in steps),
                                          b=len(p.grads[steps[0]]),
                                          more=len(p.grads[steps[0]]) - 1)


def paired_probe(p: Probe, a: str, b: str) -> dict:
    """``a``'s dW errors against ``b``'s, paired batch by batch over every probe batch
    (:func:`lectures.tinylm.probe.paired_errors`)."""
    return paired_errors(probe_errors(p, a), probe_errors(p, b))


def batch_verdict(p: Probe, a: str, b: str) -> str:
    """How ``a``'s dW error compares with ``b``'s on the same batches, in words."""
    c = paired_probe(p, a, b)
    text = _("lower on {k} of {n} batches, error ratio median {med:.3f} (range {lo:.3f} to "
             "{hi:.3f})").format(k=c["better"], n=c["n"], med=c["median"], lo=c["low"],
                                 hi=c["high"])
    if c["finding"]:
        return text + _(": beyond the batch-to-batch noise (sign test p = {p:.1g})").format(
            p=c["p"])
    return text + _(": within the batch-to-batch noise (sign test p = {p:.2f})").format(
        p=c["p"])


# ------------------------------------------------------------- demo 1: the three GEMMs, FP16
FP16_MIN_SUBNORMAL = 2.0 ** -24
FP16_MIN_NORMAL = 2.0 ** -14


@dataclass
class GemmDemo:
    shapes: list            # rows: GEMM, product, operand shapes, inner dim
    decades: list           # rows: operand, amax, median and 1st percentile of nonzero |v|,
                            # decades from that percentile to amax
    dy_range: tuple         # all layers' nonzero |dy|: 1st percentile, median, 99th, max
    flush: float            # fraction of nonzero dy values that round to 0 in FP16
    subnormal: float        # fraction that land among FP16's subnormals (precision lost)
    flush_scaled: float     # the same with the loss scaled by 2^16
    scale: float
    layers: list            # rows: layer, FP16 flushed / dW error, the same with PROBE_SCALE
    grad_step: int          # the probe step those rows come from
    total: dict             # label -> dW error over all layers at that step (FP16s, BF16)


def _operand_stats(values: torch.Tensor) -> tuple:
    """amax, median and 1st percentile of the nonzero magnitudes, decades from the latter to
    amax (a percentile: the single smallest value would measure one outlier)."""
    a = values.abs().flatten().double()
    nz = a[a > 0]
    p1, med = (float(v) for v in torch.quantile(nz, torch.tensor([0.01, 0.5],
                                                                  dtype=torch.float64)))
    return float(a.max()), med, p1, math.log10(float(a.max()) / p1)


def gemm_demo(p: Probe, layer: str = "layers.1.mlp.down", scale: float = 2.0 ** 16) -> GemmDemo:
    """The three GEMMs of one linear with this model's shapes, and what the operands span.

    Notice: weights and activations span a few decades; the gradient dy spans more, and
    most of its values are tiny: in FP16 a part of them lands among the subnormals or flushes
    to zero. In an FP16 run (GEMM outputs in FP16, as torch.autocast returns them) the
    gradients of the attention's q and k projections, the smallest of all, flush layer after
    layer; a loss scale of 2^16 moves them back into FP16's normal range.
    """
    op = p.operands[layer]
    n, d_in = op["x"].shape
    d_out = op["w"].shape[0]
    shapes = [
        ["fprop", "y = x Wᵀ", f"({n}, {d_in}) x ({d_out}, {d_in})ᵀ", d_in],
        ["dgrad", "dx = dy W", f"({n}, {d_out}) x ({d_out}, {d_in})", d_out],
        ["wgrad", "dW = dyᵀ x", f"({n}, {d_out})ᵀ x ({n}, {d_in})", n],
    ]
    decades = []
    for key in ("x", "w", "dy"):
        amax, med, p1, dec = _operand_stats(op[key])
        decades.append([key, f"{amax:.2e}", f"{med:.2e}", f"{p1:.2e}", f"{dec:.1f}"])
    dy = torch.cat([o["dy"].flatten() for o in p.operands.values()])
    dy = dy[dy != 0]
    a = dy.abs()
    q_ = torch.quantile(a, torch.tensor([0.01, 0.5, 0.99], dtype=torch.float64))
    dy_range = (*(float(v) for v in q_), float(a.max()))
    fp16 = ntt.OperandSpec("fp16")
    q = ntt.quantize_operand(dy.view(1, -1), fp16).flatten()
    qs = ntt.quantize_operand((dy * scale).view(1, -1), fp16).flatten()
    step = max(p.grads)
    first = p.grads[step][0]                # the training step's own batch
    g0, g1 = first["FP16, no loss scaling"], first["FP16 + loss scaling"]
    layers = [[name, f"{g0['flushed'][name]:.1%}", f"{g0['layer_error'][name]:.2%}",
               f"{g1['flushed'][name]:.1%}", f"{g1['layer_error'][name]:.2%}"]
              for name in g0["flushed"]]
    return GemmDemo(shapes, decades, dy_range,
                    float((q == 0).double().mean()),
                    float(((a < FP16_MIN_NORMAL) & (q != 0)).double().mean()),
                    float((qs == 0).double().mean()), scale, layers, step,
                    {k: first[k]["error"] for k in
                     ("FP16, no loss scaling", "FP16 + loss scaling", "BF16")})


def scaler_rows(runs: Runs) -> tuple[list, list]:
    """The loss scaler of each seed's "FP16 + loss scaling" run: log2 of its scale at each
    evaluation step and the steps it skipped (header, rows)."""
    res = runs.results["FP16 + loss scaling"]
    steps = res[0].val_steps
    header = [_("seed")] + [_("2^k at step {s}").format(s=s) for s in steps] + [_("skipped")]
    rows = [[str(r.seed)] + [f"{math.log2(r.loss_scale[s - 1]):.0f}" for s in steps]
            + [str(r.skipped)] for r in res]
    return header, rows


def print_gemm_demo(d: GemmDemo, runs: Runs, p: Probe) -> None:
    print_header(_("Demo 1: the three GEMMs of a linear layer, and FP16 against BF16"))
    print_table([_("GEMM"), _("product"), _("operand shapes"), _("inner dim")], d.shapes)
    print_table([_("operand"), "amax", _("median |v|"), _("1st percentile |v|"),
                 _("decades")], d.decades)
    print_paragraph(_("Weight gradients of one batch at step {step} of the FP32 run, under FP16 "
                      "(GEMM outputs in FP16) without a loss scale and with a fixed one of "
                      "2^{log:.0f}: the share of each layer's nonzero dy that FP16 flushes to "
                      "zero, and the relative error of its dW against FP32's.").format(
        step=d.grad_step, log=math.log2(PROBE_SCALE)))
    print_table([_("layer"), _("flushed, no scale"), _("dW error, no scale"),
                 _("flushed, scaled"), _("dW error, scaled")], d.layers)
    labels = ["FP32", "BF16", "FP16, no loss scaling", "FP16 + loss scaling"]
    print_curves(runs, labels)
    header, rows = scaler_rows(runs)
    print_table(header, rows)
    worst = max(d.layers, key=lambda r: float(r[1].rstrip("%")))
    scaled = runs.results["FP16 + loss scaling"]
    print_observations([
        _("The nonzero gradients dy of all linears: 1st percentile {p1:.1e}, median {p50:.1e}, "
          "99th percentile {p99:.1e}, largest {mx:.1e}. FP16's normal numbers run from 6.1e-05 "
          "to 65504, its subnormals down to 6.0e-08 (IEEE 754-2019, binary16).").format(
            p1=d.dy_range[0], p50=d.dy_range[1], p99=d.dy_range[2], mx=d.dy_range[3]),
        _("Cast to FP16 without a loss scale, {flush:.1%} of those values flush to zero and "
          "{sub:.1%} land among the subnormals, with fewer than 10 significant bits. Scaled by "
          "2^{log:.0f}, {flush_scaled:.2%} flush.").format(
            flush=d.flush, sub=d.subnormal, log=math.log2(d.scale), flush_scaled=d.flush_scaled),
        _("In FP16 every GEMM output is FP16, so the activation gradients dx are rounded layer "
          "after layer: at step {step}, {worst} loses {flush} of its dy and its dW is {err} "
          "off FP32's (with the loss scale: {flush_s}, {err_s}). Over all layers the dW error "
          "is {t0:.3%} ({t1:.3%} with the loss scale, {tb:.3%} in BF16).").format(
            step=d.grad_step, worst=worst[0], flush=worst[1], err=worst[2], flush_s=worst[3],
            err_s=worst[4], t0=d.total["FP16, no loss scaling"],
            t1=d.total["FP16 + loss scaling"], tb=d.total["BF16"]),
        _("The same comparison on all {n} probe batches (every probe step): FP16 without a "
          "loss scale against FP16 with one, dW error {b}.").format(
            n=len(probe_errors(p, "BF16")),
            b=batch_verdict(p, "FP16, no loss scaling", "FP16 + loss scaling")),
        _("Final validation loss, FP16 without loss scaling minus FP16 with it: {v}. Minus "
          "BF16: {v2}. AdamW divides each weight's step by the running rms of its own "
          "gradient, so a gradient made smaller by flushing still takes a full-sized step; "
          "only the direction of what is left counts.").format(v=verdict(compare(runs, "FP16, no loss scaling",
                                            "FP16 + loss scaling")),
                          v2=verdict(compare(runs, "FP16, no loss scaling", "BF16"))),
        _("The dynamic loss scaler starts at 2^16, doubles its scale after {interval} steps "
          "without an overflow and halves it when a gradient overflows FP16 (the step is "
          "skipped): torch.amp.GradScaler's constants except its growth interval of 2,000 "
          "steps, which would never act in {steps} steps. Seed {seed} skipped {skipped} steps "
          "and ended at 2^{log:.0f}; minus BF16: {v}.").format(
            interval=SCALER[3], steps=len(scaled[0].train_loss), seed=scaled[0].seed,
            skipped=scaled[0].skipped, log=math.log2(scaled[0].loss_scale[-1]),
            v=verdict(compare(runs, "FP16 + loss scaling", "BF16"))),
        _("BF16 keeps FP32's 8 exponent bits, so the gradients keep their range and no loss "
          "scale is needed; it gives up mantissa bits instead (7 against FP16's 10)."),
    ])


# ------------------------------------------------------------------ demo 2: FP8 per tensor
@dataclass
class FP8Demo:
    underflow: dict         # "E4M3" / "E5M2" -> fraction of nonzero dy that rounds to zero
    grad_error: dict        # the same -> relative error of the dW GEMM with dy in that format
    spike: dict             # the spiked layer's input x under E4M3 per-tensor scaling:
                            # "saturated": fraction of the spike step's values above the delayed
                            # scale's reach; "error_delayed"/"error_current": that step's relative
                            # error; "zero_after": fraction of the next step's nonzero values
                            # that flush to zero while the spike's amax sets the scale


def fp8_demo(p: Probe, layer: str = "layers.0.mlp.down") -> FP8Demo:
    """E4M3 against E5M2 for the gradient dy, per-tensor current scaling, on this run's dy.

    Notice: with one scale per tensor, amax / 448 sets E4M3's smallest step; the smallest
    gradients of the tensor then fall below E4M3's subnormals and vanish, while E5M2 reaches
    2^-16 · scale. E4M3 is the finer grid for the values that survive.
    """
    underflow, grad_error = {}, {}
    op = p.operands[layer]
    dw = (op["dy"].double().T @ op["x"].double())
    for fmt in ("e4m3", "e5m2"):
        spec = ntt.OperandSpec(fmt, scale_format="exact")
        nz = zero = 0
        for o in p.operands.values():
            dy = o["dy"]
            q = ntt.quantize_operand(dy, spec)
            zero += int(((q == 0) & (dy != 0)).sum())
            nz += int((dy != 0).sum())
        underflow[fmt.upper()] = zero / nz
        qdy = ntt.quantize_operand(op["dy"].T.contiguous(), spec).T.double()
        qdw = qdy.T @ op["x"].double()
        grad_error[fmt.upper()] = float((qdw - dw).norm() / dw.norm())
    x = p.operands[SPIKE[0]]["x"]
    xs = x * SPIKE[1]
    spec = ntt.OperandSpec("e4m3", scale_format="exact")
    amax, amax_spike = x.abs().max(), xs.abs().max()

    def rel(q, t):
        return float((q - t).norm() / t.norm())
    q_after = ntt.quantize_operand(x, spec, amax=amax_spike)
    q_plain = ntt.quantize_operand(x, spec)
    spike = {"saturated": float((xs.abs() > amax).double().mean()),
             "error_delayed": rel(ntt.quantize_operand(xs, spec, amax=amax), xs),
             "error_current": rel(ntt.quantize_operand(xs, spec), xs),
             "zero_after": float(((q_after == 0) & (x != 0)).double().sum() / (x != 0).sum()),
             "error_after": rel(q_after, x),
             "zero_plain": float(((q_plain == 0) & (x != 0)).double().sum() / (x != 0).sum()),
             "error_plain": rel(q_plain, x)}
    return FP8Demo(underflow, grad_error, spike)


def spike_rows(runs: Runs) -> list:
    """The spike's effect on one seed: the spiked run minus the same seed's run without the
    spike (identical up to the spike step, so every difference is the spike's doing), under
    delayed and current scaling. Per row: scaling, mean training-loss difference on the spike
    step, over the amax history's steps after it, over the steps after those, and the final
    validation difference (bits/byte)."""
    w = runs.workload
    s, hist = w.spike_step, ntt.RECIPES["fp8_delayed"].amax_history
    rows = []
    for label, plain in (("FP8 delayed + spike", "FP8 delayed"),
                         ("FP8 current + spike", "FP8 current")):
        a, b = runs.results[label][0], runs.results[plain][0]
        d = a.train_loss - b.train_loss
        assert not d[:s].any(), "the runs part ways before the spike"
        rows.append([_(label), float(d[s]), float(d[s + 1:s + 1 + hist].mean()),
                     float(d[s + 1 + hist:].mean()) if len(d) > s + 1 + hist else float("nan"),
                     a.final_val - b.final_val])
    return rows


def print_fp8_demo(d: FP8Demo, runs: Runs) -> None:
    print_header(_("Demo 2: FP8 per tensor: delayed and current scaling, E4M3 and E5M2"))
    print_curves(runs, ["BF16", "FP8 delayed", "FP8 current", "FP8 current, E4M3 gradients"])
    w = runs.workload
    hist = ntt.RECIPES["fp8_delayed"].amax_history
    s = w.spike_step
    rows = spike_rows(runs)
    print_paragraph(_("The spike, seed {seed}: training loss with the spike minus without it, "
                      "the same seed (the two runs are identical up to step {s})."
                      ).format(seed=w.seeds[0], s=s))
    print_table([_("recipe"), _("step {s}").format(s=s),
                 _("steps {a}-{b}").format(a=s + 1, b=min(s + hist, w.steps - 1)),
                 _("later steps"), _("final validation")],
                [[r[0]] + [signed(v) if np.isfinite(v) else "-" for v in r[1:]]
                 for r in rows])
    (dl, d_s, d_h, d_l, d_f), (cl, c_s, c_h, c_l, c_f) = rows
    print_observations([
        _("FP8 delayed minus current scaling: {v}.").format(
            v=verdict(compare(runs, "FP8 delayed", "FP8 current"))),
        _("Gradients in E4M3 instead of E5M2 (current scaling): {v}. On this run's dy, one "
          "scale per tensor: {e4:.2%} of the nonzero values underflow to zero in E4M3, {e5:.2%} "
          "in E5M2; the dW GEMM's relative error is {g4:.2%} with E4M3 and {g5:.2%} with "
          "E5M2: {which}").format(
            v=verdict(compare(runs, "FP8 current, E4M3 gradients", "FP8 current")),
            e4=d.underflow["E4M3"], e5=d.underflow["E5M2"], g4=d.grad_error["E4M3"],
            g5=d.grad_error["E5M2"],
            which=_("E4M3's finer steps outweigh what it loses at the bottom of the range.")
            if d.grad_error["E4M3"] < d.grad_error["E5M2"] else
            _("E5M2's range outweighs E4M3's finer steps.")),
        _("A spike: the input x of {layer} multiplied by {factor:.0f} for one step. Delayed "
          "scaling takes the scale from the amax of earlier steps: measured on this run's x, "
          "{sat:.1%} of the spiked values exceed its reach and saturate at 448, and that step's "
          "x has a relative error of {ed:.1%} (current scaling: {ec:.1%}). While the spike's "
          "amax stays in the history ({hist} steps here; TransformerEngine's default "
          "amax_history_len is 1,024), the ordinary x of the next steps gets a scale {factor:.0f} "
          "times too large: {zero:.1%} of its values flush to zero ({zero0:.1%} with its own "
          "amax), a relative error of {ea:.2%} ({ea0:.2%}): the large values, which dominate "
          "that error, keep their 3 mantissa bits.").format(
            layer=SPIKE[0], factor=SPIKE[1], sat=d.spike["saturated"],
            ed=d.spike["error_delayed"], ec=d.spike["error_current"],
            hist=hist, zero=d.spike["zero_after"],
            zero0=d.spike["zero_plain"], ea=d.spike["error_after"],
            ea0=d.spike["error_plain"]),
        _("In training (seed {seed}): on the spike step the loss changes by {c_s} bits/byte "
          "under current scaling, which lets the spike through, and by {d_s} under delayed "
          "scaling, which clips it. Over the {hist} steps the spike's amax stays in the "
          "history, delayed scaling's loss differs from the run without the spike by {d_h} on "
          "average (current scaling: {c_h}). Final validation: {d_f} delayed, {c_f} current."
          ).format(seed=w.seeds[0], c_s=signed(c_s), d_s=signed(d_s), hist=hist,
                   d_h=signed(d_h), c_h=signed(c_h), d_f=signed(d_f), c_f=signed(c_f)),
        _("So the damage delayed scaling is built to risk, a stale amax, is not resolvable at "
          "this scale: over those {hist} steps delayed scaling's extra cost beyond current "
          "scaling's is {extra} bits/byte (one seed, no interval), against the {c_s} the spike "
          "costs on its own step; measured, a scale {factor:.0f} times too large raises the "
          "ordinary x's error only from {ea0:.2%} to {ea:.2%}.").format(
            hist=hist, extra=signed(d_h - c_h), c_s=signed(c_s), factor=SPIKE[1],
            ea0=d.spike["error_plain"], ea=d.spike["error_after"]),
    ])


# ------------------------------------------------------------- demo 3: fine-grained FP8
def print_fine_fp8(runs: Runs, p: Probe) -> None:
    print_header(_("Demo 3: fine-grained FP8: DeepSeek-V3's tiles and MXFP8"))
    print_curves(runs, ["BF16", "FP8 current", "FP8 blockwise (DeepSeek-V3)",
                        "MXFP8, floor scales", "MXFP8, RCEIL scales"])
    print_paragraph(sentences(probe_paragraph(p), _(
        "The table gives the median over each step's batches and the range over all of them.")))
    labels = ["FP8 current", "FP8 blockwise (DeepSeek-V3)", "FP8 blockwise, power-of-two scales",
              "MXFP8, floor scales", "MXFP8, RCEIL scales"]
    print_table([_("recipe: median dW error")] + error_headers(p),
                [[_(label)] + error_row(p, label) for label in labels])
    print_observations([
        _("DeepSeek-V3 (arXiv 2412.19437, section 3.3) scales activations and gradients per 1x128 "
          "tile and weights per 128x128 block, all E4M3 with float32 scales; minus BF16: "
          "{v}. TransformerEngine's Float8BlockScaling rounds those scales to powers of two by "
          "default (its use_f32_scales is off). Power-of-two scales against float32 ones, "
          "dW error on the same batches: {b}.").format(
            v=verdict(compare(runs, "FP8 blockwise (DeepSeek-V3)", "BF16")),
            b=batch_verdict(p, labels[2], labels[1])),
        _("MXFP8 (OCP MX v1.0): E4M3 in blocks of 32 with a power-of-two E8M0 scale. The OCP "
          "rule floors the scale's exponent, so a block's amax can land above 448 and saturate; "
          "Mishra et al. (arXiv 2506.08027) round it up (RCEIL), which is what "
          "TransformerEngine's MXFP8BlockScaling does (the floor rule is OCP's, not a TE "
          "option), and report that the floor rule can diverge. Floor minus RCEIL in training: "
          "{v}. The floor rule's dW error against RCEIL's on the same batches: {b}.").format(
            v=verdict(compare(runs, "MXFP8, floor scales", "MXFP8, RCEIL scales")),
            b=batch_verdict(p, labels[3], labels[4])),
        _("MXFP8 (RCEIL) minus BF16: {v}.").format(
            v=verdict(compare(runs, "MXFP8, RCEIL scales", "BF16"))),
        pow2_observation(p, error_row(p, labels[2]) == error_row(p, labels[4])),
    ])


def pow2_observation(p: Probe, same_row: bool) -> str:
    """Why power-of-two 1x128 tiles and MXFP8's RCEIL blocks give (nearly) the same dW error."""
    t = p.tiles
    if t["differ"]:
        counted = _("Of this run's {n:,} x and dy values, {d:,} ({f:.3%}) round differently, "
                    "each below 2^-{k} of its 1x128 tile's amax.").format(
            n=t["values"], d=t["differ"], f=t["differ"] / t["values"], k=t["below"])
    else:
        counted = _("Of this run's {n:,} x and dy values, none rounds differently.").format(
            n=t["values"])
    return sentences(
        _("Power-of-two scales round a value as a plain E4M3 cast would, shifted by whole "
          "binades, whatever the size of its block: TransformerEngine's power-of-two 1x128 "
          "tiles and MXFP8's 1x32 RCEIL blocks can differ only where a scaled value falls "
          "among E4M3's subnormals."),
        counted,
        _("The two rows of dW errors above agree to every digit printed.") if same_row else "")


# ---------------------------------------------------------------------------- demo 4: FP4
LADDER = ["NVFP4, round-to-nearest", "NVFP4 + SR", "NVFP4 + SR + RHT", "NVFP4 + SR + RHT + 2D",
          "NVFP4 + BF16 output head", "NVFP4 (full recipe)"]


def high_precision_share(recipe) -> tuple[float, float]:
    """Shares of this model's linear weights and of its linears' GEMM FLOPs that ``recipe``
    keeps in BF16 (every GEMM of a linear costs 2 x tokens x in x out FLOPs)."""
    shapes = layer_shapes()
    total = sum(i * o for i, o in shapes.values())
    kept = sum(i * o for n, (i, o) in shapes.items() if recipe.is_high_precision(n))
    # the tokens are the same for every linear, so FLOPs are in proportion to the weights
    n = BATCH * MODEL.context
    flops = sum(3 * 2 * n * i * o for i, o in shapes.values())
    flops_kept = sum(3 * 2 * n * i * o for nm, (i, o) in shapes.items()
                     if recipe.is_high_precision(nm))
    return kept / total, flops_kept / flops


#: Each rung of demo 4 and what it is compared with: the row above, or for MXFP4 the NVFP4
#: row with the same techniques.
FP4_ROWS = LADDER + ["MXFP4", "MXFP4 (full recipe)"]
FP4_BASE = {"MXFP4": "NVFP4, round-to-nearest", "MXFP4 (full recipe)": "NVFP4 (full recipe)",
            **dict(zip(LADDER[1:], LADDER[:-1]))}


def fp4_rows(runs: Runs, p: Probe) -> list:
    """Demo 4's table: recipe, bits/byte, paired change in loss, median dW error, dW error
    against the base row batch by batch, share of weights in BF16."""
    rec = recipes()
    rows = []
    for label in FP4_ROWS:
        base = FP4_BASE.get(label)
        step = pair = ""
        if base is not None:
            c = compare(runs, label, base)
            step = signed(c["gap"]) + ("" if c["finding"] else " ~")
            q = paired_probe(p, label, base)
            pair = f"{q['better']}/{q['n']}, x{q['median']:.2f}" + ("" if q["finding"] else " ~")
        rows.append([_(label), f"{finals(runs, label).mean():.3f}", step,
                     f"{np.median(probe_errors(p, label)):.2%}", pair,
                     f"{high_precision_share(rec[label])[0]:.0%}"])
    return rows


def print_fp4(runs: Runs, p: Probe) -> None:
    print_header(_("Demo 4: FP4: the NVFP4 recipe, one technique at a time, against MXFP4"))
    print_curves(runs, ["BF16"] + FP4_ROWS)
    rec = recipes()
    print_table([_("recipe"), _("bits/byte"), _("change, paired"), _("dW error"),
                 _("dW: k/n, ratio"), _("BF16 weights")], fp4_rows(runs, p))
    n = len(probe_errors(p, LADDER[0]))
    print_paragraph(_("Change, paired: the mean over seeds of each seed's difference from the row "
                      "above (MXFP4 rows: from the NVFP4 row with the same techniques); ~ marks "
                      "one within noise, whose 95% t interval contains zero. dW error: the "
                      "median over the {n} probe batches. dW: k/n, ratio: on how many of the "
                      "{n} batches the row's dW error is lower than the row above's, and the "
                      "median ratio of the two; ~ marks a split the sign test cannot tell from "
                      "chance (p >= 0.05). ").format(n=n) + probe_paragraph(p))
    hp_w, hp_f = high_precision_share(rec["NVFP4 (full recipe)"])
    buys = {label: paired_probe(p, label, FP4_BASE[label]) for label in LADDER[1:]}

    def bought(label):
        c = buys[label]
        return _("x{med:.2f} ({k} of {n} batches lower{noise})").format(
            med=c["median"], k=c["better"], n=c["n"],
            noise="" if c["finding"] else _(", within noise"))
    print_observations([
        _("NVFP4 (arXiv 2509.25149, section 4): E2M1 elements in blocks of 16 with E4M3 scales "
          "under a float32 tensor scale; stochastic rounding on gradients, a 16x16 random "
          "Hadamard transform on the wgrad operands, 16x16 weight blocks, and about 16 % of the "
          "linear layers in BF16. Here {layers} stay in BF16: {w:.1%} of the linear weights and "
          "{f:.1%} of their GEMM FLOPs."
          ).format(layers=", ".join(HIGH_PRECISION), w=hp_w, f=hp_f),
        _("What each technique does to a step's dW error, paired over the same {n} batches "
          "(the error ratio to the row above): SR {sr}; the RHT {rht}; 2D weight blocks {d2}; "
          "the output head in BF16 {head}; the last down projection in BF16 too {full}. "
          "Round-to-nearest's error is a bias, repeated on every step; SR's is noise that "
          "averages out over steps (demo 5), so one step's error is not the whole story."
          ).format(
            n=n, sr=bought(LADDER[1]), rht=bought(LADDER[2]), d2=bought(LADDER[3]),
            head=bought(LADDER[4]), full=bought(LADDER[5])),
        _("Full NVFP4 recipe minus BF16: {v}.").format(
            v=verdict(compare(runs, "NVFP4 (full recipe)", "BF16"))),
        _("Full NVFP4 minus plain NVFP4 with round-to-nearest: {v}.").format(
            v=verdict(compare(runs, "NVFP4 (full recipe)", "NVFP4, round-to-nearest"))),
        _("Like for like, MXFP4 (E2M1, blocks of 32, E8M0 scales) minus NVFP4. As bare formats "
          "(round-to-nearest, every layer in FP4): {v}; dW error {b}. With the same BF16 "
          "layers, SR and RHT, as Tseng et al. (arXiv 2502.20586) train MXFP4 (NVFP4 adds its "
          "16x16 weight tiles): {v2}; dW error {b2}.").format(
            v=verdict(compare(runs, "MXFP4", "NVFP4, round-to-nearest")),
            v2=verdict(compare(runs, "MXFP4 (full recipe)", "NVFP4 (full recipe)")),
            b=batch_verdict(p, "MXFP4", "NVFP4, round-to-nearest"),
            b2=batch_verdict(p, "MXFP4 (full recipe)", "NVFP4 (full recipe)")),
        _("These runs are {steps} steps of {tokens} bytes: the papers' gaps between FP4 and "
          "BF16 open over hundreds of billions of tokens. Within noise here means not "
          "resolvable at this scale, not equal: the seed-to-seed spread of a loss after "
          "{steps} steps is larger than most techniques' effect on it. The probe resolves "
          "what the losses cannot, a technique's effect on the gradient of one step, on the "
          "same weights and batches; it does not say what that does to the loss over a long "
          "run, where noise averages out and a bias accumulates."
          ).format(steps=runs.workload.steps, tokens=BATCH * MODEL.context),
    ])


# -------------------------------------------------------- demo 5: why each technique works
@dataclass
class WhyDemo:
    layer: str
    bias_rows: list        # draws, RNE error, SR error of the mean dW
    rne_error: float       # relative error of dW with round-to-nearest dy (any number of draws)
    sr_errors: dict        # draws -> relative error of the mean of that many SR dW
    floor: float           # relative error of dyᵀ Q(x), exact dy: where SR's mean converges
    rht: dict              # before/after: kurtosis, mean block amax / rms, dW GEMM error
    transpose: dict        # "1x16" / "16x16" -> fraction of weights where Q(W)ᵀ != Q(Wᵀ)


def kurtosis(t: torch.Tensor) -> float:
    """E[(x - mean)^4] / var^2 of all entries (3 for a Gaussian)."""
    x = t.double().flatten()
    x = x - x.mean()
    return float((x ** 4).mean() / (x ** 2).mean() ** 2)


def why_demo(p: Probe, layer: str = "layers.0.mlp.down", draws=(1, 4, 16),
             seed: int = 0) -> WhyDemo:
    """Stochastic rounding, the RHT and 2-D weight blocks, measured on this run's operands.

    Notice: the error of round-to-nearest is the same on every draw, so averaging never
    removes it (a bias); stochastic rounding of dy is unbiased, so the mean of its draws
    converges, but to dyᵀ Q(x), not dyᵀ x: x is rounded to nearest in both arms, and its error
    is the floor. The RHT (random signs, then a Hadamard: diag(s) H) mixes each block of 16
    values; what it does to the block amax relative to the rms, and to the kurtosis, is
    measured, not assumed: it spreads a block's outlier over the block but also mixes values
    of equal sign into a larger one. With 1x16 blocks a weight quantized along its rows
    (fprop) and along its columns (dgrad) gets two different values; 16x16 blocks give the
    same value both ways.
    """
    op = p.operands[layer]
    dyt = op["dy"].T.contiguous()                                   # (out, N): wgrad's dyᵀ
    xt = op["x"].T.contiguous()                                     # (in, N)
    exact = dyt.double() @ xt.double().T                            # (out, in)

    def rel(a):
        return float((a - exact).norm() / exact.norm())
    spec_x = ntt.OperandSpec("e2m1", (1, 16), "e4m3")
    qx = ntt.quantize_operand(xt, spec_x).double()
    rne = ntt.quantize_operand(dyt, spec_x).double() @ qx.T
    sr_spec = replace(spec_x, mode="stochastic")
    g = torch.Generator().manual_seed(seed)
    acc = torch.zeros_like(exact)
    sr_errors = {}
    for k in range(1, max(draws) + 1):
        acc += ntt.quantize_operand(dyt, sr_spec, generator=g).double() @ qx.T
        if k in draws:
            sr_errors[k] = rel(acc / k)
    rows = [[k, f"{rel(rne):.2%}", f"{sr_errors[k]:.2%}"] for k in draws]

    h = ntt.random_hadamard(16, generator=torch.Generator().manual_seed(seed),
                            dtype=torch.float64)
    dyh, xh = ntt.apply_rht(dyt, h), ntt.apply_rht(xt, h)

    def amax_ratio(t):
        b = t.view(t.shape[0], -1, 16).double()
        return float((b.abs().amax(-1) / b.pow(2).mean(-1).sqrt().clamp_min(1e-300)).mean())
    q_plain = rne
    q_rht = ntt.quantize_operand(dyh, spec_x).double() @ ntt.quantize_operand(xh, spec_x).double().T
    rht = {"kurtosis_dy": (kurtosis(dyt), kurtosis(dyh)),
           "kurtosis_x": (kurtosis(xt), kurtosis(xh)),
           "amax_rms_dy": (amax_ratio(dyt), amax_ratio(dyh)),
           "amax_rms_x": (amax_ratio(xt), amax_ratio(xh)),
           "error": (rel(q_plain), rel(q_rht))}

    w = op["w"]
    transpose = {}
    for name, block in (("1x16", (1, 16)), ("16x16", (16, 16))):
        spec = ntt.OperandSpec("e2m1", block, "e4m3")
        a = ntt.quantize_operand(w, spec)                           # along rows: Q(W)
        b = ntt.quantize_operand(w.T.contiguous(), spec).T          # along columns: Q(Wᵀ)ᵀ
        transpose[name] = float((a != b).double().mean())
    return WhyDemo(layer, rows, rel(rne), sr_errors, rel(dyt.double() @ qx.T), rht, transpose)


def print_why(d: WhyDemo) -> None:
    print_header(_("Demo 5: why each technique works, on this run's tensors ({layer})").format(
        layer=d.layer))
    print_paragraph(_("The wgrad GEMM dW = dyᵀ x with both operands in NVFP4 (1x16 blocks along "
                      "the tokens): relative error of the mean of several quantized dW against "
                      "the exact one."))
    print_table([_("draws averaged"), _("round-to-nearest"), _("stochastic rounding")],
                d.bias_rows)
    k = max(d.sr_errors)
    r = d.rht
    print_table([_("wgrad operand, 1x16 blocks along the tokens"), _("before the RHT"),
                 _("after")], [
        [_("dy: kurtosis (Gaussian: 3)"), f"{r['kurtosis_dy'][0]:.1f}",
         f"{r['kurtosis_dy'][1]:.1f}"],
        [_("x: kurtosis (Gaussian: 3)"), f"{r['kurtosis_x'][0]:.1f}",
         f"{r['kurtosis_x'][1]:.1f}"],
        [_("dy: mean block amax / block rms"), f"{r['amax_rms_dy'][0]:.2f}",
         f"{r['amax_rms_dy'][1]:.2f}"],
        [_("x: mean block amax / block rms"), f"{r['amax_rms_x'][0]:.2f}",
         f"{r['amax_rms_x'][1]:.2f}"],
        [_("dW error, NVFP4 round-to-nearest"), f"{r['error'][0]:.2%}", f"{r['error'][1]:.2%}"],
    ])
    x_down = r["kurtosis_x"][1] < r["kurtosis_x"][0]
    dy_down = r["kurtosis_dy"][1] < r["kurtosis_dy"][0]
    print_observations([
        _("Round-to-nearest: {rne:.2%} error whatever the number of draws: a bias, the same "
          "error on every draw of this tensor. Stochastic rounding of dy: {one:.2%} for one "
          "draw, {many:.2%} for the mean of {k}. Its mean converges to dyᵀ Q(x), not to dyᵀ x: "
          "x is rounded to nearest in both arms, and dyᵀ Q(x) alone is {floor:.2%} off. That "
          "floor, not 1/sqrt(draws), is why the mean of {k} draws is not {r:.0f} times better "
          "than one.").format(rne=d.rne_error, one=d.sr_errors[1], many=d.sr_errors[k], k=k,
                              floor=d.floor, r=math.sqrt(k)),
        _("The 16x16 random Hadamard transform (Hᵀ H = I, so dyᵀ x is unchanged in exact "
          "arithmetic) takes the kurtosis of x from {kx0:.1f} to {kx1:.1f} ({x_dir}) and of dy "
          "from {k0:.1f} to {k1:.1f} ({dy_dir}); the dW error goes from {e0:.2%} to "
          "{e1:.2%}.").format(
            kx0=r["kurtosis_x"][0], kx1=r["kurtosis_x"][1], k0=r["kurtosis_dy"][0],
            k1=r["kurtosis_dy"][1], e0=r["error"][0], e1=r["error"][1],
            x_dir=_("lower") if x_down else _("higher"),
            dy_dir=_("lower") if dy_down else _("higher")),
        _("Weights in NVFP4: with 1x16 blocks, Q(W)ᵀ and Q(Wᵀ) differ in {t1:.1%} of the "
          "weights, so fprop and dgrad would use two different weights; with 16x16 blocks they "
          "differ in {t16:.1%}.").format(t1=d.transpose["1x16"], t16=d.transpose["16x16"]),
    ])


# ------------------------------------------------------------------- demo 6: one table
def _spec_name(s) -> str:
    """A short label: element format, block, scale rule (floor/RCEIL: E8M0 scales; none: FP32
    scales, or NVFP4's E4M3 ones for E2M1 in 1x16/16x16 blocks), SR, RHT, delayed."""
    if s.scale_format == "none":
        return s.fmt.upper()
    parts = [s.fmt.upper(), s.block if isinstance(s.block, str) else "x".join(map(str, s.block))]
    if s.scale_format == "e8m0":
        parts.append({"floor": "floor", "rceil": "RCEIL"}[s.scale_rule])
    parts += ["delayed"] * (s.scaling == "delayed") + ["SR"] * (s.mode == "stochastic")
    return " ".join(parts + ["RHT"] * s.rht)


def layer_shapes() -> dict:
    """(in_features, out_features) of every linear of the model, by name."""
    d, h, v = MODEL.d_model, MODEL.d_ff, MODEL.vocab_size
    shapes = {}
    for i in range(MODEL.n_layers):
        shapes.update({f"layers.{i}.attn.{p}": (d, d) for p in "qkvo"})
        shapes.update({f"layers.{i}.mlp.gate": (d, h), f"layers.{i}.mlp.up": (d, h),
                       f"layers.{i}.mlp.down": (h, d)})
    shapes["lm_head"] = (d, v)
    return shapes


def bits_per_gemm(recipe) -> tuple:
    """Operand bits per element of fprop, dgrad and wgrad: Recipe.bits_moved summed over this
    model's linears (tokens per step = BATCH x context), divided by the operands' elements.
    Layers matching the recipe's high_precision_layers count as BF16."""
    n = BATCH * MODEL.context
    bits = {g: 0 for g in ("fprop", "dgrad", "wgrad")}
    elems = {g: 0 for g in bits}
    for name, (din, dout) in layer_shapes().items():
        r = ntt.RECIPES["bf16"] if recipe.is_high_precision(name) else recipe
        for g, b in r.bits_moved(n, din, dout).items():
            bits[g] += b
        elems["fprop"] += n * din + dout * din
        elems["dgrad"] += n * dout + dout * din
        elems["wgrad"] += n * dout + n * din
    return tuple(bits[g] / elems[g] for g in ("fprop", "dgrad", "wgrad"))


SUMMARY = ["FP32", "BF16", "FP16 + loss scaling", "FP8 delayed", "FP8 current",
           "FP8 blockwise (DeepSeek-V3)", "MXFP8, RCEIL scales", "NVFP4 (full recipe)",
           "MXFP4 (full recipe)", "MXFP4"]


def summary_rows(runs: Runs) -> tuple[list, list]:
    """Two tables' rows: recipe -> operand formats; recipe -> bits, loss, spread, gap."""
    rec = recipes()
    formats, losses = [], []
    for label in SUMMARY:
        r = rec[label]
        f = finals(runs, label)
        c = compare(runs, label, "BF16")
        formats.append([_(label), _spec_name(r.fprop[0]), _spec_name(r.fprop[1]),
                        _spec_name(r.wgrad[0])])
        w, fl = high_precision_share(r)
        assert w == fl    # every linear sees the same tokens: FLOPs in proportion to weights
        losses.append([_(label), " / ".join(f"{b:.2f}" for b in bits_per_gemm(r)),
                       f"{w:.0%}", f"{f.mean():.3f}",
                       "" if label == "BF16" else signed(c["gap"])
                       + ("" if c["finding"] else " ~")])
    return formats, losses


def print_summary(runs: Runs) -> None:
    print_header(_("Demo 6: recipe -> operand formats, bits moved, validation loss"))
    w = runs.workload
    formats, losses = summary_rows(runs)
    print_table([_("recipe"), _("x (fprop, wgrad)"), _("W (fprop, dgrad)"),
                 _("dy (dgrad, wgrad)")], formats)
    print_paragraph(_("Scales are float32 per tensor or block, except: floor and RCEIL are E8M0 "
                      "power-of-two block scales (OCP MX); E2M1 in 1x16 or 16x16 blocks has "
                      "NVFP4's E4M3 block scales under a float32 tensor scale."))
    print_table([_("recipe"), _("bits: fprop/dgrad/wgrad"), _("kept in BF16"),
                 _("bits/byte"), _("gap to BF16")], losses)
    noise = [label for label in SUMMARY[2:] if not compare(runs, label, "BF16")["finding"]]
    print_observations([
        _("Each loss is the mean over {n} seeds ({seeds}) after {steps} steps of {tokens} "
          "bytes. The gap to BF16 is paired: the mean of each seed's difference, marked ~ when "
          "within noise, when the 95% t interval of that mean contains zero. Kept in BF16: "
          "the share of the linear weights the recipe keeps in BF16, and of their GEMM FLOPs "
          "alike (every linear multiplies the same tokens).").format(
            n=len(w.seeds), seeds=", ".join(map(str, w.seeds)), steps=w.steps,
            tokens=BATCH * MODEL.context),
        _("Within noise of BF16 here: {labels}.").format(
            # TRANSLATORS: the separator between the items of a list inside a sentence
            labels=_("; ").join(_(label) for label in noise) or _("none")),
        _("Bits moved count each operand's element bits plus its scales' bits amortised over "
          "the block, averaged over the model's linears (layers kept in BF16 count 16). Native "
          "hardware: FP8 GEMMs on NVIDIA Hopper (H100 datasheet: {fp8:,.0f} dense FP8 TFLOPS, "
          "twice BF16), MXFP8, MXFP4 and NVFP4 on Blackwell (NVIDIA Blackwell architecture "
          "technical brief); these runs emulate all of them, in float64.").format(
            fp8=H100.tflops["fp8"]),
    ])


# ------------------------------------------------------------------------------- the lecture
def title() -> str:
    return _("Lecture 10: training in low precision")


def intro(w: Workload) -> list[str]:
    return [
        _("A training step of a linear layer is three GEMMs, and a recipe says how each of their "
          "six operands is quantized. Here a LLaMA-style model ({params} parameters: d {d}, "
          "{layers} layers, SwiGLU {ff}, context {ctx}) learns the bytes of CPython's language "
          "reference from scratch under each recipe.").format(
            params=f"{params():,}", d=MODEL.d_model, layers=MODEL.n_layers, ff=MODEL.d_ff,
            ctx=MODEL.context),
        _("Losses are in bits per byte on validation text the model never trains on (8 = a "
          "uniform guess). Each recipe trains {steps} steps with seeds {seeds}; recipes are "
          "compared seed by seed, and a mean difference whose 95% t interval contains zero is "
          "called within noise.").format(
            steps=w.steps, seeds=", ".join(map(str, w.seeds))),
    ]


def params() -> int:
    from lectures.tinylm.model import TinyLM
    return sum(p.numel() for p in TinyLM(MODEL, "fp32").parameters())


def build_parser():
    """The lecture's command line: --quick, --workers and --save, plus console.lecture_parser's
    --help and --lang; any other option is an error."""
    parser = lecture_parser(_("Lecture 10: training in low precision (FP16, FP8, MXFP8, NVFP4)."))
    parser.add_argument("--quick", action="store_true",
                        help=_("fewer steps and seeds (the tests' workload)"))
    parser.add_argument("--workers", type=int, default=2,
                        help=_("CPU worker processes, one torch thread each (default 2)"))
    parser.add_argument("--save", metavar="PATH", type=save_path,
                        help=_("also write the run's results as JSON to PATH (notebook 10 "
                               "prints and draws lectures/widgets/lecture10_stored.json)"))
    return parser


def parse_args(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(_("--workers must be at least 1"))
    return args


@dataclass
class Lecture:
    """Everything the lecture prints, computed."""
    runs: Runs
    probe: Probe
    gemm: GemmDemo
    fp8: FP8Demo
    why: WhyDemo


#: The runs each demo's text reads, in print order (demo 5 reads the probe run only; demo 6,
#: the summary, every label).
DEMO_RUNS = (
    ("FP32", "BF16", "FP16, no loss scaling", "FP16 + loss scaling"),
    ("BF16", "FP8 delayed", "FP8 current", "FP8 current, E4M3 gradients", "FP8 delayed + spike",
     "FP8 current + spike"),
    ("BF16", "FP8 current", "FP8 blockwise (DeepSeek-V3)", "MXFP8, floor scales",
     "MXFP8, RCEIL scales"),
    ("BF16", *LADDER, "MXFP4", "MXFP4 (full recipe)"),
    (),
    None,
)


def demos(gemm: GemmDemo, fp8: FP8Demo, why: WhyDemo, probe: Probe) -> list:
    """``(labels, print_demo(runs))`` for demos 1-6 in print order; ``labels``: the runs the
    demo reads (:data:`DEMO_RUNS`, None for all of them)."""
    printers = (lambda runs: print_gemm_demo(gemm, runs, probe),
                lambda runs: print_fp8_demo(fp8, runs),
                lambda runs: print_fine_fp8(runs, probe),
                lambda runs: print_fp4(runs, probe),
                lambda runs: print_why(why),
                print_summary)
    return list(zip(DEMO_RUNS, printers))


def compute(w: Workload, workers: int = 2, stream: bool = False) -> Lecture:
    """Every run and every demo's numbers. The probe run trains in this process while the
    workers train the recipes. With ``stream``, print the lecture as it goes: the title
    first, then each demo as soon as its runs are done (the same text as :func:`show`
    afterwards)."""
    if stream:
        print_title(title(), intro(w))
        sys.stdout.flush()
    device = device_name()
    done: dict = {}

    def probe_and_demos() -> None:
        done["probe"] = probe = probe_run(w, device)
        done["demos"] = gemm_demo(probe), fp8_demo(probe), why_demo(probe)
        if stream:
            done["on_label"] = demo_queue(demos(*done["demos"], probe), tuple(recipes()))

    def on_label(runs: Runs) -> None:
        if stream:
            done["on_label"](runs)
    todo = jobs(w, device)
    update, close = progress(len(todo))
    try:
        runs = run_all(w, todo, train_job, workers=workers if device == "cpu" else 1,
                       progress=update, on_label=on_label, meanwhile=probe_and_demos)
    finally:
        close()
    return Lecture(runs, done["probe"], *done["demos"])


def show(lec: Lecture) -> None:
    print_title(title(), intro(lec.runs.workload))
    for _labels, print_demo in demos(lec.gemm, lec.fp8, lec.why, lec.probe):
        print_demo(lec.runs)


def stored_lecture(lec: Lecture) -> Lecture:
    """What a stored run keeps of ``lec``: everything :func:`show` prints and notebook 10 draws.
    The probe keeps its step, the histogram of dy, the power-of-two tiles' count and each
    recipe's dW error on each batch; its
    GEMM operands and the other gradient statistics, which only the demos' computations read,
    are left out."""
    p = lec.probe
    grads = {step: [{label: {"error": g["error"]} for label, g in batch.items()}
                    for batch in batches] for step, batches in p.grads.items()}
    return replace(lec, probe=Probe(p.step, {}, grads, tiles=p.tiles,
                                    dy_histogram=p.dy_histogram))


def save(lec: Lecture, path, command: str = SCRIPT) -> Path:
    """Write :func:`stored_lecture` of ``lec`` to ``path`` as JSON, atomically
    (:func:`lectures.results.save_results`), under the name ``"lecture"``, with the command
    that ran it and its workload. Returns the path."""
    return save_results(path, {"lecture": stored_lecture(lec)},
                        {"command": command, "workload": asdict(lec.runs.workload)})


def main(argv=None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    lec = compute(QUICK if args.quick else FULL, workers=args.workers, stream=True)
    if args.save:
        save(lec, args.save, SCRIPT + (" --quick" if args.quick else ""))


if __name__ == "__main__":
    run_lecture(main, build_parser)
