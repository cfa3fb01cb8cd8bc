"""Lab 01: number formats. Do it after lecture 01.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 01`` (``--lang zh``: in Chinese). ``python -m labs show 01`` prints the
tasks.
"""

import numpy as np


def decode(code, exp_bits, man_bits, bias):
    """Return the value of a finite code of a binary floating-point format.

    The code holds, from the top bit down, a sign bit, `exp_bits` exponent bits E and
    `man_bits` mantissa bits M. A normal code (E > 0) means (-1)^s (1 + M / 2^man_bits)
    2^(E - bias); a subnormal one (E = 0) means (-1)^s (M / 2^man_bits) 2^(1 - bias).

    Parameters
    ----------
    code : int, a code whose value is finite (not Inf or NaN)
    exp_bits, man_bits, bias : int (E4M3: 4, 3, 7; FP16: 5, 10, 15)

    Returns
    -------
    float (exact: every value of these formats is a float64)

    Source
    ------
    IEEE 754-2019, section 3.4; OCP 8-bit Floating Point Specification (OFP8), section 5.

    Hints
    -----
    Extract the fields with shifts and masks: M = code & (2^man_bits - 1). Code 0x80 is -0.0:
    keep the sign of zero (multiply by -1.0, or use math.copysign).
    """
    raise NotImplementedError


def max_finite(exp_bits, man_bits, bias, specials):
    """Return the largest finite value of a format, which depends on what its top codes mean.

    specials "ieee" (FP16, BF16, E5M2): the all-ones exponent holds Inf and NaN, so the
    largest value has exponent field 2^exp_bits - 2 and an all-ones mantissa. "fn" (E4M3):
    only the all-ones code S.1111.111 is NaN, so the all-ones exponent holds normal values up
    to mantissa 2^man_bits - 2. "none" (E2M3, E3M2, E2M1): no special values at all.

    Parameters
    ----------
    exp_bits, man_bits, bias : int
    specials : "ieee", "fn" or "none"

    Returns
    -------
    float

    Source
    ------
    OCP 8-bit Floating Point Specification (OFP8), table 1 (E4M3: 448, E5M2: 57344); OCP MX
    v1.0, section 5.3 (E2M3: 7.5, E3M2: 28, E2M1: 6).

    Hints
    -----
    Find the largest exponent field and the largest mantissa field, then use the normal
    formula of decode. E4M3 has exponent field 15, mantissa 6: 1.75 * 2^8 = 448.
    """
    raise NotImplementedError


def spacing(x, man_bits, emin):
    """Return the gap between |x| and the next larger value of the format (one ulp at x).

    In the binade [2^e, 2^(e+1)) the gap is 2^(e - man_bits); below 2^emin (the subnormals
    and zero) it is the smallest subnormal 2^(emin - man_bits).

    Parameters
    ----------
    x : ndarray of float64, finite
    man_bits : int
    emin : int, the exponent of the smallest normal value (1 - bias)

    Returns
    -------
    ndarray of float64, the shape of x

    Source
    ------
    Higham, "Accuracy and Stability of Numerical Algorithms", 2nd ed., section 2.1.

    Hints
    -----
    np.frexp(|x|) returns (f, k) with |x| = f 2^k and f in [0.5, 1): floor(log2 |x|) = k - 1
    exactly, where np.log2 can round up just below a power of two. np.ldexp(1.0, n) is 2^n.
    """
    raise NotImplementedError
