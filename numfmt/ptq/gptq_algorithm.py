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

from numfmt._validate import (as_calibration_array, check_block, check_bool, check_positive_int,
                              check_real_scalar)
from numfmt.intquant import int_range
from numfmt.packing.gptq import act_order_permutation, group_index

from ._checks import as_matrix, check_weight_scales, damping

__all__ = ["DEAD_INPUTS", "GPTQResult", "SYMMETRIC_GRIDS", "g_idx_bits_per_weight", "gptq",
           "hessian", "rtn", "rtn_values"]

#: Columns whose rank-1 updates are applied one by one inside a lazy batch (an inner batch;
#: any value gives the same result up to float rounding, as ``block_size`` does).
SUB_BLOCK = 16

#: Relative asymmetry |H - H^T| / max|H| accepted as float rounding of a symmetric matrix.
SYMMETRY_RTOL = 1e-8

#: :func:`gptq`'s ``symmetric_grid``: numfmt's restricted range, or all 2^b codes (the
#: reference's and AutoGPTQ's ``sym=True``, Marlin's ``uint4b8``).
SYMMETRIC_GRIDS = ("restricted", "full")

#: :func:`gptq`'s ``dead_inputs``: round a never-activated column to nearest, or zero it.
DEAD_INPUTS = ("round", "zero")


class _Grid(NamedTuple):
    """An integer grid: codes in [qmin, qmax]; ``full`` for the symmetric grid of all 2^b."""

    bits: int
    symmetric: bool
    full: bool
    qmin: int
    qmax: int


class GPTQResult(NamedTuple):
    """Result of :func:`gptq`. Every array is in the weight's original column order."""

    weight: np.ndarray  #: float64 (out, in): the dequantized weights
    codes: np.ndarray   #: int64 (out, in): integer codes (signed when symmetric; see gptq)
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


def g_idx_bits_per_weight(shapes) -> float:
    """Bits per weight that GPTQ's ``g_idx`` adds to a set of linear layers.

    A GPTQ checkpoint stores ``g_idx``, one int32 per input column, whatever the grouping;
    only with act-order (and dynamic groups) does it carry information, since otherwise it is
    ``k // group_size``. Over layers of shapes (out_i, in_i) it costs
    ``32 * sum(in_i) / sum(out_i * in_i)`` bits per weight: ``32 / out`` for one layer.

    Parameters
    ----------
    shapes : iterable of (out, in) pairs of positive ints
        The weights' shapes in ``torch.nn.Linear`` orientation, as :func:`gptq` takes them.

    Returns
    -------
    float, bits per weight.

    Raises
    ------
    TypeError
        If a dimension is not an integer.
    ValueError
        If ``shapes`` is empty, a shape is not a pair, or a dimension is not positive.

    References
    ----------
    AutoGPTQ's and GPTQ-for-LLaMa's ``QuantLinear`` (``g_idx``: int32, shape (in,)).
    """
    pairs = [tuple(p) for p in shapes]
    if not pairs or any(len(p) != 2 for p in pairs):
        raise ValueError(f"shapes must be a non-empty list of (out, in) pairs, got {shapes!r}")
    dims = [[check_positive_int(d, "a dimension of shapes") for d in p] for p in pairs]
    return 32 * sum(k for _, k in dims) / sum(n * k for n, k in dims)


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


def _check_grid(bits, symmetric, symmetric_grid) -> _Grid:
    """The integer grid of ``bits``, ``symmetric`` and ``symmetric_grid``, checked."""
    if symmetric_grid not in SYMMETRIC_GRIDS:
        raise ValueError(f"symmetric_grid must be one of {SYMMETRIC_GRIDS}, got "
                         f"{symmetric_grid!r}")
    qmin, qmax = int_range(bits, symmetric=check_bool(symmetric, "symmetric"))
    full = symmetric_grid == "full"
    if full and not symmetric:
        raise ValueError("symmetric_grid='full' is a symmetric grid: it needs symmetric=True")
    return _Grid(bits, bool(symmetric), full, qmin - 1 if full else qmin, qmax)


