"""Lab 03: scaling. Do it after lecture 03.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 03`` (``--lang zh``: in Chinese). ``python -m labs show 03`` prints the
tasks. You may use numfmt's element rounding (``numfmt.FP8_E4M3.round``), which lab 02 builds.
"""

import numpy as np

import numfmt


def current_scale(x, max_value, margin):
    """Return the current (just-in-time) scale of tensor x: amax * 2^margin / max_value.

    amax is the largest |x| of this very tensor; dividing x by the scale maps amax onto
    max_value / 2^margin. An all-zero x gets scale 1.0.

    Parameters
    ----------
    x : ndarray of float64
    max_value : float, the FP8 format's largest value (E4M3: 448, E5M2: 57344)
    margin : int, headroom in binades (Transformer Engine's margin)

    Returns
    -------
    float

    Source
    ------
    Micikevicius et al. 2022, "FP8 Formats for Deep Learning", section 4.3; numfmt.scaling.
    scale_from_amax.

    Hints
    -----
    Multiply by 2^margin exactly with np.ldexp(amax, margin) before dividing by max_value.
    """
    raise NotImplementedError


def delayed_scales(amaxes, max_value, history, margin):
    """Return delayed scaling's scale for every step t from the amaxes of earlier steps.

    The scale of step t is current_scale's formula applied to max(amaxes[t-history:t]), the
    largest amax of the last `history` steps before t; step 0 has no history and uses its own
    amax. An amax of 0 gives scale 1.0.

    Parameters
    ----------
    amaxes : ndarray of float64, shape (T,), the amax each step's tensor had
    max_value : float
    history : int >= 1 (Transformer Engine's amax_history_len)
    margin : int

    Returns
    -------
    ndarray of float64, shape (T,)

    Source
    ------
    NVIDIA Transformer Engine, DelayedScaling recipe (amax_history_len, amax_compute_algo
    "max"); numfmt.scaling.delayed_scales.

    Hints
    -----
    amaxes[max(0, t - history):t] is the window; mind t = 0.
    """
    raise NotImplementedError


def quantize_with_scale(x, scale):
    """Quantize x to E4M3 with the given scale; return the values and the flushed fraction.

    values = E4M3(x / scale) * scale, rounding to nearest even and saturating at +-448.
    flushed is the fraction of the non-zero elements of x whose value became 0 (0.0 when x
    has none).

    Parameters
    ----------
    x : ndarray of float64
    scale : float, positive

    Returns
    -------
    (values, flushed) : ndarray of float64 (the shape of x) and a float

    Source
    ------
    numfmt.scaling.quantize_with_scale(x, FP8_E4M3, scale).

    Hints
    -----
    numfmt.FP8_E4M3.round(v) rounds and saturates. Count only the elements with x != 0.
    """
    raise NotImplementedError
