"""The text: the Python language reference that ships with CPython, cut into fixed windows.

``pydoc_data.topics.topics`` is the help text behind ``help("assert")`` and friends: about
465 kB of English and code, present in every CPython installation, read at run time (never
copied into this repository). Tokenized with the model's tokenizer it is about 113k tokens.

The windows
    The topics are joined in sorted key order with blank lines between them, tokenized once
    (no special tokens), and cut into consecutive windows of ``seq_len`` tokens (the tail that
    does not fill a window is dropped). Windows with an even index are the *evaluation* pool,
    windows with an odd index the *calibration* pool, so the two never share a token; each
    request takes ``n`` windows of its pool spread evenly from the first to the last, so a
    few windows already sample the whole reference.

    Fine-tuning (lecture 11) takes its *training* windows from the token positions that the
    evaluation and calibration windows it uses leave untouched (:func:`training_windows`):
    the same stream, never a token of the text it is scored on.

Out-of-domain calibration
    A second document that ships with CPython, the source code of its ``argparse`` module
    (:func:`ood_text`: Python code and its docstrings, about 100 kB, read from the file the
    import system finds), calibrates where lecture 09 asks what calibrating on the evaluation
    text's own domain buys. It shares no document with the language reference;
    :func:`ood_calibration_windows` cuts it into windows as the calibration windows are cut.
"""

from __future__ import annotations

import numpy as np

from lectures.corpus import corpus_text

SEQ_LEN = 512        # tokens per window (lecture 08's perplexity uses 4 windows of 512)
OOD_MODULE = "argparse"   # the out-of-domain calibration text: this stdlib module's source


def corpus_tokens(tokenizer) -> np.ndarray:
    """Token ids of :func:`corpus_text`, int64, shape (N,), no special tokens added."""
    ids = tokenizer(corpus_text(), add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def ood_text() -> str:
    """The out-of-domain calibration text: the source of the stdlib module :data:`OOD_MODULE`.

    Raises
    ------
    FileNotFoundError
        If this Python installation ships the module without its source file.
    """
    import importlib.util
    spec = importlib.util.find_spec(OOD_MODULE)
    origin = None if spec is None else spec.origin
    if not origin or not origin.endswith(".py"):
        raise FileNotFoundError(f"the source of the stdlib module {OOD_MODULE!r} is not "
                                f"installed (found {origin!r}); lecture 09's out-of-domain "
                                "calibration reads it")
    with open(origin, encoding="utf-8") as f:
        return f.read()


def ood_tokens(tokenizer) -> np.ndarray:
    """Token ids of :func:`ood_text`, int64, shape (N,), no special tokens added."""
    ids = tokenizer(ood_text(), add_special_tokens=False)["input_ids"]
    return np.asarray(ids, dtype=np.int64)


def _windows(tokens: np.ndarray, n: int, seq_len: int, parity: int) -> np.ndarray:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len < 2:
        raise ValueError(f"seq_len must be an integer >= 2, got {seq_len!r}")
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {tokens.shape}")
    all_windows = tokens[: len(tokens) // seq_len * seq_len].reshape(-1, seq_len)
    pool = all_windows[parity::2]
    if n > len(pool):
        raise ValueError(f"n={n} windows of {seq_len} tokens requested, the pool has {len(pool)}")
    picks = np.round(np.linspace(0, len(pool) - 1, n)).astype(np.int64)
    return pool[picks].copy()


def eval_windows(tokens, n: int = 4, seq_len: int = SEQ_LEN) -> np.ndarray:
    """``n`` evaluation windows of ``seq_len`` tokens: int64, shape (n, seq_len).

    Taken from the even-numbered windows of ``tokens``, spread evenly (see the module notes).

    Raises
    ------
    ValueError
        If ``n`` or ``seq_len`` is not a positive integer (``seq_len`` >= 2), ``tokens`` is not
        one-dimensional, or the pool has fewer than ``n`` windows.
    """
    return _windows(tokens, n, seq_len, 0)


def calibration_windows(tokens, n: int = 8, seq_len: int = SEQ_LEN) -> np.ndarray:
    """``n`` calibration windows: int64, shape (n, seq_len), from the odd-numbered windows.

    Disjoint from every :func:`eval_windows` of the same ``seq_len``. Raises as it does.
    """
    return _windows(tokens, n, seq_len, 1)


def ood_calibration_windows(tokens, n: int = 4, seq_len: int = SEQ_LEN) -> np.ndarray:
    """``n`` windows of ``seq_len`` tokens of another text (:func:`ood_tokens`): int64, shape
    (n, seq_len), the odd-numbered windows spread evenly, as :func:`calibration_windows` takes
    them (so a workload calibrates on as many tokens of either text). Raises as it does."""
    return _windows(tokens, n, seq_len, 1)


def window_starts(n_tokens: int, n: int, seq_len: int, parity: int) -> np.ndarray:
    """Start positions in the token stream of the windows :func:`eval_windows` (parity 0) or
    :func:`calibration_windows` (parity 1) returns for ``n`` and ``seq_len``: int64 (n,)."""
    pool = np.arange(n_tokens // seq_len)[parity::2] * seq_len
    if n > len(pool):
        raise ValueError(f"n={n} windows of {seq_len} tokens requested, the pool has {len(pool)}")
    return pool[np.round(np.linspace(0, len(pool) - 1, n)).astype(np.int64)]


def training_windows(tokens, n: int, seq_len: int, avoid=((4, SEQ_LEN, 0), (4, SEQ_LEN, 1))
                     ) -> np.ndarray:
    """``n`` training windows of ``seq_len`` tokens that share no token with the windows in
    ``avoid``: int64, shape (n, seq_len).

    Parameters
    ----------
    tokens : 1-D integer array, the token stream (:func:`corpus_tokens`)
    n, seq_len : int, windows and tokens per window
    avoid : iterable of (n, seq_len, parity): the evaluation (parity 0) and calibration
        (parity 1) requests of the experiment; default 4 of each of 512 tokens

    The stream is cut into consecutive windows of ``seq_len`` tokens; those overlapping no
    avoided window form the pool, and ``n`` of them are taken spread evenly over it, in order.

    Raises
    ------
    ValueError
        As :func:`eval_windows`, or if the pool has fewer than ``n`` windows.
    """
    tokens = np.asarray(tokens)
    _windows(tokens, 1, seq_len, 0)                       # the checks of the other pools
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be a positive integer, got {n!r}")
    used = np.zeros(len(tokens), bool)
    for count, length, parity in avoid:
        for start in window_starts(len(tokens), count, length, parity):
            used[start:start + length] = True
    cut = len(tokens) // seq_len * seq_len
    free = ~used[:cut].reshape(-1, seq_len).any(axis=1)
    pool = tokens[:cut].reshape(-1, seq_len)[free]
    if n > len(pool):
        raise ValueError(f"n={n} training windows of {seq_len} tokens requested, the pool has "
                         f"{len(pool)}")
    return pool[np.round(np.linspace(0, len(pool) - 1, n)).astype(np.int64)].copy()
