"""Private helpers for working through large arrays chunk by chunk.

numpy's time on arrays of millions of values goes mostly to fresh memory: every full-size
temporary is new pages that the kernel zeroes on first touch. Working 64K elements at a time
keeps the temporaries in cache and leaves only the results full-size.
"""

from __future__ import annotations

import numpy as np

CHUNK = 1 << 16  # elements per chunk: a few float64 temporaries of it fit in L2


def rows_per_chunk(row_length: int) -> int:
    """How many rows of ``row_length`` elements make one chunk (at least one)."""
    return max(1, CHUNK // max(1, row_length))


def absmax_rows(a: np.ndarray) -> np.ndarray:
    """``np.abs(a).max(axis=-1)`` for a 2-D array (n, k) of finite values, same dtype, exact.

    numpy reduces a short last axis slowly (a loop per row). Pairing the even and odd
    elements of a chunk's flat |a| (a pair never straddles two rows while the row length is
    even) halves every row in one contiguous vector pass, which numpy runs as one long loop.
    """
    n, k = a.shape
    out = np.empty(n, a.dtype)
    rows = rows_per_chunk(k)
    for i in range(0, n, rows):
        b = np.abs(a[i:i + rows]).reshape(-1)
        w = k
        while w > 1 and w % 2 == 0:
            w //= 2
            b = np.maximum(b[0::2], b[1::2])
        out[i:i + rows] = b.reshape(-1, w).max(axis=1)
    return out
