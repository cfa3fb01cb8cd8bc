"""Lecture 02's claims, checked against numpy's float16/float32 arithmetic, ml_dtypes' bfloat16,
math.fsum, hand-written rounding for one binade, and sampling bounds of 4 standard errors."""

import importlib
import math
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from console import display_width

L = importlib.import_module("lectures.02_rounding_and_accumulation")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def d1():
    return L.demo1_rounding_bias()


@pytest.fixture(scope="module")
def d3():
    return L.demo3_swamping()


@pytest.fixture(scope="module")
def d4():
    return L.demo4_vanishing_updates()


def rows(result):
    return {(r["data"], r["mode"]): r for r in result.rows}


def test_truncation_matches_hand_rounding_in_one_binade():
    # E4M3 in [1, 2): step 1/8; truncation is floor(8x)/8, half away floor(8x + 1/2)/8.
    x = np.random.default_rng(1).uniform(1, 2, 5000)
    x = np.concatenate([x, np.arange(1, 2, 1 / 16)])  # include every tie
    from numfmt import FP8_E4M3
    from numfmt.rounding import round_to_format
    assert np.array_equal(round_to_format(x, FP8_E4M3, "toward_zero"), np.floor(8 * x) / 8)
    assert np.array_equal(round_to_format(x, FP8_E4M3, "half_away"), np.floor(8 * x + 0.5) / 8)


def test_bias_claims(d1):
    d = rows(d1)
    fl, bf = "float64 (no ties)", "stored in BF16 first"
    sigma = 0.29 / math.sqrt(d1.n)  # RMS error / sqrt(n): standard error of a mean error
    # truncation: uniform position in the ulp gives a mean error of -1/2 ulp
    assert abs(d[fl, "toward_zero"]["mean_ulp"] + 0.5) < 4 * 0.29 / math.sqrt(d1.n)
    # Hand derivation: E4M3's ulp is 1/8 on [1, 2) and 1/4 on [2, 4); uniform data on [1, 4)
    # lose half an ulp each: -(1/3 * 1/16 + 2/3 * 1/8) = -5/48 on a mean of 2.5, so the sum
    # comes out 1/24 = 4.17% too small. 4 sigma: errors have std <= (1/4) / sqrt(12), and the
    # mean of n of them, relative to 2.5, varies by that / sqrt(n) / 2.5.
    assert d[fl, "toward_zero"]["sum_error"] == pytest.approx(
        -1 / 24, abs=4 * 0.25 / math.sqrt(12) / math.sqrt(d1.n) / 2.5)
    # no ties: half away and nearest even round identically
    assert d[fl, "half_away"] == dict(d[fl, "nearest_even"], mode="half_away")
    assert d1.tie_fraction[fl] == 0.0
    # BF16 keeps 4 more mantissa bits than E4M3: a tie is 1 chance in 16 (4 standard errors)
    assert abs(d1.tie_fraction[bf] - 1 / 16) < 4 * math.sqrt(1 / 16 * 15 / 16 / d1.n)
    assert abs(d[bf, "nearest_even"]["mean_ulp"]) < 4 * sigma
    assert abs(d[fl, "nearest_even"]["mean_ulp"]) < 4 * sigma
    # every tie goes up by half an ulp: the bias is about tie_fraction / 2
    # 1/16 ties times 1/2 ulp = 1/32 = 0.031 expected; 0.02 lies 0.011 below, more than the
    # 4-sigma bands of the tie fraction (0.0019 after halving) and of the mean (0.0045) together
    assert d[bf, "half_away"]["mean_ulp"] > 0.02
    assert abs(d[bf, "half_away"]["mean_ulp"] - d1.tie_fraction[bf] / 2) < 4 * sigma
    assert d[bf, "half_away"]["sum_error"] > 0 > d[bf, "toward_zero"]["sum_error"]


def test_stochastic_rounding_claims():
    r = L.demo2_stochastic_rounding()
    s, f = r.single, r.position
    assert r.nearest_single == pytest.approx(-f)                   # 1 + 0.3 ulp rounds to 1
    assert abs(s["mean"]) < 4 * math.sqrt(f * (1 - f) / r.draws)
    assert abs(s["p_up"] - f) < 4 * math.sqrt(f * (1 - f) / r.draws)
    # A sample variance over n draws has relative standard error sqrt((mu4 / sigma^4 - 1) / n):
    # mu4 / sigma^4 is 1.76 for the 0.3-Bernoulli error, 1.8 for uniform errors (nearest),
    # 2.4 for stochastic rounding of uniform positions, so at most 0.37% at n = 1e5: 2% is 5 sigma.
    assert r.draws == 100_000
    assert s["var"] == pytest.approx(f * (1 - f), rel=0.02)
    d = {row["mode"]: row for row in r.rows}
    assert d["nearest_even"]["var"] == pytest.approx(1 / 12, rel=0.02)
    assert d["stochastic"]["var"] == pytest.approx(1 / 6, rel=0.02)
    assert abs(d["stochastic"]["mean"]) < 4 * math.sqrt(1 / 6 / r.draws)


