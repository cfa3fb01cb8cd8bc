"""Perplexity of a causal language model on fixed token windows."""

from __future__ import annotations

import numpy as np


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
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    device = next(model.parameters()).device
    out = []
    with torch.inference_mode():
        for i in range(0, len(ids), batch_size):
            batch = ids[i:i + batch_size].to(device)                     # (B, T)
            logits = model(input_ids=batch, use_cache=False).logits      # (B, T, V) float32
            for row, seq in zip(logits, batch):   # one window at a time: float64 copy small
                logp = torch.log_softmax(row[:-1].double(), dim=-1)      # (T-1, V)
                out.append(float(-logp.gather(-1, seq[1:, None]).mean()))
    return np.array(out, dtype=np.float64)


def perplexity(model, windows, batch_size: int = 1) -> float:
    """Perplexity ``exp(mean NLL)`` over every predicted token of ``windows``.

    All windows have the same length, so this is ``exp`` of the mean of :func:`window_nll`.
    Arguments and errors as :func:`window_nll`. Reference: Jelinek et al., 1977; the
    fixed-window evaluation of Hugging Face's "Perplexity of fixed-length models" (stride =
    window length, no overlap).
    """
    return float(np.exp(window_nll(model, windows, batch_size).mean()))
