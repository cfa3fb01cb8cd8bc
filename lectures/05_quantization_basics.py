"""
Lecture 05: quantization basics: scales, zero points, clipping, granularity, block scaling.

The question
    To quantize is to divide a set of real numbers by a scale so that they land in a
    low-precision format's range, and then round. Lecture 03 showed that NVFP4's block scales
    beat one scale for the whole tensor by a wide margin. This lecture takes the idea apart:

      Demo 1  Affine quantization: scale and zero point, symmetric against asymmetric, and a
              matrix product computed with integers only (one float multiply at the end).
      Demo 2  Clipping: let the few largest values saturate so that the rest get a finer grid.
              Where is the best clip point, and why does it move with the tails?
      Demo 3  Granularity: one scale per tensor, per row, per group. Which one do weights with
              per-row scales need, and which one do activations with outlier channels need?
      Demo 4  Block-scaled formats: MXFP8, MXFP6, MXFP4, NVFP4 and INT4 groups at equal bits.
              Does NVFP4 beat MXFP4 because of its smaller blocks or its finer scales?
      Demo 5  How the error of each weight becomes the error of a matrix product, and why each
              extra bit buys about 6 dB.

How to read the output
    Every figure is computed when the script runs, from synthetic data with fixed seeds
    (Gaussian, Laplace, Student-t, and activations with planted outlier channels), so the
    output is the same on every run. Errors are relative errors ||q - x|| / ||x|| in percent;
    SQNR is in dB. "What to notice" closes each demo.

Run
    python lectures/05_quantization_basics.py      (about 2 s on a 2-core laptop)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from console import (ROUNDING_BOUND, below_bound, lecture_parser, print_header,  # noqa: F401
                     print_observations, print_table, print_title, run_lecture)
from console.i18n import N_
from lectures import hardware
from lectures.i18n import domain
from numfmt import (FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E5M2, FloatFormat, block_quantize,
                    clip_sweep, int_range, mx_quantize, nvfp4_quantize, quantize_int, rel_error,
                    sqnr_db, tensor_scaled)

_ = domain("lecture05").gettext

INT32_MAX = 2**31 - 1
# Demo 1 prints the integer pipeline's difference from dequantize-then-multiply as console's
# bound: the difference itself is float64 rounding (a few 1e-15 here).
#: The H100 (SXM) whose tensor-core rates demo 1 quotes (lectures.hardware: its data sheet).
H100 = hardware.DATASHEETS["H100"]
#: Energy per operation at 45 nm, pJ (Horowitz, "Computing's energy problem", ISSCC 2014).
ENERGY_PJ = {"INT8 multiply": 0.2, "FP16 multiply": 1.1}


# ---------------------------------------------------------------------------------------------
# Demo 1: affine quantization and the integer-only matrix product
# ---------------------------------------------------------------------------------------------
@dataclass
class AffineResult:
    rows: list              # [label, scale, zero point, code range, codes used, rel error]
    codes_used: dict        # "symmetric" / "asymmetric" -> number of distinct codes
    errors: dict            # same keys -> relative error (fraction)
    acc_max: int            # largest |sum_k qa*qw| of the integer product (ReLU activations)
    pipeline_diff: float    # max |integer pipeline - dequantize-then-multiply| (ReLU)
    output_error: float     # rel error of the integer pipeline against the float product (ReLU)
    pipelines: dict = None  # "ReLU" / "SiLU" -> IntegerPipeline
    zero_points: dict = None  # data label -> zero point of asymmetric UINT8 on it
    lowest_code: int = 0    # lowest UINT8 code used by the data uniform on [2, 8]


@dataclass
class IntegerPipeline:
    za: int                 # zero point of the activations (asymmetric UINT8, per tensor)
    correction_max: int     # max |z_a * sum_k qw_jk|: the term the zero point adds
    acc_max: int            # largest |sum_k qa_ik qw_jk|
    diff: float             # max |integer pipeline - dequantize-then-multiply|
    output_error: float     # rel error against the float product A W^T


def integer_matmul(A: np.ndarray, W: np.ndarray) -> IntegerPipeline:
    """y = A W^T with asymmetric UINT8 activations (per tensor) and symmetric INT8 weights (per
    row), computed as s_a s_w[j] (sum_k qa_ik qw_jk - z_a sum_k qw_jk) with integer sums."""
    _, qa, sa, za = quantize_int(A, 8, symmetric=False)                   # per tensor
    _, qw, sw, _ = quantize_int(W, 8, symmetric=True, granularity="channel")  # sw: (F, 1)
    sa, za = float(sa.ravel()[0]), int(za.ravel()[0])
    acc = qa @ qw.T                                                       # (B, F), int64 codes
    correction = za * qw.sum(axis=1)                                      # (F,), integers
    y_int = sa * sw.ravel()[None, :] * (acc - correction[None, :])
    y_deq = (sa * (qa - za)) @ (sw * qw).T
    return IntegerPipeline(za, int(np.abs(correction).max()), int(np.abs(acc).max()),
                           float(np.abs(y_int - y_deq).max()), rel_error(y_int, A @ W.T))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU (swish), x * sigmoid(x): the MLP activation of Llama-style models; min ≈ -0.278."""
    return x / (1.0 + np.exp(-x))


SILU_MIN = float(silu(np.linspace(-3.0, 0.0, 300_001)).min())  # at x ≈ -1.278


def zero_point_of(x: np.ndarray) -> int:
    """Zero point numfmt's asymmetric UINT8 gives ``x`` (its range is widened to contain 0)."""
    return int(quantize_int(x, 8, symmetric=False)[3].ravel()[0])


N_RELU = 100_000  # demo 1's ReLU outputs


def pct(x: float) -> str:
    """A fraction in percent with three decimals, so that 0.99997 does not print as 100%."""
    return "100%" if x == 1 else f"{x * 100:.3f}%"


