"""How much text a real-model lecture reads: evaluation and calibration windows."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FULL", "QUICK", "Workload"]


@dataclass(frozen=True)
class Workload:
    """How much text every perplexity and every calibration sees (token windows of the
    language reference, :mod:`lectures.llm.text`)."""

    n_eval: int = 4          # evaluation windows
    seq_len: int = 512       # tokens per window
    n_calib: int = 4         # calibration windows (static scales, statistics, Hessians)


FULL = Workload()
#: ``--quick``, the tests' workload: 4x fewer tokens, the same code.
QUICK = Workload(n_eval=2, seq_len=256, n_calib=2)
