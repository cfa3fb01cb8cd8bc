"""Optimizer state in 8 bits: block-wise quantization of Adam's moments on the dynamic map.

Adam keeps two moments per weight, m (signed) and v (non-negative): in FP32 they are 8 bytes of
state per weight, twice the FP32 weight itself. Dettmers et al. (2022) store each in 8 bits:
the tensor is cut into blocks of ``block`` consecutive elements (2,048 in the paper), each
block is divided by its absmax (an FP32 scale per block), and each quotient in [-1, 1] is
replaced by the index of the nearest value of the *dynamic map*, 256 values spread over seven
decades (:func:`numfmt.packing.qlora.dynamic_map`: signed for m, unsigned, twice as dense, for
v). The map's relative resolution is nearly the same from 1e-6 to 1, which a linear INT8 grid
(a step of absmax / 127) does not have: most of Adam's second moment lies decades below its
block's absmax and rounds to 0 on a linear grid, and ``m / sqrt(v)`` then divides by ``eps``.

One quantizer, one dequantizer, in the paper's notation::

    a_b   = max |x_i|, i in block b                       (FP32 absmax, one per block)
    c_i   = argmin_j |Q_j - x_i / a_b|                    (8-bit code, ties to the lower j)
    x'_i  = Q[c_i] * a_b                                  (dequantized)

References
----------
Dettmers, Lewis, Shleifer and Zettlemoyer, "8-bit Optimizers via Block-wise Quantization",
ICLR 2022, arXiv:2110.02861, sections 2.1 (block-wise quantization) and 2.2 (dynamic
quantization). bitsandbytes ``functional.create_dynamic_map`` and ``quantize_blockwise``,
whose CUDA and pure-torch kernels pick the nearest map value too, while its CPU kernel looks
the code up in a linear table of 65,536 bins, coarser than the map near 0; torchao
``torchao/optim/quant_utils.py`` (``scale_tensor``, ``quantize_8bit_with_qmap``,
``dequant_with_qmap``), whose codes these equal (tests/test_optim_state.py,
tests/test_optim_state_bitsandbytes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from numfmt.packing.qlora import dynamic_map

__all__ = ["BLOCK", "MIN_8BIT_SIZE", "BlockwiseState", "blockwise_quantize",
           "blockwise_dequantize", "dynamic_map"]

#: The paper's block size (section 2.1). torchao's AdamW8bit defaults to 256.
BLOCK = 2048
#: Tensors with fewer elements keep FP32 state (bitsandbytes' ``min_8bit_size``, torchao's
#: ``_new_buffer``): the paper's "small tensors" and biases cost little and are sensitive.
MIN_8BIT_SIZE = 4096


@dataclass(frozen=True)
class BlockwiseState:
    """An 8-bit block-wise quantized tensor: codes (uint8, the tensor's shape), the FP32
    absmax of each block (float32, (n_blocks,)), the block size and the map (float32, 256)."""
    codes: np.ndarray
    absmax: np.ndarray
    block: int
    qmap: np.ndarray

    @property
    def nbytes(self) -> int:
        """Bytes stored: one per code and four per block's absmax (the map is shared)."""
        return int(self.codes.size + 4 * self.absmax.size)


def _check(x, block):
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)) or block < 1:
        raise ValueError(f"block must be a positive integer, got {block!r}")
    a = np.asarray(x)
    if a.dtype.kind not in "biuf" or a.size == 0:
        raise TypeError(f"x must be a non-empty array of real numbers, got dtype {a.dtype} "
                        f"and size {a.size}")
    a = a.astype(np.float64)
    if not np.isfinite(a).all():
        raise ValueError("x must be finite")
    return a


def blockwise_quantize(x, block: int = BLOCK, signed: bool = True, qmap=None) -> BlockwiseState:
    """Quantize ``x`` to 8-bit codes of the dynamic map, one FP32 absmax per ``block``.

    Parameters
    ----------
    x : array_like of real numbers, any shape, finite
        Blocks run over ``x`` flattened in C order; a last block may be short.
    block : int, default 2048
    signed : bool, default True
        The signed map (Adam's first moment) or the unsigned one (the second moment, which is
        non-negative: its 256 values all lie in [0, 1]). An unsigned map given negative input
        rounds it to 0.
    qmap : array_like (256,), ascending, optional
        The map to use instead of ``dynamic_map(signed)`` (e.g. torchao's float32 table).

    Returns
    -------
    BlockwiseState
        ``absmax`` is each block's max |x| rounded to float32 (exact for float32 input; an
        all-zero block has absmax 0 and decodes to 0). Codes index the map value nearest to
        ``x / absmax`` computed in float64, ties to the lower index.

    Raises
    ------
    TypeError
        If ``x`` is not a non-empty real array.
    ValueError
        If ``x`` is not finite, ``block`` is not a positive integer or ``qmap`` is not an
        ascending array of 256 values.
    """
    a = _check(x, block)
    q = _qmap(qmap, signed)
    flat = a.reshape(-1)
    n_blocks = -(-flat.size // block)
    padded = np.zeros(n_blocks * block)
    padded[:flat.size] = flat
    blocks = padded.reshape(n_blocks, block)
    absmax = np.abs(blocks).max(axis=1).astype(np.float32)
    safe = np.where(absmax > 0, absmax.astype(np.float64), 1.0)
    q64 = q.astype(np.float64)
    codes = np.searchsorted((q64[1:] + q64[:-1]) / 2, blocks / safe[:, None], side="left")
    codes = codes.reshape(-1)[:flat.size].reshape(a.shape).astype(np.uint8)
    return BlockwiseState(codes, absmax, int(block), q)


def blockwise_dequantize(state: BlockwiseState) -> np.ndarray:
    """The values ``Q[c_i] * a_b`` of a :class:`BlockwiseState`, float64, the codes' shape.

    Raises
    ------
    TypeError
        If ``state`` is not a BlockwiseState.
    """
    if not isinstance(state, BlockwiseState):
        raise TypeError(f"expected a BlockwiseState, got {type(state).__name__}")
    flat = state.codes.reshape(-1)
    scale = np.repeat(state.absmax.astype(np.float64), state.block)[:flat.size]
    return (state.qmap.astype(np.float64)[flat] * scale).reshape(state.codes.shape)


def _qmap(qmap, signed):
    if qmap is None:
        return dynamic_map(signed)
    q = np.asarray(qmap, dtype=np.float32)
    if q.shape != (256,) or not (np.diff(q) >= 0).all():
        raise ValueError(f"qmap must be 256 ascending values, got shape {q.shape}")
    return q
