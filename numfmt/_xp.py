"""One body for numpy arrays and torch tensors: the array API namespace, and what it lacks.

numfmt's integer quantizers (:mod:`numfmt.intquant`), block scales (:mod:`numfmt.blocks`) and
metrics (:mod:`numfmt.metrics`) are written once over the array API standard
(https://data-apis.org/array-api/2023.12/), through array-api-compat's namespaces for numpy and
torch; ``numfmt.torch`` checks its inputs (devices, float32 kept as float32) and calls the same
bodies. The standard has no floating-point error state, no ``out=`` argument, no ``frexp`` or
``ldexp`` and no control over where a large result's memory comes from; the few helpers below
add them with each library's own call. torch is imported only when a tensor arrives.
"""

from __future__ import annotations

import contextlib

import numpy as np
from array_api_compat import (array_namespace, is_array_api_obj, is_numpy_namespace,
                              is_torch_namespace)

from numfmt._chunks import absmax_rows as _np_absmax_rows, rows_per_chunk

__all__ = ["array_namespace", "is_array_api_obj", "is_numpy_namespace", "quiet", "empty",
           "row_spans", "absmax_rows", "divide_into", "subtract_into", "round_into", "clip_into",
           "floor_log2", "pow2", "float32_bits", "round_to", "dot", "to_numpy"]


def quiet(xp):
    """numpy's ``errstate`` with overflow, invalid and divide ignored (an overflowing quotient
    is +-Inf by design where this is used); torch raises no floating-point warnings."""
    if is_numpy_namespace(xp):
        return np.errstate(over="ignore", invalid="ignore", divide="ignore")
    return contextlib.nullcontext()


def empty(xp, shape: tuple, dtype, like) -> object:
    """A fresh array of ``shape`` for a result every element of which will be written, on
    ``like``'s device. On torch's CPU the memory comes from numpy (see
    :func:`numfmt.torch._core.new_result`: transparent huge pages on large results)."""
    if is_torch_namespace(xp):
        from numfmt.torch._core import new_result
        n = 1
        for d in shape:
            n *= d
        return new_result(n, dtype, like.device).reshape(shape)
    return np.empty(shape, dtype)


def row_spans(xp, n_rows: int, row_length: int, like) -> list[tuple[int, int]]:
    """``(start, stop)`` row ranges covering ``n_rows``: cache-sized chunks on a CPU, one span
    on a GPU (few large kernels)."""
    if is_torch_namespace(xp):
        from numfmt.torch._core import spans
        return spans(n_rows, like.device, per=row_length)
    step = rows_per_chunk(row_length)
    return [(i, min(i + step, n_rows)) for i in range(0, n_rows, step)] or [(0, 0)]


def absmax_rows(xp, rows):
    """``max(abs(rows), axis=-1)`` of a 2-D array (n, k), same dtype, exact, through chunk-sized
    temporaries (each library's fastest way: see the two implementations)."""
    if is_torch_namespace(xp):
        from numfmt.torch._core import absmax_rows as torch_absmax_rows
        return torch_absmax_rows(rows)
    return _np_absmax_rows(rows)


def divide_into(xp, a, b, out):
    """``out[...] = a / b`` without a temporary (float64 ``out``; a float32 ``a`` widens
    exactly first)."""
    if is_torch_namespace(xp) and a.dtype != out.dtype:
        return out.copy_(a).div_(b)  # widen, then divide: faster than torch's mixed-dtype div
    return (_lib(xp)).divide(a, b, out=out)


def subtract_into(xp, a, b, out):
    """``out[...] = a - b`` without a temporary."""
    return (_lib(xp)).subtract(a, b, out=out)


def round_into(xp, out):
    """Round ``out`` in place to the nearest integer, ties to even (``np.rint``,
    ``torch.round``)."""
    if is_torch_namespace(xp):
        return out.round_()
    return np.rint(out, out=out)


def clip_into(xp, out, lo, hi):
    """Clamp ``out`` in place to ``[lo, hi]`` (Python numbers)."""
    if is_torch_namespace(xp):
        return out.clamp_(lo, hi)
    np.maximum(out, lo, out=out)
    return np.minimum(out, hi, out=out)


def floor_log2(xp, a):
    """``floor(log2 a)`` as int64 for positive float64 ``a`` (numpy's ``frexp``; torch reads the
    exponent field, giving -1023 for subnormals: every caller clamps far above that)."""
    if is_torch_namespace(xp):
        from numfmt.torch._core import floor_log2 as torch_floor_log2
        return torch_floor_log2(a)
    return np.frexp(a)[1].astype(np.int64) - 1


def pow2(xp, e):
    """Exact ``2.0 ** e`` as float64 for integer ``e`` in [-1022, 1023] (``ldexp``; torch
    builds the bit pattern)."""
    if is_torch_namespace(xp):
        from numfmt.torch._core import pow2 as torch_pow2
        return torch_pow2(e)
    return np.ldexp(1.0, np.asarray(e).astype(np.int32))  # numpy's int32 loop: 7x the int64 one


def float32_bits(xp, a):
    """The IEEE 754 bit patterns of float32 ``a``, as int64 (a reinterpreting view)."""
    return xp.astype(a.view(_lib(xp).int32), xp.int64)


def round_to(xp, y, fmt):
    """``fmt.round(y)``, nearest even and saturating, in the library of ``y`` (the rounding
    itself is twinned: see ARCHITECTURE.md)."""
    if is_torch_namespace(xp):
        from numfmt.torch.formats import round as torch_round
        return torch_round(y, fmt)
    return fmt.round(y)


def dot(xp, a, b) -> float:
    """``sum(a * b)`` of two 1-D float64 arrays, as a float.

    On the CPU, numpy's own einsum loop for both libraries (a CPU tensor is read through a
    zero-copy numpy view, so numpy and torch sum in the same order): not BLAS, whose thread pool
    starts on every call and waits for a second core on a shared machine. On a GPU,
    ``torch.dot``.
    """
    if is_torch_namespace(xp):
        if a.device.type != "cpu":
            return float(_lib(xp).dot(a, b))
        a, b = a.detach().numpy(), b.detach().numpy()
    return float(np.einsum("i,i->", a, b))


def to_numpy(a) -> np.ndarray:
    """``a`` as a numpy array (a torch tensor is copied to the CPU if it is elsewhere)."""
    if isinstance(a, np.ndarray):
        return a
    return a.detach().cpu().numpy()


def _lib(xp):
    """The library itself behind an array-api-compat namespace (numpy or torch)."""
    if is_torch_namespace(xp):
        import torch
        return torch
    return np
