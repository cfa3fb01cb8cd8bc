"""Time one training step of lecture 10's model under each recipe, against the BF16 step.

What is timed: one full step of :class:`lectures.tinylm.model.TinyLM` (lecture 10's size:
d 128, 2 layers, SwiGLU 256, 8 x 64 = 512 tokens): forward, loss, backward with every linear's
three GEMMs fake-quantized under the recipe, and the AdamW update; one torch thread, median of
several steps after a warm-up step, in this process. The ratio to the BF16 step is the cost of
emulating the recipe's quantizers (the goal is at most 3x); on a machine that other jobs load,
the ratio of CPU times is the steadier one. Lecture 10 itself uses these recipes and sizes, and
computes in float64 (lectures/tinylm/loop.py says why); the float32 table is the library's
default, the arithmetic a GPU's tensor cores would do.

Run:  python benchmarks/bench_training.py [--repeat 7] [--threads 1] [--dtype float64 float32]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.nn import functional as F

import numfmt.torch.train as ntt
from console import print_header, print_table
from lectures.tinylm.data import Batches, split
from lectures.tinylm.model import TinyLM, TinyLMConfig
from lectures.machine import repeat_seconds

RECIPES = ["fp32", "bf16", "fp16", "fp8_delayed", "fp8_current", "fp8_blockwise",
           "fp8_blockwise_pow2", "mxfp8_floor", "mxfp8_rceil", "nvfp4", "mxfp4", "mxfp4_sr_rht"]


def step_seconds(recipe: str, cfg: TinyLMConfig, batch: int, repeat: int,
                 dtype: torch.dtype = torch.float64) -> tuple:
    """Median wall and CPU seconds of one training step under ``recipe``, computing in
    ``dtype``."""
    model = TinyLM(cfg, recipe, seed=0).to(dtype)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    batches = Batches(split(), batch, cfg.context, seed=0)
    rec = ntt.get_recipe(recipe)
    scaler = ntt.DynamicLossScaler() if rec.loss_scaling else None
    params = list(model.parameters())
    cpu = []

    def step():
        t = time.process_time()
        x, y = batches.next()
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        if scaler:
            scaler.scale_loss(loss).backward()
            scaler.step(opt, params)
        else:
            loss.backward()
            opt.step()
        cpu.append(time.process_time() - t)
    wall = repeat_seconds(step, repeat).median
    return wall, sorted(cpu[1:])[len(cpu[1:]) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", nargs="+", choices=["float64", "float32"],
                        default=["float64", "float32"])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg, batch = TinyLMConfig(), 8
    for dtype in args.dtype:
        print_header(f"One training step in {dtype}, TinyLM d {cfg.d_model}, {cfg.n_layers} "
                     f"layers, {batch * cfg.context} tokens, {args.threads} thread(s), median "
                     f"of {args.repeat}")
        times = {r: step_seconds(r, cfg, batch, args.repeat, getattr(torch, dtype))
                 for r in RECIPES}
        base, base_cpu = times["bf16"]
        print_table(["recipe", "ms/step (wall)", "ms/step (CPU)", "x BF16 (wall)",
                     "x BF16 (CPU)"],
                    [[r, f"{w * 1e3:.0f}", f"{c * 1e3:.0f}", f"{w / base:.2f}",
                      f"{c / base_cpu:.2f}"] for r, (w, c) in times.items()])


if __name__ == "__main__":
    main()
