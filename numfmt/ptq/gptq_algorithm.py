"""GPTQ: round a layer's weights one input column at a time, pushing each column's error onto
the columns not yet rounded, so that the layer's *output* error stays small.

For a linear layer ``y = x @ W.T`` with weights W (out, in) and inputs x of covariance-like
Hessian ``H = 2 X^T X / n``, the output error of quantized weights ``Q`` on the calibration
inputs is ``||X (Q - W)^T||^2 / n = tr(E H E^T) / 2`` with ``E = Q - W``: an error in an input
channel where the activations are large costs the most, and errors in correlated channels can
cancel. GPTQ rounds column j, then moves the not-yet-rounded columns F to the least-squares
optimum given the rounded ones (the Optimal Brain Surgeon update)::

    err = (w_j - q_j) / [H_F^-1]_jj ;      W_F <- W_F - err [H_F^-1]_{j, F}

With U the upper Cholesky factor of H^-1 (``H^-1 = U^T U``), row j of U holds exactly
``[H_F^-1]_{j, F} / sqrt([H_F^-1]_jj)`` for the remaining set F, so no inverse is recomputed.
Lazy batches apply the updates inside a block of ``block_size`` columns at once and push the
block's errors to the later columns in one matrix product.

References
----------
Frantar, Ashkboos, Hoefler and Alistarh, "GPTQ: Accurate Post-Training Quantization for
Generative Pre-trained Transformers", ICLR 2023 (arXiv 2210.17323), Algorithm 1; the authors'
reference implementation, github.com/IST-DASLab/gptq, ``gptq.py`` (``GPTQ.fasterquant``).
Hassibi and Stork, "Second order derivatives for network pruning: Optimal Brain Surgeon", 1993.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import as_calibration_array, check_block, check_real_scalar
from numfmt.intquant import int_range, quantize_int
from numfmt.packing.gptq import act_order_permutation, group_index

from ._checks import as_matrix, check_bool, check_positive_int, check_weight_scales, damping

__all__ = ["GPTQResult", "gptq", "hessian", "rtn", "rtn_values"]

#: Columns whose rank-1 updates are applied one by one inside a lazy batch (an inner batch;
#: any value gives the same result up to float rounding, as ``block_size`` does).
SUB_BLOCK = 16

#: Relative asymmetry |H - H^T| / max|H| accepted as float rounding of a symmetric matrix.
SYMMETRY_RTOL = 1e-8


class GPTQResult(NamedTuple):
    """Result of :func:`gptq`. Every array is in the weight's original column order."""

    weight: np.ndarray  #: float64 (out, in): the dequantized weights
    codes: np.ndarray   #: int64 (out, in): integer codes on numfmt's grid (see int_range)
    scales: np.ndarray  #: float64 (out, G): one per row and group (G = 1 without groups)
    zeros: np.ndarray   #: int64 (out, G): zero points (0 when symmetric)
    perm: np.ndarray    #: int64 (in,): the order columns were quantized in
    g_idx: np.ndarray   #: int32 (in,): the group of each input column


def hessian(x) -> np.ndarray:
    """The GPTQ Hessian ``H = 2 X^T X / n`` of a linear layer's inputs, in float64.

    Parameters
    ----------
    x : array_like of real numbers, shape (..., in)
        Calibration inputs of the layer; every leading axis counts as samples (tokens), so
        ``n = x.size // in``. Accumulated in float64 whatever the input dtype.

    Returns
    -------
    ndarray of float64, shape (in, in), symmetric positive semi-definite.

    Raises
    ------
    TypeError
        If ``x`` is not real-valued.
    ValueError
        If ``x`` is empty, 0-d or contains NaN or +-Inf, or ``2 X^T X / n`` overflows float64.

    References
    ----------
    Frantar et al. 2023, section 3 (``H = 2 X X^T`` with X as (in, n)); the reference
    implementation's ``add_batch`` averages it over samples, as here.
    """
    if np.ndim(x) == 0:
        raise ValueError("x must have at least one axis (the input features)")
    xs = as_calibration_array(x, "x")
    xs = xs.reshape(-1, xs.shape[-1])                                 # (n, in)
    with np.errstate(over="ignore", invalid="ignore"):
        h = xs.T @ xs
        h *= 2.0 / xs.shape[0]
    if not np.isfinite(h).all():
        raise ValueError(f"2 X^T X / n overflows float64 for x with max |x| = "
                         f"{np.abs(xs).max():.3g}: scale x down first (the Hessian's scale "
                         "does not change GPTQ's result)")
    return h


