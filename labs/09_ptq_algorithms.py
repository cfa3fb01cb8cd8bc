"""Lab 09: post-training quantization algorithms. Do it after lecture 09.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 09`` (``--lang zh``: in Chinese). ``python -m labs show 09`` prints the
tasks. The checks use small synthetic layers: no model is loaded.
"""

import numpy as np


def smoothquant_scales(act_absmax, weight_absmax, alpha):
    """Return SmoothQuant's per-input-channel scales s_j = max|X_j|^alpha / max|W_j|^(1-alpha).

    Dividing the activations by s and multiplying the weights' columns by s leaves the
    product unchanged and moves part of the activations' outliers into the weights. A channel
    whose activation or weight maximum is 0 gets s = 1.

    Parameters
    ----------
    act_absmax, weight_absmax : ndarray of float64, shape (in,), >= 0
    alpha : float in [0, 1], the migration strength

    Returns
    -------
    ndarray of float64, shape (in,)

    Source
    ------
    Xiao et al. 2023, "SmoothQuant", equation (4); numfmt.ptq.smoothquant_scales.

    Hints
    -----
    Compute a ** alpha / w ** (1 - alpha) where both are positive and leave 1 elsewhere.
    """
    raise NotImplementedError


def awq_search(weight, x, quantize, grid):
    """Search AWQ's activation-aware scales: return the best alpha and its scales s.

    act_j = mean over tokens of |x_j|. For alpha = k / grid, k = 0 .. grid-1: s =
    max(act^alpha, 1e-4) elementwise, then s = s / sqrt(max(s) min(s)); the quantized weight
    is quantize(weight * s) / s and its error is mean((x @ (w_q - weight).T)^2). Keep the first
    alpha with the smallest error (k = 0, plain rounding, wins ties).

    Parameters
    ----------
    weight : ndarray of float64, shape (out, in)
    x : ndarray of float64, shape (n, in), calibration inputs
    quantize : callable, w -> the dequantized quantized w (same shape)
    grid : int

    Returns
    -------
    (alpha, s) : a float and float64 of shape (in,) (graded within 1e-12 relative)

    Source
    ------
    Lin et al. 2024, "AWQ", section 3.2 and the authors' _search_module_scale;
    numfmt.ptq.awq_search.

    Hints
    -----
    weight * s scales the columns (s broadcasts over the rows). Compare errors with < so that
    a later alpha must be strictly better.
    """
    raise NotImplementedError


def gptq_codes(weight, u, scale, qmax):
    """Quantize a layer's weights column by column with GPTQ's error feedback; return the codes.

    For each column j in order: q = clamp(round(W[:, j] / scale), -qmax, qmax) (half to even);
    E = (W[:, j] - q * scale) / u[j, j]; then W[:, j:] -= outer(E, u[j, j:]), moving the
    rounding error onto the columns not yet quantized. u is the upper Cholesky factor of the
    damped inverse Hessian (H^-1 = u^T u). Work on a copy of weight.

    Parameters
    ----------
    weight : ndarray of float64, shape (out, in)
    u : ndarray of float64, shape (in, in), upper triangular
    scale : ndarray of float64, shape (out,), one per row
    qmax : int, the largest code (4 bits: 7)

    Returns
    -------
    ndarray of int64, shape (out, in)

    Source
    ------
    Frantar et al. 2023, "GPTQ", Algorithm 1 (a batch of one column);
    numfmt.ptq.gptq_readable.

    Hints
    -----
    np.outer(E, u[j, j:]) has shape (out, in - j). Subtract it in place, and use the updated
    W[:, j] (not the original column) to round column j.
    """
    raise NotImplementedError
