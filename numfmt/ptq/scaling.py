"""Per-input-channel scaling: move quantization difficulty between activations and weights.

A linear layer ``y = x @ W.T`` is unchanged when input channel j of x is divided by s_j and
column j of W multiplied by s_j: ``(x / s) @ (W * s).T = x @ W.T``. SmoothQuant picks s to
flatten the activations' outlier channels before quantizing both (W8A8); AWQ picks it to
enlarge the weights of the channels where activations are large, so that weight-only
rounding errors there shrink, and folds ``1/s`` into the operation before.

References
----------
Xiao, Lin, Seznec, Wu, Demouth and Han, "SmoothQuant: Accurate and Efficient Post-Training
Quantization for Large Language Models", ICML 2023, section 4 (eq. 4).
Lin, Tang, Tang, Yang, Chen, Wang, Xiao, Dang, Gan and Han, "AWQ: Activation-aware Weight
Quantization for LLM Compression and Acceleration", MLSys 2024 (arXiv 2306.00978), section 3.2;
reference implementation github.com/mit-han-lab/llm-awq, ``awq/quantize/auto_scale.py``
(``_search_module_scale``) and ``auto_clip.py`` (``auto_clip_layer``).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from numfmt._validate import as_calibration_array, as_real_array, check_bool, check_positive_int

from ._checks import as_inputs, as_matrix, check_fraction

__all__ = ["AWQResult", "awq_search", "smoothquant_scales"]


def smoothquant_scales(act_absmax, weight_absmax, alpha: float = 0.5) -> np.ndarray:
    """SmoothQuant's migration scales ``s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)``.

    Parameters
    ----------
    act_absmax : array_like of float, shape (in,)
        Per-input-channel ``max |x_j|`` over calibration tokens; finite, >= 0.
    weight_absmax : array_like of float, shape (in,)
        Per-input-channel ``max_i |W_ij|`` (over output rows of the (out, in) weight).
    alpha : float in [0, 1], default 0.5
        Migration strength: 0 leaves the activations alone (s = 1 / max|W_j|), 1 moves all
        of their range into the weights.

    Returns
    -------
    ndarray of float64, shape (in,), positive. A channel whose activation or weight maximum
    is 0 gets s = 1 (there is nothing to balance). Quantize ``x / s`` and ``W * s``; in exact
    arithmetic ``(x / s) @ (W * s).T == x @ W.T``.

    Raises
    ------
    TypeError
        If an input is not real-valued or ``alpha`` is not a real number.
    ValueError
        If the inputs are not 1-D of equal length, contain negative or non-finite values,
        ``alpha`` is outside [0, 1], or a scale is beyond float64's normal range (an extreme
        ratio of the two maxima).

    References
    ----------
    Xiao et al. 2023, eq. (4).
    """
    a = as_calibration_array(act_absmax, "act_absmax")
    wm = as_calibration_array(weight_absmax, "weight_absmax")
    if a.ndim != 1 or wm.shape != a.shape:
        raise ValueError(f"act_absmax and weight_absmax must be 1-D of equal length, got "
                         f"shapes {np.shape(act_absmax)} and {np.shape(weight_absmax)}")
    if (a < 0).any() or (wm < 0).any():
        raise ValueError("act_absmax and weight_absmax are maxima of |.|: they must be >= 0")
    alpha = check_fraction(alpha, "alpha")
    ok = (a > 0) & (wm > 0)
    s = np.ones_like(a)
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        s[ok] = a[ok] ** alpha / wm[ok] ** (1.0 - alpha)
    bad = ~(np.isfinite(s) & (s >= np.finfo(np.float64).tiny))
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise ValueError(f"s_{j} = act_absmax^alpha / weight_absmax^(1 - alpha) = "
                         f"{a[j]:.3g}^{alpha:g} / {wm[j]:.3g}^{1 - alpha:g} is beyond float64's "
                         "normal range: the scales would be Inf or lose digits; rescale the "
                         "activations or the weights first")
    return s


class AWQResult(NamedTuple):
    """Result of :func:`awq_search`."""

    weight: np.ndarray   #: float64 (out, in): quantize(clip(W * s)) / s, the layer's new weight
    scales: np.ndarray   #: float64 (in,): the per-input-channel scales s of the best alpha
    alpha: float         #: the best exponent on the grid
    errors: np.ndarray   #: float64 (grid,): output mean squared error for alpha = k / grid
    clip: np.ndarray | None  #: float64 (out, G): the clip ratio of each row and group, or None


def _output_mse(e: np.ndarray, x: np.ndarray, gram: np.ndarray | None) -> float:
    """Mean over tokens and outputs of ``(x @ e.T)^2``, through ``x^T x / n`` when cheaper."""
    if gram is not None:
        return float(np.einsum("oi,ij,oj->", e, gram, e, optimize=True) / e.shape[0])
    return float(np.mean((x @ e.T) ** 2))


def awq_search(weight, x, quantize: Callable[[np.ndarray], np.ndarray], grid: int = 20,
               clip_search: bool = False, group_size: int | None = None,
               max_shrink: float = 0.5) -> AWQResult:
    """AWQ: search per-input-channel scales ``s = s_X^alpha`` minimising the output error.

    For each ``alpha = k / grid`` (k = 0 .. grid-1), ``s = mean|x_j|^alpha`` normalised by
    ``sqrt(max(s) min(s))``, and the layer's weight becomes ``quantize(W * s) / s``; the alpha
    with the smallest mean squared error of ``x @ W.T`` wins (k = 0 is plain round-to-nearest,
    so the search never loses to it on ``x``). The optional clip search then shrinks each
    row's (and group's) range ``max|W s|`` by ``1 - k / grid`` down to ``1 - max_shrink``,
    keeping per row and group the ratio that minimises that group's output error.

    A group clipped on both sides has the symmetric range ``[-lim, lim]``; on an asymmetric
    grid its zero point is the half-integer ``(2^b - 1) / 2``. numfmt's quantizers round it
    exactly (:func:`numfmt.quantize_int`), so the search's choices do not follow the last
    bits of ``lim``; with the reference's ``round(-min / scale)`` they do, and a last-bit
    change of the calibration inputs (another CPU's sums) would move some of them.

    Parameters
    ----------
    weight : array_like of float, shape (out, in), finite
    x : array_like of float, shape (..., in), finite
        Calibration inputs of this layer (the reference uses the block's output; here the
        layer's own output is the objective).
    quantize : callable
        ``quantize(w) -> w_hat``: the weight quantizer (dequantized result, same shape), e.g.
        ``lambda w: numfmt.quantize_int(w, 4, False, "group", group=128).values``.
    grid : int > 0, default 20 (the reference's ``n_grid``)
    clip_search : bool, default False
    group_size : int or None
        Columns per clip group for the clip search (the quantizer's group; consecutive
        columns, the last group may be shorter); None: whole rows.
    max_shrink : float in [0, 1), default 0.5 (the reference's)

    Returns
    -------
    AWQResult
        ``weight`` (out, in) float64, ``scales`` (in,), ``alpha``, ``errors`` (grid,) and
        ``clip`` ((out, ceil(in / group_size)) or (out, 1), or None without the clip search).

    Raises
    ------
    TypeError
        If an array is not real-valued, ``quantize`` is not callable or returns non-real
        values (complex, strings), an integer argument is not an integer or ``clip_search``
        is not a bool.
    ValueError
        If the shapes do not match, an input is empty or non-finite, ``grid`` is not
        positive, ``group_size`` is not positive, ``max_shrink`` is outside [0, 1),
        ``quantize`` returns an array of another shape or with non-finite values, or the
        scaled weight or the output error is beyond float64's range (extreme inputs).

    References
    ----------
    Lin et al. 2024, section 3.2 and the reference ``_search_module_scale`` / ``auto_clip_layer``.
    """
    w = as_matrix(weight, "weight")                       # (out, in)
    xs = as_inputs(x, w.shape[1])                         # (n, in)
    if not callable(quantize):
        raise TypeError(f"quantize must be a callable w -> w_hat, got {quantize!r}")
    grid = check_positive_int(grid, "grid")
    clip_search = check_bool(clip_search, "clip_search")
    group = w.shape[1] if group_size is None else check_positive_int(group_size, "group_size")
    max_shrink = check_fraction(max_shrink, "max_shrink")
    if max_shrink >= 1.0:
        raise ValueError(f"max_shrink must be below 1 (a zero range), got {max_shrink!r}")

    with np.errstate(over="ignore", invalid="ignore"):
        gram = xs.T @ xs / xs.shape[0] if xs.shape[0] > w.shape[1] else None
    act = np.abs(xs).mean(axis=0)                         # (in,) AWQ's s_X
    errors = np.empty(grid)
    best = None
    for k in range(grid):
        alpha = k / grid
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            s = np.maximum(act ** alpha, 1e-4)            # the reference's clamp(min=1e-4)
            s /= np.sqrt(s.max() * s.min())
            ws = w * s
        _check_finite(ws, "weight * s", alpha)
        q = _checked(quantize, ws)                        # Q(W s), kept for the clip search
        with np.errstate(over="ignore", invalid="ignore", under="ignore"):
            wq = q / s
            errors[k] = _output_mse(wq - w, xs, gram)
        _check_finite(errors[k], "the output error mean((x @ (W_q - W).T)^2)", alpha)
        if best is None or errors[k] < errors[best[0]]:
            best = (k, s, wq, q)
    k, s, wq, q = best
    clip = None
    if clip_search:
        wq, clip = _clip_search(w * s, xs / s, quantize, group, grid, max_shrink, q)
        wq = wq / s
    return AWQResult(wq, s, k / grid, errors, clip)


def _check_finite(v, what: str, alpha: float) -> None:
    if not np.isfinite(v).all():
        raise ValueError(f"{what} at alpha = {alpha:g} is beyond float64's range: weight or x "
                         "is too large; scale them down first (the search's result does not "
                         "depend on their scale)")


def _checked(quantize, w: np.ndarray) -> np.ndarray:
    out = quantize(w)
    try:
        out = as_real_array(out, "quantize(w)")
    except TypeError as err:
        raise TypeError(f"quantize must return real numbers: {err}") from None
    if out.shape != w.shape:
        raise ValueError(f"quantize must return an array of shape {w.shape}, got shape "
                         f"{out.shape}")
    if not np.isfinite(out).all():
        raise ValueError(f"quantize returned non-finite values (shape {out.shape}); it must "
                         "return the finite dequantized weight")
    return out


def _clip_search(ws, xs, quantize, group, grid, max_shrink, q_full=None):
    """AWQ's clip search on the scaled weight ``ws`` (out, in) with inputs ``xs`` (n, in) of
    the scaled layer: per row and group of ``group`` consecutive columns (the last may be
    shorter), the range ratio with the smallest error of that group's partial output.

    ``q_full``: ``quantize(ws)`` when already computed. Ratio 1 clips every element to its own
    group's absmax, which leaves ``ws`` bit for bit as it is, so its quantization is that one."""
    out, cols = ws.shape
    bounds = [(a, min(a + group, cols)) for a in range(0, cols, group)]
    grams = [xs[:, a:b].T @ xs[:, a:b] / xs.shape[0] for a, b in bounds]   # (g, g) each
    amax = np.stack([np.abs(ws[:, a:b]).max(axis=1) for a, b in bounds], axis=1)  # (out, G)
    # each column's group absmax (out, in); times the ratio below, the clip limit
    amax_cols = np.concatenate([np.repeat(amax[:, [gi]], b - a, axis=1)
                                for gi, (a, b) in enumerate(bounds)], axis=1)
    best_err = np.full((out, len(bounds)), np.inf)
    best_ratio = np.ones((out, len(bounds)))
    best_q = np.empty_like(ws)
    for k in range(max(1, int(max_shrink * grid))):
        ratio = 1.0 - k / grid
        if k == 0 and q_full is not None:
            q = q_full
        else:
            lim = amax_cols * ratio
            q = _checked(quantize, np.clip(ws, -lim, lim))
        e = q - ws
        for gi, (a, b) in enumerate(bounds):
            err = np.einsum("oi,ij,oj->o", e[:, a:b], grams[gi], e[:, a:b], optimize=True)
            better = err < best_err[:, gi]
            best_err[better, gi] = err[better]
            best_ratio[better, gi] = ratio
            best_q[better, a:b] = q[better, a:b]
    return best_q, best_ratio