def _grid_params(block: np.ndarray, grid: _Grid):
    """Scale (rows,) float64, zero point (rows,) int64 and tie end (rows,) float64 of each row
    of ``block`` (rows, g) on ``grid``: numfmt.quantize_int's per-row grid (clip 1), or the
    full symmetric one. The tie end is the row's minimum where its range is symmetric on the
    asymmetric grid (``-min == max > 0``), NaN elsewhere: a weight equal to it has the exact
    quotient ``-(2^b - 1) / 2``, which numfmt.quantize_int rounds half to even, to -2^(b-1)
    (code 0), whatever the last bits of the float64 quotient."""
    mn, mx = block.min(axis=1), block.max(axis=1)
    s, z = _group_grid(mn, mx, grid.qmin, grid.qmax, grid.symmetric, grid.full)
    if z is None:
        return s, np.zeros(len(s), np.int64), np.full(len(s), np.nan)
    return s, z, _tie_ends(mn, mx)


def _tie_ends(mn, mx) -> np.ndarray:
    """``mn`` where the range ``[min(mn, 0), max(mx, 0)]`` is symmetric, NaN elsewhere."""
    from numfmt.intquant import _symmetric_ties
    tie = _symmetric_ties(np.minimum(mn, 0.0), np.maximum(mx, 0.0))
    return np.full(np.shape(mn), np.nan) if tie is None else np.where(tie, mn, np.nan)


class _Setup(NamedTuple):
    w: np.ndarray          # float64 (out, in), a copy
    h: np.ndarray          # float64 (in, in), a copy
    grid: _Grid
    group: int             # columns per group (in without groups)
    act_order: bool
    damp: float
    static_groups: bool
    zero_dead: bool


def _setup(weight, hessian, bits, group_size, symmetric, act_order, damp, partial_last_group,
           symmetric_grid, static_groups, dead_inputs) -> _Setup:
    """:func:`gptq`'s arguments checked (the same for :func:`gptq_reference`)."""
    w = as_matrix(weight, "weight").copy()                 # (out, in)
    h = _check_hessian(hessian, w.shape[1])
    grid = _check_grid(bits, symmetric, symmetric_grid)
    check_weight_scales(w, grid.qmax, grid.symmetric)
    act_order = check_bool(act_order, "act_order")
    group = _check_group(w.shape[1], group_size, partial_last_group)
    damp = check_real_scalar(damp, "damp")
    if not (np.isfinite(damp) and damp >= 0):
        raise ValueError(f"damp must be a finite number >= 0, got {damp!r}")
    if check_bool(static_groups, "static_groups") and group_size is None:
        raise ValueError("static_groups fixes groups of columns: it needs a group_size")
    if dead_inputs not in DEAD_INPUTS:
        raise ValueError(f"dead_inputs must be one of {DEAD_INPUTS}, got {dead_inputs!r}")
    return _Setup(w, h, grid, group, act_order, damp, static_groups, dead_inputs == "zero")


def _static_params(w: np.ndarray, group: int, grid: _Grid):
    """Scales, zero points and tie ends (out, G) of the groups of consecutive *original*
    columns (:func:`_grid_params`)."""
    params = [_grid_params(w[:, a:a + group], grid) for a in range(0, w.shape[1], group)]
    return tuple(np.stack(p, axis=1) for p in zip(*params))


