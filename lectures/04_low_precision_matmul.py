"""
Lecture 04: how is a low-precision matrix multiplication actually computed?

The question
    A GEMM y = x @ w.T with narrow operands is not "multiply small numbers". The hardware
    multiplies codes, accumulates them in a wider register, and applies scales afterwards.
    This lecture follows that path for three families, then times it where a GPU is present:

      Demo 1  int8 x int8 with an int32 accumulator: the zero-point correction for asymmetric
              activations, exactness against int64, and the K beyond which int32 can overflow.
      Demo 2  FP8 x FP8 with float32 scales per tensor or per row, output in bf16 (the rules
              of torch._scaled_mm); E4M3 against E5M2; error against an fp32 product.
      Demo 3  Block-scaled GEMM (MXFP8, MXFP6, MXFP4, NVFP4): a scale per 32 or 16 elements
              along K, applied block by block inside the dot product.
      Demo 4  Throughput (TFLOP/s) of bf16, fp8 and int8 GEMMs and the bandwidth of the
              quantize kernels, timed with CUDA events. On a CPU this demo only says so.

How to read the output
    Inputs are synthetic with fixed seeds: activations whose rows differ in magnitude by up
    to 2^16 (as tokens with outliers do), Gaussian weights. Errors are relative errors
    ||y - y_ref|| / ||y_ref|| in percent over the whole output, and for the worst output row
    (the token served worst); SQNR is in dB. Demos 1-3 run on the GPU when there is one
    (the real int8/FP8 kernels) and give the same numbers as on a CPU up to the last digits
    (accumulation order) and the int32 overflow example (cuBLAS may saturate, not wrap).

Run
    python lectures/04_low_precision_matmul.py     (about 3 s on a 2-core CPU; with a GPU,
                                                    demo 4 adds about a minute)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

try:
    import torch
except ImportError:
    if __name__ == "__main__":
        raise SystemExit("Lecture 04 needs torch 2.13.0: .venv/bin/pip install -e '.[lectures]' "
                         "(see the README for the CPU build)") from None
    raise

from console import print_header, print_observations, print_table, print_title, run_lecture
from numfmt import FORMATS, FP4_E2M1, FP6_E2M3, FP8_E4M3
import numfmt.torch as nt
from numfmt.torch import gemm
from benchmarks import gpu_timing as bench

SEED = 0
M, K, N = 64, 256, 128      # GEMM shape of demos 2 and 3: K and N multiples of 16
SPREAD_BITS = 16            # row magnitudes of x span 2^0 .. 2^16


def make_operands(m: int = M, k: int = K, n: int = N, spread_bits: float = SPREAD_BITS,
                  seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Activations x (m, k) with row scales 2^u, u uniform in [0, spread_bits], and Gaussian
    weights w (n, k) / sqrt(k): float64 arrays."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((m, k)) * np.exp2(rng.uniform(0, spread_bits, (m, 1)))
    w = rng.standard_normal((n, k)) / np.sqrt(k)
    return x, w


def _pct(v: float) -> str:
    return f"{100 * v:.3f}%"


def worst_row_error(y: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest relative error of one output row, max_m ||y_m - ref_m|| / ||ref_m||."""
    return float(((y - ref).norm(dim=1) / ref.norm(dim=1)).max())


# ---------------------------------------------------------------------------------------------
# Demo 1: integer GEMM
# ---------------------------------------------------------------------------------------------
@dataclass
class IntGemmResult:
    shape: tuple            # (M, K, N)
    zero_point: int         # z of the uint8 activations
    exact: bool             # int32 GEMM + correction == int64 reference, every element
    acc_max: int            # largest |acc| seen, far below 2^31
    rel_error: float        # integer pipeline against the fp64 product of the inputs
    dequant_diff: float     # max |integer pipeline - dequantize-then-multiply in fp64|
    k_safe_full: int        # largest K safe from overflow with codes in [-128, 127]
    k_safe_restricted: int  # ... with codes in [-127, 127]
    overflow_k: int         # K of the overflow example (all codes -128)
    overflow_int32: int     # what the int32 accumulator holds there
    overflow_exact: int     # the true sum


