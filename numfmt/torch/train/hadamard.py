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
                    dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A random orthonormal Hadamard matrix ``H diag(s) / sqrt(n)``, ``s`` random signs.

    Parameters
    ----------
    n : int, a power of two (16 for NVFP4)
    generator : torch.Generator, optional
        Source of the signs (a CPU generator; default torch's global one).
    dtype : torch dtype of the result, default float32 (every entry +-2^-2 for n = 16 is exact)

    Returns
    -------
    torch.Tensor (n, n) on the CPU; ``R @ R.T`` is the identity.

    Notes
    -----
    TransformerEngine draws its signs once (a fixed sign vector,
    ``transformer_engine/pytorch/tensor/nvfp4_tensor.py``); :class:`QuantLinear` likewise
    draws one per layer from its seed and keeps it for the whole run.
    """
    h = hadamard(n)
    signs = torch.randint(0, 2, (n,), generator=generator, dtype=torch.int64) * 2 - 1
    return (h * signs.to(torch.float64) / math.sqrt(n)).to(dtype)


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
