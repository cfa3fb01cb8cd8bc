"""Lecture scripts. Each ``NN_topic.py`` runs on its own; notebooks, widgets and tests reuse
its experiment functions through :func:`lecture` (``lecture(8)`` is lectures/08_real_model.py),
since a module name that starts with a digit cannot be written in an ``import`` statement."""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path

__all__ = ["lecture", "one_torch_thread"]


def lecture(number: int):
    """The module of lecture ``number`` (1-99): ``lectures/NN_topic.py``, imported once.

    Raises
    ------
    ValueError
        If ``number`` is not an int, or no single lecture file starts with its two digits.
    """
    if isinstance(number, bool) or not isinstance(number, int):
        raise ValueError(f"number must be an int, got {number!r}")
    found = sorted(Path(__file__).parent.glob(f"{number:02d}_*.py"))
    if len(found) != 1:
        raise ValueError(f"number: expected one lectures/{number:02d}_*.py, found "
                         f"{[p.name for p in found]}")
    return importlib.import_module(f"lectures.{found[0].stem}")


@contextlib.contextmanager
def one_torch_thread():
    """torch on one thread within the block, then back to its thread count (also after an
    error).

    For lectures whose matrices are small (lecture 06's MLP, lecture 08's perplexities over a
    few windows of a 576-wide model): one thread computes them nearly as fast as two on idle
    cores, while on shared cores torch's idle threads spin waiting for each other and cost
    several times the CPU time. No printed number depends on the thread count.
    """
    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
