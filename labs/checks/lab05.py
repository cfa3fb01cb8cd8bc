"""Lab 05's checks: numfmt's affine and group quantizers, its SQNR, E8M0 exponents and NVFP4."""

import numpy as np
from hypothesis import strategies as st

import numfmt
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats, matrices, vectors
from labs.i18n import N_

RANGES = [(-128, 127), (0, 255), (-7, 7), (0, 15)]


def _affine(x, scale, zero_point, qmin, qmax):
    return numfmt.quantize_affine(x, scale, zero_point, qmin, qmax)


@st.composite
def _affine_args(draw):
    qmin, qmax = draw(st.sampled_from(RANGES))
    return (draw(vectors()), draw(floats(0.25, 8.0)), draw(st.integers(qmin, qmax)), qmin, qmax)


def _groups(x, bits, group):
    q = numfmt.quantize_int(x, bits, True, "group", group=group)
    return q.codes, q.scale[..., 0]


@st.composite
def _group_args(draw):
    group = draw(st.sampled_from([2, 4, 8]))
    x = draw(matrices(cols=st.integers(1, 3).map(lambda n: n * group)))
    return (x, draw(st.integers(2, 8)), group)


@st.composite
def _sqnr_args(draw):
    n = draw(st.integers(1, 8))
    x = np.array(draw(st.lists(st.integers(-160, 160), min_size=n, max_size=n))) / 16.0
    if not np.any(x != 0):
        x[0] = 1.0
    steps = st.sampled_from([1.0, 4.0, 16.0])
    q = np.round(x * draw(steps)) / draw(steps)
    return (q, x) if np.any(q != x) else (q + 0.25, x)


def _exponent(amax, emax, max_value, rule):
    elem = {448.0: numfmt.FP8_E4M3, 57344.0: numfmt.FP8_E5M2, 6.0: numfmt.FP4_E2M1,
            7.5: numfmt.FP6_E2M3, 28.0: numfmt.FP6_E3M2}[float(max_value)]
    assert elem.emax == emax
    return numfmt.e8m0_exponent(amax, elem, rule)


ELEMS = [(8, 448.0), (15, 57344.0), (2, 6.0), (2, 7.5), (4, 28.0)]


@st.composite
def _exponent_args(draw):
    emax, max_value = draw(st.sampled_from(ELEMS))
    amax = draw(vectors(1, 8, 2.0 ** -60, 2.0 ** 60))
    return (amax, emax, max_value, draw(st.sampled_from(["floor", "rceil"])))


def _nvfp4(x):
    q = numfmt.nvfp4_quantize(x)
    return float(q.tensor_scale), q.scales


LAB = Lab("05", "05_quantization_basics.py", N_("quantization basics"), [
    Exercise("quantize_affine", _affine, cases=[
        (np.array([0.5, 1.5, 2.5, -0.5, -2.5]), 1.0, 0, -128, 127),
        (np.array([-1000.0, 1000.0, 3.0]), 2.0, 128, 0, 255),
    ], inputs=_affine_args()),
    Exercise("quantize_groups", _groups, outputs=("codes", "scales"), cases=[
        (np.array([[1.0, -2.0, 0.5, 0.25]]), 4, 2),
        (np.array([[0.0, 0.0, 3.0, -1.5, 1.0, 1.0]]), 4, 2),
        (np.array([[7.0, 1.0, 2.0, 3.0, 0.5, 0.5, 0.5, 14.0]]), 4, 4),
    ], inputs=_group_args()),
    Exercise("sqnr_db", lambda q, x: numfmt.sqnr_db(q, x), cases=[
        (np.array([1.0, 2.0]), np.array([1.0, 2.5])),
    ], inputs=_sqnr_args(), tol=(1e-9, 0.0)),
    Exercise("mx_scale_exponent", _exponent, cases=[
        (np.array([448.0, 449.0, 512.0, 511.0, 1.0, 3.0]), 8, 448.0, "floor"),
        (np.array([448.0, 449.0, 512.0, 511.0, 1.0, 3.0]), 8, 448.0, "rceil"),
        (np.array([6.0, 7.0, 0.75, 2.0 ** -140]), 2, 6.0, "rceil"),
    ], inputs=_exponent_args()),
    Exercise("nvfp4_scales", _nvfp4, outputs=("tensor_scale", "scales"), cases=[
        (np.arange(1.0, 33.0).reshape(1, 32),),
        (np.r_[np.zeros(16), np.full(16, -3.0)].reshape(1, 32),),
    ], inputs=matrices(cols=st.sampled_from([16, 32]), lo=-1e4, hi=1e4).filter(
        lambda x: np.abs(x).max() > 1e-3).map(lambda x: (x,))),
])
