"""The random Hadamard transform of NVFP4's wgrad operands against TransformerEngine's.

TE's construction is transcribed from ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``
(``get_wgrad_sign_vector``, ``get_hadamard_matrix``, ``get_rht_matrix``: ``sign_matrix @
hadamard``) and ``pytorch/custom_recipes/reference_nvfp4.py`` (``h = sign_mat @ h``, then
``x_mat @ transform``); the Hadamard matrix itself is scipy's.
"""

import numpy as np
import pytest
import scipy.linalg
import torch

import numfmt.torch.train as ntt

TE_SIGNS = [1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1]  # get_wgrad_sign_vector


def te_rht_matrix(signs) -> torch.Tensor:
    """TE's get_rht_matrix before its bfloat16 cast (every entry +-1/4 is exact in it)."""
    sign_matrix = torch.tensor(signs, dtype=torch.float64) * torch.eye(16, dtype=torch.float64)
    return sign_matrix @ (torch.from_numpy(scipy.linalg.hadamard(16).astype(np.float64)) / 4)


def te_apply(x: torch.Tensor, transform: torch.Tensor) -> torch.Tensor:
    """reference_nvfp4.py: the last dimension in runs of 16, each times the transform."""
    return (x.reshape(-1, 16) @ transform).reshape(x.shape)


def test_random_hadamard_with_tes_signs_is_tes_matrix():
    got = ntt.random_hadamard(16, signs=ntt.TE_WGRAD_SIGNS, dtype=torch.float64)
    assert list(ntt.TE_WGRAD_SIGNS) == TE_SIGNS
    assert torch.equal(got, te_rht_matrix(TE_SIGNS))
    # bf16 holds the matrix exactly, as TE stores it
    assert torch.equal(got.to(torch.bfloat16).double(), got)


@pytest.mark.parametrize("seed", range(8))
def test_drawn_signs_scale_the_rows_of_h(seed):
    g = torch.Generator().manual_seed(seed)
    signs = (torch.randint(0, 2, (16,), generator=g, dtype=torch.int64) * 2 - 1).tolist()
    got = ntt.random_hadamard(16, generator=torch.Generator().manual_seed(seed),
                              dtype=torch.float64)
    assert torch.equal(got, te_rht_matrix(signs))
    assert torch.equal(got @ got.T, torch.eye(16, dtype=torch.float64))


def test_a_block_of_equal_values_is_not_concentrated():
    """x diag(s) H spreads a constant block over many coefficients; a plain Hadamard (or the
    signs flipped after mixing, x H diag(s)) puts it all in one: |coef| = 4 c."""
    x = torch.full((1, 16), 0.5, dtype=torch.float64)
    plain = te_apply(x, te_rht_matrix([1] * 16))
    assert float(plain.abs().max()) == 2.0 and int((plain != 0).sum()) == 1
    for h in [ntt.random_hadamard(16, signs=ntt.TE_WGRAD_SIGNS, dtype=torch.float64)] + [
            ntt.random_hadamard(16, generator=torch.Generator().manual_seed(s),
                                dtype=torch.float64) for s in range(32)]:
        y = ntt.apply_rht(x, h)
        assert torch.allclose(y, te_apply(x, h), rtol=0, atol=0)
        assert float(y.abs().max()) < 2.0          # not all of the block in one coefficient
        assert int((y != 0).sum()) > 1


def test_signs_change_magnitudes_and_block_amax():
    """The signs act before the mixing, so two sign vectors give different magnitudes (signs
    applied after the mixing would only flip signs: |x H diag(s)| = |x H|)."""
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((8, 64)) + 1.0)  # a common component per block
    h0, h1 = (ntt.random_hadamard(16, generator=torch.Generator().manual_seed(s),
                                  dtype=torch.float64) for s in (0, 1))
    a, b = ntt.apply_rht(x, h0).abs(), ntt.apply_rht(x, h1).abs()
    assert not torch.allclose(a, b)
    h = torch.from_numpy(scipy.linalg.hadamard(16).astype(np.float64)) / 4
    after_mixing = te_apply(x, h * torch.tensor(TE_SIGNS, dtype=torch.float64))  # H diag(s)
    assert torch.allclose(after_mixing.abs(), te_apply(x, h).abs(), rtol=0, atol=0)

    def block_amax_over_rms(t):
        blk = t.reshape(-1, 16)
        return float((blk.abs().amax(1) / blk.pow(2).mean(1).sqrt()).mean())
    te = te_apply(x, te_rht_matrix(TE_SIGNS))
    assert torch.allclose(ntt.apply_rht(x, ntt.random_hadamard(
        16, signs=ntt.TE_WGRAD_SIGNS, dtype=torch.float64)), te, rtol=0, atol=0)
    # the plain Hadamard concentrates the blocks' means: a larger block amax than TE's RHT
    assert block_amax_over_rms(te_apply(x, h)) > 1.2 * block_amax_over_rms(te)


@pytest.mark.parametrize("bad", [[1] * 15, [1] * 15 + [0], [[1] * 16], [2] * 16])
def test_random_hadamard_refuses_bad_signs(bad):
    with pytest.raises(ValueError, match="signs"):
        ntt.random_hadamard(16, signs=bad)