def demo1_int8_gemm(device=None, seed: int = SEED) -> IntGemmResult:
    """uint8 activations x int8 weights through an int8 GEMM with int32 accumulation.

    What to notice: the integer result is exact (it equals the int64 reference element for
    element), and the zero point costs only a weight row-sum times a constant. The float
    output equals dequantize-then-multiply up to float64 rounding. int32 is safe until K
    times the largest product reaches 2^31: K = 131071 with full int8 codes; one more and
    the sum overflows. On the CPU it wraps around to a negative number; cuBLAS does not
    document whether its int8 kernels wrap or saturate, so on a GPU the table shows which.
    """
    device = device if device is not None else nt.default_device()  # the GPU when present
    x, w = make_operands(32, K, 64, seed=seed)
    r = gemm.int8_linear(torch.from_numpy(x), torch.from_numpy(w), device=device)
    ref = torch.from_numpy(x @ w.T)
    k_full = gemm.int32_safe_k(128, 128)
    k_over = k_full + 1
    dev = r.acc.device
    # M > 16 for cuBLAS; N = 16 as in torch's own CUDA tests of _int_mm.
    a = torch.full((17, k_over), -128, dtype=torch.int8, device=dev)
    b = torch.full((k_over, 16), -128, dtype=torch.int8, device=dev)
    wrapped = int(gemm.int8_mm(a, b)[0, 0])
    return IntGemmResult(
        shape=(32, K, 64), zero_point=r.zero_point,
        exact=bool(torch.equal(r.acc.cpu().to(torch.int64) - r.correction.cpu(), r.exact)),
        acc_max=int(r.acc.abs().max()),
        rel_error=nt.rel_error(r.y.cpu(), ref),
        dequant_diff=float((r.y.cpu() - r.x_hat.cpu() @ r.w_hat.cpu().T).abs().max()),
        k_safe_full=k_full, k_safe_restricted=gemm.int32_safe_k(127, 127),
        overflow_k=k_over, overflow_int32=wrapped, overflow_exact=k_over * 128 * 128)


