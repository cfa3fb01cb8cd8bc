"""Lecture 06: quantization-aware training (QAT).

The question: rounding has zero gradient almost everywhere, so how can a network learn weights
that live on a 4-bit or 2-bit grid, and is it worth it compared with rounding a trained network
afterwards (post-training quantization, PTQ)?

Three demos, in order:

1. The straight-through estimator (STE) on one number: the staircase, its zero derivative, the
   surrogate gradient with its clamp mask, and a one-weight descent with and without it.
2. Why master weights: train a linear model whose weights are *stored* in INT4 or FP8 E4M3 and
   watch Adam's small updates round away; keep FP32 master weights (or round the store
   stochastically) and training proceeds.
3. PTQ against QAT on real data: a small MLP on scikit-learn's bundled digits (1,797 8x8
   images, no download). Accuracy for FP32, then PTQ and QAT at INT8, INT4, INT2 and NVFP4
   weights, with and without INT8 activations.

How to read the output: each demo prints a table, then "What to notice" with the numbers the
table computed. Accuracies are on a fixed held-out test split (360 images, so one image is
0.28 percentage points).

Run: ``python lectures/06_quantization_aware_training.py`` (from the repository root or from
lectures/). Takes about 10 s on a 2-core CPU; uses CUDA when present. Deterministic: fixed
seeds and split; demo 3 computes in float64 with FP32 master weights, so the output is the same
on every CPU, whatever its vector instructions, BLAS or thread count.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

# cuBLAS needs this set before CUDA starts to run deterministically (no effect on CPU).
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402

from console import lecture_parser, run_lecture  # noqa: E402
from console.i18n import N_  # noqa: E402
from lectures import one_torch_thread  # noqa: E402
from lectures.i18n import domain  # noqa: E402

_ = domain("lecture06").gettext


def _missing_dependencies() -> None:
    raise SystemExit(_("Lecture 06 needs torch 2.13.0 and scikit-learn: .venv/bin/pip install "
                       "-e '.[lectures]' (see the README for the CPU build of torch)"))


try:
    import sklearn  # noqa: F401
    import torch
except ImportError:
    if __name__ == "__main__":
        run_lecture(_missing_dependencies)     # reads --lang, then exits with the message
    raise
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from console import (print_header, print_observations,  # noqa: E402
                     print_paragraph, print_table, print_title)
from numfmt import FP8_E4M3  # noqa: E402
from numfmt.qat import (QParams, adam_update, fake_quantize, fake_quantize_float,  # noqa: E402
                        ste_backward)
from numfmt.torch.qat import QATLinear  # noqa: E402

# ============================================================ 1. the straight-through estimator
STE_GRID = QParams(np.array(1.0), np.array(0), -8, 7)  # scale 1, codes [-8, 7]
STE_EXAMPLE = np.array([-8.6, -8.4, -8.0, 7.0, 7.4, 7.6])


@dataclass
class STEDemo:
    x: np.ndarray            # (N,) inputs swept across the range and beyond
    values: np.ndarray       # (N,) the staircase fake_quantize(x)
    mask: np.ndarray         # (N,) STE surrogate derivative (1 inside, 0 where clamped)
    example: list            # rows: x, fake quant, STE mask
    target: float            # the 1-D descent's target
    w_true: np.ndarray       # (steps+1,) weight under the true gradient (always zero)
    w_ste: np.ndarray        # (steps+1,) weight under the STE
    q_ste: np.ndarray        # (steps+1,) its quantized value


def ste_demo(target: float = 2.6, w0: float = -5.3, lr: float = 0.1, steps: int = 60) -> STEDemo:
    """The staircase and its surrogate gradient; gradient descent on ``(Q(w) - target)^2``.

    Notice: the true derivative of Q is zero between the steps, so the true gradient never
    moves ``w``. The STE pretends dQ/dw = 1 inside the range: ``w`` walks to the target and then
    hovers around the rounding boundary between the two grid points that bracket it.
    """
    x = np.linspace(-10.0, 9.0, 381)
    fq = fake_quantize(x, STE_GRID)
    ex = fake_quantize(STE_EXAMPLE, STE_GRID)
    rows = [[f"{a:+.1f}", f"{b:+.0f}", int(c)] for a, b, c in zip(STE_EXAMPLE, ex.values, ex.mask)]
    w_true, w_ste = [w0], [w0]
    for _ in range(steps):
        for hist, use_ste in ((w_true, False), (w_ste, True)):
            w = np.array([hist[-1]])
            q = fake_quantize(w, STE_GRID)
            dloss_dq = 2.0 * (q.values - target)
            # The true derivative of a staircase is 0 wherever it exists.
            grad = ste_backward(dloss_dq, q) if use_ste else 0.0 * dloss_dq
            hist.append(float(w[0] - lr * grad[0]))
    w_ste = np.array(w_ste)
    return STEDemo(x, fq.values, fq.mask.astype(float), rows, target, np.array(w_true), w_ste,
                   fake_quantize(w_ste, STE_GRID).values)


def print_ste(d: STEDemo) -> None:
    print_header(_("Demo 1: the straight-through estimator: scale 1, codes [-8, 7]"))
    # TRANSLATORS: these two tables print back to back, and tests/text_checks.py reads them
    # as one table: keep the two rows of headers the same display width.
    print_table(["x", _("fake quant"), _("STE mask")], d.example)
    n = len(d.w_ste) - 1
    steps = [0, 5, 10, 15, n - 3, n - 2, n - 1, n]
    print_table([_("step"), _("w (true gradient)"), _("w (STE)"), _("Q(w) (STE)")],
                [[s, f"{d.w_true[s]:+.3f}", f"{d.w_ste[s]:+.3f}", f"{d.q_ste[s]:+.0f}"]
                 for s in steps])
    tail = d.q_ste[-20:]
    print_observations([
        _("Rounding alone keeps the gradient: -8.4 rounds to -8, a code inside the range, so its "
          "mask is 1. Only -8.6 and 7.6, whose codes -9 and 8 are clamped, get a zero mask."),
        _("With the true gradient (zero almost everywhere) w stays at {w:+.1f} for {steps} "
          "steps.").format(w=d.w_true[-1], steps=len(d.w_true) - 1),
        _("With the STE, w reaches the target {target} and Q(w) then alternates between {low:+.0f} "
          "and {high:+.0f}, the grid points around it: the latent weight hovers at the rounding "
          "boundary (the oscillation QAT is known for).").format(
            target=d.target, low=tail.min(), high=tail.max()),
    ])


# ==================================================================== 2. why master weights
@dataclass
class MasterDemo:
    steps: int
    lr: float
    int4_step: float
    rows: list                                   # name, start, final loss, weights moved
    curves: dict = field(default_factory=dict)   # name -> (steps+1,) loss
    labels: dict = field(default_factory=dict)   # name -> (English template, format), to print


# The names of demo 2's runs (the keys of rows and curves); {fmt} is INT4 or E4M3.
STORE_NEAREST = N_("{fmt} store, nearest")
STORE_STOCHASTIC = N_("{fmt} store, stochastic")
MASTER_VIEW = N_("{fmt} view of FP32 master")


def _regression(seed: int = 0, n: int = 256, k: int = 16):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, k))                  # (N, K)
    w_star = rng.uniform(-1.5, 1.5, size=k)      # (K,)
    return x, x @ w_star


def master_weights_demo(steps: int = 400, lr: float = 0.01, seed: int = 0) -> MasterDemo:
    """Train ``y = X w`` with Adam while the weights are stored in INT4 or FP8 E4M3.

    Notice: Adam moves each weight by about ``lr`` per step. Stored directly on a grid whose
    half-step is larger than that, the update rounds back to the old value and the loss stalls.
    With FP32 master weights the update accumulates and the forward pass uses the fake-quantized
    view; stochastic rounding of the store moves a weight a whole step with probability
    (update / step), so it is right on average and trains too, with noise.
    """
    x, y = _regression(seed)
    k = x.shape[1]
    int4_step = 0.25
    int4 = QParams(np.array(int4_step), np.array(0), -7, 7)   # fixed INT4 grid, range +-1.75

    def loss(w):
        return 0.5 * float(np.mean((x @ w - y) ** 2))

    def grad(w):
        return x.T @ (x @ w - y) / len(y)

    quantizers = {
        "INT4": lambda w, r, g: fake_quantize(w, int4, r, g),
        "E4M3": lambda w, r, g: fake_quantize_float(w, FP8_E4M3, 1.0, r, g),
    }
    runs = {"FP32": ("fp32", None)}
    labels = {"FP32": ("FP32", "")}
    for fmt in quantizers:
        for template, run in ((STORE_NEAREST, ("store", (fmt, "nearest"))),
                              (STORE_STOCHASTIC, ("store", (fmt, "stochastic"))),
                              (MASTER_VIEW, ("master", (fmt, "nearest")))):
            runs[template.format(fmt=fmt)] = run
            labels[template.format(fmt=fmt)] = (template, fmt)
    out = MasterDemo(steps, lr, int4_step, [], labels=labels)
    for name, (kind, spec) in runs.items():
        rng = np.random.default_rng(seed + 1)
        w, m, v = np.zeros(k), np.zeros(k), np.zeros(k)   # the stored (or master) weights
        moved = np.zeros(k, dtype=bool)
        used = w
        curve = [loss(used)]
        for t in range(1, steps + 1):
            if kind == "master":
                fq = quantizers[spec[0]](w, "nearest", None)
                used = fq.values                           # forward uses the view
                g = ste_backward(grad(used), fq)
            else:
                g = grad(w)
            new, m, v = adam_update(w, g, m, v, t, lr)
            if kind == "store":
                new = quantizers[spec[0]](new, spec[1], rng).values
            moved |= new != w
            w = new
            used = quantizers[spec[0]](w, "nearest", None).values if kind == "master" else w
            curve.append(loss(used))
        out.curves[name] = np.array(curve)
        out.rows.append([name, f"{curve[0]:.3f}", f"{curve[-1]:.4f}", f"{moved.mean():.0%}"])
    return out


def print_master_weights(d: MasterDemo) -> None:
    print_header(_("Demo 2: why master weights: Adam on a 16-weight linear model, weights "
                   "from 0"))

    def label(name):
        template, fmt = d.labels.get(name, (name, ""))
        return _(template).format(fmt=fmt)

    print_table([_("weights"), _("loss at step {step}").format(step=0),
                 _("loss at step {step}").format(step=d.steps), _("weights that moved")],
                [[label(row[0])] + row[1:] for row in d.rows])
    c = {name: curve[-1] for name, curve in d.curves.items()}      # the final losses
    print_observations([
        _("Adam's steps are about lr = {lr}. The INT4 grid step is {step}, so stored in INT4 "
          "every update rounds back to 0: the loss stays at {loss:.3f}.").format(
            lr=d.lr, step=d.int4_step, loss=c["INT4 store, nearest"]),
        _("E4M3 has fine steps near zero, so the stored weights start to move, then stall where "
          "the spacing exceeds twice the update: loss {loss:.3f} after {steps} steps.").format(
            loss=c["E4M3 store, nearest"], steps=d.steps),
        _("With FP32 master weights the loss of the quantized view falls to {int4:.4f} (INT4) "
          "and {e4m3:.4f} (E4M3), against {fp32:.4f} in FP32.").format(
            int4=c["INT4 view of FP32 master"], e4m3=c["E4M3 view of FP32 master"],
            fp32=c["FP32"]),
        _("Stochastic rounding of the store is unbiased, so it trains without a master copy: "
          "{int4:.4f} (INT4), {e4m3:.4f} (E4M3), at the price of noise.").format(
            int4=c["INT4 store, stochastic"], e4m3=c["E4M3 store, stochastic"]),
    ])


# ==================================================================== 3. PTQ against QAT on digits
WEIGHT_FORMATS = ("INT8", "INT4", "INT2", "NVFP4")


@dataclass
class DigitsConfig:
    hidden: int = 16
    epochs: int = 30          # FP32 training
    qat_epochs: int = 8       # QAT fine-tuning from the FP32 weights
    batch: int = 64
    lr: float = 3e-3
    qat_lr: float = 1e-3
    seed: int = 0
    test_size: int = 360


@dataclass
class DigitsResult:
    config: DigitsConfig
    n_train: int
    n_test: int
    base_accuracy: float                           # FP32 after cfg.epochs (QAT starts here)
    fp32_accuracy: float                           # FP32 after qat_epochs more (PTQ starts here)
    rows: list                                     # weights, acts, PTQ %, QAT %
    accuracy: dict                                 # (method, weights, acts) -> fraction
    curves: dict = field(default_factory=dict)     # label -> per-epoch mean training loss


def device() -> torch.device:
    """CUDA when present, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def digits_data(cfg: DigitsConfig, dev: torch.device):
    """Fixed stratified split of scikit-learn's digits; pixels 0..16 scaled to [0, 1]."""
    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x / 16.0, y, test_size=cfg.test_size,
                                              random_state=cfg.seed, stratify=y)
    def t(a, dt): return torch.as_tensor(a, dtype=dt, device=dev)
    return (t(x_tr, torch.float64), t(y_tr, torch.long), t(x_te, torch.float64),
            t(y_te, torch.long))


