"""The real-model lectures' results as data: :mod:`lectures.results` with the harness's own
result classes (:class:`~lectures.llm.evaluate.PairedRatio`, the quantizer settings) known to
the reader, so that ``load_results(path, L)`` rebuilds what lectures 08, 09 and 11 saved.
"""

from __future__ import annotations

from console import save_path
from lectures import results
from lectures.results import save_results, stored_path

__all__ = ["load_full_run", "load_results", "save_path", "save_results", "stored_path"]


def _modules(module) -> tuple:
    from lectures.llm import evaluate, quantizers     # classes results may hold
    return evaluate, quantizers, module


def load_results(path, module) -> tuple[dict, dict]:
    """(results, about) from a file of :func:`save_results`, the dataclasses rebuilt from the
    classes of ``module`` (the lecture that saved them) and of the harness
    (:func:`lectures.results.load_results`, which says what it raises)."""
    return results.load_results(path, *_modules(module))


def load_full_run(path, module, command: str, demos) -> dict:
    """The results of a stored full run of ``command`` (e.g. "08_real_model.py"), rebuilt from
    ``module``'s classes and the harness's (:func:`lectures.results.load_full_run`: a
    ValueError for a ``--quick`` run or one that lacks one of ``demos``)."""
    return results.load_full_run(path, _modules(module), command, demos)
