"""Two 4-bit codes per byte.

A 4-bit code is a *nibble*. Storage formats put two of them in one byte. Two
conventions exist, and mixing them up silently swaps every pair of weights:

* ``"low_first"``: element ``2i`` sits in bits 0-3, element ``2i+1`` in bits 4-7.
  OCP MX v1.0 packs FP4 (E2M1) this way, and so does torch's
  ``float4_e2m1fn_x2`` dtype. This is the default here.
* ``"high_first"``: element ``2i`` sits in bits 4-7. bitsandbytes stores QLoRA's
  NF4 and FP4 data this way.

Examples (low_first): E2M1 [1.0, -6.0] -> 0xF2; int4 [1, -2] -> 0xE1;
uint4 [3, 12] -> 0xC3.
"""

import numpy as np

from numfmt._validate import check_bool, check_int

from ..formats import FP4_E2M1
from ._checks import as_float_array, as_int_array, check_range

__all__ = [
    "pack_nibbles", "unpack_nibbles",
    "pack_uint4", "unpack_uint4",
    "pack_int4", "unpack_int4",
    "pack_fp4", "unpack_fp4",
]

_ORDERS = ("low_first", "high_first")


def _check_order(order):
    if order not in _ORDERS:
        raise ValueError(f"order must be one of {_ORDERS}, got {order!r}")


def pack_nibbles(codes, pad=False, order="low_first"):
    """Pack 4-bit codes two per byte along the last axis.

    Parameters
    ----------
    codes : array_like of int, shape (..., L)
        Codes in [0, 15]. Any integer dtype.
    pad : bool, default False
        If L is odd, append one zero code to make it even. Without ``pad`` an
        odd L raises, so that an odd element count is never rounded up silently.
    order : {"low_first", "high_first"}
        Which nibble holds the even-indexed element (see the module notes).

    Returns
    -------
    numpy.ndarray of uint8, shape (..., ceil(L / 2))

    Raises
    ------
    TypeError
        If ``codes`` is not an integer array.
    ValueError
        If a code is outside [0, 15], ``codes`` is 0-D, L is odd and ``pad`` is
        False, or ``order`` is unknown.

    References
    ----------
    OCP Microscaling Formats (MX) v1.0, section 5.3.3 (FP4 element packing);
    torch ``float4_e2m1fn_x2`` (element 0 in the low nibble).
    """
    _check_order(order)
    check_bool(pad, "pad")
    arr = as_int_array(codes)
    if arr.ndim == 0:
        raise ValueError("codes must have at least one axis")
    check_range(arr, 0, 15)
    if arr.shape[-1] % 2:
        if not pad:
            raise ValueError(
                f"cannot pack an odd number of codes ({arr.shape[-1]}) two per byte; "
                "pass pad=True to append one zero code explicitly")
        arr = np.concatenate([arr, np.zeros(arr.shape[:-1] + (1,), np.int64)], axis=-1)
    even, odd = arr[..., 0::2], arr[..., 1::2]
    if order == "high_first":
        even, odd = odd, even
    return (even | (odd << 4)).astype(np.uint8)


def unpack_nibbles(packed, count=None, order="low_first"):
    """Unpack bytes into 4-bit codes along the last axis.

    Parameters
    ----------
    packed : array_like of uint8, shape (..., B)
        Bytes as produced by :func:`pack_nibbles`.
    count : int, optional
        Number of codes to keep along the last axis: 2B (the default) or
        2B - 1 to drop a padding nibble.
    order : {"low_first", "high_first"}
        Which nibble holds the even-indexed element.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., count)
        Codes in [0, 15].

    Raises
    ------
    TypeError
        If ``packed`` is not a uint8 array.
    ValueError
        If ``count`` is not 2B or 2B - 1, ``packed`` is 0-D, or ``order`` is unknown.
    """
    _check_order(order)
    arr = np.asarray(packed)
    if arr.dtype != np.uint8:
        raise TypeError(f"packed must be a uint8 array, got dtype {arr.dtype}")
    if arr.ndim == 0:
        raise ValueError("packed must have at least one axis")
    full = 2 * arr.shape[-1]
    if count is None:
        count = full
    count = check_int(count, "count")
    if count not in (full, full - 1) or count < 0:
        raise ValueError(f"count must be {full} or {full - 1} for {arr.shape[-1]} bytes, "
                         f"got {count}")
    low, high = arr & 0x0F, arr >> 4
    first, second = (low, high) if order == "low_first" else (high, low)
    out = np.stack([first, second], axis=-1).reshape(arr.shape[:-1] + (full,))
    return out[..., :count]


