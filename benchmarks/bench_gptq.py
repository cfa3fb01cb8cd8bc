"""Time numfmt.ptq.gptq's lazy batches against column-at-a-time updates, on one layer.

The layer is SmolLM2-135M's down_proj shape, 576 outputs x 1536 inputs, INT4 asymmetric in
groups of 128, act-order, with a Hessian from 2048 correlated synthetic tokens. ``block_size=1``
is the same algorithm with every update applied column by column (no lazy batches); both are
timed in this process (median of several runs) and checked to agree to float rounding first.
numpy's BLAS is limited to one thread (threadpoolctl) because the machines here are shared;
the ratio is what to read, not the seconds.

Run:  python benchmarks/bench_gptq.py [--repeat 5]
"""

from __future__ import annotations

import argparse

import numpy as np
from threadpoolctl import threadpool_limits

from console import print_header, print_table
from numfmt.ptq import gptq, hessian, rtn
from lectures.machine import repeat_seconds

SHAPE = (576, 1536)


def problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2048, 64)) @ rng.standard_normal((64, SHAPE[1])) * 0.1
    x += 0.3 * rng.standard_normal((2048, SHAPE[1]))
    return rng.standard_t(5, SHAPE) * 0.02, hessian(x)




def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--repeat", type=int, default=5)
    repeat = p.parse_args().repeat
    w, h = problem()
    args = dict(bits=4, group_size=128, symmetric=False, act_order=True)
    with threadpool_limits(limits=1, user_api="blas"):
        lazy = gptq(w, h, block_size=128, **args)
        plain = gptq(w, h, block_size=1, **args)
        agree = float(np.mean(lazy.codes == plain.codes))
        same = lazy.codes == plain.codes
        rel = float(np.max(np.abs(lazy.weight - plain.weight)[same]
                           / np.maximum(np.abs(plain.weight[same]), 1e-300)))
        t_lazy = repeat_seconds(lambda: gptq(w, h, block_size=128, **args), repeat, 0).median
        t_plain = repeat_seconds(lambda: gptq(w, h, block_size=1, **args), repeat, 0).median
        t_rtn = repeat_seconds(lambda: rtn(w, 4, 128, symmetric=False), repeat, 0).median
    print_header(f"GPTQ on a {SHAPE[0]} x {SHAPE[1]} layer, INT4 g128, act-order")
    print(f"lazy batches and column-at-a-time: the same code for {agree * 100:.3f}% of the "
          f"weights;\nwhere equal, the weights differ by at most {rel:.1e} relative (scales from "
          "float-rounded updates)")
    print_table(["method", "median time (s)", "ratio to RTN"],
                [["RTN (numfmt.ptq.rtn)", f"{t_rtn:.3f}", "1.0x"],
                 ["GPTQ, lazy batches of 128", f"{t_lazy:.3f}", f"{t_lazy / t_rtn:.1f}x"],
                 ["GPTQ, column at a time", f"{t_plain:.3f}", f"{t_plain / t_rtn:.1f}x"]])
    print(f"lazy batches: {t_plain / t_lazy:.1f}x faster than column-at-a-time updates")


if __name__ == "__main__":
    main()
