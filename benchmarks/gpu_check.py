"""One command to verify the GPU side of the course: the GPU tests and the throughput table.

    python benchmarks/gpu_check.py

With CUDA: runs ``pytest -m gpu`` (the same bit-exactness tests as on the CPU, on the device,
and a few training steps of lecture 10's model under every recipe of numfmt.torch.train),
times bf16 / fp8 per-tensor / fp8 per-row / int8 GEMMs at 4096^3 and 8192^3 and the quantize
kernels on 1 GiB, and prints one table with the targets (fp8 >= 1.6x bf16 at 8192^3; the
cast kernel >= 70 % of peak bandwidth). Takes about two minutes on an H100/H200 (the tests
are stopped after TEST_TIMEOUT_S); exit status 1 if a test or a target fails. A test run that
times out, a kernel that raises or a throughput demo that breaks becomes a FAIL row: the
table is always printed. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FP8_TARGET, BANDWIDTH_TARGET = 1.6, 0.70
TEST_FILES = ("tests/test_torch_numfmt.py", "tests/test_torch_gemm.py", "tests/test_train.py")
TEST_TIMEOUT_S = 150   # the tests take well under a minute; the throughput about one more
ERROR_WIDTH = 70       # characters of an error message shown in the table


def _text(out) -> str:
    """Captured output as str (TimeoutExpired carries bytes even when text=True)."""
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out


def parse_counts(stdout: str) -> dict:
    """Test counts from pytest -q output: {"passed", "failed" (failures + errors), "skipped"}.

    From the last summary line ("3 failed, 104 passed, 232 deselected in 20.1s"); a run cut
    short has none, so its progress lines ("..F.s   [ 45%]") are counted instead.
    """
    summary = [ln for ln in stdout.splitlines()
               if re.search(r"\d+ (passed|failed|errors?|skipped|deselected)\b", ln)
               and re.search(r"\bin [\d.]+s\b", ln)]
    if summary:
        found = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summary[-1])
        c = {k.rstrip("s") if k.startswith("error") else k: int(v) for v, k in found}
        return {"passed": c.get("passed", 0), "failed": c.get("failed", 0) + c.get("error", 0),
                "skipped": c.get("skipped", 0)}
    marks = "".join(m.group(1) for m in re.finditer(r"^([.FEsxX]+)\s*\[\s*\d+%\]\s*$",
                                                     stdout, re.M))
    return {"passed": marks.count("."), "failed": marks.count("F") + marks.count("E"),
            "skipped": marks.count("s")}


def run_gpu_tests(timeout_s: int = TEST_TIMEOUT_S, marker: str = "gpu") -> dict:
    """Run ``pytest -m <marker>`` on the torch test files in a subprocess.

    Returns ``{"passed", "failed", "skipped", "returncode", "timed_out", "seconds", "tail"}``;
    a run past ``timeout_s`` is killed and reported with ``timed_out=True`` (returncode None)
    and the counts of its output so far, so the caller can still print its table. The
    project's pytest addopts (nbval) are cleared, so only pytest itself is needed.
    """
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfE", "-o", "addopts=", "-m", marker,
           "-p", "no:cacheprovider", *TEST_FILES]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
        out, err, code, timed_out = p.stdout, p.stderr, p.returncode, False
    except subprocess.TimeoutExpired as exc:
        out, err, code, timed_out = _text(exc.stdout), _text(exc.stderr), None, True
    return {**parse_counts(out), "returncode": code, "timed_out": timed_out,
            "seconds": time.perf_counter() - t0, "tail": (out + err)[-3000:]}


def tests_ok(tests: dict) -> bool:
    """All selected tests ran and passed (pytest exit 0, nothing failed, something passed)."""
    return (not tests.get("timed_out") and tests.get("returncode") == 0
            and tests["failed"] == 0 and tests["passed"] > 0)


def _cut(text: str) -> str:
    return text if len(text) <= ERROR_WIDTH else text[:ERROR_WIDTH - 3] + "..."


def summary_rows(tests: dict, gemm_rows: list, quant_rows: list) -> list[list[str]]:
    """The single table: [check, measured, target, status] rows, from plain dicts.

    A GEMM or quantize row with an ``"error"`` shows the error and fails; so does a ratio
    to bf16 that could not be computed.
    """
    ran = f"{tests['passed']} passed, {tests['failed']} failed"
    if tests.get("timed_out"):
        ran = f"timed out after {tests.get('seconds', 0):.0f} s; {ran} by then"
    elif "seconds" in tests:
        ran += f" ({tests['seconds']:.0f} s)"
    rows = [["GPU tests (pytest -m gpu)", ran, "all pass", "ok" if tests_ok(tests) else "FAIL"]]
    for g in gemm_rows:
        if "error" in g:
            rows.append([f"{g['kind']} GEMM {g['n']}^3", _cut(g["error"]), "runs", "FAIL"])
        else:
            rows.append([f"{g['kind']} GEMM {g['n']}^3", f"{g['tflops']:.0f} TFLOP/s",
                         f"{g['vs_bf16']:.2f}x bf16", ""])
    big = max((g["n"] for g in gemm_rows), default=None)
    for g in gemm_rows:
        if g["n"] == big and g["kind"].startswith("fp8"):
            ratio = g["vs_bf16"]
            good = ratio == ratio and ratio >= FP8_TARGET  # NaN (a failed kernel) fails
            rows.append([f"{g['kind']} / bf16 at {big}^3",
                         f"{ratio:.2f}x" if ratio == ratio else "n/a",
                         f">= {FP8_TARGET}x", "ok" if good else "FAIL"])
    for q in quant_rows:
        target = q["kernel"] == "cast to E4M3"
        label = f"{q['kernel']}, {q['gbytes']:.2f} GB"
        goal = f">= {BANDWIDTH_TARGET:.0%} of peak" if target else ""
        if "error" in q:
            rows.append([label, _cut(q["error"]), goal or "runs", "FAIL"])
            continue
        frac = q.get("of_peak")
        status = "" if not target or frac is None else (
            "ok" if frac >= BANDWIDTH_TARGET else "FAIL")
        rows.append([label, f"{q['gbs']:.0f} GB/s", goal,
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
    from lectures.gpu_timing import error_text
    t0 = time.perf_counter()
    tests = run_gpu_tests()
    try:
        lecture = importlib.import_module("lectures.04_low_precision_matmul")
        t = lecture.demo4_throughput(device="cuda", errors="record")
        name, gemm_rows, quant_rows, broken = t.device_name, t.gemm_rows, t.quant_rows, None
    except Exception as exc:  # noqa: BLE001 - the table still gets printed
        name, gemm_rows, quant_rows, broken = "CUDA device", [], [], error_text(exc)
    print_header(f"GPU check on {name} (torch {torch.__version__})")
    rows = summary_rows(tests, gemm_rows, quant_rows)
    if broken:
        rows.append(["throughput (demo 4)", _cut(broken), "runs", "FAIL"])
    print_table(["check", "measured", "target", "status"], rows)
    print(f"gpu_check took {time.perf_counter() - t0:.0f} s.")
    if not tests_ok(tests):
        print(tests["tail"])
    return 1 if any(r[-1].endswith("FAIL") for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
