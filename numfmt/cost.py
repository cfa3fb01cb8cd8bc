"""What a format costs in memory traffic and time: bytes, KV-cache size and the roofline.

Quantization is for speed and memory. These functions turn a format's bits into the bytes a
step of inference must move, and bytes and operations into the time a machine needs at best
(the roofline). They know nothing of any particular model: a caller passes counts (layers,
heads, parameters) and the machine's two ceilings (peak operations per second, memory
bandwidth). Plain Python floats and ints; numpy is not needed.

References
----------
S. Williams, A. Waterman, D. Patterson, "Roofline: an insightful visual performance model for
multicore architectures", Communications of the ACM 52(4), 2009.
"""

from __future__ import annotations

from numbers import Real

__all__ = ["weight_bytes", "kv_cache_bytes", "attention_flops", "arithmetic_intensity",
           "ridge_point", "attainable", "roofline_seconds"]


def _count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value


def _positive(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    return float(value)


def _non_negative(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value >= 0:
        raise ValueError(f"{name} must be a non-negative number, got {value!r}")
    return float(value)


def weight_bytes(params: int, bits_per_weight: float) -> float:
    """Bytes that ``params`` weights occupy at ``bits_per_weight`` (codes and scales together).

    Parameters
    ----------
    params : int, the number of weights
    bits_per_weight : float, storage bits per weight, metadata included (e.g. 4.5 for NVFP4:
        4 bits of code and one 8-bit scale per 16)

    Returns
    -------
    float, bytes (``params * bits_per_weight / 8``)

    Raises
    ------
    ValueError
        If ``params`` is not a non-negative int or ``bits_per_weight`` is not positive.
    """
    return _count(params, "params") * _positive(bits_per_weight, "bits_per_weight") / 8


def kv_cache_bytes(layers: int, kv_heads: int, head_dim: int, tokens: int = 1,
                   bits: float = 16, batch: int = 1) -> float:
    """Bytes of the key/value cache that holds ``tokens`` positions of ``batch`` sequences.

    Each layer keeps one key and one value vector of ``head_dim`` elements per K/V head and
    position: ``2 * layers * kv_heads * head_dim * tokens * batch`` elements. With grouped-query
    attention ``kv_heads`` is smaller than the number of query heads, and so is the cache.

    Parameters
    ----------
    layers, kv_heads, head_dim : int, the model's shape
    tokens : int, positions held (the context length); default 1 (bytes per token)
    bits : float, bits per element, scales included (16 for an FP16/BF16 cache; 8.25 for INT8
        with an FP16 scale per 64 elements)
    batch : int, sequences

    Returns
    -------
    float, bytes

    Raises
    ------
    ValueError
        If a count is not a non-negative int, or ``bits`` is not positive.
    """
    elements = (2 * _count(layers, "layers") * _count(kv_heads, "kv_heads")
                * _count(head_dim, "head_dim") * _count(tokens, "tokens") * _count(batch, "batch"))
    return elements * _positive(bits, "bits") / 8


def attention_flops(layers: int, heads: int, head_dim: int, context: int,
                    new_tokens: int = 1) -> int:
    """Multiply-add operations (counted as 2) of causal attention's two products, q·kᵀ and p·v.

    Token ``i`` of ``new_tokens``, following ``context`` cached positions, attends to
    ``context + i`` positions (itself included): per layer and query head that is
    ``2 * head_dim`` operations for its scores and as many for its weighted sum of values, per
    position. Summed exactly: ``4 * layers * heads * head_dim * (new_tokens * context +
    new_tokens * (new_tokens + 1) / 2)``. Softmax and projections are not counted here (the
    projections are the linears' ``2 * params`` per token).

    Parameters
    ----------
    layers, heads, head_dim : int, query heads (each reads the K/V head of its group)
    context : int, positions already in the cache
    new_tokens : int, positions computed in this pass (1 for a decode step, T for a prefill)

    Returns
    -------
    int, operations per sequence

    Raises
    ------
    ValueError
        If a count is not a non-negative int.
    """
    t = _count(new_tokens, "new_tokens")
    positions = t * _count(context, "context") + t * (t + 1) // 2
    return 4 * _count(layers, "layers") * _count(heads, "heads") * _count(head_dim,
                                                                           "head_dim") * positions


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """Operations per byte moved to or from memory (flop/B): where a kernel sits on the roofline.

    Raises
    ------
    ValueError
        If ``flops`` is negative or ``nbytes`` is not positive.
    """
    return _non_negative(flops, "flops") / _positive(nbytes, "nbytes")


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """The intensity (flop/B) where the roofline's two ceilings meet: ``peak / bandwidth``.

    Below it a kernel is memory-bound (bandwidth sets its speed), above it compute-bound.

    Parameters
    ----------
    peak_flops : float, operations per second
    bandwidth : float, bytes per second

    Raises
    ------
    ValueError
        If either is not positive.
    """
    return _positive(peak_flops, "peak_flops") / _positive(bandwidth, "bandwidth")


def attainable(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roofline: the most operations per second at ``intensity`` flop/B,
    ``min(peak_flops, intensity * bandwidth)``.

    Raises
    ------
    ValueError
        If ``intensity`` is negative or a ceiling is not positive.
    """
    return min(_positive(peak_flops, "peak_flops"),
               _non_negative(intensity, "intensity") * _positive(bandwidth, "bandwidth"))


def roofline_seconds(flops, nbytes: float, peak_flops, bandwidth: float) -> float:
    """The least time for work of ``flops`` operations that moves ``nbytes`` bytes.

    ``max(Σ flops_i / peak_i, nbytes / bandwidth)``: the work is done at the compute ceiling or
    at the memory ceiling, whichever is slower, assuming the two overlap perfectly. Work in
    several number formats (int8 GEMMs beside float attention) passes one count per format,
    each with its own peak.

    Parameters
    ----------
    flops : float or sequence of floats, operations (per format)
    nbytes : float, bytes moved
    peak_flops : float or sequence of floats, operations per second (the same length as
        ``flops``)
    bandwidth : float, bytes per second

    Returns
    -------
    float, seconds (a lower bound: measured times are longer)

    Raises
    ------
    ValueError
        If a count is negative, a ceiling not positive, or the lengths differ.
    """
    counts = list(flops) if isinstance(flops, (list, tuple)) else [flops]
    peaks = list(peak_flops) if isinstance(peak_flops, (list, tuple)) else [peak_flops]
    if len(counts) != len(peaks):
        raise ValueError(f"flops and peak_flops differ in length: {len(counts)} and "
                         f"{len(peaks)}")
    compute = sum(_non_negative(f, "flops") / _positive(p, "peak_flops")
                  for f, p in zip(counts, peaks))
    return max(compute, _non_negative(nbytes, "nbytes") / _positive(bandwidth, "bandwidth"))
