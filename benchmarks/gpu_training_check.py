"""Lecture 13's real-stack checks on a CUDA GPU, and the step time of BF16 against FP8 training.

    python benchmarks/gpu_training_check.py

With CUDA:

1. torchao's Float8Linear (tensorwise and rowwise recipes) on the GPU against numfmt's
   quantize_operand on the same operands, as lecture 13's demo 4 does on the CPU: FP8 codes
   equal, values within a float32 ulp, the GEMM outputs within accumulation error of the exact
   product of torchao's operands.
2. TransformerEngine, if installed: te.Linear under Float8CurrentScaling and (on a GPU with
   MXFP8) MXFP8BlockScaling, its forward output against numfmt's float64 product of the same
   recipe's operands, within BF16 output rounding.
3. The step time (forward, backward, AdamW step) of a stack of 4096 x 4096 linears on 8,192
   tokens in BF16 autocast, torchao FP8 tensorwise, FP8 rowwise, and MXFP8 where the GPU has
   it: the median of 20 timed steps after 5 warm-up steps, with the least and most.

Without CUDA it says so and exits 0. Exit status 1 if a comparison fails. Nothing here has been
run on a GPU yet: benchmarks/README.md says "not measured" until it has.
"""

from __future__ import annotations

import importlib
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WIDTH, LAYERS, TOKENS, WARMUP, STEPS = 4096, 4, 8192, 5, 20


def real_stack(device: str) -> tuple[bool, list]:
    """Lecture 13's demo 4 on ``device``: (every check passed, rows to print)."""
    L = importlib.import_module("lectures.13_memory_of_training")
    r = L.demo4_real_stack(device=device)
    if not r.available:
        return False, [["torchao", "not installed", r.error]]
    codes = all(e == n for e, n in r.codes_equal.values())
    ulps = max(u for _e, _n, u in r.values_equal.values())
    gemms = all(r.gemm_within.values())
    rows = [["FP8 codes equal to numfmt's", "yes" if codes else "NO", ""],
            ["values, max float32 ulps apart", str(ulps), "<= 1 expected"],
            ["GEMM outputs within the bound", "yes" if gemms else "NO", ""]]
    return codes and ulps <= 1 and gemms, rows


def transformer_engine(device: str) -> tuple[bool, list]:
    """te.Linear's forward under TE's recipes against numfmt's emulation, where TE imports."""
    try:
        import transformer_engine.pytorch as te
        from transformer_engine.common import recipe as te_recipe
    except ImportError as err:
        return True, [["TransformerEngine", "not installed", str(err)[:60]]]
    import numfmt.torch.train as ntt
    L = importlib.import_module("lectures.13_memory_of_training")
    x, w, _dy = (t.to(device) for t in L._operands())
    rows, ok = [], True
    recipes = [("Float8CurrentScaling", te_recipe.Float8CurrentScaling(), "fp8_current")]
    if torch.cuda.get_device_capability()[0] >= 10:
        recipes.append(("MXFP8BlockScaling", te_recipe.MXFP8BlockScaling(), "mxfp8_rceil"))
    for name, rec, ours in recipes:
        try:
            lin = te.Linear(w.shape[1], w.shape[0], bias=False, params_dtype=torch.float32,
                            device=device)
            with torch.no_grad():
                lin.weight.copy_(w)
            with te.fp8_autocast(enabled=True, fp8_recipe=rec):
                y = lin(x).detach()
            spec = ntt.RECIPES[ours]
            a = ntt.quantize_operand(x, spec.fprop[0]).double()
            b = ntt.quantize_operand(w, spec.fprop[1]).double()
            inside = L._within_bound(y, a, b, 2.0 ** -8)
        except Exception as err:                     # noqa: BLE001 - reported as a row
            rows.append([f"TE {name}", "ERROR", f"{type(err).__name__}: {err}"[:60]])
            ok = False
            continue
        ok &= inside
        rows.append([f"TE {name} forward vs numfmt", "yes" if inside else "NO", ""])
    return ok, rows


def _model(device):
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH, bias=False, device=device)
                                 for _ in range(LAYERS)])


def step_times(device: str) -> list:
    """[label, median ms, least ms, most ms] per training path that runs on this GPU."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training
    paths = [("BF16 autocast", None)]
    paths += [(f"torchao FP8 {r}", Float8LinearConfig.from_recipe_name(r))
              for r in ("tensorwise", "rowwise")]
    rows = []
    x = torch.randn(TOKENS, WIDTH, device=device)
    for label, cfg in paths:
        torch.manual_seed(0)
        model = _model(device)
        if cfg is not None:
            convert_to_float8_training(model, config=cfg)
        model = torch.compile(model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
        times = []
        try:
            for i in range(WARMUP + STEPS):
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                with torch.autocast("cuda", dtype=torch.bfloat16):
                    loss = model(x).float().square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
                end.record()
                torch.cuda.synchronize()
                if i >= WARMUP:
                    times.append(start.elapsed_time(end))
        except Exception as err:                     # noqa: BLE001 - reported as a row
            rows.append([label, "ERROR", f"{type(err).__name__}: {err}"[:60], ""])
            continue
        rows.append([label, f"{statistics.median(times):.2f}", f"{min(times):.2f}",
                     f"{max(times):.2f}"])
    return rows


def main(argv=None) -> int:
    if not torch.cuda.is_available():
        print("No CUDA device: nothing measured (lecture 13 runs its comparisons on the CPU).")
        return 0
    from console import print_table
    device = "cuda"
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    t0 = time.perf_counter()
    ok1, rows1 = real_stack(device)
    ok2, rows2 = transformer_engine(device)
    print_table(["check", "result", "note"], rows1 + rows2)
    print_table(["training path", "median ms/step", "least", "most"], step_times(device))
    print(f"({time.perf_counter() - t0:.0f} s)")
    return 0 if ok1 and ok2 else 1


if __name__ == "__main__":
    sys.exit(main())
