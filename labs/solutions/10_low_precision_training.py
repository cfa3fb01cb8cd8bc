"""Lab 10 reference solutions. SPOILER: do the lab first (labs/10_low_precision_training.py)."""

import numpy as np

import numfmt


def update_loss_scale(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                      growth_interval):
    if found_inf:
        return float(np.float32(scale * backoff_factor)), 0
    good = growth_tracker + 1
    if good == growth_interval:
        with np.errstate(over="ignore"):
            grown = np.float32(scale * growth_factor)         # float64 product, to float32
        return (float(grown) if np.isfinite(grown) else scale), 0
    return scale, good


def rht(x, signs):
    n = x.shape[1]
    h = np.ones((1, 1))
    while h.shape[0] < n:                                 # Sylvester's construction
        h = np.block([[h, h], [h, -h]])
    return (x * signs) @ h / np.sqrt(n)


def blockwise_fp8(x, block):
    rows, k = x.shape
    xb = x.reshape(rows, k // block, block)               # (rows, blocks, block)
    amax = np.abs(xb).max(axis=-1, keepdims=True)
    scale = np.where(amax > 0, amax / 448.0, 1.0)
    values = numfmt.FP8_E4M3.round(xb / scale) * scale
    return values.reshape(rows, k), scale[..., 0]