def demo1_affine_and_integer_matmul(seed: int = 0) -> AffineResult:
    """Symmetric INT8 against asymmetric UINT8 on ReLU outputs; then y = A W^T with integers.

    What to notice: ReLU outputs are never negative, so a symmetric grid leaves half its codes
    unused, while an asymmetric grid spends all 256 codes on [0, max]: half the scale, half the
    error, one extra bit for free. The integer pipeline
        y_ij = s_a * s_w[j] * (sum_k qa_ik qw_jk - z_a * sum_k qw_jk)
    accumulates only integers (an int32 accumulator is wide enough here, as lecture 01
    computed), and its correction term depends on the weights alone, so it is computed once.
    The range of an asymmetric grid is widened to contain 0, so that 0 is exact: ReLU outputs
    (minimum 0) get z = 0 and leave the correction term at zero; SiLU outputs, whose minimum
    is below 0, get an interior zero point and exercise it.
    """
    rng = np.random.default_rng(seed)
    a = np.maximum(rng.standard_normal(N_RELU), 0.0)      # ReLU output: half zeros, half positive
    rows, used, errs = [], {}, {}
    for key, symmetric, label in (("symmetric", True, N_("symmetric INT8 (zero point 0)")),
                                  ("asymmetric", False, N_("asymmetric UINT8 (with zero point)"))):
        deq, q, s, z = quantize_int(a, 8, symmetric=symmetric)
        used[key] = len(np.unique(q))
        errs[key] = rel_error(deq, a)
        rows.append([label, f"{float(s.ravel()[0]):.5f}", int(z.ravel()[0]),
                     f"{q.min()} … {q.max()}", used[key], f"{errs[key] * 100:.3f}%"])

    B, D, F = 64, 1024, 256
    A = np.maximum(rng.standard_normal((B, D)), 0.0)                      # (B, D) activations
    W = rng.standard_normal((F, D)) * 0.05                                # (F, D) weights
    pre = rng.standard_normal((B, D)) * 2.0                               # (B, D) pre-activations
    pipes = {"ReLU": integer_matmul(A, W), "SiLU": integer_matmul(silu(pre), W)}
    lo, hi = rng.uniform(2, 8, 10_000), rng.uniform(-1, 3, 10_000)
    zps = {N_("ReLU outputs, [0, max]"): zero_point_of(a),
           N_("uniform on [2, 8]"): zero_point_of(lo),
           N_("uniform on [-1, 3]"): zero_point_of(hi),
           N_("SiLU outputs"): pipes["SiLU"].za}
    r = pipes["ReLU"]
    lowest = int(quantize_int(lo, 8, symmetric=False)[1].min())
    return AffineResult(rows, used, errs, r.acc_max, r.diff, r.output_error, pipes, zps, lowest)



