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
