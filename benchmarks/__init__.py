"""Benchmark scripts, run each as ``python benchmarks/<name>.py``. Nothing outside benchmarks/
imports from here; the GPU timing they share with lecture 04 is ``lectures/gpu_timing.py``."""
