"""QLoRA storage: blockwise absmax 4-bit codebooks, NF4, double quantization.

QLoRA stores a weight tensor, flattened, in blocks of 64 values. Each block
keeps its absolute maximum (absmax) as an FP32 scale; each value is divided by
it, lands in [-1, 1], and is replaced by the index of the nearest of 16 levels.
The levels are a *codebook*; NF4 is the codebook whose levels are quantiles of
a normal distribution, so each level is used about equally often by normally
distributed weights.

Cost: 4 bits + 32/64 bits of scale = 4.5 bits per parameter. Double
quantization stores the FP32 absmax values themselves in 8 bits, in blocks of
256 with one FP32 scale each, after subtracting their mean (one FP32 for the
tensor): 4 + 8/64 + 32/(64 * 256) = 4.127 bits per parameter.

The QLoRA paper stores the second level as 8-bit floats: bitsandbytes'
*dynamic map* (:func:`dynamic_map`, 256 values spread over seven decades), the
default here (``code="dynamic"``). ``code="int8"`` is a plain symmetric INT8
code instead, easier to read and with a simple error bound (half a step), kept
for comparison: it is ~1.5x more accurate on well-behaved scales but fails on
outlier-heavy tensors, where one huge absmax per 256 sets a step that flattens
every small absmax onto the mean (lecture 07 measures it). ``center=False`` and
``signed=False`` give the variants without the mean offset.

References
----------
Dettmers, Pagnoni, Holtzman, Zettlemoyer, "QLoRA: Efficient Finetuning of
Quantized LLMs" (2023), section 3 and appendix E (NF4 levels); bitsandbytes
``create_normal_map``, ``create_dynamic_map``, ``quantize_blockwise`` and
``quantize_4bit`` (element 2i in the high nibble); Dettmers, "8-Bit Approximations
for Parallelism in Deep Learning", arXiv:1511.04561 (the dynamic data type).
"""

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from numfmt._validate import check_bool, check_fits_storage, check_positive_int

from ..formats import FP4_E2M1
from ._checks import as_float_array, check_ndim
from .nibbles import pack_nibbles, unpack_nibbles

__all__ = [
    "NF4_OFFSET", "nf4_levels", "int4_levels", "fp4_levels", "dynamic_map", "SCALE_CODES",
    "AbsmaxQuantized", "absmax_quantize", "absmax_dequantize",
    "DoubleQuantizedScales", "double_quantize", "double_dequantize",
    "QLoRATensor", "qlora_quantize", "qlora_dequantize", "qlora_bits_per_parameter",
]

#: Top quantile of NF4, 1 - (1/30 + 1/32) / 2: halfway between the edge
#: quantiles of 15 and 16 equal-probability bins (bitsandbytes uses 0.9677083).
NF4_OFFSET = 1.0 - (1.0 / 30 + 1.0 / 32) / 2


def nf4_levels():
    """The 16 NormalFloat-4 levels, ascending, from their definition.

    Eight levels are normal quantiles at probabilities ``linspace(d, 1/2, 9)[:-1]``,
    seven are the negatives of the quantiles at ``linspace(d, 1/2, 8)[:-1]``, plus
    an exact 0; all are divided by the largest, so the codebook spans [-1, 1].
    ``d`` is :data:`NF4_OFFSET`. The asymmetry (8 positive, 7 negative) buys an
    exact zero with 16 codes.

    Returns
    -------
    numpy.ndarray of float64, shape (16,)
        Agrees with the table in QLoRA appendix E to within 2e-7.

    References
    ----------
    QLoRA (2023), section 3 "4-bit NormalFloat"; bitsandbytes ``create_normal_map``.
    """
    quantile = NormalDist().inv_cdf
    positive = [quantile(p) for p in np.linspace(NF4_OFFSET, 0.5, 9)[:-1]]
    negative = [-quantile(p) for p in np.linspace(NF4_OFFSET, 0.5, 8)[:-1]]
    levels = np.sort(np.array(positive + negative + [0.0]))
    return levels / levels[-1]


#: Second-level codes of :func:`double_quantize`.
SCALE_CODES = ("dynamic", "int8")


def dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """bitsandbytes' dynamic 8-bit map: 256 values in [-1, 1], dense near 0, ascending.

    For decade ``i = 0 .. max_exponent_bits - 1`` the values are ``10^(i - max_exponent_bits
    + 1)`` times the midpoints of ``linspace(0.1, 1, 2^(i + total_bits - 1 -
    max_exponent_bits) + 1)`` (twice as many, positive only, if unsigned), each with both
    signs if ``signed``; then 0 and 1. With the defaults: 2 * (1 + 2 + ... + 64) = 254
    values from 10^-6 up, plus 0 and 1.0.

    Returns
    -------
    numpy.ndarray of float32, shape (2**total_bits,)
        Computed in float64 and rounded once to float32. bitsandbytes builds the same table
        with float32 ``torch.linspace``, whose rounding depends on the CPU's vector width:
        the two agree within one float32 ulp per entry (tests/test_packing.py).

    Raises
    ------
    ValueError
        If the parameters do not give exactly ``2**total_bits`` values.

    References
    ----------
    bitsandbytes ``functional.create_dynamic_map`` (the definition followed line by line);
    Dettmers, arXiv:1511.04561, section 3.
    """
    non_sign_bits = total_bits - 1
    additional = 2 ** (non_sign_bits - max_exponent_bits) - 1
    data = []
    i = max_exponent_bits - 1
    for i in range(max_exponent_bits):
        n = 2 ** (i + non_sign_bits - max_exponent_bits + (0 if signed else 1)) + 1
        edges = np.linspace(0.1, 1.0, n)
        data.append(10.0 ** (i - max_exponent_bits + 1) * (edges[:-1] + edges[1:]) / 2)
    if additional > 0:  # as bitsandbytes: the last decade's scale again
        edges = np.linspace(0.1, 1.0, additional + 1)
        data.append(10.0 ** (i - max_exponent_bits + 1) * (edges[:-1] + edges[1:]) / 2)
    v = np.concatenate(data)
    v = np.concatenate([v, -v] if signed else [v])
    v = np.concatenate([v, [0.0, 1.0]])
    if v.size > 2 ** total_bits:
        raise ValueError(f"the dynamic map has {v.size} values, more than 2**{total_bits}")
    v = np.concatenate([v, np.zeros(2 ** total_bits - v.size)])  # bitsandbytes pads with 0
    return np.sort(v).astype(np.float32)


def int4_levels():
    """Symmetric INT4 as a codebook.

    Returns
    -------
    numpy.ndarray of float64, shape (15,)
        k / 7 for k = -7..7: absmax maps to code 7, as in symmetric restricted-range INT4.
    """
    return np.arange(-7, 8) / 7.0


def fp4_levels():
    """FP4 E2M1 as a codebook.

    Returns
    -------
    numpy.ndarray of float64, shape (15,)
        The distinct E2M1 values divided by 6 (the largest), ascending.

    References
    ----------
    OCP Microscaling Formats (MX) v1.0, section 5.3.3.
    """
    return FP4_E2M1.values() / FP4_E2M1.max_value


def _check_levels(levels):
    lv = as_float_array(levels, "levels")
    check_ndim(lv, 1, "levels")
    if not 2 <= lv.size <= 16 or np.any(np.diff(lv) <= 0) or lv[0] < -1 or lv[-1] > 1:
        raise ValueError("levels must be 2 to 16 strictly increasing values in [-1, 1], got "
                         f"{lv.tolist()!r}")
    return lv


def _check_block(block, name="block"):
    return check_positive_int(block, name)


@dataclass(frozen=True)
class AbsmaxQuantized:
    """Blockwise absmax codebook quantization of a flattened tensor.

    Attributes
    ----------
    codes : uint8 (size,)
        Index into ``levels`` of each element, in C order.
    absmax : float32 (n_blocks,)
        max |x| of each block of ``block`` consecutive elements (the last may be short).
    levels : float64 (L,)
    shape : tuple
    block : int
    """

    codes: np.ndarray
    absmax: np.ndarray
    levels: np.ndarray
    shape: tuple
    block: int


