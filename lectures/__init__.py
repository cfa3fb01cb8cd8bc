"""Lecture scripts. Each ``NN_topic.py`` runs on its own; notebooks, widgets and tests reuse
its experiment functions through :func:`lecture` (``lecture(8)`` is lectures/08_real_model.py),
since a module name that starts with a digit cannot be written in an ``import`` statement."""

from __future__ import annotations

import importlib
from pathlib import Path

__all__ = ["lecture"]


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
