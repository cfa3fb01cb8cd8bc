"""The GPTQ INT4 checkpoint layout, and the act-order row permutation.

A GPTQ linear layer with K inputs and N outputs stores (y = x @ W, W is K x N):

* ``qweight``: int32, shape (K/8, N). Word [i, n] holds the codes of rows
  8i .. 8i+7 of column n, row 8i in the least significant nibble. So codes
  [1, 2, ..., 8] down one column pack to 0x87654321.
* ``scales``: float16, shape (K/g, N), one per group of g rows and column.
* ``qzeros``: int32, shape (K/g, N/8), the 4-bit zero points packed eight per
  word along N, least significant first.
* ``g_idx``: int32, shape (K,), the group of each row.

A weight is ``scales[g_idx[k], n] * (q[k, n] - z[g_idx[k], n])``.

With act-order (``desc_act``), GPTQ quantizes rows in order of decreasing
Hessian diagonal, so groups are made of rows scattered over K: ``g_idx`` is no
longer ``k // g``. A kernel wants each group's rows contiguous, so it sorts the
rows by ``g_idx`` once at load time and permutes the activations the same way.

Zero points are stored as they are. Original GPTQ ("v1") checkpoints store
``zero - 1`` and add 1 back when loading, which turns a zero point of 0 into 15
+ 1 = 16 unless the reader masks it; storing the zero point itself avoids that
trap (it is what the "gptq_v2" checkpoint format does).

Symmetric checkpoints (the authors' and AutoGPTQ's ``sym=True``, most published
ones) use all 16 codes with scale 2 amax / 15 and every zero point 8: the ``uint4b8``
codes GPTQ-Marlin reads (:func:`gptq_quantize` with ``symmetric=True``).

This module rounds to nearest (RTN) within each group: it is about storage. The GPTQ
algorithm itself (error-compensating updates with the inverse Hessian) is
:func:`numfmt.ptq.gptq`; its 4-bit asymmetric ``codes.T``, ``scales.T``,
``zeros.T`` and ``g_idx`` fill this layout unchanged (tests/test_ptq.py), and so do
its ``symmetric_grid="full"`` codes plus 8 with zero points 8
(tests/test_gptq_reference.py).
"""

from dataclasses import dataclass

import numpy as np

from numfmt._validate import check_bool, check_fits_storage, check_int

from ._checks import as_float_array, as_int_array, check_int32, check_ndim, check_range

__all__ = [
    "GPTQWeight",
    "gptq_pack_qweight", "gptq_unpack_qweight",
    "gptq_pack_qzeros", "gptq_unpack_qzeros",
    "gptq_quantize", "gptq_dequantize",
    "act_order_permutation", "group_index", "kernel_row_order",
    "inverse_permutation", "permute_qweight_rows",
]


def _pack_words(codes):
    """Pack (..., 8m) codes in [0, 15] into (..., m) int32 words, element 0 lowest."""
    lanes = codes.reshape(codes.shape[:-1] + (-1, 8)).astype(np.uint32)
    words = np.zeros(lanes.shape[:-1], np.uint32)
    for lane in range(8):
        words |= lanes[..., lane] << np.uint32(4 * lane)
    return words.view(np.int32)


def _unpack_words(words):
    """Unpack (..., m) uint32 words into (..., 8m) uint8 codes, element 0 lowest."""
    shifts = np.arange(8, dtype=np.uint32) * np.uint32(4)
    codes = (words[..., None] >> shifts) & np.uint32(0xF)
    return codes.reshape(words.shape[:-1] + (-1,)).astype(np.uint8)


def gptq_pack_qweight(codes):
    """Pack 4-bit codes (K, N) into the GPTQ ``qweight`` (K/8, N) int32.

    Parameters
    ----------
    codes : array_like of int, shape (K, N)
        Unsigned codes in [0, 15]; K a multiple of 8.

    Returns
    -------
    numpy.ndarray of int32, shape (K // 8, N)
        Word [i, n] = sum_j codes[8i + j, n] << 4j (two's-complement int32).

    Raises
    ------
    TypeError
        If ``codes`` is not an integer array.
    ValueError
        If ``codes`` is not 2-D, K is not a multiple of 8, or a code is outside [0, 15].

    References
    ----------
    AutoGPTQ / GPTQ-for-LLaMa ``QuantLinear.pack``; vLLM ``gptq_marlin_repack``
    input layout.
    """
    arr = as_int_array(codes)
    check_ndim(arr, 2, "codes")
    if arr.shape[0] % 8:
        raise ValueError(f"K = {arr.shape[0]} rows must be a multiple of 8 "
                         "to pack 8 codes per word")
    check_range(arr, 0, 15)
    return np.ascontiguousarray(_pack_words(arr.T).T)


