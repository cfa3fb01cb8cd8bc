"""A job for tests of lectures.tinylm.loop.in_processes, in a module of its own so that the
spawned worker processes import only this (not torch, not the test module)."""

import time
from pathlib import Path


def mark_and_wait(job):
    """Leave a file named after the job in its folder, then take a little time."""
    folder, i = job
    (Path(folder) / f"started.{i}").touch()
    time.sleep(0.3)
    return i
