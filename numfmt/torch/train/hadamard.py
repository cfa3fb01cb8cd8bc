"""The random Hadamard transform (RHT) of NVFP4 training's wgrad operands."""

from __future__ import annotations

import math

import torch

#: Size of the random Hadamard transform (the NVFP4 paper, section 4; TE: 16 x 16).
RHT_SIZE = 16


def hadamard(n: int = RHT_SIZE) -> torch.Tensor:
    """The Sylvester Hadamard matrix of order ``n`` (a power of two), entries +-1, float64."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1 or n & (n - 1):
        raise ValueError(f"n must be a power of two, got {n!r}")
    h = torch.ones(1, 1, dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def random_hadamard(n: int = RHT_SIZE, *, generator: torch.Generator | None = None,
                    signs=None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A random orthonormal Hadamard matrix ``diag(s) H / sqrt(n)``, ``s`` random signs.

    Parameters
    ----------
    n : int, a power of two (16 for NVFP4)
    generator : torch.Generator, optional
        Source of the signs (a CPU generator; default torch's global one).
    signs : sequence of n values +-1, optional
        The signs themselves instead of a draw (e.g. :data:`TE_WGRAD_SIGNS`).
    dtype : torch dtype of the result, default float32 (every entry +-2^-2 for n = 16 is exact)

    Returns
    -------
    torch.Tensor (n, n) on the CPU; ``R @ R.T`` is the identity.

    Raises
    ------
    ValueError
        If ``n`` is not a power of two, or ``signs`` is not n values of +-1.

    Notes
    -----
    The signs scale the rows of H: a row vector t becomes ``t diag(s) H``, its signs flipped
    *before* the mixing, as TransformerEngine builds it (``sign_matrix @ hadamard`` in
    ``get_rht_matrix``, ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``; ``h = sign_mat @
    h`` in ``pytorch/custom_recipes/reference_nvfp4.py``). Flipping them after the mixing
    (``t H diag(s)``) would change no magnitude, so no block amax and no rounding decision: a
    fixed Hadamard, which sends a block of equal values into a single coefficient. TE uses
    one hard-coded sign vector (:data:`TE_WGRAD_SIGNS`); :class:`QuantLinear` draws one per
    layer from its seed and keeps it for the whole run.
    """
    h = hadamard(n)
    if signs is None:
        s = torch.randint(0, 2, (n,), generator=generator, dtype=torch.int64) * 2 - 1
    else:
        s = torch.as_tensor(signs)
        if s.shape != (n,) or not bool(((s == 1) | (s == -1)).all()):
            raise ValueError(f"signs must be {n} values of +1 or -1, got {signs!r}")
    return (s.to(torch.float64)[:, None] * h / math.sqrt(n)).to(dtype)


#: TransformerEngine's hard-coded RHT sign vector (``get_wgrad_sign_vector``,
#: ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``).
TE_WGRAD_SIGNS = (1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1)


def apply_rht(t: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Each run of 16 consecutive elements along the last axis of (rows, inner) ``t`` times
    ``h`` (16, 16): ``t`` times the block-diagonal orthonormal matrix diag(h, h, ...).

    Raises
    ------
    ValueError
        If ``t`` is not 2-D, or the inner dimension is not a multiple of ``h``'s size
        (naming ``rht``).
    """
    if not isinstance(t, torch.Tensor) or t.ndim != 2:
        raise ValueError(f"t must be a 2-D tensor (rows, inner), got "
                         f"{getattr(t, 'shape', type(t))}")
    rows, inner = t.shape
    n = h.shape[0]
    if inner % n:
        raise ValueError(f"OperandSpec.rht needs the inner dimension ({inner}) to be a multiple "
                         f"of {n}")
    return torch.mm(t.reshape(-1, n), h.to(t.device, t.dtype)).reshape(rows, inner)
