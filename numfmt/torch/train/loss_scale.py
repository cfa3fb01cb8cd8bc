"""Dynamic loss scaling for FP16 training, as torch.amp.GradScaler decides."""

from __future__ import annotations

import math

import torch


class DynamicLossScaler:
    """Dynamic loss scaling for FP16 training: the decisions of ``torch.amp.GradScaler``.

    The loss is multiplied by :attr:`scale` before backward, so that small gradients stay
    above FP16's subnormals; the gradients are then multiplied by the float32 reciprocal of
    the scale. A step whose gradients hold an Inf or NaN is skipped and the scale multiplied
    by ``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by
    ``growth_factor``.

    Parameters
    ----------
    init_scale : float, default 2**16
    growth_factor : float, default 2.0
    backoff_factor : float, default 0.5
    growth_interval : int, default 2000

    Raises
    ------
    ValueError
        If a factor or the scale is not positive and finite, growth_factor <= 1,
        backoff_factor >= 1, or growth_interval < 1.

    References
    ----------
    Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3.2. PyTorch
    ``torch/amp/grad_scaler.py`` and the ``_amp_update_scale_`` kernel.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        for k, v in (("init_scale", init_scale), ("growth_factor", growth_factor),
                     ("backoff_factor", backoff_factor)):
            if not isinstance(v, (int, float)) or not (0 < v < math.inf):
                raise ValueError(f"{k} must be a positive finite number, got {v!r}")
        if growth_factor <= 1:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
        if backoff_factor >= 1:
            raise ValueError(f"backoff_factor must be < 1, got {backoff_factor!r}")
        if not isinstance(growth_interval, int) or growth_interval < 1:
            raise ValueError(f"growth_interval must be an int >= 1, got {growth_interval!r}")
        # GradScaler keeps its scale as a float32 tensor: the same float here.
        self.scale = _f32(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = growth_interval
        self.growth_tracker = 0
        self._unscaled = False
        self._found_inf = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale`` (call ``.backward()`` on it)."""
        return loss * self.scale

    def unscale_(self, params) -> bool:
        """Multiply every gradient of ``params`` by the float32 ``1 / scale`` in place;
        return whether any gradient holds an Inf or NaN."""
        inv = _f32(1.0 / self.scale)
        found = False
        for p in params:
            if p.grad is None:
                continue
            if not bool(torch.isfinite(p.grad).all()):
                found = True
            p.grad.mul_(inv)
        self._unscaled, self._found_inf = True, found
        return found

    def update(self, found_inf: bool) -> None:
        """Back off on ``found_inf``; otherwise count a clean step and grow after
        ``growth_interval`` of them (``torch._amp_update_scale_``)."""
        if found_inf:
            self.scale = _f32(self.scale * self.backoff_factor)
            self.growth_tracker = 0
        else:
            self.growth_tracker += 1
            if self.growth_tracker == self.growth_interval:
                grown = _f32(self.scale * self.growth_factor)
                if math.isfinite(grown):  # GradScaler does not grow into Inf
                    self.scale = grown
                self.growth_tracker = 0
        self._unscaled = False

    def step(self, optimizer, params) -> bool:
        """Unscale (unless done), take ``optimizer.step()`` unless a gradient is not finite,
        update the scale. Returns whether the step was skipped."""
        params = list(params)
        found = self._found_inf if self._unscaled else self.unscale_(params)
        if not found:
            optimizer.step()
        self.update(found)
        return found

    def state_dict(self) -> dict:
        return {"scale": self.scale, "growth_tracker": self.growth_tracker}


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))
