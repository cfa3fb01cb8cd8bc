"""Device choice, input checks and exact power-of-two helpers shared by numfmt.torch."""

from __future__ import annotations

import numpy as np
import torch

from numfmt._validate import as_real_array

F64 = torch.float64
_EXP_MASK = 0x7FF


def default_device() -> torch.device:
    """Return ``cuda`` when a CUDA device is available, else ``cpu``."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


#: Tensor dtypes numfmt.torch reads (converted exactly to float64).
_FLOAT8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu",
                                             "float8_e4m3fnuz", "float8_e5m2fnuz")
                if hasattr(torch, n))
_READABLE = (torch.float16, torch.bfloat16, torch.float32, torch.float64) + _FLOAT8


def check_device(device):
    """Return ``device`` as a torch.device (None stays None), refusing CUDA where there is none.

    Raises
    ------
    TypeError
        If ``device`` is not a str, torch.device or None.
    ValueError
        If it names no device torch knows, or CUDA while ``torch.cuda.is_available()`` is False.
    """
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be a str, a torch.device or None, got {device!r}")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"device={device!r} is not a torch device ({e})") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={device!r} but CUDA is not available here "
                         "(torch.cuda.is_available() is False); use device='cpu'")
    if dev.type == "meta":
        raise ValueError("device='meta' holds no values: numfmt.torch needs real tensors")
    return dev


def check_tensor(x: torch.Tensor, name: str) -> None:
    """Refuse tensors numfmt.torch cannot read: meta tensors (no values), packed or exotic dtypes.

    Raises
    ------
    TypeError
        If the dtype is not real (bool, complex) or not readable (``float4_e2m1fn_x2`` packs two
        values per byte; quantized and bit dtypes).
    ValueError
        If ``x`` is a meta tensor.
    """
    if x.dtype == torch.bool or x.is_complex() or not (x.dtype in _READABLE
                                                          or _is_int(x.dtype)):
        hint = (" (two FP4 values packed per byte: unpack it first, e.g. with "
                "numfmt.packing.unpack_fp4)" if "float4" in str(x.dtype) else "")
        raise TypeError(f"{name} must hold real numbers (int or float), got dtype {x.dtype}"
                        + hint)
    if x.is_meta:
        raise ValueError(f"{name} is a meta tensor: it has a shape but no values to quantize")


def as_real_tensor(x, name: str = "x", device=None) -> torch.Tensor:
    """Return ``x`` as a float64 tensor, refusing what is not a real number.

    A tensor stays on its device unless ``device`` is given; anything else (lists, numpy
    arrays, scalars) goes to ``device`` or :func:`default_device`, through the same check as
    numpy's :func:`numfmt._validate.as_real_array`. Conversion to float64 is exact: integers
    beyond 2**53 are refused (they would round twice), as in numfmt.

    A tensor that requires grad is accepted; the result carries the graph, but rounding is a
    step function, so the gradient through round, MX and NVFP4 is exactly 0 almost everywhere
    (use numfmt.torch.qat for a straight-through estimator).

    Raises
    ------
    TypeError
        If ``x`` has a boolean, complex or other non-real dtype (see :func:`check_tensor`).
    ValueError
        If ``x`` is a meta tensor, holds an integer beyond 2**53, or ``device`` is unusable
        (see :func:`check_device`).
    """
    device = check_device(device)
    if isinstance(x, torch.Tensor):
        check_tensor(x, name)
        if x.dtype in (torch.int64, torch.uint64) and x.numel():
            v = x.view(torch.int64)  # uint64 has no comparison kernels; its top half is < 0
            big = ((v > 2**53) | (v < 0)) if x.dtype == torch.uint64 else \
                (v > 2**53) | (v < -2**53)
            if bool(big.any()):
                bad = int(v[big][0]) % 2**64 if x.dtype == torch.uint64 else int(v[big][0])
                raise ValueError(f"{name} holds the integer {bad}, beyond float64's exact "
                                 "integers (|n| <= 2**53): converting would round it twice")
        if x.dtype in _FLOAT8:
            x = x.to(torch.float32)  # exact; float8 -> float64 is not supported everywhere
        return x.to(device=device if device is not None else x.device, dtype=F64)
    arr = as_real_array(x, name)
    dev = device if device is not None else default_device()
    return torch.tensor(arr, device=dev)  # a copy: the caller's array is never shared


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
    Below -1022 (float64 subnormals) multiply two of them: a product of powers of two is exact.
    """
    return ((e.to(torch.int64) + 1023) << 52).view(F64)


def floor_log2(a: torch.Tensor) -> torch.Tensor:
    """``floor(log2 a)`` as int64 for positive normal float64 ``a``, from the exponent field.

    Zero and float64 subnormals give -1023 (every caller clamps this to its format's emin,
    which is what ``np.frexp`` followed by the same clamp gives).
    """
    return ((a.view(torch.int64) >> 52) & _EXP_MASK) - 1023


# ---------------------------------------------------------------- working through large tensors
#: Elements per chunk on the CPU: a few float32/float64 working buffers of it stay in L2.
CHUNK = 1 << 17

_NUMPY_OF = {torch.float64: np.float64, torch.float32: np.float32, torch.int64: np.int64,
             torch.int32: np.int32, torch.uint8: np.uint8}