def show_demo1(r: AffineResult) -> None:
    print_header(_("Demo 1: affine quantization: scale, zero point, and an integer-only matmul"))
    print(_("Data: {n:,} ReLU outputs max(z, 0), z ~ N(0, 1).\n"
            "Symmetric INT8:   s = max|x| / 127, q = round(x / s) in -127 … 127, value q·s.\n"
            "Asymmetric UINT8: [lo, hi] = [min(x), max(x)] widened to contain 0, "
            "s = (hi - lo) / 255,\n                  z = round(-lo / s), q = clip(round(x / s) + z, "
            "0, 255), value (q - z)·s.").format(n=N_RELU))
    print_table([_("scheme"), _("scale"), _("zero point"), _("code range"), _("codes used"),
                 _("rel. error")], [[_(row[0])] + row[1:] for row in r.rows])
    print("\n" + _("Zero point of asymmetric UINT8 (codes 0 … 255), by data:"))
    print_table([_("data"), _("zero point z")], [[_(k), z] for k, z in r.zero_points.items()])
    print("\n" + _("Integer pipeline: 64 × 1024 activations (UINT8, per tensor) times 256 × 1024 "
                   "weights\n(INT8, per row). The largest integer sum is {acc_max:,} "
                   "(int32 holds up to {int32_max:,})").format(acc_max=r.acc_max,
                                                              int32_max=INT32_MAX))
    print_table([_("activations"), "z_a", _("max zero-point term"), _("pipeline vs dequantized"),
                 _("rel. error vs float")],
                [[name, p.za, f"{p.correction_max:,}", below_bound(p.diff),
                  f"{p.output_error * 100:.3f}%"] for name, p in r.pipelines.items()])
    print(_("(zero-point term: z_a·Σ_k qw_jk; 'pipeline vs dequantized' is the max difference "
            "between the integer\npipeline and dequantize-then-multiply: float rounding only)"))
    sym, asym = "symmetric", "asymmetric"
    silu_z = r.pipelines["SiLU"].za
    speed = H100.tflops["int8"] / H100.tflops["bf16"]
    energy = ENERGY_PJ["FP16 multiply"] / ENERGY_PJ["INT8 multiply"]
    print_observations([
        _("Symmetric INT8 wastes its negative codes on values ReLU never produces: it can use "
          "0 … 127 and actually uses {used_sym} codes. Asymmetric UINT8 spans 0 … 255 and "
          "uses {used_asym}: {codes_ratio:.1f}x as many codes, half the scale, and "
          "{error_ratio:.2f}x the error. That is one extra bit.").format(
            used_sym=r.codes_used[sym], used_asym=r.codes_used[asym],
            codes_ratio=r.codes_used[asym] / r.codes_used[sym],
            error_ratio=r.errors[asym] / r.errors[sym]),
        _("The grid's range is widened to contain 0, so that 0 is stored exactly: zero padding, "
          "ReLU's zeros and pruned weights must come back as 0, not as a small error that every "
          "dot product adds up. So data with minimum 0 (ReLU) and strictly positive data "
          "(uniform on [2, 8]: z = {z_positive}, codes 0 … {unused_top} never used) keep z = 0. "
          "An interior zero point appears only when the data straddle 0: z = {z_straddle} on "
          "[-1, 3], z = {z_silu} on SiLU outputs, whose minimum is {silu_min:.3f}. (PyTorch's "
          "observers do the same.)").format(
            z_positive=r.zero_points["uniform on [2, 8]"], unused_top=r.lowest_code - 1,
            z_straddle=r.zero_points["uniform on [-1, 3]"], z_silu=silu_z, silu_min=SILU_MIN),
        _("The integer pipeline agrees with dequantize-then-multiply up to float rounding: every "
          "multiply-add happens in integers and the scales are applied once per output. This is "
          "how INT8 inference runs on tensor cores, at {speed:.0f}x the BF16 rate on an H100 "
          "({int8_tops:,g} against {bf16_tops:g} dense TOPS, NVIDIA's datasheet) and with an "
          "integer multiplier that costs {energy:.1f}x less energy than an FP16 one (Horowitz, "
          "ISSCC 2014).").format(speed=speed, int8_tops=H100.tflops["int8"],
                                 bf16_tops=H100.tflops["bf16"], energy=energy),
        _("The zero-point term z_a·Σ_k qw_jk depends only on the weights, so it is precomputed: "
          "on SiLU outputs (z_a = {z_silu}) it reaches {correction:,} and the pipeline still "
          "matches. With zero points on both sides, more cross terms appear; that is why weights "
          "are usually symmetric and only activations (if anything) asymmetric.").format(
            z_silu=silu_z, correction=r.pipelines["SiLU"].correction_max),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: clipping
# ---------------------------------------------------------------------------------------------
CLIPS = (1.0, 0.8, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2, 0.15, 0.1, 0.07, 0.05)


def clip_data(n: int = 1 << 18, seed: int = 0) -> dict:
    """The three distributions of demo 2, in drawing order: name -> float64 array of n values."""
    rng = np.random.default_rng(seed)
    return {N_("Gaussian"): rng.standard_normal(n), N_("Laplace"): rng.laplace(size=n),
            N_("Student-t (ν = 5)"): rng.standard_t(5, n)}


@dataclass
class ClipResult:
    clips: tuple            # clip ratios c
    errors: dict            # distribution -> list of rel errors, one per c
    max_over_std: dict      # distribution -> max|x| / std
    best: dict              # distribution -> (best c, best error, error at c = 1, clip point in σ)
    n: int                  # values per distribution
    flat: dict = None       # distribution -> clip ratios within FLAT of the best error


FLAT = 0.002  # clip ratios whose error is within 0.2 % (relative) of the best count as a tie


def clip_curve(z: np.ndarray, bits: int = 4, clips=CLIPS) -> list:
    """Relative error of symmetric per-tensor INT``bits`` of ``z`` for each clip ratio:
    ``rel_error(quantize_int(z, bits, clip=c).values, z)`` for each c, computed by
    :func:`numfmt.clip_sweep` (the same floats, in one pass over ``z`` per chunk)."""
    return clip_sweep(z, bits, clips)


DISTRIBUTIONS = ("Gaussian", "Laplace", "Student-t")


def sample_distribution(name: str, n: int = 1 << 16, nu: float = 5.0, seed: int = 0) -> np.ndarray:
    """Draw ``n`` values of a unit-scale Gaussian, Laplace or Student-t(``nu``) distribution.

    The one-distribution-at-a-time sampler behind the notebook's widgets (demo 2 draws its
    three distributions from one generator in :func:`clip_data`).

    Parameters
    ----------
    name : {"Gaussian", "Laplace", "Student-t"}
    n : int, positive
    nu : float, positive
        Degrees of freedom of the Student-t; ignored otherwise. The smaller, the heavier the
        tails (the variance is infinite for nu <= 2).
    seed : int

    Returns
    -------
    ndarray of float64, shape (n,)

    Raises
    ------
    ValueError
        If ``name`` is unknown, ``n`` is not a positive integer, or ``nu`` is not positive.
    """
    if name not in DISTRIBUTIONS:
        raise ValueError(f"name must be one of {DISTRIBUTIONS}, got {name!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if not (isinstance(nu, (int, float, np.integer, np.floating)) and nu > 0):
        raise ValueError(f"nu must be a positive number, got {nu!r}")
    rng = np.random.default_rng(seed)
    if name == "Gaussian":
        return rng.standard_normal(n)
    if name == "Laplace":
        return rng.laplace(size=n)
    return rng.standard_t(nu, n)


@dataclass
class ClipPoint:
    levels: np.ndarray      # every value of the grid, ascending: scale * (-qmax … qmax)
    threshold: float        # clip point c * max|z|; beyond it, values saturate
    clipped: float          # fraction of the values with |z| > threshold
    error: float            # relative error (fraction)


def clip_point(z: np.ndarray, bits: int, clip: float) -> ClipPoint:
    """Quantize ``z`` to symmetric per-tensor INT``bits`` with the range cut to ``clip * max|z|``.

    One point of demo 2's experiment, for any bit width and clip ratio; the notebook draws
    it over a histogram of ``z``.

    Parameters
    ----------
    z : ndarray of real numbers, any shape, non-empty and finite
    bits : int in [2, 16]
    clip : float in (0, 1]

    Returns
    -------
    ClipPoint
        ``levels`` (float64, shape (2^bits - 1,)), ``threshold`` (same unit as ``z``),
        ``clipped`` and ``error`` (fractions).

    Raises
    ------
    TypeError, ValueError
        As :func:`numfmt.quantize_int`.
    """
    values, _, scale, _ = quantize_int(z, bits, clip=clip)
    _, qmax = int_range(bits)
    threshold = clip * float(np.abs(z).max())
    return ClipPoint(float(scale.ravel()[0]) * np.arange(-qmax, qmax + 1), threshold,
                     float(np.mean(np.abs(z) > threshold)), rel_error(values, z))


def demo2_clipping(n: int = 1 << 18, seed: int = 0) -> ClipResult:
    """INT4 symmetric (codes -7 … 7) with the range cut to c·max|x|.

    What to notice: two errors pull against each other. Rounding error grows with the step,
    which is proportional to c·max; clipping error grows as more values exceed c·max. The best c
    depends on the tails: the heavier they are, the farther the maximum lies from the bulk and
    the more a scale set by the maximum wastes, so the more it pays to clip.
    """
    data = clip_data(n, seed)
    errors, ratio, best = {}, {}, {}
    for name, z in data.items():
        errs = clip_curve(z)
        i = int(np.argmin(errs))
        errors[name] = errs
        ratio[name] = float(np.abs(z).max() / z.std())
        best[name] = (CLIPS[i], errs[i], errs[0], CLIPS[i] * ratio[name])
    flat = {name: [c for c, e in zip(CLIPS, errs) if e <= best[name][1] * (1 + FLAT)]
            for name, errs in errors.items()}
    return ClipResult(CLIPS, errors, ratio, best, n, flat)


def show_demo2(r: ClipResult) -> None:
    print_header(_("Demo 2: clipping: INT4 symmetric with range c × max|x|"))
    names = list(r.errors)
    # TRANSLATORS: the separator between the items of a list ("Gaussian 4.73, Laplace 8.14").
    ratios = _(", ").join(f"{_(n)} {r.max_over_std[n]:.2f}" for n in names)
    print(_("max|x| / σ: {ratios} ({n:,} values each)").format(ratios=ratios, n=r.n))
    rows = [[f"{c:g}"] + [f"{r.errors[n][i] * 100:.2f}%" for n in names]
            for i, c in enumerate(r.clips)]
    print_table([_("clip ratio c")] + [_("rel. error, {name}").format(name=_(n)) for n in names],
                rows)

    def best_text(name, c, sigma):
        ties = sorted(r.flat[name])
        if len(ties) == 1:
            return _("best c = {c:g} (clip point ≈ {sigma:.1f}σ)").format(c=c, sigma=sigma)
        # TRANSLATORS: joins the errors of tied clip ratios ("21.39% and 21.41%").
        errs = _(" and ").join(f"{r.errors[name][r.clips.index(t)] * 100:.2f}%" for t in ties)
        return _("the minimum is flat between c = {low:g} and {high:g} ({errors}; best on this "
                 "grid c = {c:g}, clip point ≈ {sigma:.1f}σ)").format(
                     low=ties[0], high=ties[-1], errors=errs, c=c, sigma=sigma)

    lines = [_("{name}: {best}; the error falls from {before:.1f}% to {after:.1f}%").format(
                 name=_(name), best=best_text(name, c, sigma), before=e1 * 100, after=e * 100)
             for name, (c, e, e1, sigma) in r.best.items()]
    print_observations(lines + [
        _("The heavier the tail, the farther the maximum sits from most of the values (max/σ of "
          "the Student-t is well above the Gaussian's), the more a max-based scale wastes, and "
          "the more clipping gains."),
        _("Clip too hard and the error climbs again as too many values saturate. This U-shaped "
          "curve is the trade-off behind every scale-selection method: MSE search and percentile "
          "calibration pick the clip point on it. GPTQ and AWQ are not scale searches: GPTQ "
          "rounds weights one column at a time and corrects the remaining columns with the "
          "inverse Hessian of the layer inputs (Frantar et al. 2023); AWQ rescales input "
          "channels by their activation magnitude before quantizing (Lin et al. 2024). Both "
          "minimise the output error, not the weight error (demo 5)."),
        _("Clipping throws away exactly the largest values. When those matter (the outlier "
          "features of LLM activations), clipping hurts; the alternatives are to keep outliers "
          "apart (LLM.int8) or to make the scales finer-grained (demos 3 and 4)."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: granularity
# ---------------------------------------------------------------------------------------------
GRANULARITY = (  # label, granularity, group, extra bits per element of one FP16 scale
    (N_("per tensor"), "tensor", None),
    (N_("per row"), "channel", None),
    (N_("groups of 128"), "group", 128),
    (N_("groups of 32"), "group", 32),
)


#: Share of the sequence positions in which the outlier features appear at 6.7B parameters
#: (Dettmers et al., "LLM.int8()", 2022, section 4).
LLM_INT8_OUTLIER_POSITIONS = 0.75


def granularity_data(seed: int = 1) -> dict:
    """Demo 3's matrices: W (1024, 4096) with log-normal row scales; A (256, 4096) with 8
    outlier channels multiplied by 60."""
    rng = np.random.default_rng(seed)
    F, D, T = 1024, 4096, 256
    W = rng.standard_normal((F, D)) * 0.02 * np.exp(rng.normal(0, 0.5, size=(F, 1)))
    A = rng.standard_normal((T, D))
    A[:, rng.choice(D, 8, replace=False)] *= 60
    return {"W": W, "A": A}


def scale_overhead_bits(granularity: str, group: int | None, k: int, scale_bits: int = 16) -> float:
    """Bits per element that one ``scale_bits`` scale per tensor / row / group costs."""
    return {"tensor": 0.0, "channel": scale_bits / k}.get(granularity, scale_bits / (group or 1))


def granularity_error(M: np.ndarray, bits: int, granularity: str, group: int | None = None) -> float:
    """Relative error of symmetric INT``bits`` of ``M`` with one scale per tensor, row or group.

    Arguments and errors as :func:`numfmt.quantize_int`; returns a fraction.
    """
    return rel_error(quantize_int(M, bits, granularity=granularity, group=group)[0], M)


@dataclass
class GranularityResult:
    labels: list            # granularity labels
    extra_bits: list        # scale bits per element, one FP16 scale per row / group
    errors: dict            # (matrix "W"/"A", bits, label) -> rel error
    shapes: dict            # "W" / "A" -> shape
    flushed: dict = None    # (bits, label) -> fraction of A's normal-channel values stored as 0
    outlier_energy: float = 0.0  # share of ||A||² in the 8 outlier channels


def demo3_granularity(seed: int = 1) -> GranularityResult:
    """Whole tensor, per row, per group of 128 and 32 (along the last axis), INT8 and INT4.

    What to notice: W's rows differ in scale, so one scale per row fixes most of its INT4
    error. A's outlier channels are large in every token (here by construction; in LLMs the
    outliers sit in a few fixed hidden dimensions, LLM.int8's observation), so every row's
    maximum is an outlier: at INT4 per-row scales barely help and the normal channels flush
    to 0, at INT8 they halve the error. Only groups along the channel axis confine an outlier
    to its own group. Smaller groups cost more scale bits.
    """
    data = granularity_data(seed)
    k = data["W"].shape[-1]
    errors = {}
    for name, M in data.items():
        for bits in (8, 4):
            for label, gran, group in GRANULARITY:
                errors[(name, bits, label)] = granularity_error(M, bits, gran, group)
    A = data["A"]
    loud = np.abs(A).mean(axis=0) > 10 * np.median(np.abs(A).mean(axis=0))  # (D,) the 8 outliers
    flushed = {}
    for bits in (8, 4):
        for label, gran, group in GRANULARITY[:2]:
            q = quantize_int(A, bits, granularity=gran, group=group)[0]
            flushed[(bits, label)] = float(np.mean(q[:, ~loud] == 0))
    energy = float((A[:, loud] ** 2).sum() / (A ** 2).sum())
    return GranularityResult([g[0] for g in GRANULARITY],
                             [scale_overhead_bits(g, s, k) for _, g, s in GRANULARITY], errors,
                             {name: M.shape for name, M in data.items()}, flushed, energy)


def show_demo3(r: GranularityResult) -> None:
    print_header(_("Demo 3: granularity: per tensor / per row / per group, INT8 and INT4"))
    print(_("W: {w_rows} × {w_cols} weights, rows with log-normal scales; A: {a_rows} tokens × "
            "{a_cols} channels, 8 channels × 60.").format(
                w_rows=r.shapes["W"][0], w_cols=r.shapes["W"][1], a_rows=r.shapes["A"][0],
                a_cols=r.shapes["A"][1]))
    names = {"W": _("W (row scales)"), "A": _("A (outliers)")}
    rows = [[names[m], f"INT{b}"] + [f"{r.errors[(m, b, g)] * 100:.2f}%" for g in r.labels]
            for m in ("W", "A") for b in (8, 4)]
    rows.append([_("scale cost"), _("bits/elem.")] + [f"+{x:.3g}" for x in r.extra_bits])
    print_table([_("matrix"), _("bits")] + [_(g) for g in r.labels], rows)
    print(_("(relative error; the last row is one FP16 scale per row or group, in bits per "
            "element)"))
    e = r.errors
    print_observations([
        _("Weights W: one scale per row (output channel) cuts the INT4 error from {tensor:.0f}% "
          "to {row:.0f}%. The rows have different scales, and a single tensor scale only suits "
          "the largest row. Per-channel scales cost almost nothing and are the default for "
          "weights.").format(tensor=e[("W", 4, "per tensor")] * 100,
                             row=e[("W", 4, "per row")] * 100),
        _("Activations A: at INT4, per-token (per-row) scales barely help ({tensor4:.0f}% → "
          "{row4:.0f}%): the outlier channels hold {energy:.0%} of the energy and set every "
          "row's maximum, and {flushed_tensor} (per tensor) and {flushed_row} (per row) of the "
          "normal channels' values are stored as 0: the aggregate error hides that almost the "
          "whole matrix is lost. At INT8 per-token scales do help: {tensor8:.2f}% → "
          "{row8:.2f}%, with {flushed8:.0%} of the normal values flushed. Groups along the "
          "channel axis help most: {g128:.0f}% at INT4 with groups of 128, {g32:.0f}% with "
          "groups of 32. An outlier now only hurts the channels in its own group.").format(
            tensor4=e[("A", 4, "per tensor")] * 100, row4=e[("A", 4, "per row")] * 100,
            energy=r.outlier_energy, flushed_tensor=pct(r.flushed[(4, "per tensor")]),
            flushed_row=pct(r.flushed[(4, "per row")]), tensor8=e[("A", 8, "per tensor")] * 100,
            row8=e[("A", 8, "per row")] * 100, flushed8=r.flushed[(8, "per row")],
            g128=e[("A", 4, "groups of 128")] * 100, g32=e[("A", 4, "groups of 32")] * 100),
        _("Here the outlier channels are large in every token by construction. In real LLMs "
          "(LLM.int8, Dettmers et al. 2022, section 4) they sit in the same few hidden "
          "dimensions; at 6.7B parameters they appear in all layers and in about {positions:.0%} of "
          "the sequence positions.").format(positions=LLM_INT8_OUTLIER_POSITIONS),
        _("The catch: A·Wᵀ sums over the channel axis k. If the scale changes along k, it cannot "
          "be applied once after the sum; partial sums must be rescaled during accumulation. On "
          "Hopper that is software: its FP8 tensor cores keep only about 14 bits of the "
          "accumulated sum, so DeepSeek-V3's kernels copy the partial sums to FP32 registers on "
          "the CUDA cores every 128 elements and apply the scales there (DeepSeek-V3 report, "
          "section 3.3.2). Blackwell's MX and NVFP4 tensor cores apply block scales in "
          "hardware. LLM.int8 instead splits the outlier channels off and multiplies them in "
          "FP16."),
        _("Smaller groups mean smaller errors and more scales: one FP16 scale per 32 values "
          "costs {bits:.1f} extra bit per value.").format(bits=r.extra_bits[-1]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: block-scaled floating-point formats
# ---------------------------------------------------------------------------------------------
def student_t_weights(n: int = 1 << 20, seed: int = 0) -> np.ndarray:
    """Lecture 03's weight-like data: n draws of Student-t(5) × 0.02, seed 0."""
    return np.random.default_rng(seed).standard_t(df=5, size=n) * 0.02


#: The element formats of OCP MX v1.0's block formats (MXFP8 E4M3 and E5M2, MXFP6 E2M3 and E3M2,
#: MXFP4 E2M1); demo 4 uses all but E5M2, and notebook 05's block explorer offers every one.
BLOCK_ELEMENTS = (FP8_E4M3, FP8_E5M2, FP6_E2M3, FP6_E3M2, FP4_E2M1)

FORMAT_ROWS = (  # label, bits per element, quantizer
    (N_("FP8 E4M3, one tensor scale"), lambda x: tensor_scaled(x, FP8_E4M3)),
    (N_("INT8, one tensor scale (symmetric)"), None),
    (N_("MXFP8 (E4M3, 32 per E8M0 scale)"), lambda x: mx_quantize(x, FP8_E4M3)),
    (N_("MXFP6 (E2M3, 32 per E8M0 scale)"), lambda x: mx_quantize(x, FP6_E2M3)),
    (N_("MXFP6 (E3M2, 32 per E8M0 scale)"), lambda x: mx_quantize(x, FP6_E3M2)),
    (N_("INT4, groups of 32 (FP16 scale)"), None),
    (N_("MXFP4 (E2M1, 32 per E8M0 scale)"), lambda x: mx_quantize(x, FP4_E2M1)),
    (N_("NVFP4 (E2M1, 16 per E4M3 scale + FP32)"), nvfp4_quantize),
    (N_("FP4 E2M1, one tensor scale"), lambda x: tensor_scaled(x, FP4_E2M1)),
)
SCALE_KINDS = (("e8m0", N_("E8M0 scale (power of 2)")), ("e4m3", N_("E4M3 scale (NVFP4)")),
               ("exact", N_("exact scale (ideal)")))


def quantize_row(label: str, x: np.ndarray) -> tuple[np.ndarray, float]:
    """Quantize ``x`` as the format named ``label`` in FORMAT_ROWS: (values, bits per element)."""
    if label.startswith("INT8"):
        return quantize_int(x, 8)[0], 8.0
    if label.startswith("INT4"):
        return quantize_int(x, 4, granularity="group", group=32)[0], 4 + 16 / 32
    res = dict(FORMAT_ROWS)[label](x)
    return res.values, res.bits_per_element


def block_format_point(x: np.ndarray, elem: FloatFormat, block: int, scale_format: str,
                       scale_rule: str = "floor") -> tuple[float, float, float]:
    """Quantize ``x`` with ``elem`` elements, one ``scale_format`` scale per ``block``.

    Returns ``(bits per element, relative error, clipped fraction)``; arguments and errors as
    :func:`numfmt.block_quantize` (``scale_rule`` applies to E8M0 scales).
    """
    res = block_quantize(x, elem, block, scale_format, scale_rule)
    return res.bits_per_element, rel_error(res.values, x), res.clipped


MX_RULE_FORMATS = (("MXFP8 E4M3", FP8_E4M3), ("MXFP6 E2M3", FP6_E2M3), ("MXFP6 E3M2", FP6_E3M2),
                   ("MXFP4 E2M1", FP4_E2M1))


@dataclass
class MXRulePoint:
    error: float            # relative error (fraction)
    clipped: float          # fraction of elements above the element max after division
    blocks_clipped: float   # fraction of blocks with at least one such element


def mx_rule_point(x: np.ndarray, elem: FloatFormat, scale_rule: str,
                  block: int = 32) -> MXRulePoint:
    """MX quantization of ``x`` (1-D, length divisible by ``block``) under one E8M0 scale rule.

    ``scale_rule`` is "floor" (OCP MX v1.0) or "rceil" (exponent rounded up; NVIDIA's MXFP8
    recipe); arguments and errors as :func:`numfmt.mx_quantize`.
    """
    res = mx_quantize(x, elem, block, scale_rule=scale_rule)
    xb = np.asarray(x, np.float64).reshape(-1, block)                 # (n_blocks, block)
    over = np.abs(xb) / res.scales.reshape(-1, 1) > elem.max_value
    return MXRulePoint(rel_error(res.values, x), res.clipped, float(over.any(axis=1).mean()))


@dataclass
class BlockFormatResult:
    formats: list           # [(label, bits per element, rel error, SQNR dB)]
    mxfp8_clipped: float    # fraction of elements MXFP8 saturates at 448
    ablation: dict          # (block, scale kind) -> (rel error, clipped fraction)
    rules: dict = None      # (MX label, "floor" / "rceil") -> MXRulePoint
    n: int = 1 << 20        # values quantized

    def error(self, prefix: str) -> float:
        """Relative error of the first format whose label starts with ``prefix``."""
        return next(e for label, _, e, _ in self.formats if label.startswith(prefix))


def demo4_block_formats(n: int = 1 << 20, seed: int = 0) -> BlockFormatResult:
    """Every format on the same weight-like data (lecture 03's Student-t(5) × 0.02, seed 0).

    Bits per element = element bits + scale bits / block (the one FP32 tensor scale of NVFP4
    is negligible). The second table separates NVFP4's two differences from MXFP4: block size
    (16 against 32) and scale format (E4M3 against E8M0).

    What to notice: at 4.5 bits NVFP4 beats INT4 groups; the scale's format matters more than
    the block size; an E4M3 scale is nearly as good as an exact one. The third table compares
    the two rules for an MX block's shared exponent: OCP's floor, which saturates block maxima,
    and the round-up rule (RCEIL) of NVIDIA's MXFP8 recipe, which never does.
    """
    x = student_t_weights(n, seed)
    formats = []
    for label, _ in FORMAT_ROWS:
        q, bits = quantize_row(label, x)
        formats.append((label, bits, rel_error(q, x), sqnr_db(q, x)))
    mxfp8_clipped = block_quantize(x, FP8_E4M3, 32, "e8m0").clipped
    ablation = {}
    for block in (32, 16):
        for kind, _ in SCALE_KINDS:
            _, err, clipped = block_format_point(x, FP4_E2M1, block, kind)
            ablation[(block, kind)] = (err, clipped)
    rules = {(label, rule): mx_rule_point(x, elem, rule)
             for label, elem in MX_RULE_FORMATS for rule in ("floor", "rceil")}
    return BlockFormatResult(formats, mxfp8_clipped, ablation, rules, x.size)


def show_demo4(r: BlockFormatResult) -> None:
    print_header(_("Demo 4: block-scaled formats on the same weight-like data as lecture 03"))
    print(_("Data: {n:,} values of Student-t(5) × 0.02 (seed 0). Bits per element count the "
            "scales: element\nbits + scale bits / block size.").format(n=r.n))
    print_table([_("format"), _("bits/element"), _("rel. error"), "SQNR (dB)"],
                [[_(label), f"{bits:g}", f"{e * 100:.2f}%", f"{s:.1f}"]
                 for label, bits, e, s in r.formats])
    print("\n" + _("MXFP8: a block's maximum divided by its power-of-two scale lands in [256, "
                   "512), so\nvalues above 448 saturate: {clipped:.3%} of all elements.").format(
                       clipped=r.mxfp8_clipped))
    print("\n" + _("NVFP4 against MXFP4, one difference at a time (E2M1 elements throughout).\n"
                   "'clipped' is the share of elements above 6 after division by their block "
                   "scale:\nthey saturate at 6 because the scale was rounded down."))
    a = r.ablation
    print_table([_("block size")] + [_(name) for _kind, name in SCALE_KINDS],
                [[f"{block}"] + [_("{error:.2f}% (clipped {clipped:.2f}%)").format(
                                     error=a[(block, k)][0] * 100, clipped=a[(block, k)][1] * 100)
                                 for k, _name in SCALE_KINDS] for block in (32, 16)])
    print("\n" + _("The shared exponent of an MX block, two rules: OCP's floor(log2 amax) - emax, "
                   "and RCEIL,\nceil(log2(amax / max)), which rounds the scale up so no block "
                   "maximum saturates:"))
    ru = r.rules
    print_table([_("format"), _("floor: error"), _("elements clipped"), _("blocks clipped"),
                 _("RCEIL: error"), _("clipped")],
                [[label, f"{ru[(label, 'floor')].error * 100:.2f}%",
                  f"{ru[(label, 'floor')].clipped * 100:.3f}%",
                  f"{ru[(label, 'floor')].blocks_clipped * 100:.1f}%",
                  f"{ru[(label, 'rceil')].error * 100:.2f}%",
                  f"{ru[(label, 'rceil')].clipped * 100:.3g}%"] for label, _elem in MX_RULE_FORMATS])
    err = r.error
    f8, f8c = ru[("MXFP8 E4M3", "floor")], ru[("MXFP8 E4M3", "rceil")]
    e23 = ru[("MXFP6 E2M3", "floor")]
    print_observations([
        _("At 4.5 bits, NVFP4 ({nvfp4:.1f}%) beats INT4 in groups of 32 ({int4:.1f}%). On "
          "heavy-tailed data the floating-point grid, dense near 0 and sparse far out, fits "
          "better than a uniform integer grid.").format(nvfp4=err("NVFP4") * 100,
                                                        int4=err("INT4") * 100),
        _("The scale's format matters more than the block size. With blocks of 32, going from "
          "E8M0 to E4M3 scales takes the error from {e8m0:.1f}% to {e4m3:.1f}%; with E4M3 "
          "scales, halving the block to 16 only takes it to {e4m3_16:.1f}%. A power-of-two "
          "scale is coarse: under OCP's rule a block's maximum lands anywhere in [4, 8) after "
          "division, wasting grid points on average and saturating whatever exceeds 6.").format(
            e8m0=a[(32, "e8m0")][0] * 100, e4m3=a[(32, "e4m3")][0] * 100,
            e4m3_16=a[(16, "e4m3")][0] * 100),
        _("An E4M3 scale comes close to the exact scale ({e4m3:.2f}% against {exact:.2f}% with "
          "blocks of 16): eight bits of scale are enough.").format(
            e4m3=a[(16, "e4m3")][0] * 100, exact=a[(16, "exact")][0] * 100),
        _("MXFP8 ({mxfp8:.2f}%) is worse than FP8 with one tensor scale ({fp8:.2f}%). E4M3's own "
          "dynamic range already covers this data, so block scales add little, and the clipping "
          "comes from OCP's rule, not from powers of two as such: rounding the exponent down "
          "puts a block's maximum in [256, 512), above E4M3's 448 in {blocks:.1%} of the blocks "
          "(one block in {one_in:.0f}), {elements:.3%} of the elements. Rounding it up (RCEIL) "
          "clips nothing and gives {rceil:.2f}%. NVIDIA found that OCP's rounding can make "
          "MXFP8 pre-training diverge and rounds the scale up (Mishra et al., arXiv:2506.08027, "
          "2025); cuBLAS and torchao's RCEIL do the same.").format(
            mxfp8=err("MXFP8") * 100, fp8=err("FP8 E4M3") * 100,
            blocks=f8.blocks_clipped, one_in=1 / f8.blocks_clipped,
            elements=f8.clipped, rceil=f8c.error * 100),
        _("MXFP6 E2M3 ({e2m3:.2f}%) is far more accurate than E3M2 ({e3m2:.2f}%), and even beats "
          "MXFP8 ({mxfp8:.2f}%) with two bits fewer. Within a block the values have similar "
          "magnitudes, so exponent bits buy little and mantissa bits buy precision; E2M3 has as "
          "many mantissa bits as E4M3, and its max 7.5 sits near the top of [4, 8), so only "
          "{blocks:.1%} of its blocks clip. The same reasoning is behind DeepSeek-V3's choice "
          "of E4M3 everywhere once scales are fine-grained.").format(
            e2m3=err("MXFP6 (E2M3") * 100, e3m2=err("MXFP6 (E3M2") * 100,
            mxfp8=err("MXFP8") * 100, blocks=e23.blocks_clipped),
        _("Rounding up is not free: it doubles the step of every block it changes. For MXFP8 "
          "the clipping costs more ({f8_floor:.2f}% → {f8_rceil:.2f}% with RCEIL); for MXFP4 "
          "the coarser grid costs more than the clipping it avoids ({f4_floor:.2f}% → "
          "{f4_rceil:.2f}%). NVIDIA's recipe uses RCEIL for MXFP8, where saturation, not "
          "resolution, is what hurts training.").format(
            f8_floor=f8.error * 100, f8_rceil=f8c.error * 100,
            f4_floor=ru[("MXFP4 E2M1", "floor")].error * 100,
            f4_rceil=ru[("MXFP4 E2M1", "rceil")].error * 100),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 5: from element error to output error; dB per bit
# ---------------------------------------------------------------------------------------------
#: NVIDIA's published gap between NVFP4 and FP8 (DeepSeek-R1-0528, key benchmarks), in accuracy
#: points: "1% or less" (NVIDIA Technical Blog, "Introducing NVFP4 for Efficient and Accurate
#: Low-Precision Inference", June 2025). Lecture 08 measures a related quantity (RTN perplexity
#: of a small model), where the gap depends on what is quantized.
NVFP4_VS_FP8_NVIDIA = 0.01
N_OUTLIER_CHANNELS, OUTLIER_GAIN = 8, 60


@dataclass
class PropagationResult:
    rows: list              # [(format, weight rel error, output rel error)]
    sqnr: list              # [(bits, SQNR dB)] for INT2 … INT8 per row on Gaussian data
    shapes: dict            # "W", "X", "z" -> shape
    outlier_rows: list = None  # [(format, output rel error with outlier X, share of error
    #                            energy from the outlier channels, output rel error with the
    #                            weights of those channels kept exact)]

    @property
    def db_per_bit(self) -> list:
        return [s1 - s0 for (_, s0), (_, s1) in zip(self.sqnr, self.sqnr[1:])]


def sqnr_by_bits(z: np.ndarray, bits=range(2, 9), granularity: str = "channel") -> list:
    """SQNR in dB of symmetric INTb of ``z`` for each b in ``bits``: ``[(b, SQNR), ...]``.

    Arguments and errors as :func:`numfmt.quantize_int` (``granularity`` "tensor" or "channel").
    """
    return [(b, sqnr_db(quantize_int(z, b, granularity=granularity)[0], z)) for b in bits]


def demo5_error_propagation(seed: int = 0) -> PropagationResult:
    """Quantize W (Student-t, 1024 × 4096), then compare the error of Y = W·X with W's own.

    With E = Ŵ - W, the output error is E·X. For activations with covariance Σ (per input
    channel), E||E x||² = tr(E Σ Eᵀ). Only when Σ ∝ I (isotropic activations, as X here) is
    that σ²||E||², so that ||E·X|| / ||W·X|| ≈ ||E|| / ||W||: a relative error passes through
    the product unchanged. With outlier channels (Σ far from ∝ I) the few loud channels weigh
    the error: the same weights give a different output error, dominated by those channels.
    That is what GPTQ, AWQ and SmoothQuant exploit. Then INT2 … INT8 (per row) on Gaussian
    data: each bit halves the step and adds about 20·log10(2) = 6.02 dB.
    """
    rng = np.random.default_rng(seed)
    F, D, B = 1024, 4096, 64
    W = rng.standard_t(df=5, size=(F, D)) * 0.02                # (F, D)
    X = rng.standard_normal((D, B))                             # (D, B)
    Y = W @ X                                                   # (F, B)
    rows, quantized = [], {}
    for label, Wq in ((N_("INT8 per row"), quantize_int(W, 8, granularity="channel")[0]),
                      ("NVFP4", nvfp4_quantize(W)[0]),
                      ("MXFP4", mx_quantize(W, FP4_E2M1)[0]),
                      (N_("INT4 groups of 128"), quantize_int(W, 4, granularity="group", group=128)[0])):
        rows.append((label, rel_error(Wq, W), rel_error(Wq @ X, Y)))
        quantized[label] = Wq
    z = rng.standard_normal((256, 4096))
    loud = rng.choice(D, N_OUTLIER_CHANNELS, replace=False)     # (8,) input channels
    Xo = X.copy()
    Xo[loud] *= OUTLIER_GAIN                                    # (D, B), Σ far from ∝ I
    Yo = W @ Xo
    outlier_rows = []
    for label, Wq in quantized.items():
        E = Wq - W                                              # (F, D)
        share = float(np.sum((E[:, loud] @ Xo[loud]) ** 2) / np.sum((E @ Xo) ** 2))
        kept = Wq.copy()
        kept[:, loud] = W[:, loud]                              # 8 columns in full precision
        outlier_rows.append((label, rel_error(Wq @ Xo, Yo), share, rel_error(kept @ Xo, Yo)))
    return PropagationResult(rows, sqnr_by_bits(z), {"W": W.shape, "X": X.shape, "z": z.shape},
                             outlier_rows)


def show_demo5(r: PropagationResult) -> None:
    print_header(_("Demo 5: element error → matmul output error; dB per bit"))
    (f, d), (_d, b) = r.shapes["W"], r.shapes["X"]
    print(_("W: {f} × {d} Student-t(5) × 0.02 weights; X: {d} × {b} Gaussian activations.").format(
        f=f, d=d, b=b))
    print_table([_("weight format"), _("rel. error of W"), _("rel. error of Y = W·X")],
                [[_(label), f"{ew * 100:.2f}%", f"{ey * 100:.2f}%"] for label, ew, ey in r.rows])
    print("\n" + _("SQNR of a {rows} × {cols} Gaussian matrix, one scale per row:").format(
        rows=r.shapes["z"][0], cols=r.shapes["z"][1]))
    gains = ["—"] + [f"+{g:.1f}" for g in r.db_per_bit]
    print_table([_("bits (per row, Gaussian data)"), "SQNR (dB)", _("gain over one bit fewer")],
                [[f"INT{b}", f"{s:.1f}", g] for (b, s), g in zip(r.sqnr, gains)])
    print("\n" + _("The same weights against X with {n} of its {d} input channels × {gain} "
                   "(outlier activations):").format(n=N_OUTLIER_CHANNELS, d=d, gain=OUTLIER_GAIN))
    weight_err = {label: ew for label, ew, _ey in r.rows}
    print_table([_("weight format"), _("rel. error of W"), _("of Y"), _("share from the 8"),
                 _("of Y, the 8 kept exact")],
                [[_(label), f"{weight_err[label] * 100:.2f}%", f"{ey * 100:.2f}%",
                  f"{share * 100:.0f}%", f"{ek * 100:.2f}%"]
                 for label, ey, share, ek in r.outlier_rows])
    print(_("(share: the part of ||E·X||² that comes from the weights in the 8 loud channels)"))
    nv = next(ey for label, _ew, ey in r.rows if label == "NVFP4")
    lo_s, hi_s = (f"{f(row[2] for row in r.outlier_rows) * 100:.0f}" for f in (min, max))
    nv_o = next(row for row in r.outlier_rows if row[0] == "NVFP4")
    mid = r.db_per_bit[2:]
    print_observations([
        _("With isotropic activations the output's relative error equals the weights' relative "
          "error: quantization noise is not cancelled in the dot product. Noise and signal both "
          "grow like √K, so their ratio stays put. An element error of {error:.0f}% (NVFP4) "
          "means about {error:.0f}% noise in every output of the matrix product.").format(
            error=nv * 100),
        _("In general the output error is E||E x||² = tr(E Σ Eᵀ), with Σ the covariance of the "
          "inputs: the weight error counts in proportion to the energy of the channel it sits "
          "in. With {n} loud channels ({channels:.1%} of them), {share} of the output error "
          "comes from the weights in those channels: keeping just those {n} columns exact takes "
          "NVFP4's output error from {before:.2f}% to {after:.2f}%, for {channels:.1%} of the "
          "weights. Methods that minimise this output error rather than the weight error are "
          "the subject of post-training quantization: GPTQ, AWQ, SmoothQuant.").format(
            n=N_OUTLIER_CHANNELS, channels=N_OUTLIER_CHANNELS / d,
            share=(lo_s if lo_s == hi_s else lo_s + "–" + hi_s) + "%", before=nv_o[1] * 100,
            after=nv_o[3] * 100),
        _("Why then can a model in NVFP4 stay within about {gap:.0%} of its FP8 accuracy "
          "(NVIDIA's figure: downstream accuracy of DeepSeek-R1-0528, calibrated, NVIDIA "
          "Technical Blog, June 2025)? Not at this level: the model tolerates noise (what counts "
          "is the argmax, the ranking), layers and tensors differ in sensitivity, and "
          "quantization methods protect what matters most (lecture 06 trains the model to "
          "tolerate the noise). Lecture 08 measures a related quantity, round-to-nearest "
          "perplexity of a 135M model, where the gap depends on what is quantized: small in the "
          "KV cache, large once activations are quantized too.").format(
            gap=NVFP4_VS_FP8_NVIDIA),
        _("Each extra bit adds about 6 dB of SQNR (beyond four bits: {low:.1f} to {high:.1f} dB; "
          "theory 20·log10 2 = 6.02 dB: half the step, half the error). With two or three bits "
          "(3 or 7 levels) the grid is too coarse for the uniform-noise model behind the 6 dB "
          "rule, and the gain strays from it.").format(low=min(mid), high=max(mid)),
    ])


def main() -> None:
    print_title(_("Lecture 05: quantization basics"), [
        _("Quantizing means dividing numbers by a scale so that they fit a low-precision format, "
          "then rounding. Five demos take the idea apart: scales and zero points with an "
          "integer-only matmul; clipping; granularity (per tensor, row, group); block-scaled "
          "formats (MXFP8/6/4, NVFP4, INT4 groups); and how element error reaches a matmul's "
          "output."),
        _("Relative error is ||q - x|| / ||x|| in percent; SQNR = 10·log10(Σx² / Σ(q - x)²) in "
          "dB. The data are synthetic with fixed seeds, so every run prints the same numbers."),
    ])
    show_demo1(demo1_affine_and_integer_matmul())
    show_demo2(demo2_clipping())
    show_demo3(demo3_granularity())
    show_demo4(demo4_block_formats())
    show_demo5(demo5_error_propagation())

if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(_("Lecture 05: quantization basics")))
