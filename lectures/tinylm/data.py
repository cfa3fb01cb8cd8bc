"""The training text: the bytes of CPython's language reference, split into training and
validation parts that never share a byte.

The text is :func:`lectures.corpus.corpus_text` (the topics behind ``help("assert")``, read
at run time from ``pydoc_data``), encoded as UTF-8: about 470 kB, a vocabulary of 256 byte
values. The bytes are cut into chunks of ``chunk`` bytes; every ``val_every``-th chunk is
validation, the rest training, so both parts sample the whole reference. Training batches are
random windows inside the training chunks, drawn from a seeded generator; validation uses
fixed, non-overlapping windows of the validation chunks.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch

from lectures.corpus import corpus_text


@lru_cache(maxsize=1)
def corpus_bytes() -> bytes:
    """The language reference as UTF-8 bytes."""
    return corpus_text().encode("utf-8")


@dataclass(frozen=True)
class ByteSplit:
    train: np.ndarray      # (n_train_chunks, chunk) uint8
    val: np.ndarray        # (n_val_chunks, chunk) uint8


def split(chunk: int = 1024, val_every: int = 10) -> ByteSplit:
    """The training and validation chunks (the tail shorter than a chunk is dropped).

    Raises
    ------
    ValueError
        If ``chunk`` < 2 or ``val_every`` < 2.
    """
    if chunk < 2 or val_every < 2:
        raise ValueError(f"chunk and val_every must be >= 2, got {chunk}, {val_every}")
    raw = np.frombuffer(corpus_bytes(), dtype=np.uint8)
    chunks = raw[: len(raw) // chunk * chunk].reshape(-1, chunk)
    is_val = np.arange(len(chunks)) % val_every == val_every - 1
    return ByteSplit(chunks[~is_val], chunks[is_val])


class Batches:
    """Seeded training batches: inputs and next-byte targets, each (batch, context) int64.

    The k-th batch depends only on ``seed`` and k, so every recipe trained with one seed sees
    the same bytes in the same order.
    """

    def __init__(self, data: ByteSplit, batch: int, context: int, seed: int, device="cpu"):
        chunk = data.train.shape[1]
        if context + 1 > chunk:
            raise ValueError(f"context + 1 ({context + 1}) exceeds the chunk ({chunk} bytes)")
        self.data, self.batch, self.context, self.device = data, batch, context, device
        self.rng = np.random.default_rng(seed)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        train = self.data.train
        rows = self.rng.integers(0, len(train), self.batch)
        starts = self.rng.integers(0, train.shape[1] - self.context, self.batch)
        win = np.stack([train[r, s:s + self.context + 1] for r, s in zip(rows, starts)])
        win = torch.from_numpy(win.astype(np.int64)).to(self.device)    # (B, T+1)
        return win[:, :-1], win[:, 1:]


def val_windows(data: ByteSplit, context: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` fixed validation windows, spread evenly over the validation chunks: inputs and
    targets, each (n, context) int64."""
    chunk = data.val.shape[1]
    per_chunk = (chunk - 1) // context
    starts = [(c, j * context) for c in range(len(data.val)) for j in range(per_chunk)]
    if n > len(starts):
        raise ValueError(f"n={n} validation windows requested, the split has {len(starts)}")
    picks = np.round(np.linspace(0, len(starts) - 1, n)).astype(np.int64)
    win = np.stack([data.val[starts[p][0], starts[p][1]:starts[p][1] + context + 1]
                    for p in picks]).astype(np.int64)
    win = torch.from_numpy(win)
    return win[:, :-1], win[:, 1:]
