"""Every quantitative claim lecture 07 makes, computed by its own demo functions and asserted.

Expected values are derived by hand here (bit budgets, byte values, the Marlin thread formula)
or are the lecture's own claims (orderings, bounds); none is read from the code under test.
"""

import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from console import display_width

ROOT = Path(__file__).resolve().parents[1]
L = importlib.import_module("lectures.07_weight_storage")
N_WEIGHTS = 1024 * 1024


@pytest.fixture(scope="module")
def d1():
    return L.demo1_bytes()


@pytest.fixture(scope="module")
def d2():
    return L.demo2_codebooks()


@pytest.fixture(scope="module")
def d3():
    return L.demo3_double_quant()


@pytest.fixture(scope="module")
def d4():
    return L.demo4_layouts()


# --------------------------------------------------------------------------------- demo 1
def test_demo1_nibble_bytes(d1):
    got = {row[0]: row[2] for row in d1.nibble_rows}
    # int4 two's complement: 1 -> 1, -2 -> E, 3 -> 3, -4 -> C, 5, -6 -> A, 7, -8 -> 8
    assert got["int4, low nibble first"] == "E1 C3 A5 87"
    assert got["uint4, low nibble first"] == "C3 F0"
    assert got["uint4, high nibble first (bitsandbytes)"] == "3C 0F"
    # E2M1: 1.0 = 0b0010, -6.0 = 0b1111, 0.5 = 0b0001, 3.0 = 0b0101
    assert got["FP4 E2M1, low nibble first"] == "F2 51"
    assert got["GPTQ int32 word, 8 codes down a column"] == "21 43 65 87 (word 0x87654321)"


def test_demo1_bits_per_weight_by_hand(d1):
    b = d1.bits
    assert b["FP16"] == 16
    assert b["FP8 E4M3, Marlin W8A16"] == 8 + 16 / 1024                 # FP16 scale per column
    assert b["GPTQ INT4, groups of 128"] == 4 + 16 / 128 + 4 / 128 + 32 / 1024
    assert b["MXFP4"] == 4 + 8 / 32
    assert b["NVFP4"] == 4 + 8 / 16 + 32 / N_WEIGHTS
    assert b["NF4 (QLoRA)"] == 4 + 32 / 64
    assert b["NF4 + double quantization"] == 4 + 8 / 64 + 32 * 64 / N_WEIGHTS + 32 / N_WEIGHTS
    # "No 4-bit format costs 4 bits"
    assert all(v > 4 for v in b.values())
    for name, (elem, other) in d1.split.items():
        assert elem + other == b[name]


def test_demo1_gptq_grids_by_hand(d1):
    g = d1.grids
    # codes used: 15 on the restricted grid, all 16 on GPTQ's and the asymmetric one
    assert [g[k]["codes"] for k in ("restricted", "full", "asymmetric")] == [15, 16, 16]
    # steps by definition: amax / 7 and 2 amax / 15 in every group
    assert g["restricted"]["step"] == pytest.approx(1 / 7, rel=1e-14)
    assert g["full"]["step"] == pytest.approx(2 / 15, rel=1e-14)
    assert g["full"]["step"] / g["restricted"]["step"] == pytest.approx(14 / 15, rel=1e-14)
    assert g["full"]["top"] == pytest.approx(14 / 15, rel=1e-14)
    assert g["full"]["bottom"] == pytest.approx(-16 / 15, rel=1e-14)
    assert g["restricted"]["top"] == pytest.approx(1.0, rel=1e-14)
    # "the error falls": a finding, far beyond the spread over seeds 0-2
    gains = d1.grid_gain_db
    assert g["full"]["rel_error"] < g["restricted"]["rel_error"]
    assert g["full"]["sqnr"] - g["restricted"]["sqnr"] == gains[0]
    assert min(gains) > 10 * (max(gains) - min(gains)) > 0
    # asymmetric min-max: (max - min) / 15 <= 2 amax / 15 in every group, so on average
    assert g["asymmetric"]["step"] <= g["full"]["step"]
    # every stored zero point is 8: eight nibbles of 8 in a qzeros word
    assert d1.qzeros_word == sum(8 << (4 * i) for i in range(8)) == 0x88888888


