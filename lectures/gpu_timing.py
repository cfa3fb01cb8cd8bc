"""Throughput of low-precision GEMMs and quantize kernels, timed by
:func:`lectures.machine.repeat_seconds` (CUDA events on a GPU, a clock elsewhere).

Lecture 04 prints its throughput table with these, and ``benchmarks/gpu_check.py`` calls them
(data flows one way: benchmarks import the lectures' helpers, never the reverse). Every function
runs on the CPU too (at small sizes), so it is tested without a GPU; CPU timings are only a
smoke test, not a result.
"""

from __future__ import annotations

from typing import Callable

import torch

from lectures.hardware import find_datasheet
from lectures.machine import repeat_seconds

__all__ = ["GEMM_KINDS", "QUANT_BYTES", "QUANT_KERNELS",
           "gemm_setup", "gemm_tflops", "quantize_setup",
           "quantize_bandwidth", "quantize_rows", "peak_bandwidth_gbs",
           "peak_from_properties", "error_text", "throughput_rows"]

GEMM_KINDS = ("bf16", "fp8 per-tensor", "fp8 per-row", "int8")
#: Quantize-path kernels and the bytes per bf16 element each must move at least.
QUANT_BYTES = {"amax": 2, "cast to E4M3": 3, "scale + cast (eager, 2 kernels)": 3}
QUANT_KERNELS = tuple(QUANT_BYTES)


def gemm_setup(kind: str, n: int, device) -> Callable[[], torch.Tensor]:
    """Return a closure that runs one n x n x n GEMM of ``kind`` on prepared operands.

    "bf16": ``torch.mm``; "fp8 per-tensor" / "fp8 per-row": ``torch._scaled_mm`` on E4M3
    with float32 scales of shape () or (n, 1) and (1, n), bf16 output, second operand
    column-major; "int8": ``torch._int_mm`` (int32 output), second operand column-major.

    Raises
    ------
    ValueError
        If ``kind`` is unknown or ``n`` is not a positive multiple of 16.
    """
    if kind not in GEMM_KINDS:
        raise ValueError(f"kind must be one of {GEMM_KINDS}, got {kind!r}")
    if n <= 16 or n % 16:
        raise ValueError(f"n must be a multiple of 16 above 16, got {n}")
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)  # used as (N, K); b.t() is column-major
    if kind == "bf16":
        a16, b16 = a.to(torch.bfloat16), b.to(torch.bfloat16).t()
        return lambda: torch.mm(a16, b16)
    if kind == "int8":
        a8 = torch.clamp(a * 32, -127, 127).to(torch.int8)
        b8 = torch.clamp(b * 32, -127, 127).to(torch.int8).t()
        return lambda: torch._int_mm(a8, b8)
    a8, b8 = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t()
    if kind == "fp8 per-tensor":
        sa = torch.ones((), dtype=torch.float32, device=device)
        sb = torch.ones((), dtype=torch.float32, device=device)
    else:
        sa = torch.ones(n, 1, dtype=torch.float32, device=device)
        sb = torch.ones(1, n, dtype=torch.float32, device=device)
    return lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def gemm_tflops(kind: str, n: int, device, warmup: int = 5, iters: int = 20) -> dict:
    """Time one GEMM kind at n^3; returns ``{"kind", "n", "ms", "tflops"}`` (2 n^3 flop)."""
    ms = repeat_seconds(gemm_setup(kind, n, device), iters, warmup, device).median * 1e3
    return {"kind": kind, "n": n, "ms": ms, "tflops": 2.0 * n**3 / (ms * 1e-3) / 1e12}


def quantize_setup(kernel: str, numel: int, device) -> tuple[Callable[[], object], int]:
    """A quantize-path kernel on a bf16 tensor of ``numel`` elements, and its minimum traffic.

    "amax": ``max |x|`` in one reduction (reads 2 bytes per element). "cast to E4M3": the
    saturating cast bf16 -> float8_e4m3fn (reads 2, writes 1). "scale + cast (eager, 2
    kernels)": ``(x * inv_scale).to(float8)``, which eager PyTorch runs as two kernels with a
    bf16 temporary; counted at the same 3 bytes per element a fused kernel would move, so its
    GB/s shows what the unfused version costs.

    Returns
    -------
    (fn, nbytes) : the closure and the bytes counted for the bandwidth

    Raises
    ------
    ValueError
        If ``kernel`` is unknown or ``numel`` < 1.
    """
    if kernel not in QUANT_KERNELS:
        raise ValueError(f"kernel must be one of {QUANT_KERNELS}, got {kernel!r}")
    if numel < 1:
        raise ValueError(f"numel must be positive, got {numel}")
    x = torch.ones(numel, dtype=torch.bfloat16, device=device)
    nbytes = QUANT_BYTES[kernel] * numel
    if kernel == "amax":
        return (lambda: torch.linalg.vector_norm(x, ord=float("inf"))), nbytes
    if kernel == "cast to E4M3":
        return (lambda: x.to(torch.float8_e4m3fn)), nbytes
    inv = torch.tensor(0.5, dtype=torch.bfloat16, device=device)
    return (lambda: (x * inv).to(torch.float8_e4m3fn)), nbytes


