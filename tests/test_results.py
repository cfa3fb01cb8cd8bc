"""lectures.results, the one format of the lectures' stored runs: every type it stores comes back
as it went in (type and value, checked by a comparison written here), it writes atomically and
refuses what it cannot store, and console.save_path refuses a --save target before a run."""

import argparse
import dataclasses
import math
import os
import types

import numpy as np
import pytest

from console import save_path
from lectures import results


def assert_same(got, want, where="result"):
    """``got`` is ``want``: the same types all the way down (a tuple stays a tuple, an array
    keeps its dtype and shape, a dataclass its class), the same values (floats bit for bit,
    NaN included)."""
    assert type(got) is type(want), (where, type(got), type(want))
    if dataclasses.is_dataclass(want):
        for f in dataclasses.fields(want):
            assert_same(getattr(got, f.name), getattr(want, f.name), f"{where}.{f.name}")
    elif isinstance(want, np.ndarray):
        assert got.dtype == want.dtype and got.shape == want.shape, where
        assert got.tobytes() == want.tobytes(), where
    elif isinstance(want, (list, tuple)):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), where          # the keys, in order, of their types
        for (gk, g), (wk, w) in zip(got.items(), want.items()):
            assert_same(gk, wk, f"{where} key")
            assert_same(g, w, f"{where}[{wk!r}]")
    elif isinstance(want, float):
        assert got == want or (math.isnan(got) and math.isnan(want)), where
        assert math.copysign(1, got) == math.copysign(1, want), where
    else:
        assert got == want, where


@dataclasses.dataclass(frozen=True)
class Setting:
    name: str
    seeds: tuple


@dataclasses.dataclass
class Outer:
    setting: Setting
    rows: list
    by_key: dict
    arrays: dict
    scalars: tuple
    nothing: object = None


MODULE = types.SimpleNamespace(Setting=Setting, Outer=Outer, __name__="fake")


def every_type() -> Outer:
    return Outer(
        Setting("FP8 current + spike", (0, 1, 2)),
        [["NVFP4 (full recipe)", 1 / 3, -0.0, 7, True], [], ["中文", "ᵀ"]],
        {3: [0.5], 0: "first key stored second", (1, "a"): None, None: 1.5, "s": {"t": (1,)}},
        {"f64": np.array([2.5, 1e-300, np.inf, -np.inf, np.nan, -0.0]),
         "f32": np.arange(6, dtype=np.float32).reshape(2, 3) / 3,
         "i64": np.array([[0, -5], [2 ** 40, 1]], dtype=np.int64),
         "bool": np.array([True, False]), "empty": np.zeros((0, 3))},
        (float("inf"), float("-inf"), float("nan"), 1e308, 5e-324, 0, False, "x", ()),
    )


def test_every_type_round_trips(tmp_path):
    want = every_type()
    path = results.save_results(tmp_path / "r.json", {"demo": want, "list": [1, (2.0,)]},
                                {"command": "x.py", "workload": {"steps": 3}})
    back, about = results.load_results(path, MODULE)
    assert about == {"command": "x.py", "workload": {"steps": 3}}
    assert_same(back["demo"], want)
    assert_same(back["list"], [1, (2.0,)])
    # numpy scalars are stored as the Python numbers they hold
    back, _ = results.load_results(results.save_results(
        tmp_path / "s.json", {"v": np.float64(0.1), "i": np.int64(3)}))
    assert_same(back, {"v": 0.1, "i": 3})


def test_the_comparison_can_fail():
    want = every_type()
    for changed in (dataclasses.replace(want, scalars=list(want.scalars)),
                    dataclasses.replace(want, arrays={**want.arrays,
                                                      "f32": want.arrays["f32"].astype(float)}),
                    dataclasses.replace(want, rows=[["NVFP4 (full recipe)", 1 / 3, 0.0, 7,
                                                     True], [], ["中文", "ᵀ"]])):
        with pytest.raises(AssertionError):
            assert_same(changed, want)


def test_later_modules_win_and_a_missing_class_is_named(tmp_path):
    path = results.save_results(tmp_path / "r.json", {"s": Setting("a", (1,))})

    @dataclasses.dataclass(frozen=True)
    class Setting2:
        name: str
        seeds: tuple
    other = types.SimpleNamespace(Setting=Setting2, __name__="other")
    assert type(results.load_results(path, MODULE, other)[0]["s"]) is Setting2
    assert type(results.load_results(path, other, MODULE)[0]["s"]) is Setting
    with pytest.raises(ValueError, match="none of empty defines"):
        results.load_results(path, types.SimpleNamespace(__name__="empty"))


def test_writes_atomically_and_refuses_what_it_cannot_store(tmp_path):
    path = results.save_results(tmp_path / "r.json", {"n": 1})
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask      # as open() creates a file
    before = path.read_bytes()
    with pytest.raises(TypeError, match="cannot store a object"):
        results.save_results(path, {"x": object()})
    assert path.read_bytes() == before                  # the old file is whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]     # no temporary left
    with pytest.raises(ValueError, match="directory"):
        results.save_results(tmp_path, {})
    with pytest.raises(ValueError, match="not a file of lecture results"):
        (tmp_path / "other.json").write_text("[1, 2]")
        results.load_results(tmp_path / "other.json")


def test_a_full_run_is_refused_when_quick_or_incomplete(tmp_path):
    full = results.save_results(tmp_path / "f.json", {"a": 1, "b": 2}, {"command": "x.py"})
    assert results.load_full_run(full, (MODULE,), "x.py", ("a", "b")) == {"a": 1, "b": 2}
    quick = results.save_results(tmp_path / "q.json", {"a": 1, "b": 2},
                                 {"command": "x.py --quick"})
    for path, demos in ((quick, ("a",)), (full, ("a", "c"))):
        with pytest.raises(ValueError, match="not a full run of x.py"):
            results.load_full_run(path, (MODULE,), "x.py", demos)


def test_stored_path():
    assert results.stored_path("10") == results.WIDGETS_DIR / "lecture10_stored.json"
    assert results.WIDGETS_DIR.is_dir() and results.WIDGETS_DIR.name == "widgets"
    for bad in ("1", "101", 10, "a1"):
        with pytest.raises(ValueError, match="two-digit"):
            results.stored_path(bad)


def test_save_path_refuses_a_target_it_could_not_write(tmp_path):
    assert save_path(str(tmp_path / "r.json")) == tmp_path / "r.json"
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        save_path(str(tmp_path))
    with pytest.raises(argparse.ArgumentTypeError, match="does not exist"):
        save_path(str(tmp_path / "no" / "r.json"))
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):
        pytest.skip("this user may write into a read-only directory (root)")
    with pytest.raises(argparse.ArgumentTypeError, match="not writable"):
        save_path(str(locked / "r.json"))
