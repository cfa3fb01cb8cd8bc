"""
Lecture 02: rounding and accumulation: where low-precision arithmetic loses information.

The question
    Every result of low-precision arithmetic is rounded. Which rounding rule keeps errors from
    piling up in one direction? What happens when thousands of numbers are added in FP16 or
    BF16, and when a small update is added to a weight stored in BF16?

      Demo 1  Round to nearest even, round half away from zero, and truncation: the bias of
              each over many values, with and without exact ties in the data.
      Demo 2  Stochastic rounding: unbiased on average, at the price of more variance.
      Demo 3  Swamping: summing 16,384 numbers in FP16 and BF16 against an FP32 accumulator,
              and two repairs that keep the low-precision format: pairwise and Kahan summation.
      Demo 4  Small updates that vanish in low-precision weights, and the two ways out:
              FP32 master weights and stochastic rounding.

How to read the output
    Errors are measured in ulps (units in the last place: the gap between the two grid values
    around the exact number) or as fractions of the exact value in percent. All data come from
    fixed seeds, so the output is the same on every run.

Run
    python lectures/02_rounding_and_accumulation.py              (under 1 s)
    python lectures/02_rounding_and_accumulation.py --lang zh    (the same lecture in Chinese)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from console import (lecture_parser, print_header, print_observations, print_table, print_title,
                     run_lecture)
from console.i18n import N_
from lectures.i18n import domain
from numfmt import BF16, FP8_E4M3, FP16
from numfmt import FP32
from numfmt.anatomy import spacing
from numfmt.rounding import cumsum_in_format, round_to_format, sum_in_format

_ = domain("lecture02").gettext

#: The rounding rules of demo 1 by numfmt's mode name (English; translated where printed).
MODES = {"nearest_even": N_("round to nearest, ties to even"),
         "half_away": N_("round half away from zero"),
         "toward_zero": N_("truncation (toward zero)")}
#: Short names of the rounding modes of demo 2 and the summation methods of demo 3.
SHORT_NAMES = {"nearest_even": N_("nearest even"), "stochastic": N_("stochastic"),
               "sequential": N_("sequential"), "pairwise": N_("pairwise"), "kahan": N_("kahan")}


# ---------------------------------------------------------------------------------------------
# Demo 1: the bias of three rounding rules
# ---------------------------------------------------------------------------------------------
@dataclass
class BiasResult:
    rows: list          # one dict per (data set, mode)
    tie_fraction: dict  # data set -> fraction of values exactly halfway between E4M3 neighbours
    n: int


def rounding_errors_ulp(x: np.ndarray, mode: str, fmt=FP8_E4M3) -> np.ndarray:
    """Rounding error of each value of ``x`` rounded to ``fmt`` with ``mode``, in ulps of ``fmt``."""
    return (round_to_format(x, fmt, mode) - x) / spacing(fmt, x)


def demo1_rounding_bias(n: int = 1 << 16, seed: int = 0) -> BiasResult:
    """Round ``n`` positive values in [1, 4) to FP8 E4M3 with three rules and measure the bias.

    Two data sets: the values as drawn (float64: exact ties never occur), and the same values
    first stored in BF16. BF16 keeps 4 more mantissa bits than E4M3, so one value in 16 sits
    exactly halfway between two E4M3 neighbours: casting BF16 activations to FP8 meets ties all
    the time.

    What to notice: truncation is biased by almost half an ulp on every value. Round half away
    is unbiased on continuous data but drifts upward as soon as ties occur. Round to nearest
    even sends half of the ties down and half up, and stays unbiased.
    """
    rng = np.random.default_rng(seed)
    x = rng.uniform(1.0, 4.0, n)
    data = {N_("float64 (no ties)"): x, N_("stored in BF16 first"): BF16.round(x)}
    rows, ties = [], {}
    for name, v in data.items():
        e_ne = rounding_errors_ulp(v, "nearest_even")
        ties[name] = float(np.mean(np.abs(np.abs(e_ne) - 0.5) == 0))
        for mode in MODES:
            e = rounding_errors_ulp(v, mode)
            r = round_to_format(v, FP8_E4M3, mode)
            rows.append(dict(data=name, mode=mode, mean_ulp=float(e.mean()),
                             rms_ulp=float(np.sqrt(np.mean(e**2))),
                             sum_error=float((r.sum() - v.sum()) / v.sum())))
    return BiasResult(rows, ties, n)


def show_demo1(r: BiasResult) -> None:
    print_header(_("Demo 1: three rounding rules and their bias (values in [1, 4) cast to "
                   "E4M3)"))
    print(_("Error q - x of each rounded value, in E4M3 ulps; sum error: relative error of the "
            "sum of all values."))
    print_table([_("data"), _("rounding rule"), _("mean (ulp)"), _("RMS (ulp)"), _("sum error")],
                [[_(d["data"]), _(MODES[d["mode"]]), f"{d['mean_ulp']:+.4f}",
                  f"{d['rms_ulp']:.4f}", f"{d['sum_error'] * 100:+.3f}%"] for d in r.rows])
    for name, t in r.tie_fraction.items():
        print(_("Exact ties in '{name}': {share:.2f}% of {n:,} values.").format(
            name=_(name), share=t * 100, n=r.n))
    d = {(row["data"], row["mode"]): row for row in r.rows}
    bf, fl = "stored in BF16 first", "float64 (no ties)"
    print_observations([
        _("Truncation moves every value toward zero, by {mean:.3f} ulp on average: the sum of "
          "all values comes out {sum_error:.1f}% too small. A bias never averages out; it adds "
          "up.").format(mean=-d[fl, "toward_zero"]["mean_ulp"],
                        sum_error=-d[fl, "toward_zero"]["sum_error"] * 100),
        _("Without ties, round half away is as good as round to nearest even (mean "
          "{mean_no_ties:+.4f} ulp). With the BF16 data, where {ties:.2f}% of values are ties, "
          "every tie goes up and the mean error becomes {mean_ties:+.4f} ulp: about a sixteenth "
          "of values times half an ulp.").format(
            mean_no_ties=d[fl, "half_away"]["mean_ulp"], ties=r.tie_fraction[bf] * 100,
            mean_ties=d[bf, "half_away"]["mean_ulp"]),
        _("Round to nearest even stays at {mean:+.4f} ulp on the same data: ties go to the "
          "neighbour with an even last mantissa bit, down as often as up. That is why IEEE 754 "
          "makes it the default, and why numfmt and the hardware use it.").format(
            mean=d[bf, "nearest_even"]["mean_ulp"]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: stochastic rounding
# ---------------------------------------------------------------------------------------------
@dataclass
class StochasticResult:
    position: float     # where the single value sits between its neighbours, in ulps
    draws: int
    single: dict        # mean error (ulp), P(round up), variance (ulp^2), theory f(1-f)
    nearest_single: float  # error of round to nearest for that value, ulps
    rows: list          # uniform positions: mode -> mean error, variance (ulp^2)


def demo2_stochastic_rounding(draws: int = 100_000, position: float = 0.3,
                              seed: int = 0) -> StochasticResult:
    """Stochastic rounding of one value many times, then of many values once, in BF16.

    The single value is ``1 + position`` ulps (BF16's ulp at 1 is 2^-7). Stochastic rounding
    sends it up with probability ``position`` and down otherwise.

    What to notice: the mean of the stochastic results is the exact value (no bias), but each
    result is off by a whole ulp fraction, with variance ``f (1 - f)`` ulp^2. Over values at
    uniformly spread positions, the variance is 1/6 ulp^2, twice the 1/12 of round to nearest.
    """
    rng = np.random.default_rng(seed)
    ulp = float(spacing(BF16, 1.0))
    x = np.full(draws, 1.0 + position * ulp)
    e = (round_to_format(x, BF16, "stochastic", rng=rng) - x) / ulp
    single = dict(mean=float(e.mean()), p_up=float(np.mean(e > 0)), var=float(e.var()),
                  theory=position * (1 - position))
    nearest = float((BF16.round(x[0]) - x[0]) / ulp)

    v = rng.uniform(1.0, 2.0, draws)      # one binade: the same ulp for every value
    rows = []
    for mode in ("nearest_even", "stochastic"):
        ev = (round_to_format(v, BF16, mode, rng=rng) - v) / ulp
        rows.append(dict(mode=mode, mean=float(ev.mean()), var=float(np.mean(ev**2))))
    return StochasticResult(position, draws, single, nearest, rows)


def show_demo2(r: StochasticResult) -> None:
    print_header(_("Demo 2: stochastic rounding in BF16: unbiased, but noisier"))
    s = r.single
    print(_("One value, 1 + {position:g} ulp, rounded {draws:,} times:").format(
        position=r.position, draws=r.draws))
    print_table([_("rounding"), _("mean error (ulp)"), _("P(round up)"), _("variance (ulp²)"),
                 _("theory f(1 - f)")],
                [[_(SHORT_NAMES["nearest_even"]), f"{r.nearest_single:+.4f}", "0", "0", "0"],
                 [_(SHORT_NAMES["stochastic"]), f"{s['mean']:+.4f}", f"{s['p_up']:.4f}",
                  f"{s['var']:.4f}", f"{s['theory']:.4f}"]])
    print("\n" + _("{draws:,} values spread uniformly over [1, 2), each rounded once:").format(
        draws=r.draws))
    print_table([_("rounding"), _("mean error (ulp)"), _("mean squared error (ulp²)")],
                [[_(SHORT_NAMES[d["mode"]]), f"{d['mean']:+.4f}", f"{d['var']:.4f}"]
                 for d in r.rows])
    d = {row["mode"]: row for row in r.rows}
    print_observations([
        _("Round to nearest always sends 1 + {position:g} ulp down: an error of "
          "{nearest:+.1f} ulp, the same every time. Stochastic rounding goes up {p_up:.1f}% of "
          "the time, so its mean error is {mean:+.4f} ulp: zero up to sampling noise.").format(
            position=r.position, nearest=r.nearest_single, p_up=s["p_up"] * 100, mean=s["mean"]),
        _("The price is variance: {var:.3f} ulp² for this value (theory {theory:.2f}), and "
          "{var_sr:.3f} ulp² over uniformly spread values against {var_rn:.3f} for round to "
          "nearest (theory 1/6 and 1/12).").format(
            var=s["var"], theory=s["theory"], var_sr=d["stochastic"]["var"],
            var_rn=d["nearest_even"]["var"]),
        _("Unbiased noise averages out when many rounded results are added; a bias does not. "
          "That is what makes stochastic rounding useful for accumulating many small updates "
          "(demo 4)."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: swamping in low-precision sums
# ---------------------------------------------------------------------------------------------
@dataclass
class SwampResult:
    n: int
    high: float         # terms are uniform in [0, high)
    exact: float        # the exact sum (float64 is exact for these FP16 terms)
    rows: list          # one dict per (accumulator, method)
    partial: dict       # accumulator name -> running sums (sequential), float64 (n,)
    exact_partial: np.ndarray  # exact running sums
    stall: dict         # accumulator -> value where the sequential sum stopped growing


def demo3_swamping(n: int = 1 << 14, high: float = 1.0, seed: int = 0) -> SwampResult:
    """Sum ``n`` FP16 values drawn uniformly from [0, ``high``) with different accumulators.

    What to notice: the FP16 running sum grows until its spacing reaches 2 (at 2048); from then
    on, every term is less than half a spacing and rounds away: the sum is stuck. BF16 gets
    stuck at 256. An FP32 accumulator, as tensor cores use for FP16 and BF16 inputs, is right
    to about two parts in a million. Pairwise and Kahan summation repair the FP16 and BF16 sums
    without a wider format.
    """
    rng = np.random.default_rng(seed)
    x = FP16.round(rng.uniform(0.0, high, n))         # the terms are FP16 numbers
    exact_partial = np.cumsum(x)  # exact while sums < 2^29: FP16 values are multiples of 2^-24
    exact = float(exact_partial[-1])
    rows = []
    for fmt, methods in ((FP32, ("sequential",)),
                         (FP16, ("sequential", "pairwise", "kahan")),
                         (BF16, ("sequential", "pairwise", "kahan"))):
        for method in methods:
            s = float(sum_in_format(x, fmt, method))
            rows.append(dict(acc=fmt.name, method=method, sum=s, rel_error=(s - exact) / exact,
                             correctly_rounded=float(fmt.round(exact))))
    partial = {f.name: cumsum_in_format(x, f) for f in (FP32, FP16, BF16)}
    stall = {name: float(p[-1]) for name, p in partial.items() if name != "FP32"}
    return SwampResult(n, high, exact, rows, partial, exact_partial, stall)


def show_demo3(r: SwampResult) -> None:
    print_header(_("Demo 3: swamping: {n:,} numbers from [0, {high:g}) summed in FP32, FP16 and "
                   "BF16").format(n=r.n, high=r.high))
    print(_("Exact sum: {exact:.4f}").format(exact=r.exact))
    print_table([_("accumulator"), _("method"), _("sum"), _("relative error"),
                 _("exact sum rounded to it")],
                [[d["acc"], _(SHORT_NAMES[d["method"]]), f"{d['sum']:.6g}",
                  f"{d['rel_error'] * 100:+.2g}%", f"{d['correctly_rounded']:.6g}"]
                 for d in r.rows])
    d = {(row["acc"], row["method"]): row for row in r.rows}
    print_observations([
        _("The FP16 running sum stops at {fp16:g} and the BF16 one at {bf16:g}: there the "
          "spacing is 2, every term is below 1 = half a spacing, and rounding to nearest "
          "discards it. This is swamping: the small terms are not added badly, they are not "
          "added at all. The FP16 sum misses {fp16_miss:.0f}% of the total, BF16 "
          "{bf16_miss:.0f}%.").format(
            fp16=r.stall["FP16"], bf16=r.stall["BF16"],
            fp16_miss=-d["FP16", "sequential"]["rel_error"] * 100,
            bf16_miss=-d["BF16", "sequential"]["rel_error"] * 100),
        _("With an FP32 accumulator (FP16 inputs, FP32 sums, as tensor cores do) the error is "
          "{error:.1g}%: FP32's spacing at 8192 is {spacing:.1g}, far below a typical term of "
          "0.5.").format(error=abs(d["FP32", "sequential"]["rel_error"]) * 100,
                         spacing=float(spacing(FP32, 8192.0))),
        _("Pairwise summation adds numbers of similar size (a tree of partial sums), so no term "
          "meets a sum thousands of times larger; Kahan summation carries each addition's "
          "rounding error into the next. Both give {fp16:g} in FP16 and {bf16:g} in BF16: the "
          "exact sum rounded once to the format.").format(
            fp16=d["FP16", "pairwise"]["sum"], bf16=d["BF16", "kahan"]["sum"]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: small updates that vanish
# ---------------------------------------------------------------------------------------------
@dataclass
class UpdateResult:
    steps: int
    update: float
    intended: float     # steps × update, the change every weight should see
    rows: list          # one dict per weight storage
    thresholds: dict    # format -> smallest update that moves a weight of 1 (half an ulp, above)
    history: dict       # storage -> mean weight change after each step, float64 (steps,)


def demo4_vanishing_updates(n_weights: int = 4096, steps: int = 1000, update: float = 1e-4,
                            seed: int = 0) -> UpdateResult:
    """Add the same small update to ``n_weights`` weights ``steps`` times, in several storages.

    The weights start in [0.5, 1) (on the BF16 grid, so every storage starts equal). Each step
    adds ``update`` (think learning rate × gradient) and stores the result:
    in FP32; in BF16 and FP16 with round to nearest; in BF16 with stochastic rounding; and as
    FP32 master weights of which the model sees a BF16 copy.

    What to notice: in BF16 and FP16 with round to nearest the update is smaller than half an
    ulp of every weight, so every step rounds back to the old weight: training stalls
    completely. FP32 master weights keep every update; stochastic rounding keeps them on
    average.
    """
    rng = np.random.default_rng(seed)
    w0 = BF16.round(rng.uniform(0.5, 1.0, n_weights))
    exact = w0 + steps * update
    w = {"FP32": w0.copy(), N_("BF16, nearest"): w0.copy(), N_("FP16, nearest"): w0.copy(),
         N_("BF16, stochastic"): w0.copy()}
    history = {k: np.empty(steps) for k in list(w) + [N_("FP32 master, BF16 copy")]}
    for t in range(steps):
        w["FP32"] = FP32.round(w["FP32"] + update)
        w["BF16, nearest"] = BF16.round(w["BF16, nearest"] + update)
        w["FP16, nearest"] = FP16.round(w["FP16, nearest"] + update)
        w["BF16, stochastic"] = BF16.round(w["BF16, stochastic"] + update, mode="stochastic",
                                           rng=rng)
        for k, v in w.items():
            history[k][t] = float(np.mean(v - w0))
        history["FP32 master, BF16 copy"][t] = float(np.mean(BF16.round(w["FP32"]) - w0))
    final = dict(w, **{"FP32 master, BF16 copy": BF16.round(w["FP32"])})
    intended = steps * update
    rows = [dict(storage=k, mean_change=float(np.mean(v - w0)),
                 applied=float(np.mean(v - w0) / intended),
                 rms_error=float(np.sqrt(np.mean((v - exact) ** 2))),
                 unchanged=float(np.mean(v == w0))) for k, v in final.items()]
    thresholds = {f.name: float(spacing(f, 1.0)) / 2 for f in (BF16, FP16, FP32)}
    return UpdateResult(steps, update, intended, rows, thresholds, history)


def show_demo4(r: UpdateResult) -> None:
    print_header(_("Demo 4: {steps:,} updates of {update:g} to weights in [0.5, 1)").format(
        steps=r.steps, update=r.update))
    print(_("Intended change of every weight: {intended:g}").format(intended=r.intended))
    print(_("Updates kept: mean change / intended change. Never moved: share of weights still "
            "at their start."))
    print_table([_("weights stored as"), _("mean change"), _("updates kept"),
                 _("RMS error vs exact"), _("never moved")],
                [[_(d["storage"]), f"{d['mean_change']:.6f}", f"{d['applied'] * 100:.1f}%",
                  f"{d['rms_error']:.2e}", f"{d['unchanged'] * 100:.1f}%"] for d in r.rows])
    print("\n" + _("Smallest update that moves a weight of 1.0 (just over half an ulp):"))
    print_table([_("format"), _("half an ulp at 1.0"), _("as a fraction of the weight")],
                [[k, f"{v:.3g}", f"{v * 100:.3g}%"] for k, v in r.thresholds.items()])
    d = {row["storage"]: row for row in r.rows}
    master = d["FP32 master, BF16 copy"]
    print_observations([
        _("In BF16 with round to nearest, {never:.0f}% of weights never moved: an update of "
          "{update:g} is far below half an ulp ({half_ulp:.2g} at 1.0, and still "
          "{half_ulp_half:.2g} at 0.5). FP16 has 3 more mantissa bits and still kept "
          "{fp16_kept:.0f}% of the updates (half an ulp at 0.5 is {fp16_half_ulp:.2g}). Weights "
          "stored in plain BF16 or FP16 would not learn from updates this small.").format(
            never=d["BF16, nearest"]["unchanged"] * 100, update=r.update,
            half_ulp=r.thresholds["BF16"], half_ulp_half=r.thresholds["BF16"] / 2,
            fp16_kept=d["FP16, nearest"]["applied"] * 100,
            fp16_half_ulp=r.thresholds["FP16"] / 2),
        _("FP32 master weights keep {kept:.1f}% of the updates; the BF16 copy the forward pass "
          "uses is then within half a BF16 ulp of them (RMS error {rms:.1e}). Its "
          "{copy_kept:.1f}% is not extra learning: it is the master rounded to BF16, and "
          "rounding moved the mean by {shift:+.4f}, less than half an ulp. This is the "
          "mixed-precision training recipe, and the reason lecture 06 keeps FP32 master "
          "weights.").format(
            kept=d["FP32"]["applied"] * 100, rms=master["rms_error"],
            copy_kept=master["applied"] * 100,
            shift=master["mean_change"] - d["FP32"]["mean_change"]),
        _("Stochastic rounding in BF16 keeps {kept:.1f}% of the updates on average, with an RMS "
          "error of {rms:.1e} per weight: no FP32 copy needed, at the price of noise.").format(
            kept=d["BF16, stochastic"]["applied"] * 100, rms=d["BF16, stochastic"]["rms_error"]),
    ])


TITLE = N_("Lecture 02: rounding and accumulation")
INTRO = (
    N_("Every result of low-precision arithmetic is rounded. This lecture asks which rounding "
       "rule keeps errors from piling up in one direction, what happens when thousands of "
       "numbers are summed in FP16 or BF16, and why a small update can vanish when added to a "
       "BF16 weight."),
    N_("Demo 1 measures the bias of round to nearest even, round half away from zero and "
       "truncation. Demo 2 shows stochastic rounding: unbiased, but noisier. Demo 3 sums 16,384 "
       "numbers in FP16 and BF16 (swamping) and repairs the sum with pairwise and Kahan "
       "summation. Demo 4 adds small updates to weights stored in several ways."),
    N_("How to read the numbers: x is the exact value and q the rounded one. An ulp (unit in "
       "the last place) is the gap between the two grid values around x; errors q - x are "
       "given in ulps, ulp² for variances. Relative error is (q - x) / x in percent. All data "
       "come from fixed seeds."),
)


def main() -> None:
    print_title(_(TITLE), [_(paragraph) for paragraph in INTRO])
    show_demo1(demo1_rounding_bias())
    show_demo2(demo2_stochastic_rounding())
    show_demo3(demo3_swamping())
    show_demo4(demo4_vanishing_updates())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(_(TITLE)))
