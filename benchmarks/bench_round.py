"""Time numfmt's rounding against ml_dtypes' round trip, and lecture 05 end to end.

For each format: ``fmt.round(x)`` on 4M float32 values (returns float64) against
``x.astype(ml_dtype).astype(np.float32)`` on the same values, both in this process, median of
several runs; the results are checked bit for bit before timing. Then lecture 05 as a
subprocess, against a bare ``python -c "import numpy"`` start-up in the same run.

Run:  python benchmarks/bench_round.py [--n 4194304] [--repeat 7]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

from console import print_header, print_table
from numfmt._reference import reference_dtypes
from lectures.machine import repeat_seconds

ROOT = Path(__file__).resolve().parents[1]
# (format, its reference type) for every format ml_dtypes or numpy defines, from one table.
PAIRS = list(reference_dtypes().items())




def test_values(fmt, n: int) -> np.ndarray:
    """Values inside the format's range (where both libraries define the same result)."""
    rng = np.random.default_rng(0)
    # E8M0's lowest binade is where ml_dtypes differs on purpose (tests/test_formats.py).
    lo = np.log2(fmt.min_subnormal) - 1 if fmt.subnormals else np.log2(fmt.min_normal) + 1
    hi = np.log2(fmt.max_value)
    x = np.exp2(rng.uniform(lo, hi, n)) * rng.choice([-1.0, 1.0], n)
    return np.abs(x).astype(np.float32) if not fmt.signed else x.astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 22)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    rows = []
    for fmt, ml in PAIRS:
        x = test_values(fmt, args.n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = x.astype(ml).astype(np.float32)
            ours = fmt.round(x, saturate=False)
            identical = np.array_equal(ours, ref.astype(np.float64), equal_nan=True)
            t_ml = repeat_seconds(lambda: x.astype(ml).astype(np.float32), args.repeat).median
        t_ours = repeat_seconds(lambda: fmt.round(x, saturate=False), args.repeat).median
        rows.append([fmt.name, f"{t_ours * 1e3:.1f}", f"{t_ml * 1e3:.1f}", f"{t_ml / t_ours:.2f}x",
                     "yes" if identical else "NO"])
    print_header(f"fmt.round vs ml_dtypes round trip, {args.n:,} float32 values, "
                 f"median of {args.repeat}")
    print_table(["format", "numfmt (ms)", "ml_dtypes (ms)", "speed-up", "bit-identical"], rows)

    lecture = [sys.executable, str(ROOT / "lectures" / "05_quantization_basics.py")]
    bare = [sys.executable, "-c", "import numpy"]
    run = lambda cmd: subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)  # noqa: E731
    t_lec = repeat_seconds(lambda: run(lecture), 3).median
    t_bare = repeat_seconds(lambda: run(bare), 3).median
    print_header("lecture 05 end to end (subprocess, median of 3)")
    print_table(["what", "seconds", "ratio to python + numpy start-up"],
                [["python lectures/05_quantization_basics.py", f"{t_lec:.2f}", f"{t_lec / t_bare:.1f}x"],
                 ["python -c 'import numpy'", f"{t_bare:.2f}", "1.0x"]])


if __name__ == "__main__":
    main()
