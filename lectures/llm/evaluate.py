"""Perplexity of a causal language model on fixed token windows."""

from __future__ import annotations

import numpy as np


def check_positive_int(value, name: str) -> int:
    """``value`` if it is a positive int (not a bool); otherwise ValueError naming ``name``.
    The harness's one check for counts (windows per batch, threads)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def window_nll(model, windows, batch_size: int = 1) -> np.ndarray:
    """Mean negative log-likelihood per window, in nats per token: float64, shape (n,).

    Each window of T tokens is one independent sequence (no state carried over): the model
    predicts tokens 1..T-1 from their prefixes, so every window scores T - 1 tokens, and
    ``nll[i] = -mean_t log p(w[i, t] | w[i, :t])``, with log p from a float64 log-softmax of
    the model's float32 logits over the vocabulary. (float32 log-softmax, or
    ``cross_entropy`` on the (B, V, T) layout, moves the mean by up to 1e-4 nats here.)

    Parameters
    ----------
    model : a transformers causal LM (``model(input_ids).logits`` of shape (B, T, V))
    windows : integer array or tensor, shape (n, T), T >= 2
    batch_size : int, windows per forward pass (a speed/memory trade-off; results agree to
        float32 rounding across batch sizes)

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
            logits = model(input_ids=batch, use_cache=False).logits      # (B, T, V) float32
            for row, seq in zip(logits, batch):
                out.append(float(token_nll(row[:-1], seq[1:]).mean()))
    return np.array(out, dtype=np.float64)


ROWS_PER_CHUNK = 64      # 64 x 49,152 float64 log-probabilities: 25 MB at a time


def token_nll(logits, targets):
    """Negative log-likelihood of each target token from a float64 log-softmax.

    Parameters
    ----------
    logits : float32 tensor (N, V), the scores of N positions over the vocabulary
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
