"""MXFP4 and NVFP4 tensors as bytes, and back.

A block-scaled FP4 tensor is three byte streams:

* elements: E2M1 codes, two per byte, element 0 in the low nibble;
* block scales: one byte each, E8M0 (MXFP4, blocks of 32) or E4M3 (NVFP4, blocks of 16);
* NVFP4 only: one FP32 tensor scale (4 bytes).

So MXFP4 costs 4 + 8/32 = 4.25 bits per element and NVFP4 4 + 8/16 = 4.5
bits, plus 32 bits per tensor.

References
----------
OCP Microscaling Formats (MX) v1.0, sections 5.3 and 6.3; NVIDIA, "Introducing
NVFP4 for Efficient and Accurate Low-Precision Inference" (2025).
"""

from dataclasses import dataclass

import numpy as np

from ..blocks import BlockQuantized
from ..formats import E8M0, FP4_E2M1, FP8_E4M3
from .nibbles import pack_nibbles, unpack_nibbles

__all__ = ["PackedFP4", "pack_block_fp4", "unpack_block_fp4"]

_SCALE_FORMAT = {"mxfp4": E8M0, "nvfp4": FP8_E4M3}


@dataclass(frozen=True)
class PackedFP4:
    """A block-scaled FP4 tensor as bytes.

    Attributes
    ----------
    kind : {"mxfp4", "nvfp4"}
    shape : tuple
        Logical shape (..., K); blocks run along the last axis.
    block : int
    elements : uint8 (..., K/2)
        E2M1 codes, low nibble first.
    scales : uint8 (..., K/block)
        E8M0 (MXFP4) or E4M3 (NVFP4) codes of the block scales.
    tensor_scale : bytes
        4 bytes, the little-endian FP32 tensor scale (NVFP4); empty for MXFP4.
    """

    kind: str
    shape: tuple
    block: int
    elements: np.ndarray
    scales: np.ndarray
    tensor_scale: bytes

    @property
    def nbytes(self):
        """Bytes stored: elements + block scales + tensor scale."""
        return self.elements.nbytes + self.scales.nbytes + len(self.tensor_scale)

    @property
    def bits_per_element(self):
        """8 * nbytes / number of elements, tensor scale included."""
        return 8 * self.nbytes / int(np.prod(self.shape))

    def to_bytes(self):
        """All storage as one byte string: elements, then scales, then tensor scale."""
        return self.elements.tobytes() + self.scales.tobytes() + self.tensor_scale


def pack_block_fp4(bq, kind):
    """Turn a block-quantized FP4 tensor into its storage bytes.

    Parameters
    ----------
    bq : numfmt.BlockQuantized
        From ``mx_quantize(x, FP4_E2M1)`` (kind "mxfp4") or ``nvfp4_quantize(x)``
        (kind "nvfp4"). The last axis K must be even.
    kind : {"mxfp4", "nvfp4"}

    Returns
    -------
    PackedFP4

    Raises
    ------
    TypeError
        If ``bq`` is not a BlockQuantized.
    ValueError
        If ``bq`` is 0-d, ``kind`` is unknown, K is odd, the blocks do not tile K, the elements
        are not on the E2M1 grid, or a scale is not representable in the scale
        format (for instance an E4M3-scaled tensor packed as "mxfp4").
    """
    if not isinstance(bq, BlockQuantized):
        raise TypeError(f"expected a numfmt.BlockQuantized (numpy), got "
                        f"{type(bq).__module__}.{type(bq).__name__}")
    if kind not in _SCALE_FORMAT:
        raise ValueError(f"kind must be one of {tuple(_SCALE_FORMAT)}, got {kind!r}")
    shape = bq.elements.shape
    if len(shape) == 0 or np.ndim(bq.scales) == 0:
        raise ValueError("bq is 0-d (a scalar): block scaling needs a last axis to block; "
                         "quantize an array of shape (..., K) instead")
    k, n_blocks = shape[-1], bq.scales.shape[-1]
    if k % 2:
        raise ValueError(f"the last axis has {k} elements; FP4 packs two per byte and needs "
                         "an even count")
    if n_blocks == 0 or k % n_blocks:
        raise ValueError(f"{n_blocks} block scales do not tile a last axis of {k}")
    if np.any(FP4_E2M1.round(bq.elements) != bq.elements):
        raise ValueError("elements are not on the FP4 E2M1 grid")
    fmt = _SCALE_FORMAT[kind]
    if np.any(fmt.round(bq.scales) != bq.scales):
        raise ValueError(f"block scales are not {fmt.name} values; is this really {kind}?")
    if kind == "mxfp4" and bq.tensor_scale != 1.0:
        raise ValueError("MXFP4 has no tensor scale, but tensor_scale != 1")
    tensor = b"" if kind == "mxfp4" else np.float32(bq.tensor_scale).astype("<f4").tobytes()
    if kind == "nvfp4" and float(np.frombuffer(tensor, "<f4")[0]) != bq.tensor_scale:
        raise ValueError("the tensor scale is not an FP32 value")
    return PackedFP4(kind, shape, k // n_blocks, pack_nibbles(FP4_E2M1.encode(bq.elements)),
                     fmt.encode(bq.scales).astype(np.uint8), tensor)


