"""Adam (and AdamW) over full-precision master weights, with a fake-quantized view re-derived
after every step."""

from __future__ import annotations

from typing import Callable

import numpy as np

from numfmt._validate import (as_calibration_array, as_real_array, check_positive_int,
                              check_real_scalar)
from numfmt.qat.fake_quant import FakeQuantized

__all__ = ["QATAdam", "adam_update"]


def adam_update(param, grad, m, v, t: int, lr: float, beta1: float = 0.9, beta2: float = 0.999,
                eps: float = 1e-8, weight_decay: float = 0.0):
    """One Adam (or AdamW, with decoupled weight decay) update; returns new arrays.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) g^2``, ``p -= lr wd p`` (AdamW), then
    ``p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)``. All arithmetic in float64.

    Parameters
    ----------
    param, grad, m, v : array_like of real numbers, the same shape
    t : int >= 1, the step number (for the bias corrections)
    lr, beta1, beta2, eps, weight_decay : float
        Learning rate > 0; betas in [0, 1); eps > 0; weight_decay >= 0.

    Returns
    -------
    (param, m, v) : three float64 ndarrays of the input shape

    Raises
    ------
    TypeError
        If an array is not real-valued, a hyper-parameter is not a real number or ``t`` is not
        an integer.
    ValueError
        If shapes differ, an array is not finite, ``v`` has a negative entry (a second moment
        is a mean of squares), ``t < 1``, a hyper-parameter is out of range or not finite, or
        the update overflows float64.

    References
    ----------
    Kingma and Ba, ICLR 2015, Algorithm 1; Loshchilov and Hutter, ICLR 2019, Algorithm 2.
    Matches ``torch.optim.Adam`` / ``torch.optim.AdamW`` (eps added after the square root).
    """
    param, grad = as_real_array(param, "param"), as_real_array(grad, "grad")
    m, v = as_real_array(m, "m"), as_real_array(v, "v")
    if not param.shape == grad.shape == m.shape == v.shape:
        raise ValueError(f"param, grad, m, v must share a shape, got {param.shape}, "
                         f"{grad.shape}, {m.shape}, {v.shape}")
    for name, arr in (("param", param), ("grad", grad), ("m", m), ("v", v)):
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or Inf")
    if (v < 0).any():
        raise ValueError(f"v must be non-negative (a second moment), got {v[v < 0].min()!r}")
    check_positive_int(t, "t")
    _check_adam(lr, beta1, beta2, eps, weight_decay)
    # beta**t for t beyond 2**1000 is 0 to float64 precision (beta <= 1 - 2**-53); Python's
    # float ** int would raise OverflowError converting such a t to float.
    t = min(int(t), 2**1000)
    try:
        with np.errstate(over="raise"):  # an update beyond float64 would be +-Inf
            m = beta1 * m + (1 - beta1) * grad
            v = beta2 * v + (1 - beta2) * grad * grad
            m_hat = m / (1 - beta1**t)
            v_hat = v / (1 - beta2**t)
            param = param - lr * weight_decay * param
            param = param - lr * m_hat / (np.sqrt(v_hat) + eps)
    except FloatingPointError:
        raise ValueError(f"the Adam update overflows float64 (lr={lr!r}, "
                         f"weight_decay={weight_decay!r}, max |grad| = "
                         f"{float(np.abs(grad).max()):.6g}): lower lr") from None
    return param, m, v


def _check_adam(lr, beta1, beta2, eps, weight_decay) -> None:
    lr, beta1, beta2, eps, weight_decay = (
        check_real_scalar(v, n) for v, n in ((lr, "lr"), (beta1, "beta1"), (beta2, "beta2"),
                                             (eps, "eps"), (weight_decay, "weight_decay")))
    if not (0 < lr < np.inf and 0 <= beta1 < 1 and 0 <= beta2 < 1 and 0 < eps < np.inf
            and 0 <= weight_decay < np.inf):
        raise ValueError("need finite lr > 0, 0 <= beta1, beta2 < 1, finite eps > 0 and "
                         f"weight_decay >= 0; got lr={lr!r}, beta1={beta1!r}, beta2={beta2!r}, "
                         f"eps={eps!r}, weight_decay={weight_decay!r}")


