"""Lecture 04's claims, asserted by running its demo functions (on the CPU)."""

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from console import display_width

torch = pytest.importorskip("torch")

L = importlib.import_module("lectures.04_low_precision_matmul")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def d1():
    return L.demo1_int8_gemm(device="cpu")


@pytest.fixture(scope="module")
def d2():
    return L.demo2_fp8_gemm(device="cpu")


@pytest.fixture(scope="module")
def d3():
    return L.demo3_block_gemm(device="cpu")


def test_demo1_integer_gemm_is_exact_and_int32_limits(d1):
    assert d1.exact
    assert d1.acc_max < 2**31 // 1000  # "far below 2^31": more than 1000x headroom
    assert d1.k_safe_full == 131071 and d1.k_safe_restricted == 133144
    assert d1.overflow_k == 131072 and d1.overflow_exact == 2**31
    assert d1.overflow_int32 == -2**31  # the wrap the text shows
    # Float64 rounding only, relative to the largest output: K-term sums round by about
    # sqrt(K) * 2^-53 ~ 2e-15, under the printed bound 1e-13; one code step would move y by
    # ~1 / 127 / sqrt(K) of it, far above.
    assert d1.dequant_diff < L.ROUNDING_BOUND == 1e-13
    # 8-bit quantization of both operands: half a step is amax / 254, with amax ~ 4 sigma of
    # the largest rows (which dominate the norm), about 1.6% of a typical value per operand,
    # 1.6% * sqrt(2) ~ 2.3% for the product (2.28% printed); 5% is twice that. Above 0:
    # the path does quantize.
    assert 0 < d1.rel_error < 0.05


def test_demo2_per_row_scales_rescue_the_worst_row(d2):
    w, e = d2.worst, d2.errors
    assert w[("E4M3", "E4M3", "row")] < w[("E4M3", "E4M3", "tensor")] / 3
    # With one scale, E5M2's range serves the worst row better than E4M3.
    assert w[("E5M2", "E4M3", "tensor")] < w[("E4M3", "E4M3", "tensor")]
    # Per row, one more mantissa bit: E4M3 beats E5M2 by more than 1.4x (ideal 2x per bit,
    # diluted because the weights are E4M3 in both rows).
    assert e[("E5M2", "E4M3", "row")] / e[("E4M3", "E4M3", "row")] > 1.4
    # The whole-output error barely moves: the large rows dominate it (the text says so).
    assert abs(e[("E4M3", "E4M3", "row")] / e[("E4M3", "E4M3", "tensor")] - 1) < 0.1
    assert d2.bf16_error[0] < min(e.values()) / 5
    assert d2.path == "CPU emulation"


def test_below_bound_prints_a_bound_for_rounding_and_the_number_above_it():
    assert L.below_bound(3e-15) == "< 1e-13" and L.below_bound(0.0) == "< 1e-13"
    assert L.below_bound(2.5e-10) == "2.50e-10"


def ocp_clipped_blocks(t: np.ndarray, emax: int, max_value: float, block: int = 32) -> float:
    """OCP MX v1.0 section 6.3, written here: the shared exponent is floor(log2(amax)) - emax of
    the element format; a block saturates when some |x| / 2^exponent exceeds its max."""
    b = np.abs(t).reshape(-1, block)
    e = np.floor(np.log2(b.max(axis=1))) - emax
    return float((b / np.exp2(e)[:, None] > max_value).any(axis=1).mean())


def test_demo3_mxfp6_beats_mxfp8_by_saturating_less(d3):
    w = d3.worst
    assert w["MXFP6 (E2M3, 32)"] < w["MXFP8 (E4M3, 32)"]             # the inversion
    x, wt = L.make_operands()
    for label, emax, top in (("MXFP8 (E4M3, 32)", 8, 448.0), ("MXFP6 (E2M3, 32)", 2, 7.5)):
        n = [ocp_clipped_blocks(t, emax, top) * t.size / 32 for t in (x, wt)]
        assert d3.clipped_blocks[label] == pytest.approx(sum(n) / ((x.size + wt.size) / 32))
    assert d3.clipped_blocks["MXFP6 (E2M3, 32)"] < 0.6 * d3.clipped_blocks["MXFP8 (E4M3, 32)"]
    # without saturation (exponent rounded up) MXFP8 is ahead again: saturation explains it
    assert d3.rceil[1] < w["MXFP6 (E2M3, 32)"] and d3.rceil[0] < d3.errors["MXFP6 (E2M3, 32)"]


def test_demo3_block_scaled_claims(d3):
    assert d3.max_path_diff < L.ROUNDING_BOUND  # the same math up to float64 rounding
    w, e = d3.worst, d3.errors
    assert w["MXFP8 (E4M3, 32)"] < w["FP8 E4M3, one scale"] / 3
    assert e["NVFP4 (E2M1, 16)"] < e["MXFP4 (E2M1, 32)"]
    assert d3.bits["NVFP4 (E2M1, 16)"] - d3.bits["MXFP4 (E2M1, 32)"] == 0.25
    assert d3.native is False  # no Blackwell here


def test_demo4_on_a_cpu_only_says_timings_need_a_gpu():
    r = L.demo4_throughput()
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; demo 4 times real kernels there")
    assert r.gemm_rows == [] and r.note == L.CPU_NOTE


def test_demo4_code_path_runs_on_the_cpu_at_tiny_sizes():
    r = L.demo4_throughput(device="cpu", sizes=(32,), iters=2, quant_numel=4096)
    assert len(r.gemm_rows) == 4 and len(r.quant_rows) == 3 and r.peak_gbs is None
    assert all(q["of_peak"] is None for q in r.quant_rows)


def test_lecture_runs_from_root_and_from_lectures_with_identical_output():
    script = "04_low_precision_matmul.py"
    a = subprocess.run([sys.executable, f"lectures/{script}"], cwd=ROOT, capture_output=True,
                       text=True, check=True).stdout
    b = subprocess.run([sys.executable, script], cwd=ROOT / "lectures", capture_output=True,
                       text=True, check=True).stdout
    assert a == b and "Demo 4" in a
    assert a.startswith("#") and "Lecture 04:" in a.splitlines()[1]
    # every line fits a 100-column terminal
    assert max(display_width(line) for line in a.splitlines()) <= 100
