"""Lab 10's checks: torch's loss-scale update (torch._amp_update_scale_, what
torch.amp.GradScaler.update calls), scipy's Hadamard matrix, numfmt.block_quantize."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numfmt
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_


def _update(scale, tracker, found_inf, growth, backoff, interval):
    import torch
    s = torch.tensor([scale], dtype=torch.float32)
    t = torch.tensor([tracker], dtype=torch.int32)
    torch._amp_update_scale_(s, t, torch.tensor([1.0 if found_inf else 0.0]), growth, backoff,
                             interval)
    return float(s[0]), int(t[0])


@st.composite
def _update_args(draw):
    interval = draw(st.integers(1, 5))
    scale = float(np.float32(draw(st.sampled_from([1.0, 65536.0, 3.0e38, 2.0 ** -20, 12345.678]))))
    return (scale, draw(st.integers(0, interval - 1)), draw(st.booleans()),
            draw(st.sampled_from([2.0, 1.5, 3.0])), draw(st.sampled_from([0.5, 0.25, 0.3])),
            interval)


def _rht(x, signs):
    from scipy.linalg import hadamard
    n = x.shape[1]
    return (x * signs) @ hadamard(n).astype(np.float64) / np.sqrt(n)


@st.composite
def _rht_args(draw):
    n = draw(st.sampled_from([1, 2, 4, 8, 16]))
    x = draw(hnp.arrays(np.float64, (draw(st.integers(1, 3)), n), elements=floats(-10.0, 10.0)))
    signs = draw(hnp.arrays(np.float64, n, elements=st.sampled_from([1.0, -1.0])))
    return (x, signs)


def _blockwise(x, block):
    q = numfmt.block_quantize(x, numfmt.FP8_E4M3, block, scale_format="exact")
    return q.values, q.scales


@st.composite
def _blockwise_args(draw):
    block = draw(st.sampled_from([2, 4, 8, 128]))
    k = block * draw(st.integers(1, 2))
    x = draw(hnp.arrays(np.float64, (draw(st.integers(1, 2)), k),
                        elements=floats(-1e3, 1e3).filter(lambda v: v == 0 or abs(v) > 1e-6)))
    return (x, block)


LAB = Lab("10", "10_low_precision_training.py", N_("low-precision training"), [
    Exercise("update_loss_scale", _update, outputs=("scale", "growth_tracker"), cases=[
        (65536.0, 0, True, 2.0, 0.5, 2000), (65536.0, 1999, False, 2.0, 0.5, 2000),
        (65536.0, 5, False, 2.0, 0.5, 2000), (float(np.float32(3e38)), 0, False, 2.0, 0.5, 1)],
        inputs=_update_args()),
    Exercise("rht", _rht, cases=[
        (np.array([[1.0, 0.0, 0.0, 0.0]]), np.array([1.0, -1.0, 1.0, 1.0])),
        (np.array([[0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 16.0]]), -np.ones(8))],
        inputs=_rht_args(), tol=(1e-12, 1e-12)),
    Exercise("blockwise_fp8", _blockwise, outputs=("values", "scales"), cases=[
        (np.array([[448.0, 1.0, 0.0, 0.0], [1e-3, -2.0, 5.0, 300.0]]), 2),
        (np.array([[1.0, 2.0, 3.0, 1000.0]]), 4)],
        inputs=_blockwise_args()),
])