def unpack_block_fp4(packed):
    """Values of a :class:`PackedFP4`, float64 of ``packed.shape``.

    Computed as ``elements * (scales * tensor_scale)``, the same products as
    ``numfmt.block_quantize``, so the round trip reproduces ``BlockQuantized.values``
    exactly.

    Raises
    ------
    TypeError
        If ``packed`` is not a PackedFP4.
    ValueError
        If its fields disagree: an unknown kind, a tensor scale that is not 4 bytes (NVFP4)
        or not empty (MXFP4), or element and scale arrays that do not hold ``shape``.
    """
    if not isinstance(packed, PackedFP4):
        raise TypeError(f"expected a PackedFP4, got {type(packed).__name__}")
    _check_packed(packed)
    elements = FP4_E2M1.decode(unpack_nibbles(packed.elements))
    scales = _SCALE_FORMAT[packed.kind].decode(packed.scales)
    tensor = 1.0 if packed.kind == "mxfp4" else float(np.frombuffer(packed.tensor_scale, "<f4")[0])
    full = (scales * tensor)[..., None]
    blocks = elements.reshape(packed.shape[:-1] + (-1, packed.block))
    return (blocks * full).reshape(packed.shape)


def _check_packed(p):
    """Refuse a hand-built PackedFP4 whose fields disagree, before they are read."""
    if p.kind not in _SCALE_FORMAT:
        raise ValueError(f"kind must be one of {tuple(_SCALE_FORMAT)}, got {p.kind!r}")
    want = 4 if p.kind == "nvfp4" else 0
    if not isinstance(p.tensor_scale, (bytes, bytearray)) or len(p.tensor_scale) != want:
        raise ValueError(f"tensor_scale must be {want} bytes for {p.kind}, got "
                         f"{p.tensor_scale!r}")
    shape = tuple(p.shape)
    if (not shape or isinstance(p.block, bool) or not isinstance(p.block, (int, np.integer))
            or p.block <= 0 or shape[-1] % p.block or shape[-1] % 2):
        raise ValueError(f"shape {shape} and block {p.block!r} do not agree: the last axis "
                         "must be even and a multiple of a positive block")
    for name, arr, last in (("elements", p.elements, shape[-1] // 2),
                            ("scales", p.scales, shape[-1] // p.block)):
        arr = np.asarray(arr)
        if arr.dtype != np.uint8 or arr.shape != shape[:-1] + (last,):
            raise ValueError(f"{name} must be uint8 of shape {shape[:-1] + (last,)} for "
                             f"shape {shape}, got {arr.dtype} {arr.shape}")
