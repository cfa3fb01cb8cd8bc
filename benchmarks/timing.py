"""The one timing helper the benchmark scripts share (run them as scripts: this folder is on
sys.path then)."""

import statistics
import time


def median_seconds(fn, repeat: int, warmup: bool = True) -> float:
    """Median wall time in seconds of ``repeat`` calls of ``fn()``, after one untimed call
    when ``warmup`` (caches, lazy imports and first-touch pages kept out of the figure)."""
    if warmup:
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)