def quantize_bandwidth(kernel: str, numel: int, device, warmup: int = 3,
                       iters: int = 10) -> dict:
    """Time a quantize kernel; returns ``{"kernel", "gbytes", "ms", "gbs"}`` (GB = 1e9 bytes)."""
    fn, nbytes = quantize_setup(kernel, numel, device)
    ms = repeat_seconds(fn, iters, warmup, device).median * 1e3
    return {"kernel": kernel, "gbytes": nbytes / 1e9, "ms": ms, "gbs": nbytes / (ms * 1e-3) / 1e9}


def quantize_rows(numel: int, device, iters: int = 10, peak_gbs: float | None = None,
                  errors: str = "raise") -> list[dict]:
    """:func:`quantize_bandwidth` of every kernel in :data:`QUANT_KERNELS`, each dict with
    ``"of_peak"`` added (GB/s over ``peak_gbs``; None when the peak is unknown).

    ``errors`` as in :func:`throughput_rows`: "record" gives a failing kernel NaN numbers and
    an ``"error"`` text.
    """
    if errors not in ("raise", "record"):
        raise ValueError(f'errors must be "raise" or "record", got {errors!r}')
    rows = []
    for kernel in QUANT_KERNELS:
        try:
            q = quantize_bandwidth(kernel, numel, device, iters=iters)
        except Exception as exc:  # noqa: BLE001 - recorded in the row, as asked
            if errors == "raise":
                raise
            q = {"kernel": kernel, "gbytes": QUANT_BYTES[kernel] * numel / 1e9,
                 "ms": float("nan"), "gbs": float("nan"), "error": error_text(exc)}
        q["of_peak"] = q["gbs"] / peak_gbs if peak_gbs else None
        rows.append(q)
    return rows


def peak_bandwidth_gbs(device) -> float | None:
    """Peak DRAM bandwidth of a CUDA device in GB/s, or None when unknown (or not CUDA).

    The data sheet's figure (:data:`lectures.hardware.DATASHEETS`, looked up by name);
    otherwise from the memory clock and bus width when torch reports them (double data rate).
    """
    dev = torch.device(device)
    if dev.type != "cuda" or not torch.cuda.is_available():
        return None
    return peak_from_properties(torch.cuda.get_device_properties(dev))


def peak_from_properties(props) -> float | None:
    """Peak bandwidth in GB/s from an object with ``name`` (and optionally ``memory_clock_rate``
    in kHz and ``memory_bus_width`` in bits); None when neither the name nor the fields tell."""
    sheet = find_datasheet(getattr(props, "name", ""))
    if sheet is not None:
        return sheet.bandwidth_gbs
    clock_khz = getattr(props, "memory_clock_rate", None)
    bus_bits = getattr(props, "memory_bus_width", None)
    if clock_khz and bus_bits:
        return 2.0 * clock_khz * 1e3 * bus_bits / 8 / 1e9
    return None


def error_text(exc: BaseException, width: int = 100) -> str:
    """``"Type: first line of the message"``, cut to ``width`` characters, for a table cell."""
    lines = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {lines[0] if lines else ''}"
    return text if len(text) <= width else text[:width - 3] + "..."


def throughput_rows(sizes=(4096, 8192), device=None, iters: int = 10,
                    errors: str = "raise") -> list[dict]:
    """Every GEMM kind at every size: a list of :func:`gemm_tflops` dicts, plus
    ``"vs_bf16"``, the ratio to bf16 at the same size.

    With ``errors="record"`` a kind that raises (an unsupported kernel, out of memory) gives a
    row with NaN numbers and ``"error"``, the exception as text, and the others still run;
    ``errors="raise"`` (default) lets the exception through.

    Raises
    ------
    ValueError
        If ``errors`` is neither "raise" nor "record".
    """
    if errors not in ("raise", "record"):
        raise ValueError(f'errors must be "raise" or "record", got {errors!r}')
    device = device if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    rows = []
    for n in sizes:
        base = float("nan")
        for kind in GEMM_KINDS:
            try:
                r = gemm_tflops(kind, n, device, iters=iters)
            except Exception as exc:  # noqa: BLE001 - recorded in the row, as asked
                if errors == "raise":
                    raise
                r = {"kind": kind, "n": n, "ms": float("nan"), "tflops": float("nan"),
                     "error": error_text(exc)}
            base = r["tflops"] if kind == "bf16" else base
            r["vs_bf16"] = r["tflops"] / base
            rows.append(r)
    return rows
