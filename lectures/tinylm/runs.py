"""Many training runs by label and seed: run them on worker processes, collect each label's
runs as they finish, print a demo as soon as the runs it reads are done, and compare two labels
paired by seed.

A lecture names its jobs ``(label, job)``, in the order it prints them, and a module-level
function that turns a job into a result (worker processes import it); :func:`run_all` returns
:class:`Runs`, ``results[label]`` holding that label's results in the order of its jobs (seed
order). Every label shares its seeds with the others (initial weights, batches, every random
draw), so two labels are compared seed by seed (:func:`compare`).
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from dataclasses import dataclass

import numpy as np

from console.progress import is_notebook_stream, with_time_left
from lectures.stats import T_975


@dataclass
class Runs:
    """Every training run of a lecture: results[label] is a list, one RunResult per seed."""
    workload: object
    results: dict


def run_all(workload, jobs, fn, *, workers: int = 2, progress=None, on_label=None,
            meanwhile=None) -> Runs:
    """``fn(job)`` for every ``(label, job)`` of ``jobs``, on ``workers`` spawned processes
    (in this process, one after another, when ``workers`` is 1).

    ``meanwhile()``, if given, runs in this process while the workers start on the jobs (with
    one worker: before them); no result is collected until it returns.

    As each label's last job finishes, its results enter ``results`` (in job order) and, if
    given, ``on_label(runs)`` is called with the Runs so far; ``progress(label, result)`` is
    called as each job finishes. At the end ``results`` holds every label in the order of its
    first job.
    """
    jobs = list(jobs)
    keys = [label for label, _job in jobs]
    order = list(dict.fromkeys(keys))
    runs = Runs(workload, {})
    done: dict = {label: {} for label in order}

    def finished(i: int, result) -> None:
        label = keys[i]
        done[label][i] = result
        if progress is not None:
            progress(label, result)
        if len(done[label]) == keys.count(label):
            runs.results[label] = [done[label][j] for j in sorted(done[label])]
            if on_label is not None:
                on_label(runs)

    if workers > 1 and len(jobs) > 1:
        in_processes(fn, [job for _label, job in jobs], workers, finished, meanwhile)
    else:
        if meanwhile is not None:
            meanwhile()
        for i, (_label, job) in enumerate(jobs):
            finished(i, fn(job))
    runs.results = {label: runs.results[label] for label in order}
    return runs


def in_processes(fn, jobs, workers: int, on_done, meanwhile=None) -> None:
    """``fn(job)`` for each job on ``workers`` spawned processes; ``on_done(index, result)``
    as each finishes, in completion order; ``meanwhile()``, if given, in this process once the
    jobs are submitted.

    An interrupt (Ctrl-C, or Kernel > Interrupt in a notebook) or an exception, from a job or
    from ``on_done``, cancels the jobs not yet started, so it takes effect once the running
    ones end; the pool's own exit would otherwise wait for every job submitted.
    """
    import concurrent.futures as cf
    import multiprocessing as mp
    # spawn, not fork: a forked child would inherit torch's thread pools mid-state.
    with cf.ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(fn, job): i for i, job in enumerate(jobs)}
        try:
            if meanwhile is not None:
                meanwhile()
            for fut in cf.as_completed(futures):
                on_done(futures[fut], fut.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise


def progress_lines(total: int, line, desc: str = "", unit: str = ""):
    """``(update(label, result), close())`` for :func:`run_all`: a tqdm bar on a terminal,
    else one line per finished run on stderr, ``line(i, total, label, result)`` followed by
    the seconds spent and an estimate of the seconds left (:func:`console.progress.
    with_time_left`), except in a notebook, which stores the lines with its outputs."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr)
        return (lambda label, r: bar.update(1)), bar.close
    count, start = [0], time.monotonic()

    def log(label, r):
        count[0] += 1
        text = line(count[0], total, label, r)
        print(run_line_with_time(text, count[0], total, start), file=sys.stderr, flush=True)
    return log, (lambda: None)


def run_line_with_time(text: str, done: int, total: int, start: float) -> str:
    """A finished run's progress line with the time spent since ``start`` (a
    ``time.monotonic()`` reading) and the time left, where stderr is a log; as it is in a
    notebook."""
    if is_notebook_stream(sys.stderr):
        return text
    return with_time_left(text, done, total, time.monotonic() - start)


def printing():
    """Around a demo printed while the runs' progress shows: on a terminal, tqdm's bar is
    cleared first and drawn again after (so the bar and the text do not mix)."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm
        return tqdm.external_write_mode(file=sys.stdout)
    return contextlib.nullcontext()


def demo_queue(demos, labels_all):
    """An ``on_label(runs)`` for :func:`run_all` that prints the demos in order, each as soon
    as its runs are done. ``demos``: ``[(labels, print_demo(runs))]``, ``labels`` the runs the
    demo reads (None: every label of ``labels_all``)."""
    queue = list(demos)

    def on_label(runs: Runs) -> None:
        while queue and all(label in runs.results for label in (
                labels_all if queue[0][0] is None else queue[0][0])):
            with printing():
                queue.pop(0)[1](runs)
                sys.stdout.flush()
    return on_label


def finals(runs: Runs, label: str) -> np.ndarray:
    """Final validation loss of each seed's run, bits per byte."""
    return np.array([r.final_val for r in runs.results[label]])




def paired(diffs, noise: str = "t") -> dict:
    """The mean of paired differences and its noise.

    Parameters
    ----------
    diffs : sequence of float, one difference per seed (or per batch)
    noise : "t" or "range"
        "t": the half-width of the 95 % t interval of the mean (a finding when the interval
        excludes zero); "range": the range of the differences (a finding when the mean exceeds
        it, so that every difference has the mean's sign).

    Returns
    -------
    {"gap": mean, "diffs": list, "noise": half-width or range, "low", "high": the interval
    (gap -/+ noise), "finding": bool}

    Raises
    ------
    ValueError
        For an unknown ``noise``.
    """
    if noise not in ("t", "range"):
        raise ValueError(f"noise must be 't' or 'range', got {noise!r}")
    d = np.asarray(diffs, dtype=np.float64)
    n = len(d)
    gap = float(d.mean())
    if noise == "range":
        half = float(np.ptp(d))
        finding = abs(gap) > half
    else:
        half = T_975[n - 1] * float(d.std(ddof=1)) / math.sqrt(n) if n > 1 else float("inf")
        finding = n > 1 and abs(gap) > half
    return {"gap": gap, "diffs": [float(v) for v in d], "noise": half,
            "low": gap - half, "high": gap + half, "finding": finding}


def compare(runs: Runs, a: str, b: str, noise: str = "t") -> dict:
    """Final loss of label a minus label b, paired by seed (:func:`paired`): every label shares
    a seed's initial weights, batches and draws, so the seeds' common part cancels in the
    per-seed differences."""
    return paired(finals(runs, a) - finals(runs, b), noise)
