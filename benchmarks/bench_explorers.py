"""How long each notebook explorer takes to redraw after one control changes (kernel time).

Every ``*_explorer`` function of ``lectures/widgets/lecture*.py`` is built with its defaults and
its first figure rendered (as a kernel shows it when the explorer is built); then each of its
controls is moved one step (the next menu entry, one slider step, the checkbox
toggled) a few times, and the time from the change to a finished PNG (compute, draw and the
inline backend's rendering) is recorded twice: as wall time and as this process's CPU time
(``time.process_time``), which is what the kernel spends and what other programs on a loaded
machine do not inflate (the explorers are single-threaded numpy and matplotlib, so on an idle
machine the two agree). The goal is 0.3 s of kernel time per redraw on a 2-core machine; the
table prints the median and the worst control against it, with the machine's load, and against
a reference measured in the same run (an empty two-panel figure rendered to PNG).

Explorers whose constructor needs an argument (notebook 08's, over a loaded language model)
are listed and skipped unless ``--model`` is given, which loads the model as notebook 08 does
(its workload, ``lectures.widgets.lecture08.NOTEBOOK``). Every change of that explorer scores
the model once, so it cannot meet the goal (benchmarks/README.md has the figures; notebook 08
says so next to it). Notebook 09's explorer is synthetic and
is timed with the others.

Run: ``.venv/bin/python benchmarks/bench_explorers.py [--repeats N] [--model] [name-filter]``
(needs the notebooks extra).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import io
import os
import statistics
import sys
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from IPython.core.pylabtools import print_figure  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from lectures.widgets.explorer import Explorer  # noqa: E402

GOAL_S = 0.3


def explorers(name_filter: str = ""):
    """(module.function name, constructor) for every explorer the widget modules define."""
    for path in sorted((ROOT / "lectures" / "widgets").glob("lecture*.py")):
        module = importlib.import_module(f"lectures.widgets.{path.stem}")
        for name, fn in inspect.getmembers(module, inspect.isfunction):
            if (name.endswith("_explorer") and fn.__module__ == module.__name__
                    and inspect.signature(fn).return_annotation in (Explorer, "Explorer")):
                label = f"{path.stem}.{name}"
                if name_filter in label:
                    yield label, fn


def next_value(w):
    """A different legal value for one control, or None where there is no obvious step."""
    if hasattr(w, "options") and len(getattr(w, "options", ())) > 1:
        values = [o[1] if isinstance(o, tuple) else o for o in w.options]
        i = values.index(w.value) if w.value in values else 0
        return values[(i + 1) % len(values)]
    if isinstance(w.value, bool):
        return not w.value
    if hasattr(w, "step") and hasattr(w, "max") and hasattr(w, "min"):
        if type(w).__name__ == "FloatLogSlider":
            up = w.value * w.base ** w.step
            return up if up <= w.base ** w.max else w.value / w.base ** w.step
        up = w.value + w.step
        return up if up <= w.max else w.value - w.step
    return None


def redraw_seconds(ex: Explorer, control: str, repeats: int) -> list[tuple[float, float]]:
    """(wall s, CPU s) from a change of ``control`` to a rendered PNG, ``repeats`` times."""
    w, out = ex.controls[control], []
    for _ in range(repeats):
        new = next_value(w)
        if new is None:
            return []
        t0, c0 = time.perf_counter(), time.process_time()
        w.value = new  # the Explorer observes it and recomputes and redraws
        rendered(ex)  # what the kernel then sends: the figure as a PNG
        out.append((time.perf_counter() - t0, time.process_time() - c0))
        plt.close("all")
    return out


def rendered(ex: Explorer) -> bytes:
    """The PNG a kernel sends for the explorer's figure: the explorer's own rendering where it
    has one, else the inline backend's (IPython's ``print_figure`` with ``bbox_inches="tight"``)."""
    if hasattr(ex, "png"):
        return ex.png()
    return print_figure(ex.figure, "png", bbox_inches="tight")


def reference_seconds(repeats: int) -> float:
    """Median CPU time to render an empty two-panel figure: the floor every redraw pays."""
    out = []
    for _ in range(max(repeats, 3)):
        c0 = time.process_time()
        fig, _ = plt.subplots(1, 2, figsize=(11, 4))
        fig.savefig(io.BytesIO(), format="png")
        out.append(time.process_time() - c0)
        plt.close(fig)
    return statistics.median(out)


def needs_arguments(fn) -> bool:
    return any(p.default is p.empty for p in inspect.signature(fn).parameters.values())


def model_lab():
    """Notebook 08's lab (the real model, its reduced workload), for ``--model``."""
    w08 = importlib.import_module("lectures.widgets.lecture08")
    return w08.L.open_lab(w08.NOTEBOOK)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("filter", nargs="?", default="", help="only explorers whose name has this")
    ap.add_argument("--repeats", type=int, default=3, help="changes per control (default 3)")
    ap.add_argument("--model", action="store_true",
                    help="also time notebook 08's explorer (loads the real model first)")
    args = ap.parse_args(argv)
    ref = reference_seconds(args.repeats)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; goal {GOAL_S} s of "
          f"CPU time; reference (an empty 1x2 figure to PNG) {ref:.3f} s CPU")
    print(f"{'explorer':40} {'controls':>8} {'CPU median':>10} {'CPU worst':>9} {'wall worst':>10} "
          f"{'worst/goal':>10} {'worst/ref':>9}")
    slow = 0
    for label, fn in explorers(args.filter):
        if needs_arguments(fn):
            if not args.model:
                print(f"{label:40} skipped: needs a model lab (run with --model)")
                continue
            ex = fn(model_lab())
        else:
            ex = fn()
        rendered(ex)  # in a kernel the constructor shows its first figure (Explorer.update)
        plt.close("all")
        times = {c: redraw_seconds(ex, c, args.repeats) for c in ex.controls}
        times = {c: t for c, t in times.items() if t}
        every = [cpu for t in times.values() for _, cpu in t]
        worst = max(times, key=lambda c: statistics.median(cpu for _, cpu in times[c]))
        worst_cpu = statistics.median(cpu for _, cpu in times[worst])
        worst_wall = statistics.median(wall for wall, _ in times[worst])
        slow += worst_cpu > GOAL_S
        print(f"{label:40} {len(times):>8} {statistics.median(every):>10.3f} {worst_cpu:>9.3f} "
              f"{worst_wall:>10.3f} {worst_cpu / GOAL_S:>9.2f}x {worst_cpu / ref:>8.1f}x  ({worst})")
    print(f"{slow} explorer(s) with a control slower than {GOAL_S} s of CPU time "
          f"(load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
