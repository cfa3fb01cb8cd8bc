"""LLM.int8(): a matrix product in INT8 except for the few input channels with outliers.

Activations of large transformers have a handful of feature dimensions with magnitudes far
above the rest (above 6 in the paper's models). Quantizing a token's row with one absmax scale
would let those channels crush every other value to a few codes. LLM.int8() splits the product
by input channel: the channels where any |x| exceeds the threshold are multiplied in floating
point; the rest in INT8 with one absmax scale per token (row of x) and per output channel (row
of W), accumulated exactly in integers.

References
----------
Dettmers, Lewis, Belkada and Zettlemoyer, "LLM.int8(): 8-bit Matrix Multiplication for
Transformers at Scale", NeurIPS 2022 (arXiv 2208.07339), section 3 (vector-wise quantization,
mixed-precision decomposition, threshold 6.0).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from numfmt._validate import check_real_scalar
from numfmt.intquant import quantize_int

from ._checks import as_inputs, as_matrix

__all__ = ["LLMInt8Result", "llm_int8_matmul"]


class LLMInt8Result(NamedTuple):
    """Result of :func:`llm_int8_matmul`."""

    output: np.ndarray    #: float64 (..., out): the product
    outliers: np.ndarray  #: bool (in,): the input channels multiplied in floating point


def llm_int8_matmul(x, w, threshold: float = 6.0) -> LLMInt8Result:
    """``x @ w.T`` by LLM.int8()'s decomposition.

    Parameters
    ----------
    x : array_like of float, shape (..., in), finite
    w : array_like of float, shape (out, in), finite (as ``torch.nn.Linear.weight``)
    threshold : float > 0, default 6.0 (the paper's)
        Input channels with any ``|x| > threshold`` go to the floating-point product; ``inf``
        puts none there (plain vector-wise INT8).

    Returns
    -------
    LLMInt8Result
        ``output`` float64 (..., out) and ``outliers`` bool (in,). The INT8 part is
        ``(qx @ qw.T) * s_x * s_w.T`` with ``qx, s_x = quantize_int(x_rest, 8, granularity=
        "channel")`` (per token) and likewise per output row of ``w_rest``; the integer product
        is exact (computed in float64, exact for ``in < 2^53 / 127^2``, about 5.6e11).

    Notes
    -----
    This is the paper's decomposition (section 3.2). bitsandbytes (``bnb.matmul`` with
    ``threshold=6.0``) differs in four ways, so its outputs are not these bit for bit, nor
    equal in error: it quantizes each row of W over *all*
    columns, outlier columns included; it multiplies the outlier part by those
    INT8-dequantized weight columns, not the original ones; it takes each token's absmax with
    only the outlier *elements* zeroed, so the smaller values of an outlier column still set
    the scale; and it puts a channel in float at ``|x| >= threshold`` where this puts it at
    ``|x| > threshold``.

    Raises
    ------
    TypeError
        If an array is not real-valued or ``threshold`` is not a real number.
    ValueError
        If the shapes do not match, an input is empty or non-finite, ``threshold`` is not
        positive (NaN included), or the product is beyond float64's range.
    """
    w = as_matrix(w, "w")                                 # (out, in)
    lead = np.shape(x)[:-1]
    xs = as_inputs(x, w.shape[1])                         # (n, in)
    threshold = check_real_scalar(threshold, "threshold")
    if not threshold > 0:
        raise ValueError(f"threshold must be positive, got {threshold!r}")
    outliers = (np.abs(xs) > threshold).any(axis=0)       # (in,)
    with np.errstate(over="ignore", invalid="ignore"):
        y = xs[:, outliers] @ w[:, outliers].T            # (n, out) in float
    rest = ~outliers
    if rest.any():
        _, qx, sx, _ = quantize_int(xs[:, rest], 8, granularity="channel")   # sx (n, 1)
        _, qw, sw, _ = quantize_int(w[:, rest], 8, granularity="channel")    # sw (out, 1)
        # codes are integers of magnitude <= 127, so every partial sum of the product is an
        # integer below 127^2 * in < 2^53: the float64 BLAS product is the exact integer one
        with np.errstate(over="ignore", invalid="ignore"):
            y = y + (qx.astype(np.float64) @ qw.T.astype(np.float64)) * sx * sw.T
    if not np.isfinite(y).all():
        raise ValueError(f"x @ w.T is beyond float64's range (max |x| = {np.abs(xs).max():.3g}, "
                         f"max |w| = {np.abs(w).max():.3g}): scale x or w down first")
    return LLMInt8Result(y.reshape(lead + (w.shape[0],)), outliers)
