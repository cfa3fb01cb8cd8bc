"""Lab 07: weight storage. Do it after lecture 07.

Replace each ``raise NotImplementedError`` with your code (numpy), then run
``python -m labs check 07`` (``--lang zh``: in Chinese). ``python -m labs show 07`` prints the
tasks.
"""

import numpy as np


def pack_nibbles(codes):
    """Pack 4-bit codes two to a byte: element 2i in the low nibble, element 2i+1 in the high.

    Parameters
    ----------
    codes : ndarray of uint8, shape (L,), L even, every code in [0, 15]

    Returns
    -------
    ndarray of uint8, shape (L // 2,)

    Source
    ------
    The low-nibble-first order of llama.cpp's Q4_0 blocks and of bitsandbytes' 4-bit storage;
    numfmt.packing.pack_nibbles.

    Hints
    -----
    codes[0::2] are the low nibbles, codes[1::2] the high ones: byte = low | (high << 4).
    """
    raise NotImplementedError


def unpack_nibbles(packed):
    """Undo pack_nibbles: return the 4-bit codes, low nibble of each byte first.

    Parameters
    ----------
    packed : ndarray of uint8, shape (B,)

    Returns
    -------
    ndarray of uint8, shape (2 B,)

    Source
    ------
    numfmt.packing.unpack_nibbles.

    Hints
    -----
    packed & 0x0F and packed >> 4; interleave them with np.stack(..., axis=-1).reshape(-1).
    """
    raise NotImplementedError


def nf4_quantize(x, levels, block):
    """Quantize x blockwise to a 4-bit codebook (NF4): absmax scaling, then the nearest level.

    Each block of `block` consecutive values has absmax = max |x| over the block, stored as
    float32. Each value is divided by its block's absmax (as float64; 1 for an all-zero block)
    and coded as the index of the nearest of the 16 levels. A value exactly halfway between
    two levels takes the lower one.

    Parameters
    ----------
    x : ndarray of float64, shape (n,), n a multiple of block
    levels : ndarray of float64, shape (16,), increasing, in [-1, 1] (NF4's levels)
    block : int

    Returns
    -------
    (codes, absmax) : uint8 of shape (n,), float32 of shape (n // block,)

    Source
    ------
    Dettmers et al. 2023, "QLoRA", section 3, equations (1)-(2); bitsandbytes quantize_4bit.

    Hints
    -----
    The midpoints (levels[1:] + levels[:-1]) / 2 separate the levels; np.searchsorted(mid, v,
    side="left") counts the midpoints below v. Divide by the float32 absmax, not the float64
    one: the stored absmax is what dequantization multiplies by.
    """
    raise NotImplementedError


def bits_per_parameter(block, double_quant, scale_block):
    """Return the storage cost of 4-bit blockwise weights in bits per parameter.

    Without double quantization each block of `block` weights stores one float32 absmax:
    4 + 32 / block. With it, the absmaxes are themselves quantized to 8 bits in blocks of
    `scale_block`, each with a float32 scale: 4 + 8 / block + 32 / (block * scale_block).

    Parameters
    ----------
    block, scale_block : int
    double_quant : bool

    Returns
    -------
    float (QLoRA's defaults, 64 and 256: 4.126953125; 4.5 without double quantization)

    Source
    ------
    Dettmers et al. 2023, "QLoRA", section 3 (double quantization).

    Hints
    -----
    Count the bits each parameter carries of its block's scale, and of the scale's scale.
    """
    raise NotImplementedError
