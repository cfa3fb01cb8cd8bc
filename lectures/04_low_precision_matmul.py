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

from console import (ROUNDING_BOUND, below_bound, lecture_parser, print_header,  # noqa: F401
                     print_observations, print_table, print_title, run_lecture)
from console.i18n import N_
from lectures.i18n import domain

_ = domain("lecture04").gettext

try:
    import torch
except ImportError:
    if __name__ == "__main__":
        def _missing_torch() -> None:
            raise SystemExit(_("Lecture 04 needs torch 2.13.0: .venv/bin/pip install -e "
                               "'.[lectures]' (see the README for the CPU build)"))
        run_lecture(_missing_torch)     # reads --lang first, then exits with the message
    raise

from numfmt import FORMATS, FP4_E2M1, FP6_E2M3, FP8_E4M3
import numfmt.torch as nt
from numfmt.torch import gemm
from lectures import gpu_timing as bench

SEED = 0
M, K, N = 64, 256, 128      # GEMM shape of demos 2 and 3: K and N multiples of 16
SPREAD_BITS = 16            # row magnitudes of x span 2^0 .. 2^16
# Demos 1 and 3 compare two float64 computations of the same product: their difference is
# float64 rounding (below 1e-15 of the largest output here), printed as console's bound.


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
    dequant_diff: float     # max |integer pipeline - dequantize-then-multiply| / max |y|
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
        dequant_diff=float((r.y.cpu() - r.x_hat.cpu() @ r.w_hat.cpu().T).abs().max()
                           / r.y.cpu().abs().max()),
        k_safe_full=k_full, k_safe_restricted=gemm.int32_safe_k(127, 127),
        overflow_k=k_over, overflow_int32=wrapped, overflow_exact=k_over * 128 * 128)