def gptq(weight, hessian, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
         act_order: bool = False, damp: float = 0.01, block_size: int = 128,
         partial_last_group: bool = False, symmetric_grid: str = "restricted",
         static_groups: bool = False, dead_inputs: str = "round") -> GPTQResult:
    """Quantize a linear layer's weights with GPTQ (Frantar et al. 2023, Algorithm 1).

    The fast version: :func:`numfmt.ptq.gptq_reference` is the same algorithm in about
    forty readable lines, one column at a time in the paper's notation, and gives the same
    codes (tests/test_gptq_reference.py).

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
        when the group's first column is reached (see Notes for the reference's lazy batches).
    symmetric : bool, default True
        True: zero point 0 on the grid ``symmetric_grid`` names. False: numfmt's asymmetric
        grid (:func:`numfmt.quantize_int`), codes ``[0, 2^b - 1]`` over ``[min(w, 0),
        max(w, 0)]`` with an integer zero point, the reference's ``sym=False`` (see Notes for
        a range with ``min == -max``).
    act_order : bool, default False
        Quantize the columns in order of decreasing ``diag(H)`` (``desc_act``), so that the
        columns whose error costs most are rounded while many others can still absorb it. A
        heuristic of the authors' repository, not of the paper: ``--act-order`` came to
        github.com/IST-DASLab/gptq with the camera-ready version, and its README calls it a
        heuristic; the paper's section 3 finds that the order of the columns barely matters
        on large models. With groups it also regroups the columns by
        activation energy; ``static_groups`` keeps the groups of the original order.
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
    symmetric_grid : {"restricted", "full"}, default "restricted"
        The symmetric grid (``symmetric=True`` only). "restricted": numfmt's signed
        restricted range ``[-(2^(b-1)-1), 2^(b-1)-1]`` with ``scale = amax / (2^(b-1)-1)``,
        2^b - 1 levels, symmetric about zero; so with a diagonal Hessian GPTQ returns exactly
        :func:`numfmt.quantize_int`. "full": all 2^b codes ``[-2^(b-1), 2^(b-1)-1]`` with
        ``scale = 2 amax / (2^b - 1)``, the grid of the authors' ``Quantizer(sym=True)`` (zero
        point ``(maxq + 1) / 2 = 2^(b-1)`` on unsigned codes) and of AutoGPTQ, and so of
        published symmetric GPTQ checkpoints and of the unsigned-with-bias-8 ``uint4b8`` codes
        Marlin and vLLM read: its step is 14/15 of the restricted one at 4 bits, its most
        negative level is -16/15 amax and its largest positive 14/15 amax. The reference
        gives a group without negative weights half that scale (its ``xmin`` stays 0), which
        clips the group at 7/15 of its maximum; here every group gets ``2 amax / (2^b - 1)``.
        A group's most negative weight, read when the group starts, lies on a tie,
        ``-(2^b - 1) / 2`` steps: exactly it rounds to even, ``-2^(b-1)``, but the last bits
        of the updated weights decide it, so implementations that update in another order
        may differ in that one code (and in the error feedback after it).
    static_groups : bool, default False
        With groups: fix each group's scale and zero point before any column is quantized,
        from groups of consecutive columns in the *original* order (after ``dead_inputs``),
        as the authors' ``--static-groups`` (github.com/IST-DASLab/gptq) and AutoGPTQ's
        ``static_groups``. Act-order then changes only the
        order of quantization, not which columns share a scale, and ``g_idx`` is ``k //
        group_size``: a kernel needs no row reordering.
    dead_inputs : {"round", "zero"}, default "round"
        Inputs with ``H_ii = 0`` (never active in calibration) get ``H_ii = 1``, so that H
        is invertible; the column is then independent of all others. "round": it keeps its
        weight, rounded to nearest on its group's grid, so inputs that are active later are
        still served. "zero": its weights are set to 0 first, as the reference does.

    Returns
    -------
    GPTQResult
        ``weight`` float64 (out, in) dequantized, equal to ``(codes - zeros[:, g_idx]) *
        scales[:, g_idx]`` elementwise; ``codes`` int64 (out, in); ``scales`` float64 and
        ``zeros`` int64 (out, G) with ``G = ceil(in / group_size)`` (1 without groups); ``perm``
        int64 (in,), the quantization order; ``g_idx`` int32 (in,), ``g_idx[perm[i]] = i //
        group_size`` (``k // group_size`` with ``static_groups``). For bits=4, asymmetric,
        ``codes.T``, ``scales.T``, ``zeros.T`` and ``g_idx`` are
        :class:`numfmt.packing.GPTQWeight`'s (K, N)-oriented fields unchanged (scales stored
        in float16 there). Symmetric codes are signed; the unsigned layout holds them as
        ``codes + 2^(b-1)`` with zero point ``2^(b-1)`` (with the "full" grid, exactly the
        reference's codes).

    Raises
    ------
    TypeError
        If an array is not real-valued, an integer argument is not an integer, or
        ``symmetric``/``act_order``/``static_groups`` is not a bool.
    ValueError
        If ``weight`` is not 2-D, empty or non-finite; ``hessian`` is not (in, in), not
        symmetric, non-finite or has a negative diagonal; ``bits`` is outside [2, 16];
        ``group_size`` does not divide ``in`` (without ``partial_last_group``); ``damp`` is
        negative or not finite, or ``damp * mean(diag H)`` is beyond float64's range;
        ``block_size`` is not positive; ``symmetric_grid`` or ``dead_inputs`` is not one of its
        values, or "full" is asked of an asymmetric grid; ``static_groups`` comes without a
        ``group_size``; the "full" grid's lowest level (-2^b / (2^b - 1) amax) is beyond
        float64's range; a row of ``weight`` is so small that its scale would be below
        float64's smallest normal number; or the dampened Hessian is not positive definite.

    Notes
    -----
    Without groups, the per-row scales come from the original weights, before
    ``dead_inputs="zero"`` zeroes a column (as in the reference).

    A group whose first column falls inside a lazy batch (``group_size`` smaller than
    ``block_size``, or not a multiple of it): here its scale comes from the fully updated
    weights, those a column-at-a-time GPTQ holds at that moment, so the result does not
    depend on ``block_size``. The reference's ``fasterquant`` reads the group's weights
    from its outer copy ``W``, which has not yet received the updates of the earlier
    columns of the same batch (they live in ``W1``), so its codes change with ``blocksize``
    and equal these when ``blocksize`` divides ``groupsize``. Published checkpoints with
    groups of 32 or 64 and the default ``blocksize=128`` carry the reference's behaviour.

    A group whose range is symmetric (``min == -max``) has the half-integer zero point
    ``(2^b - 1) / 2`` in exact arithmetic. The reference rounds the float64 quotient
    ``-min / scale``, which lands a last bit above or below it as ``scale`` rounds, that is
    with the last bits of ``max``; numfmt takes the exact value rounded half to even,
    2^(b-1), and sends the group's minimum (a weight still equal to it when its column is
    rounded) to code 0, as :func:`numfmt.quantize_int` and :func:`rtn` do. A natural group
    has such a range only when its minimum and maximum agree in magnitude to the last bit;
    AWQ's clip search makes one of every group it clips on both sides.

    References
    ----------
    Frantar et al. 2023, Algorithm 1 and section 4 (lazy batches, Cholesky); the authors'
    repository github.com/IST-DASLab/gptq, ``gptq.py`` (``fasterquant``: ``actorder``,
    ``static_groups``, the dead-input rule) and ``quant.py`` (``Quantizer``, the "full"
    symmetric grid); AutoGPTQ's ``GPTQ.fasterquant`` (the same, and ``g_idx``).
    """
    c = _setup(weight, hessian, bits, group_size, symmetric, act_order, damp,
               partial_last_group, symmetric_grid, static_groups, dead_inputs)
    w, h, grid, group = c.w, c.h, c.grid, c.group
    rows, cols = w.shape
    block_size = check_positive_int(block_size, "block_size")
    qmin, qmax = grid.qmin, grid.qmax
    mid = np.rint(qmax / 2)                 # (2^b - 1) / 2 rounded half to even: 2^(b-1)

    if group_size is None:                                 # scales from the original rows
        row_scale, row_zero, row_end = _grid_params(w, grid)

    dead = np.diag(h) == 0
    h[dead, dead] = 1.0
    if c.zero_dead:
        w[:, dead] = 0.0
    n_groups = -(-cols // group)
    if c.static_groups:
        scales, zeros, ends = _static_params(w, group, grid)
    else:
        scales = np.empty((rows, n_groups))
        zeros = np.empty((rows, n_groups), np.int64)
    perm = act_order_permutation(np.diag(h)) if c.act_order else np.arange(cols)
    g_idx = _group_index(np.arange(cols) if c.static_groups else perm, group)
    if c.act_order:                                        # (w and h are copies already)
        w = w[:, perm]
        h = h[np.ix_(perm, perm)]
    h[np.diag_indices(cols)] += damping(np.diag(h), c.damp)
    u = _inverse_cholesky_upper(h)                         # (in, in) upper

    group_of = g_idx[perm]                                 # group of the j-th quantized column
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
                if group_size is None:
                    if j == 0:
                        s, z, tie_end = row_scale, row_zero, row_end
                        scales[:, 0], zeros[:, 0] = s, z
                elif c.static_groups:
                    k = group_of[j]
                    s, z, tie_end = scales[:, k], zeros[:, k], ends[:, k]
                elif j % group == 0:
                    s, z, tie_end = _group_params(wt, err, u, (i1, i2), (j1, j2), j, group, grid)
                    scales[:, j // group], zeros[:, j // group] = s, z
                # numfmt.quantize_int's steps, in its order, so a diagonal H reproduces RTN
                q = codes[j]
                np.divide(w1[i], s, out=q)
                np.rint(q, out=q)
                if not grid.symmetric:          # a symmetric range's lower end: code 0
                    q[w1[i] == tie_end] = -mid
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
    return GPTQResult(deq[:, inv], codes[:, inv], scales, zeros, perm.astype(np.int64), g_idx)


def rtn(weight, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
        partial_last_group: bool = False, symmetric_grid: str = "restricted") -> GPTQResult:
    """Round-to-nearest on GPTQ's grid and grouping: the baseline GPTQ is measured against.

    Exactly :func:`numfmt.quantize_int` per row (``group_size=None``) or per group of
    consecutive columns, each group as ``quantize_int(..., granularity="channel")`` on its
    columns, so that a last group of fewer columns (``partial_last_group``) is allowed; with
    ``symmetric_grid="full"``, the same steps on :func:`gptq`'s full symmetric grid. Equal
    to :func:`gptq` with a diagonal Hessian and no act-order, bit for bit.

    Parameters
    ----------
    weight : array_like of float, shape (out, in), finite
    bits, group_size, symmetric, partial_last_group, symmetric_grid
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
    grid = _check_grid(bits, symmetric, symmetric_grid)
    group = _check_group(cols, group_size, partial_last_group)
    deq, codes = np.empty_like(w), np.empty(w.shape, np.int64)
    full = cols // group * group
    # consecutive groups of `group` columns, then (with partial_last_group) the remainder
    segments = [(0, full, group)] if full else []
    if full < cols:
        segments.append((full, cols, cols - full))
    scales, zeros = [], []
    for a, b, g in segments:
        s, z = _round_groups(w[:, a:b], g, grid, deq[:, a:b], codes[:, a:b])
        scales.append(s)
        zeros.append(z)
    perm = np.arange(cols)
    return GPTQResult(deq, codes, np.concatenate(scales, axis=1),
                      np.concatenate(zeros, axis=1), perm, _group_index(perm, group))


def rtn_values(weight, bits: int = 4, group_size: int | None = None, symmetric: bool = True,
               partial_last_group: bool = False, symmetric_grid: str = "restricted"
               ) -> np.ndarray:
    """``rtn(...).weight`` alone: the dequantized weights, bit for bit, without the codes.

    For searches that quantize the same weight many times and keep only the dequantized
    values (AWQ's, :func:`numfmt.ptq.awq_search`): it skips the integer codes and the zero
    point's round trip, and the clamp where no element of a group can leave the grid.

    Parameters
    ----------
    weight, bits, group_size, symmetric, partial_last_group, symmetric_grid
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
    grid = _check_grid(bits, symmetric, symmetric_grid)
    group = _check_group(cols, group_size, partial_last_group)
    deq = np.empty_like(w)
    full = cols // group * group
    if full:
        _round_group_values(w[:, :full], group, grid, deq[:, :full])
    if full < cols:
        _round_group_values(w[:, full:], cols - full, grid, deq[:, full:])
    return deq


def _group_grid(mn, mx, qmin: int, qmax: int, symmetric: bool, full: bool = False):
    """numfmt.quantize_int's scale (clip 1) and zero point from each group's minimum and
    maximum (float64 arrays of one shape), with its checks and errors, in its order of
    operations (so the same bits): ``(s, z)``, z int64 of s's shape, or None when symmetric.
    ``full``: the symmetric grid of all 2^b codes, ``s = 2 amax / (2^b - 1)`` (qmin = -2^(b-1)).
    """
    from numfmt.intquant import _affine_scale, _check_calibrated_scale, _zero_point
    if symmetric:
        amax = np.maximum(mx, -mn)
        if full:  # (amax / levels) * 2 is 2 amax / levels in every bit, and cannot overflow
            s = amax / (qmax - qmin) * 2.0
            with np.errstate(over="ignore"):
                bottom = s * qmin                          # -2^b / (2^b - 1) amax
            if not np.isfinite(bottom).all():
                raise ValueError("the full symmetric grid's lowest level -2^b / (2^b - 1) amax "
                                 "is beyond float64's range; scale the weights down or use "
                                 "symmetric_grid='restricted'")
        else:
            s = amax * (1.0 / qmax)                        # quantize_int's clip / qmax, clip = 1
        _check_calibrated_scale(s, amax > 0, 1.0)
        s[s == 0] = 1.0
        return s, None
    lo, hi = np.minimum(mn, 0.0) * 1.0, np.maximum(mx, 0.0) * 1.0
    s = _affine_scale(lo, hi, qmax)
    _check_calibrated_scale(s, (mn != 0) | (mx != 0), 1.0)
    s[s == 0] = 1.0
    z = _zero_point(lo, hi, s, qmin, qmax)
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


def _end_ties(v, mn, mx, qmax: int, q) -> None:
    """numfmt.quantize_int's rule for a symmetric range (``-min == max``), on the rounded
    quotients ``q`` of the groups ``v`` (r, G, g) with minima and maxima (r, G, 1): the lower
    end's exact quotient -qmax / 2 rounds half to even onto code 0, whatever the last bits of
    the float64 quotient (:func:`_tie_ends`)."""
    ends = _tie_ends(mn, mx)
    if not np.isnan(ends).all():
        q[v == ends] = -np.rint(qmax / 2)


def _round_group_values(x, g, grid, values):
    """:func:`_round_groups`'s ``values`` alone, bit for bit, written into ``values``.

    The steps that change nothing are left out, exactly: with integers in float64,
    ``clip(r + z, qmin, qmax) - z`` is ``r`` wherever it is not clamped; division by a
    positive scale and rint are monotone, so no element of a group is clamped when its
    minimum and maximum are not, and the clamp runs only on chunks where one is. Adding
    +0.0 at the end turns -0.0 into +0.0 as ``(r + z) - z`` does on the asymmetric grid.
    """
    from numfmt._chunks import rows_per_chunk
    qmin, qmax, symmetric = grid.qmin, grid.qmax, grid.symmetric
    rows, k = x.shape
    step = rows_per_chunk(k)
    reduce = ((lambda v, op: op.reduce(v, axis=-1, keepdims=True)) if g >= 64 else _pairwise)
    for i in range(0, rows, step):
        v = x[i:i + step].reshape(-1, k // g, g)          # (r, G, g)
        mn, mx = reduce(v, np.minimum), reduce(v, np.maximum)
        s, z = _group_grid(mn, mx, qmin, qmax, symmetric, grid.full)
        z = 0.0 if symmetric else z.astype(np.float64)
        q = np.empty(v.shape)
        with np.errstate(over="ignore"):
            np.divide(v, s, out=q)
            r_lo, r_hi = np.rint(mn / s) + z, np.rint(mx / s) + z
        np.rint(q, out=q)
        if not symmetric:
            _end_ties(v, mn, mx, qmax, q)
        if (r_lo < qmin).any() or (r_hi > qmax).any():
            np.clip(q, qmin - z, qmax - z, out=q)
        q *= s
        if symmetric:
            values[i:i + step] = q.reshape(-1, k)
        else:
            np.add(q.reshape(-1, k), 0.0, out=values[i:i + step])


def _round_groups(x, g, grid, values, codes):
    """``quantize_int(x, bits, symmetric, "group", g)`` on a finite (rows, k) block, g | k,
    written into ``values`` (float64) and ``codes`` (int64) of the block's shape; returns the
    scales and zero points, (rows, k // g).

    The same operations as numfmt.quantize_int in the same order (so the same bits, and the
    same errors for scales that are not normal numbers or grids past float64), on a chunk of
    rows at a time and without quantize_int's whole-array copies: rtn runs 15 times per
    layer group inside AWQ's search.
    """
    from numfmt._chunks import rows_per_chunk

    qmin, qmax, symmetric = grid.qmin, grid.qmax, grid.symmetric
    rows, k = x.shape
    scales = np.empty((rows, k // g))
    zeros = np.zeros((rows, k // g), np.int64)
    step = rows_per_chunk(k)
    for i in range(0, rows, step):
        v = x[i:i + step].reshape(-1, k // g, g)          # (r, G, g), a copy if x is strided
        mn, mx = v.min(axis=-1, keepdims=True), v.max(axis=-1, keepdims=True)
        s, z = _group_grid(mn, mx, qmin, qmax, symmetric, grid.full)
        if not symmetric:
            zeros[i:i + step] = z[..., 0]
        scales[i:i + step] = s[..., 0]
        q = np.empty(v.shape)
        with np.errstate(over="ignore"):
            np.divide(v, s, out=q)
        np.rint(q, out=q)
        if not symmetric:
            _end_ties(v, mn, mx, qmax, q)
            q += z
        np.maximum(q, qmin, out=q)
        np.minimum(q, qmax, out=q)
        codes[i:i + step] = q.reshape(-1, k)
        if not symmetric:
            q -= z
        q *= s
        values[i:i + step] = q.reshape(-1, k)
    return scales, zeros


def _group_params(wt, err, u, block, sub, j, group, grid):
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
    return _grid_params(cur.T, grid)