def gptq_unpack_qweight(qweight):
    """Unpack a GPTQ ``qweight`` (K/8, N) int32 into codes (K, N) uint8 in [0, 15].

    Raises
    ------
    TypeError
        If ``qweight`` is not int32.
    ValueError
        If ``qweight`` is not 2-D.
    """
    words = check_int32(qweight, "qweight")
    check_ndim(words, 2, "qweight")
    return np.ascontiguousarray(_unpack_words(words.T).T)


def gptq_pack_qzeros(zeros):
    """Pack 4-bit zero points (G, N) into the GPTQ ``qzeros`` (G, N/8) int32.

    Packed along N, eight per word, column 8j in the least significant nibble.
    A zero point is stored as itself (no GPTQ-v1 ``-1`` offset).

    Parameters
    ----------
    zeros : array_like of int, shape (G, N)
        Zero points in [0, 15]; N a multiple of 8.

    Returns
    -------
    numpy.ndarray of int32, shape (G, N // 8)

    Raises
    ------
    TypeError
        If ``zeros`` is not an integer array.
    ValueError
        If ``zeros`` is not 2-D, N is not a multiple of 8, or a value is outside [0, 15].
    """
    arr = as_int_array(zeros, "zeros")
    check_ndim(arr, 2, "zeros")
    if arr.shape[1] % 8:
        raise ValueError(f"N = {arr.shape[1]} columns must be a multiple of 8 "
                         "to pack 8 zero points per word")
    check_range(arr, 0, 15, "zeros")
    return _pack_words(arr)


def gptq_unpack_qzeros(qzeros):
    """Unpack GPTQ ``qzeros`` (G, N/8) int32 into zero points (G, N) uint8 in [0, 15].

    Raises
    ------
    TypeError
        If ``qzeros`` is not int32.
    ValueError
        If ``qzeros`` is not 2-D.
    """
    words = check_int32(qzeros, "qzeros")
    check_ndim(words, 2, "qzeros")
    return _unpack_words(words)


@dataclass(frozen=True)
class GPTQWeight:
    """A 4-bit GPTQ linear weight in checkpoint layout.

    Attributes
    ----------
    qweight : int32 (K/8, N)
    scales : float16 (K/g, N)
    qzeros : int32 (K/g, N/8)
    g_idx : int32 (K,)
    group_size : int
    """

    qweight: np.ndarray
    scales: np.ndarray
    qzeros: np.ndarray
    g_idx: np.ndarray
    group_size: int

    @property
    def shape(self):
        """(K, N) of the logical weight."""
        return (self.qweight.shape[0] * 8, self.qweight.shape[1])

    @property
    def nbytes(self):
        """Bytes stored: qweight + scales + qzeros + g_idx."""
        return self.qweight.nbytes + self.scales.nbytes + self.qzeros.nbytes + self.g_idx.nbytes

    @property
    def bits_per_weight(self):
        """Bits paid per logical weight, everything stored included."""
        k, n = self.shape
        return 8 * self.nbytes / (k * n)


def _check_permutation(perm, k):
    arr = as_int_array(perm, "perm")
    check_ndim(arr, 1, "perm")
    if arr.shape[0] != k or not np.array_equal(np.sort(arr), np.arange(k)):
        raise ValueError(f"perm must be a permutation of range({k}), got length {arr.shape[0]}")
    return arr


def act_order_permutation(hessian_diag):
    """Row order of GPTQ act-order: decreasing Hessian diagonal.

    Parameters
    ----------
    hessian_diag : array_like of float, shape (K,)
        diag(2 X^T X), the summed squared activations of each input feature.

    Returns
    -------
    numpy.ndarray of int64, shape (K,)
        ``perm[i]`` is the i-th row to quantize. Ties keep the original order.

    Raises
    ------
    TypeError, ValueError
        If the input is not a finite real 1-D array.

    References
    ----------
    The ``--act-order`` option of the GPTQ authors' repository, github.com/IST-DASLab/gptq
    (``perm = argsort(diag(H), descending=True)``; AutoGPTQ's ``desc_act``): a heuristic
    of the code, not of the paper (Frantar et al. 2023, whose section 3 finds the order of
    the columns barely matters on large models).
    """
    h = as_float_array(hessian_diag, "hessian_diag")
    check_ndim(h, 1, "hessian_diag")
    return np.argsort(-h, kind="stable")


