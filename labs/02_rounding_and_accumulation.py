"""Lab 02: rounding and accumulation. Do it after lecture 02.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 02`` (``--lang zh``: in Chinese). ``python -m labs show 02`` prints the
tasks.
"""

import numpy as np


def round_to_format(x, man_bits, emin, max_value):
    """Round x to the nearest value of a format, ties to even, with subnormals and saturation.

    In the binade [2^e, 2^(e+1)) the format's values are spaced 2^(e - man_bits); below 2^emin
    (the subnormal range) they are spaced 2^(emin - man_bits) down to zero. A value halfway
    between two neighbours goes to the one with an even last mantissa bit. Results beyond
    max_value saturate to +-max_value. The sign is kept, also on a zero (-1e-9 -> -0.0).

    Parameters
    ----------
    x : ndarray of float64, finite
    man_bits : int
    emin : int, the exponent of the smallest normal value
    max_value : float, the largest finite value

    Returns
    -------
    ndarray of float64, the shape of x

    Source
    ------
    IEEE 754-2019, section 4.3.1 (roundTiesToEven); numfmt.FloatFormat.round(x, saturate=True),
    bit for bit with ml_dtypes.

    Hints
    -----
    Scale each |x| by its spacing so that the format's values become integers, round with
    np.rint (half to even), scale back. Compute the spacing from np.frexp, with the exponent
    clamped below at emin. Clamp to max_value after rounding, and restore the sign last.
    """
    raise NotImplementedError


def kahan_sum_fp16(x):
    """Sum x in float16 with Kahan's compensated summation; return the float16 sum as a float.

    Every operation is a float16 operation (np.float16 arithmetic): s = x[0], c = 0; for
    each next term: y = term - c, t = s + y, c = (t - s) - y, s = t.

    Parameters
    ----------
    x : ndarray of float16, 1-D, at least one term

    Returns
    -------
    float, the value of s

    Source
    ------
    Kahan 1965, "Further remarks on reducing truncation errors"; Higham 2002, section 4.3;
    numfmt.rounding.sum_in_format(x, FP16, "kahan").

    Hints
    -----
    Keep s, c, y and t as np.float16 scalars: a Python float would compute in float64 and
    lose the rounding that c is there to capture. The order of (t - s) - y matters.
    """
    raise NotImplementedError