def new_result(n: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A fresh 1-D tensor of ``n`` elements for a result that every element will be written to.

    On the CPU the memory comes from numpy (``torch.from_numpy(np.empty(n))``): numpy asks the
    kernel for transparent huge pages on large arrays, torch's allocator does not, and first
    touching fresh 4 KiB pages costs about twice as much as huge pages. The tensor is an
    ordinary CPU tensor, except that it cannot be resized.
    """
    if device.type == "cpu" and dtype in _NUMPY_OF:
        return torch.from_numpy(np.empty(n, _NUMPY_OF[dtype]))
    return torch.empty(n, dtype=dtype, device=device)


def spans(n: int, device: torch.device, per: int = 1):
    """``(start, stop)`` pairs covering ``range(n)``: chunks of about ``CHUNK`` elements (``per``
    elements to one index) on the CPU, where cache-sized working buffers beat full-size
    temporaries; one span elsewhere (a GPU wants few large kernels)."""
    step = n if device.type != "cpu" else max(1, CHUNK // max(1, per))
    return [(i, min(i + step, n)) for i in range(0, n, step)] or [(0, 0)]


class Scratch:
    """Working buffers reused from chunk to chunk, so each is faulted in once per call."""

    def __init__(self, device: torch.device):
        self.device, self._bufs = device, {}

    def const(self, value, dtype: torch.dtype) -> torch.Tensor:
        """``value`` as a 0-d tensor, made once (a Python int costs a conversion per call)."""
        key = ("const", value, dtype)
        if key not in self._bufs:
            self._bufs[key] = torch.tensor(value, dtype=dtype, device=self.device)
        return self._bufs[key]

    def __call__(self, key: str, dtype: torch.dtype, n: int) -> torch.Tensor:
        b = self._bufs.get(key)
        if b is None or b.dtype != dtype or b.numel() < n:
            b = self._bufs[key] = torch.empty(n, dtype=dtype, device=self.device)
        return b if b.numel() == n else b[:n]  # a slice costs a few microseconds per chunk


def may_hold_nan(t: torch.Tensor) -> bool:
    """Whether ``t`` (floating) may hold a NaN: exact on the CPU (one read pass: ``amax``
    propagates NaN); always True elsewhere, so that a GPU never waits on a host round trip."""
    if t.device.type != "cpu":
        return True
    return t.numel() > 0 and bool(torch.isnan(torch.amax(t)))


class _StepGradient(torch.autograd.Function):
    """``result`` as a function of ``x`` whose gradient is 0: rounding is a step function."""

    @staticmethod
    def forward(ctx, x, result):
        ctx.x_meta = (x.shape, x.dtype, x.device)
        return result.clone()

    @staticmethod
    def backward(ctx, grad):
        shape, dtype, device = ctx.x_meta
        return torch.zeros(shape, dtype=dtype, device=device), None


def step_of(x, result: torch.Tensor) -> torch.Tensor:
    """``result`` attached to ``x``'s graph with gradient 0 where ``x`` requires grad (the
    kernels write into preallocated buffers, which autograd cannot follow); else ``result``."""
    if isinstance(x, torch.Tensor) and x.requires_grad and torch.is_grad_enabled():
        return _StepGradient.apply(x, result)
    return result


def calibration_input(x, name: str = "x", device=None) -> torch.Tensor:
    """As :func:`as_calibration_tensor`, but a float32 tensor stays float32 (no float64 copy)
    and a float64 tensor is checked without a full-size mask.

    float32 holds its values exactly, and every quantizer that reads this widens exactly
    where it needs float64. Finiteness is checked with one sum (finite unless some value is
    not, or the sum overflows; only then are the values checked one by one).
    """
    if not (isinstance(x, torch.Tensor) and x.dtype in (torch.float32, F64)):
        return as_calibration_tensor(x, name, device)
    check_tensor(x, name)
    device = check_device(device)
    t = x.detach() if device is None else x.detach().to(device)
    if t.numel() == 0 or not bool(torch.isfinite(t.sum())):
        as_calibration_tensor(t, name)  # raises, naming the first non-finite value
    return t.reshape(1) if t.ndim == 0 else t


def absmax_rows(rows: torch.Tensor) -> torch.Tensor:
    """``rows.abs().amax(dim=-1)`` of a 2-D tensor (n, k), in its dtype, exact.

    Through a reused chunk-sized ``|x|`` buffer on the CPU (no full-size temporary); torch's
    ``aminmax(dim=-1)`` would need none either but runs 3-4x slower than ``abs`` + ``amax``.
    """
    n, k = rows.shape
    out = torch.empty(n, dtype=rows.dtype, device=rows.device)
    s = Scratch(rows.device)
    # Rows shorter than 32 reduce slowly on the CPU (2-8x slower per element than rows of
    # 32 or more): fold each row's halves together first (max is exact in any order).
    fold = rows.device.type == "cpu" and k < 32 and k % 2 == 0
    for i, j in spans(n, rows.device, per=k):
        a = s("a", rows.dtype, (j - i) * k).view(j - i, k)
        torch.abs(rows[i:j], out=a)
        if fold:
            h = s("h", rows.dtype, (j - i) * (k // 2)).view(j - i, k // 2)
            torch.maximum(a[:, :k // 2], a[:, k // 2:], out=h)
            a = h
        torch.amax(a, dim=-1, out=out[i:j])
    return out
