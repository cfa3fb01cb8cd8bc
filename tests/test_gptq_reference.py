"""numfmt.ptq.gptq against a plain transcription of the authors' code, and against the
readable column-at-a-time version.

``authors_find_params`` and ``authors_fasterquant`` transcribe github.com/IST-DASLab/gptq
(``quant.py``: ``Quantizer.find_params`` per channel without the MSE search, ``quantize``;
``gptq.py``: ``GPTQ.fasterquant``) line by line into float64 numpy: the lazy batches with
their outer copy ``W``, the dead-input rule, ``actorder`` and ``static_groups``. Two
departures, both stated where they are: the argsort of act-order is stable (torch's is not,
which matters only for exactly tied Hessian diagonals), and ``restricted=True`` swaps
numfmt's restricted symmetric grid into the Quantizer (the swap a comparison needs, since
the authors' symmetric grid is the "full" one).
"""

import inspect

import numpy as np
import pytest

from numfmt import quantize_int
from numfmt.packing import (GPTQWeight, act_order_permutation, gptq_dequantize,
                            gptq_pack_qweight, gptq_pack_qzeros, gptq_quantize,
                            gptq_unpack_qweight, gptq_unpack_qzeros)
from numfmt.ptq import (DEAD_INPUTS, SYMMETRIC_GRIDS, g_idx_bits_per_weight, gptq,
                        gptq_reference, hessian, rtn, rtn_values)


# ------------------------------------------------------------ the authors' code, transcribed
def authors_find_params(x, bits, sym, restricted=False):
    """quant.py, Quantizer.find_params(x, weight=True), perchannel=True, mse=False.

    Returns (scale, zero, qmin): per row of x (rows, cols); codes are clamped to [qmin, maxq].
    """
    maxq = 2 ** bits - 1
    xmin = np.minimum(x.min(axis=1), 0.0)
    xmax = np.maximum(x.max(axis=1), 0.0)
    if sym:
        xmax = np.maximum(np.abs(xmin), xmax)
        tmp = xmin < 0
        xmin[tmp] = -xmax[tmp]
    tmp = (xmin == 0) & (xmax == 0)
    xmin[tmp] = -1
    xmax[tmp] = +1
    scale = (xmax - xmin) / maxq
    if sym:
        zero = np.full_like(scale, (maxq + 1) / 2)
    else:
        zero = np.round(-xmin / scale)
    if sym and restricted:  # numfmt's grid swapped in: +-(2^(b-1) - 1) steps of amax / that
        return xmax / (2 ** (bits - 1) - 1), zero, 1
    return scale, zero, 0


def authors_quantize(x, scale, zero, qmin, maxq):
    """quant.py, quantize(): the code and the dequantized value."""
    q = np.clip(np.round(x / scale) + zero, qmin, maxq)
    return q, scale * (q - zero)


