"""Lab 12: time and memory. Do it after lecture 12.

Replace each ``raise NotImplementedError`` with your code (plain Python), then run
``python -m labs check 12`` (``--lang zh``: in Chinese). ``python -m labs show 12`` prints the
tasks.
"""


def kv_cache_bytes(layers, kv_heads, head_dim, tokens, bits):
    """Return the bytes of the key/value cache holding `tokens` positions of one sequence.

    Every layer keeps one key and one value vector of head_dim elements per K/V head and
    position, each element `bits` bits (scales included).

    Parameters
    ----------
    layers, kv_heads, head_dim, tokens : int
    bits : float (16 for a BF16 cache; 8.25 for INT8 with an FP16 scale per 64 elements)

    Returns
    -------
    float, bytes

    Source
    ------
    Pope et al. 2023, "Efficiently Scaling Transformer Inference", section 2.1;
    numfmt.cost.kv_cache_bytes.

    Hints
    -----
    Count the elements first (an int), then multiply by bits and divide by 8.
    """
    raise NotImplementedError


def decode_step_bytes(params, bits_per_weight, kv_bytes_per_token, context):
    """Return the bytes one decode step reads: every weight once, and the cached context.

    Parameters
    ----------
    params : int, the model's weights
    bits_per_weight : float (4.5 for 4-bit groups of 32 with an FP16 scale)
    kv_bytes_per_token : float, the cache's bytes per position (kv_cache_bytes with tokens=1)
    context : int, positions in the cache

    Returns
    -------
    float, bytes (graded within 1e-12 relative)

    Source
    ------
    Lecture 12; numfmt.cost.weight_bytes and numfmt.cost.kv_cache_bytes.

    Hints
    -----
    A weight of b bits is b / 8 bytes. At batch 1 a decode step reads them all for one token.
    """
    raise NotImplementedError


def roofline_seconds(flops, nbytes, peak_flops, bandwidth):
    """Return the roofline's least time for work of `flops` operations moving `nbytes` bytes.

    The work runs at the compute ceiling or the memory ceiling, whichever is slower, with
    the two overlapping perfectly.

    Parameters
    ----------
    flops : float, operations
    nbytes : float, bytes moved
    peak_flops : float, operations per second
    bandwidth : float, bytes per second

    Returns
    -------
    float, seconds

    Source
    ------
    Williams, Waterman and Patterson 2009, "Roofline: An Insightful Visual Performance Model
    for Multicore Architectures"; numfmt.cost.roofline_seconds.

    Hints
    -----
    Compute each ceiling's time and take the larger one.
    """
    raise NotImplementedError