def _check_hessian(h, k: int) -> np.ndarray:
    h = as_matrix(h, "hessian")
    if h.shape != (k, k):
        raise ValueError(f"hessian must be (in, in) = ({k}, {k}) for a weight with {k} input "
                         f"columns, got shape {h.shape}")
    asym, hmax = _max_asymmetry(h), np.abs(h).max()
    if asym > SYMMETRY_RTOL * hmax:
        raise ValueError(f"hessian must be symmetric; max |H - H^T| = {asym:.3g} against "
                         f"max |H| = {hmax:.3g}")
    if (np.diag(h) < 0).any():
        raise ValueError("hessian has a negative diagonal entry: it is not 2 X^T X / n")
    return h.copy()


def _max_asymmetry(h: np.ndarray, rows: int = 256) -> float:
    """``max |H - H^T|`` of a finite square matrix, from its upper triangle (the difference
    is antisymmetric, so that half holds the maximum) a strip of ``rows`` rows at a time, so
    that the transposed reads stay in cache: the same value as the whole difference."""
    n, m = h.shape[0], 0.0
    for i in range(0, n, rows):
        m = max(m, float(np.abs(h[i:i + rows, i:] - h[i:, i:i + rows].T).max()))
    return m


def _inverse_cholesky_upper(h: np.ndarray) -> np.ndarray:
    """Upper U with ``H^-1 = U^T U``, the factor the reference gets from cholesky,
    cholesky_inverse and an upper cholesky, here with one Cholesky and one inverse.

    With J the order-reversing permutation and ``J H J = L L^T``, ``H^-1 = J L^-T L^-1 J =
    U^T U`` for ``U = J L^-1 J``, which is upper triangular because L^-1 is lower.
    """
    try:
        lower = np.linalg.cholesky(h[::-1, ::-1])          # J H J = L L^T
    except np.linalg.LinAlgError:
        raise ValueError("the dampened hessian is not positive definite; increase damp "
                         "or calibrate on more tokens") from None
    return np.ascontiguousarray(_inv_lower(lower)[::-1, ::-1])


def _inv_lower(lower: np.ndarray) -> np.ndarray:
    """Inverse of a lower-triangular matrix by halves, ``[[A, 0], [C, D]]^-1 = [[A^-1, 0],
    [-D^-1 C A^-1, D^-1]]``: a third of a general inverse's work, all in matrix products."""
    n = lower.shape[0]
    if n <= 128:
        return np.tril(np.linalg.inv(lower))
    m = n // 2
    a_inv = _inv_lower(lower[:m, :m])
    d_inv = _inv_lower(lower[m:, m:])
    out = np.zeros_like(lower)
    out[:m, :m] = a_inv
    out[m:, m:] = d_inv
    out[m:, :m] = -(d_inv @ (lower[m:, :m] @ a_inv))
    return out


def _check_group(cols: int, group_size, partial_last_group) -> int:
    """Columns per group: ``cols`` without groups; else a positive int dividing ``cols``, or
    any positive int with ``partial_last_group`` (the last group then holds the remainder)."""
    if group_size is None:
        return cols
    if check_bool(partial_last_group, "partial_last_group"):
        return check_positive_int(group_size, "group_size")
    return check_block(cols, group_size, "group")


def _group_index(perm: np.ndarray, group: int) -> np.ndarray:
    """``g_idx[perm[i]] = i // group`` (numfmt.packing.group_index, which needs group | K)."""
    if len(perm) % group == 0:
        return group_index(perm, group)
    g_idx = np.empty(len(perm), np.int32)
    g_idx[perm] = np.arange(len(perm)) // group
    return g_idx