def authors_fasterquant(W, H, bits, sym, blocksize=128, percdamp=0.01, groupsize=-1,
                        actorder=False, static_groups=False, restricted=False):
    """gptq.py, GPTQ.fasterquant: the dequantized weights Q and the unsigned codes."""
    W, H = W.astype(np.float64).copy(), H.astype(np.float64).copy()
    columns = W.shape[1]
    maxq = 2 ** bits - 1
    params = authors_find_params(W, bits, sym, restricted)   # quantizer not ready yet

    dead = np.diag(H) == 0
    H[dead, dead] = 1
    W[:, dead] = 0

    if static_groups:
        groups = [authors_find_params(W[:, i:i + groupsize], bits, sym, restricted)
                  for i in range(0, columns, groupsize)]
    if actorder:
        perm = np.argsort(-np.diag(H), kind="stable")       # torch.argsort(descending=True)
        W = W[:, perm]
        H = H[perm][:, perm]
        invperm = np.argsort(perm)

    Q = np.zeros_like(W)
    codes = np.zeros_like(W)
    damp = percdamp * np.mean(np.diag(H))
    H[np.arange(columns), np.arange(columns)] += damp
    L = np.linalg.cholesky(H)                                # torch.linalg.cholesky
    Linv = np.linalg.inv(L)
    H = Linv.T @ Linv                                        # torch.cholesky_inverse
    Hinv = np.linalg.cholesky(H).T                           # cholesky(upper=True)

    for i1 in range(0, columns, blocksize):
        i2 = min(i1 + blocksize, columns)
        count = i2 - i1
        W1 = W[:, i1:i2].copy()
        Q1 = np.zeros_like(W1)
        Err1 = np.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2]
        for i in range(count):
            w = W1[:, i]
            d = Hinv1[i, i]
            if groupsize != -1:
                if not static_groups:
                    if (i1 + i) % groupsize == 0:
                        params = authors_find_params(W[:, (i1 + i):(i1 + i + groupsize)],
                                                     bits, sym, restricted)
                else:
                    idx = i1 + i
                    if actorder:
                        idx = perm[idx]
                    params = groups[idx // groupsize]
            scale, zero, qmin = params
            c, q = authors_quantize(w, scale, zero, qmin, maxq)
            Q1[:, i] = q
            codes[:, i1 + i] = c
            err1 = (w - q) / d
            W1[:, i:] -= np.outer(err1, Hinv1[i, i:])
            Err1[:, i] = err1
        Q[:, i1:i2] = Q1
        W[:, i2:] -= Err1 @ Hinv[i1:i2, i2:]

    if actorder:
        Q = Q[:, invperm]
        codes = codes[:, invperm]
    return Q, codes.astype(np.int64)


# ------------------------------------------------------------------------------ problems
def layer(seed, rows=16, cols=64, n=384, rank=8, dead=()):
    """Weights (rows, cols), t-distributed, and the Hessian of correlated inputs with loud
    channels; the columns in ``dead`` never activated."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, rank)) @ rng.standard_normal((rank, cols))
    x += 0.3 * rng.standard_normal((n, cols))
    x[:, rng.choice(cols, 3, replace=False)] *= 8.0
    x[:, list(dead)] = 0.0
    return rng.standard_t(5, (rows, cols)) * 0.02, hessian(x)


def unsigned(r, bits, symmetric):
    """numfmt's codes as the reference stores them: symmetric ones offset by 2^(b-1)."""
    return r.codes + 2 ** (bits - 1) if symmetric else r.codes


def assert_same(r, q, codes, bits, symmetric):
    np.testing.assert_allclose(r.weight, q, rtol=1e-9, atol=1e-15)
    np.testing.assert_array_equal(unsigned(r, bits, symmetric), codes)


def assert_same_but_ties(r, codes, bits, group):
    """Codes equal, except rows whose first difference is the full grid's tie: a group's
    first column holding its most negative weight, -amax / s = -(2^b - 1) / 2 exactly, which
    the last bits of the updated weights round to -2^(b-1) or -2^(b-1) + 1; after it the
    row's error feedback differs. Most rows must agree throughout."""
    mine = unsigned(r, bits, True)[:, r.perm]                  # quantization order
    theirs = codes[:, r.perm]
    tied = 0
    for row in range(mine.shape[0]):
        diff = np.flatnonzero(mine[row] != theirs[row])
        if diff.size:
            j = diff[0]
            assert j % group == 0, (row, j)
            assert {mine[row, j], theirs[row, j]} == {0, 1}, (row, j)
            tied += 1
    assert tied <= mine.shape[0] // 4, tied


# ----------------------------------------------------------------------- the two grids
@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bits,group,act_order", [
    (4, None, False), (4, None, True), (3, 16, False), (4, 16, True), (2, 32, True),
    (8, 16, False)])
def test_full_grid_is_the_authors_symmetric_grid(seed, bits, group, act_order):
    # groups start at lazy-batch boundaries (blocksize = group): no in-batch group start
    w, h = layer(seed, dead=(5,))
    q, codes = authors_fasterquant(w, h, bits, True, blocksize=group or 128,
                                   groupsize=group or -1, actorder=act_order)
    r = gptq(w, h, bits, group, True, act_order, symmetric_grid="full", dead_inputs="zero")
    if group is None:
        assert_same(r, q, codes, bits, True)
    else:
        assert_same_but_ties(r, codes, bits, group)
    assert r.codes.min() == -2 ** (bits - 1)           # the extra negative code is used ...
    assert codes.max() == 2 ** bits - 1                 # ... and the top unsigned code


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("bits,group,act_order", [
    (4, None, False), (3, 16, True), (4, 32, False), (2, 16, True)])
def test_restricted_grid_is_the_authors_loop_with_numfmts_grid(seed, bits, group, act_order):
    w, h = layer(seed, dead=(7,))
    q, codes = authors_fasterquant(w, h, bits, True, blocksize=group or 128,
                                   groupsize=group or -1, actorder=act_order, restricted=True)
    r = gptq(w, h, bits, group, True, act_order, dead_inputs="zero")
    assert_same(r, q, codes, bits, True)
    assert codes.min() >= 1                             # never the code 0 of the full grid


