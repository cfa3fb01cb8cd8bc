"""Orthogonal rotations that spread activation outliers over all channels.

For an orthogonal R (``R R^T = I``), a linear layer fed ``x @ R`` with weight ``W @ R``
computes ``x R R^T W^T = x W^T``: the function is unchanged, but a channel that held one huge
value now shares it with every other channel, so per-token INT4 activations (W4A4) lose far
less. A Hadamard matrix does this with entries ``+-1/sqrt(n)`` (fast, and every channel is mixed
equally); a random orthogonal matrix works for any n.

References
----------
Ashkboos et al., "QuaRot: Outlier-Free 4-Bit Inference in Rotated LLMs", NeurIPS 2024
(arXiv 2404.00456), sections 3-4; Liu et al., "SpinQuant: LLM Quantization with Learned
Rotations", ICLR 2025 (arXiv 2405.16406). Sylvester, "Thoughts on inverse orthogonal
matrices", 1867; Paley, "On orthogonal matrices", J. Math. Phys. 12, 1933 (constructions I and
II); Mezzadri, "How to generate random matrices from the classical compact groups", Notices
AMS 54, 2007 (Haar-distributed Q from a QR decomposition).
"""

from __future__ import annotations

import numpy as np

from numfmt._validate import check_bool, check_int, check_positive_int

from ._checks import as_matrix

__all__ = ["fuse_rotation", "hadamard", "hadamard_orders", "random_rotation"]


def _is_prime(q: int) -> bool:
    return q >= 2 and all(q % d for d in range(2, int(q ** 0.5) + 1))


def _jacobsthal(q: int) -> np.ndarray:
    """Q_ij = chi(j - i) over GF(q), q prime: the quadratic character (Legendre symbol)."""
    chi = np.full(q, -1, np.int64)
    chi[0] = 0
    chi[np.unique(np.arange(1, q) ** 2 % q)] = 1
    i = np.arange(q)
    return chi[(i[None, :] - i[:, None]) % q]


