"""Benchmark scripts (run each as ``python benchmarks/<name>.py``) and the one module a lecture
imports from here: :mod:`benchmarks.gpu_timing`, the GPU timing behind lecture 04's throughput
table and ``gpu_check.py``."""
