"""Every quantitative claim lecture 05 makes, computed by its own demo functions and asserted."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from wcwidth import wcswidth

ROOT = Path(__file__).resolve().parents[1]
L = importlib.import_module("lectures.05_quantization_basics")


@pytest.fixture(scope="module")
def d1():
    return L.demo1_affine_and_integer_matmul()


@pytest.fixture(scope="module")
def d2():
    return L.demo2_clipping()


@pytest.fixture(scope="module")
def d3():
    return L.demo3_granularity()


@pytest.fixture(scope="module")
def d4():
    return L.demo4_block_formats()


@pytest.fixture(scope="module")
def d5():
    return L.demo5_error_propagation()


def test_demo1_relu_codes_used_are_107_and_203(d1):
    assert d1.codes_used == {"symmetric": 107, "asymmetric": 203}


def test_demo1_asymmetric_uses_about_twice_the_codes_and_halves_the_error(d1):
    assert 1.8 < d1.codes_used["asymmetric"] / d1.codes_used["symmetric"] < 2.0
    assert 0.45 < d1.errors["asymmetric"] / d1.errors["symmetric"] < 0.55


def test_demo1_integer_pipeline_equals_dequantized_product_and_fits_int32(d1):
    assert d1.pipeline_diff < 1e-12          # float rounding only; values are O(1)
    assert d1.acc_max < L.INT32_MAX
    assert d1.output_error < 0.02            # 8-bit on both sides: about 1 %


def test_demo2_optimal_clip_is_smaller_for_heavier_tails(d2):
    c = {k: v[0] for k, v in d2.best.items()}
    assert c["Gaussian"] > c["Laplace"] > c["Student-t (ν = 5)"]
    ratio = d2.max_over_std
    assert ratio["Gaussian"] < ratio["Laplace"] < ratio["Student-t (ν = 5)"]


def test_demo2_clipping_helps_and_the_curve_is_u_shaped(d2):
    for name, errs in d2.errors.items():
        best_c, best_e, e1, _ = d2.best[name]
        assert best_e < e1                        # clipping beats c = 1
        assert errs[-1] > best_e                  # clipping too hard climbs again
        assert 0 < d2.clips.index(best_c) < len(d2.clips) - 1


def test_demo3_per_row_fixes_weights(d3):
    e = d3.errors
    assert e[("W", 4, "per row")] < 0.4 * e[("W", 4, "per tensor")]


def test_demo3_per_row_barely_helps_outlier_activations_but_groups_of_32_do(d3):
    e = d3.errors
    assert e[("A", 4, "per row")] > 0.9 * e[("A", 4, "per tensor")]       # barely helps
    assert e[("A", 4, "groups of 32")] < 0.5 * e[("A", 4, "per row")]      # groups do
    assert e[("A", 4, "groups of 32")] < e[("A", 4, "groups of 128")] < e[("A", 4, "per row")]


def test_demo3_scale_overhead_bits(d3):
    assert d3.extra_bits == [0.0, 16 / 4096, 16 / 128, 0.5]


def test_demo4_nvfp4_beats_int4_groups_at_the_same_4_5_bits(d4):
    bits = {label: b for label, b, _, _ in d4.formats}
    assert bits["NVFP4 (E2M1, 16 per E4M3 scale + FP32)"] == bits["INT4, groups of 32 (FP16 scale)"] == 4.5
    assert d4.error("NVFP4") < d4.error("INT4")


def test_demo4_scale_format_matters_more_than_block_size(d4):
    a = {k: v[0] for k, v in d4.ablation.items()}
    gain_from_scale = a[(32, "e8m0")] - a[(32, "e4m3")]
    gain_from_block = a[(32, "e4m3")] - a[(16, "e4m3")]
    assert gain_from_scale > gain_from_block > 0


def test_demo4_e4m3_scale_is_close_to_the_exact_scale(d4):
    a = {k: v[0] for k, v in d4.ablation.items()}
    for block in (16, 32):
        assert a[(block, "exact")] <= a[(block, "e4m3")] < 1.05 * a[(block, "exact")]


def test_demo4_mxfp8_is_slightly_worse_than_tensor_scaled_fp8(d4):
    assert d4.error("FP8 E4M3") < d4.error("MXFP8") < 1.5 * d4.error("FP8 E4M3")
    assert 0 < d4.mxfp8_clipped < 0.02


def test_demo4_e2m3_beats_e3m2_and_rivals_mxfp8(d4):
    assert d4.error("MXFP6 (E2M3") < 0.7 * d4.error("MXFP6 (E3M2")
    assert d4.error("MXFP6 (E2M3") < 1.1 * d4.error("MXFP8")


def test_demo4_bits_per_element(d4):
    bits = [b for _, b, _, _ in d4.formats]
    assert bits == [8, 8, 8.25, 6.25, 6.25, 4.5, 4.25, 4.5, 4]


def test_demo5_output_error_equals_weight_error(d5):
    for _, ew, ey in d5.rows:
        assert abs(ey - ew) < 0.02 * ew       # within 2 % of each other (relative)


def test_demo5_about_6_db_per_bit(d5):
    gains = d5.db_per_bit[3:]                  # INT5 - INT4 onward
    assert all(abs(g - 6.02) < 0.7 for g in gains)
    assert abs(d5.db_per_bit[-1] - 6.02) < 0.2  # closest at eight bits


def test_script_output_is_identical_from_root_and_from_lectures_dir():
    script = "05_quantization_basics.py"
    a = subprocess.run([sys.executable, f"lectures/{script}"], cwd=ROOT, capture_output=True,
                       text=True, check=True)
    b = subprocess.run([sys.executable, script], cwd=ROOT / "lectures", capture_output=True,
                       text=True, check=True)
    assert a.stdout == b.stdout and "\x1b[" not in a.stdout
    assert a.stdout.count("What to notice") == 5
    assert "107" in a.stdout and "203" in a.stdout
    assert a.stdout.startswith("#" * 100 + "\nLecture 05: quantization basics\n")
    # Fits a 100-column terminal (display width, so CJK or symbols count correctly).
    assert max(wcswidth(line) for line in a.stdout.splitlines()) <= 100
