"""
Lecture 03: scaling: why low-precision formats need a scale, and how coarse it can be.

The question
    FP8 covers about 18 binades (E4M3) or 32 (E5M2), FP4 only 4. Real tensors sit anywhere:
    weights near 0.02, gradients near 1e-6. How is a tensor moved into a format's range, which
    FP8 format suits weights, activations and gradients, what does it cost to compute the scale
    from past steps instead of the current tensor, and what can one outlier do to a scale?

      Demo 1  Whole-tensor scaling into E4M3 and E5M2 for weights, activations and gradients,
              against casting without a scale.
      Demo 2  Delayed scaling (amax history) against current scaling over a run with a spike.
      Demo 3  One outlier: what it does to a whole-tensor scale in INT8, FP8 and FP4, and to
              NVFP4's block scales.
      Demo 4  The first NVFP4 against whole-tensor comparison, on 2^20 weight-like values
              (Student-t(5) × 0.02, seed 0): the data lecture 05 returns to.

How to read the output
    Errors are relative errors ||q - x|| / ||x|| in percent; SQNR is in dB. "Flushed" counts the
    non-zero values that became zero, "clipped" those that saturated at the format's largest
    value. All data are synthetic with fixed seeds, so the output is the same on every run.

Run
    python lectures/03_scaling.py      (about 1 s)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from console import (lecture_parser, print_header, print_observations, print_table, print_title,
                     run_lecture)
from console.i18n import N_
from lectures.i18n import domain
from numfmt import (FP4_E2M1, FP8_E4M3, FP8_E5M2, block_quantize, nvfp4_quantize, quantize_int,
                    rel_error, sqnr_db, tensor_scaled)
from numfmt.scaling import delayed_scales, quantize_with_scale, scale_from_amax

_ = domain("lecture03").gettext
FP8 = (FP8_E4M3, FP8_E5M2)


def fraction_flushed(q: np.ndarray, x: np.ndarray) -> float:
    """Fraction of the non-zero values of ``x`` that ``q`` stores as zero."""
    nz = x != 0
    return float(np.mean(q[nz] == 0))


# ---------------------------------------------------------------------------------------------
# Demo 1: whole-tensor scaling into FP8
# ---------------------------------------------------------------------------------------------
def training_tensors(n: int = 1 << 16, seed: int = 0) -> dict:
    """Three synthetic tensors in drawing order: name -> float64 array of ``n`` values.

    weights: Student-t(5) × 0.02. activations: Gaussian × a log-normal factor (σ = 1) × 8, a
    heavy tail reaching the hundreds. gradients: Gaussian × 1e-6 × a log-normal factor (σ = 2):
    tiny, and spread over many binades.
    """
    rng = np.random.default_rng(seed)
    # The names are English keys; N_ marks them so that demo 1's table prints them translated.
    return {N_("weights"): rng.standard_t(5, n) * 0.02,
            N_("activations"): rng.standard_normal(n) * np.exp(rng.normal(0.0, 1.0, n)) * 8,
            N_("gradients"): rng.standard_normal(n) * 1e-6 * np.exp(rng.normal(0.0, 2.0, n))}


@dataclass
class TensorScalingResult:
    rows: list          # one dict per (tensor, format)
    spread: dict        # tensor -> log2(amax / median |x|), in binades
    tiled: dict = None  # format name -> (rel error, flushed) of the gradients, a scale per 128


TILE = 128  # DeepSeek-V3's 1 x 128 activation/gradient tiles (FP32 scale per tile)


def demo1_tensor_scaling(n: int = 1 << 16, seed: int = 0) -> TensorScalingResult:
    """Cast each tensor into E4M3 and E5M2 without a scale, and with ``s = amax / max_value``.

    What to notice: without a scale, the gradients vanish (almost all flush to zero) and large
    activations saturate. With one scale per tensor every tensor fits. E4M3, with one more
    mantissa bit, has about half E5M2's error on every tensor; E5M2's extra binades keep the
    smallest gradients from flushing to zero under one scale per tensor. Hence the FP8 recipe of
    per-tensor scaling (Micikevicius et al. 2022): E4M3 for weights and activations, E5M2 for
    gradients. With one scale per 128 values (DeepSeek-V3's tiles) each block spans few binades,
    E4M3 flushes almost nothing, and E4M3 serves for gradients too.
    """
    rows, spread = [], {}
    for name, x in training_tensors(n, seed).items():
        a = np.abs(x)
        spread[name] = float(np.log2(a.max() / np.median(a)))
        for fmt in FP8:
            raw = fmt.round(x)                                   # no scale, saturating
            q = tensor_scaled(x, fmt)
            rows.append(dict(tensor=name, fmt=fmt.name,
                             raw_error=rel_error(raw, x), raw_flushed=fraction_flushed(raw, x),
                             raw_clipped=float(np.mean(a > fmt.max_value)),
                             error=rel_error(q.values, x), flushed=fraction_flushed(q.values, x),
                             scale=q.tensor_scale))
        if name == "gradients":
            tiled = {}
            for fmt in FP8:
                t = block_quantize(x, fmt, TILE, "exact").values
                tiled[fmt.name] = (rel_error(t, x), fraction_flushed(t, x))
    return TensorScalingResult(rows, spread, tiled)


def percent(x: float) -> str:
    """Three significant digits in percent, never rounding a fraction below 1 up to 100%."""
    text = f"{x * 100:.3g}%"
    return f"{x * 100:.2f}%" if text == "100%" and x < 1 else text


def show_demo1(r: TensorScalingResult) -> None:
    print_header(_("Demo 1: weights, activations and gradients in FP8, with and without a "
                   "scale"))
    print(_("raw: x cast as it is. error, flushed: x / s cast, with one scale s = amax / max "
            "value."))
    print(_("flushed: non-zero values stored as 0. clipped: values beyond the format's max."))
    print_table([_("tensor"), _("format"), _("raw error"), _("raw flushed"), _("raw clipped"),
                 _("error"), _("flushed"), _("scale s")],
                [[_(d["tensor"]), d["fmt"], percent(d['raw_error']), percent(d['raw_flushed']),
                  percent(d['raw_clipped']), percent(d['error']), percent(d['flushed']),
                  f"{d['scale']:.3g}"]
                 for d in r.rows])
    print(_("Spread, log2(max|x| / median|x|): weights {weights:.1f}, activations "
            "{activations:.1f}, gradients {gradients:.1f} binades").format(**r.spread))
    d = {(row["tensor"], row["fmt"]): row for row in r.rows}
    g4, g5 = d["gradients", "E4M3"], d["gradients", "E5M2"]
    print_observations([
        _("Without a scale, {g4_flushed:.2%} of the gradients flush to zero in E4M3 and "
          "{g5_flushed:.0%} in E5M2: values near 1e-6 lie below both formats' smallest "
          "subnormals. {clipped:.2%} of the activations exceed E4M3's 448 and saturate.").format(
            g4_flushed=g4['raw_flushed'], g5_flushed=g5['raw_flushed'],
            clipped=d['activations', 'E4M3']['raw_clipped']),
        _("With one scale per tensor (amax maps onto the largest value) everything fits, and "
          "E4M3's error is about half of E5M2's on each tensor (weights {e4m3:.1f}% against "
          "{e5m2:.1f}%): one more mantissa bit halves the step.").format(
            e4m3=d['weights', 'E4M3']['error'] * 100, e5m2=d['weights', 'E5M2']['error'] * 100),
        _("The gradients spread over {spread:.0f} binades between median and max. Scaled into "
          "E4M3, {g4_flushed:.1%} of them still flush to zero; E5M2, with its extra range, "
          "flushes {g5_flushed:.2g}%, though its error is higher ({g5_error:.2f}% against "
          "{g4_error:.2f}%). With one scale per tensor that range is why FP8 training keeps "
          "gradients in E5M2 and the rest in E4M3 (Micikevicius et al., FP8 Formats for Deep "
          "Learning, 2022).").format(
            spread=r.spread['gradients'], g4_flushed=g4['flushed'],
            g5_flushed=g5['flushed'] * 100, g5_error=g5['error'] * 100,
            g4_error=g4['error'] * 100),
        _("With one scale per {tile} gradients (DeepSeek-V3's 1 x {tile} tiles) each tile spans "
          "few binades: E4M3 flushes {flushed:.2g}% with an error of {e4m3:.2f}% (E5M2: "
          "{e5m2:.2f}%). Fine-grained scales make E4M3 the better format everywhere, which is "
          "why DeepSeek-V3 (section 3.3) and NVIDIA's MXFP8 recipe (Mishra et al. 2025) use E4M3 "
          "for gradients too.").format(
            tile=TILE, flushed=r.tiled['E4M3'][1] * 100, e4m3=r.tiled['E4M3'][0] * 100,
            e5m2=r.tiled['E5M2'][0] * 100),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: delayed against current scaling
# ---------------------------------------------------------------------------------------------
@dataclass
class DelayedResult:
    amax: np.ndarray            # (T,) amax of each step's tensor
    scales: dict                # "current" / "delayed" -> (T,) scales used
    errors: dict                # same keys -> (T,) relative errors
    clipped: dict               # same keys -> (T,) fractions clipped
    spike_step: int
    history: int


def demo2_delayed_scaling(steps: int = 64, n: int = 4096, spike_step: int = 40,
                          spike: float = 8.0, history: int = 16, seed: int = 0) -> DelayedResult:
    """A run of ``steps`` activation tensors in E4M3 whose amax drifts up by 2% a step and jumps
    ``spike``-fold at ``spike_step``; each is quantized with the current amax and with the
    largest amax of the last ``history`` steps.

    What to notice: delayed scaling matches current scaling while the amax drifts, but at the
    spike its scale is too small and the largest values clip. After the spike, the history
    keeps the scale ``spike`` times too large for ``history`` steps; in FP8 that costs little,
    because relative precision is the same in every binade.
    """
    rng = np.random.default_rng(seed)
    growth = 1.02 ** np.arange(steps)
    growth[spike_step] *= spike
    xs = rng.standard_normal((steps, n)) * growth[:, None]             # (T, n)
    amax = np.abs(xs).max(axis=1)                                       # (T,)
    scales = {"current": scale_from_amax(amax, FP8_E4M3),
              "delayed": delayed_scales(amax, FP8_E4M3, history=history)}
    errors, clipped = {}, {}
    for kind, s in scales.items():
        res = [quantize_with_scale(x, FP8_E4M3, st) for x, st in zip(xs, s)]
        errors[kind] = np.array([rel_error(q.values, x) for q, x in zip(res, xs)])
        clipped[kind] = np.array([q.clipped for q in res])
    return DelayedResult(amax, scales, errors, clipped, spike_step, history)


def show_demo2(r: DelayedResult) -> None:
    print_header(_("Demo 2: delayed scaling (amax history) against current scaling, E4M3"))
    t = r.spike_step
    after = slice(t + 1, t + 1 + r.history)
    calm = np.r_[1:t]
    rows = []
    for kind, label in (("current", _("current")), ("delayed", _("delayed"))):
        e, c = r.errors[kind], r.clipped[kind]
        rows.append([label, f"{e[calm].mean() * 100:.2f}%", f"{e[t] * 100:.2f}%",
                     f"{c[t] * 100:.2f}%", f"{e[after].mean() * 100:.2f}%",
                     int(np.sum(c > 0))])
    print(_("Mean error over steps 1-{last_before} (before), at step {spike} (the spike) and "
            "over steps {first_after}-{last_after} (after).").format(
              last_before=t - 1, spike=t, first_after=t + 1, last_after=t + r.history))
    print(_("Clipped: share of values saturated at E4M3's max. Steps with clipping: of all "
            "{steps} steps.").format(steps=r.errors['current'].size))
    print_table([_("scaling"), _("error before"), _("error at spike"), _("clipped at spike"),
                 _("error after"), _("steps with clipping")], rows)
    e, c = r.errors, r.clipped
    print_observations([
        _("Before the spike the amax grows 2% a step; the delayed scale lags behind and clips "
          "slightly on {clipping} of {steps} steps, yet its error ({delayed:.2f}%) matches "
          "current scaling's ({current:.2f}%).").format(
            clipping=int(np.sum(c['delayed'][calm] > 0)), steps=calm.size,
            delayed=e['delayed'][calm].mean() * 100, current=e['current'][calm].mean() * 100),
        _("At the spike (step {spike}, amax × {jump:.1f}) the delayed scale is still the old "
          "one: {clipped:.1%} of the values clip and the error jumps to {error:.1f}%. Current "
          "scaling has no such step, at the cost of finding the amax before quantizing.").format(
            spike=t, jump=r.amax[t] / r.amax[t - 1], clipped=c['delayed'][t],
            error=e['delayed'][t] * 100),
        _("For {history} steps after the spike the delayed scale is about {ratio:.0f}x too "
          "large, yet its error ({delayed:.2f}%) equals current scaling's ({current:.2f}%) to "
          "the digits shown. In FP8 a scale that is too large only moves values down a few "
          "binades, where the relative spacing is the same; a scale that is too small "
          "clips.").format(
            history=r.history, ratio=r.scales['delayed'][t + 1] / r.scales['current'][t + 1],
            delayed=e['delayed'][after].mean() * 100, current=e['current'][after].mean() * 100),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: one outlier
# ---------------------------------------------------------------------------------------------
@dataclass
class OutlierResult:
    factor: float       # the outlier is factor × the largest |x| of the clean tensor
    rows: list          # one dict per quantizer: error on the other values, clean and with outlier
    n: int = 1 << 16    # values in the tensor


# The names are English keys; N_ marks them so that the tables print them translated.
OUTLIER_QUANTIZERS = {
    N_("INT8, one tensor scale"): lambda x: quantize_int(x, 8).values,
    N_("FP8 E4M3, one tensor scale"): lambda x: tensor_scaled(x, FP8_E4M3).values,
    N_("FP4 E2M1, one tensor scale"): lambda x: tensor_scaled(x, FP4_E2M1).values,
    N_("NVFP4 (16 per E4M3 scale)"): lambda x: nvfp4_quantize(x).values,
}


def demo3_one_outlier(n: int = 1 << 16, factor: float = 100.0, seed: int = 0) -> OutlierResult:
    """Weight-like data (Student-t(5) × 0.02), clean and with one value set to ``factor`` × amax.

    The error is measured on the other ``n - 1`` values: the outlier itself is always stored
    well, since the scale is built around it.

    What to notice: one value in 65,536 multiplies the INT8 and FP4 errors of everyone else,
    because a whole-tensor scale stretches to reach it. E4M3 barely notices: its grid is
    relative, so shifting all values down by 7 binades costs nothing until they reach the
    subnormals. NVFP4 confines the damage to the outlier's block of 16.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_t(5, n) * 0.02
    y = x.copy()
    i = n // 2
    y[i] = factor * np.abs(x).max()
    others = np.arange(n) != i
    rows = []
    for name, quant in OUTLIER_QUANTIZERS.items():
        qx, qy = quant(x), quant(y)
        rows.append(dict(name=name, clean=rel_error(qx[others], x[others]),
                         outlier=rel_error(qy[others], y[others]),
                         flushed=fraction_flushed(qy[others], y[others])))
    return OutlierResult(factor, rows, n)


def show_demo3(r: OutlierResult) -> None:
    print_header(_("Demo 3: one outlier ({factor:g} × the largest value) in {n:,} "
                   "weights").format(factor=r.factor, n=r.n))
    print(_("Errors on the other values; others flushed: share of them stored as 0 with the "
            "outlier."))
    print_table([_("quantizer"), _("no outlier: error"), _("with outlier: error"), _("ratio"),
                 _("others flushed")],
                [[_(d["name"]), f"{d['clean'] * 100:.2f}%", f"{d['outlier'] * 100:.2f}%",
                  f"{d['outlier'] / d['clean']:.1f}x", f"{d['flushed'] * 100:.2f}%"]
                 for d in r.rows])
    d = {row["name"]: row for row in r.rows}
    i8, f8 = d["INT8, one tensor scale"], d["FP8 E4M3, one tensor scale"]
    f4, nv = d["FP4 E2M1, one tensor scale"], d["NVFP4 (16 per E4M3 scale)"]
    print_observations([
        _("INT8's error grows {ratio:.0f}x: its uniform step is set by the outlier, and "
          "{flushed:.1%} of the other weights round to zero.").format(
            ratio=i8['outlier'] / i8['clean'], flushed=i8['flushed']),
        _("FP4 E2M1 with one scale was already poor ({clean:.0f}%) and becomes useless: "
          "{flushed:.1%} of the weights flush to zero, error {outlier:.0f}%.").format(
            clean=f4['clean'] * 100, flushed=f4['flushed'], outlier=f4['outlier'] * 100),
        _("FP8 E4M3 changes from {clean:.2f}% to {outlier:.2f}%: its relative grid does not "
          "care where the scale puts the values, as long as they stay above the "
          "subnormals.").format(clean=f8['clean'] * 100, outlier=f8['outlier'] * 100),
        _("NVFP4 goes from {clean:.2f}% to {outlier:.2f}%: only the 15 neighbours sharing the "
          "outlier's block lose their precision.").format(
            clean=nv['clean'] * 100, outlier=nv['outlier'] * 100),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: NVFP4 against whole-tensor scaling
# ---------------------------------------------------------------------------------------------
def student_t_weights(n: int = 1 << 20, seed: int = 0) -> np.ndarray:
    """Weight-like data: ``n`` draws of Student-t(5) × 0.02 with ``default_rng(seed)``.

    Lecture 05 (demo 4) reuses exactly these values.
    """
    return np.random.default_rng(seed).standard_t(df=5, size=n) * 0.02


@dataclass
class NvfpResult:
    n: int
    rows: list          # one dict per format: bits per element, error, SQNR, flushed


def demo4_nvfp4_vs_tensor(n: int = 1 << 20, seed: int = 0) -> NvfpResult:
    """FP4 E2M1 and FP8 E4M3 with one scale for the tensor, against NVFP4's two-level scales.

    What to notice: FP4 with a single scale loses most of the signal; NVFP4 spends half a bit
    more per value on an E4M3 scale for every 16 values and brings the error down about
    sevenfold. FP8 with one scale is better still, at almost twice the bits.
    """
    x = student_t_weights(n, seed)
    rows = []
    for name, q in ((N_("FP4 E2M1, one tensor scale"), tensor_scaled(x, FP4_E2M1)),
                    (N_("NVFP4 (E2M1, 16 per E4M3 scale + FP32)"), nvfp4_quantize(x)),
                    (N_("FP8 E4M3, one tensor scale"), tensor_scaled(x, FP8_E4M3))):
        rows.append(dict(name=name, bits=q.bits_per_element, error=rel_error(q.values, x),
                         sqnr=sqnr_db(q.values, x), flushed=fraction_flushed(q.values, x),
                         # E2M1 rounds |y| <= half its smallest subnormal to 0; amax maps to max
                         flush_fraction_of_amax=FP4_E2M1.max_value / (FP4_E2M1.min_subnormal / 2)))
    return NvfpResult(n, rows)


def show_demo4(r: NvfpResult) -> None:
    print_header(_("Demo 4: NVFP4 against one tensor scale, {n:,} Student-t(5) × 0.02 "
                   "values").format(n=r.n))
    print_table([_("format"), _("bits/element"), _("rel. error"), "SQNR (dB)", _("flushed to 0")],
                [[_(d["name"]), f"{d['bits']:g}", f"{d['error'] * 100:.2f}%", f"{d['sqnr']:.1f}",
                  f"{d['flushed'] * 100:.2f}%"] for d in r.rows])
    fp4, nv, fp8 = r.rows
    print_observations([
        # TRANSLATORS: "a {fraction}th of it" is 1/24 of the largest value; keep the number
        # as it is (e.g. "{fraction} 分之一"), since the digits must match the English.
        _("With one scale for the tensor, FP4 E2M1 keeps {kept:.0%} of the values away from "
          "zero: the scale serves the largest value, and everything up to a {fraction:.0f}th of "
          "it rounds to 0. Error {error:.0f}%, SQNR {sqnr:.1f} dB.").format(
            kept=1 - fp4['flushed'], fraction=fp4['flush_fraction_of_amax'],
            error=fp4['error'] * 100, sqnr=fp4['sqnr']),
        _("NVFP4 gives every 16 values their own E4M3 scale (and the tensor an FP32 one): "
          "{bits:g} bits per value, error {error:.1f}%, {ratio:.1f}x smaller, {gain:.1f} dB "
          "better.").format(bits=nv['bits'], error=nv['error'] * 100,
                            ratio=fp4['error'] / nv['error'], gain=nv['sqnr'] - fp4['sqnr']),
        _("FP8 E4M3 with a single scale reaches {error:.2f}% ({sqnr:.1f} dB): its {binades:.0f} "
          "binades cover the whole tensor. Block scales matter most for the narrowest formats; "
          "lecture 05 compares them with MXFP4, MXFP6, MXFP8 and INT4 groups on the same "
          "data.").format(error=fp8['error'] * 100, sqnr=fp8['sqnr'],
                          binades=binades(FP8_E4M3)),
    ])


def binades(fmt) -> float:
    """How many factors of 2 separate the smallest positive value of ``fmt`` from its max."""
    return float(np.log2(fmt.max_value / fmt.min_subnormal))


def title() -> str:
    """The lecture's title, in the current language."""
    return _("Lecture 03: scaling a tensor into a low-precision format")


def intro() -> list[str]:
    """The lecture's introductory paragraphs, in the current language."""
    return [
        _("FP8 E4M3 spans about {e4m3:.0f} binades, FP4 E2M1 only about {e2m1:.0f}, while real "
          "tensors sit anywhere: weights near 0.02, gradients near 1e-6. This lecture asks how a "
          "scale moves a tensor into a format's range, which FP8 format suits which tensor, and "
          "how much one scale can serve.").format(e4m3=binades(FP8_E4M3),
                                                   e2m1=binades(FP4_E2M1)),
        _("Demo 1 casts weights, activations and gradients into E4M3 and E5M2, with and without "
          "a scale. Demo 2 compares delayed scaling (amax from past steps) with current "
          "scaling. Demo 3 adds one outlier to a tensor. Demo 4 compares NVFP4's block scales "
          "with one tensor scale."),
        _("How to read the numbers: x is a tensor and q its quantized copy. The error is "
          "||q - x|| / ||x|| (Euclidean norms), a relative error in percent. A binade is a "
          "factor of 2. All data are synthetic, drawn with fixed seeds."),
        _("SQNR = 10 log10(||x||² / ||q - x||²) is the signal-to-quantization-noise ratio in dB: "
          "higher is better, and 6 dB more means half the error."),
    ]


def main() -> None:
    print_title(title(), intro())
    show_demo1(demo1_tensor_scaling())
    show_demo2(demo2_delayed_scaling())
    show_demo3(demo3_one_outlier())
    show_demo4(demo4_nvfp4_vs_tensor())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(title()))