def show_demo1(r: IntGemmResult) -> None:
    print_header(_("Demo 1: int8 x int8 -> int32, with the zero-point correction"))
    m, k, n = r.shape
    print_table([_("quantity"), _("value")], [
        [_("shape M x K x N"), f"{m} x {k} x {n}"],
        [_("activation zero point z (uint8)"), r.zero_point],
        [_("int32 GEMM + correction == int64 reference"), _("yes") if r.exact else _("NO")],
        [_("largest accumulator magnitude"), f"{r.acc_max:,}"],
        [_("error vs fp64 product of the inputs"), _pct(r.rel_error)],
        [_("max difference / max |y|, integer path vs dequantized fp64"),
         below_bound(r.dequant_diff)],
        [_("largest safe K, codes in [-128, 127]"), f"{r.k_safe_full:,}"],
        [_("largest safe K, codes in [-127, 127]"), f"{r.k_safe_restricted:,}"],
    ])
    print_observations([
        _("The GEMM runs on (q_x - 128) in int8; the zero point comes back as one term, "
          "(z - 128) * sum_k q_w, computed once per weight row."),
        _("Exact: the int32 result equals the int64 reference, since |acc| <= {acc_max:,} is far "
          "below 2^31 = {limit:,}.").format(acc_max=r.acc_max, limit=2**31),
        _("With K = {k:,} codes of -128 the true sum is {exact:,}; the int32 accumulator holds "
          "{held:,}. Longer K needs split accumulation.").format(
            k=r.overflow_k, exact=r.overflow_exact, held=r.overflow_int32),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: FP8 GEMM with scales
# ---------------------------------------------------------------------------------------------
FP8_CASES = (("E4M3", "E4M3", "tensor"), ("E4M3", "E4M3", "row"),
             ("E5M2", "E4M3", "tensor"), ("E5M2", "E4M3", "row"))
# The "scales" column of demo 2 (kept in English in the result, translated where printed).
GRANULARITY = {"tensor": N_("per tensor"), "row": N_("per row")}


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
        rows.append([fx, fw, GRANULARITY[gran], _pct(e["rel_error"]), _pct(e["worst_row"]),
                     f"{e['sqnr_db']:.1f}"])
    x, w = make_operands(seed=seed)
    xb = torch.from_numpy(x).to(torch.bfloat16).float()
    wb = torch.from_numpy(w).to(torch.bfloat16).float()
    ref = (torch.from_numpy(x).float() @ torch.from_numpy(w).float().T).double()
    yb = (xb @ wb.T).to(torch.bfloat16).double()
    bf16 = (nt.rel_error(yb, ref), worst_row_error(yb, ref))
    path = ("torch._scaled_mm (cuBLASLt)" if gemm.fp8_kernel_available(dev)
            else N_("CPU emulation") if dev.type == "cpu"
            else N_("emulation on {device}").format(device=dev.type))
    return Fp8GemmResult(rows, errors, worst, bf16, path)


def path_text(path: str) -> str:
    """Demo 2's GEMM path (``Fp8GemmResult.path``, English) in the current language."""
    device = path.removeprefix("emulation on ")
    return _("emulation on {device}").format(device=device) if device != path else _(path)


def show_demo2(r: Fp8GemmResult) -> None:
    print_header(_("Demo 2: FP8 GEMM, bf16 output, against the fp32 product ({path})").format(
        path=path_text(r.path)))
    rows = [[fx, fw, _(scales), *rest] for fx, fw, scales, *rest in r.rows]
    print_table(["x", "w", _("scales"), _("rel error"), _("worst row"), "SQNR dB"],
                rows + [["BF16", "BF16", _("none"), _pct(r.bf16_error[0]),
                         _pct(r.bf16_error[1]), "-"]])
    e, w = r.errors, r.worst
    print_observations([
        _("E4M3, worst row: per-row scales cut the error from {tensor} to {row}; the rows of x "
          "span 2^{spread} in size.").format(tensor=_pct(w[('E4M3', 'E4M3', 'tensor')]),
                                             row=_pct(w[('E4M3', 'E4M3', 'row')]),
                                             spread=SPREAD_BITS),
        _("With one scale, E5M2's range helps the worst row ({e5m2} against E4M3's "
          "{e4m3}).").format(e5m2=_pct(w[('E5M2', 'E4M3', 'tensor')]),
                             e4m3=_pct(w[('E4M3', 'E4M3', 'tensor')])),
        _("Per row, E4M3 activations beat E5M2 by {ratio:.1f}x: one more mantissa bit. With one "
          "scale per tensor, FP8 training keeps E5M2 for gradients, whose range matters more than "
          "their digits (Micikevicius et al. 2022); with fine-grained scales E4M3 serves "
          "everywhere (DeepSeek-V3; lecture 03, demo 1).").format(
            ratio=e[('E5M2', 'E4M3', 'row')] / e[('E4M3', 'E4M3', 'row')]),
        _("cuBLAS's rules for FP8 GEMMs, which numfmt's wrapper checks on every device (also on "
          "the CPU): second operand column-major, K and N multiples of 16, float32 scales, never "
          "E5M2 x E5M2."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: block-scaled GEMM
# ---------------------------------------------------------------------------------------------
BLOCK_CASES = (
    (N_("FP8 E4M3, one scale"),
     lambda t, device=None: nt.tensor_scaled(t, FP8_E4M3, device=device)),
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
    clipped_blocks: dict = None  # MX label -> fraction of the blocks of x and w that saturate
    rceil: tuple = None   # (rel error, worst row) of MXFP8 with the exponent rounded up


def demo3_block_gemm(device=None, seed: int = SEED) -> BlockGemmResult:
    """Block-scaled GEMMs emulated exactly: per-block dot products times both block scales.

    What to notice: the blockwise accumulation equals dequantize-then-multiply to float64
    rounding, so the scale can be applied after each block's integer-like dot product. Block
    scales follow the rows' magnitudes, so MXFP8's worst row is far better than with one FP8
    scale for the tensor; at 4 bits, NVFP4's smaller blocks and finer E4M3 scales beat MXFP4.
    MXFP6 (E2M3) beats MXFP8 because OCP's floor rule saturates E4M3 blocks more often (its
    448 is 7/8 of the binade's top, E2M3's 7.5 is 15/16); rounding the exponent up (RCEIL)
    removes that and MXFP8 wins, which the result records.
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
    clipped = {label: clipped_block_fraction((tx, tw), elem, device)
               for label, elem in (("MXFP8 (E4M3, 32)", FP8_E4M3),
                                   ("MXFP6 (E2M3, 32)", FP6_E2M3))}
    y, _qx, _qw = gemm.block_scaled_linear(
        tx, tw, lambda t, device=None: nt.mx_quantize(t, FP8_E4M3, device=device,
                                                      scale_rule="rceil"), device=device)
    y = y.cpu()
    return BlockGemmResult(rows, errors, worst, bits, diff,
                           gemm.native_block_scaled_available(device), clipped,
                           (nt.rel_error(y, ref), worst_row_error(y, ref)))


def clipped_block_fraction(operands, elem, device=None, block: int = 32) -> float:
    """Fraction of the MX blocks of ``operands`` (2-D tensors, blocks along the last axis) with
    an element above ``elem.max_value`` after division by the block's scale (OCP's rule): the
    blocks whose largest values saturate."""
    over = []
    for t in operands:
        q = nt.mx_quantize(t, elem, block, device=device)
        scaled = t.to(q.scales.device).reshape(-1, block).abs() / q.scales.reshape(-1, 1)
        over.append((scaled > elem.max_value).any(dim=1))
    return float(torch.cat(over).double().mean())


def show_demo3(r: BlockGemmResult) -> None:
    print_header(_("Demo 3: block-scaled GEMM (emulated), against the fp64 product"))
    # Only "FP8 E4M3, one scale" has a translation; the MX and NV format labels print as they are.
    print_table([_("format"), _("bits/element"), _("rel error"), _("worst row"), "SQNR dB"],
                [[_(label), *rest] for label, *rest in r.rows])
    e, w = r.errors, r.worst
    print_observations([
        _("Blockwise accumulation and dequantize-then-multiply agree to float64 rounding (the "
          "largest difference is {diff} of the largest output): scaling per block inside the "
          "dot product is the same math.").format(diff=below_bound(r.max_path_diff)),
        _("Worst row: MXFP8 {mxfp8} against {one} with one scale: small rows keep their "
          "digits.").format(mxfp8=_pct(w['MXFP8 (E4M3, 32)']),
                            one=_pct(w['FP8 E4M3, one scale'])),
        _("MXFP6 beats MXFP8 with two bits fewer (worst row {mxfp6} against {mxfp8}). E2M3 and "
          "E4M3 have the same 3 mantissa bits, so they round a block's large values alike; the "
          "difference is saturation. OCP's scale puts a block's maximum in [256, 512) for E4M3, "
          "above its largest value 448 in {clip8:.1%} of the blocks of x and w, and in [4, 8) "
          "for E2M3, above 7.5 in {clip6:.1%}. With the exponent rounded up (RCEIL, lecture 05), "
          "nothing saturates and MXFP8's worst row is {rceil}, ahead of MXFP6.").format(
            mxfp6=_pct(w['MXFP6 (E2M3, 32)']), mxfp8=_pct(w['MXFP8 (E4M3, 32)']),
            clip8=r.clipped_blocks['MXFP8 (E4M3, 32)'],
            clip6=r.clipped_blocks['MXFP6 (E2M3, 32)'], rceil=_pct(r.rceil[1])),
        _("NVFP4 {nvfp4} against MXFP4 {mxfp4}, for {extra:.2f} more bits per element.").format(
            nvfp4=_pct(e['NVFP4 (E2M1, 16)']), mxfp4=_pct(e['MXFP4 (E2M1, 32)']),
            extra=r.bits['NVFP4 (E2M1, 16)'] - r.bits['MXFP4 (E2M1, 32)']),
        _("Native block-scaled GEMMs need a Blackwell GPU (compute capability 10.0 or later: "
          "sm_100 data-centre parts and sm_120 RTX 50 / DGX Spark alike have block-scaled MMA); "
          "here: available.") if r.native else
        _("Native block-scaled GEMMs need a Blackwell GPU (compute capability 10.0 or later: "
          "sm_100 data-centre parts and sm_120 RTX 50 / DGX Spark alike have block-scaled MMA); "
          "here: not available, so this is the emulation."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: throughput
# ---------------------------------------------------------------------------------------------
CPU_NOTE = N_("Timings need a CUDA GPU. This run used the CPU: nothing was timed.")
QUANT_NUMEL = 1 << 29       # 2^29 bf16 elements: 1 GiB, far beyond any cache
# lectures.gpu_timing's names of its GEMMs and quantize kernels, marked so that demo 4's tables
# print them translated (bf16, int8 and amax are names and print as they are).
BENCH_LABELS = (N_("fp8 per-tensor"), N_("fp8 per-row"), N_("cast to E4M3"),
                N_("scale + cast (eager, 2 kernels)"))


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
    raising (see :func:`lectures.gpu_timing.throughput_rows`); gpu_check uses it.
    """
    dev = torch.device(device) if device is not None else nt.default_device()
    if dev.type != "cuda" and device is None:
        return ThroughputResult([], [], None, N_("the CPU"), CPU_NOTE)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else N_("the CPU")
    rows = bench.throughput_rows(sizes, dev, iters=iters, errors=errors)
    peak = bench.peak_bandwidth_gbs(dev)
    quant = bench.quantize_rows(quant_numel, dev, iters=iters, peak_gbs=peak, errors=errors)
    return ThroughputResult(rows, quant, peak, name, "")


def show_demo4(r: ThroughputResult) -> None:
    # A GPU's name has no translation and prints as it is.
    print_header(_("Demo 4: throughput on {device}").format(device=_(r.device_name)))
    if r.note:
        print(_(r.note))
        return
    print_table(["GEMM", "n", "ms", "TFLOP/s", _("vs bf16")],
                [[_(g["kind"]), g["n"], f"{g['ms']:.3f}", f"{g['tflops']:.0f}",
                  f"{g['vs_bf16']:.2f}x"] for g in r.gemm_rows])
    print_table([_("quantize kernel"), _("GB moved"), "ms", "GB/s", _("of peak")],
                [[_(q["kernel"]), f"{q['gbytes']:.2f}", f"{q['ms']:.3f}", f"{q['gbs']:.0f}",
                  f"{100 * q['of_peak']:.0f}%" if q["of_peak"] else _("n/a")]
                 for q in r.quant_rows])
    print_observations([_("Peak bandwidth assumed: {peak} GB/s (data sheet).").format(
                            peak=r.peak_gbs)
                        if r.peak_gbs else _("Peak bandwidth of this device is unknown.")])


def title() -> str:
    """The lecture's title, in the current language."""
    return _("Lecture 04: how a low-precision matrix multiplication is computed")


def intro() -> list[str]:
    """The lecture's introductory paragraphs, in the current language."""
    return [
        _("A GEMM y = x @ w.T with narrow operands multiplies codes, sums them in a wider "
          "accumulator and applies the scales afterwards. This lecture follows that path for "
          "integer, FP8 and block-scaled formats, and asks what each step costs in accuracy."),
        _("Demo 1 runs int8 x int8 with an int32 accumulator, zero-point correction included. "
          "Demo 2 runs FP8 x FP8 with per-tensor or per-row scales. Demo 3 emulates block-scaled "
          "GEMMs (MXFP8, MXFP6, MXFP4, NVFP4). Demo 4 times the kernels on a CUDA GPU; on a CPU "
          "it only says so."),
        _("How to read the numbers: y is the low-precision result and y_ref a higher-precision "
          "product of the same inputs. Rel error is ||y - y_ref|| / ||y_ref|| in percent, over "
          "the whole output or over the worst output row. SQNR = 10 log10(||y_ref||² / "
          "||y - y_ref||²), in dB. Inputs have fixed seeds; the rows of x differ in size by up to "
          "2^{spread}.").format(spread=SPREAD_BITS),
    ]


def main() -> None:
    print_title(title(), intro())
    show_demo1(demo1_int8_gemm())
    show_demo2(demo2_fp8_gemm())
    show_demo3(demo3_block_gemm())
    show_demo4(demo4_throughput())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(title()))