def _paley(m: int) -> np.ndarray | None:
    """A +-1 Hadamard matrix of order m by Paley's construction I or II (q prime), or None."""
    q = m - 1
    if _is_prime(q) and q % 4 == 3:                      # construction I: order q + 1
        s = np.zeros((m, m), np.int64)
        s[0, 1:], s[1:, 0], s[1:, 1:] = 1, -1, _jacobsthal(q)
        return s + np.eye(m, dtype=np.int64)
    q = m // 2 - 1
    if m % 2 == 0 and _is_prime(q) and q % 4 == 1:       # construction II: order 2(q + 1)
        s = np.zeros((m // 2, m // 2), np.int64)
        s[0, 1:], s[1:, 0], s[1:, 1:] = 1, 1, _jacobsthal(q)
        zero = np.array([[1, -1], [-1, -1]])
        one = np.array([[1, 1], [1, -1]])
        return np.kron(s, one) + np.kron(s == 0, zero)
    return None


def _factor(n: int):
    """(2^k, base) with n = 2^k * base and a known base matrix, preferring the largest 2^k."""
    k = (n & -n).bit_length() - 1                         # n = 2^k * odd
    for t in range(k, -1, -1):
        m = n >> t
        base = np.ones((1, 1), np.int64) if m == 1 else _paley(m)
        if base is not None:
            return 1 << t, base
    return None


def hadamard_orders(limit: int) -> list[int]:
    """The orders n <= ``limit`` that :func:`hadamard` can build, ascending."""
    return [n for n in range(1, check_positive_int(limit, "limit") + 1)
            if (n == 1 or n % 2 == 0) and _factor(n) is not None]


def hadamard(n: int, normalized: bool = True) -> np.ndarray:
    """A Hadamard matrix of order n: entries +-1, ``H H^T = n I``; orthonormal if normalized.

    Built as the Kronecker product of a Sylvester matrix of order 2^k and a Paley matrix of
    order m (construction I: m = q + 1 for a prime q = 3 mod 4, e.g. 12, 20, 24, 44;
    construction II: m = 2(q + 1) for a prime q = 1 mod 4, e.g. 12, 28, 36, 60), with the
    largest power of two that works. So 576 = 16 * 36 and 1536 = 128 * 12.

    Parameters
    ----------
    n : int > 0
    normalized : bool, default True
        True: float64 entries +-1/sqrt(n), ``H H^T = I`` up to float rounding. False: int64
        entries +-1 with ``H H^T = n I`` exactly.

    Returns
    -------
    ndarray, shape (n, n): float64 if normalized, else int64. Sylvester's matrix for n = 2^k.

    Raises
    ------
    TypeError
        If ``n`` is not an integer or ``normalized`` not a bool.
    ValueError
        If ``n`` is not positive, or no order-n matrix is known to these constructions (every
        Hadamard order above 2 is a multiple of 4; see :func:`hadamard_orders`).

    References
    ----------
    Sylvester 1867; Paley 1933. QuaRot (Ashkboos et al. 2024, ``hadamard_utils.py``) uses the
    same factorisation of n (16 * 36 for 576, 128 * 12 for 1536) but other matrices: its base
    matrices come from Sloane's tables and stand on the left of the Kronecker product
    (``had_K ⊗ Sylvester``), here Paley's stand on the right (``Sylvester ⊗ Paley``). Both are
    orthonormal Hadamard matrices; for n = 2^k they are the same Sylvester matrix, otherwise a
    QuaRot-rotated checkpoint is not reproduced by ``hadamard(n)``.
    """
    n = check_positive_int(n, "n")
    normalized = check_bool(normalized, "normalized")
    found = _factor(n) if (n == 1 or n % 2 == 0) else None
    if found is None:
        raise ValueError(f"no Hadamard matrix of order n = {n} is built here: n must be 2^k "
                         "times 1, q + 1 (q prime, q = 3 mod 4) or 2(q + 1) (q prime, "
                         "q = 1 mod 4); use random_rotation(n) for any n")
    h = found[1]
    while h.shape[0] < n:                                 # Sylvester doubling: [[H, H], [H, -H]]
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n) if normalized else h


def random_rotation(n: int, seed: int = 0) -> np.ndarray:
    """A Haar-random orthogonal matrix of order n (``Q Q^T = I`` up to float rounding).

    Parameters
    ----------
    n : int > 0
    seed : int
        Seed of ``numpy.random.default_rng``; the same seed gives the same matrix.

    Returns
    -------
    ndarray of float64, shape (n, n).

    Raises
    ------
    TypeError
        If ``n`` or ``seed`` is not an integer.
    ValueError
        If ``n`` is not positive.

    References
    ----------
    Mezzadri 2007: Q of the QR decomposition of a Gaussian matrix, columns multiplied by the
    signs of R's diagonal.
    """
    n = check_positive_int(n, "n")
    rng = np.random.default_rng(check_int(seed, "seed"))
    q, r = np.linalg.qr(rng.standard_normal((n, n)))
    return q * np.sign(np.diag(r))


def fuse_rotation(weight, rotation, side: str = "input") -> np.ndarray:
    """Fold an orthogonal rotation into a linear layer's (out, in) weight.

    ``side="input"``: returns ``W @ R`` (R of order in). The layer fed ``x @ R`` computes
    ``(x R)(W R)^T = x W^T``: unchanged. ``side="output"``: returns ``R^T @ W`` (R of order
    out), so the layer now outputs ``y @ R``; the next layer takes it with ``side="input"``.
    A residual stream rotated this way is unchanged once the RMSNorm gains are folded into the
    following weights (they do not commute with R; QuaRot section 4).

    Parameters
    ----------
    weight : array_like of float, shape (out, in)
    rotation : array_like of float, square, orthogonal (checked to 1e-8)
    side : {"input", "output"}

    Returns
    -------
    ndarray of float64, shape (out, in).

    Raises
    ------
    TypeError
        If an array is not real-valued.
    ValueError
        If ``side`` is unknown, the shapes do not match, ``rotation`` is not orthogonal, or
        the rotated weight is beyond float64's range (a weight near float64's max).
    """
    w = as_matrix(weight, "weight")
    r = as_matrix(rotation, "rotation")
    if side not in ("input", "output"):
        raise ValueError(f'side must be "input" or "output", got {side!r}')
    need = w.shape[1] if side == "input" else w.shape[0]
    if r.shape != (need, need):
        raise ValueError(f"rotation must be ({need}, {need}) for side={side!r} of a weight of "
                         f"shape {w.shape}, got {r.shape}")
    dev = np.abs(r @ r.T - np.eye(need)).max()
    if dev > 1e-8:
        raise ValueError(f"rotation is not orthogonal: max |R R^T - I| = {dev:.3g}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = w @ r if side == "input" else r.T @ w
    if not np.isfinite(out).all():
        raise ValueError(f"the rotated weight is beyond float64's range (max |weight| = "
                         f"{np.abs(w).max():.3g}): scale weight down first")
    return out
