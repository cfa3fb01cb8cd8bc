"""Lab 05 reference solutions. SPOILER: do the lab first (labs/05_quantization_basics.py)."""

import numpy as np

import numfmt


def quantize_affine(x, scale, zero_point, qmin, qmax):
    q = np.round(x / scale) + zero_point            # np.round: half to even
    return np.clip(q, qmin, qmax).astype(np.int64)


def quantize_groups(x, bits, group):
    rows, k = x.shape
    qmax = 2 ** (bits - 1) - 1
    xg = x.reshape(rows, k // group, group)                 # (rows, groups, group)
    amax = np.abs(xg).max(axis=-1, keepdims=True)           # (rows, groups, 1)
    scale = amax * (1 / qmax)
    scale = np.where(scale == 0, 1.0, scale)
    codes = np.round(xg / scale).astype(np.int64)
    return codes.reshape(rows, k), scale[..., 0]


def sqnr_db(q, x):
    return 10 * np.log10(np.sum(x ** 2) / np.sum((q - x) ** 2))


def mx_scale_exponent(amax, emax, max_value, rule):
    if rule == "floor":
        _, k = np.frexp(amax)
        e = (k - 1) - emax                                  # floor(log2 amax) - emax
    else:
        d = np.float32(amax) * np.float32(1 / max_value)    # the FP32 product
        m, k = np.frexp(d)
        e = np.where(m > 0.5, k, k - 1)                     # ceil(log2 d), exact
    return np.clip(e, -127, 127).astype(np.int64)


def nvfp4_scales(x):
    rows, k = x.shape
    tensor_scale = float(np.float32(np.abs(x).max() / (6 * 448)))
    block_amax = np.abs(x.reshape(rows, k // 16, 16)).max(axis=-1)    # (rows, blocks)
    return tensor_scale, numfmt.FP8_E4M3.round(block_amax / 6 / tensor_scale)
