"""Lab 01 reference solutions. SPOILER: do the lab first (labs/01_number_formats.py)."""

import numpy as np


def decode(code, exp_bits, man_bits, bias):
    sign = -1.0 if code >> (exp_bits + man_bits) & 1 else 1.0
    e = code >> man_bits & ((1 << exp_bits) - 1)
    m = code & ((1 << man_bits) - 1)
    if e == 0:                                       # subnormal: 0.M * 2^(1 - bias)
        return sign * m / 2.0 ** man_bits * 2.0 ** (1 - bias)
    return sign * (1 + m / 2.0 ** man_bits) * 2.0 ** (e - bias)


def max_finite(exp_bits, man_bits, bias, specials):
    top_e = (1 << exp_bits) - 1                      # the all-ones exponent field
    top_m = (1 << man_bits) - 1
    if specials == "ieee":                           # all-ones exponent: Inf and NaN
        top_e -= 1
    elif specials == "fn":                           # S.1...1.1...1 is NaN
        top_m -= 1
    return (1 + top_m / 2.0 ** man_bits) * 2.0 ** (top_e - bias)


def spacing(x, man_bits, emin):
    _, k = np.frexp(np.abs(x))                       # |x| = f 2^k, f in [0.5, 1)
    e = np.where(x == 0, emin, np.maximum(k - 1, emin))
    return np.ldexp(1.0, e - man_bits)
