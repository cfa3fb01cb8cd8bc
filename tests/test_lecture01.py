"""Lecture 01's claims, checked against independent sources: ml_dtypes and numpy's own float16,
float32 and int32 arithmetic, the OCP specifications' tables, and hand derivations."""

import importlib
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from console import display_width
import numfmt
from numfmt import FP8_E4M3, FP16
from numfmt._reference import reference_dtypes

L = importlib.import_module("lectures.01_number_formats")
ROOT = Path(__file__).resolve().parents[1]

ML = {f.name: t for f, t in reference_dtypes(fp32=True).items()}  # every format, FP32 too
# Exponent biases as published: IEEE 754-2019 table 3.5 (FP32, FP16), bfloat16 (FP32's),
# OCP OFP8 rev 1.0 table 1 (E4M3 7, E5M2 15), OCP MX v1.0 tables 2-4 (E2M3 1, E3M2 3, E2M1 1,
# E8M0 127), arXiv:2206.02915 / AMD CDNA 3 ISA (E4M3FNUZ 8, E5M2FNUZ 16).
BIAS = {"FP32": 127, "BF16": 127, "FP16": 15, "E4M3": 7, "E5M2": 15, "E2M3": 1, "E3M2": 3,
        "E2M1": 1, "E8M0": 127, "E4M3FNUZ": 8, "E5M2FNUZ": 16}


def finfo(name):
    return ml_dtypes.finfo(ML[name]) if name not in ("FP32", "FP16") else np.finfo(ML[name])


def ml_bias(name):
    """The exponent bias ml_dtypes implies: 1 - minexp, or -minexp without subnormals (E8M0),
    for a format the published table above does not list yet."""
    fi = finfo(name)
    return (1 if fi.smallest_subnormal < fi.smallest_normal else 0) - fi.minexp


def all_values(name):
    """Every code of a format of at most 16 bits, decoded by ml_dtypes."""
    bits = finfo(name).bits
    codes = np.arange(1 << bits, dtype=np.uint16 if bits > 8 else np.uint8)
    return codes.view(ML[name]).astype(np.float64)


@pytest.fixture(scope="module")
def d1():
    return L.demo1_format_table()


@pytest.fixture(scope="module")
def d5():
    return L.demo5_integer_accumulators()


def test_format_table_matches_ml_dtypes_and_published_biases(d1):
    # The catalogue is FP32 plus every format numfmt names (numfmt.FORMATS), each checked below.
    assert sorted(r["name"] for r in d1.rows) == sorted(["FP32", *numfmt.FORMATS])
    assert set(ML) == {r["name"] for r in d1.rows}
    for r in d1.rows:
        fi = finfo(r["name"])
        assert r["bias"] == BIAS.get(r["name"], ml_bias(r["name"]))
        assert r["max"] == float(fi.max)
        assert r["min_normal"] == float(fi.smallest_normal)
        if r["name"] != "E8M0":
            assert r["min_subnormal"] == float(fi.smallest_subnormal)
        sign, e, m = (int(v) for v in r["layout"].split("+"))
        assert sign + e + m == r["bits"] == fi.bits
        assert m == fi.nmant


def test_the_bias_derived_from_ml_dtypes_agrees_with_every_published_one():
    assert {n: ml_bias(n) for n in BIAS} == BIAS


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_special_value_counts_from_decoding_every_code(d1):
    for r in d1.rows:
        if r["name"] == "FP32":
            assert r["inf_nan"] == (2, 2 * (2**23 - 1))  # all-ones exponent, either sign
            continue
        v = all_values(r["name"])
        assert r["inf_nan"] == (int(np.isinf(v).sum()), int(np.isnan(v).sum()))


def test_exact_integer_limits(d1):
    for r in d1.rows:
        if r["exact_int"] is None:
            continue
        n = r["exact_int"]
        ints = np.arange(0, n + 2, dtype=np.float64) if n < 10**4 else np.arange(n - 3, n + 2.0)
        back = ints.astype(ML[r["name"]]).astype(np.float64)
        assert np.array_equal(back[:-1], ints[:-1]), r["name"]
        assert back[-1] != ints[-1], r["name"]


