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


def rounding_noise(y, mbits, emin):
    """Mean and standard deviation of sum((round(y) - y)^2) on a float grid with ``mbits``
    mantissa bits and smallest normal exponent ``emin``, each error uniform on +-h/2 with h the
    step at |y|: E[e^2] = h^2/12, Var[e^2] = h^4/80 - h^4/144 = h^4/180."""
    h = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(y), 2.0 ** emin))) - mbits)
    return np.sum(h ** 2) / 12, np.sqrt(np.sum(h ** 4) / 180)


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
        # "about half the error": with round to nearest, each error is uniform on +-h/2 (h the
        # grid step at the value), so ||q - x||^2 has mean sum(h^2)/12 and variance
        # sum(h^4)/180. Both errors lie within 4 sigma of that model, and the model ratio is
        # 1/2: E4M3's step is half E5M2's at every value, since 57344 / 448 = 2^7 puts x / s at
        # the same place in its binade (subnormal steps are fixed, but carry no weight here).
        model = {}
        for fmt, top, mbits, emin in (("E4M3", 448.0, 3, -6), ("E5M2", 57344.0, 2, -14)):
            y = x / (np.abs(x).max() / top)
            mean, sigma = rounding_noise(y, mbits, emin)
            err2 = d1[name, fmt]["error"] ** 2 * np.sum(y ** 2)
            assert abs(err2 - mean) < 4 * sigma, (name, fmt)
            model[fmt] = np.sqrt(mean / np.sum(y ** 2))
        assert model["E4M3"] / model["E5M2"] == pytest.approx(0.5, rel=1e-4)
    assert d1["gradients", "E4M3"]["flushed"] > 0.01
    assert d1["gradients", "E5M2"]["flushed"] == 0.0


def test_spread_orders_the_tensors():
    s = L.demo1_tensor_scaling().spread
    assert s["weights"] < s["activations"] < s["gradients"]


def e4m3_scaled(x, s):
    """x quantized to E4M3 with scale s through ml_dtypes (saturating at 448)."""
    return np.clip(x / s, -448, 448).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * s


def test_delayed_scaling_claims():
    r = L.demo2_delayed_scaling()
    t, h, e, c = r.spike_step, r.history, r.errors, r.clipped
    # the run rebuilt by hand from the docstring; scales by the definitions (current: amax / 448;
    # delayed: max of the last h amaxes / 448, step 0 its own), cast through ml_dtypes
    rng = np.random.default_rng(0)
    growth = 1.02 ** np.arange(64)
    growth[t] *= 8.0
    xs = rng.standard_normal((64, 4096)) * growth[:, None]
    amax = np.abs(xs).max(axis=1)
    window = np.array([amax[max(0, k - h):k].max() if k else amax[0] for k in range(64)])
    for kind, s in (("current", amax / 448), ("delayed", window / 448)):
        assert r.scales[kind] == pytest.approx(s, rel=1e-15)
        assert e[kind] == pytest.approx([rel(e4m3_scaled(x, sk), x) for x, sk in zip(xs, s)],
                                        rel=1e-12)
        # clipped beyond the overflow midpoint 448 + 32/2 (E4M3's top step is 2^8 * 2^-3)
        assert np.array_equal(c[kind], [np.mean(np.abs(x / sk) > 464) for x, sk in zip(xs, s)])
    assert np.all(c["current"] == 0) and c["delayed"][t] > 0  # the spike clips, current never
    # "delayed matches current" before and after the spike: the paired per-step differences
    # have a mean within 4 standard errors of 0 (a systematic cost would exceed that)
    for steps in (np.r_[1:t], np.r_[t + 1:t + 1 + h]):
        diff = e["delayed"][steps] - e["current"][steps]
        assert abs(diff.mean()) < 4 * diff.std(ddof=1) / np.sqrt(diff.size)
    # after the spike the delayed scale holds amax[t] for h steps: too large by amax[t]/amax[t+1]
    assert r.scales["delayed"][t + 1] / r.scales["current"][t + 1] == pytest.approx(
        amax[t] / amax[t + 1], rel=1e-15)
    assert np.all(r.scales["delayed"][t + 1:t + 1 + h] == r.scales["delayed"][t + 1])
    assert r.scales["delayed"][t + 1 + h] < r.scales["delayed"][t + h]