def group_index(perm, group_size):
    """Group of each row, ``g_idx``, when rows are quantized in ``perm`` order.

    Parameters
    ----------
    perm : array_like of int, shape (K,)
        Quantization order (``numpy.arange(K)`` without act-order).
    group_size : int
        Rows per group g; K must be a multiple of g.

    Returns
    -------
    numpy.ndarray of int32, shape (K,)
        ``g_idx[perm[i]] = i // group_size``.

    Raises
    ------
    ValueError
        If ``perm`` is not a permutation or K is not a multiple of ``group_size``.
    """
    k = len(np.asarray(perm))
    perm = _check_permutation(perm, k)
    group_size = check_int(group_size, "group_size")
    if group_size <= 0 or k % group_size:
        raise ValueError(f"K = {k} must be a positive multiple of group_size = {group_size}")
    g_idx = np.empty(k, np.int32)
    g_idx[perm] = np.arange(k) // group_size
    return g_idx


def kernel_row_order(g_idx):
    """The permutation a kernel applies so that each group's rows are contiguous.

    Parameters
    ----------
    g_idx : array_like of int, shape (K,)

    Returns
    -------
    numpy.ndarray of int64, shape (K,)
        A stable ``argsort(g_idx)``: row i of the sorted weight is row
        ``order[i]`` of the checkpoint; activations are gathered as ``x[:, order]``.

    Raises
    ------
    TypeError, ValueError
        If ``g_idx`` is not a 1-D integer array.

    References
    ----------
    vLLM ``marlin_sort_g_idx`` (``torch.argsort(g_idx)``).
    """
    arr = as_int_array(g_idx, "g_idx")
    check_ndim(arr, 1, "g_idx")
    return np.argsort(arr, kind="stable")


def inverse_permutation(perm):
    """Inverse of a permutation: ``inv[perm[i]] = i``.

    Parameters
    ----------
    perm : array_like of int, shape (K,)

    Returns
    -------
    numpy.ndarray of int64, shape (K,)

    Raises
    ------
    ValueError
        If ``perm`` is not a permutation of range(K).
    """
    perm = _check_permutation(perm, len(np.asarray(perm)))
    inv = np.empty_like(perm)
    inv[perm] = np.arange(len(perm))
    return inv


def permute_qweight_rows(qweight, perm):
    """Reorder the K logical rows of a packed GPTQ ``qweight``.

    Parameters
    ----------
    qweight : numpy.ndarray of int32, shape (K/8, N)
    perm : array_like of int, shape (K,)
        Row i of the result is row ``perm[i]`` of the input.

    Returns
    -------
    numpy.ndarray of int32, shape (K/8, N)

    Raises
    ------
    TypeError
        If ``qweight`` is not int32.
    ValueError
        If ``perm`` is not a permutation of range(K).

    References
    ----------
    vLLM GPTQ-Marlin act-order handling (rows sorted by ``g_idx`` before repacking).
    """
    codes = gptq_unpack_qweight(qweight)
    perm = _check_permutation(perm, codes.shape[0])
    return gptq_pack_qweight(codes[perm])


