"""Lab 02 reference solutions. SPOILER: do the lab first (labs/02_rounding_and_accumulation.py)."""

import numpy as np


def round_to_format(x, man_bits, emin, max_value):
    a = np.abs(x)
    _, k = np.frexp(a)                                # a = f 2^k, f in [0.5, 1)
    e = np.maximum(k - 1, emin)                       # the binade, or emin for subnormals
    step = np.ldexp(1.0, e - man_bits)                # the spacing of the format there
    r = np.minimum(np.rint(a / step) * step, max_value)   # rint: half to even
    return np.copysign(r, x)


def kahan_sum_fp16(x):
    s = np.float16(x[0])
    c = np.float16(0.0)
    for term in x[1:]:
        y = np.float16(term) - c
        t = s + y
        c = (t - s) - y                               # what t lost of y
        s = t
    return float(s)
