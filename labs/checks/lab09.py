"""Lab 09's checks: numfmt.ptq's smoothquant_scales, awq_search and gptq_reference (GPTQ's
Algorithm 1, itself tested equal to the blocked numfmt.ptq.gptq)."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numfmt
from numfmt import ptq
from numfmt.ptq.gptq_readable import gptq_reference
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_


@st.composite
def _smooth_args(draw):
    n = draw(st.integers(1, 6))
    pos = floats(0.0, 100.0).filter(lambda v: v == 0 or v > 1e-3)
    return (draw(hnp.arrays(np.float64, n, elements=pos)),
            draw(hnp.arrays(np.float64, n, elements=pos)),
            draw(st.sampled_from([0.0, 0.5, 0.75, 1.0])))


def int3_per_row(w):
    """The weight quantizer of the AWQ exercise: symmetric INT3, one scale per row."""
    return numfmt.quantize_int(w, 3, True, "channel").values


def _awq(weight, x, quantize, grid):
    r = ptq.awq_search(weight, x, quantize, grid)
    return float(r.alpha), r.scales


@st.composite
def _awq_args(draw):
    out, k = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    n = draw(st.integers(1, k))                      # n <= in: numfmt's error is the plain mean
    nonzero = floats(-4.0, 4.0).filter(lambda v: abs(v) > 1e-3)
    w = draw(hnp.arrays(np.float64, (out, k), elements=nonzero))
    x = draw(hnp.arrays(np.float64, (n, k), elements=nonzero))
    return (w, x, int3_per_row, draw(st.sampled_from([4, 10, 20])))


def _gptq_call(fn):
    """The student's gptq_codes on GPTQ's inputs made from (weight, H, bits) as
    gptq_reference makes them: damped H, u = chol(H^-1)^T, per-row scale amax * (1 / qmax)."""
    def run(weight, h, bits):
        qmax = 2 ** (bits - 1) - 1
        hd = h + 0.01 * np.mean(np.diag(h)) * np.eye(len(h))
        u = np.linalg.cholesky(np.linalg.inv(hd)).T
        amax = np.maximum(weight.max(axis=1), -weight.min(axis=1))
        scale = amax * (1.0 / qmax)
        scale[scale == 0] = 1.0
        return fn(weight.copy(), u, scale, qmax)
    return run


@st.composite
def _gptq_args(draw):
    out, k = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    w = draw(hnp.arrays(np.float64, (out, k), elements=floats(-2.0, 2.0)))
    x = draw(hnp.arrays(np.float64, (k + 2, k), elements=floats(-2.0, 2.0)))
    return (w, x.T @ x + np.eye(k), draw(st.sampled_from([3, 4, 8])))


LAB = Lab("09", "09_ptq_algorithms.py", N_("post-training quantization algorithms"), [
    Exercise("smoothquant_scales", ptq.smoothquant_scales, cases=[
        (np.array([16.0, 0.0, 1.0]), np.array([1.0, 2.0, 0.0]), 0.5)],
        inputs=_smooth_args()),
    Exercise("awq_search", _awq, cases=[
        (np.array([[1.0, -0.5, 0.25, 2.0]]), np.array([[10.0, 0.1, 0.1, 0.1]]), int3_per_row, 20)],
        inputs=_awq_args(), tol=(1e-12, 0.0), examples=60, outputs=("alpha", "s")),
    Exercise("gptq_codes", lambda w, h, b: gptq_reference(w, h, b, damp=0.01).codes,
             adapter=_gptq_call, names=("weight", "H", "bits"), cases=[
                 (np.array([[1.0, 0.5, -0.3], [0.2, -1.0, 0.7]]),
                  np.array([[2.0, 1.0, 0.0], [1.0, 2.0, 1.0], [0.0, 1.0, 2.0]]), 4)],
             inputs=_gptq_args(), examples=80),
])
