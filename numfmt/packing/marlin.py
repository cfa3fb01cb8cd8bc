"""The Marlin 16 x 64 tile layout (INT4 and FP8 W8A16), built from its definition.

Marlin is a GPU kernel for FP16 activations times 4-bit (or 8-bit) weights. It
reads the weight matrix W (K rows = inputs, N columns = outputs) in tiles of
16 rows x 64 columns, stored one after another: tile (kt, nt) is number
``kt * (N/64) + nt``. Inside a tile, 32 threads each own one contiguous 16-byte
slice. That slice holds exactly the values the thread feeds, as operand B, to
tensor-core ``mma.m16n8k16`` instructions, so one vector load serves them all.

Thread t (0..31) of sub-tile j (the 16-column block 0..3 of the tile) needs,
for column c = 16 j + t // 4 and rows r = 2 (t % 4):

    rows r, r+1, r+8, r+9 of column c      (the B fragment of one 16x8 block)
    rows r, r+1, r+8, r+9 of column c + 8  (the B fragment of the next one)

INT4: these 8 codes form one 32-bit word, word ``4 t + j`` of the tile, with
nibble lanes 0..7 holding

    (r, c) (r+8, c) (r, c+8) (r+8, c+8) (r+1, c) (r+9, c) (r+1, c+8) (r+9, c+8)

Lanes i and i+4 are vertical neighbours: one mask 0x000F000F lifts both into
the two FP16 halves of a register, which is the pair the mma instruction takes.

FP8: each value is a byte, so the 8 values fill two words, ``8 t + 2 j`` (column
c) and ``8 t + 2 j + 1`` (column c + 8), bytes 0..3 holding rows r, r+8, r+1, r+9.

The FP8 path also folds a correction into the scale. Marlin turns an E4M3 byte
into FP16 by moving its bits into place instead of converting: sign to bit 15,
exponent and mantissa to bits 13..7. That reads the E4M3 exponent with FP16's
bias (15) instead of E4M3's (7), so every value comes out 2^8 = 256 times too
small. The stored FP16 channel scale is therefore ``256 * amax / 448``.

References
----------
Frantar, Castro, Chen, Hoefler, Alistarh, "MARLIN: Mixed-Precision
Auto-Regressive Parallel Inference on Large Language Models" (2024);
IST-DASLab/marlin and vLLM ``gptq_marlin_repack`` / ``marlin_permute_scales``
(``get_weight_perm``, ``get_scale_perms``); PTX ISA, ``mma.m16n8k16`` fragment layout.
"""

from dataclasses import dataclass

import numpy as np

from numfmt._validate import check_fits_storage, check_int

from ..formats import FP8_E4M3
from ._checks import as_int_array, check_int32, check_ndim, check_range
from .gptq import gptq_unpack_qweight, _pack_words, _unpack_words

__all__ = [
    "TILE_K", "TILE_N", "FP8_E4M3_TO_FP16_SCALE",
    "marlin_int4_tile_map", "marlin_fp8_tile_map",
    "marlin_pack_int4", "marlin_unpack_int4", "gptq_to_marlin", "marlin_int4_location",
    "marlin_permute_scales", "marlin_unpermute_scales",
    "Fp8MarlinWeight", "marlin_fp8_shape_supported", "fp16_from_bytes",
    "marlin_fp8_pack", "marlin_fp8_unpack", "e4m3_bits_as_fp16",
]

TILE_K = 16
TILE_N = 64
#: 2 ** (15 - 7): FP16 exponent bias minus E4M3 exponent bias.
FP8_E4M3_TO_FP16_SCALE = 256.0
_E4M3_MAX = 448.0


def _fragment(t, j):
    """(row, column) in the tile of the 8 values thread t of sub-tile j owns.

    Order: rows r, r+1, r+8, r+9 of column c, then the same rows of column c+8.
    """
    r, c = 2 * (t % 4), 16 * j + t // 4
    rows = [r, r + 1, r + 8, r + 9] * 2
    cols = [c] * 4 + [c + 8] * 4
    return rows, cols


def marlin_int4_tile_map():
    """Where each nibble of a 16 x 64 INT4 Marlin tile comes from.

    Returns
    -------
    rows, cols : numpy.ndarray of int64, shape (128, 8)
        Nibble lane L of word w of the tile holds the tile element
        ``(rows[w, L], cols[w, L])``; ``w = 4 t + j`` for thread t and sub-tile j.
    """
    rows = np.empty((128, 8), np.int64)
    cols = np.empty((128, 8), np.int64)
    lane_order = [0, 2, 4, 6, 1, 3, 5, 7]            # lane L takes fragment value lane_order[L]
    for t in range(32):
        for j in range(4):
            fr, fc = _fragment(t, j)
            rows[4 * t + j] = [fr[s] for s in lane_order]
            cols[4 * t + j] = [fc[s] for s in lane_order]
    return rows, cols