def show_demo1(r: IntGemmResult) -> None:
    print_header("Demo 1: int8 x int8 -> int32, with the zero-point correction")
    m, k, n = r.shape
    print_table(["quantity", "value"], [
        ["shape M x K x N", f"{m} x {k} x {n}"],
        ["activation zero point z (uint8)", r.zero_point],
        ["int32 GEMM + correction == int64 reference", "yes" if r.exact else "NO"],
        ["largest accumulator magnitude", f"{r.acc_max:,}"],
        ["error vs fp64 product of the inputs", _pct(r.rel_error)],
        ["max difference, integer path vs dequantized fp64", f"{r.dequant_diff:.1e}"],
        ["largest safe K, codes in [-128, 127]", f"{r.k_safe_full:,}"],
        ["largest safe K, codes in [-127, 127]", f"{r.k_safe_restricted:,}"],
    ])
    print_observations([
        "The GEMM runs on (q_x - 128) in int8; the zero point comes back as one term, "
        "(z - 128) * sum_k q_w, computed once per weight row.",
        f"Exact: the int32 result equals the int64 reference, since |acc| <= {r.acc_max:,} "
        f"is far below 2^31 = {2**31:,}.",
        f"With K = {r.overflow_k:,} codes of -128 the true sum is {r.overflow_exact:,}; the "
        f"int32 accumulator holds {r.overflow_int32:,}. Longer K needs split accumulation.",
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: FP8 GEMM with scales
# ---------------------------------------------------------------------------------------------
FP8_CASES = (("E4M3", "E4M3", "tensor"), ("E4M3", "E4M3", "row"),
             ("E5M2", "E4M3", "tensor"), ("E5M2", "E4M3", "row"))


def fp8_gemm_error(fmt_x: str = "E4M3", fmt_w: str = "E4M3", granularity: str = "tensor",
                   spread_bits: float = SPREAD_BITS, device=None, seed: int = SEED) -> dict:
    """Run one FP8 GEMM case; returns ``{"rel_error", "worst_row", "sqnr_db"}`` against the
    fp32 product.

    The reference is x @ w.T computed in fp32 from the unquantized inputs; the FP8 output is
    bf16, as torch._scaled_mm returns it.
    """
    x, w = make_operands(spread_bits=spread_bits, seed=seed)
    y = gemm.fp8_linear(torch.from_numpy(x), torch.from_numpy(w), FORMATS[fmt_x],
                        FORMATS[fmt_w], granularity, device=device)
    ref = torch.from_numpy(x).float() @ torch.from_numpy(w).float().T
    y, ref = y.cpu().double(), ref.double()
    return {"rel_error": nt.rel_error(y, ref), "worst_row": worst_row_error(y, ref),
            "sqnr_db": nt.sqnr_db(y, ref)}


@dataclass
class Fp8GemmResult:
    rows: list      # [x format, w format, scales, rel error, worst row, SQNR dB]
    errors: dict    # (fmt_x, fmt_w, granularity) -> rel error
    worst: dict     # (fmt_x, fmt_w, granularity) -> worst-row rel error
    bf16_error: tuple  # (rel error, worst row) of x, w rounded to bf16, fp32 product
    path: str       # "torch._scaled_mm (cuBLASLt)" or "CPU emulation"


def demo2_fp8_gemm(device=None, seed: int = SEED) -> Fp8GemmResult:
    """FP8 GEMMs with per-tensor and per-row scales, E4M3 and E5M2 activations.

    What to notice: the error over the whole output hardly moves, because the large rows
    dominate it. The worst row tells the real story: with one scale for the tensor, the small
    rows of x fall into E4M3's subnormals and lose their digits; per-row scales give every row
    the whole format. E5M2's wider range survives one scale better, but with per-row scales
    E4M3's extra mantissa bit wins.
    """
    dev = torch.device(device) if device is not None else nt.default_device()
    errors, worst, rows = {}, {}, []
    for fx, fw, gran in FP8_CASES:
        e = fp8_gemm_error(fx, fw, gran, device=dev, seed=seed)
        errors[(fx, fw, gran)], worst[(fx, fw, gran)] = e["rel_error"], e["worst_row"]
        rows.append([fx, fw, f"per {gran}", _pct(e["rel_error"]), _pct(e["worst_row"]),
                     f"{e['sqnr_db']:.1f}"])
    x, w = make_operands(seed=seed)
    xb = torch.from_numpy(x).to(torch.bfloat16).float()
    wb = torch.from_numpy(w).to(torch.bfloat16).float()
    ref = (torch.from_numpy(x).float() @ torch.from_numpy(w).float().T).double()
    yb = (xb @ wb.T).to(torch.bfloat16).double()
    bf16 = (nt.rel_error(yb, ref), worst_row_error(yb, ref))
    path = ("torch._scaled_mm (cuBLASLt)" if gemm.fp8_kernel_available(dev)
            else "CPU emulation" if dev.type == "cpu" else f"emulation on {dev.type}")
    return Fp8GemmResult(rows, errors, worst, bf16, path)


def show_demo2(r: Fp8GemmResult) -> None:
    print_header(f"Demo 2: FP8 GEMM, bf16 output, against the fp32 product ({r.path})")
    print_table(["x", "w", "scales", "rel error", "worst row", "SQNR dB"],
                r.rows + [["BF16", "BF16", "none", _pct(r.bf16_error[0]),
                           _pct(r.bf16_error[1]), "-"]])
    e, w = r.errors, r.worst
    print_observations([
        f"E4M3, worst row: per-row scales cut the error from {_pct(w[('E4M3', 'E4M3', 'tensor')])}"
        f" to {_pct(w[('E4M3', 'E4M3', 'row')])}; the rows of x span 2^{SPREAD_BITS} in size.",
        f"With one scale, E5M2's range helps the worst row ({_pct(w[('E5M2', 'E4M3', 'tensor')])}"
        f" against E4M3's {_pct(w[('E4M3', 'E4M3', 'tensor')])}).",
        f"Per row, E4M3 activations beat E5M2 by "
        f"{e[('E5M2', 'E4M3', 'row')] / e[('E4M3', 'E4M3', 'row')]:.1f}x: one more mantissa "
        "bit. With one scale per tensor, FP8 training keeps E5M2 for gradients, whose range "
        "matters more than their digits (Micikevicius et al. 2022); with fine-grained scales "
        "E4M3 serves everywhere (DeepSeek-V3; lecture 03, demo 1).",
        "cuBLAS's rules for FP8 GEMMs, which numfmt's wrapper checks on every device (also on "
        "the CPU): second operand column-major, K and N multiples of 16, float32 scales, never "
        "E5M2 x E5M2.",
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: block-scaled GEMM
# ---------------------------------------------------------------------------------------------
BLOCK_CASES = (
    ("FP8 E4M3, one scale", lambda t, device=None: nt.tensor_scaled(t, FP8_E4M3, device=device)),
    ("MXFP8 (E4M3, 32)", lambda t, device=None: nt.mx_quantize(t, FP8_E4M3, device=device)),
    ("MXFP6 (E2M3, 32)", lambda t, device=None: nt.mx_quantize(t, FP6_E2M3, device=device)),
    ("MXFP4 (E2M1, 32)", lambda t, device=None: nt.mx_quantize(t, FP4_E2M1, device=device)),
    ("NVFP4 (E2M1, 16)", lambda t, device=None: nt.nvfp4_quantize(t, device=device)),
)


@dataclass
class BlockGemmResult:
    rows: list        # [format, bits/element, rel error, worst row, SQNR dB]
    errors: dict      # format label -> rel error against the fp64 product
    worst: dict       # format label -> worst-row rel error
    bits: dict        # format label -> bits per element
    max_path_diff: float  # max over formats of |blockwise - dequantized matmul| / max |y|
    native: bool      # whether this machine can run block-scaled GEMMs natively


def demo3_block_gemm(device=None, seed: int = SEED) -> BlockGemmResult:
    """Block-scaled GEMMs emulated exactly: per-block dot products times both block scales.

    What to notice: the blockwise accumulation equals dequantize-then-multiply to float64
    rounding, so the scale can be applied after each block's integer-like dot product. Block
    scales follow the rows' magnitudes, so MXFP8's worst row is far better than with one FP8
    scale for the tensor; at 4 bits, NVFP4's smaller blocks and finer E4M3 scales beat MXFP4.
    """
    device = device if device is not None else nt.default_device()
    x, w = make_operands(seed=seed)
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    ref = tx @ tw.T
    rows, errors, worst, bits, diff = [], {}, {}, {}, 0.0
    for label, quantize in BLOCK_CASES:
        if label.endswith("one scale"):
            qx, qw = quantize(tx, device=device), quantize(tw, device=device)
            y = qx.values @ qw.values.T
        else:
            y, qx, qw = gemm.block_scaled_linear(tx, tw, quantize, device=device)
            diff = max(diff, float((y - qx.values @ qw.values.T).abs().max() / y.abs().max()))
        y = y.cpu()
        errors[label], bits[label] = nt.rel_error(y, ref), qx.bits_per_element
        worst[label] = worst_row_error(y, ref)
        rows.append([label, f"{qx.bits_per_element:.2f}", _pct(errors[label]),
                     _pct(worst[label]), f"{nt.sqnr_db(y, ref):.1f}"])
    return BlockGemmResult(rows, errors, worst, bits, diff,
                           gemm.native_block_scaled_available(device))


def show_demo3(r: BlockGemmResult) -> None:
    print_header("Demo 3: block-scaled GEMM (emulated), against the fp64 product")
    print_table(["format", "bits/element", "rel error", "worst row", "SQNR dB"], r.rows)
    e, w = r.errors, r.worst
    print_observations([
        f"Blockwise accumulation and dequantize-then-multiply differ by at most "
        f"{r.max_path_diff:.1e} of the largest output: scaling per block inside the dot "
        "product is the same math.",
        f"Worst row: MXFP8 {_pct(w['MXFP8 (E4M3, 32)'])} against "
        f"{_pct(w['FP8 E4M3, one scale'])} with one scale: small rows keep their digits.",
        f"NVFP4 {_pct(e['NVFP4 (E2M1, 16)'])} against MXFP4 {_pct(e['MXFP4 (E2M1, 32)'])}, for "
        f"{r.bits['NVFP4 (E2M1, 16)'] - r.bits['MXFP4 (E2M1, 32)']:.2f} more bits per element.",
        "Native block-scaled GEMMs need a Blackwell GPU (compute capability 10.0 or later: "
        "sm_100 data-centre parts and sm_120 RTX 50 / DGX Spark alike have block-scaled MMA); "
        "here: "
        + ("available." if r.native else "not available, so this is the emulation."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: throughput
# ---------------------------------------------------------------------------------------------
CPU_NOTE = "Timings need a CUDA GPU. This run used the CPU: nothing was timed."
QUANT_NUMEL = 1 << 29       # 2^29 bf16 elements: 1 GiB, far beyond any cache


@dataclass
class ThroughputResult:
    gemm_rows: list       # dicts from bench.throughput_rows
    quant_rows: list      # dicts from bench.quantize_bandwidth, plus "of_peak"
    peak_gbs: float | None
    device_name: str
    note: str


def demo4_throughput(device=None, sizes=(4096, 8192), iters: int = 10,
                     quant_numel: int = QUANT_NUMEL, errors: str = "raise") -> ThroughputResult:
    """TFLOP/s of bf16, fp8 per-tensor, fp8 per-row and int8 GEMMs; GB/s of quantize kernels.

    What to notice (on a GPU): FP8 and int8 tensor cores run about twice the bf16 rate on
    Hopper; per-row scales cost little; the cast kernel is memory-bound and close to peak
    bandwidth, while the eager scale-then-cast pays for a second pass over memory.
    On a CPU nothing is timed (pass ``device="cpu"`` explicitly to smoke-test the code).
    ``errors="record"`` turns a kernel that fails into a row with ``"error"`` instead of
    raising (see :func:`numfmt.torch.bench.throughput_rows`); gpu_check uses it.
    """
    dev = torch.device(device) if device is not None else nt.default_device()
    if dev.type != "cuda" and device is None:
        return ThroughputResult([], [], None, "the CPU", CPU_NOTE)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "the CPU"
    rows = bench.throughput_rows(sizes, dev, iters=iters, errors=errors)
    peak = bench.peak_bandwidth_gbs(dev)
    quant = bench.quantize_rows(quant_numel, dev, iters=iters, peak_gbs=peak, errors=errors)
    return ThroughputResult(rows, quant, peak, name, "")


def show_demo4(r: ThroughputResult) -> None:
    print_header(f"Demo 4: throughput on {r.device_name}")
    if r.note:
        print(r.note)
        return
    print_table(["GEMM", "n", "ms", "TFLOP/s", "vs bf16"],
                [[g["kind"], g["n"], f"{g['ms']:.3f}", f"{g['tflops']:.0f}",
                  f"{g['vs_bf16']:.2f}x"] for g in r.gemm_rows])
    print_table(["quantize kernel", "GB moved", "ms", "GB/s", "of peak"],
                [[q["kernel"], f"{q['gbytes']:.2f}", f"{q['ms']:.3f}", f"{q['gbs']:.0f}",
                  f"{100 * q['of_peak']:.0f}%" if q["of_peak"] else "n/a"]
                 for q in r.quant_rows])
    print_observations([f"Peak bandwidth assumed: {r.peak_gbs} GB/s (data sheet)."
                        if r.peak_gbs else "Peak bandwidth of this device is unknown."])


TITLE = "Lecture 04: how a low-precision matrix multiplication is computed"
INTRO = (
    "A GEMM y = x @ w.T with narrow operands multiplies codes, sums them in a wider accumulator "
    "and applies the scales afterwards. This lecture follows that path for integer, FP8 and "
    "block-scaled formats, and asks what each step costs in accuracy.",
    "Demo 1 runs int8 x int8 with an int32 accumulator, zero-point correction included. Demo 2 "
    "runs FP8 x FP8 with per-tensor or per-row scales. Demo 3 emulates block-scaled GEMMs "
    "(MXFP8, MXFP6, MXFP4, NVFP4). Demo 4 times the kernels on a CUDA GPU; on a CPU it only "
    "says so.",
    "How to read the numbers: y is the low-precision result and y_ref a higher-precision "
    "product of the same inputs. Rel error is ||y - y_ref|| / ||y_ref|| in percent, over the "
    "whole output or over the worst output row. SQNR = 10 log10(||y_ref||² / ||y - y_ref||²), "
    f"in dB. Inputs have fixed seeds; the rows of x differ in size by up to 2^{SPREAD_BITS}.",
)


def main() -> None:
    print_title(TITLE, INTRO)
    show_demo1(demo1_int8_gemm())
    show_demo2(demo2_fp8_gemm())
    show_demo3(demo3_block_gemm())
    show_demo4(demo4_throughput())


if __name__ == "__main__":
    run_lecture(main)
