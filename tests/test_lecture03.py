"""Lecture 03's claims, with independent checks through ml_dtypes casts and hand derivations."""

import importlib
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from console import display_width

L = importlib.import_module("lectures.03_scaling")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def d1():
    return {(r["tensor"], r["fmt"]): r for r in L.demo1_tensor_scaling().rows}


def rel(q, x):
    return float(np.linalg.norm(q - x) / np.linalg.norm(x))


def test_unscaled_fp8_flushes_gradients_and_clips_activations(d1):
    t = L.training_tensors()
    g = t["gradients"]
    # ml_dtypes cast as the oracle for the flush rates without a scale
    for name, dt in (("E4M3", ml_dtypes.float8_e4m3fn), ("E5M2", ml_dtypes.float8_e5m2)):
        flushed = float(np.mean(g.astype(dt).astype(np.float64) == 0))
        assert d1["gradients", name]["raw_flushed"] == flushed
    assert d1["gradients", "E4M3"]["raw_flushed"] > 0.999
    assert d1["gradients", "E5M2"]["raw_flushed"] > 0.8
    assert d1["activations", "E4M3"]["raw_clipped"] == np.mean(np.abs(t["activations"]) > 448)
    assert d1["activations", "E4M3"]["raw_clipped"] > 0


def test_scaled_fp8_errors_against_ml_dtypes(d1):
    for name, x in L.training_tensors().items():
        for fmt, dt, top in (("E4M3", ml_dtypes.float8_e4m3fn, 448.0),
                             ("E5M2", ml_dtypes.float8_e5m2, 57344.0)):
            s = np.abs(x).max() / top
            q = np.clip(x / s, -top, top).astype(dt).astype(np.float64) * s
            assert d1[name, fmt]["error"] == pytest.approx(rel(q, x), rel=1e-12)
        # one more mantissa bit: about half the error (a 2x step gives 0.5 in theory)
        ratio = d1[name, "E4M3"]["error"] / d1[name, "E5M2"]["error"]
        assert 0.35 < ratio < 0.65
    assert d1["gradients", "E4M3"]["flushed"] > 0.01
    assert d1["gradients", "E5M2"]["flushed"] == 0.0


def test_spread_orders_the_tensors():
    s = L.demo1_tensor_scaling().spread
    assert s["weights"] < s["activations"] < s["gradients"]


def test_delayed_scaling_claims():
    r = L.demo2_delayed_scaling()
    t, e, c = r.spike_step, r.errors, r.clipped
    calm = np.r_[1:t]
    after = slice(t + 1, t + 1 + r.history)
    assert np.all(c["current"] == 0)
    assert c["delayed"][t] > 0.5 and e["delayed"][t] > 10 * e["current"][t]
    assert e["delayed"][calm].mean() == pytest.approx(e["current"][calm].mean(), rel=0.02)
    assert e["delayed"][after].mean() == pytest.approx(e["current"][after].mean(), rel=0.02)
    ratio = r.scales["delayed"][t + 1] / r.scales["current"][t + 1]
    assert 4 < ratio < 9  # the spike of 8 divided by about 1.02 per step of drift since
    assert np.all(r.scales["delayed"][after] == r.scales["delayed"][t + 1])  # history holds it
    assert r.scales["delayed"][t + 1 + r.history] < r.scales["delayed"][t + r.history]


def test_one_outlier_claims():
    d = {row["name"]: row for row in L.demo3_one_outlier().rows}
    i8, f8 = d["INT8, one tensor scale"], d["FP8 E4M3, one tensor scale"]
    f4, nv = d["FP4 E2M1, one tensor scale"], d["NVFP4 (16 per E4M3 scale)"]
    assert i8["outlier"] / i8["clean"] > 10 and i8["flushed"] > 0.99
    assert f4["flushed"] > 0.99 and f4["outlier"] > 0.99
    assert f8["outlier"] / f8["clean"] < 1.1
    assert nv["outlier"] / nv["clean"] < 1.1


def test_nvfp4_against_tensor_scaling():
    x = L.student_t_weights()
    assert np.array_equal(x, np.random.default_rng(0).standard_t(df=5, size=1 << 20) * 0.02)
    fp4, nv, fp8 = L.demo4_nvfp4_vs_tensor().rows
    assert (fp4["bits"], nv["bits"], fp8["bits"]) == (4.0, 4.5, 8.0)
    # FP4 with one scale, through ml_dtypes: amax maps to 6
    s = np.abs(x).max() / 6.0
    q = np.clip(x / s, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float64) * s
    assert fp4["error"] == pytest.approx(rel(q, x), rel=1e-12)
    # |x / s| <= 0.25 (half the smallest subnormal 0.5; the tie goes to even 0) flushes
    assert fp4["flushed"] == np.mean(np.abs(x / s) <= 0.25)
    assert fp4["flush_fraction_of_amax"] == 24
    assert nv["error"] < fp4["error"] / 5 and fp8["error"] < nv["error"]
    assert nv["sqnr"] - fp4["sqnr"] > 10


def test_lecture05_reuses_the_same_data():
    l05 = importlib.import_module("lectures.05_quantization_basics")
    assert np.array_equal(l05.student_t_weights(), L.student_t_weights())


def test_script_runs_and_is_deterministic():
    runs = [subprocess.run([sys.executable, "lectures/03_scaling.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and "Demo 4" in runs[0]
    inside = subprocess.run([sys.executable, "03_scaling.py"], cwd=ROOT / "lectures",
                            capture_output=True, text=True, check=True).stdout
    assert inside == runs[0]
    assert runs[0].startswith("#") and "Lecture 03:" in runs[0].splitlines()[1]
    # every line fits a 100-column terminal
    assert max(display_width(line) for line in runs[0].splitlines()) <= 100


def test_binades_in_the_intro_match_ml_dtypes():
    # E4M3 reaches 448 from 2^-9, E2M1 6 from 2^-1 (ml_dtypes' finfo; OCP MX v1.0 table)
    for dt, fmt, rounded in ((ml_dtypes.float8_e4m3fn, L.FP8_E4M3, 18),
                             (ml_dtypes.float4_e2m1fn, L.FP4_E2M1, 4)):
        fi = ml_dtypes.finfo(dt)
        expected = np.log2(float(fi.max) / float(fi.smallest_subnormal))
        assert L.binades(fmt) == pytest.approx(expected) and round(L.binades(fmt)) == rounded