def test_claims_of_demo1(d1):
    d = {r["name"]: r for r in d1.rows}
    assert d["BF16"]["max"] / d["FP32"]["max"] > 0.99      # "reaches ... like FP32"
    assert d["FP16"]["max"] == 65504
    assert d["E4M3"]["max"] == 448 and d["E4M3"]["inf_nan"] == (0, 2)
    assert all(d[n]["specials"] == "none" for n in ("E2M3", "E3M2", "E2M1"))
    ex = {a.fmt: a for a in d1.example}
    for name, a in ex.items():
        want = float(np.float64(0.3).astype(ML[name]))
        assert a.stored == want, name
        assert a.lower <= 0.3 <= a.upper and a.stored in (a.lower, a.upper)
    assert ex["FP16"].rel_error < ex["BF16"].rel_error
    assert ex["E8M0"].stored == 0.25


def test_example_bits_match_ml_dtypes_codes(d1):
    for a in d1.example:
        code = np.array([0.3]).astype(ML[a.fmt]).view(np.uint16 if a.fmt in ("BF16", "FP16")
                                                      else np.uint8)[0]
        assert int(a.bits.replace(" ", ""), 2) == int(code), a.fmt


def test_anatomy_of_flags():
    a = L.anatomy_of(FP8_E4M3, 1000.0)
    assert a.saturated and a.overflow and a.stored == 448.0 and a.upper == np.inf
    # 460 < 464, the midpoint above 448: ordinary rounding, not overflow.
    n = L.anatomy_of(FP8_E4M3, 460.0)
    assert n.stored == 448.0 and not n.saturated and not n.overflow
    # Without saturation the format decides: FP16 overflows to Inf from 65520, E4M3 to NaN.
    f = L.anatomy_of(FP16, 1e6, saturate=False)
    assert f.stored == np.inf and f.overflow and not f.saturated and f.bits == "0 11111 0000000000"
    e = L.anatomy_of(FP8_E4M3, 1e40, saturate=False)
    assert np.isnan(e.stored) and e.bits == "0 1111 111"
    with np.errstate(over="ignore"):
        assert np.float32(1e6).astype(np.float16) == np.inf  # the independent oracle agrees
    b = L.anatomy_of(FP8_E4M3, 0.01)  # below 2^-6: stored as a subnormal k * 2^-9
    assert b.subnormal and b.exponent == 0 and b.stored == 5 * 2.0**-9
    c = L.anatomy_of(FP16, -2.0)
    assert (c.sign, c.exponent, c.mantissa, c.rel_error) == (1, 16, 0, 0.0)
    with pytest.raises(ValueError):
        L.anatomy_of(L.FP32, 1.0)  # FP32 has no code table


