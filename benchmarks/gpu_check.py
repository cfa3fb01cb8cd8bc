"""One command to verify the GPU side of the course: the GPU tests and the throughput table.

    python benchmarks/gpu_check.py

With CUDA: runs ``pytest -m gpu`` (the same bit-exactness tests as on the CPU, on the device),
times bf16 / fp8 per-tensor / fp8 per-row / int8 GEMMs at 4096^3 and 8192^3 and the quantize
kernels on 1 GiB, and prints one table with the targets (fp8 >= 1.6x bf16 at 8192^3; the
cast kernel >= 70 % of peak bandwidth). Takes about two minutes on an H100/H200; exit status 1
if a test or a target fails. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FP8_TARGET, BANDWIDTH_TARGET = 1.6, 0.70
TEST_FILES = ("tests/test_torch_numfmt.py", "tests/test_torch_gemm.py")


def run_gpu_tests(timeout_s: int = 180, marker: str = "gpu") -> dict:
    """Run ``pytest -m <marker>`` on the torch test files; returns counts and the exit code."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", marker, "-p", "no:cacheprovider",
           *TEST_FILES]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    counts = {k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|skipped|error)", p.stdout)}
    return {"passed": counts.get("passed", 0), "failed": counts.get("failed", 0)
            + counts.get("error", 0), "skipped": counts.get("skipped", 0),
            "returncode": p.returncode, "tail": p.stdout[-2000:]}


def summary_rows(tests: dict, gemm_rows: list, quant_rows: list) -> list[list[str]]:
    """The single table: [check, measured, target, status] rows, from plain dicts."""
    ok = tests["failed"] == 0 and tests["passed"] > 0
    rows = [["GPU tests (pytest -m gpu)", f"{tests['passed']} passed, {tests['failed']} failed",
             "all pass", "ok" if ok else "FAIL"]]
    for g in gemm_rows:
        rows.append([f"{g['kind']} GEMM {g['n']}^3", f"{g['tflops']:.0f} TFLOP/s",
                     f"{g['vs_bf16']:.2f}x bf16", ""])
    big = max((g["n"] for g in gemm_rows), default=None)
    for g in gemm_rows:
        if g["n"] == big and g["kind"].startswith("fp8"):
            rows.append([f"{g['kind']} / bf16 at {big}^3", f"{g['vs_bf16']:.2f}x",
                         f">= {FP8_TARGET}x", "ok" if g["vs_bf16"] >= FP8_TARGET else "FAIL"])
    for q in quant_rows:
        frac = q.get("of_peak")
        target = q["kernel"] == "cast to E4M3"
        status = "" if not target or frac is None else (
            "ok" if frac >= BANDWIDTH_TARGET else "FAIL")
        rows.append([f"{q['kernel']}, {q['gbytes']:.2f} GB", f"{q['gbs']:.0f} GB/s",
                     f">= {BANDWIDTH_TARGET:.0%} of peak" if target else "",
                     (f"{frac:.0%} of peak " if frac is not None else "peak unknown ") + status])
    return rows


def main(argv=None) -> int:
    try:
        import torch
    except ImportError:
        print("torch is not installed: pip install -e '.[torch]' (torch 2.13.0), then run this "
              "again on a machine with an NVIDIA GPU.")
        return 0

    from console import print_header, print_table
    if not torch.cuda.is_available():
        print("No CUDA device: nothing to check here. The CPU tests (pytest) cover the same "
              "numerics; run this script on a machine with an NVIDIA GPU.")
        return 0
    import importlib
    lecture = importlib.import_module("lectures.04_low_precision_matmul")
    tests = run_gpu_tests()
    t = lecture.demo4_throughput(device="cuda")
    print_header(f"GPU check on {t.device_name} (torch {torch.__version__})")
    rows = summary_rows(tests, t.gemm_rows, t.quant_rows)
    print_table(["check", "measured", "target", "status"], rows)
    if tests["failed"] or tests["returncode"] not in (0, 5):
        print(tests["tail"])
    return 1 if any(r[-1].endswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
