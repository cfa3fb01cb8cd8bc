"""Lecture 09 (PTQ algorithms), demo by demo: where its CPU time goes.

Runs the lecture's main() in this process (the full workload, or --quick's; its output goes to
--output, to diff against a plain run) and times each demo in CPU seconds (process time, all
threads), then breaks the real-model demos down by the functions they spend it in: every call
of GPTQ, AWQ's search, round-to-nearest and the Hessians is timed in the thread that runs it
(time.thread_time, so the two quantizing threads add up), the perplexities and the weight
maps in process time (they run alone, on several threads). On a shared machine the CPU
seconds are the figure to compare; the load average is printed before and after.

Run:  python benchmarks/bench_lecture09.py [--quick] [--output FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console import print_header, print_table  # noqa: E402


def load_avg() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


class Tally:
    """CPU seconds and calls per name, summed over threads."""

    def __init__(self):
        self.seconds, self.calls, self.lock = {}, {}, threading.Lock()

    def wrap(self, name, fn, clock=time.thread_time):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[name] = self.seconds.get(name, 0.0) + clock() - t
                    self.calls[name] = self.calls.get(name, 0) + 1
        return timed


DEMOS = (("demo1_output_error", "demo 1: synthetic layer"),
         ("load_model", "load the model, reference perplexity"),
         ("demo2_gptq", "demo 2: GPTQ"), ("demo3_awq", "demo 3: AWQ"),
         ("demo4_activations", "demo 4: SmoothQuant, rotation, LLM.int8()"),
         ("demo5_calibration", "demo 5: calibrators"), ("demo6_summary", "demo 6: summary"))


LECTURE, CALIBRATE = "lectures.09_ptq_algorithms", "lectures.llm.calibrate"
#: (module, function, clock): the functions timed inside the demos, in the module whose
#: namespace their callers read them from; the calls that run on the quantizing threads are
#: timed in thread time, the rest (which run alone, on several threads) in process time.
TIMED = ((LECTURE, "gptq", time.thread_time), (LECTURE, "hessian", time.thread_time),
         (LECTURE, "awq_search", time.thread_time), (LECTURE, "weight_rtn", time.thread_time),
         (LECTURE, "nll", time.process_time), (LECTURE, "map_items", time.process_time),
         (CALIBRATE, "first_layer_inputs", time.process_time))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tests' workload")
    parser.add_argument("--output", default=os.devnull,
                        help="file for the lecture's own output (to diff against a plain run)")
    args = parser.parse_args(argv)
    import torch
    print(f"Before: {load_avg()}; torch threads {torch.get_num_threads()}")
    tally, steps = Tally(), Tally()
    # main() looks every function up in its module's namespace when it calls it: wrapped
    # there, each call is timed and the lecture runs (and prints) exactly as it does alone
    for module, name, clock in TIMED:
        mod = importlib.import_module(module)
        setattr(mod, name, tally.wrap(name, getattr(mod, name), clock=clock))
    lec = importlib.import_module(LECTURE)
    for name, _ in DEMOS:
        setattr(lec, name, steps.wrap(name, getattr(lec, name), clock=time.process_time))
    c, w = time.process_time(), time.perf_counter()
    with open(args.output, "w", encoding="utf-8") as out, contextlib.redirect_stdout(out):
        lec.main(["--quick"] if args.quick else [])
    c, w = time.process_time() - c, time.perf_counter() - w
    rows = [[title, f"{steps.seconds[name]:.1f}"] for name, title in DEMOS]
    rows.append(["total (and wall s)", f"{c:.1f} ({w:.1f} wall)"])
    print_header("Lecture 09, demo by demo (" + ("--quick" if args.quick else "full")
                 + " workload, warm cache; CPU s, all threads)")
    print_table(["step", "CPU s"], rows)
    print_header("Inside the demos (CPU s of the calls)")
    print_table(["function", "calls", "CPU s"],
                [[n, str(tally.calls[n]), f"{s:.1f}"] for n, s in tally.seconds.items()])
    print("gptq, hessian, awq_search and weight_rtn in the threads that ran them (summed); "
          "weight_rtn includes its calls inside awq_search and map_items; nll (every "
          "perplexity) includes its activation quantizers; the rest in process time.")
    print(f"After: {load_avg()}")


if __name__ == "__main__":
    main()