class QATAdam:
    """Adam/AdamW over FP32 master weights, with a fake-quantized view re-derived every step.

    Parameters
    ----------
    master : array_like of real numbers, non-empty and finite
        Initial weights; copied and stored as float32 (the master copy).
    quantize : callable ndarray -> FakeQuantized
        Builds the view from the master, e.g.
        ``lambda w: fake_quantize_weight(w, "INT4", axis=0)``.
    lr, betas, eps, weight_decay : as :func:`adam_update` (weight_decay > 0 makes it AdamW)

    Attributes
    ----------
    master : ndarray of float32
        Full-precision weights the optimizer integrates (off the grid in general).
    view : ndarray of float64
        ``quantize(master).values``: what the forward pass uses (on the grid).
    mask : ndarray of bool
        The STE mask of the view; the caller applies it with :func:`ste_backward`.
    t : int
        Steps taken.

    Raises
    ------
    TypeError
        If ``quantize`` is not callable or does not return a FakeQuantized, ``betas`` is not
        a pair, or a hyper-parameter is not a real number.
    ValueError
        If ``master`` is empty or not finite, a hyper-parameter is out of range (as
        :func:`adam_update`); :meth:`step` raises on a gradient of the wrong
        shape or a non-finite one.
    """

    def __init__(self, master, quantize: Callable[[np.ndarray], FakeQuantized], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        if not callable(quantize):
            raise TypeError("quantize must be a callable returning a FakeQuantized")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        _check_adam(lr, betas[0], betas[1], eps, weight_decay)
        master = as_calibration_array(master, "master")
        _check_fits_float32(master, "master")
        self.master = master.astype(np.float32)
        self.quantize = quantize
        self.lr, self.betas, self.eps, self.weight_decay = lr, betas, eps, weight_decay
        self.m = np.zeros(self.master.shape)
        self.v = np.zeros(self.master.shape)
        self.t = 0
        self._requantize()

    def _requantize(self) -> None:
        fq = self.quantize(self.master.astype(np.float64))
        if not isinstance(fq, FakeQuantized):
            raise TypeError(f"quantize must return a FakeQuantized, got {type(fq).__name__}")
        self.view, self.mask = fq.values, fq.mask

    def step(self, grad) -> None:
        """Update the master with one Adam step on ``grad`` (its shape), then re-derive the view.

        ``grad`` is the gradient with respect to the master: apply :func:`ste_backward` to a
        gradient taken at the view first. Raises as :func:`adam_update` (and ValueError if the
        new master leaves FP32's range); a refused step, or a ``quantize`` that raises, leaves
        the master, moments, step count and view unchanged.
        """
        grad = as_real_array(grad, "grad")
        if grad.shape != self.master.shape:
            raise ValueError(f"grad has shape {grad.shape}, the master {self.master.shape}")
        # Everything is computed and checked before any state changes: a refused gradient
        # (NaN, an overflowing update, a quantizer that raises) leaves the optimizer as it was.
        b1, b2 = self.betas
        p, m, v = adam_update(self.master, grad, self.m, self.v, self.t + 1, self.lr, b1,
                              b2, self.eps, self.weight_decay)
        _check_fits_float32(p, "the updated master")
        master = p.astype(np.float32)
        fq = self.quantize(master.astype(np.float64))
        if not isinstance(fq, FakeQuantized):
            raise TypeError(f"quantize must return a FakeQuantized, got {type(fq).__name__}")
        self.master, self.m, self.v, self.t = master, m, v, self.t + 1
        self.view, self.mask = fq.values, fq.mask


def _check_fits_float32(w: np.ndarray, name: str) -> None:
    """Refuse weights beyond FP32's range: the float32 master would hold Inf."""
    big = float(np.abs(w).max()) if w.size else 0.0
    if big > float(np.finfo(np.float32).max):
        raise ValueError(f"{name} holds {big:.6g}, beyond the FP32 master's range "
                         f"(max {float(np.finfo(np.float32).max):.6g})")
