"""Lab 10: low-precision training. Do it after lecture 10.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 10`` (``--lang zh``: in Chinese). ``python -m labs show 10`` prints the
tasks. You may use numfmt's element rounding (``numfmt.FP8_E4M3.round``), which lab 02 builds.
"""

import numpy as np

import numfmt


def update_loss_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                      growth_interval):
    """One step of a dynamic loss scaler: return the new (scale, growth_tracker).

    If the step's gradients held an Inf or NaN (found_inf), the step is skipped: scale =
    scale * backoff_factor and the tracker restarts at 0. Otherwise the tracker counts one
    more good step; when it reaches growth_interval, scale = scale * growth_factor (kept only
    if finite) and the tracker restarts at 0. The scale is a float32: each product is taken
    in float64 and rounded to float32, as PyTorch's kernel does.

    Parameters
    ----------
    scale : float (a float32 value)
    growth_tracker : int, good steps since the last change
    found_inf : bool
    growth_factor, backoff_factor : float (PyTorch's defaults: 2.0 and 0.5)
    growth_interval : int (PyTorch's default: 2000)

    Returns
    -------
    (scale, growth_tracker) : a float (a float32 value) and an int

    Source
    ------
    Micikevicius et al. 2018, "Mixed Precision Training", section 3.2; PyTorch's
    torch.amp.GradScaler.update (torch._amp_update_scale_).

    Hints
    -----
    float(np.float32(scale * growth_factor)) rounds the float64 product to float32. A product
    beyond float32's range rounds to inf: keep the old scale then.
    """
    raise NotImplementedError


def rht(x, signs):
    """Apply the random Hadamard transform to each row of x: y = (x * signs) H / sqrt(n).

    H is the n x n Sylvester Hadamard matrix (H_1 = [1], H_2n = [[H_n, H_n], [H_n, -H_n]]) and
    signs a row of +-1 drawn once: flipping the signs first, then mixing, spreads an outlier
    over the whole row, so that a block scale fits the row's values better.

    Parameters
    ----------
    x : ndarray of float64, shape (rows, n), n a power of two
    signs : ndarray of float64, shape (n,), each +1 or -1

    Returns
    -------
    ndarray of float64, shape (rows, n) (graded within 1e-12 relative, 1e-12 absolute)

    Source
    ------
    Tseng et al. 2024, "QuIP#", section 3; NVIDIA Transformer Engine's NVFP4 recipe (RHT of
    the wgrad GEMM's inputs, 16 x 16).

    Hints
    -----
    Build H by the recursion with np.block, starting from np.ones((1, 1)). H / sqrt(n) is
    orthogonal: the transform keeps each row's norm.
    """
    raise NotImplementedError


def blockwise_fp8(x, block):
    """Quantize x to E4M3 with one scale per `block` consecutive values of a row.

    scale = amax / 448 (float64; amax the block's largest |x|; an all-zero block gets scale 1),
    values = E4M3(x / scale) * scale, rounding to nearest even.

    Parameters
    ----------
    x : ndarray of float64, shape (rows, K), K a multiple of block
    block : int (DeepSeek-V3: 1 x 128 tiles for activations)

    Returns
    -------
    (values, scales) : float64 of shape (rows, K) and of shape (rows, K // block)

    Source
    ------
    DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", section 3.3.1; numfmt.block_quantize(x,
    FP8_E4M3, block, scale_format="exact").

    Hints
    -----
    Reshape to (rows, K // block, block), keep the block axis while dividing, and reshape
    back. numfmt.FP8_E4M3.round(v) rounds and saturates.
    """
    raise NotImplementedError
