"""The machine a lecture runs on, measured: its name, memory bandwidth and matmul throughput.

Lecture 12 draws its roofline from these two ceilings. Every figure is a measurement on the
machine that runs it, so it differs from machine to machine and from run to run: each comes as
a :class:`Spread` (median, least and most of several repeats), and nothing here is ever
compared with a fixed number in a test.

The bandwidth is measured the way STREAM does (J. McCalpin, "Memory bandwidth and machine
balance in current high performance computers", IEEE TCCA Newsletter, 1995): a triad
``a = b + s * c`` over arrays far larger than the caches, counted at 3 arrays' bytes; and a
read-only pass (a sum), which is what reading weights is. The throughput is one square matmul
per dtype: float32 and bfloat16 through ``torch.mm``; int8 through the faster of torch's two
int8 kernels on the machine, ``torch._int_mm`` (int32 accumulation) and fbgemm's dynamic int8
linear (the kernel of lecture 12's W8A8 path). Which one is fast depends on the CPU: on an AVX2
processor without AVX-512, ``torch._int_mm`` falls back to a loop about a hundred times slower
than fbgemm, and a roofline drawn from it would sit below what the W8A8 path measures.
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import numbers
import os
import platform
import statistics
import time
import warnings
from dataclasses import dataclass
from typing import Callable

__all__ = ["Spread", "cpu_name", "cores", "repeat_seconds", "stream_bandwidth",
           "matmul_throughput", "MATMUL_DTYPES", "PathUnavailable", "quiet_torch",
           "quantized_engine", "int8_dynamic_module", "quantize_dynamic_linears"]

MATMUL_DTYPES = ("float32", "bfloat16", "int8")


@dataclass(frozen=True)
class Spread:
    """Repeated measurements of one quantity: their median, least and most value (same unit)."""

    median: float
    low: float
    high: float
    repeats: int

    @classmethod
    def of(cls, values) -> "Spread":
        values = [float(v) for v in values]
        if not values:
            raise ValueError("Spread needs at least one value")
        return cls(statistics.median(values), min(values), max(values), len(values))

    def scaled(self, factor: float) -> "Spread":
        """Every value times ``factor``; a negative factor swaps low and high."""
        a, b = self.low * factor, self.high * factor
        return Spread(self.median * factor, min(a, b), max(a, b), self.repeats)

    def inverse(self, numerator: float = 1.0) -> "Spread":
        """``numerator / value`` (seconds -> rate): the least time gives the highest rate.
        Raises ValueError if a value is not positive (a zero time has no rate)."""
        if not self.low > 0:
            raise ValueError(f"inverse needs positive values (a zero time has no rate), got "
                             f"low={self.low!r}")
        return Spread(numerator / self.median, numerator / self.high, numerator / self.low,
                      self.repeats)

    @property
    def relative(self) -> float:
        """(high - low) / median: the run-to-run spread as a fraction of the median."""
        return (self.high - self.low) / self.median if self.median else float("inf")


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else the platform module)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def cores() -> int:
    """Logical CPUs this process may run on (its affinity mask where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


def repeat_seconds(fn: Callable[[], object], repeats: int = 5, warmup: int = 1,
                   device=None) -> Spread:
    """Wall seconds of ``fn()``, ``repeats`` times after ``warmup`` untimed calls.

    On a CUDA ``device`` each run is bracketed by CUDA events on the current stream, and the
    host waits only before the first and after the last run: the runs queue back to back, so
    each interval is GPU time, without a launch gap after an idle stream. Elsewhere (``device``
    None or not CUDA) ``time.perf_counter`` times each call.

    Raises
    ------
    ValueError
        If ``repeats`` < 1 or ``warmup`` < 0.
    TypeError
        If ``repeats`` or ``warmup`` is not an integer (numpy integers accepted).
    """
    for name, v in (("repeats", repeats), ("warmup", warmup)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral):
            raise TypeError(f"{name} must be an int, got {v!r}")
    if repeats < 1 or warmup < 0:
        raise ValueError(f"need repeats >= 1 and warmup >= 0, got {repeats} and {warmup}")
    for _ in range(warmup):
        fn()
    if device is not None:
        import torch
        if torch.device(device).type == "cuda":
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                      for _ in range(repeats)]
            torch.cuda.synchronize()
            for start, end in events:
                start.record()
                fn()
                end.record()
            torch.cuda.synchronize()
            return Spread.of([start.elapsed_time(end) * 1e-3 for start, end in events])
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return Spread.of(times)


def physical_memory() -> int | None:
    """Bytes of physical memory (``sysconf``), or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return None


def _check_fits(name: str, value: int, nbytes: int) -> None:
    """Refuse, before allocating, arrays larger than the machine's memory."""
    memory = physical_memory()
    if memory is not None and nbytes > memory:
        raise ValueError(f"{name}={value} needs {nbytes / 2**30:.1f} GiB of arrays; this "
                         f"machine has {memory / 2**30:.1f} GiB")


