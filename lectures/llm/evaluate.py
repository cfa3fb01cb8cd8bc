"""Perplexity of a causal language model on fixed token windows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lectures.stats import T_975

from numfmt._validate import check_positive_int   # the harness's check for counts


def window_nll(model, windows, batch_size: int = 1) -> np.ndarray:
    """Mean negative log-likelihood per window, in nats per token: float64, shape (n,).

    Each window of T tokens is one independent sequence (no state carried over): the model
    predicts tokens 1..T-1 from their prefixes, so every window scores T - 1 tokens, and
    ``nll[i] = -mean_t log p(w[i, t] | w[i, :t])``, with log p from a float64 log-softmax of
    the model's logits over the vocabulary (float32 for a float32 model). (A float32
    log-softmax, or ``cross_entropy`` on the (B, V, T) layout, moves the mean by up to 1e-4 nats
    here.)

    Parameters
    ----------
    model : a transformers causal LM (``model(input_ids).logits`` of shape (B, T, V))
    windows : integer array or tensor, shape (n, T), T >= 2
    batch_size : int, windows per forward pass (a speed/memory trade-off; results agree to
        the model's rounding across batch sizes)

    Raises
    ------
    ValueError
        If ``windows`` is not two-dimensional with T >= 2, or ``batch_size`` < 1.
    """
    import torch

    ids = torch.as_tensor(np.asarray(windows), dtype=torch.long)
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise ValueError(f"windows must have shape (n, T) with T >= 2, got {tuple(ids.shape)}")
    check_positive_int(batch_size, "batch_size")
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for i in range(0, len(ids), batch_size):
            batch = ids[i:i + batch_size].to(device)                     # (B, T)
            logits = model(input_ids=batch, use_cache=False).logits      # (B, T, V)
            for row, seq in zip(logits, batch):
                out.append(float(token_nll(row[:-1], seq[1:]).mean()))
    return np.array(out, dtype=np.float64)


ROWS_PER_CHUNK = 64      # 64 x 49,152 float64 log-probabilities: 25 MB at a time


def token_nll(logits, targets):
    """Negative log-likelihood of each target token from a float64 log-softmax.

    Parameters
    ----------
    logits : float tensor (N, V), the scores of N positions over the vocabulary
    targets : integer tensor (N,), the token that follows each position

    Returns
    -------
    float64 tensor (N,): ``-torch.log_softmax(logits.double(), -1)[i, targets[i]]``, bit for
    bit (each row's log-softmax depends on that row alone). It is computed a chunk of rows at
    a time with ``log_softmax(..., dtype=float64)``, so no (N, V) float64 copy of the logits
    and no (N, V) log-probability array is ever allocated.

    Raises
    ------
    Nothing of its own: :func:`window_nll`, its caller, checks the windows; mismatched shapes
    fail in torch's ``gather`` (RuntimeError).
    """
    import torch

    out = torch.empty(len(logits), dtype=torch.float64)
    for i in range(0, len(logits), ROWS_PER_CHUNK):
        logp = torch.log_softmax(logits[i:i + ROWS_PER_CHUNK], dim=-1, dtype=torch.float64)
        out[i:i + ROWS_PER_CHUNK] = -logp.gather(-1, targets[i:i + ROWS_PER_CHUNK, None])[:, 0]
    return out


def perplexity(model, windows, batch_size: int = 1) -> float:
    """Perplexity ``exp(mean NLL)`` over every predicted token of ``windows``.

    All windows have the same length, so this is ``exp`` of the mean of :func:`window_nll`.
    Arguments and errors as :func:`window_nll`. Reference: Jelinek et al., 1977; the
    fixed-window evaluation of Hugging Face's "Perplexity of fixed-length models" (stride =
    window length, no overlap).
    """
    return float(np.exp(window_nll(model, windows, batch_size).mean()))




@dataclass(frozen=True)
class PairedRatio:
    """Perplexity of B over A on the same windows, with its window-to-window spread.

    ``ratio = exp(mean_i d_i)`` with ``d_i = nll_B[i] - nll_A[i]`` (nats per token), which is
    ppl_B / ppl_A exactly; ``low``/``high`` is the 95% t-interval of that mean over the n
    windows, ``exp(mean ± t·sd/√n)``; ``worse`` counts the windows where B is worse.
    """

    ratio: float
    low: float
    high: float
    worse: int
    n: int

    @property
    def within_noise(self) -> bool:
        """Whether the interval contains 1 (no difference), or there is a single window."""
        return self.n < 2 or self.low <= 1.0 <= self.high

    def percent(self) -> str:
        """``"+24.0% [+10.1%, +39.5%]"``: the change of B against A with its interval (the
        change alone for a single window)."""
        if self.n < 2:
            return f"{(self.ratio - 1) * 100:+.1f}%"
        return (f"{(self.ratio - 1) * 100:+.1f}% [{(self.low - 1) * 100:+.1f}%, "
                f"{(self.high - 1) * 100:+.1f}%]")


def paired_ratio(nll_a, nll_b) -> PairedRatio:
    """B's perplexity against A's, paired window by window (see :class:`PairedRatio`).

    Parameters
    ----------
    nll_a, nll_b : float arrays (n,), the per-window mean NLL of :func:`window_nll` for the
        same windows (nats per token).

    Raises
    ------
    ValueError
        If the two are not one-dimensional of the same length n >= 1.
    """
    a, b = np.asarray(nll_a, np.float64), np.asarray(nll_b, np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size < 1:
        raise ValueError(f"nll_a and nll_b must be (n,) arrays of one length n >= 1, got "
                         f"{a.shape} and {b.shape}")
    d = b - a
    n = d.size
    mean = float(d.mean())
    if n < 2:
        return PairedRatio(float(np.exp(mean)), float("nan"), float("nan"), int(d[0] > 0), 1)
    half = T_975.get(n - 1, 1.96) * float(d.std(ddof=1)) / np.sqrt(n)
    return PairedRatio(float(np.exp(mean)), float(np.exp(mean - half)),
                       float(np.exp(mean + half)), int(np.sum(d > 0)), n)