def make_mlp(cfg: DigitsConfig, weights: str | None = None, acts: int | None = None,
             base: nn.Module | None = None) -> nn.Sequential:
    """64 -> hidden -> 10 MLP of QATLinear layers, copying ``base``'s weights when given."""
    if base is None:
        layers = [QATLinear(64, cfg.hidden), QATLinear(cfg.hidden, 10)]
    else:
        layers = [QATLinear.from_linear(base[i], weights, act_bits=acts) for i in (0, 2)]
    return nn.Sequential(layers[0], nn.ReLU(), layers[1])


def train(model, data, epochs: int, lr: float, seed: int, desc: str = "",
          progress: bool = False) -> list[float]:
    """Adam on cross-entropy; returns the mean training loss of each epoch.

    The model computes in float64 and its weights are rounded to float32 after every step, so
    the master weights are FP32 values while every sum is exact to about 1e-16. Why: QAT's latent
    weights hover at rounding boundaries (demo 1), so in float32 arithmetic the last bit of a sum,
    which depends on the CPU's vector width (ATen's AVX2 and AVX-512 kernels add in different
    orders), flips a rounding decision and moves the INT2 accuracy by points. A float64 result
    that differs in its last bit lands on the other side of a float32 rounding boundary about
    once in 2**29 values, so the printed accuracies are the same on every CPU.
    """
    x, y = data[0], data[1]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    losses = []
    for _ in tqdm(range(epochs), desc=desc, disable=not progress, leave=False):
        order = torch.randperm(len(x), generator=gen).to(x.device)
        total = 0.0
        for i in range(0, len(x), 64):
            idx = order[i:i + 64]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():            # FP32 master weights: round each step's result
                for p in model.parameters():
                    p.copy_(p.float())
            total += loss.item() * len(idx)
        losses.append(total / len(x))
    return losses