def test_swamping_against_numpy_and_ml_dtypes(d3):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.0, 1.0, d3.n).astype(np.float16)      # the same draws, stored in FP16
    assert d3.exact == math.fsum(x.astype(np.float64))
    d = {(row["acc"], row["method"]): row for row in d3.rows}
    for dtype, name in ((np.float16, "FP16"), (np.float32, "FP32"), (ml_dtypes.bfloat16, "BF16")):
        s = dtype(0)
        with np.errstate(over="ignore"):
            for v in x:
                s = dtype(s + dtype(v))
        assert d[name, "sequential"]["sum"] == float(s)
        assert d3.partial[name][-1] == float(s)
    # stuck where the spacing is 2: 2^11 in FP16 (10 mantissa bits), 2^8 in BF16 (7)
    assert d3.stall == {"FP16": 2048.0, "BF16": 256.0}
    assert d[("FP16", "sequential")]["rel_error"] < -0.7
    assert d[("BF16", "sequential")]["rel_error"] < -0.9
    assert abs(d[("FP32", "sequential")]["rel_error"]) < 1e-5
    for acc, dtype in (("FP16", np.float16), ("BF16", ml_dtypes.bfloat16)):
        once = float(np.float64(d3.exact).astype(dtype))      # the exact sum rounded once
        assert d[acc, "pairwise"]["sum"] == d[acc, "kahan"]["sum"] == once
    assert np.array_equal(d3.exact_partial, np.cumsum(x.astype(np.float64)))


def test_vanishing_update_claims(d4):
    d = {row["storage"]: row for row in d4.rows}
    assert d["BF16, nearest"]["unchanged"] == 1.0 and d["FP16, nearest"]["unchanged"] == 1.0
    # half an ulp at 0.5 (the smallest weights): 2^-9 in BF16, 2^-12 in FP16; both > 1e-4
    assert 2.0**-9 > 2.0**-12 > d4.update
    assert d4.thresholds == {"BF16": 2.0**-8, "FP16": 2.0**-11, "FP32": 2.0**-24}
    # FP32 rounds each of 1000 additions by at most half an ulp at [1, 2), 2^-24: at most
    # 1000 * 2^-24 = 6e-5 lost of the intended 0.1, a fraction 6e-4 < 1e-3.
    assert d4.steps == 1000 and d4.intended == pytest.approx(0.1)
    assert abs(d["FP32"]["applied"] - 1) < 1e-3
    # stochastic: each weight's error has RMS ~0.02, so the mean over 4096 has ~3e-4 (0.3%)
    assert abs(d["BF16, stochastic"]["applied"] - 1) < 4 * d["BF16, stochastic"]["rms_error"] \
        / math.sqrt(4096) / d4.intended
    assert d["BF16, stochastic"]["unchanged"] == 0.0
    # the BF16 copy of the FP32 master is within half a BF16 ulp (2^-8 in [1, 2))
    assert d["FP32 master, BF16 copy"]["rms_error"] < 2.0**-8
    assert d["FP32"]["rms_error"] < d["FP32 master, BF16 copy"]["rms_error"] \
        < d["BF16, stochastic"]["rms_error"]
    h = d4.history
    assert h["BF16, nearest"].max() == 0.0 and h["FP32"][-1] == d["FP32"]["mean_change"]
    # "rounding moved the mean by less than half an ulp": the copy's weights lie in [0.6, 1.1),
    # where a BF16 ulp is at most 2^-7 (in [1, 2)), so half an ulp is at most 2^-8.
    shift = d["FP32 master, BF16 copy"]["mean_change"] - d["FP32"]["mean_change"]
    assert 0 < shift < 2.0**-8 and d["FP32 master, BF16 copy"]["applied"] > 1


def test_script_runs_and_is_deterministic():
    runs = [subprocess.run([sys.executable, "lectures/02_rounding_and_accumulation.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and "Demo 4" in runs[0]
    inside = subprocess.run([sys.executable, "02_rounding_and_accumulation.py"], cwd=ROOT / "lectures",
                            capture_output=True, text=True, check=True).stdout
    assert inside == runs[0]
    assert runs[0].startswith("#") and "Lecture 02:" in runs[0].splitlines()[1]
    # every line fits a 100-column terminal
    assert max(display_width(line) for line in runs[0].splitlines()) <= 100