@pytest.mark.parametrize("bits,group,act_order", [(4, None, True), (3, 16, False),
                                                  (4, 32, True)])
def test_asymmetric_is_the_authors(bits, group, act_order):
    w, h = layer(3, dead=(2, 40))
    q, codes = authors_fasterquant(w, h, bits, False, blocksize=group or 128,
                                   groupsize=group or -1, actorder=act_order)
    r = gptq(w, h, bits, group, False, act_order, dead_inputs="zero")
    assert_same(r, q, codes, bits, False)


def test_grids_differ_as_documented():
    # 4 bits: the full grid's step is 14/15 of the restricted one, its levels run from
    # -16/15 amax to 14/15 amax; round to nearest on one row shows it
    amax = 0.3
    row = np.linspace(-amax, amax, 61)[None, :]
    full = rtn(row, 4, symmetric_grid="full")
    restricted = rtn(row, 4)
    assert full.scales[0, 0] / restricted.scales[0, 0] == pytest.approx(14 / 15, rel=1e-15)
    assert full.weight.max() == pytest.approx(14 / 15 * amax, rel=1e-15)
    assert (full.codes.min(), full.codes.max()) == (-8, 7)
    assert (restricted.codes.min(), restricted.codes.max()) == (-7, 7)
    assert -16 / 15 * amax == pytest.approx(-8 * full.scales[0, 0], rel=1e-15)
    # the authors' Quantizer halves the scale of a row without negative weights (its xmin
    # stays 0), which clips it at 7/15 of its maximum; numfmt's full grid does not
    pos = np.abs(row) + 0.01
    scale, zero, qmin = authors_find_params(pos, 4, True)
    assert scale[0] == pos.max() / 15
    assert authors_quantize(pos, scale, zero, qmin, 15)[1].max() == pytest.approx(
        7 / 15 * pos.max(), rel=1e-15)
    assert rtn(pos, 4, symmetric_grid="full").scales[0, 0] == pos.max() / 15 * 2


def test_full_grid_goes_into_packing_as_uint4b8():
    # unsigned codes = signed + 8 and a zero point of 8 in every group: the layout symmetric
    # GPTQ checkpoints store (qzeros 8, or 7 in the "v1" files) and Marlin reads as uint4b8
    w, h = layer(4, rows=16, cols=64)
    r = gptq(w, h, 4, 16, act_order=True, symmetric_grid="full")
    codes = (r.codes + 8).T
    gw = GPTQWeight(gptq_pack_qweight(codes), r.scales.T.astype(np.float16),
                    gptq_pack_qzeros(np.full((4, 16), 8)), r.g_idx, 16)
    fp16 = r.scales.astype(np.float16).astype(np.float64)
    np.testing.assert_array_equal(gptq_dequantize(gw), (r.codes * fp16[:, r.g_idx]).T)


@pytest.mark.parametrize("act_order", [False, True])
def test_packing_symmetric_is_the_authors_grid_with_float16_scales(act_order):
    # numfmt.packing.gptq_quantize(symmetric=True) against the transcribed Quantizer per
    # group, its scale rounded to float16 as a checkpoint stores it, zero point 8
    rng = np.random.default_rng(12)
    w = rng.standard_t(5, (256, 32)) * 0.02                            # (K, N)
    w[:128, 3] = np.abs(w[:128, 3])          # a group without negative weights: 2 amax / 15
    perm = act_order_permutation(rng.uniform(0, 1, 256)) if act_order else None
    gw = gptq_quantize(w, 128, perm=perm, symmetric=True)
    np.testing.assert_array_equal(gptq_unpack_qzeros(gw.qzeros), 8)
    codes = gptq_unpack_qweight(gw.qweight)
    for g in range(2):
        rows = np.flatnonzero(gw.g_idx == g)
        blk = w[rows].T                                                 # (N, g): rows of W
        amax = np.abs(blk).max(axis=1)
        scale = (2 * amax / 15).astype(np.float16)  # = the Quantizer's where a weight is < 0
        np.testing.assert_array_equal(gw.scales[g], scale)
        s64 = scale.astype(np.float64)
        q, _ = authors_quantize(blk, s64[:, None], 8.0, 0, 15)
        np.testing.assert_array_equal(codes[rows].T, q)
        neg = blk.min(axis=1) < 0
        np.testing.assert_array_equal(authors_find_params(blk, 4, True)[0][neg],
                                      2 * amax[neg] / 15)
    with pytest.raises(TypeError, match="symmetric"):
        gptq_quantize(w, 128, symmetric=1)


