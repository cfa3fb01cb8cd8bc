"""Error metrics on torch tensors: :mod:`numfmt.metrics`'s own body.

On the CPU the sums run in numpy's order over zero-copy views, so the results equal numpy's bit
for bit; on a GPU they are ``torch.dot`` reductions, equal to float64 summation-order rounding.
"""

from __future__ import annotations

import torch

from numfmt.metrics import _ratio, _rel_error_of, _sqnr_db_of
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
    return q.detach(), x.detach()


def rel_error(q, x) -> float:
    """:func:`numfmt.rel_error` on tensors (moved to ``x``'s device), a float. Raises as the
    numpy function."""
    return _rel_error_of(*_ratio(*_pair(q, x)))


def sqnr_db(q, x) -> float:
    """:func:`numfmt.sqnr_db` on tensors (moved to ``x``'s device), in dB. Raises as the numpy
    function."""
    return _sqnr_db_of(*_ratio(*_pair(q, x)))
