"""Lecture 09 (PTQ algorithms), demo by demo: where its CPU time goes.

Runs the lecture's main() in this process (the full workload, or --quick's; its output goes to
--output, to diff against a plain run) and times each demo in CPU seconds (process time, all
threads), then breaks the real-model demos down by the functions they spend it in: every call
of GPTQ, AWQ's search, round-to-nearest and the Hessians is timed in the thread that runs it
(time.thread_time, so the two quantizing threads add up), the perplexities and the weight
maps in process time (they run alone, on several threads). On a shared machine the CPU
seconds are the figure to compare; the load average is printed before and after.

Run:  python benchmarks/bench_lecture09.py [--quick] [--output FILE]
      python benchmarks/bench_lecture09.py --floor [--quick]   (the floor alone, in seconds)
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
         (CALIBRATE, "layer_inputs", time.process_time))


# ---------------------------------------------------------------------------------------------
# The floor: the arithmetic the lecture cannot avoid, at the machine's float64 GEMM rate
# ---------------------------------------------------------------------------------------------
#: SmolLM2-135M (its config.json): hidden size, MLP size, layers, key/value width, vocabulary.
D, FF, LAYERS, KV, VOCAB = 576, 1536, 30, 192, 49152
#: (out, in) of each group of linears that read one tensor (lectures.llm.calibrate.INPUT_GROUPS)
GROUPS = ((D + 2 * KV, D), (D, D), (2 * FF, D), (D, FF))
LINEAR_FLOP = 2 * sum(o * i for o, i in GROUPS)            # per token and layer: 7.08 MFLOP
DOWN_FLOP = 2 * D * FF                                      # down_proj's share of it


def work(settings: int, seq_len: int, n_eval: int, n_calib: int, grid: int = 10,
         clips: int = 5, awq_group: int = 128) -> dict:
    """FLOPs of the lecture's necessary work by kind, for ``settings`` weight settings.

    Counts: 4 S + 16 perplexities (the reference; RTN, GPTQ, act-order per setting and the
    static-groups run; AWQ per setting and the two out-of-domain runs; 4 W8A8 SmoothQuant, 3
    W4A4, 5 calibrator runs), every one a different model; 2 S + 3 sequential calibrations
    (GPTQ and act-order per setting, static groups, out-of-domain, rotated), each running a
    layer twice (its float weights to record the inputs, then its quantized weights); 2 AWQ
    passes on the float model (its settings share one); GPTQ's Hessian, Cholesky factors and
    column updates per group; AWQ's Gram matrix (or the tokens), grid and clip candidates per
    group. Attention
    counts the causal half of Q·Kᵀ and A·V. Memory-bound work (norms, softmax, the
    quantizers' rounding) is left out: a floor, not an estimate."""
    attn = 2 * 2 * D * (seq_len + 1) / 2                    # per token and layer, causal
    eval_tokens, calib_tokens = n_eval * seq_len, n_calib * seq_len
    per_pass = eval_tokens * (LAYERS * (LINEAR_FLOP + attn) + 2 * D * VOCAB)
    sequential = calib_tokens * LAYERS * (2 * LINEAR_FLOP - DOWN_FLOP + 2 * attn)
    float_pass = calib_tokens * LAYERS * (LINEAR_FLOP + attn)
    # a Hessian or Gram matrix xᵀx is symmetric: N·in² flops (BLAS syrk, numpy's x.T @ x)
    gptq = LAYERS * sum(calib_tokens * i * i + o * i * i + 4 * i ** 3 / 3 for o, i in GROUPS)
    # awq_search scores a candidate through the Gram matrix when there are more tokens than
    # inputs, else on the tokens themselves (numfmt.ptq.scaling._output_mse)
    awq = LAYERS * sum((calib_tokens * i * i + grid * 2 * o * i * i
                        if calib_tokens > i else grid * 2 * calib_tokens * o * i)
                       + clips * 2 * o * i * min(i, awq_group) for o, i in GROUPS)
    calibrations = 2 * settings + 3
    return {"perplexities": (4 * settings + 16) * per_pass,
            "sequential passes": calibrations * sequential,
            "float passes (AWQ, statistics)": 3 * float_pass,
            "GPTQ (Hessians, factors, updates)": calibrations * gptq,
            "AWQ (Gram, grid, clips)": (settings + 1) * awq}


def gemm_rate(n: int = 1024, repeats: int = 5):
    """float64 GEMM FLOP per CPU second: torch.mm of n x n on one thread, timed in process
    time (on a shared machine CPU seconds are the figure to compare), as a machine.Spread."""
    import torch

    from lectures.machine import Spread
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = (torch.randn(n, n, dtype=torch.float64) for _ in range(2))
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            t = time.process_time()
            torch.mm(a, b)
            times.append(time.process_time() - t)
    finally:
        torch.set_num_threads(threads)
    return Spread.of(times).inverse(2.0 * n ** 3)


def floor(quick: bool) -> None:
    """Print the floor of the full (or --quick) workload in CPU seconds."""
    args = (2, 256, 2, 2) if quick else (3, 512, 4, 4)
    parts = work(*args)
    rate = gemm_rate()
    print_header("Lecture 09's floor (" + ("--quick" if quick else "full") + " workload): "
                 "necessary FLOPs at the float64 GEMM rate of one core")
    rows = [[k, f"{v / 1e12:.2f}", f"{v / rate.median:.0f}"] for k, v in parts.items()]
    total = sum(parts.values())
    rows.append(["total", f"{total / 1e12:.2f}",
                 f"{total / rate.median:.0f} [{total / rate.high:.0f}, {total / rate.low:.0f}]"])
    print_table(["work", "TFLOP", "floor, CPU s"], rows)
    print(f"float64 GEMM: {rate.median / 1e9:.1f} GFLOP per CPU second (1024^3, one thread, "
          f"{rate.repeats} runs: {rate.low / 1e9:.1f}-{rate.high / 1e9:.1f}); {load_avg()}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the tests' workload")
    parser.add_argument("--output", default=os.devnull,
                        help="file for the lecture's own output (to diff against a plain run)")
    parser.add_argument("--floor", action="store_true",
                        help="print the workload's floor (necessary FLOPs at the float64 GEMM "
                             "rate) instead of running the lecture")
    args = parser.parse_args(argv)
    if args.floor:
        floor(args.quick)
        return
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
