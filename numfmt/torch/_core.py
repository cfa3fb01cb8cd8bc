"""Device choice, input checks and exact power-of-two helpers shared by numfmt.torch."""

from __future__ import annotations

import numpy as np
import torch

F64 = torch.float64
_EXP_MASK = 0x7FF


def default_device() -> torch.device:
    """Return ``cuda`` when a CUDA device is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def as_real_tensor(x, name: str = "x", device=None) -> torch.Tensor:
    """Return ``x`` as a float64 tensor, refusing what is not a real number.

    A tensor stays on its device unless ``device`` is given; anything else (lists, numpy
    arrays, scalars) goes to ``device`` or :func:`default_device`. Conversion to float64 is
    exact for every integer below 2**53 and every float16/bfloat16/float32 value.

    Raises
    ------
    TypeError
        If ``x`` has a boolean, complex or other non-real dtype.
    """
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bool or x.is_complex() or not (x.is_floating_point()
                                                           or _is_int(x.dtype)):
            raise TypeError(f"{name} must hold real numbers (int or float), got dtype {x.dtype}")
        if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e8m0fnu):
            x = x.to(torch.float32)  # exact; float8 -> float64 is not supported everywhere
        return x.to(device=device if device is not None else x.device, dtype=F64)
    arr = np.asarray(x)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {arr.dtype}")
    dev = device if device is not None else default_device()
    return torch.as_tensor(arr.astype(np.float64), device=dev)


def _is_int(dtype: torch.dtype) -> bool:
    return dtype in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64,
                     torch.uint16, torch.uint32, torch.uint64)


def as_calibration_tensor(x, name: str = "x", device=None) -> torch.Tensor:
    """Float64 tensor for calibrating a scale: non-empty and finite (0-d becomes shape (1,)).

    Raises
    ------
    TypeError
        If ``x`` is not real-valued.
    ValueError
        If ``x`` is empty or contains NaN or +-Inf.
    """
    t = as_real_tensor(x, name, device)
    if t.numel() == 0:
        raise ValueError(f"{name} is empty: there is nothing to calibrate a scale on")
    if t.ndim == 0:
        t = t.reshape(1)
    finite = torch.isfinite(t)
    if not bool(finite.all()):
        flat = t.reshape(-1)
        bad = int(torch.nonzero(~finite.reshape(-1))[0])
        raise ValueError(
            f"{name} contains a non-finite value ({float(flat[bad])!r} at flat index {bad}); "
            "a scale calibrated on NaN or Inf would be meaningless")
    return t


def pow2(e: torch.Tensor) -> torch.Tensor:
    """Exact ``2.0 ** e`` as float64 for an int64 tensor ``e`` in [-1022, 1023].

    Built from the IEEE 754 bit pattern, so no library ``pow``/``ldexp`` rounding can enter.
    """
    return ((e.to(torch.int64) + 1023) << 52).view(F64)


def floor_log2(a: torch.Tensor) -> torch.Tensor:
    """``floor(log2 a)`` as int64 for positive normal float64 ``a``, from the exponent field.

    Zero and float64 subnormals give -1023 (every caller clamps this to its format's emin,
    which is what ``np.frexp`` followed by the same clamp gives).
    """
    return ((a.view(torch.int64) >> 52) & _EXP_MASK) - 1023
