"""numfmt against the libraries a user would otherwise pick: one row per goal, measured.

Every row times numfmt and its reference on the same input in the same process. A round runs
each contender once, in an order that rotates from round to round; a figure is the median of
``--repeat`` rounds after one warm-up, and a ratio is the median of the per-round ratios
numfmt / reference in time (below 1: numfmt is faster). Each row says whether the results
agreed (bit for bit unless the row says otherwise). torch runs on 1 thread. The machine's load
average is printed at the start and the end: on a shared machine, absolute times are noise and
only the same-run ratios mean something.

Sections: round, encode, decode (ml_dtypes); MX and NVFP4 (torchao, if installed); numfmt.torch
on the CPU (numfmt's numpy); quantize_int per group of 32 (torch.fake_quantize); peak memory
(tracemalloc, which sees numpy's allocations); cost per element against size; lecture 05 as a
subprocess against a baseline checkout (``--baseline``, e.g. the code before a change) and with
the other core made busy.

Run:  python benchmarks/bench_peers.py [--n 4194304] [--repeat 7] [--only round,encode,...]
      [--baseline /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from console import print_header, print_table  # noqa: E402
from numfmt import (BF16, FP4_E2M1, FP8_E4M3, FP16, mx_quantize, nvfp4_quantize,  # noqa: E402
                    quantize_int)
from numfmt._reference import reference_dtypes  # noqa: E402

# (format, its reference type) for every format ml_dtypes or numpy defines, from one table.
PAIRS = list(reference_dtypes().items())
SECTIONS = ("round", "encode", "decode", "mx", "torch", "int", "memory", "scaling", "lecture")
HEAD = ["operation", "numfmt ms", "reference", "ref ms", "ratio", "goal", "met", "agree"]


def load() -> str:
    return "load average " + " / ".join(f"{v:.2f}" for v in os.getloadavg())


def interleaved(fns: list, repeat: int) -> list[list[float]]:
    """Seconds of each fn in each round: fns rotate order, one warm-up call each first."""
    for f in fns:
        f()
    times = [[] for _ in fns]
    for r in range(repeat):
        for i in [(r + k) % len(fns) for k in range(len(fns))]:
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
    return times


def compare(ours, ref, repeat: int) -> tuple[float, float, float]:
    """(median s of ours, median s of ref, median per-round ratio ours/ref)."""
    a, b = interleaved([ours, ref], repeat)
    return statistics.median(a), statistics.median(b), statistics.median(
        [x / y for x, y in zip(a, b)])


def row(op, ours, ref_name, ref, goal, agree, repeat) -> list:
    t_o, t_r, ratio = compare(ours, ref, repeat)
    return [op, f"{t_o * 1e3:.1f}", ref_name, f"{t_r * 1e3:.1f}", f"{ratio:.2f}x",
            f"<= {goal}x", "yes" if ratio <= goal else "NO", agree]


def yes(flag: bool) -> str:
    return "yes" if flag else "NO"


def same_bits(a, b) -> bool:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.array_equal(a.view(np.uint64), b.view(np.uint64))


def values_in_range(fmt, n: int, seed: int = 0) -> np.ndarray:
    """float32 values log-uniform over the format's range, subnormals included, both signs."""
    rng = np.random.default_rng(seed)
    lo = np.log2(fmt.min_subnormal) - 1 if fmt.subnormals else np.log2(fmt.min_normal) + 1
    x = np.exp2(rng.uniform(lo, np.log2(fmt.max_value), n)).astype(np.float32)
    return x if not fmt.signed else x * rng.choice(np.float32([-1, 1]), n)


