"""Delayed scaling's state: an amax history and the scale it gives."""

from __future__ import annotations

import math

import numpy as np

from numfmt.blocks import exact_scales
from numfmt.formats import FloatFormat


class AmaxHistory:
    """TransformerEngine's delayed scaling state for one tensor: an amax history and a scale.

    The scale used at a step comes from the amaxes of the ``length`` steps before it: after
    each step the tensor's amax is appended, and the scale becomes ``amax_h * 2**margin /
    fmt.max`` with ``amax_h`` the largest amax in the window (``amax_compute_algo="max"``).
    While every amax in the window is 0 (or the largest is not finite) the scale stays what it
    was, and it starts at 1: the first step of a run quantizes with scale 1 (a plain saturating
    cast to the format). This is TE's rule with its scale inverted (TE stores the multiplier
    ``fmt.max / amax / 2**margin``; numfmt's scale divides); TE keeps the scale in FP32, here
    it is numfmt's exact float64 scale.

    Reference: ``transformer_engine/common/recipe/delayed_scaling.cu`` (kernel: the history
    rolls, the new scale is ``scaled_max / amax`` if amax is finite and positive, else the
    previous scale).
    """

    def __init__(self, length: int = 16, margin: int = 0):
        if not isinstance(length, int) or length < 1:
            raise ValueError(f"length must be an int >= 1, got {length!r}")
        self.length, self.margin = length, margin
        self.history: list[float] = []   # oldest first, at most ``length``
        self._scales: dict[str, float] = {}

    def scale(self, fmt: FloatFormat) -> float:
        """The dequantization scale for the current step in ``fmt``."""
        return self._scales.get(fmt.name, 1.0)

    def record(self, amax: float, formats) -> None:
        """Append this step's ``amax`` and update the scale of each format in ``formats``."""
        self.history.append(float(amax))
        del self.history[:-self.length]
        top = max(self.history)
        if top > 0 and math.isfinite(top):
            for fmt in formats:
                self._scales[fmt.name] = float(exact_scales(
                    np.array(top), fmt.max_value)) * 2.0**self.margin
