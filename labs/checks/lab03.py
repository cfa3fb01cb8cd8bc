"""Lab 03's checks: numfmt.scaling's scale_from_amax, delayed_scales and quantize_with_scale."""

import numpy as np
from hypothesis import strategies as st

import numfmt
from numfmt import scaling
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats, vectors
from labs.i18n import N_

FP8 = {448.0: numfmt.FP8_E4M3, 57344.0: numfmt.FP8_E5M2}


def _current(x, max_value, margin):
    return float(scaling.scale_from_amax(np.abs(x).max(), FP8[max_value], margin))


@st.composite
def _current_args(draw):
    return (draw(vectors()), draw(st.sampled_from(list(FP8))), draw(st.integers(0, 3)))


@st.composite
def _delayed_args(draw):
    amaxes = draw(vectors(1, 12, 0.0, 1000.0))
    return (amaxes, draw(st.sampled_from(list(FP8))), draw(st.integers(1, 4)),
            draw(st.integers(0, 2)))


def _quantize(x, scale):
    r = scaling.quantize_with_scale(x, numfmt.FP8_E4M3, scale)
    return r.values, r.flushed


LAB = Lab("03", "03_scaling.py", N_("scaling"), [
    Exercise("current_scale", _current, cases=[
        (np.array([1.0, -896.0]), 448.0, 0), (np.zeros(3), 448.0, 0),
        (np.array([3.0]), 57344.0, 2)], inputs=_current_args()),
    Exercise("delayed_scales", lambda a, m, h, g: scaling.delayed_scales(a, FP8[m], h, g),
             cases=[(np.array([448.0, 896.0, 1.0, 1.0, 1.0]), 448.0, 2, 0),
                    (np.array([0.0, 0.0, 5.0]), 448.0, 1, 1)],
             inputs=_delayed_args()),
    Exercise("quantize_with_scale", _quantize, outputs=("values", "flushed"), cases=[
        (np.array([1.0, 1e-6, 0.0, -500.0, 1000.0]), 1.0),
        (np.array([0.0, 0.0]), 2.0)],
        inputs=st.tuples(vectors(), floats(2.0 ** -8, 4.0).filter(lambda s: s > 0))),
])
