"""benchmarks/gpu_check.py: every part that can run without a GPU runs here."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
G = importlib.util.module_from_spec(spec)
spec.loader.exec_module(G)


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs for minutes")
def test_without_cuda_it_says_so_and_exits_0():
    p = subprocess.run([sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "No CUDA device" in p.stdout


def test_summary_rows_apply_the_targets():
    L = importlib.import_module("lectures.04_low_precision_matmul")
    t = L.demo4_throughput(device="cpu", sizes=(32,), iters=2, quant_numel=4096)
    tests = {"passed": 3, "failed": 0, "skipped": 0, "returncode": 0, "tail": ""}
    rows = G.summary_rows(tests, t.gemm_rows, t.quant_rows)
    assert rows[0][-1] == "ok"
    assert len(rows) == 1 + 4 + 2 + 3  # tests, 4 GEMMs, 2 fp8 ratios, 3 quantize kernels
    # Hand-made numbers: fp8 at 1.7x passes, 1.5x fails; a cast at 80 % passes, 60 % fails.
    gemms = [{"kind": "bf16", "n": 8192, "tflops": 700.0, "vs_bf16": 1.0},
             {"kind": "fp8 per-tensor", "n": 8192, "tflops": 1190.0, "vs_bf16": 1.7},
             {"kind": "fp8 per-row", "n": 8192, "tflops": 1050.0, "vs_bf16": 1.5}]
    quant = [{"kernel": "cast to E4M3", "gbytes": 1.61, "gbs": 3840.0, "of_peak": 0.8},
             {"kernel": "cast to E4M3", "gbytes": 1.61, "gbs": 2880.0, "of_peak": 0.6}]
    status = [r[-1] for r in G.summary_rows(tests, gemms, quant)]
    assert status[-4:] == ["ok", "FAIL", "80% of peak ok", "60% of peak FAIL"]
    bad = dict(tests, passed=2, failed=1)
    assert G.summary_rows(bad, [], [])[0][-1] == "FAIL"


def test_run_gpu_tests_counts_a_pytest_run():
    # Without CUDA every gpu-marked test is skipped; the counting still works.
    r = G.run_gpu_tests(timeout_s=300)
    if not torch.cuda.is_available():
        assert r["failed"] == 0 and r["passed"] == 0 and r["skipped"] > 0
    else:
        assert r["failed"] == 0 and r["passed"] > 0


def test_parse_counts_reads_the_summary_or_else_the_progress():
    out = "..F.\nFAILED tests/t.py::a - 9 passed in text\n2 failed, 9 passed, 1 error, " \
          "3 skipped, 5 deselected in 20.1s\n"
    assert G.parse_counts(out) == {"passed": 9, "failed": 3, "skipped": 3}
    assert G.parse_counts("3 errors in 1.0s\n") == {"passed": 0, "failed": 3, "skipped": 0}
    # Cut short by the timeout: no summary yet, so the progress marks are counted.
    cut = "..F.s.....  [ 20%]\n.E..        [ 40%]\n"  # 8 + 3 dots, one F, one E, one s
    assert G.parse_counts(cut) == {"passed": 11, "failed": 2, "skipped": 1}


def test_a_test_run_past_its_timeout_is_reported_not_raised():
    # One second is far less than pytest needs to import torch: the run is killed.
    r = G.run_gpu_tests(timeout_s=1)
    assert r["timed_out"] and r["returncode"] is None and isinstance(r["tail"], str)
    row = G.summary_rows(r, [], [])[0]
    assert row[1].startswith("timed out after") and row[-1] == "FAIL"


def _fake_cuda_main(monkeypatch, capsys, demo4):
    L = importlib.import_module("lectures.04_low_precision_matmul")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(G, "run_gpu_tests", lambda: {
        "passed": 100, "failed": 1, "skipped": 0, "returncode": 1, "timed_out": False,
        "seconds": 30.0, "tail": "FAILED tests/test_torch_gemm.py::x[cuda]"})
    monkeypatch.setattr(L, "demo4_throughput", demo4)
    code = G.main()
    return code, capsys.readouterr().out


def test_main_prints_its_table_when_a_test_fails_and_demo4_breaks(monkeypatch, capsys):
    def broken(**kw):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore")

    code, out = _fake_cuda_main(monkeypatch, capsys, broken)
    assert code == 1
    assert "100 passed, 1 failed (30 s)" in out and "FAILED tests/test_torch_gemm.py" in out
    assert "RuntimeError: CUDA error: an illegal memory access" in out
    assert out.count("FAIL") >= 3  # tests row, demo 4 row, the printed failing test


def test_main_prints_error_rows_for_kernels_that_raise(monkeypatch, capsys):
    L = importlib.import_module("lectures.04_low_precision_matmul")
    real = L.demo4_throughput

    def on_cpu(**kw):
        assert kw["errors"] == "record"
        return real(device="cpu", sizes=(32,), iters=2, quant_numel=4096, errors="record")

    def no_fp8(kind, n, device, **kw):
        if kind.startswith("fp8"):
            raise RuntimeError("torch._scaled_mm is only supported on CUDA devices with "
                               "compute capability >= 9.0 or 8.9")
        return gemm_tflops(kind, n, device, **kw)

    from lectures import gpu_timing as bench
    gemm_tflops = bench.gemm_tflops
    monkeypatch.setattr(bench, "gemm_tflops", no_fp8)
    code, out = _fake_cuda_main(monkeypatch, capsys, on_cpu)
    assert code == 1
    # two fp8 GEMM rows with the error, two fp8/bf16 ratios "n/a", all FAIL
    assert out.count("RuntimeError: torch._scaled_mm is only supported") == 2
    assert out.count("n/a") == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA the script runs for minutes")
def test_training_check_without_cuda_says_so_and_exits_0():
    p = subprocess.run([sys.executable, "benchmarks/gpu_training_check.py"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "No CUDA device: nothing measured" in p.stdout


def test_training_check_real_stack_runs_on_the_cpu():
    pytest.importorskip("torchao")
    spec = importlib.util.spec_from_file_location(
        "gpu_training_check", ROOT / "benchmarks" / "gpu_training_check.py")
    T = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(T)
    ok, rows = T.real_stack("cpu")
    assert ok and rows[0][1] == "yes" and rows[1][1] == "1"
