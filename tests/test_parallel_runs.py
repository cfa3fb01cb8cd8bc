"""The suite runs on every core (pytest-xdist); a test marked ``alone`` runs while no other test
runs (tests/conftest.py). Checked on a small generated suite run with two workers: the alone
test and the others each leave a mark while they run and look for the other's."""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

ALONE = """
import os, time, pytest

@pytest.mark.alone
@pytest.mark.parametrize("i", range(3))
def test_alone(i):
    open("alone.flag", "w").close()
    try:
        for _ in range(20):
            assert not [f for f in os.listdir() if f.startswith("busy")], "a test ran beside me"
            time.sleep(0.02)
    finally:
        os.remove("alone.flag")
"""

OTHERS = """
import os, time, pytest

@pytest.mark.parametrize("i", range(40))
def test_other(i):
    mark = f"busy.{os.getpid()}"
    open(mark, "w").close()
    try:
        for _ in range(3):
            assert not os.path.exists("alone.flag"), "I ran beside an alone test"
            time.sleep(0.01)
    finally:
        os.remove(mark)
"""


def run(tmp_path, conftest):
    (tmp_path / "conftest.py").write_text(conftest)
    (tmp_path / "test_a_alone.py").write_text(textwrap.dedent(ALONE))
    (tmp_path / "test_b_others.py").write_text(textwrap.dedent(OTHERS))
    (tmp_path / "test_c_others.py").write_text(textwrap.dedent(OTHERS))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "xdist.plugin", "-p", "no:cacheprovider",
         "-n", "2", "--dist", "loadfile", "-o", "addopts=", "-o", "markers=alone: alone",
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
             "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})     # xdist only: quicker to start


def test_an_alone_test_runs_with_no_other_test_beside_it(tmp_path):
    r = run(tmp_path, "from tests.conftest import pytest_runtest_protocol  # noqa: F401\n")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "83 passed" in r.stdout


def test_without_the_lock_they_would_overlap(tmp_path):
    """The witness: the same suite without the hook fails, so the check above can fail."""
    pytest.importorskip("xdist")
    r = run(tmp_path, "")
    if r.returncode == 0:
        pytest.skip("the two workers did not overlap in time on this run (a loaded machine)")
    assert r.returncode == 1 and "ran beside" in r.stdout, r.stdout[-3000:]
