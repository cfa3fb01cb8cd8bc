"""
Lecture 01: number formats: what FP32, BF16, FP16, FP8, FP6, FP4 and E8M0 can hold.

The question
    A floating-point number is a sign, an exponent and a mantissa. How do the widths of those
    fields decide what a format can represent, how far apart its values are, what happens at
    the edges (zero, the largest value, overflow), and how wide an accumulator must be when
    int8 products are summed?

      Demo 1  The bit anatomy of every format as a table, computed from numfmt's FloatFormat
              objects; and one number, 0.3, stored in each of them.
      Demo 2  The complete value grids of the small formats E2M1, E2M3, E3M2 and E4M3.
      Demo 3  Relative spacing against magnitude: why the relative rounding error of floating
              point is nearly constant, and how subnormals trade it away near zero.
      Demo 4  Overflow: the first value that no longer fits, and what each format makes of it.
      Demo 5  Integer accumulators: how many int8 × int8 products an int32, FP32, BF16 or FP16
              accumulator holds before it overflows or stops being exact.

How to read the output
    Every figure is computed from the field widths when the script runs; nothing is typed in.
    "2^-9" means a power of two. Relative errors are fractions of the value, shown in percent.
    Demo 5 uses random int8 codes with a fixed seed, so the output is the same on every run.

Run
    python lectures/01_number_formats.py              (under 1 s)
    python lectures/01_number_formats.py --lang zh    (the same lecture in Chinese)
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from console import (OBSERVATIONS_WIDTH, display_width, lecture_parser, print_header,
                     print_observations, print_table, print_title, run_lecture)
from console.i18n import N_
from lectures.i18n import domain
from numfmt import (BF16, E8M0, FORMATS, FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3, FP8_E4M3FNUZ,
                    FP8_E5M2, FP8_E5M2FNUZ, FP16, FP32, FloatFormat)
from numfmt.anatomy import (bit_fields, bit_string, max_exact_integer, neighbours,
                            spacing, special_codes)
from numfmt.rounding import sum_in_format

_ = domain("lecture01").gettext

#: The formats of the anatomy table, widest first.
TABLE_FORMATS = (FP32, BF16, FP16, FP8_E4M3, FP8_E5M2, FP8_E4M3FNUZ, FP8_E5M2FNUZ, FP6_E2M3,
                 FP6_E3M2, FP4_E2M1, E8M0)
#: The formats whose whole grid demo 2 lists.
GRID_FORMATS = (FP4_E2M1, FP6_E2M3, FP6_E3M2, FP8_E4M3)
#: Signed formats, for spacing and overflow.
SIGNED_FORMATS = tuple(f for f in TABLE_FORMATS if f.signed)
INT32_MAX = int(np.iinfo(np.int32).max)
#: What a table cell says where a format has nothing (no special values, no subnormals).
NONE = N_("none")


def pow2(v: float) -> str:
    """Write a power of two as ``2^k``."""
    k = int(np.log2(v))
    assert 2.0**k == v, v
    return f"2^{k}"


def specials_text(fmt: FloatFormat) -> str:
    """The special values of ``fmt`` in words, with the number of codes spent on each."""
    n_inf, n_nan = special_codes(fmt)
    parts = ([f"±Inf ({n_inf})"] if n_inf else []) + ([f"NaN ({n_nan:,})"] if n_nan else [])
    return ", ".join(parts) if parts else NONE


# ---------------------------------------------------------------------------------------------
# Demo 1: the anatomy of each format
# ---------------------------------------------------------------------------------------------
@dataclass
class Anatomy:
    """One number ``x`` stored in one format."""

    fmt: str            # format name
    x: float            # the number asked for
    bits: str           # stored code as "sign exponent mantissa"
    sign: int
    exponent: int       # biased exponent field
    mantissa: int       # mantissa field
    stored: float       # the value the code stands for (round to nearest even)
    lower: float        # largest representable value <= x (-inf if none)
    upper: float        # smallest representable value >= x (+inf if none)
    abs_error: float    # stored - x
    rel_error: float    # |stored - x| / |x| (nan for x = 0)
    subnormal: bool     # stored in the subnormal range (exponent field 0, not zero)
    saturated: bool     # x overflows and was clamped to the largest finite value
    overflow: bool      # x rounds past the largest finite value (to Inf or NaN unless saturated)


def anatomy_of(fmt: FloatFormat, x: float, saturate: bool = True) -> Anatomy:
    """How the number ``x`` is stored in ``fmt`` (a format of at most 16 bits).

    ``saturate`` is the reader's choice, as in ``FloatFormat.round``: ``True`` clamps an
    overflow to the largest finite value; ``False`` follows the format (FP16 gives Inf, E4M3
    NaN). A value above the largest one but below the overflow midpoint (460 in E4M3) is
    ordinary rounding, not overflow.

    What to notice: the stored value is one of the two neighbours; its error is at most half
    their gap, except where the value overflows.
    """
    x = float(x)
    f = bit_fields(fmt, x, saturate=saturate)
    stored = float(fmt.round(x, saturate=saturate))
    overflow = bool(np.isfinite(x) and not np.isfinite(fmt.round(x, saturate=False)))
    lower, upper = (float(v) for v in neighbours(fmt, x))
    return Anatomy(fmt.name, x, bit_string(fmt, x, saturate), int(f.sign), int(f.exponent),
                   int(f.mantissa), stored, lower, upper, stored - x,
                   abs(stored - x) / abs(x) if x != 0 else float("nan"),
                   bool(f.exponent == 0 and stored != 0 and fmt.subnormals),
                   overflow and saturate, overflow)


@dataclass
class FormatTable:
    rows: list          # one dict per format (see demo1_format_table)
    example: list       # Anatomy of EXAMPLE_VALUE in each format of at most 16 bits


EXAMPLE_VALUE = 0.3


def demo1_format_table(example: float = EXAMPLE_VALUE) -> FormatTable:
    """Fields, bias, range and special values of every format; and ``example`` in each.

    What to notice: the exponent width sets the range (BF16 has FP32's 8 exponent bits and so
    its range; FP16 has 5 and tops out at 65504), the mantissa width sets the precision. The
    FP8 E4M3 format gives up Inf and all but two NaN codes to reach 448 instead of 240. AMD's
    E4M3FNUZ spends a single code on NaN (the pattern of -0) and shifts the bias by one: one
    binade more at the bottom, max 240.
    """
    rows = []
    for fmt in TABLE_FORMATS:
        rows.append(dict(
            name=fmt.name, bits=fmt.bits,
            layout=f"{int(fmt.signed)}+{fmt.exp_bits}+{fmt.man_bits}", bias=fmt.bias,
            max=fmt.max_value, min_normal=fmt.min_normal,
            min_subnormal=fmt.min_subnormal if fmt.subnormals else None,
            specials=specials_text(fmt), inf_nan=special_codes(fmt),
            exact_int=max_exact_integer(fmt) if fmt.subnormals else None,
            unit_roundoff=2.0 ** -(fmt.man_bits + 1)))
    example_rows = [anatomy_of(f, example) for f in TABLE_FORMATS if f.bits <= 16]
    return FormatTable(rows, example_rows)


def show_demo1(r: FormatTable) -> None:
    print_header(_("Demo 1: the anatomy of each format (computed from the field widths)"))
    print(_("Fields and range:"))
    print_table(
        [_("format"), _("bits"), "S+E+M", _("bias"), _("max"), _("min normal"),
         _("min subnormal")],
        [[d["name"], d["bits"], d["layout"], d["bias"], f"{d['max']:.6g}", pow2(d["min_normal"]),
          pow2(d["min_subnormal"]) if d["min_subnormal"] else _(NONE)] for d in r.rows])
    print("\n" + _("Special values and integers:"))
    print_table(
        [_("format"), _("special values (codes)"), _("all integers up to")],
        [[d["name"], _(NONE) if d["specials"] == NONE else d["specials"],
          f"{d['exact_int']:,}" if d["exact_int"] else _("n/a")]
         for d in r.rows])
    print("\n" + _("The number {x} stored in each format (round to nearest even):")
          .format(x=r.example[0].x))
    print_table([_("format"), _("bits (S E M)"), _("stored value"), _("neighbours"),
                 _("rel. error")],
                [[a.fmt, a.bits, f"{a.stored:.8g}", f"{a.lower:.6g} … {a.upper:.6g}",
                  f"{a.rel_error * 100:.3g}%"] for a in r.example])
    d = {row["name"]: row for row in r.rows}
    ex = {a.fmt: a for a in r.example}
    print_observations([
        _("The exponent width sets the range. BF16 keeps FP32's 8 exponent bits and bias "
          "{bias}, so it reaches {bf16_max:.4g} like FP32 ({fp32_max:.4g}); FP16, with 5 "
          "exponent bits, stops at {fp16_max:g}.").format(
            bias=d["BF16"]["bias"], bf16_max=d["BF16"]["max"], fp32_max=d["FP32"]["max"],
            fp16_max=d["FP16"]["max"]),
        _("The mantissa width sets the precision. Every integer up to {fp32_int:,} fits in "
          "FP32, up to {fp16_int:,} in FP16 and only up to {bf16_int:,} in BF16. {x} is stored "
          "with a {fp16_error:.2g}% error in FP16 and {bf16_error:.2g}% in BF16.").format(
            fp32_int=d["FP32"]["exact_int"], fp16_int=d["FP16"]["exact_int"],
            bf16_int=d["BF16"]["exact_int"], x=ex["FP16"].x,
            fp16_error=ex["FP16"].rel_error * 100, bf16_error=ex["BF16"].rel_error * 100),
        _("IEEE-style formats (FP32, BF16, FP16, E5M2) spend the whole top exponent on Inf and "
          "NaN: {fp16_nans:,} NaN codes in FP16. E4M3 keeps only {e4m3_nans} NaN codes "
          "(S 1111 111) and no Inf, so its top binade holds numbers and its max is "
          "{e4m3_max:g}. The MX element formats E2M3, E3M2 and E2M1 have no special values at "
          "all.").format(fp16_nans=d["FP16"]["inf_nan"][1], e4m3_nans=d["E4M3"]["inf_nan"][1],
                         e4m3_max=d["E4M3"]["max"]),
        _("AMD's FP8 (MI300) is the FNUZ variant: no Inf and no -0, and the one NaN is the "
          "pattern of -0 (1 0000 000). Its bias is one larger ({fnuz_bias} against {bias}), so "
          "E4M3FNUZ tops out at {fnuz_max:g} instead of {e4m3_max:g} and reaches one binade "
          "lower ({fnuz_min} against {e4m3_min}); E5M2FNUZ keeps E5M2's max {e5m2fnuz_max:g} "
          "because it gains the binade that E5M2 spends on Inf and NaN. Source: AMD CDNA 3 ISA "
          "reference; Noune et al., arXiv:2206.02915.").format(
            fnuz_bias=d["E4M3FNUZ"]["bias"], bias=d["E4M3"]["bias"],
            fnuz_max=d["E4M3FNUZ"]["max"], e4m3_max=d["E4M3"]["max"],
            fnuz_min=pow2(d["E4M3FNUZ"]["min_subnormal"]),
            e4m3_min=pow2(d["E4M3"]["min_subnormal"]),
            e5m2fnuz_max=d["E5M2FNUZ"]["max"]),
        _("E8M0 is a scale, not a number format: no sign, no mantissa, no zero. Its {codes} "
          "finite codes are the powers of two from {lowest} to {highest}; in E8M0, {x} becomes "
          "{stored:g}.").format(codes=2 ** E8M0.bits - 1, lowest=pow2(d["E8M0"]["min_normal"]),
                                highest=pow2(d["E8M0"]["max"]), x=ex["E8M0"].x,
                                stored=ex["E8M0"].stored),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: the complete value grids of the small formats
# ---------------------------------------------------------------------------------------------
@dataclass
class GridResult:
    grids: dict         # format name -> every finite value, ascending (float64 array)
    binades: dict       # format name -> list of (label, first value, last value, count, step)


ZERO_AND_SUBNORMALS = N_("zero and subnormals")


def binade_rows(fmt: FloatFormat) -> list:
    """The non-negative grid of ``fmt`` split into the subnormal range and each binade.

    Returns a list of ``(label, first, last, count, step)``; ``step`` is the gap between
    neighbours inside the range (constant within a binade).
    """
    pos = fmt.values()
    pos = pos[pos >= 0]
    rows = []
    sub = pos[pos < fmt.min_normal]
    rows.append((ZERO_AND_SUBNORMALS, sub[0], sub[-1], sub.size,
                 float(spacing(fmt, sub[0]))))
    for e in range(fmt.emin, fmt.emax + 1):
        b = pos[(pos >= 2.0**e) & (pos < 2.0 ** (e + 1))]
        rows.append((f"[2^{e}, 2^{e + 1})", b[0], b[-1], b.size, float(spacing(fmt, b[0]))))
    return rows


def demo2_value_grids() -> GridResult:
    """Every finite value of E2M1, E2M3, E3M2 and E4M3.

    What to notice: within a binade the values are evenly spaced; from one binade to the next
    the step doubles. E2M1 has only 15 values. E2M3 and E3M2 have the same 6 bits and the same
    number of values but spread them differently: E3M2 reaches further, E2M3 is finer.
    """
    grids = {f.name: f.values() for f in GRID_FORMATS}
    return GridResult(grids, {f.name: binade_rows(f) for f in GRID_FORMATS})


def show_demo2(r: GridResult) -> None:
    print_header(_("Demo 2: the complete value grids of E2M1, E2M3, E3M2 and E4M3"))
    # TRANSLATORS: the label in front of a list of numbers; keep the two leading spaces.
    indent = _("  non-negative: ")
    wide = display_width(indent) - len(indent)        # columns textwrap does not count
    for name, g in r.grids.items():
        nonneg = g[g >= 0]
        print("\n" + _("{name}: {n} finite values, max {max:g}.").format(name=name, n=g.size,
                                                                       max=g[-1]))
        if nonneg.size <= 32:
            print(textwrap.fill(" ".join(f"{v:g}" for v in nonneg), OBSERVATIONS_WIDTH - wide,
                                initial_indent=indent,
                                subsequent_indent=" " * display_width(indent),
                                break_on_hyphens=False))
    print("\n" + _("E4M3, binade by binade (the negative half mirrors it):"))
    print_table([_("range"), _("first"), _("last"), _("values"), _("step")],
                [[_(label) if label == ZERO_AND_SUBNORMALS else label, f"{a:g}", f"{b:g}", n,
                  f"{s:g}"] for label, a, b, n, s in r.binades["E4M3"]])
    e21, e23, e32 = r.grids["E2M1"], r.grids["E2M3"], r.grids["E3M2"]
    steps = [row[4] for row in r.binades["E4M3"]]
    b23, b32 = r.binades["E2M3"], r.binades["E3M2"]
    print_observations([
        _("E2M1 (FP4) has {n} values: 0, ±0.5 … ±{max:g}. Between 4 and 6 there is nothing: a "
          "block scale must place each block's values so that this coarse grid fits.").format(
            n=e21.size, max=e21[-1]),
        _("E2M3 and E3M2 both have {n} values. E2M3 spends them on precision: {e23_per} values "
          "per binade over {e23_binades} binades, max {e23_max:g}, top step {e23_step:g}. E3M2 "
          "spends them on range: {e32_per} values per binade over {e32_binades} binades, max "
          "{e32_max:g}, top step {e32_step:g}.").format(
            n=e23.size, e23_per=b23[1][3], e23_binades=len(b23) - 1, e23_max=e23[-1],
            e23_step=b23[-1][4], e32_per=b32[1][3], e32_binades=len(b32) - 1, e32_max=e32[-1],
            e32_step=b32[-1][4]),
        _("In E4M3 the step doubles at every power of two, from {first:g} near zero to {last:g} "
          "between 256 and 448: absolute spacing grows with the value, relative spacing does "
          "not (demo 3).").format(first=steps[0], last=steps[-1]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: relative spacing against magnitude; subnormals
# ---------------------------------------------------------------------------------------------
@dataclass
class SpacingResult:
    magnitudes: dict    # format name -> positive magnitudes, log-spaced over the whole range
    rel_spacing: dict   # format name -> spacing / magnitude at those magnitudes
    rows: list          # one dict per format


def demo3_relative_spacing(n: int = 100_000, seed: int = 0) -> SpacingResult:
    """Relative spacing and relative rounding error, across the range of each signed format.

    ``n`` random magnitudes, log-uniform over each format's normal range, are rounded to
    nearest; the worst relative error is compared with the unit roundoff ``2^-(M+1)``.

    What to notice: in the normal range the relative spacing swings between ``2^-(M+1)`` and
    ``2^-M`` (a sawtooth), so the relative rounding error never exceeds ``2^-(M+1)`` however
    large or small the number. Below the smallest normal the spacing stops shrinking: the
    subnormals extend the range by a factor ``2^M`` but with ever fewer significant bits.
    """
    rng = np.random.default_rng(seed)
    mags, rels, rows = {}, {}, []
    for fmt in SIGNED_FORMATS:
        lo, hi = np.log2(fmt.min_subnormal), np.log2(fmt.max_value)
        m = np.exp2(np.linspace(lo, hi, 2000))
        mags[fmt.name], rels[fmt.name] = m, spacing(fmt, m) / m
        x = np.exp2(rng.uniform(np.log2(fmt.min_normal), hi, n))       # normal range only
        worst = float(np.max(np.abs(fmt.round(x) - x) / x))
        tiny = fmt.min_normal / 10                                       # a subnormal value
        rows.append(dict(name=fmt.name, man_bits=fmt.man_bits, u=2.0 ** -(fmt.man_bits + 1),
                         worst=worst, n_subnormal=2**fmt.man_bits - 1,
                         gain=fmt.min_normal / fmt.min_subnormal, tiny=tiny,
                         tiny_error=float(abs(fmt.round(tiny) - tiny) / tiny),
                         binades=int(np.log2(fmt.max_value / fmt.min_normal)) + 1))
    return SpacingResult(mags, rels, rows)


def show_demo3(r: SpacingResult) -> None:
    print_header(_("Demo 3: relative spacing, relative error and subnormals"))
    print(_("In the normal range (values rounded to nearest; relative error = |q - x| / |x|):"))
    print_table([_("format"), "M", _("unit roundoff 2^-(M+1)"), _("worst rel. error"),
                 _("normal binades")],
                [[d["name"], d["man_bits"], f"{d['u']:.3g}", f"{d['worst']:.3g}", d["binades"]]
                 for d in r.rows])
    print("\n" + _("Below the smallest normal value:"))
    print_table([_("format"), _("subnormals > 0"), _("range gained"),
                 _("rel. error at min normal / 10")],
                [[d["name"], f"{d['n_subnormal']:,}", f"{d['gain']:,.0f}x",
                  f"{d['tiny_error'] * 100:.3g}%"] for d in r.rows])
    d = {row["name"]: row for row in r.rows}
    print_observations([
        _("In the normal range the worst relative error of rounding never exceeds the unit "
          "roundoff 2^-(M+1): {fp32:.3g} for FP32, {bf16:.3g} for BF16, {e4m3:.3g} for E4M3, "
          "{e2m1:.3g} for E2M1, at every magnitude. That is the point of floating point: "
          "constant relative precision over a wide range.").format(
            fp32=d["FP32"]["worst"], bf16=d["BF16"]["worst"], e4m3=d["E4M3"]["worst"],
            e2m1=d["E2M1"]["worst"]),
        _("Below the smallest normal the grid keeps a constant step (the smallest subnormal), "
          "so the relative error grows as values shrink: at a tenth of the smallest normal, "
          "FP16 already loses {fp16:.2g}% and E4M3 {e4m3:.2g}%, against a unit roundoff of "
          "{fp16_u:.2g}% and {e4m3_u:.2g}%.").format(
            fp16=d["FP16"]["tiny_error"] * 100, e4m3=d["E4M3"]["tiny_error"] * 100,
            fp16_u=d["FP16"]["u"] * 100, e4m3_u=d["E4M3"]["u"] * 100),
        _("Subnormals are still worth having: they extend the range toward zero by 2^M "
          "({e4m3:g}x for E4M3, {fp16:,.0f}x for FP16), where without them every smaller value "
          "would flush to zero.").format(e4m3=d["E4M3"]["gain"], fp16=d["FP16"]["gain"]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: overflow
# ---------------------------------------------------------------------------------------------
@dataclass
class OverflowResult:
    rows: list          # one dict per format


def demo4_overflow() -> OverflowResult:
    """Where each format overflows under round to nearest even, and into what.

    The midpoint between the largest value and the next (virtual) grid point above it is the
    boundary; whether the midpoint itself overflows depends on ties-to-even.

    What to notice: FP16, BF16, FP32 and E5M2 overflow to Inf; E4M3 has no Inf and overflows
    to NaN; E2M3, E3M2 and E2M1 have neither and can only saturate. Because casting to FP8
    with a NaN result would poison a whole tensor, FP8 conversions in practice saturate.
    """
    rows = []
    for fmt in SIGNED_FORMATS + (E8M0,):
        top = fmt.max_value
        mid = top + float(spacing(fmt, top)) / 2
        at_mid = float(fmt.round(mid, saturate=False))
        beyond = float(fmt.round(2 * top, saturate=False))
        rows.append(dict(name=fmt.name, max=top, midpoint=mid, midpoint_overflows=at_mid != top,
                         result=beyond, saturated=float(fmt.round(2 * top, saturate=True))))
    return OverflowResult(rows)


def _result_text(v: float, top: float) -> str:
    if np.isnan(v):
        return "NaN"
    if np.isinf(v):
        return "+Inf"
    return _("{value:.6g} (saturates)").format(value=v) if v == top else f"{v:.6g}"


def show_demo4(r: OverflowResult) -> None:
    print_header(_("Demo 4: overflow: the first value that does not fit, and what it becomes"))
    print_table([_("format"), _("max"), _("overflows from"), _("2 × max becomes"),
                 _("with saturation")],
                [[d["name"], f"{d['max']:.7g}",
                  ("≥ " if d["midpoint_overflows"] else "> ") + f"{d['midpoint']:.7g}",
                  _result_text(d["result"], d["max"]), f"{d['saturated']:.7g}"]
                 for d in r.rows])
    d = {row["name"]: row for row in r.rows}
    print_observations([
        _("FP16 overflows from {midpoint:g} on: that value lies halfway between the max "
          "{max:g} (odd mantissa) and 2^16 (even), and the tie goes to even, which is "
          "Inf.").format(midpoint=d["FP16"]["midpoint"], max=d["FP16"]["max"]),
        _("E4M3's midpoint {midpoint:g} still rounds down to {max:g} (its mantissa 110 is "
          "even); anything larger becomes NaN, because E4M3 has no Inf.").format(
            midpoint=d["E4M3"]["midpoint"], max=d["E4M3"]["max"]),
        _("E2M3, E3M2 and E2M1 have no Inf and no NaN: every code is a number, so out-of-range "
          "values saturate. Block-scaled formats (lectures 03 and 05) choose their scales so "
          "that overflow is rare."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 5: how many int8 x int8 products an accumulator holds
# ---------------------------------------------------------------------------------------------
PRODUCTS = {"127 × 127": 127 * 127, "-128 × -128": 128 * 128}
ACCUMULATORS = (FP32, BF16, FP16)


@dataclass
class AccumulatorResult:
    rows: list          # one dict per accumulator: worst-case term counts
    dot_k: int          # length of the random dot products
    n_dots: int         # how many random dot products
    dot_rows: list      # one dict per accumulator: outcome on random int8 dot products
    max_partial: int    # largest |partial sum| met in the random dot products (exact)
    worst_sum: int      # dot_k × 127 × 127, the worst case at this length
    rms_sum: float      # root mean square of the exact dot products
    bf16_step: float    # BF16 spacing at the largest partial sum


def worst_case_counts(p: int) -> dict:
    """For products of magnitude ``p``: how many terms each accumulator holds.

    ``exact``: terms that always sum exactly (every partial sum an integer the accumulator
    represents). ``fits``: terms whose sum stays at or below the largest finite value.
    """
    out = {"int32": dict(exact=INT32_MAX // p, fits=INT32_MAX // p)}
    for fmt in ACCUMULATORS:
        out[fmt.name] = dict(exact=max_exact_integer(fmt) // p, fits=int(fmt.max_value // p))
    return out


def demo5_integer_accumulators(k: int = 4096, n_dots: int = 64, seed: int = 0) -> AccumulatorResult:
    """How wide an accumulator int8 × int8 products need, worst case and on random codes.

    Worst case: every product is 127 × 127 = 16,129 (symmetric INT8 codes) or
    (-128) × (-128) = 16384 (the full int8 range). Then ``n_dots`` dot products of length
    ``k`` between random int8 codes, uniform in [-127, 127], summed in order in each
    accumulator and compared with the exact integer result.

    What to notice: int32 holds over 130,000 worst-case products exactly, far more than any
    dot product length in use. FP32 is exact only while the sum stays below 2^24, about a
    thousand worst-case products. FP16 cannot even store one product exactly and overflows
    after four.
    """
    rows = []
    counts = {name: worst_case_counts(p) for name, p in PRODUCTS.items()}
    for acc in ("int32",) + tuple(f.name for f in ACCUMULATORS):
        fmt = FORMATS.get(acc, FP32 if acc == "FP32" else None)
        rows.append(dict(name=acc,
                         exact_int=INT32_MAX if fmt is None else max_exact_integer(fmt),
                         largest=INT32_MAX if fmt is None else fmt.max_value,
                         **{f"stored {key}": p if fmt is None else float(fmt.round(p))
                            for key, p in PRODUCTS.items()},
                         **{f"{key} {what}": counts[key][acc][what]
                            for key in PRODUCTS for what in ("exact", "fits")}))

    rng = np.random.default_rng(seed)
    a = rng.integers(-127, 128, size=(k, n_dots))                  # (K, n_dots) int8 codes
    b = rng.integers(-127, 128, size=(k, n_dots))
    prod = a * b                                                     # (K, n_dots) exact, int64
    exact = prod.sum(axis=0)                                         # (n_dots,)
    partial = np.cumsum(prod, axis=0)                                # (K, n_dots)
    acc32 = np.cumsum(prod.astype(np.int32), axis=0, dtype=np.int32)[-1]  # wraps on overflow
    dot_rows = [dict(name="int32", exact=int(np.sum(acc32 == exact)), overflow=0,
                     max_abs_error=float(np.abs(acc32 - exact).max()))]
    for fmt in ACCUMULATORS:
        s = sum_in_format(prod.astype(np.float64), fmt, "sequential")   # (n_dots,)
        finite = np.isfinite(s)
        err = np.abs(s[finite] - exact[finite])
        dot_rows.append(dict(name=fmt.name, exact=int(np.sum(s == exact)),
                             overflow=int(np.sum(~finite)),
                             max_abs_error=float(err.max()) if err.size else float("nan")))
    return AccumulatorResult(rows, k, n_dots, dot_rows, int(np.abs(partial).max()),
                             k * 127 * 127, float(np.sqrt(np.mean(exact.astype(np.float64) ** 2))),
                             float(spacing(BF16, np.abs(partial).max())))


def show_demo5(r: AccumulatorResult) -> None:
    print_header(_("Demo 5: how many int8 × int8 products an accumulator holds"))
    def count(v):
        return f"{v:,}" if v < 1e9 else f"{v:.3g}"

    print_table([_("accumulator"), _("all integers up to"), _("largest value"),
                 _("127·127 stored as")],
                [[d["name"], f"{d['exact_int']:,}", f"{d['largest']:.6g}",
                  f"{d['stored 127 × 127']:,.0f}"] for d in r.rows])
    print("\n" + _("Worst case: how many equal products sum exactly (exact) or stay finite "
                   "(fit):"))
    print_table([_("accumulator"), _("127·127: exact"), _("127·127: fit"), _("128·128: exact"),
                 _("128·128: fit")],
                [[d["name"]] + [count(d[f"{k} {w}"]) for k in PRODUCTS for w in ("exact", "fits")]
                 for d in r.rows])
    print("\n" + _("{n_dots} dot products of length {k:,} between random int8 codes in "
                   "[-127, 127], summed in order:").format(n_dots=r.n_dots, k=r.dot_k))
    print(_("(RMS of the exact sums: {rms:,.0f})").format(rms=r.rms_sum))
    print_table([_("accumulator"), _("exactly right"), _("overflowed"),
                 _("worst error (finite sums)"), _("worst error / RMS sum")],
                [[d["name"], d["exact"], d["overflow"]]
                 + ([_("n/a"), _("n/a")] if np.isnan(d["max_abs_error"]) else
                    [f"{d['max_abs_error']:,.0f}", f"{d['max_abs_error'] / r.rms_sum * 100:.2g}%"])
                 for d in r.dot_rows])
    d = {row["name"]: row for row in r.rows}
    dots = {row["name"]: row for row in r.dot_rows}
    p127 = PRODUCTS["127 × 127"]
    print_observations([
        _("An int32 accumulator holds {full:,} worst-case products of (-128)·(-128) = "
          "{p128:,} and {restricted:,} of 127·127 = {p127:,} before it can overflow. A dot "
          "product of length {k:,} needs at most {worst:,}, {share:.1f}% of its range: int32 is "
          "ample for INT8 matrix products with any inner dimension up to {full:,} with "
          "full-range int8 codes ({restricted:,} if the codes are restricted to "
          "[-127, 127]).").format(
            full=d["int32"]["-128 × -128 exact"], p128=PRODUCTS["-128 × -128"],
            restricted=d["int32"]["127 × 127 exact"], p127=p127, k=r.dot_k,
            worst=r.worst_sum, share=r.worst_sum / INT32_MAX * 100),
        _("FP32 represents every integer only up to 2^24 = {exact_int:,}, so it is guaranteed "
          "exact for {n127:,} products of 127·127 ({n128:,} of 128·128). On random codes no "
          "partial sum exceeded {max_partial:,} in magnitude, and all {n_exact} FP32 sums were "
          "exact.").format(
            exact_int=d["FP32"]["exact_int"], n127=d["FP32"]["127 × 127 exact"],
            n128=d["FP32"]["-128 × -128 exact"], max_partial=r.max_partial,
            n_exact=dots["FP32"]["exact"]),
        _("FP16 stores 127·127 = {p127:,} as {stored:,.0f} (integers are exact only up to "
          "{exact_int:,}) and overflows after {fits} worst-case products. On the random dot "
          "products {overflowed} of {n_dots} FP16 sums overflowed. BF16 never overflows but "
          "keeps only 8 significant bits: once the sum is large, each addition is rounded to a "
          "step of up to {step:,.0f}, and the worst sum is off by {error:,.0f}, {share:.2g}% of "
          "a typical sum. Low-precision float accumulators are the subject of lecture "
          "02.").format(
            p127=p127, stored=d["FP16"]["stored 127 × 127"], exact_int=d["FP16"]["exact_int"],
            fits=d["FP16"]["127 × 127 fits"], overflowed=dots["FP16"]["overflow"],
            n_dots=r.n_dots, step=r.bf16_step, error=dots["BF16"]["max_abs_error"],
            share=dots["BF16"]["max_abs_error"] / r.rms_sum * 100),
    ])


TITLE = N_("Lecture 01: number formats, from FP32 down to FP4")
INTRO = (
    N_("A floating-point number is a sign, an exponent and a mantissa (S+E+M bits). This "
       "lecture asks how those field widths decide what a format can hold: its range, the "
       "spacing of its values, what happens at zero and past the largest value, and how many "
       "int8 products an accumulator can sum."),
    N_("Demo 1 tabulates the fields of FP32, BF16, FP16, the FP8/FP6/FP4 formats (with AMD's "
       "FNUZ FP8 variants) and the E8M0 scale. Demo 2 lists the complete value grids of the "
       "small formats. Demo 3 measures relative spacing and the role of subnormals. Demo 4 "
       "finds where each format overflows. Demo 5 counts the int8 x int8 products an int32, "
       "FP32, BF16 or FP16 accumulator holds."),
    N_("How to read the numbers: every figure is computed when the script runs (demo 5 draws "
       "its int8 codes with a fixed seed). 2^-9 is a power of two. Relative error is "
       "|q - x| / |x|, where x is the value and q the value stored; it is in percent where a % "
       "sign follows it, otherwise a plain fraction (0.01 = 1%). The unit roundoff 2^-(M+1) is "
       "the largest relative error of rounding to nearest with M mantissa bits."),
)


def main() -> None:
    print_title(_(TITLE), [_(paragraph) for paragraph in INTRO])
    show_demo1(demo1_format_table())
    show_demo2(demo2_value_grids())
    show_demo3(demo3_relative_spacing())
    show_demo4(demo4_overflow())
    show_demo5(demo5_integer_accumulators())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(_(TITLE)))
