"""Student's t quantiles for the course's 95 % intervals: one table, read by the real-model
harness (lectures.llm.evaluate, paired over evaluation windows) and by the training runs
(lectures.tinylm.runs, paired over seeds). Standard library only.
"""

from __future__ import annotations

__all__ = ["T_975"]

#: Two-sided 95 % quantiles of Student's t by degrees of freedom df = n - 1 (any table of t;
#: tests/test_llm_harness.py checks them against scipy.stats.t.ppf(0.975, df)): the half-width
#: of a 95 % interval for the mean of n values is T_975[n - 1] * sd / sqrt(n).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
         9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131}
