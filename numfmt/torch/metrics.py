"""Error metrics on torch tensors: the twins of :mod:`numfmt.metrics`.

These are reductions, so their last bits depend on the summation order (numpy's BLAS and
torch's kernels sum in different orders): they agree with numpy to about 1e-12 relative, not
bit for bit. Every elementwise result of numfmt.torch is bit-identical; these two are not.
"""

from __future__ import annotations

import math

import torch

from numfmt.metrics import _TINY, _noise_to_signal_scaled, _rel_error_of, _sqnr_db_of
from numfmt.torch._core import as_real_tensor

__all__ = ["rel_error", "sqnr_db"]


def _pair(q, x) -> tuple[torch.Tensor, torch.Tensor]:
    dev = x.device if isinstance(x, torch.Tensor) else (q.device if isinstance(q, torch.Tensor)
                                                       else None)
    q, x = as_real_tensor(q, "q", dev), as_real_tensor(x, "x", dev)
    if q.shape != x.shape:
        raise ValueError(f"q and x must have the same shape, got {tuple(q.shape)} and "
                         f"{tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError("x is empty: the error of nothing is undefined")
    if not bool((torch.isfinite(q).all() & torch.isfinite(x).all())):
        raise ValueError("q and x must be finite (NaN or Inf makes the error meaningless)")
    if not bool(x.any()):
        raise ValueError("x is all zero: a relative error or SQNR against zero is undefined")
    return q, x


def _sums(q: torch.Tensor, x: torch.Tensor):
    """``(noise, signal)`` sums in float64, or None where a square overflows or underflows
    (then numpy's power-of-two scaled path gives the ratio; see :mod:`numfmt.metrics`)."""
    noise, signal = float(torch.sum((q - x) ** 2)), float(torch.sum(x ** 2))
    if math.isfinite(noise) and math.isfinite(signal) and noise >= _TINY and signal >= _TINY:
        return noise, signal
    return None


def rel_error(q, x) -> float:
    """Relative error ``||q - x||_2 / ||x||_2`` as a fraction, computed in float64.

    Parameters
    ----------
    q, x : tensors or array_like of real numbers, the same shape (moved to ``x``'s device)

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If either input is not real-valued.
    ValueError
        If the shapes differ, ``x`` is empty or all zero, or either holds NaN or Inf.
    """
    q, x = _pair(q, x)
    if _sums(q, x) is not None:
        return float(torch.linalg.vector_norm(q - x) / torch.linalg.vector_norm(x))
    return _rel_error_of(*_noise_to_signal_scaled(q.cpu().numpy().ravel(),
                                                  x.cpu().numpy().ravel()))


def sqnr_db(q, x) -> float:
    """Signal-to-quantization-noise ratio ``10 log10(sum x^2 / sum (q - x)^2)`` in dB.

    +inf when ``q == x`` exactly. Parameters and errors as :func:`rel_error`.
    """
    q, x = _pair(q, x)
    sums = _sums(q, x)
    if sums is not None:
        return 10.0 * math.log10(sums[1] / sums[0]) + 0.0  # + 0.0: a ratio of 1 is 0.0 dB
    return _sqnr_db_of(*_noise_to_signal_scaled(q.cpu().numpy().ravel(),
                                                x.cpu().numpy().ravel()))
