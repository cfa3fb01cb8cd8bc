"""Time the real-model harness (lectures 08, 09, 11, 12) and lecture 08 end to end.

What is timed, each against a reference measured in the same run:
  - loading SmolLM2-135M: from the GGUF file (cold: an empty cache directory) against the
    safetensors cache (warm);
  - one perplexity (the lecture's 4 windows of 512 tokens) against one float32 matmul of the
    same size as the model's linears for those tokens (2 * 2048 * 106M flops: the floor);
  - quantizing every decoder linear (INT4, groups of 32) with numfmt on numpy against its
    torch twin numfmt.torch on the same CPU (the harness picks numpy on a CPU);
  - with --lecture: lecture 08 as a subprocess, --quick and full, warm cache;
  - with --demos (or --demos-quick): lecture 08's demos in this process, one after the other
    as main() runs them, each in CPU seconds (process time, all threads) and wall seconds:
    on a shared machine the CPU seconds are the figure to compare.
The load average of the machine is printed before and after: on a shared machine the absolute
times are inflated, the ratios much less so.

Run:  python benchmarks/bench_real_model.py [--repeat 3] [--lecture] [--demos | --demos-quick]
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from console import print_header, print_table
from lectures.machine import repeat_seconds

ROOT = Path(__file__).resolve().parents[1]




def load_avg() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def demo_seconds(quick: bool) -> list:
    """Rows [step, CPU s, wall s] for loading and each of lecture 08's demos, run as main()
    runs them (with its plan of weight formats), and their total."""
    lecture = importlib.import_module("lectures.08_real_model")
    rows, total = [], [0.0, 0.0]

    def timed(name, fn, *args):
        c, w = time.process_time(), time.perf_counter()
        out = fn(*args)
        c, w = time.process_time() - c, time.perf_counter() - w
        rows.append([name, f"{c:.1f}", f"{w:.1f}"])
        total[0] += c
        total[1] += w
        return out
    lab = timed("load the model, tokenize the text", lecture.open_lab,
                lecture.QUICK if quick else lecture.FULL)
    lab.reuse = lecture.planned_weight_formats()
    model = timed("demo 1: reference, Q4_1 forensics", lecture.demo1_model, lab)
    weights = timed("demo 2: weight-only formats", lecture.demo2_weight_formats, lab,
                    model.reference)
    outliers = timed("demo 3: activation outliers", lecture.demo3_outliers, lab)
    acts = timed("demo 4: W8A8, W4A4", lecture.demo4_weights_and_activations, lab,
                 model.reference, outliers)
    kv = timed("demo 5: KV cache", lecture.demo5_kv_cache, lab, model.reference)
    timed("demo 6: NVFP4 against FP8", lecture.demo6_nvfp4_vs_fp8, weights, acts, kv)
    rows.append(["total", f"{total[0]:.1f}", f"{total[1]:.1f}"])
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lecture", action="store_true", help="also time lecture 08")
    parser.add_argument("--demos", action="store_true",
                        help="only time lecture 08's demos, one by one (full workload)")
    parser.add_argument("--demos-quick", action="store_true",
                        help="the same on the --quick workload")
    args = parser.parse_args(argv)
    if args.demos or args.demos_quick:
        import torch
        print(f"Before: {load_avg()}; torch threads {torch.get_num_threads()}")
        rows = demo_seconds(args.demos_quick)
        print_header("Lecture 08, demo by demo (" + ("--quick" if args.demos_quick else "full")
                     + " workload, warm cache)")
        print_table(["step", "CPU s", "wall s"], rows)
        print(f"After: {load_avg()}")
        return

    import torch
    import numfmt
    import numfmt.torch as nt
    from lectures import llm

    print(f"Before: {load_avg()}; torch threads {torch.get_num_threads()}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ[llm.checkpoint.CACHE_ENV] = tmp
        cold = repeat_seconds(lambda: llm.load_checkpoint(device="cpu"), 1, 0).median
        warm = repeat_seconds(lambda: llm.load_checkpoint(device="cpu"), args.repeat,
                              int(args.repeat > 1)).median
        ck = llm.load_checkpoint(device="cpu")
    del os.environ[llm.checkpoint.CACHE_ENV]
    rows.append(["load: GGUF (cold) / safetensors cache (warm)", f"{cold:.1f} s",
                 f"{warm:.1f} s", f"{cold / warm:.1f}x"])

    windows = llm.eval_windows(llm.corpus_tokens(ck.tokenizer), 4, 512)
    ppl = repeat_seconds(lambda: llm.perplexity(ck.model, windows), args.repeat,
                         int(args.repeat > 1)).median
    n_weights = sum(m.weight.numel() for m in llm.decoder_linears(ck.model).values())
    x = torch.randn(windows.size, 576)
    w = torch.randn(n_weights // 576, 576)
    floor = repeat_seconds(lambda: x @ w.T, args.repeat, int(args.repeat > 1)).median
    rows.append([f"perplexity of {windows.size} tokens / one matmul of the linears' flops",
                 f"{ppl:.1f} s", f"{floor:.1f} s", f"{ppl / floor:.1f}x"])

    lin = list(llm.decoder_linears(ck.model).values())
    weights = [m.weight.detach() for m in lin]
    np_time = repeat_seconds(lambda: [numfmt.quantize_int(t.numpy(), 4, True, "group", 32)
                                      for t in weights], args.repeat, int(args.repeat > 1)).median
    t_time = repeat_seconds(lambda: [nt.quantize_int(t, 4, True, "group", 32)
                                     for t in weights[:21]], 1, 0).median * len(weights) / 21
    rows.append([f"INT4 g32 on all {len(weights)} linears: numfmt.torch (CPU, 1/10 of them "
                 "timed) / numfmt", f"{t_time:.1f} s", f"{np_time:.1f} s",
                 f"{t_time / np_time:.1f}x"])

    if args.lecture:
        script = str(ROOT / "lectures" / "08_real_model.py")
        env = dict(os.environ, PYTHONPATH=str(ROOT))

        def run(*a):
            subprocess.run([sys.executable, script, *a], check=True, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        quick = repeat_seconds(lambda: run("--quick"), 1, 0).median
        full = repeat_seconds(lambda: run(), 1, 0).median
        rows.append(["lecture 08: full / --quick (warm cache)", f"{full:.0f} s", f"{quick:.0f} s",
                     f"{full / quick:.1f}x"])
        rows.append(["lecture 08 full / one perplexity", f"{full:.0f} s", f"{ppl:.1f} s",
                     f"{full / ppl:.0f}x"])

    print_header("Real-model harness timings (median of runs; wall clock)")
    print_table(["what", "time", "reference", "ratio"], rows)
    print(f"After: {load_avg()}")


if __name__ == "__main__":
    main()