def marlin_fp8_tile_map():
    """Where each byte of a 16 x 64 FP8 Marlin tile comes from.

    Returns
    -------
    rows, cols : numpy.ndarray of int64, shape (1024,)
        Byte b of the tile holds the tile element ``(rows[b], cols[b])``.
    """
    rows = np.empty((256, 4), np.int64)
    cols = np.empty((256, 4), np.int64)
    byte_order = [0, 2, 1, 3]                        # rows r, r+8, r+1, r+9
    for t in range(32):
        for j in range(4):
            fr, fc = _fragment(t, j)
            for h in range(2):
                rows[8 * t + 2 * j + h] = [fr[4 * h + s] for s in byte_order]
                cols[8 * t + 2 * j + h] = [fc[4 * h + s] for s in byte_order]
    return rows.ravel(), cols.ravel()


def _check_tiles(k, n, what):
    if k <= 0 or n <= 0 or k % TILE_K or n % TILE_N:
        raise ValueError(
            f"{what}: shape (K={k}, N={n}) is not supported; Marlin tiles need K a "
            f"multiple of {TILE_K} and N a multiple of {TILE_N}")


def _to_tiles(mat):
    """(K, N) -> (K/16, N/64, 16, 64), tiles in Marlin order."""
    k, n = mat.shape
    return mat.reshape(k // TILE_K, TILE_K, n // TILE_N, TILE_N).transpose(0, 2, 1, 3)


def _from_tiles(tiles):
    """Inverse of :func:`_to_tiles`."""
    kt, nt = tiles.shape[:2]
    return tiles.transpose(0, 2, 1, 3).reshape(kt * TILE_K, nt * TILE_N)


def marlin_pack_int4(codes):
    """Pack 4-bit codes (K, N) into the Marlin INT4 tile layout.

    Parameters
    ----------
    codes : array_like of int, shape (K, N)
        Codes in [0, 15]; K a multiple of 16, N a multiple of 64.

    Returns
    -------
    numpy.ndarray of int32, shape (K/16, 2N)
        Row kt holds the N/64 tiles of rows 16 kt .. 16 kt + 15, 128 words each.
        Same number of bytes as the GPTQ ``qweight`` (K N / 2).

    Raises
    ------
    TypeError
        If ``codes`` is not an integer array.
    ValueError
        If ``codes`` is not 2-D, the shape does not tile, or a code is outside [0, 15].

    References
    ----------
    vLLM ``gptq_marlin_repack`` (bit-identical for inputs without act-order).
    """
    arr = as_int_array(codes)
    check_ndim(arr, 2, "codes")
    _check_tiles(*arr.shape, "marlin_pack_int4")
    check_range(arr, 0, 15)
    rows, cols = marlin_int4_tile_map()
    gathered = _to_tiles(arr)[:, :, rows, cols]                      # (K/16, N/64, 128, 8)
    words = _pack_words(gathered.reshape(gathered.shape[:2] + (1024,)))  # (K/16, N/64, 128)
    return words.reshape(arr.shape[0] // TILE_K, -1)


def marlin_unpack_int4(packed):
    """Inverse of :func:`marlin_pack_int4`: int32 (K/16, 2N) -> uint8 codes (K, N).

    Raises
    ------
    TypeError
        If ``packed`` is not int32.
    ValueError
        If ``packed`` is not 2-D or its width is not a multiple of 128 words (one tile).
    """
    words = check_int32(packed, "packed")
    check_ndim(words, 2, "packed")
    if words.shape[1] % 128 or words.shape[1] == 0 or words.shape[0] == 0:
        raise ValueError(f"packed width {words.shape[1]} is not a positive multiple of "
                         "128 words (one tile)")
    kt, nt = words.shape[0], words.shape[1] // 128
    lanes = _unpack_words(words.reshape(kt, nt, 128)).reshape(kt, nt, 128, 8)
    rows, cols = marlin_int4_tile_map()
    tiles = np.empty((kt, nt, TILE_K, TILE_N), np.uint8)
    tiles[:, :, rows, cols] = lanes
    return _from_tiles(tiles)


def gptq_to_marlin(qweight):
    """Repack a GPTQ ``qweight`` (K/8, N) int32 into Marlin tiles (K/16, 2N) int32.

    Rows are taken in checkpoint order; for act-order checkpoints first apply
    :func:`numfmt.packing.permute_qweight_rows` with :func:`kernel_row_order`.

    Raises
    ------
    TypeError
        If ``qweight`` is not int32.
    ValueError
        If the logical shape (K, N) does not tile into 16 x 64.
    """
    return marlin_pack_int4(gptq_unpack_qweight(qweight))


def marlin_int4_location(k, n, size_n):
    """Where the logical INT4 element (k, n) lands in the Marlin array.

    Parameters
    ----------
    k, n : int or array_like of int
        Logical row (input) and column (output).
    size_n : int
        N, the number of columns; a multiple of 64.

    Returns
    -------
    row, word, lane : numpy.ndarray of int64
        ``packed[row, word] >> (4 * lane) & 0xF`` is the code of (k, n).

    Raises
    ------
    TypeError
        If ``size_n`` is not an integer or ``k``, ``n`` are not integer arrays.
    ValueError
        If ``size_n`` is not a positive multiple of 64 or an index is negative
        or n >= size_n.
    """
    size_n = check_int(size_n, "size_n")
    k, n = as_int_array(k, "k"), as_int_array(n, "n")
    if size_n <= 0 or size_n % TILE_N:
        raise ValueError(f"size_n = {size_n} must be a positive multiple of {TILE_N}")
    if np.any(k < 0) or np.any(n < 0) or np.any(n >= size_n):
        raise ValueError("indices must satisfy k >= 0 and 0 <= n < size_n")
    rows, cols = marlin_int4_tile_map()
    where = np.empty((TILE_K, TILE_N, 2), np.int64)
    where[rows, cols, 0] = np.arange(128)[:, None]
    where[rows, cols, 1] = np.arange(8)[None, :]
    local = where[k % TILE_K, n % TILE_N]
    word = (n // TILE_N) * 128 + local[..., 0]
    return k // TILE_K, word, local[..., 1]


def _scale_perm(groups):
    if groups > 1:
        return np.array([i + 8 * j for i in range(8) for j in range(8)])
    return np.array([2 * i + c for i in range(4) for c in (0, 1, 8, 9, 16, 17, 24, 25)])


def _check_scales(scales):
    s = np.asarray(scales)
    if not np.issubdtype(s.dtype, np.floating):
        raise TypeError(f"scales must be a floating-point array, got dtype {s.dtype}")
    check_ndim(s, 2, "scales")
    if s.shape[0] == 0 or s.shape[1] == 0 or s.shape[1] % TILE_N:
        raise ValueError(f"scales shape {s.shape}: N must be a positive multiple of {TILE_N}")
    return s


def marlin_permute_scales(scales):
    """Reorder scales (G, N) into the order Marlin's threads read them.

    With one group (channel-wise) every chunk of 32 scales is reordered by
    ``[2i + c for i in 0..3 for c in (0, 1, 8, 9, 16, 17, 24, 25)]``; with
    several groups every chunk of 64 by ``[i + 8j for i in 0..7 for j in 0..7]``
    (a transpose of 8 x 8). Chunks run over the row-major flattened array.

    Parameters
    ----------
    scales : numpy.ndarray of float, shape (G, N)
        G groups (1 for channel-wise); N a multiple of 64.

    Returns
    -------
    numpy.ndarray, shape (G, N), same dtype as ``scales``

    Raises
    ------
    TypeError
        If ``scales`` is not a floating-point array.
    ValueError
        If ``scales`` is not 2-D or N is not a positive multiple of 64.

    References
    ----------
    vLLM ``marlin_permute_scales`` / ``get_scale_perms``.
    """
    s = _check_scales(scales)
    perm = _scale_perm(s.shape[0])
    return s.reshape(-1, len(perm))[:, perm].reshape(s.shape)


def marlin_unpermute_scales(scales):
    """Inverse of :func:`marlin_permute_scales`.

    Parameters
    ----------
    scales : numpy.ndarray of float, shape (G, N)
        Scales in Marlin's order.

    Returns
    -------
    numpy.ndarray, shape (G, N), same dtype
        Scales in logical (row-major group x column) order.

    Raises
    ------
    TypeError, ValueError
        As :func:`marlin_permute_scales`.
    """
    s = _check_scales(scales)
    perm = _scale_perm(s.shape[0])
    out = np.empty_like(s).reshape(-1, len(perm))
    out[:, perm] = s.reshape(-1, len(perm))
    return out.reshape(s.shape)


# --------------------------------------------------------------------------- FP8 W8A16


@dataclass(frozen=True)
class Fp8MarlinWeight:
    """Marlin FP8 (E4M3) weight storage for a logical (N, K) matrix.

    Attributes
    ----------
    packed : uint8 (K/16, 16 N)
        E4M3 bytes in tile order; row kt holds the N/64 tiles of inputs 16 kt .. 16 kt + 15.
    scales : float16 (1, N)
        Per-output-channel scales times 256, in Marlin's permuted order.
    """

    packed: np.ndarray
    scales: np.ndarray

    @property
    def nbytes(self):
        """Bytes stored: one per weight plus two per output channel."""
        return self.packed.nbytes + self.scales.nbytes


def marlin_fp8_shape_supported(n, k):
    """Whether an (N, K) matrix fits Marlin W8A16 without padding.

    Parameters
    ----------
    n, k : int
        Output channels N and inputs K.

    Returns
    -------
    bool
        True when N and K are positive and either (N % 64 == 0 and K % 128 == 0)
        or (N % 128 == 0 and K % 64 == 0): the kernel's thread-tile configurations.
    """
    return n > 0 and k > 0 and ((n % 64 == 0 and k % 128 == 0) or (n % 128 == 0 and k % 64 == 0))


def fp16_from_bytes(source, n, k):
    """Read an (N, K) FP16 matrix from little-endian bytes, checking the length.

    Parameters
    ----------
    source : bytes, bytearray, memoryview or uint8 array
        2 N K bytes, row-major, little-endian (as in a safetensors file).
    n, k : int

    Returns
    -------
    numpy.ndarray of float16, shape (N, K)

    Raises
    ------
    TypeError
        If ``source`` is neither bytes-like nor a uint8 array.
    ValueError
        If ``source`` does not hold exactly 2 N K bytes.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        buf = np.frombuffer(source, np.uint8)
    else:
        buf = np.asarray(source)
        if buf.dtype != np.uint8:
            raise TypeError(f"source must be bytes or a uint8 array, got dtype {buf.dtype}")
        buf = buf.ravel()
    expected = 2 * n * k
    if buf.size != expected:
        raise ValueError(f"FP16 source has {buf.size} bytes, expected {expected} "
                         f"for (N={n}, K={k})")
    return buf.view("<f2").reshape(n, k).astype(np.float16)


def marlin_fp8_pack(weight):
    """Quantize an (N, K) weight to E4M3 per output channel in the Marlin FP8 layout.

    Symmetric, channel-wise: scale_n = max_k |W[n, k]| / 448, code = E4M3(W / scale_n)
    rounded to nearest even. A channel of zeros gets scale 0 and codes 0.

    Parameters
    ----------
    weight : numpy.ndarray of float16, float32 or float64, shape (N, K)
        N outputs x K inputs (``torch.nn.Linear`` layout); use
        :func:`fp16_from_bytes` for raw checkpoint bytes.

    Returns
    -------
    Fp8MarlinWeight
        ``packed`` uint8 (K/16, 16 N); ``scales`` float16 (1, N) = 256 scale_n, permuted.

    Raises
    ------
    TypeError
        If ``weight`` is not a float16/32/64 array.
    ValueError
        If ``weight`` is not 2-D, the shape is not supported
        (:func:`marlin_fp8_shape_supported`), or it holds NaN or inf (the message
        names the first such [n, k]); or a row's float16 scale ``256 * amax / 448`` would
        overflow (above 65504), flush to 0 (below 2**-25) or lose precision as a float16
        subnormal (below 2**-14, unless exact): refused, not stored as Inf, 0 or a rounded scale.

    References
    ----------
    vLLM ``fp8_marlin`` weight preparation (``pack_fp8_to_int32``,
    ``marlin_permute_scales``, ``fp8_fused_exponent_bias_into_scales``).
    """
    w = np.asarray(weight)
    if w.dtype.kind == "f" and w.dtype.itemsize <= 8 and not w.dtype.isnative:
        w = w.astype(w.dtype.newbyteorder("="))            # big-endian: the same values
    if w.dtype not in (np.float16, np.float32, np.float64):
        raise TypeError(f"weight must be float16, float32 or float64, got dtype {w.dtype}")
    check_ndim(w, 2, "weight")
    n, k = w.shape
    if not marlin_fp8_shape_supported(n, k):
        raise ValueError(
            f"Marlin W8A16 shape (N={n}, K={k}) is not supported: need N % 64 == 0 and "
            "K % 128 == 0, or N % 128 == 0 and K % 64 == 0")
    w = w.astype(np.float64)
    bad = ~np.isfinite(w)
    if bad.any():
        on, ik = np.argwhere(bad)[0]
        raise ValueError(f"weight contains a non-finite value at [n={on}, k={ik}]")
    scale = np.abs(w).max(axis=1) / _E4M3_MAX                          # (N,)
    safe = np.where(scale > 0, scale, 1.0)
    codes = FP8_E4M3.encode(w / safe[:, None], saturate=True).astype(np.uint8)  # (N, K)
    rows, cols = marlin_fp8_tile_map()
    tiles = _to_tiles(np.ascontiguousarray(codes.T))[:, :, rows, cols]     # (K/16, N/64, 1024)
    packed = np.ascontiguousarray(tiles.reshape(k // TILE_K, -1))
    check_fits_storage(scale * FP8_E4M3_TO_FP16_SCALE, np.float16,
                       "the float16 row scale 256 * amax / 448 =",
                       "Marlin FP8 stores scales in float16: scale the weight into range first")
    scales = marlin_permute_scales((scale * FP8_E4M3_TO_FP16_SCALE).astype(np.float16)[None, :])
    return Fp8MarlinWeight(packed, scales)


def marlin_fp8_unpack(fw):
    """Codes and true scales of an :class:`Fp8MarlinWeight`.

    Returns
    -------
    codes : numpy.ndarray of uint8, shape (N, K)
        E4M3 bit patterns.
    scales : numpy.ndarray of float64, shape (N,)
        Channel scales with the factor 256 taken back out.

    Raises
    ------
    TypeError
        If ``fw`` is not an Fp8MarlinWeight or ``packed`` is not uint8.
    ValueError
        If ``packed`` is not (K/16, 16 N) for a supported shape, or ``scales`` is not (1, N).
    """
    if not isinstance(fw, Fp8MarlinWeight):
        raise TypeError(f"expected an Fp8MarlinWeight, got {type(fw).__name__}")
    packed = np.asarray(fw.packed)
    if packed.dtype != np.uint8:
        raise TypeError(f"packed must be uint8 (E4M3 bytes), got dtype {packed.dtype}")
    check_ndim(packed, 2, "packed")
    kt, width = packed.shape
    if kt == 0 or width == 0 or width % 1024:
        raise ValueError(f"packed must be (K/16, 16 N) with N a positive multiple of 64, got "
                         f"shape {packed.shape}")
    nt = width // 1024
    n = nt * TILE_N
    scales_shape = np.shape(fw.scales)
    if scales_shape != (1, n):
        raise ValueError(f"scales must have shape (1, N) = (1, {n}) for packed of shape "
                         f"{packed.shape}, got {scales_shape}")
    if not marlin_fp8_shape_supported(n, kt * TILE_K):
        raise ValueError(f"packed holds an (N={n}, K={kt * TILE_K}) weight, a shape Marlin "
                         "W8A16 does not support (see marlin_fp8_shape_supported)")
    rows, cols = marlin_fp8_tile_map()
    tiles = np.empty((kt, nt, TILE_K, TILE_N), np.uint8)
    tiles[:, :, rows, cols] = packed.reshape(kt, nt, 1024)
    codes = _from_tiles(tiles).T
    scales = marlin_unpermute_scales(fw.scales)[0].astype(np.float64) / FP8_E4M3_TO_FP16_SCALE
    return np.ascontiguousarray(codes), scales


def e4m3_bits_as_fp16(codes):
    """Reinterpret E4M3 bytes as FP16 the way Marlin does, without conversion.

    FP16 bits = (sign << 15) | (exponent-and-mantissa << 7). The result equals
    the E4M3 value divided by 256 for every finite code (normals and subnormals),
    because FP16's exponent bias is 8 larger and its subnormals line up. The two NaN codes
    (0x7F, 0xFF) come back as FP16 NaN: the bit shift alone would read them as +-1.875, a
    finite number (Marlin's kernel does; ``marlin_fp8_pack`` never stores them).

    Parameters
    ----------
    codes : array_like of uint8
        E4M3 bit patterns.

    Returns
    -------
    numpy.ndarray of float16, same shape; NaN where the code is E4M3's NaN

    Raises
    ------
    TypeError
        If ``codes`` is not a uint8 array.
    """
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise TypeError(f"codes must be uint8, got dtype {c.dtype}")
    c = c.astype(np.uint16)
    bits = ((c & 0x80) << 8) | ((c & 0x7F) << 7)
    bits = np.where((c & 0x7F) == 0x7F, (c & 0x80) << 8 | 0x7E00, bits)   # E4M3 NaN: FP16 NaN
    return bits.astype(np.uint16).view(np.float16)