def test_demo1_gptq_grids_against_plain_rounding(d1):
    # the table's errors from a plain per-group rounding written here
    w = L.gaussian_weights()
    k, n = w.shape
    grouped = w.reshape(k // 128, 128, n)                               # (G, g, N)
    amax = np.abs(grouped).max(axis=1, keepdims=True)
    for key, step, lo, hi in (("restricted", amax / 7, -7, 7), ("full", 2 * amax / 15, -8, 7)):
        q = np.clip(np.rint(grouped / step), lo, hi) * step
        err = np.linalg.norm(q.reshape(k, n) - w) / np.linalg.norm(w)
        assert d1.grids[key]["rel_error"] == pytest.approx(err, rel=1e-12)


def test_demo1_block_dumps(d1):
    mx, nv = d1.mx, d1.nv
    assert mx["block_bytes"] == 17 and nv["block_bytes"] == 9           # 32/2 + 1, 16/2 + 1
    assert len(mx["element_bytes"].split()) == 16 and len(nv["element_bytes"].split()) == 8
    # E8M0 code e means 2^(e - 127)
    assert 2.0 ** (int(mx["scale_byte"], 16) - 127) == mx["scale"]
    assert mx["first_value"] == mx["first_element"] * mx["scale"]
    assert nv["first_value"] == nv["first_element"] * (nv["scale"] * nv["tensor_scale"])
    assert mx["first_code"] == mx["first_byte"][1]                    # element 0: the low nibble
    raw = bytes.fromhex(nv["tensor_scale_bytes"].replace(" ", ""))
    assert float(np.frombuffer(raw, "<f4")[0]) == nv["tensor_scale"]
    assert mx["tensor_scale_bytes"] == ""


# --------------------------------------------------------------------------------- demo 2
def test_demo2_nf4_has_the_lowest_error_and_highest_entropy(d2):
    e, h = d2.errors, d2.entropy
    assert e["NF4"] < e["FP4 E2M1"] < e["INT4"]
    assert h["NF4"] > h["FP4 E2M1"] > h["INT4"]
    assert d2.sqnr["NF4"] - d2.sqnr["INT4"] > 1.0                      # "a gain of 1.37 dB"


def test_demo2_nvfp4_close_to_nf4(d2):
    e = d2.errors
    nv = e["NVFP4 (for reference)"]
    assert e["NF4"] < nv < 1.05 * e["NF4"]                             # "only 3.4% above"
    assert nv < e["FP4 E2M1"]


def test_demo2_text_agrees_with_its_table(d2, capsys):
    # a reader checks the notes against the printed table: differences of the printed cells
    L.show_demo2(d2)
    out = capsys.readouterr().out
    cells = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
             for line in out.splitlines() if line.startswith("| ")}
    sqnr = {k: float(v[3]) for k, v in cells.items() if k in ("NF4", "INT4")}
    err = {k: float(v[2]) for k, v in cells.items() if k in ("NF4", "NVFP4 (for reference)")}
    text = " ".join(out.split())                                       # undo the wrapping
    assert f"a gain of {sqnr['NF4'] - sqnr['INT4']:.2f} dB over INT4" in text
    assert f"only {(err['NVFP4 (for reference)'] / err['NF4'] - 1) * 100:.1f}% above" in text


def test_demo2_error_is_plausible_for_4_bits(d2):
    # Uniform-noise estimate for INT4 with step 2 absmax / 14 and absmax ~ 2.5 sigma for 64
    # Gaussian values: rms error ~ (5 sigma / 14) / sqrt(12) ~ 0.10 sigma. All three lie near it.
    for fmt in L.CODEBOOKS:
        assert 0.07 < d2.errors[fmt] < 0.13


# NF4's 16 levels as published (Dettmers et al., QLoRA, 2023, appendix E; bitsandbytes' table)
NF4_TABLE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
             0.07958029955625534, 0.16093020141124725, 0.24611230194568634,
             0.33791524171829224, 0.44070982933044434, 0.5626170039176941,
             0.7229568362236023, 1.0]


def test_demo2_usage_and_entropy_from_an_independent_histogram(d2):
    # the level tables by definition: INT4 k/7; E2M1's magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}
    # over 6; NF4 as published (float32 in bitsandbytes, hence 1e-6)
    e2m1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6]) / 6
    tables = {"INT4": np.arange(-7, 8) / 7, "FP4 E2M1": np.r_[-e2m1[:0:-1], e2m1],
              "NF4": np.array(NF4_TABLE)}
    blocks = L.gaussian_weights().reshape(-1, 64)
    x = blocks / np.abs(blocks).max(axis=1, keepdims=True).astype(np.float32)
    for fmt, table in tables.items():
        assert d2.levels[fmt] == pytest.approx(table, abs=1e-6)
        # nearest level of every w / absmax(block), counted, and Shannon's H = -sum p log2 p
        lv = d2.levels[fmt]
        codes = np.abs(x.ravel()[:, None] - lv[None, :]).argmin(axis=1)
        p = np.bincount(codes, minlength=lv.size) / codes.size
        assert np.array_equal(d2.usage[fmt], p), fmt
        nz = p[p > 0]
        assert d2.entropy[fmt] == pytest.approx(-np.sum(nz * np.log2(nz)), rel=1e-12)
    # INT4's outer codes are rare: only w / absmax beyond 13/14 (the midpoint of 6/7 and 1)
    # lands on +-1, and at least each block's own maximum does
    outer = d2.usage["INT4"][[0, -1]].sum()
    assert outer == np.mean(np.abs(x) > 13 / 14) and outer >= 1 / 64


