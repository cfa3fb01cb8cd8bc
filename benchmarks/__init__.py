"""Benchmark scripts, run each as ``python benchmarks/<name>.py``. Nothing outside benchmarks/
imports from here; the timer they share with the lectures is ``lectures/machine.py``'s
``repeat_seconds``."""
