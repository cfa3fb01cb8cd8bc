"""Shared fixtures: the real model (lectures 08, 09, 11, 12), loaded once per test session, and
the lectures' plain English runs, made once and shared by the tests that compare with them.

The tests read the lectures' English text, so the session runs in the C locale whatever the
machine's language (a Chinese LANG would otherwise print the lectures in Chinese); tests of
the Chinese text choose it explicitly (tests/test_i18n.py).
"""

import fcntl
import os
import tempfile

import pytest

for _var in ("LANGUAGE", "LC_ALL", "LC_MESSAGES"):
    os.environ.pop(_var, None)
os.environ["LANG"] = "C.UTF-8"
# torch's OpenMP threads spin while they wait for work by default, taking the CPU from numpy's
# BLAS and from the next test's subprocess on a 2-core machine; passive waiting changes no
# result (it is how long idle threads spin, not how work is split).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def checkpoint():
    """SmolLM2-135M-Instruct as a float32 model, or a skip that says what to install."""
    pytest.importorskip("transformers", reason='the real model needs pip install -e ".[model]"')
    pytest.importorskip("gguf", reason='the real model needs pip install -e ".[model]"')
    from lectures import llm

    try:
        llm.gguf_path()
    except llm.ModelUnavailableError as err:
        pytest.skip(str(err))
    import torch
    torch.manual_seed(0)
    return llm.load_checkpoint(device="cpu")


def devices() -> list:
    """The ``device`` parameters of a test that runs on the CPU and on CUDA: "cpu", and "cuda"
    marked ``gpu`` and skipped without a CUDA device (torch is imported when called)."""
    import torch
    cuda = torch.cuda.is_available()
    needs_cuda = pytest.mark.skipif(not cuda, reason="needs a CUDA device")
    return [pytest.param("cpu"), pytest.param("cuda", marks=[pytest.mark.gpu, needs_cuda])]


@pytest.fixture(scope="session")
def corpus(checkpoint):
    """The token ids of the language reference (int64, about 113k)."""
    from lectures import llm
    return llm.corpus_tokens(checkpoint.tokenizer)


@pytest.fixture(scope="session")
def english_run(request, tmp_path_factory):
    """``english_run(script, *args)``: the stdout of ``python lectures/<script> *args`` in
    English on this machine's kernels, made once per session and shared by the xdist workers
    (tests/lecture_runs.py)."""
    from lecture_runs import english_run as run
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if hasattr(request.config, "workerinput") else base) / "lecture-runs"
    shared.mkdir(exist_ok=True)
    return lambda script, *args: run(script, shared, args)


# ---------------------------------------------------------------------------------------------
# Running on every core (pytest-xdist: ``-n auto --dist loadfile`` in pyproject.toml)
# ---------------------------------------------------------------------------------------------
# Each test file runs whole on one worker, so a module's expensive fixture (a lecture's demo,
# the real model's calibration) is computed once. Two things need care when files run side by
# side:
#
# * Tests marked ``alone`` time the machine (lecture 12 checks a measured speed against a
#   roofline built from measured ceilings): while one runs, no other test runs. A shared/
#   exclusive file lock does it: every test holds the lock shared, an ``alone`` test holds it
#   exclusively; a second "turnstile" lock makes a waiting exclusive test go next, so a stream
#   of shared holders cannot starve it.
# * The slowest files start first, so that no long file is left to run by itself at the end
#   (xdist hands files out in collection order).

#: The files that take longest on 2 cores, slowest first (a scheduling hint only: a file
#: missing from this list still runs, in its usual place after these).
SLOWEST_FIRST = (
    "tests/test_lecture09.py",
    "tests/test_notebooks_in_browser.py",
    "tests/test_blas_independence.py",
    "tests/test_lecture08.py",
    "tests/test_lecture11.py",
    "tests/test_lecture10.py",
    "tests/test_lecture13.py",
    "tests/test_i18n.py",
    "tests/test_lecture12.py",
    "tests/test_widgets12.py",
    "tests/test_lecture06.py",
    "notebooks/08_real_model.ipynb",
    "notebooks/zh/08_real_model.ipynb",
    "notebooks/06_quantization_aware_training.ipynb",
    "notebooks/zh/06_quantization_aware_training.ipynb",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(SLOWEST_FIRST)}

    def file_rank(item):
        path = item.nodeid.split("::", 1)[0]
        return rank.get(path, len(rank))

    items.sort(key=file_rank)   # stable: the order within a file, and of the rest, is kept


def _lock_file(name: str):
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    path = os.path.join(tempfile.gettempdir(), f"lowprec-tests-{run}.{name}.lock")
    return open(path, "a+")


_locks = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    # Only an xdist worker takes the lock (not a pytest that a test starts in a subprocess,
    # which inherits the worker's environment; its test already holds the lock).
    if not hasattr(item.config, "workerinput"):
        yield
        return
    if not _locks:
        _locks.update(turnstile=_lock_file("turnstile"), tests=_lock_file("tests"))
    turnstile, tests = _locks["turnstile"].fileno(), _locks["tests"].fileno()
    if item.get_closest_marker("alone"):
        fcntl.flock(turnstile, fcntl.LOCK_EX)       # later tests queue behind this one
        fcntl.flock(tests, fcntl.LOCK_EX)           # wait for the running ones to finish
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)
    else:
        fcntl.flock(turnstile, fcntl.LOCK_EX)       # pass the turnstile ...
        fcntl.flock(turnstile, fcntl.LOCK_UN)
        fcntl.flock(tests, fcntl.LOCK_SH)           # ... and run beside the other shared ones
        try:
            yield
        finally:
            fcntl.flock(tests, fcntl.LOCK_UN)
