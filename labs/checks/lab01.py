"""Lab 01's checks: numfmt's decode (bit for bit with ml_dtypes), formats' max_value, spacing."""

import numpy as np
from hypothesis import strategies as st

import numfmt
from numfmt.anatomy import spacing
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import vectors
from labs.i18n import N_

SIGNED = [f for f in numfmt.FORMATS.values() if f.signed and f.specials != "fnuz"]


def _fmt(exp_bits, man_bits, bias, specials="ieee"):
    return numfmt.FloatFormat(f"E{exp_bits}M{man_bits}", exp_bits, man_bits, bias, specials)


def _decode(code, exp_bits, man_bits, bias):
    fmt = next(f for f in SIGNED if (f.exp_bits, f.man_bits, f.bias) == (exp_bits, man_bits, bias))
    return float(fmt.decode(np.array(code, dtype=np.int64)))


@st.composite
def _decode_args(draw):
    fmt = draw(st.sampled_from(SIGNED))
    code = draw(st.integers(0, 2 ** fmt.bits - 1).filter(
        lambda c: np.isfinite(fmt.decode(np.array(c, dtype=np.int64)))))
    return (code, fmt.exp_bits, fmt.man_bits, fmt.bias)


@st.composite
def _max_args(draw):
    specials = draw(st.sampled_from(["ieee", "fn", "none"]))
    e = draw(st.integers(2 if specials == "ieee" else 1, 8))
    m = draw(st.integers(1, 10))
    return (e, m, draw(st.integers(0, 2 ** (e - 1))), specials)


def _spacing(x, man_bits, emin):
    return spacing(_fmt(8, man_bits, 1 - emin, "none"), x)


@st.composite
def _spacing_args(draw):
    m = draw(st.integers(0, 10))
    emin = draw(st.integers(-14, 0))
    return (draw(vectors(1, 8, -1000.0, 1000.0)), m, emin)


LAB = Lab("01", "01_number_formats.py", N_("number formats"), [
    Exercise("decode", _decode, cases=[
        (0x38, 4, 3, 7), (0x01, 4, 3, 7), (0x80, 4, 3, 7), (0x7E, 4, 3, 7), (0x3C00, 5, 10, 15),
        (0x0001, 5, 10, 15), (0x7B, 5, 2, 15), (0x01, 2, 1, 1)],
        inputs=_decode_args(), examples=200),
    Exercise("max_finite", lambda e, m, b, s: float(_fmt(e, m, b, s).max_value), cases=[
        (f.exp_bits, f.man_bits, f.bias, f.specials) for f in SIGNED],
        inputs=_max_args()),
    Exercise("spacing", _spacing, cases=[
        (np.array([1.0, 1.5, 2.0, 0.0, -3.0]), 3, -6),
        (np.array([2.0 ** -7, 2.0 ** -6, np.nextafter(2.0, 0.0)]), 3, -6)],
        inputs=_spacing_args()),
])