@pytest.mark.parametrize("group", [None, 16, 24])
@pytest.mark.parametrize("bits", [2, 4, 8])
def test_rtn_full_grid_is_gptq_with_a_diagonal_hessian(group, bits):
    rng = np.random.default_rng(bits)
    w = rng.standard_t(5, (8, 64)) * 0.02
    w[0, :] = 0.0
    w[1, :] = np.abs(w[1])
    partial = group == 24
    a = rtn(w, bits, group, partial_last_group=partial, symmetric_grid="full")
    b = gptq(w, np.diag(rng.uniform(0.5, 2.0, 64)), bits, group, partial_last_group=partial,
             symmetric_grid="full")
    for field in ("weight", "codes", "scales", "zeros", "perm", "g_idx"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    bits_of = lambda v: np.ascontiguousarray(v).view(np.int64)  # noqa: E731
    np.testing.assert_array_equal(
        bits_of(rtn_values(w, bits, group, partial_last_group=partial, symmetric_grid="full")),
        bits_of(a.weight))
    # by hand: s = 2 amax / (2^b - 1) per row (or group), codes rint(w / s) in [-2^(b-1), ..]
    g = group or 64
    for k in range(0, 64, g):
        blk = w[:, k:k + g]
        s = 2 * np.abs(blk).max(axis=1) / (2 ** bits - 1)
        s[s == 0] = 1.0
        q = np.clip(np.rint(blk / s[:, None]), -2 ** (bits - 1), 2 ** (bits - 1) - 1)
        np.testing.assert_array_equal(a.codes[:, k:k + g], q)


# --------------------------------------------------------- a group starting inside a batch
@pytest.mark.parametrize("symmetric,grid", [(False, "restricted"), (True, "full")])
def test_in_batch_group_start_numfmt_ignores_blocksize_the_authors_do_not(symmetric, grid):
    # groups of 16 with lazy batches of 64: groups 2-4 of each batch start inside it
    w, h = layer(5, rows=16, cols=128)
    fast = [gptq(w, h, 4, 16, symmetric, True, block_size=b, symmetric_grid=grid)
            for b in (1, 5, 16, 64, 128)]
    for r in fast[1:]:
        if symmetric:  # the full grid's tie may go either way with the order of the updates
            assert_same_but_ties(r, unsigned(fast[0], 4, True), 4, 16)
        else:
            np.testing.assert_array_equal(r.codes, fast[0].codes)
    authors = {b: authors_fasterquant(w, h, 4, symmetric, blocksize=b, groupsize=16,
                                      actorder=True)[1] for b in (16, 64)}
    # at blocksize = groupsize every group starts a batch: the same codes as numfmt's
    if symmetric:
        assert_same_but_ties(fast[0], authors[16], 4, 16)
    else:
        np.testing.assert_array_equal(authors[16], unsigned(fast[0], 4, symmetric))
    # at 64 the group reads weights that miss its batch's earlier updates: other codes
    changed = np.mean(authors[64] != authors[16])
    assert changed > 0.05, changed


# ----------------------------------------------------------------------- static groups
@pytest.mark.parametrize("symmetric,grid,bits", [(True, "full", 4), (False, "restricted", 3),
                                                 (True, "restricted", 4)])
@pytest.mark.parametrize("act_order", [False, True])
def test_static_groups_are_the_authors(symmetric, grid, bits, act_order):
    w, h = layer(6, dead=(11,))
    q, codes = authors_fasterquant(w, h, bits, symmetric, blocksize=128, groupsize=16,
                                   actorder=act_order, static_groups=True,
                                   restricted=grid == "restricted")
    for block_size in (7, 128):  # static groups never read updated weights: any batch
        r = gptq(w, h, bits, 16, symmetric, act_order, block_size=block_size,
                 symmetric_grid=grid, static_groups=True, dead_inputs="zero")
        assert_same(r, q, codes, bits, symmetric)
    np.testing.assert_array_equal(r.g_idx, np.arange(64) // 16)
    # the scales are those of the original groups (after the dead column is zeroed)
    w0 = w.copy()
    w0[:, 11] = 0.0
    expect = rtn(w0, bits, 16, symmetric, symmetric_grid=grid)
    np.testing.assert_array_equal(r.scales, expect.scales)
    np.testing.assert_array_equal(r.zeros, expect.zeros)


def test_static_groups_keep_groups_act_order_regroups():
    w, h = layer(7)
    dynamic = gptq(w, h, 4, 16, act_order=True)
    static = gptq(w, h, 4, 16, act_order=True, static_groups=True)
    np.testing.assert_array_equal(static.perm, dynamic.perm)
    assert not np.array_equal(dynamic.g_idx, np.arange(64) // 16)
    np.testing.assert_array_equal(static.g_idx, np.arange(64) // 16)
    assert not np.array_equal(static.codes, dynamic.codes)


# ----------------------------------------------------------------------- dead inputs
@pytest.mark.parametrize("group,act_order", [(None, False), (None, True), (16, True)])
def test_dead_inputs_round_to_nearest_by_default(group, act_order):
    dead = (3, 17, 40)
    w, h = layer(8, dead=dead)
    r = gptq(w, h, 4, group, False, act_order)
    # the dead columns: round to nearest of their original weights on their group's grid
    s, z = r.scales[:, r.g_idx[list(dead)]], r.zeros[:, r.g_idx[list(dead)]]
    expect = np.clip(np.rint(w[:, dead] / s) + z, 0, 15)
    np.testing.assert_array_equal(r.codes[:, dead], expect)
    assert np.count_nonzero(r.weight[:, dead]) > r.weight[:, dead].size // 2
    if group is None:
        # the other columns are those of the reference, which zeroes the dead ones: a dead
        # input is independent of every other, and the row scales come from the original row
        q, codes = authors_fasterquant(w, h, 4, False, actorder=act_order)
        live = np.setdiff1d(np.arange(64), dead)
        np.testing.assert_allclose(r.weight[:, live], q[:, live], rtol=1e-9, atol=1e-15)
        np.testing.assert_array_equal(r.codes[:, live], codes[:, live])
    zeroed = gptq(w, h, 4, group, False, act_order, dead_inputs="zero")
    np.testing.assert_array_equal(zeroed.weight[:, dead], 0.0)
    assert DEAD_INPUTS == ("round", "zero")


# ------------------------------------------------------------- the readable reference
OPTIONS = [
    {}, {"group_size": 16}, {"group_size": 16, "act_order": True},
    {"symmetric": False, "group_size": 10, "partial_last_group": True, "act_order": True},
    {"symmetric_grid": "full", "group_size": 32, "act_order": True},
    {"symmetric_grid": "full", "act_order": True, "dead_inputs": "zero"},
    {"group_size": 16, "act_order": True, "static_groups": True},
    {"symmetric": False, "group_size": 16, "static_groups": True, "dead_inputs": "zero"},
    {"bits": 2, "group_size": 8, "damp": 0.1}, {"bits": 8, "act_order": True, "damp": 0.0},
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kwargs", OPTIONS, ids=lambda k: ",".join(f"{a}={b}" for a, b in
                                                                  k.items()) or "default")
def test_readable_reference_gives_the_fast_codes(seed, kwargs):
    args = {"bits": 3, **kwargs}
    w, h = layer(10 + seed, rows=12, cols=64, dead=(9,) if seed else ())
    a = gptq(w, h, block_size=24, **args)
    b = gptq_reference(w, h, **args)
    for field in ("zeros", "perm", "g_idx"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    if args.get("symmetric_grid") == "full" and "group_size" in args:
        # a group's first column may sit on the full grid's tie (see assert_same_but_ties)
        assert_same_but_ties(a, unsigned(b, 3, True), 3, args["group_size"])
        return
    np.testing.assert_array_equal(a.codes, b.codes)
    np.testing.assert_allclose(a.scales, b.scales, rtol=1e-12)
    np.testing.assert_allclose(a.weight, b.weight, rtol=1e-12, atol=1e-16)


def test_readable_reference_is_short():
    from numfmt.ptq import gptq_readable
    src = inspect.getsource(gptq_readable.gptq_reference)
    body = src[src.index('"""', src.index('"""') + 3) + 3:]
    code = [ln for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert len(code) <= 40, len(code)


# ----------------------------------------------------------------------- g_idx's bits
def test_g_idx_bits_per_weight():
    # SmolLM2-135M's seven linears of a layer (out, in): q, k, v, o, gate, up, down
    layer_shapes = [(576, 576), (192, 576), (192, 576), (576, 576), (1536, 576), (1536, 576),
                    (576, 1536)]
    sum_in = 576 * 6 + 1536
    sum_weights = 576 * 576 * 2 + 192 * 576 * 2 + 1536 * 576 * 3
    assert g_idx_bits_per_weight(layer_shapes) == 32 * sum_in / sum_weights
    assert round(g_idx_bits_per_weight(layer_shapes), 3) == 0.045
    # one layer: what a packed GPTQWeight's g_idx costs, counted from its bytes
    k, n = 256, 64
    gw = GPTQWeight(np.zeros((k // 8, n), np.int32), np.zeros((2, n), np.float16),
                    np.zeros((2, n // 8), np.int32), np.zeros(k, np.int32), 128)
    assert g_idx_bits_per_weight([(n, k)]) == 8 * gw.g_idx.nbytes / (k * n)
    for bad in ([], [(1, 2, 3)], [(0, 4)]):
        with pytest.raises(ValueError):
            g_idx_bits_per_weight(bad)
    with pytest.raises(TypeError):
        g_idx_bits_per_weight([(2.5, 4)])


# ------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs,match", [
    ({"symmetric_grid": "wide"}, "symmetric_grid must be one of"),
    ({"symmetric_grid": "full", "symmetric": False}, "needs symmetric=True"),
    ({"static_groups": True}, "needs a group_size"),
    ({"dead_inputs": "drop"}, "dead_inputs must be one of"),
])
def test_new_options_bad_input(kwargs, match):
    args = {"weight": np.ones((3, 4)), "hessian": np.eye(4), **kwargs}
    for f in (gptq, gptq_reference):
        with pytest.raises(ValueError, match=match):
            f(**args)
    with pytest.raises(TypeError, match="static_groups"):
        gptq(np.ones((3, 4)), np.eye(4), group_size=2, static_groups=1)
    assert SYMMETRIC_GRIDS == ("restricted", "full")
    # the full grid's lowest level, -16/15 amax at 4 bits, must be a float64 number
    huge = np.full((2, 4), 1.7e308) * np.array([1, -1, 1, -1])
    for f in (rtn, rtn_values, lambda w, **k: gptq(w, np.eye(4), **k)):
        with pytest.raises(ValueError, match="beyond float64's range"):
            f(huge, symmetric_grid="full")
        f(huge)                                        # the restricted grid stays within amax
    if "symmetric_grid" in kwargs:
        with pytest.raises(ValueError, match=match):
            rtn(np.ones((3, 4)), symmetric=kwargs.get("symmetric", True),
                symmetric_grid=kwargs["symmetric_grid"])


# ------------------------------------------------------ a symmetric range on the asymmetric grid
@pytest.mark.parametrize("bits", [3, 4])
def test_a_symmetric_ranges_lower_end_takes_code_0_as_in_quantize_int(bits):
    # A group spanning exactly [-h, h] on the asymmetric grid: its lowest weight's exact
    # quotient is -(2^b - 1) / 2, which rounds half to even to -2^(b-1), code 0 (as
    # numfmt.quantize_int does; test_intquant checks that against Python's round). The float64
    # quotient lands either side with the last bits of h (asserted of this sample below).
    w, h = layer(20 + bits, rows=64)
    rng = np.random.default_rng(bits)
    end = np.abs(w[:, :16]).max(axis=1) * rng.uniform(1.0, 2.0, 64)
    w[:, 0], w[:, 1] = -end, end                       # group 0 of every row is [-end, end]
    qmax = 2 ** bits - 1
    assert set(np.rint(-end / ((end + end) / qmax)).tolist()) == {-(qmax // 2), -(qmax // 2 + 1)}
    # a diagonal Hessian: GPTQ is round-to-nearest, quantize_int's codes throughout
    diag = gptq(w, np.diag(rng.uniform(0.5, 2.0, 64)), bits, 16, symmetric=False)
    expect = quantize_int(w, bits, False, "group", 16)
    np.testing.assert_array_equal(diag.codes, expect.codes)
    assert (diag.codes[:, 0] == 0).all()
    # a full Hessian: column 0 is rounded before any update reaches it; the readable version
    # decides the same
    for kwargs in ({}, {"static_groups": True}, {"block_size": 8}):
        full = gptq(w, h, bits, 16, symmetric=False, **kwargs)
        assert (full.codes[:, 0] == 0).all() and (full.zeros[:, 0] == 2 ** (bits - 1)).all()
        kwargs.pop("block_size", None)
        np.testing.assert_array_equal(
            full.codes, gptq_reference(w, h, bits, 16, symmetric=False, **kwargs).codes)
