"""Lab 05: quantization basics. Do it after lecture 05.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 05`` (``--lang zh``: in Chinese). ``python -m labs show 05`` prints the
tasks. You may use numfmt's element rounding (``numfmt.FP8_E4M3.round``), which lab 02 builds.
"""

import numpy as np


def quantize_affine(x, scale, zero_point, qmin, qmax):
    """Return the integer codes clamp(round(x / scale) + zero_point, qmin, qmax).

    Round half to even (IEEE 754 round-to-nearest-even): 0.5 -> 0, 1.5 -> 2, -2.5 -> -2.

    Parameters
    ----------
    x : ndarray of float64, any shape
    scale : float, positive
    zero_point : int, in [qmin, qmax]
    qmin, qmax : int, the code range (e.g. -128 and 127, or 0 and 255)

    Returns
    -------
    ndarray of int64, the shape of x

    Source
    ------
    Jacob et al. 2018, "Quantization and Training of Neural Networks for Efficient
    Integer-Arithmetic-Only Inference", section 2.1.

    Hints
    -----
    np.round rounds half to even; np.floor(v + 0.5) does not. Round before adding the zero
    point, clamp after.
    """
    raise NotImplementedError


def quantize_groups(x, bits, group):
    """Quantize each group of `group` consecutive values of a row to symmetric `bits`-bit codes.

    Each group has its own scale = amax * (1 / qmax), where amax is the group's largest |x|
    and qmax = 2^(bits-1) - 1 (the restricted range [-qmax, qmax]); an all-zero group gets
    scale 1. The codes are round(x / scale), half to even.

    Parameters
    ----------
    x : ndarray of float64, shape (rows, K), K a multiple of group
    bits : int, 2 to 8
    group : int, the group size

    Returns
    -------
    (codes, scales) : codes int64 of shape (rows, K); scales float64 of shape (rows, K // group)

    Source
    ------
    numfmt.quantize_int(x, bits, granularity="group", group=group), which computes the scale
    as amax * (1 / qmax) (one multiplication: the bits of the scale depend on it).

    Hints
    -----
    x.reshape(rows, K // group, group) puts each group on the last axis. Keep the scales'
    group axis with keepdims=True while dividing, and drop it when you return them. A scale
    one ulp off comes from amax / qmax: write amax * (1 / qmax).
    """
    raise NotImplementedError


def sqnr_db(q, x):
    """Return the signal-to-quantization-noise ratio 10 log10(sum x^2 / sum (q - x)^2), in dB.

    Parameters
    ----------
    q, x : ndarray of float64, the same shape; q is the quantized x, q != x somewhere

    Returns
    -------
    float, in dB (graded within 1e-9 relative)

    Source
    ------
    numfmt.sqnr_db; each extra bit of a uniform quantizer adds 20 log10 2 = 6.02 dB.

    Hints
    -----
    Sum x^2 and (q - x)^2 over all elements first, then take the ratio of the two sums (not
    the mean of per-element ratios). np.log10 gives the logarithm.
    """
    raise NotImplementedError


def mx_scale_exponent(amax, emax, max_value, rule):
    """Return the exponent of the E8M0 block scale 2^e for block maxima `amax`.

    rule "floor" (OCP MX v1.0, section 6.3): e = floor(log2 amax) - emax; the block's maximum
    lands in [2^emax, 2^(emax+1)) and values above max_value saturate. rule "rceil" (NVIDIA's
    MXFP8 recipe, cuBLAS): e = ceil(log2 d) with d computed in float32 as
    float32(amax) * float32(1 / max_value): the smallest power of two that keeps the maximum
    within max_value. Clamp e to [-127, 127] either way.

    Parameters
    ----------
    amax : ndarray of float64, positive (the blocks' largest |x|)
    emax : int, the element format's largest exponent (E4M3: 8, E2M1: 2)
    max_value : float, the element format's largest value (E4M3: 448, E2M1: 6)
    rule : "floor" or "rceil"

    Returns
    -------
    ndarray of int64, the shape of amax

    Source
    ------
    OCP Microscaling Formats (MX) v1.0, section 6.3; Mishra et al. 2025, "Recipes for
    Pre-training LLMs with MXFP8", arXiv:2506.08027.

    Hints
    -----
    np.frexp(v) gives v = m 2^k with m in [0.5, 1): floor(log2 v) is k - 1, and ceil(log2 v)
    is k - 1 unless m > 0.5. np.log2 rounds: it is wrong just below a power of two.
    """
    raise NotImplementedError


def nvfp4_scales(x):
    """Return NVFP4's two levels of scales for x: the FP32 tensor scale and the E4M3 block scales.

    tensor_scale = float32(amax(x) / (6 * 448)), amax(x) the largest |x| of the tensor. Each
    block of 16 consecutive values of a row has the scale E4M3(block_amax / 6 / tensor_scale),
    rounded to nearest even in E4M3 (numfmt.FP8_E4M3.round); the block is stored as E2M1
    elements of x / (scale * tensor_scale).

    Parameters
    ----------
    x : ndarray of float64, shape (rows, K), K a multiple of 16, not all zero

    Returns
    -------
    (tensor_scale, scales) : a float, and float64 of shape (rows, K // 16)

    Source
    ------
    NVIDIA, "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference", 2025;
    Transformer Engine's NVFP4 recipe; numfmt.nvfp4_quantize.

    Hints
    -----
    float(np.float32(v)) rounds a float64 to float32. Divide in the stated order: block_amax
    / 6, then / tensor_scale.
    """
    raise NotImplementedError