def gptq(weight, hessian, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
         act_order: bool = False, damp: float = 0.01, block_size: int = 128,
         partial_last_group: bool = False) -> GPTQResult:
    """Quantize a linear layer's weights with GPTQ (Frantar et al. 2023, Algorithm 1).

    Parameters
    ----------
    weight : array_like of real numbers, shape (out, in)
        As ``torch.nn.Linear.weight``: the layer computes ``x @ weight.T``. Finite.
    hessian : array_like of real numbers, shape (in, in)
        ``H = 2 X^T X / n`` over calibration inputs X (n, in), e.g. from :func:`hessian`.
        Symmetric (to a relative 1e-8) with a non-negative diagonal.
    bits : int in [2, 16]
    group_size : int or None
        None: one scale (and zero point) per output row, from the whole original row. An int
        dividing ``in``: one per row and group of ``group_size`` consecutive columns *in the
        order they are quantized*, computed from the weights as they stand (already updated)
        when the group's first column is reached.
    symmetric : bool, default True
        numfmt's integer grid (:func:`numfmt.quantize_int`): True is the signed restricted
        range ``[-(2^(b-1)-1), 2^(b-1)-1]`` with ``scale = amax / qmax`` and zero point 0;
        False is ``[0, 2^b - 1]`` over ``[min(w, 0), max(w, 0)]`` with an integer zero point.
        So with a diagonal Hessian GPTQ returns exactly numfmt's round-to-nearest.
    act_order : bool, default False
        Quantize the columns in order of decreasing ``diag(H)`` (``desc_act``), so that the
        columns whose error costs most are rounded while many others can still absorb it.
    damp : float >= 0, default 0.01
        Adds ``damp * mean(diag(H))`` to the diagonal (the reference's ``percdamp``).
    block_size : int > 0, default 128
        Columns per lazy batch. Any value gives the column-at-a-time result up to float
        rounding; it changes only the speed. Inside a batch the rank-1 updates stay within
        inner batches of :data:`SUB_BLOCK` columns (of ``min(SUB_BLOCK, block_size)``; so
        ``block_size=1`` is column-at-a-time throughout).
    partial_last_group : bool, default False
        Accept a ``group_size`` that does not divide ``in``: the last group (in quantization
        order) holds the ``in % group_size`` remaining columns, as in the reference
        implementation (``g_idx = i // group_size``); e.g. 576 inputs in groups of 128 are
        four groups of 128 and one of 64. Without it such a group size is an error.

    Returns
    -------
    GPTQResult
        ``weight`` float64 (out, in) dequantized, equal to ``(codes - zeros[:, g_idx]) *
        scales[:, g_idx]`` elementwise; ``codes`` int64 (out, in); ``scales`` float64 and
        ``zeros`` int64 (out, G) with ``G = ceil(in / group_size)`` (1 without groups); ``perm``
        int64 (in,), the quantization order; ``g_idx`` int32 (in,), ``g_idx[perm[i]] = i //
        group_size``. For bits=4, asymmetric, ``codes.T``, ``scales.T``, ``zeros.T`` and
        ``g_idx`` are :class:`numfmt.packing.GPTQWeight`'s (K, N)-oriented fields unchanged
        (scales stored in float16 there). Symmetric codes are signed; the unsigned layout
        holds them as ``codes + 2^(b-1)`` with zero point ``2^(b-1)``.

    Raises
    ------
    TypeError
        If an array is not real-valued, an integer argument is not an integer, or
        ``symmetric``/``act_order`` is not a bool.
    ValueError
        If ``weight`` is not 2-D, empty or non-finite; ``hessian`` is not (in, in), not
        symmetric, non-finite or has a negative diagonal; ``bits`` is outside [2, 16];
        ``group_size`` does not divide ``in`` (without ``partial_last_group``); ``damp`` is
        negative or not finite, or ``damp * mean(diag H)`` is beyond float64's range;
        ``block_size`` is not positive; a row of ``weight`` is so small that its scale would
        be below float64's smallest normal number; or the dampened Hessian is not positive
        definite.

    Notes
    -----
    As the reference implementation: inputs with ``H_ii = 0`` (never active) get ``H_ii = 1``
    and a zero weight column; the per-row scales without groups are computed before that.
    Unlike the reference, a group that starts inside a lazy batch takes its scale from the
    fully updated weights (the reference reads them before the batch's own updates), so that
    every ``block_size`` gives the same result.
    """
    w = as_matrix(weight, "weight").copy()                 # (out, in)
    rows, cols = w.shape
    h = _check_hessian(hessian, cols)
    qmin, qmax = int_range(bits, symmetric=check_bool(symmetric, "symmetric"))
    check_weight_scales(w, qmax, symmetric)
    act_order = check_bool(act_order, "act_order")
    group = _check_group(cols, group_size, partial_last_group)
    damp = check_real_scalar(damp, "damp")
    if not (np.isfinite(damp) and damp >= 0):
        raise ValueError(f"damp must be a finite number >= 0, got {damp!r}")
    block_size = check_positive_int(block_size, "block_size")

    if group_size is None:                                 # scales from the original rows
        _, _, row_scale, row_zero = quantize_int(w, bits, symmetric, "channel")

    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    w[:, dead] = 0.0
    perm = act_order_permutation(np.diag(h)) if act_order else np.arange(cols)
    if act_order:                                          # (w and h are copies already)
        w = w[:, perm]
        h = h[np.ix_(perm, perm)]
    h[np.diag_indices(cols)] += damping(np.diag(h), damp)
    u = _inverse_cholesky_upper(h)                         # (in, in) upper

    n_groups = -(-cols // group)
    scales = np.empty((rows, n_groups))
    zeros = np.empty((rows, n_groups), np.int64)
    # Work on W^T (in, out): a column of W is then a contiguous row, and the rank-1 updates
    # run over contiguous memory.
    wt = np.ascontiguousarray(w.T)                         # (in, out)
    codes = np.empty((cols, rows))
    deq = np.empty((cols, rows))
    err = np.empty((cols, rows))
    # Two levels of lazy batches: the rank-1 updates stay inside SUB_BLOCK columns, and each
    # sub-block's errors reach the rest of its block, and each block's the later columns, as
    # one matrix product. Rank-1 updates are memory-bound; the products run at BLAS speed.
    sub = min(SUB_BLOCK, block_size)
    buf = np.empty((sub, rows))
    for i1 in range(0, cols, block_size):
        i2 = min(i1 + block_size, cols)
        for j1 in range(i1, i2, sub):
            j2 = min(j1 + sub, i2)
            w1 = wt[j1:j2]                                 # (b, out) view: the sub-block
            u1 = u[j1:j2, j1:j2]
            for i in range(j2 - j1):
                j = j1 + i
                if j % group == 0:
                    if group_size is None:
                        s, z = row_scale[:, 0], row_zero[:, 0]
                    else:
                        s, z = _group_params(wt, err, u, (i1, i2), (j1, j2), j, group, bits,
                                             symmetric)
                    scales[:, j // group], zeros[:, j // group] = s, z
                # numfmt.quantize_int's steps, in its order, so a diagonal H reproduces RTN
                q = codes[j]
                np.divide(w1[i], s, out=q)
                np.rint(q, out=q)
                q += z
                np.clip(q, qmin, qmax, out=q)
                d = deq[j]
                np.subtract(q, z, out=d)
                d *= s
                e = err[j]
                np.subtract(w1[i], d, out=e)
                e /= u1[i, i]
                if i + 1 < j2 - j1:
                    t = buf[:j2 - j1 - i - 1]
                    np.multiply(u1[i, i + 1:, None], e[None, :], out=t)
                    w1[i + 1:] -= t
            if j2 < i2:
                wt[j2:i2] -= u[j1:j2, j2:i2].T @ err[j1:j2]
        if i2 < cols:
            wt[i2:] -= u[i1:i2, i2:].T @ err[i1:i2]
    codes, deq = codes.T.astype(np.int64), deq.T
    inv = np.argsort(perm)
    return GPTQResult(deq[:, inv], codes[:, inv], scales, zeros, perm.astype(np.int64),
                      _group_index(perm, group))


def rtn(weight, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
        partial_last_group: bool = False) -> GPTQResult:
    """Round-to-nearest on GPTQ's grid and grouping: the baseline GPTQ is measured against.

    Exactly :func:`numfmt.quantize_int` per row (``group_size=None``) or per group of
    consecutive columns, each group as ``quantize_int(..., granularity="channel")`` on its
    columns, so that a last group of fewer columns (``partial_last_group``) is allowed. Equal
    to :func:`gptq` with a diagonal Hessian and no act-order, bit for bit.

    Parameters
    ----------
    weight : array_like of float, shape (out, in), finite
    bits, group_size, symmetric, partial_last_group
        As :func:`gptq`.

    Returns
    -------
    GPTQResult
        As :func:`gptq`, with ``perm = arange(in)``.

    Raises
    ------
    TypeError, ValueError
        As :func:`gptq` for these arguments.
    """
    w = as_matrix(weight, "weight")
    rows, cols = w.shape
    int_range(bits, symmetric=check_bool(symmetric, "symmetric"))
    group = _check_group(cols, group_size, partial_last_group)
    deq, codes = np.empty_like(w), np.empty(w.shape, np.int64)
    full = cols // group * group
    # consecutive groups of `group` columns, then (with partial_last_group) the remainder
    segments = [(0, full, group)] if full else []
    if full < cols:
        segments.append((full, cols, cols - full))
    scales, zeros = [], []
    for a, b, g in segments:
        s, z = _round_groups(w[:, a:b], g, bits, symmetric, deq[:, a:b], codes[:, a:b])
        scales.append(s)
        zeros.append(z)
    perm = np.arange(cols)
    return GPTQResult(deq, codes, np.concatenate(scales, axis=1),
                      np.concatenate(zeros, axis=1), perm, _group_index(perm, group))


def rtn_values(weight, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
               partial_last_group: bool = False) -> np.ndarray:
    """``rtn(...).weight`` alone: the dequantized weights, bit for bit, without the codes.

    For searches that quantize the same weight many times and keep only the dequantized
    values (AWQ's, :func:`numfmt.ptq.awq_search`): it skips the integer codes and the zero
    point's round trip, and the clamp where no element of a group can leave the grid.

    Parameters
    ----------
    weight, bits, group_size, symmetric, partial_last_group
        As :func:`rtn`.

    Returns
    -------
    ndarray of float64, shape (out, in): equal to ``rtn(weight, ...).weight`` in every bit
    (the sign of zeros included).

    Raises
    ------
    TypeError, ValueError
        As :func:`rtn`.

    References
    ----------
    The round-to-nearest baseline GPTQ is measured against (Frantar et al. 2023, section 5),
    on numfmt.quantize_int's grid per group, as :func:`rtn`.
    """
    w = as_matrix(weight, "weight")
    rows, cols = w.shape
    int_range(bits, symmetric=check_bool(symmetric, "symmetric"))
    group = _check_group(cols, group_size, partial_last_group)
    deq = np.empty_like(w)
    full = cols // group * group
    if full:
        _round_group_values(w[:, :full], group, bits, symmetric, deq[:, :full])
    if full < cols:
        _round_group_values(w[:, full:], cols - full, bits, symmetric, deq[:, full:])
    return deq


def _group_grid(mn, mx, qmin: int, qmax: int, symmetric: bool):
    """numfmt.quantize_int's scale (clip 1) and zero point from each group's minimum and
    maximum (float64 arrays of one shape), with its checks and errors, in its order of
    operations (so the same bits): ``(s, z)``, z int64 of s's shape, or None when symmetric."""
    from numfmt.intquant import _affine_scale, _check_calibrated_scale
    if symmetric:
        amax = np.maximum(mx, -mn)
        s = amax * (1.0 / qmax)                            # quantize_int's clip / qmax, clip = 1
        _check_calibrated_scale(s, amax > 0, 1.0)
        s[s == 0] = 1.0
        return s, None
    lo, hi = np.minimum(mn, 0.0) * 1.0, np.maximum(mx, 0.0) * 1.0
    s = _affine_scale(lo, hi, qmax)
    _check_calibrated_scale(s, (mn != 0) | (mx != 0), 1.0)
    s[s == 0] = 1.0
    z = np.clip(np.rint(-lo / s), qmin, qmax).astype(np.int64)
    with np.errstate(over="ignore"):
        ends = np.abs(np.concatenate([(qmin - z) * s, (qmax - z) * s], axis=-1))
    if not np.isfinite(ends).all():
        raise ValueError("the asymmetric grid over x's range reaches beyond float64's range "
                         f"(an end of the grid is {float(ends.max()):.6g}); scale x down or "
                         "quantize it symmetrically")
    return s, z


def _pairwise(v: np.ndarray, op) -> np.ndarray:
    """``op.reduce(v, axis=-1, keepdims=True)`` by halving the last axis while it is even:
    numpy reduces a short last axis slowly, and min and max do not depend on the order
    (up to the sign of a zero, which the callers' results do not depend on)."""
    while v.shape[-1] > 1 and v.shape[-1] % 2 == 0:
        v = op(v[..., 0::2], v[..., 1::2])
    return v if v.shape[-1] == 1 else op.reduce(v, axis=-1, keepdims=True)


def _round_group_values(x, g, bits, symmetric, values):
    """:func:`_round_groups`'s ``values`` alone, bit for bit, written into ``values``.

    The steps that change nothing are left out, exactly: with integers in float64,
    ``clip(r + z, qmin, qmax) - z`` is ``r`` wherever it is not clamped; division by a
    positive scale and rint are monotone, so no element of a group is clamped when its
    minimum and maximum are not, and the clamp runs only on chunks where one is. Adding
    +0.0 at the end turns -0.0 into +0.0 as ``(r + z) - z`` does on the asymmetric grid.
    """
    from numfmt._chunks import rows_per_chunk
    qmin, qmax = int_range(bits, symmetric)
    rows, k = x.shape
    step = rows_per_chunk(k)
    reduce = ((lambda v, op: op.reduce(v, axis=-1, keepdims=True)) if g >= 64 else _pairwise)
    for i in range(0, rows, step):
        v = x[i:i + step].reshape(-1, k // g, g)          # (r, G, g)
        mn, mx = reduce(v, np.minimum), reduce(v, np.maximum)
        s, z = _group_grid(mn, mx, qmin, qmax, symmetric)
        z = 0.0 if symmetric else z.astype(np.float64)
        q = np.empty(v.shape)
        with np.errstate(over="ignore"):
            np.divide(v, s, out=q)
            r_lo, r_hi = np.rint(mn / s) + z, np.rint(mx / s) + z
        np.rint(q, out=q)
        if (r_lo < qmin).any() or (r_hi > qmax).any():
            np.clip(q, qmin - z, qmax - z, out=q)
        q *= s
        if symmetric:
            values[i:i + step] = q.reshape(-1, k)
        else:
            np.add(q.reshape(-1, k), 0.0, out=values[i:i + step])


def _round_groups(x, g, bits, symmetric, values, codes):
    """``quantize_int(x, bits, symmetric, "group", g)`` on a finite (rows, k) block, g | k,
    written into ``values`` (float64) and ``codes`` (int64) of the block's shape; returns the
    scales and zero points, (rows, k // g).

    The same operations as numfmt.quantize_int in the same order (so the same bits, and the
    same errors for scales that are not normal numbers or grids past float64), on a chunk of
    rows at a time and without quantize_int's whole-array copies: rtn runs 15 times per
    layer group inside AWQ's search.
    """
    from numfmt._chunks import rows_per_chunk

    qmin, qmax = int_range(bits, symmetric)
    rows, k = x.shape
    scales = np.empty((rows, k // g))
    zeros = np.zeros((rows, k // g), np.int64)
    step = rows_per_chunk(k)
    for i in range(0, rows, step):
        v = x[i:i + step].reshape(-1, k // g, g)          # (r, G, g), a copy if x is strided
        s, z = _group_grid(v.min(axis=-1, keepdims=True), v.max(axis=-1, keepdims=True),
                           qmin, qmax, symmetric)
        if not symmetric:
            zeros[i:i + step] = z[..., 0]
        scales[i:i + step] = s[..., 0]
        q = np.empty(v.shape)
        with np.errstate(over="ignore"):
            np.divide(v, s, out=q)
        np.rint(q, out=q)
        if not symmetric:
            q += z
        np.maximum(q, qmin, out=q)
        np.minimum(q, qmax, out=q)
        codes[i:i + step] = q.reshape(-1, k)
        if not symmetric:
            q -= z
        q *= s
        values[i:i + step] = q.reshape(-1, k)
    return scales, zeros


def _group_params(wt, err, u, block, sub, j, group, bits, symmetric):
    """Scale and zero point (out,) of the group starting at column j, inside sub-block
    ``sub = (j1, j2)`` of lazy batch ``block = (i1, i2)``, from the weights as a
    column-at-a-time GPTQ would hold them now: the sub-block's rows of ``wt`` (in, out) are
    current; the rest of the block still owes the sub-block's errors so far, and the rows
    beyond the block owe the block's."""
    (i1, i2), (j1, j2) = block, sub
    end = min(j + group, wt.shape[0])
    parts = [wt[j:min(end, j2)]]
    if end > j2:
        b = min(end, i2)
        parts.append(wt[j2:b] - u[j1:j, j2:b].T @ err[j1:j] if j > j1 else wt[j2:b])
    if end > i2:
        parts.append(wt[i2:end] - u[i1:j, i2:end].T @ err[i1:j] if j > i1 else wt[i2:end])
    cur = parts[0] if len(parts) == 1 else np.concatenate(parts)
    _, _, s, z = quantize_int(cur.T, bits, symmetric, "channel")
    return s[:, 0], z[:, 0]
