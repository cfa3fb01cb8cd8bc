"""Dynamic loss scaling for FP16 training, as torch.amp.GradScaler decides."""

from __future__ import annotations

import math
import numbers

import torch

#: The smallest scale: float32's 2^-127, the last power of two whose float32 reciprocal
#: (2^127) is finite. Below it GradScaler's ``1 / scale`` is Inf and, at 2^-150, its scale
#: is 0; here the backoff stops at this floor instead.
MIN_SCALE = 2.0**-127


class DynamicLossScaler:
    """Dynamic loss scaling for FP16 training: the decisions of ``torch.amp.GradScaler``.

    The loss is multiplied by :attr:`scale` before backward, so that small gradients stay
    above FP16's subnormals; the gradients are then multiplied by the float32 reciprocal of
    the scale. A step whose gradients hold an Inf or NaN is skipped and the scale multiplied
    by ``backoff_factor``; after ``growth_interval`` clean steps in a row it is multiplied by
    ``growth_factor``.

    Two places differ from GradScaler on purpose, both where GradScaler's arithmetic breaks
    down: the scale never backs off below :data:`MIN_SCALE` (GradScaler's reaches 0 after
    enough overflowing steps, its reciprocal Inf before that), and a gradient is checked
    after it is unscaled (an unscaled gradient that overflows float32 skips the step;
    GradScaler checks the scaled one and would step on the Inf).

    Parameters
    ----------
    init_scale : float, default 2**16
    growth_factor : float, default 2.0
    backoff_factor : float, default 0.5
    growth_interval : int, default 2000

    Raises
    ------
    ValueError
        Naming the argument: a factor or the scale not a positive finite real (numpy reals
        accepted), ``init_scale`` below :data:`MIN_SCALE` in float32, growth_factor <= 1,
        backoff_factor >= 1, or growth_interval not an int >= 1.

    References
    ----------
    Micikevicius et al., "Mixed Precision Training", ICLR 2018, section 3.2. PyTorch
    ``torch/amp/grad_scaler.py`` and the ``_amp_update_scale_`` kernel.
    """

    def __init__(self, init_scale: float = 2.0**16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000):
        for k, v in (("init_scale", init_scale), ("growth_factor", growth_factor),
                     ("backoff_factor", backoff_factor)):
            if (isinstance(v, bool) or not isinstance(v, numbers.Real)
                    or not (0 < float(v) < math.inf)):
                raise ValueError(f"{k} must be a positive finite number, got {v!r}")
        if not MIN_SCALE <= _f32(init_scale) < math.inf:
            raise ValueError(f"init_scale must lie in float32's [2**-127, max] (its float32 "
                             f"reciprocal finite), got {init_scale!r}")
        if growth_factor <= 1:
            raise ValueError(f"growth_factor must be > 1, got {growth_factor!r}")
        if backoff_factor >= 1:
            raise ValueError(f"backoff_factor must be < 1, got {backoff_factor!r}")
        if (isinstance(growth_interval, bool) or not isinstance(growth_interval, numbers.Integral)
                or growth_interval < 1):
            raise ValueError(f"growth_interval must be an int >= 1, got {growth_interval!r}")
        # GradScaler keeps its scale as a float32 tensor: the same float here.
        self.scale = _f32(init_scale)
        self.growth_factor, self.backoff_factor = float(growth_factor), float(backoff_factor)
        self.growth_interval = int(growth_interval)
        self.growth_tracker = 0
        self._unscaled = False
        self._found_inf = False

    def scale_loss(self, loss: torch.Tensor) -> torch.Tensor:
        """``loss * scale`` (call ``.backward()`` on it)."""
        return loss * self.scale

    def unscale_(self, params) -> bool:
        """Multiply every gradient of ``params`` by the float32 ``1 / scale`` in place;
        return whether any unscaled gradient holds an Inf or NaN.

        Raises
        ------
        RuntimeError
            If called again before :meth:`update` (the gradients would be divided twice), as
            GradScaler refuses ("unscale_() has already been called on this optimizer since
            the last update()").
        ValueError
            If a gradient is float16 (GradScaler: "Attempting to unscale FP16 gradients"):
            unscaling in float16 would flush the small gradients loss scaling keeps.
        """
        if self._unscaled:
            raise RuntimeError("unscale_() has already been called since the last update(): "
                               "the gradients are unscaled once per step")
        params = list(params)
        for p in params:
            if p.grad is not None and p.grad.dtype == torch.float16:
                raise ValueError("params: attempting to unscale FP16 gradients; keep master "
                                 "weights (and their gradients) in float32")
        inv = _f32(1.0 / self.scale)
        found = False
        for p in params:
            if p.grad is None:
                continue
            p.grad.mul_(inv)
            if not bool(torch.isfinite(p.grad).all()):
                found = True
        self._unscaled, self._found_inf = True, found
        return found

    def update(self, found_inf: bool) -> None:
        """Back off on ``found_inf``; otherwise count a clean step and grow after
        ``growth_interval`` of them (``torch._amp_update_scale_``)."""
        if found_inf:
            self.scale = max(_f32(self.scale * self.backoff_factor), MIN_SCALE)
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
        """GradScaler's ``state_dict`` keys: ``{"scale", "growth_factor", "backoff_factor",
        "growth_interval", "_growth_tracker"}`` (Python numbers)."""
        return {"scale": self.scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self.growth_tracker}

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict`'s dict (or ``torch.amp.GradScaler``'s).

        Raises
        ------
        ValueError
            If a key is missing or a value out of range (as the constructor checks).
        """
        keys = ("scale", "growth_factor", "backoff_factor", "growth_interval",
                "_growth_tracker")
        if not isinstance(state, dict) or any(k not in state for k in keys):
            raise ValueError(f"state must be a dict with keys {keys}, got {state!r:.200}")
        fresh = DynamicLossScaler(float(state["scale"]), float(state["growth_factor"]),
                                  float(state["backoff_factor"]), int(state["growth_interval"]))
        tracker = int(state["_growth_tracker"])
        if not 0 <= tracker < fresh.growth_interval:
            raise ValueError(f"state['_growth_tracker'] must lie in [0, growth_interval), "
                             f"got {tracker}")
        self.__dict__.update(fresh.__dict__)
        self.growth_tracker = tracker


def _f32(v: float) -> float:
    return float(torch.tensor(v, dtype=torch.float32))
