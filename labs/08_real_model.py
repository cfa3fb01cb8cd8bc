"""Lab 08: a real model. Do it after lecture 08.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 08`` (``--lang zh``: in Chinese). ``python -m labs show 08`` prints the
tasks. The checks use small synthetic inputs: no model is loaded.
"""

import numpy as np


def token_nll(logits, targets):
    """Return each token's negative log-likelihood -log softmax(logits)[target], in nats.

    Parameters
    ----------
    logits : ndarray of float64, shape (T, V), the model's scores for T positions
    targets : ndarray of int64, shape (T,), the next tokens, in [0, V)

    Returns
    -------
    ndarray of float64, shape (T,) (graded within 1e-9 relative and 1e-12 absolute)

    Source
    ------
    torch.nn.functional.cross_entropy(logits, targets, reduction="none").

    Hints
    -----
    log softmax(z)_t = z_t - logsumexp(z). Subtract the row's maximum before np.exp, or large
    logits overflow to inf.
    """
    raise NotImplementedError


def perplexity(nll):
    """Return the perplexity exp(mean NLL) of a text from its tokens' NLLs.

    Parameters
    ----------
    nll : ndarray of float64, shape (T,), in nats

    Returns
    -------
    float (graded within 1e-12 relative)

    Source
    ------
    Jelinek et al. 1977; Hugging Face, "Perplexity of fixed-length models".

    Hints
    -----
    The mean of the NLLs, then np.exp: not the mean of the per-token exponentials.
    """
    raise NotImplementedError


def kv_quantize(k, bits):
    """Quantize a KV-cache slice per token (per row) to asymmetric `bits`-bit integers and
    return the dequantized values.

    For each row: lo = min(min(row), 0), hi = max(max(row), 0), scale = (hi - lo) / (2^bits -
    1) (1 for an all-zero row), zero_point = round(-lo / scale); codes = clamp(round(x / scale)
    + zero_point, 0, 2^bits - 1); values = (codes - zero_point) * scale. Round half to even.

    Parameters
    ----------
    k : ndarray of float64, shape (tokens, head_dim)
    bits : int, 2 to 8

    Returns
    -------
    ndarray of float64, shape (tokens, head_dim)

    Source
    ------
    Liu et al. 2024, "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV Cache",
    section 3; numfmt.quantize_int(k, bits, symmetric=False, granularity="channel").

    Hints
    -----
    Reduce over the last axis with keepdims=True so that the scales broadcast over each row.
    """
    raise NotImplementedError