# --------------------------------------------------------------------------------- demo 3
def test_demo3_bits_saved(d3):
    assert d3.bits_formula["single"] == 4.5
    assert d3.bits_formula["double"] == 4 + 1 / 8 + 1 / 512
    # measured: 2^19 code bytes + 2^14 scale codes + 64 FP32 steps + 1 FP32 mean
    assert d3.bits["qlora"] == 8 * (2**19 + 2**14 + 64 * 4 + 4) / N_WEIGHTS
    assert round(d3.bits["qlora"], 3) == 4.127
    assert d3.saved_bits == pytest.approx(0.5 - 1 / 8 - 1 / 512, abs=1e-4)
    assert round(d3.saved_gb_65b, 1) == 3.0                            # 65e9 * 0.373 / 8 bytes


def test_demo3_error_added_is_within_one_percent(d3):
    q = "qlora"
    assert d3.max_weight_change[q] < 0.01
    assert d3.max_weight_change["unsigned"] < 0.01
    # codes are unchanged, so each weight moves by exactly its scale's relative error
    for key in ("qlora", "int8", "signed", "unsigned"):
        assert d3.max_weight_change[key] == pytest.approx(d3.max_scale_error[key], rel=1e-9)
    # the total error grows by far less than 1% of itself
    assert d3.errors["single"] < d3.errors[q] < 1.001 * d3.errors["single"]


def test_demo3_mean_offset_is_what_a_signed_code_needs(d3):
    assert d3.mean_step["signed"] > 2 * d3.mean_step["int8"]
    assert d3.max_weight_change["signed"] > 0.01                       # "over 1%"
    assert d3.max_weight_change["int8"] < d3.max_weight_change["unsigned"]
    # "INT8 does as well on well-behaved weights": it moves a weight less than the float map
    assert d3.max_weight_change["int8"] < d3.max_weight_change["qlora"] < 0.01
    # QLoRA's reconstruction: the nearest value of the 8-bit float map, times the block's
    # max |c - mean|: off by at most half the map's largest gap (1/64 of [0.1, 1] x 0.9 ...),
    # i.e. 0.9 / 64 / 2 of that max (the top decade, linspace(0.1, 1, 65), has gaps 0.9 / 64).
    a = d3.absmax.astype(np.float64)
    spread = np.abs(a - np.float32(a.mean())).reshape(-1, 256).max(axis=1)
    assert np.all(np.abs(d3.absmax_qlora - a) <= np.repeat(spread, 256) * 0.9 / 64 * (1 + 1e-5))
    assert 0 < d3.absmax.min() and d3.absmax.max() < 6 * L.STD


def test_demo3_int8_fails_on_outlier_weights(d3):
    o = d3.outlier_sqnr
    w = L.outlier_weights()
    assert np.count_nonzero(np.abs(w) >= L.HUGE * L.STD) == len(range(0, L.SHAPE[0], 97))
    # measured 78.9 / 61.3 / 29.1 dB; the claim is the ordering and a gap of > 20 dB
    assert o["single"] > o["qlora"] > o["int8"] + 20
    assert 0 < d3.absmax.min() and d3.absmax.max() < 6 * L.STD


# --------------------------------------------------------------------------------- demo 4
def test_demo4_act_order_groups_per_tile(d4):
    assert d4.groups_per_tile["sorted"] == 1.0
    assert d4.groups_per_tile["checkpoint"] > 4
    k = len(d4.g_idx)
    assert d4.group_switches["sorted"] == k // d4.group_size - 1       # "once per 128 rows"
    assert d4.group_switches["checkpoint"] > 10 * d4.group_switches["sorted"]
    assert np.array_equal(np.sort(d4.g_idx), d4.g_idx_sorted)
    assert d4.same_output and d4.output_rel_diff <= 1e-12


