"""Lab 04's checks: an int64 reference product of the zero-point-shifted codes, and
numfmt.quantize_affine for the requantization."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numfmt
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_


def _gemm(a, zero_a, b):
    return (a.astype(np.int64) - zero_a) @ b.astype(np.int64)


@st.composite
def _gemm_args(draw):
    m, k, n = (draw(st.integers(1, 4)) for _ in range(3))
    a = draw(hnp.arrays(np.uint8, (m, k)))
    b = draw(hnp.arrays(np.int8, (k, n)))
    return (a, draw(st.integers(0, 255)), b)


def _requantize(acc, scale_a, scale_b, scale_out, zero_out):
    return numfmt.quantize_affine(acc * scale_a * scale_b, scale_out, zero_out, 0, 255)


@st.composite
def _requantize_args(draw):
    m, n = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    acc = draw(hnp.arrays(np.int32, (m, n), elements=st.integers(-2 ** 20, 2 ** 20)))
    sb = draw(hnp.arrays(np.float64, (n,), elements=floats(1e-4, 1e-2).filter(lambda v: v > 0)))
    return (acc, draw(floats(1e-3, 0.1).filter(lambda v: v > 0)), sb,
            draw(floats(1e-3, 1.0).filter(lambda v: v > 0)), draw(st.integers(0, 255)))


LAB = Lab("04", "04_low_precision_matmul.py", N_("low-precision matrix multiplication"), [
    Exercise("int8_gemm", _gemm, cases=[
        (np.array([[255, 0]], dtype=np.uint8), 128, np.array([[127], [-128]], dtype=np.int8)),
        (np.full((2, 3), 200, dtype=np.uint8), 0, np.full((3, 2), 100, dtype=np.int8))],
        inputs=_gemm_args()),
    Exercise("requantize", _requantize, cases=[
        (np.array([[5, 15, -5, 1000]], dtype=np.int32), 1.0, np.array([0.5, 0.5, 0.5, 1.0]),
         5.0, 128)],
        inputs=_requantize_args()),
])
