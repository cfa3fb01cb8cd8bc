"""Lab 08's checks: torch's cross_entropy, exp of the mean NLL, numfmt.quantize_int per row."""

import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numfmt
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats, vectors
from labs.i18n import N_


def _nll(logits, targets):
    import torch
    return torch.nn.functional.cross_entropy(torch.tensor(logits), torch.tensor(targets),
                                             reduction="none").numpy()


@st.composite
def _nll_args(draw):
    t, v = draw(st.integers(1, 4)), draw(st.integers(2, 6))
    logits = draw(hnp.arrays(np.float64, (t, v), elements=floats(-50.0, 50.0)))
    return (logits, np.array(draw(st.lists(st.integers(0, v - 1), min_size=t, max_size=t)),
                             dtype=np.int64))


def _symmetric_row(k):
    """Whether a row's range is symmetric (-min == max > 0): numfmt rounds its zero point by an
    exact rule (quantize_int's docstring) that the lab leaves out."""
    return bool(np.any((k.max(axis=1) == -k.min(axis=1)) & (k.max(axis=1) > 0)))


LAB = Lab("08", "08_real_model.py", N_("a real model"), [
    Exercise("token_nll", _nll, cases=[
        (np.array([[0.0, 0.0], [1000.0, 0.0]]), np.array([1, 1])),
        (np.array([[-1000.0, 0.0, 3.0]]), np.array([0]))],
        inputs=_nll_args(), tol=(1e-9, 1e-12)),
    Exercise("perplexity", lambda nll: math.exp(math.fsum(nll) / len(nll)), cases=[
        (np.array([math.log(2.0)] * 3),)],
        inputs=vectors(1, 16, 0.0, 20.0).map(lambda v: (v,)), tol=(1e-12, 0.0)),
    Exercise("kv_quantize", lambda k, b: numfmt.quantize_int(k, b, False, "channel").values,
             cases=[(np.array([[0.0, 1.0, 2.0, 3.0], [-1.0, 0.5, 0.25, 0.0]]), 2),
                    (np.zeros((1, 4)), 4), (np.array([[1.0, 2.0, 3.0]]), 8)],
             inputs=st.tuples(hnp.arrays(np.float64, st.tuples(st.integers(1, 3),
                                                               st.integers(1, 8)),
                                         elements=floats(-10.0, 10.0).filter(
                                             lambda v: v == 0 or abs(v) > 1e-6)),
                              st.integers(2, 8)).filter(lambda a: not _symmetric_row(a[0]))),
])