def test_value_grids_match_ml_dtypes():
    r = L.demo2_value_grids()
    for name, g in r.grids.items():
        v = all_values(name)
        assert np.array_equal(g, np.unique(v[np.isfinite(v)] + 0.0)), name
    # Counted by hand from the code tables (OCP MX v1.0, OFP8): every code but -0, and for
    # E4M3 also but its two NaNs. A grid added later is checked against ml_dtypes above.
    sizes = {n: g.size for n, g in r.grids.items()}
    assert {n: sizes[n] for n in ("E2M1", "E2M3", "E3M2", "E4M3")} == {"E2M1": 15, "E2M3": 63,
                                                                      "E3M2": 63, "E4M3": 253}
    e21 = r.grids["E2M1"]
    assert e21[e21 >= 0].tolist() == [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    b = r.binades["E4M3"]
    assert b[0][4] == 2.0**-9 and b[-1][4] == 32.0 and b[-1][2] == 448
    assert sum(row[3] for row in b) == 127  # 0 and 126 positive values
    # E2M3: 3 binades of 8 values, top step 0.5; E3M2: 7 binades of 4, top step 4.
    assert [(len(r.binades[n]) - 1, r.binades[n][1][3], r.binades[n][-1][4])
            for n in ("E2M3", "E3M2")] == [(3, 8, 0.5), (7, 4, 4.0)]


def test_relative_spacing_claims():
    r = L.demo3_relative_spacing()
    for d in r.rows:
        assert d["worst"] <= d["u"], d["name"]             # "never exceeds the unit roundoff"
        assert d["gain"] == 2 ** d["man_bits"]
    d = {row["name"]: row for row in r.rows}
    for name in ("FP32", "BF16", "FP16"):
        assert d[name]["worst"] > 0.99 * d[name]["u"]
    for name in ("FP16", "E4M3"):                           # "the relative error grows"
        tiny = d[name]["tiny"]
        stored = float(np.float64(tiny).astype(ML[name]))
        assert d[name]["tiny_error"] == abs(stored - tiny) / tiny
        assert d[name]["tiny_error"] > d[name]["u"]
    for name, m in r.magnitudes.items():
        fmt = next(f for f in L.SIGNED_FORMATS if f.name == name)
        normal = (m >= fmt.min_normal) & (m <= fmt.max_value)
        rel = r.rel_spacing[name][normal]
        assert np.all(rel > 2.0 ** -(fmt.man_bits + 1)) and np.all(rel <= 2.0 ** -fmt.man_bits)
        assert r.rel_spacing[name][0] == 1.0                # at the smallest subnormal


@pytest.mark.filterwarnings("ignore:overflow encountered")
def test_overflow_against_ml_dtypes():
    r = L.demo4_overflow()
    for d in r.rows:
        t = ML[d["name"]]
        mid = d["midpoint"]
        at_mid = float(np.float64(mid).astype(t))
        assert (at_mid != d["max"]) == d["midpoint_overflows"], d["name"]
        # a little above the midpoint (a float64 nextafter would be lost: ml_dtypes casts
        # float64 through float32, where it rounds back onto the midpoint)
        above = float(np.float64(mid * (1 + 2.0**-20)).astype(t))
        if d["name"] in ("E2M3", "E3M2", "E2M1"):
            assert d["result"] == d["max"]
        else:  # ml_dtypes follows the format: Inf where it has one, else NaN
            assert not np.isfinite(above)
            assert (np.isinf(d["result"]) and np.isinf(above)) or (np.isnan(d["result"]) and
                                                                   np.isnan(above))
        assert d["saturated"] == d["max"]
    d = {row["name"]: row for row in r.rows}
    assert np.float16(65520.0) == np.inf and np.float16(65519.0) == 65504
    assert d["FP16"]["midpoint"] == 65520 and d["FP16"]["midpoint_overflows"]
    assert d["E4M3"]["midpoint"] == 464 and not d["E4M3"]["midpoint_overflows"]


def int32_sum_overflows(n, p):
    terms = np.full(n, p, dtype=np.int32)
    with np.errstate(over="ignore"):
        return int(np.cumsum(terms, dtype=np.int32)[-1]) != n * p


def fp_worst_case(dtype, n, p):
    s = dtype(0)
    with np.errstate(over="ignore"):
        for _ in range(n):
            s = dtype(s + dtype(p))
    return float(s)


def test_worst_case_accumulator_counts(d5):
    d = {r["name"]: r for r in d5.rows}
    for key, p in (("127 × 127", 16129), ("-128 × -128", 16384)):
        n = d["int32"][f"{key} exact"]
        assert not int32_sum_overflows(n, p) and int32_sum_overflows(n + 1, p)
        n = d["FP32"][f"{key} exact"]
        assert n * p <= 2**24 < (n + 1) * p
        n = d["FP16"][f"{key} fits"]
        assert np.isfinite(fp_worst_case(np.float16, n, p))
        assert np.isinf(fp_worst_case(np.float16, n + 1, p))
    assert (d["int32"]["127 × 127 exact"], d["int32"]["-128 × -128 exact"]) == (133144, 131071)
    assert (d["FP32"]["127 × 127 exact"], d["FP32"]["-128 × -128 exact"]) == (1040, 1024)
    assert (d["FP16"]["127 × 127 fits"], d["FP16"]["-128 × -128 fits"]) == (4, 3)
    assert d["FP16"]["127 × 127 exact"] == 0 and float(np.float16(16129)) == 16128.0
    assert d["FP16"]["stored 127 × 127"] == 16128.0
    # One step past the FP32 guarantee really is inexact: 1041 × 16129 is odd and above 2^24.
    assert fp_worst_case(np.float32, 1041, 16129) != 1041 * 16129


def test_random_dot_product_claims(d5):
    dots = {r["name"]: r for r in d5.dot_rows}
    assert dots["int32"]["exact"] == dots["FP32"]["exact"] == d5.n_dots
    assert dots["FP16"]["overflow"] == d5.n_dots
    assert dots["BF16"]["overflow"] == 0 and dots["BF16"]["exact"] == 0
    assert d5.max_partial < 2**24                   # why FP32 could be exact here
    assert d5.worst_sum == 4096 * 16129 and d5.worst_sum / L.INT32_MAX < 0.05
    # The BF16 sums, each step rounded by ml_dtypes (the same seed and draws as the demo;
    # s + p is exact in float32 here, since every partial sum is an integer below 2^24).
    rng = np.random.default_rng(0)
    prod = rng.integers(-127, 128, size=(4096, 64)) * rng.integers(-127, 128, size=(4096, 64))
    s = np.zeros(64, dtype=ml_dtypes.bfloat16)
    for p in prod:
        s = (s.astype(np.float32) + p.astype(np.float32)).astype(ml_dtypes.bfloat16)
    want = np.abs(s.astype(np.float64) - prod.sum(axis=0)).max()
    assert dots["BF16"]["max_abs_error"] == want
    # The text: with 8 significant bits the worst sum is off by a sizeable share of a typical
    # sum (24% printed); 10% is the floor for "sizeable", 100% would mean nothing survived.
    assert 0.1 < dots["BF16"]["max_abs_error"] / d5.rms_sum < 1.0
    # Independent check of one FP16 sum: numpy float16 arithmetic overflows too.
    rng = np.random.default_rng(0)
    a = rng.integers(-127, 128, size=(4096, 64))
    b = rng.integers(-127, 128, size=(4096, 64))
    with np.errstate(over="ignore"):
        assert np.isinf(fp_worst_case_seq(np.float16, (a * b)[:, 0]))


def fp_worst_case_seq(dtype, terms):
    s = dtype(0)
    for t in terms:
        s = dtype(s + dtype(t))
    return float(s)


def test_script_runs_and_is_deterministic():
    runs = [subprocess.run([sys.executable, "lectures/01_number_formats.py"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and "Demo 5" in runs[0]
    inside = subprocess.run([sys.executable, "01_number_formats.py"], cwd=ROOT / "lectures",
                            capture_output=True, text=True, check=True).stdout
    assert inside == runs[0]
    assert runs[0].startswith("#") and "Lecture 01:" in runs[0].splitlines()[1]
    # every line fits a 100-column terminal
    assert max(display_width(line) for line in runs[0].splitlines()) <= 100


def test_int32_bound_text_names_both_code_ranges(capsys):
    # Full-range codes: floor((2^31 - 1) / 16384) = 131,071 (lecture 04 shows the wrap at
    # K = 131,072); restricted codes: floor((2^31 - 1) / 16129) = 133,144.
    L.show_demo5(L.demo5_integer_accumulators())
    text = " ".join(capsys.readouterr().out.split())
    assert f"up to {(2**31 - 1) // 16384:,} with full-range int8 codes" in text
    assert f"({(2**31 - 1) // 16129:,} if the codes are restricted to [-127, 127])" in text
    assert "|error|" not in text


def test_fnuz_observation_uses_the_table(capsys):
    r = L.demo1_format_table()
    L.show_demo1(r)
    text = " ".join(capsys.readouterr().out.split())
    fi = ml_dtypes.finfo(ml_dtypes.float8_e4m3fnuz)
    assert f"E4M3FNUZ tops out at {float(fi.max):g} instead of 448" in text
    assert np.isnan(np.array([0x80], np.uint8).view(ml_dtypes.float8_e4m3fnuz)[0])
