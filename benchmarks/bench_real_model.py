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
    on a shared machine the CPU seconds are the figure to compare;
  - with --floor (or --floor-quick): lecture 08's floor, the forward passes it needs (its
    perplexities and demo 3's one pass over the calibration windows), their flops, and a
    float64 matmul of the model's MLP shape on one thread, timed in CPU seconds: flops / rate
    is the CPU time no implementation of the lecture in float64 can beat; --cpu-seconds S
    (the lecture's measured CPU time, e.g. user + sys of /usr/bin/time) adds time / floor.
The load average of the machine is printed before and after: on a shared machine the absolute
times are inflated, the ratios much less so.

Run:  python benchmarks/bench_real_model.py [--repeat 3] [--lecture] [--demos | --demos-quick]
      python benchmarks/bench_real_model.py --floor [--cpu-seconds S]
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


def forward_flops(config, n_windows: int, seq_len: int) -> dict:
    """Flops of one forward pass of ``n_windows`` windows of ``seq_len`` tokens through a
    LLaMA model (transformers ``config``), by part: the decoder linears and the output layer
    (2 per multiply-add, every token), and attention's two products QKᵀ and AV over the causal
    triangle only (position t attends to t + 1 keys). Norms, rotary embedding, softmaxes and
    the log-softmax are left out (elementwise, a few flops per value)."""
    c = config
    head_dim = c.hidden_size // c.num_attention_heads
    kv = c.num_key_value_heads * head_dim
    per_layer = (c.hidden_size * (c.hidden_size + 2 * kv + c.hidden_size)     # q, k, v, o
                 + 3 * c.hidden_size * c.intermediate_size)                   # gate, up, down
    tokens = n_windows * seq_len
    causal = n_windows * seq_len * (seq_len + 1) // 2          # (query, key) pairs per head
    return {"linears": 2.0 * tokens * per_layer * c.num_hidden_layers,
            "output layer": 2.0 * tokens * c.hidden_size * c.vocab_size,
            "attention": 2.0 * 2 * causal * head_dim * c.num_attention_heads
            * c.num_hidden_layers}


def float64_gemm_rate(rows: int, inner: int, cols: int, repeats: int) -> float:
    """Flops per CPU second of a float64 (rows, inner) @ (inner, cols) product on one torch
    thread: the median over ``repeats`` timed products (process time, after one warm-up)."""
    import torch
    from lectures import one_torch_thread
    g = torch.Generator().manual_seed(0)
    a = torch.randn(rows, inner, generator=g, dtype=torch.float64)
    b = torch.randn(inner, cols, generator=g, dtype=torch.float64)
    times = []
    with one_torch_thread():
        a @ b
        for _ in range(repeats):
            t = time.process_time()
            a @ b
            times.append(time.process_time() - t)
    return 2.0 * rows * inner * cols / float(np.median(times))


def floor_rows(quick: bool, repeats: int, cpu_seconds: float | None) -> list:
    """Rows [what, value] of lecture 08's floor (module docstring)."""
    from lectures import llm
    lecture = importlib.import_module("lectures.08_real_model")
    workload = lecture.QUICK if quick else lecture.FULL
    config = llm.load_checkpoint(device="cpu").model.config
    perplexities = lecture.evaluations(workload)
    flops = forward_flops(config, workload.n_eval, workload.seq_len)
    calib = sum(forward_flops(config, workload.n_calib, workload.seq_len).values())
    total = perplexities * sum(flops.values()) + calib
    rate = float64_gemm_rate(workload.n_eval * workload.seq_len, config.hidden_size,
                             config.intermediate_size, repeats)
    floor = total / rate
    rows = [["forward passes: perplexities + demo 3's calibration pass", f"{perplexities} + 1"],
            ["tokens per pass", f"{workload.n_eval * workload.seq_len:,}"]]
    rows += [[f"GFLOP per perplexity: {part}", f"{v / 1e9:.1f}"] for part, v in flops.items()]
    rows += [["TFLOP, the whole lecture", f"{total / 1e12:.2f}"],
             ["float64 matmul, one thread (GFLOP per CPU second)", f"{rate / 1e9:.1f}"],
             ["floor: TFLOP / rate (CPU seconds)", f"{floor:.0f}"],
             ["floor on 2 cores (wall seconds)", f"{floor / 2:.0f}"]]
    if cpu_seconds is not None:
        rows.append(["the lecture's CPU seconds / floor", f"{cpu_seconds:.0f} / {floor:.0f} = "
                     f"{cpu_seconds / floor:.2f}"])
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--lecture", action="store_true", help="also time lecture 08")
    parser.add_argument("--demos", action="store_true",
                        help="only time lecture 08's demos, one by one (full workload)")
    parser.add_argument("--demos-quick", action="store_true",
                        help="the same on the --quick workload")
    parser.add_argument("--floor", action="store_true",
                        help="only lecture 08's floor: its forward passes' flops / float64 rate")
    parser.add_argument("--floor-quick", action="store_true",
                        help="the same on the --quick workload")
    parser.add_argument("--cpu-seconds", type=float, default=None,
                        help="with --floor: the lecture's measured CPU seconds, for time / floor")
    args = parser.parse_args(argv)
    if args.floor or args.floor_quick:
        print(f"Before: {load_avg()}")
        rows = floor_rows(args.floor_quick, max(args.repeat, 5), args.cpu_seconds)
        print_header("Lecture 08's floor (" + ("--quick" if args.floor_quick else "full")
                     + " workload; float64, CPU seconds)")
        print_table(["what", "value"], rows)
        print(f"After: {load_avg()}")
        return
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