def absmax_quantize(x, levels, block=64):
    """Quantize ``x`` blockwise: scale each block by its absmax, pick the nearest level.

    Parameters
    ----------
    x : array_like of float, any shape
        Flattened in C order; a short last block is allowed.
    levels : array_like of float, shape (L,)
        Strictly increasing codebook in [-1, 1], 2 <= L <= 16 (e.g. :func:`nf4_levels`).
    block : int, default 64

    Returns
    -------
    AbsmaxQuantized
        ``absmax`` is rounded to FP32, as stored. Ties between two levels go to
        the lower one. A block of zeros has absmax 0 and decodes to 0 if 0 is a level.

    Raises
    ------
    TypeError
        If ``x`` is not a real array, or ``block`` is not an integer.
    ValueError
        If ``x`` is empty or holds NaN or inf, ``levels`` is not a valid
        codebook, or ``block`` is not positive; or a block's absmax does not fit
        FP32 (above 3.4e38 it would be Inf, below 7e-46 it would flush to 0, and below
        FP32's smallest normal 1.2e-38 it would be a subnormal with fewer bits, unless exact).

    References
    ----------
    QLoRA (2023), equations (1)-(2); bitsandbytes ``quantize_4bit``.
    """
    arr = as_float_array(x)
    if arr.size == 0:
        raise ValueError("x is empty")
    lv = _check_levels(levels)
    block = _check_block(block)
    flat = arr.ravel()
    n_blocks = -(-flat.size // block)
    width = min(block, flat.size)         # a block longer than x holds x alone: pad no further
    padded = np.zeros(n_blocks * width)
    padded[:flat.size] = flat
    blocks = padded.reshape(n_blocks, width)
    ideal = np.abs(blocks).max(axis=1)
    check_fits_storage(ideal, np.float32, "the float32 block absmax",
                       "absmax is stored in FP32: scale x into range first")
    absmax = ideal.astype(np.float32)
    safe = np.where(absmax > 0, absmax.astype(np.float64), 1.0)
    normalized = blocks / safe[:, None]
    midpoints = (lv[1:] + lv[:-1]) / 2
    codes = np.searchsorted(midpoints, normalized, side="left").astype(np.uint8)
    return AbsmaxQuantized(codes.ravel()[:flat.size], absmax, lv, arr.shape, block)


def absmax_dequantize(q, absmax=None):
    """Values of an :class:`AbsmaxQuantized`: ``levels[code] * absmax[block]``.

    Parameters
    ----------
    q : AbsmaxQuantized
    absmax : array_like of float, shape (n_blocks,), optional
        Block scales to use instead of ``q.absmax`` (e.g. double-quantized ones).

    Returns
    -------
    numpy.ndarray of float64, shape ``q.shape``

    Raises
    ------
    TypeError
        If ``q`` is not an AbsmaxQuantized.
    ValueError
        If ``absmax`` has the wrong length.
    """
    if not isinstance(q, AbsmaxQuantized):
        raise TypeError(f"expected an AbsmaxQuantized, got {type(q).__name__}")
    scales = q.absmax if absmax is None else np.asarray(absmax)
    if scales.shape != q.absmax.shape:
        raise ValueError(f"absmax has shape {scales.shape}, expected {q.absmax.shape}")
    block_of = np.arange(q.codes.size) // q.block
    return (q.levels[q.codes] * scales.astype(np.float64)[block_of]).reshape(q.shape)


@dataclass(frozen=True)
class DoubleQuantizedScales:
    """FP32 block scales stored in 8 bits.

    Attributes
    ----------
    codes : int8 (n,) if signed, else uint8 (n,); uint8 indices into ``code_map`` if it is set
    super_scales : float32 (ceil(n / block),)
        Step size of each block of ``block`` codes (INT8), or its absmax (dynamic map).
    offset : float32
        Mean subtracted before quantizing (0 when not centered), one per tensor.
    block : int
    code_map : float32 (256,) or None
        The dynamic map (:func:`dynamic_map`) the codes index; None for INT8 codes.
    """

    codes: np.ndarray
    super_scales: np.ndarray
    offset: np.float32
    block: int
    code_map: np.ndarray = None


def double_quantize(scales, block=256, center=True, signed=True, code="dynamic"):
    """Quantize positive FP32 block scales to 8 bits, blockwise (QLoRA double quantization).

    Per block of ``block`` values v (v = c - mean(c) if ``center``, else v = c):

    * ``code="dynamic"`` (QLoRA, bitsandbytes): a = max |v| (FP32), code = index of the
      value of ``dynamic_map(signed)`` nearest to v / a (ties to the lower index, as the
      argmin of bitsandbytes' reference path); the value is ``map[code] * a``;
    * ``code="int8"``, signed: step = max |v| / 127, code = round(v / step) in [-127, 127];
    * ``code="int8"``, unsigned (only without centering): step = max v / 255, code in [0, 255].

    The INT8 reconstruction ``code * step + mean`` is off by at most half a step; the
    dynamic map's relative resolution is nearly constant over seven decades, so a block
    with one huge value still keeps its small ones. A signed code without centering wastes its negative half on positive scales,
    which doubles the step; subtracting the mean is what makes a symmetric code
    pay off.

    Parameters
    ----------
    scales : array_like of float, shape (n,)
        Non-negative first-level scales (absmax values).
    block : int, default 256
    center : bool, default True
        Subtract the mean (one FP32 per tensor) first, as QLoRA does.
    signed : bool, default True
    code : {"dynamic", "int8"}, default "dynamic"
        The second-level code: QLoRA's 8-bit float map, or symmetric INT8 (the comparison).

    Returns
    -------
    DoubleQuantizedScales
        Steps (absmax for the dynamic map) and offset are FP32.

    Raises
    ------
    TypeError
        If ``scales`` is not a real array, or ``block`` is not an integer.
    ValueError
        If ``scales`` is not a non-empty 1-D array of finite non-negative values,
        ``block`` is not positive, ``center`` is asked of an unsigned code, or
        ``code`` is unknown; or a scale or a block's FP32 step does not fit FP32 (it would be
        Inf, or flush to 0).

    References
    ----------
    QLoRA (2023), section 3 "Double Quantization" (8-bit floats, blocks of 256, mean
    subtracted "to center the values around zero and make use of symmetric quantization");
    bitsandbytes ``quantize_4bit(compress_statistics=True)`` and ``quantize_blockwise``.
    """
    center, signed = check_bool(center, "center"), check_bool(signed, "signed")
    if code not in SCALE_CODES:
        raise ValueError(f"code must be one of {SCALE_CODES}, got {code!r}")
    c = as_float_array(scales, "scales")
    check_ndim(c, 1, "scales")
    if c.size == 0 or np.any(c < 0):
        raise ValueError("scales must be a non-empty array of non-negative values, got "
                         + ("an empty array" if c.size == 0 else f"{float(c[c < 0][0])!r}"))
    block = _check_block(block)
    if center and not signed:
        raise ValueError("centered scales take both signs: center=True needs signed=True")
    check_fits_storage(c, np.float32, "the scale", "double quantization stores FP32 steps "
                       "and offset: pass scales within FP32's range (absmax_quantize's are)")
    offset = np.float32(c.mean()) if center else np.float32(0.0)
    centered = c - np.float64(offset)
    n_blocks = -(-c.size // block)
    width = min(block, c.size)            # a block longer than the scales holds them alone
    padded = np.zeros(n_blocks * width)
    padded[:c.size] = centered
    blocks = padded.reshape(n_blocks, width)
    if code == "dynamic":
        table = dynamic_map(signed)
        ideal = np.abs(blocks).max(axis=1)
        check_fits_storage(ideal, np.float32, "the FP32 absmax max|scale - mean| of a block =",
                           "the scales are too close to their mean for an FP32 absmax")
        amax = ideal.astype(np.float32)
        safe = np.where(amax > 0, amax.astype(np.float64), 1.0)
        t64 = table.astype(np.float64)
        idx = np.searchsorted((t64[1:] + t64[:-1]) / 2, blocks / safe[:, None], side="left")
        return DoubleQuantizedScales(idx.ravel()[:c.size].astype(np.uint8), amax, offset,
                                     block, table)
    qmax = 127 if signed else 255
    ideal = np.abs(blocks).max(axis=1) / qmax
    check_fits_storage(ideal, np.float32, "the FP32 step max|scale| / qmax =",
                       "the scales are too small for FP32 steps")
    step = ideal.astype(np.float32)
    safe = np.where(step > 0, step.astype(np.float64), 1.0)
    codes = np.clip(np.round(blocks / safe[:, None]), -qmax if signed else 0, qmax)
    dtype = np.int8 if signed else np.uint8
    return DoubleQuantizedScales(codes.ravel()[:c.size].astype(dtype), step, offset, block)


def double_dequantize(dq):
    """Reconstructed scales, float64 (n,): ``codes * step[block] + offset``.

    Raises
    ------
    TypeError
        If ``dq`` is not a DoubleQuantizedScales.
    """
    if not isinstance(dq, DoubleQuantizedScales):
        raise TypeError(f"expected a DoubleQuantizedScales, got {type(dq).__name__}")
    block_of = np.arange(dq.codes.size) // dq.block
    if dq.code_map is not None:
        values = dq.code_map.astype(np.float64)[dq.codes]
    else:
        values = dq.codes.astype(np.float64)
    return values * dq.super_scales.astype(np.float64)[block_of] + np.float64(dq.offset)


@dataclass(frozen=True)
class QLoRATensor:
    """A weight tensor in QLoRA storage.

    Attributes
    ----------
    data : uint8 (ceil(size / 2),)
        4-bit codes, two per byte, element 2i in the high nibble (bitsandbytes order).
    absmax : float32 (n_blocks,) or DoubleQuantizedScales
    levels : float64 (16,)
    shape : tuple
    block : int
    """

    data: np.ndarray
    absmax: object
    levels: np.ndarray
    shape: tuple
    block: int

    @property
    def size(self):
        """Number of parameters."""
        return int(np.prod(self.shape))

    @property
    def nbytes(self):
        """Bytes stored: packed codes, scales, and the double-quantization state."""
        if isinstance(self.absmax, DoubleQuantizedScales):
            scale_bytes = self.absmax.codes.nbytes + self.absmax.super_scales.nbytes + 4
        else:
            scale_bytes = self.absmax.nbytes
        return self.data.nbytes + scale_bytes

    @property
    def bits_per_parameter(self):
        """8 * nbytes / size: what storage really costs per weight, in bits."""
        return 8 * self.nbytes / self.size


def qlora_quantize(x, levels=None, block=64, double_quant=True, scale_block=256, center=True,
                   signed=True, code="dynamic"):
    """Quantize a tensor the QLoRA way: NF4 codes in blocks of 64, scales optionally in 8 bits.

    Parameters
    ----------
    x : array_like of float, any shape
    levels : array_like of float, shape (16,), optional
        Codebook; defaults to :func:`nf4_levels`.
    block : int, default 64
    double_quant : bool, default True
    scale_block, center, signed, code
        Passed to :func:`double_quantize`; the defaults are QLoRA's (mean subtracted,
        bitsandbytes' dynamic 8-bit map, blocks of 256).

    Returns
    -------
    QLoRATensor
        An odd element count is padded with the code of 0.0 (NF4 code 7), as bitsandbytes
        pads its normalized data with 0.

    Raises
    ------
    TypeError, ValueError
        As :func:`absmax_quantize` and :func:`double_quantize`.

    References
    ----------
    QLoRA (2023), equation (6) (NF4 with double quantization).
    """
    check_bool(double_quant, "double_quant")
    lv = nf4_levels() if levels is None else levels
    q = absmax_quantize(x, lv, block)
    codes = q.codes
    if codes.size % 2:  # the pad nibble is the code nearest 0.0, as bitsandbytes writes it
        codes = np.append(codes, np.uint8(np.argmin(np.abs(q.levels))))
    data = pack_nibbles(codes, order="high_first")
    absmax = (double_quantize(q.absmax, scale_block, center, signed, code) if double_quant
              else q.absmax)
    return QLoRATensor(data, absmax, q.levels, q.shape, q.block)


def qlora_dequantize(t):
    """Values (float64, ``t.shape``) of a :class:`QLoRATensor`.

    Raises
    ------
    TypeError
        If ``t`` is not a QLoRATensor.
    """
    if not isinstance(t, QLoRATensor):
        raise TypeError(f"expected a QLoRATensor, got {type(t).__name__}")
    codes = unpack_nibbles(t.data, count=t.size, order="high_first")
    if isinstance(t.absmax, DoubleQuantizedScales):
        absmax = double_dequantize(t.absmax)
    else:
        absmax = t.absmax.astype(np.float64)
    block_of = np.arange(t.size) // t.block
    return (t.levels[codes] * absmax[block_of]).reshape(t.shape)


def qlora_bits_per_parameter(block=64, double_quant=True, scale_block=256, code_bits=4):
    """Storage cost in bits per parameter, in the limit of a large tensor.

    Parameters
    ----------
    block : int, default 64
        Weights per FP32 absmax.
    double_quant : bool, default True
    scale_block : int, default 256
        Absmax values per FP32 second-level scale.
    code_bits : int, default 4

    Returns
    -------
    float
        ``code_bits + 32 / block`` without double quantization;
        ``code_bits + 8 / block + 32 / (block * scale_block)`` with it.
        Defaults give 4.126953125 (4.5 without). The per-tensor mean is not counted.

    Raises
    ------
    TypeError
        If ``block`` or ``scale_block`` is not an integer.
    ValueError
        If ``block`` or ``scale_block`` is not positive.
    """
    block = _check_block(block)
    scale_block = _check_block(scale_block, "scale_block")
    if not double_quant:
        return code_bits + 32 / block
    return code_bits + 8 / block + 32 / (block * scale_block)