def stream_bandwidth(numel: int = 1 << 24, repeats: int = 5) -> dict:
    """Memory bandwidth in bytes per second: STREAM's triad and a read-only sum, on torch.

    Parameters
    ----------
    numel : int, float32 elements per array (default 2^24: 64 MiB each, beyond any cache)
    repeats : int

    Returns
    -------
    dict with "triad" and "read" -> :class:`Spread` of bytes per second. The triad
    ``torch.add(b, c, alpha=s, out=a)`` is one pass over three arrays (12 bytes per element
    counted, as STREAM counts it; write-allocate traffic is not counted); "read" sums one
    array of ``2 * numel`` elements (4 bytes per element). torch uses all its threads.

    Raises
    ------
    ValueError
        If ``numel`` < 1, ``repeats`` < 1, or the five arrays (20 bytes per element) exceed
        the machine's physical memory.
    """
    import torch

    if isinstance(numel, bool) or not isinstance(numel, numbers.Integral) or numel < 1:
        raise ValueError(f"numel must be a positive int, got {numel!r}")
    _check_fits("numel", numel, 20 * numel)
    g = torch.Generator().manual_seed(0)
    a = torch.empty(numel)
    b, c = torch.rand(numel, generator=g), torch.rand(numel, generator=g)
    big = torch.rand(2 * numel, generator=g)
    triad = repeat_seconds(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)
    read = repeat_seconds(lambda: big.sum(), repeats)
    return {"triad": triad.inverse(12.0 * numel), "read": read.inverse(4.0 * 2 * numel)}


def matmul_throughput(dtype: str, n: int = 1024, repeats: int = 5) -> Spread:
    """Operations per second (2 n^3 per product) of one n x n x n matmul in ``dtype``.

    "float32" and "bfloat16": ``torch.mm``; "int8": the faster (by median) of ``torch._int_mm``
    (int8 operands, int32 result) and fbgemm's dynamic int8 linear
    (:func:`int8_dynamic_module`, per-channel weights; it also quantizes its
    float32 input per tensor).
    Raises what torch raises where a dtype has no kernel on this machine.

    Raises
    ------
    ValueError
        If ``dtype`` is not one of :data:`MATMUL_DTYPES`, ``n`` is not a positive multiple
        of 8, or the operands (four n x n float32 arrays) exceed the machine's memory.
    """
    import torch

    if dtype not in MATMUL_DTYPES:
        raise ValueError(f"dtype must be one of {MATMUL_DTYPES}, got {dtype!r}")
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 8 or n % 8:
        raise ValueError(f"n must be a positive multiple of 8, got {n!r}")
    _check_fits("n", n, 16 * n * n)
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    if dtype == "int8":
        a8 = torch.clamp(a * 32, -127, 127).to(torch.int8)
        b8 = torch.clamp(b * 32, -127, 127).to(torch.int8)
        best = repeat_seconds(lambda: torch._int_mm(a8, b8), repeats).inverse(2.0 * n**3)
        if "fbgemm" in torch.backends.quantized.supported_engines:
            lin = torch.nn.Linear(n, n, bias=False)
            with torch.no_grad():
                lin.weight.copy_(b.t())
            q = int8_dynamic_module(lin)
            with torch.no_grad():
                fbgemm = repeat_seconds(lambda: q(a), repeats).inverse(2.0 * n**3)
            if fbgemm.median > best.median:
                best = fbgemm
        return best
    else:
        t = getattr(torch, dtype)
        a, b = a.to(t), b.to(t)
        fn = lambda: torch.mm(a, b)  # noqa: E731
    return repeat_seconds(fn, repeats).inverse(2.0 * n**3)


class PathUnavailable(RuntimeError):
    """A quantized path that cannot run here; the message says why (and what to install)."""


@contextlib.contextmanager
def quiet_torch():
    """torch.ao's deprecation notices and torchao's import messages (printed, logged and
    warned) kept off the lecture's output."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)        # torch's and torchao's loggers hold the real stderr
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stderr(io.StringIO()), \
                    contextlib.redirect_stdout(io.StringIO()):
                yield
    finally:
        logging.disable(previous)


def quantized_engine() -> str:
    """The first of torch's quantized engines this build has (x86, fbgemm, onednn, qnnpack)."""
    import torch
    engines = torch.backends.quantized.supported_engines
    for name in ("x86", "fbgemm", "onednn", "qnnpack"):
        if name in engines:
            return name
    raise PathUnavailable(f"no quantized engine in this torch build ({engines})")


def int8_dynamic_module(linear):
    """One ``torch.nn.Linear`` (left unchanged) as torch's dynamic int8 linear, as in
    :func:`lectures.llm.speed.int8_dynamic`."""
    import torch
    return quantize_dynamic_linears(torch.nn.Sequential(copy.deepcopy(linear)), ["0"])[0]


def quantize_dynamic_linears(module, names):
    """``module`` with the linears named ``names`` replaced, in place, by torch's dynamic int8
    linears (per-channel weights, on :func:`quantized_engine`); returns ``module``."""
    import torch
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    with quiet_torch():
        torch.backends.quantized.engine = quantized_engine()
        return quantize_dynamic(module, {n: per_channel_dynamic_qconfig for n in names},
                                dtype=torch.qint8, inplace=True)
