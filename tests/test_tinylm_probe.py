"""Rounding residues in lecture 10's gradients (lectures.tinylm.probe.without_residues).

The gradient reaching the attention's q projection is zero, in exact arithmetic, at each
sequence's first position: that query attends to itself alone, its softmax row is the constant 1,
so its score gets no gradient. float64 leaves residues there whose values depend on the BLAS's
order of sums. These tests check the floor that removes them against that structure: what it
removes is exactly those rows, and every other gradient lies far above it."""

import math

import numpy as np
import pytest
import torch

from lectures.tinylm.loop import TrainConfig, train
from lectures.tinylm.model import TinyLMConfig
from lectures.tinylm.probe import RESIDUE_FLOOR, without_residues


#: Steps of the run below whose batches hold windows that open on a run of one repeated byte
#: (steps 2 and 10) and one whose batch holds none (step 5).
STEPS = (2, 5, 10)


@pytest.fixture(scope="module")
def captured():
    """Every linear's dy and the step's input tokens at :data:`STEPS` of an FP32 run
    (float64, lecture 10's model and batches)."""
    keep = {}

    def probe(step, model, loss, batch):
        if step in STEPS:
            keep[step] = (batch[0].clone(), {n: m.last_operands["dy"].clone()
                                             for n, m in model.linears().items()})
    train("fp32", TrainConfig(steps=max(STEPS) + 1, batch=8, warmup=20, val_windows=4),
          probe=probe, capture=True)
    return keep


def zero_in_exact_arithmetic(tokens: torch.Tensor) -> torch.Tensor:
    """(B * T,) bool: the positions whose query's gradient is zero in exact arithmetic, found
    from the tokens alone: those whose window so far is one byte repeated (the first position
    always). Every key and value up to there comes from the same token's embedding, so in
    layer 0 every value the query mixes is the same vector and its output does not depend on
    the softmax; layer 1 sees identical hidden states there and mixes identical values too."""
    same = torch.cumprod((tokens == tokens[:, :1]).to(torch.int64), dim=1).bool()
    return same.flatten()


@pytest.mark.parametrize("step", STEPS)
def test_the_floor_removes_exactly_the_gradients_that_are_zero_in_exact_arithmetic(captured,
                                                                                     step):
    tokens, dys = captured[step]
    exact_zero = zero_in_exact_arithmetic(tokens)[:, None]
    assert bool(exact_zero.any())
    for name, dy in dys.items():
        amax = float(dy.abs().max())
        removed = (without_residues(dy) == 0) & (dy != 0)
        rows = exact_zero.expand_as(dy) if name.endswith("attn.q") else torch.zeros_like(
            dy, dtype=torch.bool)
        # those rows: every entry a residue of float64's sums, or an exact zero
        assert bool((dy[rows].abs() < amax * RESIDUE_FLOOR * 2.0 ** -6).all()), name
        assert bool((removed | (dy == 0))[rows].all()), name
        assert not bool(removed[~rows].any()), name
        # every other gradient: nonzero and at least 2^8 above the floor
        rest = dy[~rows].abs()
        assert float(rest.min()) > amax * RESIDUE_FLOOR * 2.0 ** 8, (
            name, math.log2(float(rest.min()) / amax))


def test_the_run_has_windows_that_open_on_a_repeated_byte(captured):
    """Steps 2 and 10 go beyond the first positions (the case a floor on the first position
    alone would miss); step 5 has only those."""
    firsts = {step: int(zero_in_exact_arithmetic(tokens).sum()) - tokens.shape[0]
              for step, (tokens, _dys) in captured.items()}
    assert firsts[2] > 0 and firsts[10] > 0 and firsts[5] == 0, firsts


def test_without_residues_against_a_plain_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((16, 32)) * np.exp2(rng.integers(-60, 2, (16, 32)))
    x[0, 0] = 4.0
    x[1, :4] = [0.0, -0.0, 4.0 * 2.0**-40, -4.0 * 2.0**-41]
    want = np.where(np.abs(x) < 4.0 * 2.0**-40, 0.0, x)
    got = without_residues(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(got, want)
    assert got[1, 2] == 4.0 * 2.0**-40                  # at the floor: kept
    assert not without_residues(torch.zeros(3, 4)).any()
    assert without_residues(torch.zeros(0, 4)).shape == (0, 4)
    with pytest.raises(TypeError, match="dy"):
        without_residues(np.ones(3))
    with pytest.raises(TypeError, match="dy"):
        without_residues(torch.ones(3, dtype=torch.int64))
