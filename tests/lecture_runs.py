"""A lecture's plain English run, shared by every test that needs it.

Several tests compare a lecture's output with another run of it: in Chinese (tests/test_i18n.py),
under a second BLAS configuration or another ATen CPU capability
(tests/test_blas_independence.py), started from another directory (tests/test_lecture06.py).
Each needs the same reference, the lecture run as a student runs it: ``python lectures/NN_x.py``
from the repository root, in English, with this machine's BLAS and kernels. ``english_run``
makes that run once per test session and hands its bytes to every test that asks; under
pytest-xdist the workers share it through a file beside their temporary directories, written by
the first worker to ask while the others wait on a lock.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Every variable that chooses the language, the BLAS kernels or their threads; the reference
#: run leaves all of them to the machine except the language, which it sets to English.
MACHINE_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG", "OPENBLAS_CORETYPE",
                "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY")


def environment(**extra: str) -> dict:
    """The reference run's environment (this process's, with the machine's own BLAS, ATen
    kernels and threads, English, no colour, a fixed hash seed), updated with ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in MACHINE_VARS}
    env.update({"LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "NO_COLOR": "1",
                "PYTHONIOENCODING": "utf-8", "PYTHONPATH": str(ROOT)})
    env.update(extra)
    return env


def run(script: str, args=(), env: dict | None = None, cwd: Path = ROOT) -> str:
    """``python lectures/<script> *args`` (the script's own name when ``cwd`` is lectures/):
    its stdout; the test fails with the end of stderr if the lecture does."""
    path = f"lectures/{script}" if cwd == ROOT else str(ROOT / "lectures" / script)
    r = subprocess.run([sys.executable, path, *args], cwd=cwd,
                       env=environment() if env is None else env, capture_output=True,
                       text=True, encoding="utf-8", timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


_memo: dict[str, str] = {}


def english_run(script: str, shared: Path, args=()) -> str:
    """The stdout of ``python lectures/<script> *args`` in the reference environment, made once
    per test session: ``shared`` is a directory every worker of the session sees (conftest's
    ``english_run`` fixture passes it)."""
    key = "".join([script, *(f"_{a.lstrip('-')}" for a in args)])
    if key not in _memo:
        out = shared / f"{key}.out"
        with open(shared / f"{key}.lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                if out.exists():
                    _memo[key] = out.read_text(encoding="utf-8")
                else:
                    _memo[key] = run(script, args)
                    partial = shared / f"{key}.partial"
                    partial.write_text(_memo[key], encoding="utf-8")
                    partial.replace(out)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
    return _memo[key]