def pack_uint4(values, pad=False, order="low_first"):
    """Pack unsigned 4-bit integers in [0, 15] two per byte.

    The code of an unsigned integer is the integer itself. Example: [3, 12] -> 0xC3.

    Parameters
    ----------
    values : array_like of int, shape (..., L)
    pad, order
        As in :func:`pack_nibbles`.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., ceil(L / 2))

    Raises
    ------
    TypeError, ValueError
        As :func:`pack_nibbles`.
    """
    return pack_nibbles(values, pad=pad, order=order)


def unpack_uint4(packed, count=None, order="low_first"):
    """Inverse of :func:`pack_uint4`.

    Parameters
    ----------
    packed : numpy.ndarray of uint8, shape (..., B)
    count, order
        As in :func:`unpack_nibbles`.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., count)
        Values in [0, 15].

    Raises
    ------
    TypeError, ValueError
        As :func:`unpack_nibbles`.
    """
    return unpack_nibbles(packed, count=count, order=order)


def pack_int4(values, pad=False, order="low_first"):
    """Pack signed 4-bit integers in [-8, 7] two per byte, two's complement.

    Parameters
    ----------
    values : array_like of int, shape (..., L)
        Integers in [-8, 7].
    pad, order
        As in :func:`pack_nibbles`.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., ceil(L / 2))
        Example: [1, -2] -> 0xE1 (-2 is the nibble 0b1110).

    Raises
    ------
    TypeError
        If ``values`` is not an integer array.
    ValueError
        If a value is outside [-8, 7], or as in :func:`pack_nibbles`.
    """
    arr = as_int_array(values, "values")
    check_range(arr, -8, 7, "values")
    return pack_nibbles(arr & 0x0F, pad=pad, order=order)


def unpack_int4(packed, count=None, order="low_first"):
    """Inverse of :func:`pack_int4`: nibbles read as two's complement.

    Parameters
    ----------
    packed : numpy.ndarray of uint8, shape (..., B)
    count, order
        As in :func:`unpack_nibbles`.

    Returns
    -------
    numpy.ndarray of int8, shape (..., count)
        Values in [-8, 7].

    Raises
    ------
    TypeError, ValueError
        As :func:`unpack_nibbles`.
    """
    codes = unpack_nibbles(packed, count=count, order=order).astype(np.int8)
    return np.where(codes >= 8, codes - 16, codes).astype(np.int8)


def pack_fp4(values, pad=False, order="low_first"):
    """Pack FP4 E2M1 values two per byte.

    Packing is lossless: every value must already be one of the 15 E2M1 values
    (0, ±0.5, ±1, ±1.5, ±2, ±3, ±4, ±6; -0.0 keeps its sign bit). Quantize first
    (for instance with ``numfmt.FP4_E2M1.round``), then pack.

    Parameters
    ----------
    values : array_like of float, shape (..., L)
    pad, order
        As in :func:`pack_nibbles`.

    Returns
    -------
    numpy.ndarray of uint8, shape (..., ceil(L / 2))
        Example: [1.0, -6.0] -> codes [0x2, 0xF] -> 0xF2.

    Raises
    ------
    TypeError
        If ``values`` is not a real numeric array.
    ValueError
        If a value is not finite or not on the E2M1 grid, or as in :func:`pack_nibbles`.

    References
    ----------
    OCP Microscaling Formats (MX) v1.0, section 5.3.3 (E2M1 encoding and packing).
    """
    arr = as_float_array(values, "values")
    off_grid = FP4_E2M1.round(arr) != arr
    if off_grid.any():
        bad = float(arr[off_grid][0])
        raise ValueError(f"{bad!r} is not an FP4 E2M1 value; round to E2M1 before packing")
    return pack_nibbles(FP4_E2M1.encode(arr), pad=pad, order=order)


def unpack_fp4(packed, count=None, order="low_first"):
    """Inverse of :func:`pack_fp4`: nibbles decoded as FP4 E2M1.

    Parameters
    ----------
    packed : numpy.ndarray of uint8, shape (..., B)
    count, order
        As in :func:`unpack_nibbles`.

    Returns
    -------
    numpy.ndarray of float64, shape (..., count)
        E2M1 values; code 0x8 gives -0.0.

    Raises
    ------
    TypeError, ValueError
        As :func:`unpack_nibbles`.
    """
    return FP4_E2M1.decode(unpack_nibbles(packed, count=count, order=order))