def gptq_quantize(weight, group_size=128, perm=None, symmetric=False):
    """Quantize a weight (K, N) to 4-bit GPTQ storage, rounding to nearest.

    Per group of ``group_size`` rows and per column, with the scale rounded to
    float16 first (as stored) and q = clip(round(w / scale) + zero, 0, 15):

    * asymmetric (min-max): scale = (max - min) / 15, zero = round(-min / scale)
      clipped to [0, 15]. The range is widened to include 0, so a zero weight is exact.
    * symmetric: scale = 2 amax / 15 and zero = 8, all 16 codes: the grid of the
      GPTQ authors' ``Quantizer(sym=True)`` and AutoGPTQ's default ``sym=True``, so
      of most published GPTQ checkpoints, and the ``uint4b8`` codes (unsigned, bias
      8) GPTQ-Marlin reads. Weights are then (q - 8) * scale, from -16/15 amax up to
      14/15 amax; a group's largest positive weight is clipped to 14/15 of itself.
      (:func:`numfmt.ptq.gptq` calls this grid ``symmetric_grid="full"``.)

    Parameters
    ----------
    weight : array_like of float, shape (K, N)
        K a multiple of ``group_size`` and of 8; N a multiple of 8.
    group_size : int, default 128
    perm : array_like of int, shape (K,), optional
        Act-order quantization order (see :func:`act_order_permutation`). The
        rows stay in their original order in ``qweight``; ``g_idx`` records the groups.
    symmetric : bool, default False
        The symmetric grid above (zero points all 8) instead of min-max.

    Returns
    -------
    GPTQWeight

    Raises
    ------
    TypeError
        If ``weight`` is not a real array.
    ValueError
        If ``weight`` is not 2-D, has non-finite values, or the sizes do not divide; or a
        group's scale does not fit float16: above 65504 it would be Inf, below 2**-25 it
        would flush to 0 and the group decode to zeros, and below 2**-14 (float16's
        subnormals) it would keep fewer bits and the whole group decode off by up to 50 %.
        Such weights are refused, not stored.
    TypeError
        If ``group_size`` is not an integer or ``symmetric`` not a bool.

    References
    ----------
    IST-DASLab/gptq ``quant.py`` (``Quantizer.find_params``); AutoGPTQ
    ``QuantLinear.pack``; vLLM ``scalar_types.uint4b8`` (GPTQ-Marlin).
    """
    symmetric = check_bool(symmetric, "symmetric")
    w = as_float_array(weight, "weight")
    check_ndim(w, 2, "weight")
    k, n = w.shape
    if w.size == 0:
        raise ValueError(f"weight is empty (shape {w.shape}): there is nothing to quantize")
    group_size = check_int(group_size, "group_size")
    if group_size <= 0 or k % group_size or k % 8:
        raise ValueError(f"K = {k} must be a multiple of 8 and of group_size = {group_size}")
    if n % 8:
        raise ValueError(f"N = {n} must be a multiple of 8")
    perm = np.arange(k) if perm is None else _check_permutation(perm, k)
    g_idx = group_index(perm, group_size)
    order = kernel_row_order(g_idx)
    grouped = w[order].reshape(k // group_size, group_size, n)          # (G, g, N)
    lo = np.minimum(grouped.min(axis=1), 0.0)
    hi = np.maximum(grouped.max(axis=1), 0.0)
    if symmetric:
        lo = np.minimum(lo, -hi)
        hi = -lo
    with np.errstate(over="ignore"):  # a width past float64 is Inf and refused below
        ideal = (hi - lo) / 15
    check_fits_storage(ideal, np.float16, "the float16 group scale (max - min) / 15 =",
                       "GPTQ stores scales in float16: scale the weight into range first")
    scale = ideal.astype(np.float16)                                    # (G, N)
    safe = np.where(scale > 0, scale.astype(np.float64), 1.0)
    if symmetric:
        zero = np.full(scale.shape, 8, np.int64)
    else:
        zero = np.clip(np.round(-lo / safe), 0, 15).astype(np.int64)
    q_sorted = np.clip(np.round(grouped / safe[:, None, :]) + zero[:, None, :], 0, 15)
    codes = np.empty((k, n), np.int64)
    codes[order] = q_sorted.reshape(k, n)
    return GPTQWeight(gptq_pack_qweight(codes), scale, gptq_pack_qzeros(zero), g_idx, group_size)


def gptq_dequantize(gw):
    """Weights (K, N) float64 of a :class:`GPTQWeight`: ``scales[g] * (q - zeros[g])``.

    Raises
    ------
    TypeError
        If ``gw`` is not a GPTQWeight, its scales are not float16 or g_idx not integers.
    ValueError
        If its fields disagree: scales not (G, N) with G matching qzeros, non-finite or
        negative scales, g_idx not of length K or outside [0, G - 1].
    """
    if not isinstance(gw, GPTQWeight):
        raise TypeError(f"expected a GPTQWeight, got {type(gw).__name__}")
    q = gptq_unpack_qweight(gw.qweight).astype(np.float64)             # (K, N)
    zeros = gptq_unpack_qzeros(gw.qzeros).astype(np.float64)            # (G, N)
    scales, g_idx = _check_gptq_fields(gw, q.shape, zeros.shape)
    return scales[g_idx] * (q - zeros[g_idx])


def _check_gptq_fields(gw, qshape, zshape):
    """``gw``'s scales (float64) and g_idx (int64), checked against each other and against
    qweight's (K, N) and qzeros' (G, N): a hand-built GPTQWeight is trusted in no field."""
    k, n = qshape
    scales = np.asarray(gw.scales)
    if scales.dtype != np.float16:
        raise TypeError(f"scales must be float16 (GPTQ's storage), got dtype {scales.dtype}")
    if scales.ndim != 2 or scales.shape[1] != n or scales.shape[0] == 0:
        raise ValueError(f"scales must have shape (groups, N = {n}), got {scales.shape}")
    if zshape != scales.shape:
        raise ValueError(f"qzeros unpack to shape {zshape}, but scales have shape "
                         f"{scales.shape}: one zero point per scale")
    if not np.isfinite(scales).all() or (scales < 0).any():
        raise ValueError("scales must be finite and non-negative")
    g_idx = as_int_array(gw.g_idx, "g_idx")
    if g_idx.shape != (k,):
        raise ValueError(f"g_idx must have shape (K,) = ({k},), got {g_idx.shape}")
    check_range(g_idx, 0, scales.shape[0] - 1, "g_idx")
    return scales.astype(np.float64), g_idx
