"""Delayed scaling's state: an amax history and the scale it gives."""

from __future__ import annotations

import math
import numbers

import numpy as np

from numfmt.blocks import exact_scales
from numfmt.formats import FloatFormat


class AmaxHistory:
    """TransformerEngine's delayed scaling state for one tensor: an amax history and a scale.

    The scale used at a step comes from the amaxes of the ``length`` steps before it: after
    each step the tensor's amax is appended, and the scale becomes ``amax_h * 2**margin /
    fmt.max`` with ``amax_h`` the largest amax in the window (``amax_compute_algo="max"``).
    It starts at 1: the first step of a run quantizes with scale 1 (a plain saturating cast to
    the format). This is TE's rule with its scale inverted (TE stores the multiplier
    ``fmt.max / amax / 2**margin``; numfmt's scale divides); TE keeps the scale in FP32, here
    it is numfmt's exact float64 scale.

    Zero and NaN amaxes follow TE's fused update (``kernel_bulk``, PyTorch's default path):

    * a zero amax is not recorded: the history does not roll and the scale stays;
    * a NaN amax is recorded but the window's maximum skips it (CUDA's ``fmaxf``), so the
      scale comes from the other amaxes in the window wherever the NaN sits;
    * while the window's maximum is 0 (every entry NaN) or infinite, the scale stays what
      it was.

    (TE's unfused path, ``NVTE_UNFUSED_FP8_UPDATE=1``, differs: it rolls a zero amax in, and
    ``torch.max`` lets a NaN in the window keep the scale.)

    Parameters
    ----------
    length : int >= 1, default 16
        The window (TE's ``amax_history_len``).
    margin : int >= 0, default 0

    Raises
    ------
    ValueError
        If ``length`` or ``margin`` is not an int in range (bool is not an int here).

    Reference: ``transformer_engine/common/recipe/delayed_scaling.cu`` (``kernel_bulk``:
    ``if (last_amax != 0.0f)`` the history rolls and ``amax = fmaxf(amax, a)`` over the
    window; the new scale is ``scaled_max / amax`` if amax is finite and positive, else the
    previous scale).
    """

    def __init__(self, length: int = 16, margin: int = 0):
        if not _is_int(length) or length < 1:
            raise ValueError(f"length must be an int >= 1, got {length!r}")
        if not _is_int(margin) or margin < 0:
            raise ValueError(f"margin must be an int >= 0, got {margin!r}")
        self.length, self.margin = int(length), int(margin)
        self.history: list[float] = []   # oldest first, at most ``length``
        self._scales: dict[str, float] = {}

    def scale(self, fmt: FloatFormat) -> float:
        """The dequantization scale for the current step in ``fmt``."""
        return self._scales.get(fmt.name, 1.0)

    def record(self, amax: float, formats) -> None:
        """Append this step's ``amax`` and update the scale of each format in ``formats``
        (TE's fused rule: see the class notes)."""
        amax = float(amax)
        if amax == 0.0:
            return
        self.history.append(amax)
        del self.history[:-self.length]
        top = max((a for a in self.history if not math.isnan(a)), default=0.0)
        if top > 0 and math.isfinite(top):
            for fmt in formats:
                self._scales[fmt.name] = float(exact_scales(
                    np.array(top), fmt.max_value)) * 2.0**self.margin

    def state_dict(self) -> dict:
        """``{"history": [float, ...] oldest first, "scales": {format name: float}}``."""
        return {"history": list(self.history), "scales": dict(self._scales)}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned (the window keeps ``self.length``)."""
        self.history = [float(a) for a in state["history"]][-self.length:]
        self._scales = {str(k): float(v) for k, v in state["scales"].items()}


def _is_int(v) -> bool:
    """A Python or numpy integer, not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, (bool, np.bool_))
