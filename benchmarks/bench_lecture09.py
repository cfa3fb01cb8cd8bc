"""Lecture 09 (PTQ algorithms), demo by demo: where its CPU time goes.

Runs the lecture's demos in this process as main() runs them (the full workload, or --quick's),
each in CPU seconds (process time, all threads) and wall seconds, then a breakdown of the
real-model demos by the functions they spend it in: every call of GPTQ, AWQ's search,
round-to-nearest and the Hessians is timed in the thread that runs it (time.thread_time, so the
two quantizing threads add up), the perplexities in process time (they run alone, on torch's
threads). On a shared machine the CPU seconds are the figure to compare; the load average is
printed before and after.

Run:  python benchmarks/bench_lecture09.py [--quick]
"""

from __future__ import annotations

import argparse
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


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tests' workload")
    args = parser.parse_args(argv)
    import torch
    print(f"Before: {load_avg()}; torch threads {torch.get_num_threads()}")
    lec = importlib.import_module("lectures.09_ptq_algorithms")
    tally = Tally()
    # functions are looked up in the lecture's namespace at call time: wrap them there
    for name in ("gptq", "hessian", "awq_search", "weight_rtn"):
        setattr(lec, name, tally.wrap(name, getattr(lec, name)))
    lec.ppl = tally.wrap("ppl", lec.ppl, clock=time.process_time)
    lec._first_layer_inputs = tally.wrap("first-layer inputs", lec._first_layer_inputs,
                                         clock=time.process_time)
    rows, total = [], [0.0, 0.0]

    def timed(name, fn, *a, **kw):
        c, w = time.process_time(), time.perf_counter()
        out = fn(*a, **kw)
        c, w = time.process_time() - c, time.perf_counter() - w
        rows.append([name, f"{c:.1f}", f"{w:.1f}"])
        total[0] += c
        total[1] += w
        return out

    timed("demo 1: synthetic layer", lec.demo1_output_error)
    m = timed("load the model, reference perplexity", lec.load_model,
              workload=lec.QUICK if args.quick else lec.FULL)
    g = timed("demo 2: GPTQ", lec.demo2_gptq, m)
    a = timed("demo 3: AWQ", lec.demo3_awq, m, g)
    d4 = timed("demo 4: SmoothQuant, rotation, LLM.int8()", lec.demo4_activations, m)
    timed("demo 5: calibrators", lec.demo5_calibration, m,
          dynamic_per_tensor=d4.smooth_ppl[None])
    timed("demo 6: summary", lec.demo6_summary, m, g, a)
    rows.append(["total", f"{total[0]:.1f}", f"{total[1]:.1f}"])
    print_header("Lecture 09, demo by demo (" + ("--quick" if args.quick else "full")
                 + " workload, warm cache)")
    print_table(["step", "CPU s", "wall s"], rows)
    print_header("Inside the demos (CPU s of the calls, summed over threads)")
    print_table(["function", "calls", "CPU s"],
                [[n, str(tally.calls[n]), f"{s:.1f}"] for n, s in tally.seconds.items()])
    print("(weight_rtn includes the calls inside awq_search; ppl includes its activation "
          "quantizers)")
    print(f"After: {load_avg()}")


if __name__ == "__main__":
    main()
