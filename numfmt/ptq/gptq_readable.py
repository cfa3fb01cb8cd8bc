"""GPTQ in the paper's notation, one column at a time: the readable version of :func:`gptq`.

Algorithm 1 of Frantar et al. (2023) with a batch of one column. W (d_row, d_col) holds the
weights still to be quantized; H^-1 enters through its upper Cholesky factor (``H^-1 =
U^T U``), whose row j holds what the Optimal Brain Surgeon update of the columns after j
needs, scaled by ``sqrt([H_F^-1]_jj)``. For each column j in turn::

    Q[:, j] = quant(W[:, j])                         round onto the grid
    E       = (W[:, j] - Q[:, j]) / U[j, j]          the rounding error, scaled
    W[:, j:] -= E U[j, j:]                           moved onto the columns not yet rounded

:func:`numfmt.ptq.gptq` does the same with lazy batches (the paper's section 4) and in-place
updates, and returns the same codes (tests/test_gptq_reference.py checks it over its
options); read this one first.
"""

from __future__ import annotations

import numpy as np

from .gptq_algorithm import (GPTQResult, _grid_params, _group_index, _setup, _static_params)

__all__ = ["gptq_reference"]


def gptq_reference(weight, hessian, bits: int = 4, group_size: int | None = None,
                   symmetric: bool = True, act_order: bool = False, damp: float = 0.01,
                   partial_last_group: bool = False, symmetric_grid: str = "restricted",
                   static_groups: bool = False, dead_inputs: str = "round") -> GPTQResult:
    """GPTQ one column at a time (Frantar et al. 2023, Algorithm 1, batch of one column).

    Parameters, Returns and Raises are :func:`numfmt.ptq.gptq`'s (without ``block_size``):
    the same arguments give the same codes, zero points, ``perm`` and ``g_idx``, and scales
    and weights equal up to float rounding (H^-1 and the updates are computed in another
    order).

    References
    ----------
    Frantar, Ashkboos, Hoefler and Alistarh, "GPTQ: Accurate Post-Training Quantization for
    Generative Pre-trained Transformers", ICLR 2023, Algorithm 1; act-order, static groups
    and the dead-input rule from the authors' github.com/IST-DASLab/gptq (``gptq.py``).
    """
    c = _setup(weight, hessian, bits, group_size, symmetric, act_order, damp,
               partial_last_group, symmetric_grid, static_groups, dead_inputs)
    W, H, grid, g = c.w, c.h, c.grid, c.group              # W (d_row, d_col), H (d_col, d_col)
    d_row, d_col = W.shape
    if group_size is None:                                 # one scale per row, original weights
        S, Z, T = (a[:, None] for a in _grid_params(W, grid))
    dead = np.diag(H) == 0                                 # inputs calibration never activated
    H[dead, dead] = 1.0
    if c.zero_dead:
        W[:, dead] = 0.0
    if c.static_groups:                                    # groups of the original columns
        S, Z, T = _static_params(W, g, grid)
    elif group_size is not None:                           # filled as each group starts
        S, Z, T = (np.empty((d_row, -(-d_col // g)), t) for t in (float, np.int64, float))
    perm = np.argsort(-np.diag(H), kind="stable") if c.act_order else np.arange(d_col)
    g_idx = _group_index(np.arange(d_col) if c.static_groups else perm, g)
    W, H = W[:, perm], H[np.ix_(perm, perm)]
    H += c.damp * np.mean(np.diag(H)) * np.eye(d_col)
    U = np.linalg.cholesky(np.linalg.inv(H)).T             # upper, H^-1 = U^T U
    Q = np.zeros((d_row, d_col), np.int64)
    for j in range(d_col):
        k = g_idx[perm[j]]                                 # the group of column j
        if group_size is not None and not c.static_groups and j % g == 0:
            S[:, k], Z[:, k], T[:, k] = _grid_params(W[:, j:j + g], grid)
        s, z = S[:, k], Z[:, k]
        # quant(w); a symmetric range's lower end T: its exact quotient rounded, -2^(b-1)
        q = np.where(W[:, j] == T[:, k], -2 ** (grid.bits - 1), np.rint(W[:, j] / s))
        Q[:, j] = np.clip(q + z, grid.qmin, grid.qmax)
        E = (W[:, j] - (Q[:, j] - z) * s) / U[j, j]
        W[:, j:] -= np.outer(E, U[j, j:])
    Q = Q[:, np.argsort(perm)]                             # back to the original columns
    return GPTQResult((Q - Z[:, g_idx]) * S[:, g_idx], Q, S, Z, perm.astype(np.int64), g_idx)
