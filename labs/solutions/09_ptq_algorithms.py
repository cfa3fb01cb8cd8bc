"""Lab 09 reference solutions. SPOILER: do the lab first (labs/09_ptq_algorithms.py)."""

import numpy as np


def smoothquant_scales(act_absmax, weight_absmax, alpha):
    ok = (act_absmax > 0) & (weight_absmax > 0)
    s = np.ones_like(act_absmax)
    s[ok] = act_absmax[ok] ** alpha / weight_absmax[ok] ** (1.0 - alpha)
    return s


def awq_search(weight, x, quantize, grid):
    act = np.abs(x).mean(axis=0)                                  # (in,) s_X
    best = None
    for k in range(grid):
        alpha = k / grid
        s = np.maximum(act ** alpha, 1e-4)
        s /= np.sqrt(s.max() * s.min())
        wq = quantize(weight * s) / s
        err = float(np.mean((x @ (wq - weight).T) ** 2))
        if best is None or err < best[0]:
            best = (err, alpha, s)
    return best[1], best[2]


def gptq_codes(weight, u, scale, qmax):
    W = weight.copy()                                             # (out, in)
    Q = np.zeros(W.shape, np.int64)
    for j in range(W.shape[1]):
        Q[:, j] = np.clip(np.rint(W[:, j] / scale), -qmax, qmax)
        E = (W[:, j] - Q[:, j] * scale) / u[j, j]                 # the scaled rounding error
        W[:, j:] -= np.outer(E, u[j, j:])
    return Q