def test_demo4_marlin_thread_map_by_formula(d4):
    # thread t owns column t // 4 (mod 8) and rows 2 (t % 4) + {0, 1} (mod 8) of its sub-tile
    k, n = np.meshgrid(np.arange(16), np.arange(64), indexing="ij")
    assert np.array_equal(d4.thread_map, (n % 8) * 4 + (k % 8) // 2)
    assert np.array_equal(d4.word_map, 4 * d4.thread_map + n // 16)
    assert d4.thread0 == [(0, 0), (8, 0), (0, 8), (8, 8), (1, 0), (9, 0), (1, 8), (9, 8)]
    # every word holds 8 distinct elements, each lane once: a bijection onto the tile
    assert len(set(zip(d4.word_map.ravel(), d4.lane_map.ravel()))) == 16 * 64
    assert d4.marlin_round_trip and d4.marlin_bytes == d4.gptq_bytes == N_WEIGHTS // 2


def test_demo4_fp8_bias_trick_and_error(d4):
    assert d4.fp8_ratio == {256.0}                                     # 2^(15 - 7)
    assert [r[0] for r in d4.fp8_rows] == ["0x38", "0x40", "0x7E", "0x01", "0xB8"]
    assert [r[1] for r in d4.fp8_rows] == ["1", "2", "448", "0.00195312", "-1"]
    # E4M3 keeps 3 mantissa bits: relative error at most 2^-4 per weight, so well under 6.25%
    assert 0.01 < d4.fp8_error < 0.0625
    assert d4.fp8_bits == 8 + 16 / 1024


def test_marlin_where_by_hand():
    # (7, 23): column 7 of sub-tile 1 -> thread 4*7 + 3 = 31 (row 7 = 2*3 + 1), word 4*31 + 1
    got = L.marlin_where(7, 23)
    assert (got["thread"], got["sub_tile"], got["word"], got["lane"]) == (31, 1, 125, 4)
    assert L.marlin_where(16, 64)["row"] == 1 and L.marlin_where(16, 64)["word"] == 128


# ------------------------------------------------------------------------- explorer function
def test_storage_tradeoff_matches_demo_budgets():
    nf4 = L.storage_tradeoff("NF4")
    assert nf4["bits"] == 4.5
    assert L.storage_tradeoff("MXFP4", block=32)["bits"] == 4.25
    dq = L.storage_tradeoff("NF4 + double quant")
    assert dq["bits"] == pytest.approx(4 + 1 / 8 + 1 / 512, abs=1e-3)
    # at the same bits NF4 beats INT4 on Gaussian weights (demo 2's claim on a smaller sample)
    assert nf4["rel_error"] < L.storage_tradeoff("INT4")["rel_error"]
    # bigger blocks: fewer scale bits, more error
    small, big = L.storage_tradeoff("NF4", block=16), L.storage_tradeoff("NF4", block=256)
    assert small["bits"] > big["bits"] and small["rel_error"] < big["rel_error"]


@pytest.mark.parametrize("kwargs, match", [
    ({"fmt": "INT3"}, "fmt"),
    ({"fmt": "NF4", "distribution": "Cauchy"}, "distribution"),
])
def test_storage_tradeoff_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L.storage_tradeoff(**kwargs)


# ----------------------------------------------------------------------------------- script
def test_script_output_is_identical_from_root_and_from_lectures_dir():
    script = "07_weight_storage.py"
    a = subprocess.run([sys.executable, f"lectures/{script}"], cwd=ROOT, capture_output=True,
                       text=True, check=True)
    b = subprocess.run([sys.executable, script], cwd=ROOT / "lectures", capture_output=True,
                       text=True, check=True)
    assert a.stdout == b.stdout and "\x1b[" not in a.stdout
    assert a.stdout.count("What to notice") == 4
    assert "4.127" in a.stdout and "F2 51" in a.stdout
    lines = a.stdout.splitlines()
    assert lines[0].startswith("#") and lines[1].startswith("Lecture 07:")
    assert max(display_width(line) for line in lines) <= 100   # fits a 100-column terminal


def test_printed_text_says_qlora_uses_floats_and_gptq_codes_are_rtn():
    out = subprocess.run([sys.executable, "lectures/07_weight_storage.py"], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    text = " ".join(out.split())
    assert "int8 (QLoRA)" not in text and "8-bit float map (QLoRA)" in text
    assert "round-to-nearest" in text and "(RTN codes)" in text
    # act-order is attributed to the authors' repository, not to the paper
    assert ("heuristic of the GPTQ authors' repository (--act-order, "
            "github.com/IST-DASLab/gptq), not of the paper" in text)