@torch.no_grad()
def calibrate(model, x: torch.Tensor, batch: int = 64) -> None:
    """PTQ calibration: observe activation ranges on training batches (train mode, no grad)."""
    model.train()
    for i in range(0, len(x), batch):
        model(x[i:i + batch])


@torch.no_grad()
def accuracy(model, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    return float((model(x).argmax(dim=1) == y).float().mean())


def ptq_vs_qat(cfg: DigitsConfig | None = None, formats=WEIGHT_FORMATS, acts=(None, 8),
               progress: bool = False) -> DigitsResult:
    """Train an FP32 MLP on digits, then quantize it after training (PTQ) or fine-tune it with
    fake quantization in the loop (QAT), for each weight format, without and with INT8
    activations.

    Notice: INT8 costs nothing either way. PTQ at INT4 and NVFP4 loses a little and at INT2
    (ternary weights) a lot. QAT, with the same training budget, wins much of the INT2 loss
    back, because the master weights move to places that round well; at INT4 its gain is the
    size of a few test images and changes with the seed (:func:`seed_spread`).
    """
    cfg = cfg or DigitsConfig()
    with one_torch_thread():  # tiny matmuls: one thread is faster and immune to busy cores
        return _ptq_vs_qat(cfg, formats, acts, progress)


def _ptq_vs_qat(cfg, formats, acts, progress) -> DigitsResult:
    torch.manual_seed(cfg.seed)
    torch.use_deterministic_algorithms(True)
    dev = device()
    data = digits_data(cfg, dev)
    x_tr, _, x_te, y_te = data
    base = make_mlp(cfg).to(dev, torch.float64)
    curves = {"FP32": train(base, data, cfg.epochs, cfg.lr, cfg.seed, "FP32", progress)}
    # Equal training budgets: PTQ rounds an FP32 model trained for the QAT epochs too.
    fp32 = make_mlp(cfg, base=base)
    curves["FP32"] += train(fp32, data, cfg.qat_epochs, cfg.qat_lr, cfg.seed + 1, "FP32",
                            progress)
    acc, rows = {}, []
    act_bits = acts
    for weights in formats:
        for acts in act_bits:
            ptq = make_mlp(cfg, weights, acts, base=fp32)
            if acts is not None:
                calibrate(ptq, x_tr)
            acc[("PTQ", weights, acts)] = accuracy(ptq, x_te, y_te)
            label = f"QAT {weights}" + (" A8" if acts else "")
            qat = make_mlp(cfg, weights, acts, base=base)
            curves[label] = train(qat, data, cfg.qat_epochs, cfg.qat_lr, cfg.seed + 1, label,
                                  progress)
            acc[("QAT", weights, acts)] = accuracy(qat, x_te, y_te)
            rows.append([weights, "INT8" if acts else "FP32",
                         f"{100 * acc[('PTQ', weights, acts)]:.1f}",
                         f"{100 * acc[('QAT', weights, acts)]:.1f}"])
    return DigitsResult(cfg, len(x_tr), len(x_te), accuracy(base, x_te, y_te),
                        accuracy(fp32, x_te, y_te), rows, acc, curves)


@dataclass
class SeedSpread:
    seeds: tuple
    gains: dict   # weights -> list of (QAT - PTQ) accuracy in points, one per seed
    rows: list


def seed_spread(seeds=(0, 1, 2), formats=("INT4", "INT2"),
                progress: bool = False) -> SeedSpread:
    """QAT minus PTQ accuracy (weights only) for several seeds (split, init and batch order).

    Notice: one run on 360 test images moves in steps of 0.28 points, so a gain of one or two
    images can flip sign with the seed. The INT2 gain is large for every seed; the INT4 gain is
    small and positive on average, not in every run.
    """
    gains = {w: [] for w in formats}
    for seed in seeds:
        r = ptq_vs_qat(DigitsConfig(seed=seed), formats, acts=(None,), progress=progress)
        for w in formats:
            gains[w].append(100 * (r.accuracy[("QAT", w, None)] - r.accuracy[("PTQ", w, None)]))
    rows = [[w] + [f"{g:+.1f}" for g in gains[w]] + [f"{np.mean(gains[w]):+.1f}"]
            for w in formats]
    return SeedSpread(tuple(seeds), gains, rows)


def print_seed_spread(s: SeedSpread) -> None:
    print("\n" + _("QAT minus PTQ accuracy in percentage points, FP32 activations, over {n} "
                   "seeds\n(each seed sets the split, the initialisation and the batch "
                   "order):").format(n=len(s.seeds)))
    print_table([_("weights")] + [_("seed {seed}").format(seed=k) for k in s.seeds] + [_("mean")],
                s.rows)
    g4, g2 = s.gains["INT4"], s.gains["INT2"]
    print_paragraph(
        _("Across seeds: QAT minus PTQ accuracy, in percentage points. INT2: from {low2:+.1f} to "
          "{high2:+.1f} points over {n} seeds. INT4: from {low4:+.1f} to {high4:+.1f}, mean "
          "{mean4:+.1f}, positive in {positive} of {runs} runs: small, the size of a few "
          "images.").format(low2=min(g2), high2=max(g2), n=len(s.seeds), low4=min(g4),
                            high4=max(g4), mean4=np.mean(g4), positive=sum(g > 0 for g in g4),
                            runs=len(g4)))


def print_ptq_vs_qat(r: DigitsResult) -> None:
    print_header(_("Demo 3: PTQ against QAT: a 64-{hidden}-10 MLP on scikit-learn digits").format(
        hidden=r.config.hidden))
    c = r.config
    print_paragraph(
        _("{train} training and {test} test images (one test image: {image:.2f} percentage "
          "points). FP32 is trained for {epochs} epochs (test accuracy {base:.1f}%). QAT "
          "fine-tunes that model for {qat_epochs} epochs with the quantizer in the forward pass; "
          "PTQ rounds the FP32 model fine-tuned for the same {qat_epochs} epochs without it "
          "({fp32:.1f}%). Weight scales: one per tensor (absmax). The arithmetic is float64 and "
          "the weights are rounded to FP32 after every step: in float32 arithmetic the last bit "
          "of a sum depends on the CPU's vector kernels, and a QAT weight at a rounding boundary "
          "then moves the INT2 accuracy by points from one CPU to another.").format(
            train=r.n_train, test=r.n_test, image=100 / r.n_test, epochs=c.epochs,
            base=100 * r.base_accuracy, qat_epochs=c.qat_epochs, fp32=100 * r.fp32_accuracy),
        )
    print_table([_("weights"), _("activations"), _("PTQ accuracy (%)"), _("QAT accuracy (%)")],
                r.rows)
    a = {key: 100 * v for key, v in r.accuracy.items()}             # in percent
    fp32 = 100 * r.fp32_accuracy
    print_observations([
        # A literal "%" before a letter would read as a %-format to gettext tools: these two
        # percentages come from the "%" format spec.
        _("INT8 weights and activations: PTQ {ptq:.1%} against {fp32:.1%} in FP32, {apart} of "
          "{test} images apart: 256 levels are plenty for this network.").format(
            ptq=r.accuracy[("PTQ", "INT8", 8)], fp32=r.fp32_accuracy,
            apart=round(r.n_test * abs(r.fp32_accuracy - r.accuracy[("PTQ", "INT8", 8)])),
            test=r.n_test),
        _("INT4 weights: PTQ {ptq:.1f}%, QAT {qat:.1f}%: QAT wins back {won} of the {test} test "
          "images.").format(
            ptq=a[("PTQ", "INT4", None)], qat=a[("QAT", "INT4", None)],
            won=round(r.n_test * (r.accuracy[("QAT", "INT4", None)]
                                  - r.accuracy[("PTQ", "INT4", None)])),
            test=r.n_test),
        _("INT2 (ternary) weights: PTQ {ptq:.1f}%, QAT {qat:.1f}% (FP32 {fp32:.1f}%): with the "
          "quantizer in the loop the network learns weights that survive rounding to three "
          "levels, though {hidden} hidden units with three levels each stay well short of "
          "FP32.").format(ptq=a[("PTQ", "INT2", None)], qat=a[("QAT", "INT2", None)], fp32=fp32,
                          hidden=c.hidden),
        _("NVFP4 weights (E2M1 in blocks of 16 with E4M3 scales): PTQ {ptq:.1f}%, QAT "
          "{qat:.1f}%: close to INT4, as its 4-bit elements with fine block scales "
          "suggest.").format(ptq=a[("PTQ", "NVFP4", None)], qat=a[("QAT", "NVFP4", None)]),
    ])


def title() -> str:
    """The lecture's title in the current language."""
    return _("Lecture 06: quantization-aware training (QAT)")


def intro() -> list[str]:
    """The lecture's opening paragraphs in the current language."""
    return [
        _("Rounding has a zero gradient almost everywhere. This lecture asks how a network can "
          "still learn weights that live on a 4-bit or 2-bit grid, and whether training with the "
          "quantizer in the loop (QAT) beats rounding an already trained network (post-training "
          "quantization, PTQ)."),
        _("Demo 1 shows the straight-through estimator (STE) on one number. Demo 2 trains a "
          "linear model whose weights are stored in INT4 or FP8 E4M3, with and without FP32 "
          "master weights. Demo 3 compares PTQ and QAT for a small MLP on scikit-learn's digits, "
          "then repeats the comparison over several seeds."),
        _("How to read the numbers: Q(w) is the quantized weight; the STE mask is 1 where the "
          "gradient passes through the rounding, 0 where the code was clamped. Demo 2's loss is "
          "half the mean squared error. Accuracies are percentages of a fixed held-out test "
          "split; demo 3 says how many points one test image is worth. Seeds are fixed."),
    ]


def main() -> None:
    # Every matrix here is tiny: one thread computes the same bytes, and on a busy machine no
    # idle thread of torch's pool spins for a core.
    torch.set_num_threads(1)
    print_title(title(), intro())
    print_ste(ste_demo())
    print_master_weights(master_weights_demo())
    print_ptq_vs_qat(ptq_vs_qat())
    print_seed_spread(seed_spread())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(title()))
