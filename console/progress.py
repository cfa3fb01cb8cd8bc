"""Progress of a long computation on stderr: a tqdm bar on a terminal, plain lines otherwise.

A redirected or captured stderr (a log file, CI, a notebook) gets one line per step instead of
tqdm's carriage-return frames, so a log reads ``GPTQ INT4 g128: 3/30`` line by line and never
holds half-drawn bars. Nothing is written to stdout: a lecture's printed output stays the same
with or without progress.

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

import sys
import time
from typing import Iterable, TextIO

__all__ = ["LineProgress", "progress"]


class LineProgress:
    """A progress log with tqdm's small interface (iterate, ``update``, ``close``, ``with``),
    writing ``"{desc}: {n}/{total} ({seconds} s, about {left} s left)"`` as one line per step
    to ``file`` (the estimate of what is left only while a known total is not reached).

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
        of = f"/{self.total}" if self.total is not None else ""
        seconds = time.monotonic() - self._start
        prefix = f"{self.desc}: " if self.desc else ""
        # what is left, at the pace so far (steps of unequal length make it a rough guess)
        left = (f", about {seconds * (self.total - self.n) / self.n:.0f} s left"
                if self.total and 0 < self.n < self.total else "")
        print(f"{prefix}{self.n}{of} ({seconds:.0f} s{left})", file=self.file, flush=True)

    def close(self) -> None:
        """Nothing to release (tqdm's interface)."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


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
