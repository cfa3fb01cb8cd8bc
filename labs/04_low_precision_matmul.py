"""Lab 04: low-precision matrix multiplication. Do it after lecture 04.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 04`` (``--lang zh``: in Chinese). ``python -m labs show 04`` prints the
tasks.
"""

import numpy as np


def int8_gemm(a, zero_a, b):
    """Multiply asymmetric uint8 activations by symmetric int8 weights with integers only.

    The activations' real values are scale_a (a - zero_a), the weights' scale_b b. The
    integer part of the product is (a - zero_a) @ b; compute it as a @ b - zero_a * (the
    column sums of b), the zero-point correction that lets the GEMM run on the raw codes.

    Parameters
    ----------
    a : ndarray of uint8, shape (M, K)
    zero_a : int, in [0, 255]
    b : ndarray of int8, shape (K, N)

    Returns
    -------
    ndarray of int32, shape (M, N)

    Source
    ------
    Jacob et al. 2018, "Quantization and Training of Neural Networks for Efficient
    Integer-Arithmetic-Only Inference", section 2.3, equation (7).

    Hints
    -----
    Widen to int32 before multiplying: uint8 @ int8 in numpy wraps around. b.sum(axis=0) is
    a row of N column sums; subtract zero_a times it from every row.
    """
    raise NotImplementedError


def requantize(acc, scale_a, scale_b, scale_out, zero_out):
    """Turn an int32 GEMM accumulator into the next layer's uint8 activations.

    y = acc * scale_a * scale_b (float64, multiplied in this order, scale_b one per column),
    then codes = clamp(round(y / scale_out) + zero_out, 0, 255), rounding half to even.

    Parameters
    ----------
    acc : ndarray of int32, shape (M, N)
    scale_a : float, the activations' scale
    scale_b : ndarray of float64, shape (N,), the weights' per-output-channel scales
    scale_out, zero_out : float and int, the output's scale and zero point

    Returns
    -------
    ndarray of int64, shape (M, N), in [0, 255]

    Source
    ------
    Jacob et al. 2018, section 2.2; numfmt.quantize_affine.

    Hints
    -----
    The order of the float multiplications decides the last bit of y, and at a tie, the code.
    np.round rounds half to even.
    """
    raise NotImplementedError