def test_one_outlier_claims():
    r = L.demo3_one_outlier()
    d = {row["name"]: row for row in r.rows}
    i8, f8 = d["INT8, one tensor scale"], d["FP8 E4M3, one tensor scale"]
    f4, nv = d["FP4 E2M1, one tensor scale"], d["NVFP4 (16 per E4M3 scale)"]
    x = np.random.default_rng(0).standard_t(5, r.n) * 0.02
    y = x.copy()
    y[r.n // 2] = r.factor * np.abs(x).max()
    o = np.arange(r.n) != r.n // 2

    def int8(v):  # symmetric absmax INT8, written out: s = amax / 127
        s = np.abs(v).max() / 127
        return np.clip(np.round(v / s), -127, 127) * s

    def fp4(v):
        s = np.abs(v).max() / 6
        return np.clip(v / s, -6, 6).astype(ml_dtypes.float4_e2m1fn).astype(np.float64) * s

    for row, quant in ((i8, int8), (f8, lambda v: e4m3_scaled(v, np.abs(v).max() / 448)),
                       (f4, fp4)):
        assert row["clean"] == pytest.approx(rel(quant(x)[o], x[o]), rel=1e-12)
        assert row["outlier"] == pytest.approx(rel(quant(y)[o], y[o]), rel=1e-12)
        assert row["flushed"] == np.mean(quant(y)[o] == 0)
    # INT8: the step is now 100 amax / 127, so all |x| < 50/127 amax round to 0 (99.5%)
    assert i8["flushed"] == np.mean(np.abs(x[o]) < 0.5 * r.factor * np.abs(x).max() / 127)
    # FP4: the other values sit below amax / 100 < amax / 24, E2M1's flush threshold
    assert f4["flushed"] == 1.0 and f4["outlier"] == 1.0
    # E4M3 "barely notices": both errors lie within 4 sigma of the uniform rounding model, and
    # the model's own change (values pushed 6.6 binades down, a few into the subnormals) is small
    model = []
    for v, err in ((x, f8["clean"]), (y, f8["outlier"])):
        z = v[o] / (np.abs(v).max() / 448)
        mean, sigma = rounding_noise(z, 3, -6)
        err2 = err ** 2 * np.sum(z ** 2)
        assert abs(err2 - mean) < 4 * sigma
        model.append(np.sqrt(mean / np.sum(z ** 2)))
    assert model[1] / model[0] == pytest.approx(1, abs=0.01)  # <1% change, as the text implies
    # NVFP4 "only the 15 neighbours lose their precision": the squared error on the others may
    # grow by the energy of those 15 (if all flush) plus rounding noise. Every block scale is
    # re-rounded in E4M3 (the tensor scale moved), so each block's rounding is redrawn: two
    # independent draws, per value variance <= h^4/180 with h <= 2 * amax_block / 6 (E2M1's
    # widest step, 4 to 6, with block amax mapped to 6); 4 sigma of the difference.
    blocks = np.abs(x).reshape(-1, 16).max(axis=1).repeat(16)[o]
    sigma = np.sqrt(2 * np.sum((blocks / 3) ** 4) / 180)
    i = r.n // 2
    neighbours = np.sum(x[i // 16 * 16:i // 16 * 16 + 16] ** 2) - x[i] ** 2
    energy = np.sum(x[o] ** 2)
    assert (nv["outlier"] ** 2 - nv["clean"] ** 2) * energy < neighbours + 4 * sigma


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


def test_tiled_gradients_make_e4m3_better_and_flush_little():
    # One exact scale amax / max per 128 gradients, cast with ml_dtypes (saturating first).
    r = L.demo1_tensor_scaling()
    g = L.training_tensors(1 << 16, 0)["gradients"]
    for name, dt, top in (("E4M3", ml_dtypes.float8_e4m3fn, 448.0),
                          ("E5M2", ml_dtypes.float8_e5m2, 57344.0)):
        t = g.reshape(-1, L.TILE)
        s = np.abs(t).max(axis=1, keepdims=True) / top
        q = (t / s).astype(dt).astype(np.float64) * s
        err, flushed = r.tiled[name]
        assert err == pytest.approx(rel(q.ravel(), g), rel=1e-9)
        assert flushed == np.mean(q.ravel()[g != 0] == 0)
    # The text: with tiles E4M3 has the lower error and flushes under 1% (5.74% per tensor).
    assert r.tiled["E4M3"][0] < 0.6 * r.tiled["E5M2"][0] and r.tiled["E4M3"][1] < 0.01


def test_demo1_text_reconciles_the_fp8_recipes(capsys):
    L.show_demo1(L.demo1_tensor_scaling())
    out = " ".join(capsys.readouterr().out.split())
    assert "rare features" not in out and "Micikevicius et al." in out
    assert "DeepSeek-V3 (section 3.3)" in out and "99.97%" in out and "| 100% |" not in out
