"""The benchmark scripts still reach into the code they time (they are run by hand, not by the
suite, so a renamed function would otherwise only show when someone next runs them)."""

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_lecture09_wraps_functions_that_exist():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        bench = importlib.import_module("bench_lecture09")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    for module, name, _clock in bench.TIMED:
        assert callable(getattr(importlib.import_module(module), name)), (module, name)
    lecture = importlib.import_module(bench.LECTURE)
    for name, _title in bench.DEMOS:
        assert callable(getattr(lecture, name)), name
