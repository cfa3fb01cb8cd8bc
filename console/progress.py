"""Progress of a long computation on stderr: a tqdm bar on a terminal, plain lines otherwise.

A redirected or captured stderr (a log file, CI, a notebook) gets one line per step instead of
tqdm's carriage-return frames, so a log reads ``GPTQ INT4 g128: 3/30 (12 s, about 108 s left)``
line by line and never holds half-drawn bars. The estimate of what is left assumes the steps
left take as long as the steps done, on average (:func:`with_time_left`, which lectures that log
steps of their own use too). Nothing is written to stdout: a lecture's printed output stays the
same with or without progress.

Usage::

    from console.progress import progress

    for layer in progress(range(30), "GPTQ INT4 g128"):
        ...
    with progress(total=34, desc="perplexities") as bar:     # manual steps
        ...
        bar.update(1)

This module knows nothing of numerics; tqdm (a well-kept library) draws the bar when it is
installed, and the line log needs nothing.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterable, TextIO

from console.i18n import Domain

_ = Domain("console", os.path.join(os.path.dirname(__file__), "locale")).gettext

__all__ = ["LineProgress", "is_notebook_stream", "progress", "with_time_left"]


class LineProgress:
    """A progress log with tqdm's small interface (iterate, ``update``, ``close``, ``with``),
    writing ``"{desc}: {n}/{total} ({seconds} s, about {left} s left)"`` as one line per step
    to ``file`` (without the estimate when the total is unknown or reached).

    Parameters
    ----------
    iterable : iterable or None
        What to iterate over (``None`` for manual :meth:`update` calls).
    desc : str
        The label of every line.
    total : int or None
        Number of steps (``len(iterable)`` when it has one); shown as ``n/total``.
    file : text stream
        Where the lines go (stderr by default).
    """

    def __init__(self, iterable: Iterable | None = None, desc: str = "",
                 total: int | None = None, file: TextIO | None = None):
        self.iterable = iterable
        self.desc = desc
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)
        self.total = total
        self.file = sys.stderr if file is None else file
        self.n = 0
        self._start = time.monotonic()

    def __iter__(self):
        for item in self.iterable:
            yield item
            self.update(1)

    def update(self, n: int = 1) -> None:
        """Count ``n`` more steps done and write one line."""
        self.n += n
        count = str(self.n) if self.total is None else f"{self.n}/{self.total}"
        line = _("{desc}: {count}").format(desc=self.desc, count=count) if self.desc else count
        print(with_time_left(line, self.n, self.total, time.monotonic() - self._start),
              file=self.file, flush=True)

    def close(self) -> None:
        """Nothing to release (tqdm's interface)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def with_time_left(line: str, done: int, total: int | None, elapsed: float) -> str:
    """`line` (a step's log line) with the seconds spent so far and, while steps remain, an
    estimate of the seconds left: the mean step so far times the steps left.

    Parameters
    ----------
    line : str
        The step's line, e.g. ``"GPTQ INT4 g128: 3/30"``.
    done, total : int, int or None
        Steps done and steps in all (None when unknown: no estimate).
    elapsed : float
        Seconds since the first step began.

    Returns
    -------
    str
        ``"GPTQ INT4 g128: 3/30 (12 s, about 108 s left)"``; without the estimate once
        ``done`` reaches ``total``, when ``total`` is None or ``done`` is not positive.
    """
    if total is None or done <= 0 or done >= total:
        return _("{line} ({elapsed:.0f} s)").format(line=line, elapsed=elapsed)
    return _("{line} ({elapsed:.0f} s, about {left:.0f} s left)").format(
        line=line, elapsed=elapsed, left=elapsed / done * (total - done))


def is_notebook_stream(file) -> bool:
    """Whether `file` is a Jupyter kernel's output stream: a notebook stores what is written
    there with its outputs, so a log written to it keeps out what differs run to run (times)."""
    return type(file).__module__.split(".")[0] == "ipykernel"


def _is_terminal(file) -> bool:
    try:
        return bool(file.isatty())
    except (AttributeError, ValueError):     # no isatty, or a closed stream
        return False


def progress(iterable: Iterable | None = None, desc: str = "", total: int | None = None,
             file: TextIO | None = None):
    """A tqdm bar (``leave=False``) when ``file`` (stderr by default) is a terminal and tqdm is
    installed; otherwise a :class:`LineProgress` writing one line per step.

    Both iterate over ``iterable``, take ``update(n)`` and work as context managers.
    """
    file = sys.stderr if file is None else file
    if _is_terminal(file):
        try:
            from tqdm import tqdm
        except ImportError:
            pass
        else:
            return tqdm(iterable, desc=desc, total=total, file=file, leave=False)
    return LineProgress(iterable, desc, total, file)