def quiet(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn()


def codes_dtype(fmt):
    return np.uint16 if fmt.bits > 8 else np.uint8


# ------------------------------------------------------------------------------- sections
def bench_round(n, repeat):
    rows = []
    for fmt, ml in PAIRS:
        x = values_in_range(fmt, n)
        ref = lambda: x.astype(ml).astype(np.float32)  # noqa: E731
        agree = yes(same_bits(fmt.round(x, saturate=False), quiet(ref)))
        ref_name = "ml_dtypes round trip" if ml is not np.float16 else "np.float16 trip"
        rows.append(row(f"{fmt.name} round", lambda: fmt.round(x, saturate=False),
                        ref_name, ref, 1.0, agree, repeat))
        # The option that returns float32, as the round trip does (half the bytes written).
        ours32 = lambda: fmt.round(x, saturate=False, dtype=np.float32)  # noqa: E731
        agree = yes(ours32().dtype == np.float32 and same_bits(ours32(), quiet(ref)))
        rows.append(row(f"{fmt.name} round dtype=f32", ours32, ref_name, ref, 1.0, agree,
                        repeat))
    return rows


def bench_encode(n, repeat):
    rows = []
    for fmt, ml in PAIRS:
        x = values_in_range(fmt, n)
        u = codes_dtype(fmt)
        ref = lambda: x.astype(ml).view(u)  # noqa: E731
        agree = yes(np.array_equal(fmt.encode(x, saturate=False), quiet(ref)))
        rows.append(row(f"{fmt.name} encode", lambda: fmt.encode(x, saturate=False),
                        "astype(dt).view(uint)", ref, 1.5, agree, repeat))
    return rows


def bench_decode(n, repeat):
    rows = []
    for fmt, ml in PAIRS:
        c = quiet(lambda: values_in_range(fmt, n).astype(ml).view(codes_dtype(fmt)))
        ref = lambda: c.view(ml).astype(np.float32)  # noqa: E731
        agree = yes(same_bits(fmt.decode(c), ref()))
        rows.append(row(f"{fmt.name} decode", lambda: fmt.decode(c), "view(dt).astype(f32)",
                        ref, 1.5, agree, repeat))
        agree = yes(same_bits(fmt.decode(c, dtype=np.float32), ref()))
        rows.append(row(f"{fmt.name} decode dtype=f32", lambda: fmt.decode(c, dtype=np.float32),
                        "view(dt).astype(f32)", ref, 1.5, agree, repeat))
    return rows


def gaussian(n, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n // 1024, 1024)).astype(np.float32)


def bench_mx(n, repeat):
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.prototype.mx_formats.kernels import f4_unpacked_to_f32, unpack_uint4
            from torchao.prototype.mx_formats.mx_tensor import to_mx
            from torchao.prototype.mx_formats.nvfp4_tensor import (NVFP4Tensor,
                                                                   per_tensor_amax_to_scale)
    except ImportError as err:
        print(f"torchao not importable ({err}); MX rows skipped")
        return []
    x = gaussian(n)
    xt = torch.from_numpy(x)
    rows = []
    for name, elem, dt in (("MXFP8 E4M3", FP8_E4M3, torch.float8_e4m3fn),
                           ("MXFP4 E2M1", FP4_E2M1, torch.float4_e2m1fn_x2)):
        ours = mx_quantize(x, elem)
        s, d = to_mx(xt, dt, 32)
        if dt == torch.float4_e2m1fn_x2:
            d = f4_unpacked_to_f32(unpack_uint4(d.view(torch.uint8)))
        agree = (same_bits(ours.elements, d.to(torch.float64).numpy())
                 and same_bits(ours.scales, s.to(torch.float32).to(torch.float64).numpy()))
        rows.append(row(f"mx_quantize {name}", lambda: mx_quantize(x, elem),
                        "torchao to_mx (FLOOR)", lambda: to_mx(xt, dt, 32), 2.0,
                        yes(agree) + " (elements, scales)", repeat))

    def ao_nvfp4():
        return NVFP4Tensor.to_nvfp4(xt, 16, per_tensor_scale=per_tensor_amax_to_scale(
            xt.abs().max()))
    ours, t = nvfp4_quantize(x), ao_nvfp4()
    el = f4_unpacked_to_f32(unpack_uint4(t.qdata)).to(torch.float64).numpy()
    sc = t.scale.to(torch.float64).numpy().reshape(ours.scales.shape)
    eq_e, eq_s = np.mean(el == ours.elements), np.mean(sc == ours.scales)
    agree = "yes" if eq_e == 1 and eq_s == 1 else f"{eq_e:.7f} / {eq_s:.7f} equal"
    rows.append(row("nvfp4_quantize", lambda: nvfp4_quantize(x), "NVFP4Tensor.to_nvfp4",
                    ao_nvfp4, 2.0, agree + " (elements, scales)", repeat))
    return rows


def bench_torch(n, repeat):
    import torch

    import numfmt as nf
    import numfmt.torch as nt
    x = gaussian(n)
    xt = torch.from_numpy(x)
    rows = []
    cases = [("round E4M3", lambda: FP8_E4M3.round(x), lambda: nt.round(xt, FP8_E4M3)),
             ("encode E4M3", lambda: FP8_E4M3.encode(x), lambda: nt.encode(xt, FP8_E4M3)),
             ("round BF16", lambda: BF16.round(x), lambda: nt.round(xt, BF16)),
             ("mx_quantize E4M3", lambda: mx_quantize(x, FP8_E4M3).values,
              lambda: nt.mx_quantize(xt, FP8_E4M3).values),
             ("mx_quantize E2M1", lambda: mx_quantize(x, FP4_E2M1).values,
              lambda: nt.mx_quantize(xt, FP4_E2M1).values),
             ("nvfp4_quantize", lambda: nvfp4_quantize(x).values,
              lambda: nt.nvfp4_quantize(xt).values),
             ("quantize_int group 32", lambda: quantize_int(x, 8, granularity="group",
                                                            group=32).values,
              lambda: nt.quantize_int(xt, 8, granularity="group", group=32).values)]
    for name, np_fn, t_fn in cases:
        agree = yes(same_bits(np_fn(), t_fn().numpy()))  # bit for bit: -0 and +0 differ
        rows.append(row(f"numfmt.torch {name}", t_fn, "numfmt numpy", np_fn, 1.0, agree,
                        repeat))
    # Lecture 08's weight formats on two of the real model's matrix shapes (float32).
    ws = [np.random.default_rng(1).standard_normal(s).astype(np.float32) * 0.02
          for s in ((1536, 576), (576, 1536))]
    wts = [torch.from_numpy(w) for w in ws]

    def weight_formats(lib, w):
        return [lib.block_quantize(w, FP8_E4M3, w.shape[-1], "exact").values,
                lib.quantize_int(w, 8, True, "channel").values,
                lib.quantize_int(w, 4, True, "group", 32).values,
                lib.quantize_int(w, 4, False, "group", 32).values,
                lib.mx_quantize(w, FP4_E2M1, 32).values, lib.nvfp4_quantize(w, 16).values]
    agree = yes(all(same_bits(a, b.numpy()) for w, wt in zip(ws, wts)
                    for a, b in zip(weight_formats(nf, w), weight_formats(nt, wt))))
    rows.append(row("numfmt.torch lecture 08 weights (6 formats, 1536x576 + 576x1536)",
                    lambda: [weight_formats(nt, wt) for wt in wts], "numfmt numpy",
                    lambda: [weight_formats(nf, w) for w in ws], 1.0, agree, repeat))
    return rows


def bench_int(n, repeat):
    import torch
    x = gaussian(n)
    xt = torch.from_numpy(x)

    def torch_groups():
        g = xt.reshape(-1, 32)
        scale = g.abs().amax(dim=1) / 127
        scale = torch.where(scale == 0, 1.0, scale)
        zp = torch.zeros(g.shape[0], dtype=torch.int32)
        return torch.fake_quantize_per_channel_affine(g, scale, zp, 0, -127, 127)

    # fake_quantize returns float32 values; its codes are round(x * (1/scale)) in float32.
    g = xt.reshape(-1, 32)
    scale = g.abs().amax(dim=1, keepdim=True) / 127
    torch_codes = torch.clamp(torch.round(g * (1 / scale)), -127, 127).numpy()
    ours = quantize_int(x, 8, granularity="group", group=32).codes
    eq = np.mean(ours.reshape(-1, 32) == torch_codes)
    return [row("quantize_int INT8 group 32", lambda: quantize_int(x, 8, granularity="group",
                                                                  group=32),
                "fake_quantize_per_channel", torch_groups, 1.5,
                f"codes {eq:.7f} equal (torch: float32 x * (1/scale))", repeat)]


def peak_bytes(fn) -> int:
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def bench_memory(n, repeat):
    rows = []
    for fmt, ml in ((f, dict(PAIRS)[f]) for f in (FP8_E4M3, FP4_E2M1, BF16, FP16)):
        x = values_in_range(fmt, n)
        u = codes_dtype(fmt)
        for op, ours, ref in (("round", lambda: fmt.round(x),
                               lambda: x.astype(ml).astype(np.float32)),
                              ("encode", lambda: fmt.encode(x), lambda: x.astype(ml).view(u))):
            b_o, b_r = peak_bytes(ours) / n, quiet(lambda: peak_bytes(ref)) / n
            rows.append([f"{fmt.name} {op} peak B/element", f"{b_o:.1f}", "ml_dtypes",
                         f"{b_r:.1f}", f"{b_o / b_r:.2f}x", "<= 3.0x", yes(b_o / b_r <= 3.0),
                         "(bytes, not ms)"])
    return rows


def bench_scaling(n, repeat):
    sizes = [10**6, 3 * 10**6, 10**7, 3 * 10**7]  # interleaved: the load drifts between sizes
    rows = []
    def fresh_pages(x):
        # What a new float64 result costs before anything is computed: glibc recycles freed
        # heap memory below its 32 MB mmap threshold, above it the kernel zeroes new pages.
        out = np.empty(x.size)
        out[::512] = 0.0  # one write per 4 KiB page
        return out

    for name, fn in (("E4M3 round", lambda x: FP8_E4M3.round(x)),
                     ("E4M3 round dtype=f32", lambda x: FP8_E4M3.round(x, dtype=np.float32)),
                     ("E4M3 encode", lambda x: FP8_E4M3.encode(x)),
                     ("BF16 round", lambda x: BF16.round(x)),
                     ("mx_quantize E4M3", lambda x: mx_quantize(x.reshape(-1, 800), FP8_E4M3)),
                     ("fresh float64 result", fresh_pages),
                     # References: what the same sizes do to a peer and to one plain pass
                     # (input and output leave the caches somewhere between 1e6 and 1e7).
                     ("ml_dtypes E4M3 round trip",
                      lambda x: x.astype(ml_dtypes.float8_e4m3fn).astype(np.float32)),
                     ("ml_dtypes E4M3 astype+view",
                      lambda x: x.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)),
                     ("float64 x * 2 (one pass)", lambda x: x * np.float64(2))):
        xs = [values_in_range(FP8_E4M3, m) for m in sizes]
        times = interleaved([lambda x=x: fn(x) for x in xs], max(3, repeat // 2))
        per = [statistics.median(ts) / m * 1e9 for ts, m in zip(times, sizes)]
        del xs
        spread = max(per) / min(per)
        if fn is fresh_pages or not name.startswith(("E4M3", "BF16", "mx_")):
            rows.append([f"{name} ns/element", " / ".join(f"{p:.2f}" for p in per),
                         "1e6 / 3e6 / 1e7 / 3e7", "", f"{spread:.2f}x", "", "",
                         "(reference)"])
            continue
        rows.append([f"{name} ns/element", " / ".join(f"{p:.1f}" for p in per),
                     "1e6 / 3e6 / 1e7 / 3e7", "", f"{spread:.2f}x", "<= 1.5x",
                     yes(spread <= 1.5), "max / min"])
    return rows


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_lecture(root: Path, env=None) -> tuple[float, float, bytes]:
    """(wall s, CPU s, stdout) of one run of lecture 05 from ``root``."""
    cmd = [sys.executable, str(root / "lectures" / "05_quantization_basics.py")]
    t0, c0 = time.perf_counter(), children_cpu()
    out = subprocess.run(cmd, check=True, capture_output=True, cwd=root,
                         env=dict(os.environ, PYTHONPATH=str(root), **(env or {}))).stdout
    return time.perf_counter() - t0, children_cpu() - c0, out


def bench_lecture(n, repeat, baseline: Path | None):
    """Lecture 05's wall time against a baseline checkout and with one more busy process.

    The busy process runs in a session of its own: with the kernel's autogroup scheduling,
    a process in the lecture's own session would take half of that session's CPU share on a
    machine that others load, whatever the lecture does. The CPU-time row (user + system of
    the lecture) shows what load-sensitive code would show, spinning or waiting threads,
    independently of how busy the machine is.
    """
    rows = []
    burner = [sys.executable, "-c", "while True: pass"]
    rounds = max(3, repeat // 2)
    new, old, busy, cpu_new, cpu_busy, outs = [], [], [], [], [], set()
    for r in range(rounds):
        t, c, out = run_lecture(ROOT)
        new.append(t)
        cpu_new.append(c)
        outs.add(out)
        if baseline is not None:
            t_b, _, out_b = run_lecture(baseline)
            old.append(t_b)
            outs.add(out_b)
        p = subprocess.Popen(burner, start_new_session=True)
        try:
            t, c, out = run_lecture(ROOT)
        finally:
            p.kill()
            p.wait()
        busy.append(t)
        cpu_busy.append(c)
        outs.add(out)
    same = yes(len(outs) == 1) + " (stdout bytes)"
    med = statistics.median
    if baseline is not None:
        ratio = med([a / b for a, b in zip(new, old)])
        rows.append(["lecture 05 wall s", f"{med(new):.2f}", f"baseline {baseline.name}",
                     f"{med(old):.2f}", f"{ratio:.2f}x", "<= 0.67x", yes(ratio <= 0.67), same])
    ratio = med([a / b for a, b in zip(busy, new)])
    rows.append(["lecture 05, +1 busy process", f"{med(busy):.2f}", "same lecture as is",
                 f"{med(new):.2f}", f"{ratio:.2f}x", "<= 1.3x", yes(ratio <= 1.3), same])
    ratio = med([a / b for a, b in zip(cpu_busy, cpu_new)])
    rows.append(["lecture 05 CPU s, +1 busy", f"{med(cpu_busy):.2f}", "same lecture as is",
                 f"{med(cpu_new):.2f}", f"{ratio:.2f}x", "<= 1.3x", yes(ratio <= 1.3),
                 "(CPU seconds, not wall)"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--baseline", type=Path, default=None,
                    help="a checkout whose lecture 05 is the reference (e.g. before a change)")
    args = ap.parse_args()
    only = args.only.split(",")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        only = [s for s in only if s not in ("mx", "torch", "int")]
    print(f"{args.n:,} float32 values, median of {args.repeat} interleaved rounds; {load()}")
    table = {"round": bench_round, "encode": bench_encode, "decode": bench_decode,
             "mx": bench_mx, "torch": bench_torch, "int": bench_int, "memory": bench_memory,
             "scaling": bench_scaling}
    for name in only:
        if name == "lecture":
            rows = bench_lecture(args.n, args.repeat, args.baseline)
        else:
            rows = table[name](args.n, args.repeat)
        if rows:
            print_header(f"{name} ({load()})")
            print_table(HEAD, rows)
            sys.stdout.flush()


if __name__ == "__main__":
    main()
