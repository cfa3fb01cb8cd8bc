"""
Lecture 07: how quantized weights are stored.

The question
    "A 4-bit model" suggests half a byte per weight, in the order of the matrix. Neither is
    true. Every block of weights carries a scale, sometimes a zero point, sometimes a scale
    for the scales; and a GPU kernel wants the bytes shuffled into the order its threads read
    them. This lecture opens the files:

      Demo 1  The bytes: two 4-bit codes per byte, an MXFP4 block and an NVFP4 block in hex,
              the bits per weight each storage format really pays, metadata included, and
              the two symmetric INT4 grids: 15 codes, or GPTQ checkpoints' 16.
      Demo 2  INT4, FP4 and NF4 on normally distributed weights, at the same 4.5 bits per
              weight: which 16 levels waste the least?
      Demo 3  QLoRA's double quantization: store the scales themselves in 8 bits. How many
              bits per weight does it save, and how much error does it add?
      Demo 4  Why kernels want permuted layouts: GPTQ's act-order rows, Marlin's 16 x 64
              tiles, and the FP8 scale that hides an exponent-bias correction.

How to read the output
    Every number is computed when the script runs, from a 1024 x 1024 matrix of Gaussian
    weights (standard deviation 0.02, fixed seed), so the output is the same on every run.
    Bytes are shown in hex, lowest address first. Errors are relative errors ||q - w|| / ||w||
    in percent; SQNR is in dB. "What to notice" closes each demo.

Run
    python lectures/07_weight_storage.py      (about 2 s on a 2-core machine)
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

from console import (OBSERVATIONS_WIDTH, display_width, lecture_parser, print_header,
                     print_observations, print_table, print_title, run_lecture)
from console.i18n import N_
from lectures.i18n import domain
from numfmt import E8M0, FP4_E2M1, FP8_E4M3, FP16, mx_quantize, nvfp4_quantize, rel_error, sqnr_db
from numfmt.ptq import rtn
from numfmt.packing import (
    absmax_dequantize, absmax_quantize, act_order_permutation, double_dequantize,
    e4m3_bits_as_fp16, fp4_levels, gptq_dequantize, gptq_pack_qweight, gptq_quantize,
    gptq_to_marlin, gptq_unpack_qweight, int4_levels, kernel_row_order, marlin_fp8_pack,
    marlin_fp8_unpack, marlin_int4_location, marlin_int4_tile_map, marlin_unpack_int4, nf4_levels,
    pack_block_fp4, pack_fp4, pack_int4, pack_uint4, permute_qweight_rows,
    qlora_bits_per_parameter, qlora_dequantize, qlora_quantize,
)

_ = domain("lecture07").gettext

SHAPE = (1024, 1024)       # (K, N): inputs x outputs, the GPTQ orientation
STD = 0.02                 # a typical initialisation scale for a transformer weight


def gaussian_weights(shape=SHAPE, seed: int = 0) -> np.ndarray:
    """The lecture's weight matrix: float64 of ``shape``, N(0, 0.02^2), fixed seed."""
    return np.random.default_rng(seed).standard_normal(shape) * STD


def hex_bytes(data) -> str:
    """Bytes as two-digit upper-case hex, space separated, lowest address first."""
    return " ".join(f"{b:02X}" for b in np.asarray(data, np.uint8).ravel())


# ---------------------------------------------------------------------------------------------
# Demo 1: the bytes
# ---------------------------------------------------------------------------------------------
@dataclass
class BytesResult:
    nibble_rows: list       # [what, values, bytes in hex]
    mx: dict                # MXFP4 block 0: values, element bytes, scale byte, scale, first decode
    nv: dict                # NVFP4 block 0: as mx plus the tensor scale bytes and value
    cost_rows: list         # [format, layout, element bytes, other bytes, bits per weight]
    bits: dict              # format -> bits per weight actually paid
    split: dict             # format -> (bits per weight in elements, bits per weight in the rest)
    gptq_word: int = 0      # the int32 word of nibble_rows' last row, as an unsigned number
    grids: dict = None      # GPTQ_GRIDS key -> codes used, step / amax, rel error, SQNR, top / amax
    grid_gain_db: tuple = ()  # SQNR of "full" minus "restricted", for seeds 0, 1, 2 (dB)
    qzeros_word: int = 0    # the stored GPTQ file's first qzeros word, as an unsigned number


GPTQ_WORD_ROW = N_("GPTQ int32 word, 8 codes down a column")
# TRANSLATORS: a 32-bit word's bytes in hex, then the word as one number.
GPTQ_WORD_CELL = N_("{bytes} (word 0x{word:08X})")


def _block_dump(packed, bq, block: int) -> dict:
    """Row 0, block 0 of a packed FP4 tensor: its bytes and how the first byte decodes."""
    first = int(packed.elements[0, 0])
    low = first & 0xF
    scale = float(bq.scales[0, 0])
    return {
        "values": bq.values[0, :block].tolist(),
        "element_bytes": hex_bytes(packed.elements[0, :block // 2]),
        "scale_byte": f"{int(packed.scales[0, 0]):02X}",
        "scale": scale,
        "first_byte": f"{first:02X}",
        "first_code": f"{low:X}",
        "first_element": float(FP4_E2M1.decode(np.array([low], np.uint8))[0]),
        "first_value": float(bq.values[0, 0]),
        "tensor_scale": bq.tensor_scale,
        "tensor_scale_bytes": hex_bytes(np.frombuffer(packed.tensor_scale, np.uint8)),
        "block_bytes": block // 2 + 1,
    }


def demo1_bytes(seed: int = 0) -> BytesResult:
    """Hex dumps of packed 4-bit data, then the storage bill of one 1024 x 1024 weight.

    What to notice: element 0 goes in the low nibble (0xF2 holds 1.0 then -6.0). A block
    of FP4 elements is useless without its scale byte, and NVFP4 needs a third number, an
    FP32 for the whole tensor. The bill always exceeds 4 bits per weight: what differs is
    how much metadata each format carries, and at what granularity.
    """
    gptq_word = gptq_pack_qweight(np.arange(1, 9).reshape(8, 1))
    word = int(gptq_word.view(np.uint32)[0, 0])
    nibble_rows = [
        [N_("int4, low nibble first"), "1 -2 3 -4 5 -6 7 -8",
         hex_bytes(pack_int4([1, -2, 3, -4, 5, -6, 7, -8]))],
        [N_("uint4, low nibble first"), "3 12 0 15", hex_bytes(pack_uint4([3, 12, 0, 15]))],
        [N_("uint4, high nibble first (bitsandbytes)"), "3 12 0 15",
         hex_bytes(pack_uint4([3, 12, 0, 15], order="high_first"))],
        [N_("FP4 E2M1, low nibble first"), "1.0 -6.0 0.5 3.0",
         hex_bytes(pack_fp4([1.0, -6.0, 0.5, 3.0]))],
        [GPTQ_WORD_ROW, "1 2 3 4 5 6 7 8",
         GPTQ_WORD_CELL.format(bytes=hex_bytes(gptq_word.view(np.uint8)), word=word)],
    ]

    w = gaussian_weights(seed=seed)                                     # (K, N)
    k, n = w.shape
    mxq, nvq = mx_quantize(w, FP4_E2M1), nvfp4_quantize(w)
    mxp, nvp = pack_block_fp4(mxq, "mxfp4"), pack_block_fp4(nvq, "nvfp4")
    gptq = gptq_quantize(w, group_size=128, symmetric=True)             # as GPTQ checkpoints
    q1 = qlora_quantize(w, double_quant=False)
    q2 = qlora_quantize(w)
    fp8 = marlin_fp8_pack(w.T.astype(np.float16))                        # Marlin wants (N, K)
    fp16_bytes = w.astype(np.float16).nbytes
    # The names are the keys of ``bits`` and ``split``; names and layouts are translated
    # where they are printed.
    entries = [
        ("FP16", N_("2 bytes per weight"), fp16_bytes, 0),
        (N_("FP8 E4M3, Marlin W8A16"), N_("per-channel FP16 scale"), fp8.packed.nbytes,
         fp8.scales.nbytes),
        (N_("GPTQ INT4, groups of 128"),
         N_("FP16 scale + 4-bit zero per group, int32 g_idx per row (RTN codes)"),
         gptq.qweight.nbytes, gptq.nbytes - gptq.qweight.nbytes),
        ("MXFP4", N_("E8M0 scale per 32"), mxp.elements.nbytes, mxp.nbytes - mxp.elements.nbytes),
        ("NVFP4", N_("E4M3 scale per 16 + FP32 per tensor"), nvp.elements.nbytes,
         nvp.nbytes - nvp.elements.nbytes),
        (N_("NF4 (QLoRA)"), N_("FP32 absmax per 64"), q1.data.nbytes, q1.nbytes - q1.data.nbytes),
        (N_("NF4 + double quantization"), N_("8-bit absmax per 64, FP32 per 256 absmax"),
         q2.data.nbytes, q2.nbytes - q2.data.nbytes),
    ]
    bits = {name: 8 * (e + o) / w.size for name, _, e, o in entries}
    split = {name: (8 * e / w.size, 8 * o / w.size) for name, _, e, o in entries}
    cost_rows = [[name, layout, f"{e:,}", f"{o:,}", f"{bits[name]:.4f}"]
                 for name, layout, e, o in entries]
    grids = gptq_grids(w)
    per_seed = [grids if s == seed else gptq_grids(gaussian_weights(seed=s), symmetric_only=True)
                for s in range(3)]
    gain = tuple(g["full"]["sqnr"] - g["restricted"]["sqnr"] for g in per_seed)
    return BytesResult(nibble_rows, _block_dump(mxp, mxq, 32), _block_dump(nvp, nvq, 16),
                       cost_rows, bits, split, word, grids, gain,
                       int(gptq.qzeros.view(np.uint32)[0, 0]))


GPTQ_GRIDS = (  # key, symmetric, numfmt.ptq's symmetric_grid, label (translated where printed)
    ("restricted", True, "restricted", N_("symmetric -7..7, step amax / 7")),
    ("full", True, "full", N_("symmetric -8..7, step 2 amax / 15 (GPTQ)")),
    ("asymmetric", False, "restricted", N_("asymmetric 0..15 + zero point")),
)


def gptq_grids(w: np.ndarray, group: int = 128, symmetric_only: bool = False) -> dict:
    """Round to nearest of ``w`` (K, N) in groups of ``group`` rows on each GPTQ_GRIDS grid.

    Returns, per grid key: the number of distinct codes used, the step relative to the
    group's amax (mean over groups), the relative error (fraction), the SQNR (dB), and for
    the symmetric grids the largest and smallest level relative to amax (mean over groups).
    ``symmetric_only``: leave the asymmetric grid out.
    """
    out = {}
    for key, symmetric, grid, _label in GPTQ_GRIDS:
        if symmetric_only and not symmetric:
            continue
        r = rtn(w.T, 4, group, symmetric, symmetric_grid=grid)          # (N, K): groups on K
        amax = np.abs(w.T).reshape(w.shape[1], -1, group).max(axis=2)   # (N, G)
        out[key] = {"codes": int(np.unique(r.codes).size),
                    "step": float(np.mean(r.scales / amax)),
                    "rel_error": rel_error(r.weight.T, w), "sqnr": sqnr_db(r.weight.T, w)}
        if symmetric:
            qmin, qmax = (-8, 7) if grid == "full" else (-7, 7)
            out[key]["top"] = float(np.mean(qmax * r.scales / amax))
            out[key]["bottom"] = float(np.mean(qmin * r.scales / amax))
    return out


def _bits(v: float) -> str:
    """Bits per weight to four decimals without trailing zeros: 4.25, 4.1875, 4.5."""
    return f"{v:.4f}".rstrip("0").rstrip(".")


def _nibble_cells(r: BytesResult) -> list:
    """Demo 1's packing table in the current language."""
    rows = []
    for what, values, cell in r.nibble_rows:
        if what == GPTQ_WORD_ROW:
            word_bytes = np.array([r.gptq_word], "<u4").view(np.uint8)
            cell = _(GPTQ_WORD_CELL).format(bytes=hex_bytes(word_bytes), word=r.gptq_word)
        rows.append([_(what), values, cell])
    return rows


def show_demo1(r: BytesResult) -> None:
    print_header(_("Demo 1: the bytes: packed nibbles, one MXFP4 and one NVFP4 block, the bill"))
    print_table([_("packing"), _("values"), _("bytes (hex)")], _nibble_cells(r))
    mx, nv = r.mx, r.nv
    print("\n" + _("MXFP4, row 0, block 0 (32 weights):"))
    # TRANSLATORS: "elements", "scale" and "tensor" are padded with spaces so that the hex
    # bytes after them start in one column.
    print("  " + _("elements {bytes}").format(bytes=mx["element_bytes"]))
    print("  " + _("scale    {byte} (E8M0) = 2^{exp}").format(
        byte=mx["scale_byte"], exp=int(np.log2(mx["scale"]))))
    print("  " + _("first byte {byte}: low nibble {code} = E2M1 {element:g}, times the scale = "
                   "{value:.6f}").format(byte=mx["first_byte"], code=mx["first_code"],
                                         element=mx["first_element"], value=mx["first_value"]))
    print(_("NVFP4, row 0, block 0 (16 weights):"))
    print("  " + _("elements {bytes}").format(bytes=nv["element_bytes"]))
    print("  " + _("scale    {byte} (E4M3) = {scale:g}").format(byte=nv["scale_byte"],
                                                              scale=nv["scale"]))
    print("  " + _("tensor   {bytes} (FP32, little-endian) = {scale:.6e}").format(
        bytes=nv["tensor_scale_bytes"], scale=nv["tensor_scale"]))
    print("  " + _("first byte {byte}: low nibble {code} = E2M1 {element:g}, times both scales = "
                   "{value:.6f}").format(byte=nv["first_byte"], code=nv["first_code"],
                                         element=nv["first_element"], value=nv["first_value"]))
    print("\n" + _("The bill for one {rows} x {cols} weight matrix, in bytes:").format(
        rows=SHAPE[0], cols=SHAPE[1]))
    print_table([_("format"), _("element bytes"), _("other bytes"), _("bits/weight")],
                [[_(name), e, o, bits] for name, _layout, e, o, bits in r.cost_rows])
    print("\n" + _("How each format is laid out (what the other bytes hold):"))
    print_table([_("format"), _("layout")],
                [[_(name), _(layout)] for name, layout, *_rest in r.cost_rows])
    print("\n" + _("GPTQ's INT4 grids, round to nearest in groups of 128 (amax: the group's "
                   "largest |w|):"))
    g = r.grids
    print_table([_("grid"), _("codes used"), _("step / amax"), _("rel. error (%)"), "SQNR (dB)"],
                [[_(label), g[key]["codes"], f"{g[key]['step']:.4f}",
                  f"{g[key]['rel_error'] * 100:.2f}", f"{g[key]['sqnr']:.2f}"]
                 for key, _sym, _grid, label in GPTQ_GRIDS])
    b = r.bits
    print_observations([
        _("No 4-bit format costs 4 bits. MXFP4 pays {mxfp4} bits per weight, NVFP4 {nvfp4}, "
          "GPTQ with groups of 128 {gptq}, QLoRA's NF4 {nf4}.").format(
            mxfp4=_bits(b["MXFP4"]), nvfp4=_bits(b["NVFP4"]),
            gptq=_bits(b["GPTQ INT4, groups of 128"]), nf4=_bits(b["NF4 (QLoRA)"])),
        _("An MXFP4 block is {mx_bytes} bytes for 32 weights; an NVFP4 block is {nv_bytes} bytes "
          "for 16. NVFP4 pays twice as often for a scale, and its scale has {e4m3} mantissa bits "
          "instead of {e8m0}.").format(mx_bytes=r.mx["block_bytes"], nv_bytes=r.nv["block_bytes"],
                                       e4m3=FP8_E4M3.man_bits, e8m0=E8M0.man_bits),
        _("GPTQ also stores g_idx, one int32 per input row: {bits:.4f} bits per weight here. "
          "Without act-order (demo 4) it is just k // 128 and carries no information.").format(
            bits=32 / SHAPE[1]),
        _("Two symmetric INT4 grids exist. The restricted one keeps codes -7..7, symmetric "
          "about zero, with step amax / 7. GPTQ's checkpoints use all 16 codes: step 2 amax / "
          "15 and zero point 8 (the GPTQ authors' quant.py and AutoGPTQ with sym=True; Marlin "
          "reads these codes as uint4b8, unsigned with a bias of 8). The step is {ratio:.4f} "
          "of the restricted one, so the error falls from {restricted:.2f}% to {full:.2f}%, "
          "{gain:.2f} dB (seeds 0-2: {gain_lo:.2f} to {gain_hi:.2f} dB). The price is symmetry: "
          "the levels run from {bottom:.4f} amax to {top:.4f} amax, so where a group's largest "
          "|w| is a positive weight, it is stored as {top:.4f} of itself.").format(
            ratio=g["full"]["step"] / g["restricted"]["step"],
            restricted=g["restricted"]["rel_error"] * 100, full=g["full"]["rel_error"] * 100,
            gain=r.grid_gain_db[0], gain_lo=min(r.grid_gain_db), gain_hi=max(r.grid_gain_db),
            bottom=g["full"]["bottom"], top=g["full"]["top"]),
        _("In the stored layout the grid shows only in the zero points: here every one is 8, "
          "so each qzeros word reads 0x{word:08X}. Asymmetric min-max with a zero "
          "point per group ({asym:.2f}%) has a step (max - min) / 15, never larger than "
          "2 amax / 15.").format(word=r.qzeros_word, asym=g["asymmetric"]["rel_error"] * 100),
        _("GPTQ is an algorithm as well as this layout (Frantar et al. 2023): it quantizes one "
          "input row at a time and moves that row's rounding error onto the rows not yet "
          "quantized, weighted by the inverse Hessian 2XX^T of the layer's inputs, so the "
          "output error shrinks while the weight error grows. The GPTQ codes in this lecture "
          "come from round-to-nearest, RTN (numfmt.packing.gptq says so); the algorithm arrives "
          "with numfmt.ptq."),
        _("Two nibble orders exist. OCP MX and torch's float4_e2m1fn_x2 put element 0 in the low "
          "nibble; bitsandbytes puts it in the high nibble. Reading one with the other's rule "
          "swaps every pair of weights and raises no error."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: INT4, FP4 and NF4 codebooks on normally distributed weights
# ---------------------------------------------------------------------------------------------
CODEBOOKS = {"INT4": int4_levels, "FP4 E2M1": fp4_levels, "NF4": nf4_levels}
BLOCK = 64


@dataclass
class CodebookResult:
    rows: list              # [format, levels, bits/weight, rel error %, SQNR dB, code entropy]
    errors: dict            # format -> rel error (fraction)
    sqnr: dict              # format -> SQNR (dB)
    entropy: dict           # format -> entropy of the code histogram (bits)
    levels: dict            # format -> levels (float64 array in [-1, 1])
    usage: dict             # format -> fraction of weights on each level
    normalized_sample: np.ndarray   # w / absmax for the first 8192 weights


def code_entropy(codes: np.ndarray, n_levels: int) -> float:
    """Shannon entropy in bits of the code histogram: the information a code really carries."""
    p = np.bincount(codes.ravel(), minlength=n_levels) / codes.size
    p = p[p > 0]
    return float(-(p * np.log2(p)).sum())


def codebook_quantize(w: np.ndarray, fmt: str, block: int = BLOCK):
    """Dequantized weights and codes of ``w`` with blockwise absmax and the named codebook."""
    q = absmax_quantize(w, CODEBOOKS[fmt](), block)
    return absmax_dequantize(q), q


def demo2_codebooks(seed: int = 0) -> CodebookResult:
    """Three sets of 16 levels, one FP32 absmax per 64 weights: 4.5 bits per weight each.

    What to notice: after dividing by the block's absmax, Gaussian weights pile up near 0.
    INT4 spaces its levels evenly, so its outer levels are rarely used. FP4 puts more levels
    near 0. NF4 puts each level at a quantile of the normal distribution, so every level is
    used about equally often: the codes carry the most information, and the error is lowest.
    """
    w = gaussian_weights(seed=seed)
    rows, errors, sqnr, entropy, levels, usage = [], {}, {}, {}, {}, {}
    normalized = None
    for fmt in CODEBOOKS:
        deq, q = codebook_quantize(w, fmt)
        lv = q.levels
        errors[fmt], sqnr[fmt] = rel_error(deq, w), sqnr_db(deq, w)
        entropy[fmt] = code_entropy(q.codes, lv.size)
        levels[fmt] = lv
        usage[fmt] = np.bincount(q.codes, minlength=lv.size) / q.codes.size
        rows.append([fmt, lv.size, f"{qlora_bits_per_parameter(BLOCK, double_quant=False):.2f}",
                     f"{errors[fmt] * 100:.2f}", f"{sqnr[fmt]:.2f}", f"{entropy[fmt]:.3f}"])
        if normalized is None:
            scale = np.repeat(q.absmax.astype(np.float64), BLOCK)[:8192]
            normalized = w.ravel()[:8192] / scale
    for name, bq in ((N_("MXFP4 (for reference)"), mx_quantize(w, FP4_E2M1)),
                     (N_("NVFP4 (for reference)"), nvfp4_quantize(w))):
        errors[name], sqnr[name] = rel_error(bq.values, w), sqnr_db(bq.values, w)
        rows.append([name, FP4_E2M1.values().size, f"{bq.bits_per_element:.2f}",
                     f"{errors[name] * 100:.2f}", f"{sqnr[name]:.2f}", "-"])
    return CodebookResult(rows, errors, sqnr, entropy, levels, usage, normalized)


def show_demo2(r: CodebookResult) -> None:
    print_header(_("Demo 2: INT4, FP4 and NF4 at 4.5 bits per weight on Gaussian weights"))
    print_table([_("format (absmax per 64)"), _("levels"), _("bits/weight"), _("rel. error (%)"),
                 "SQNR (dB)", _("code entropy (bits)")],
                [[_(row[0])] + row[1:] for row in r.rows])
    print()
    # TRANSLATORS: the levels follow on the same line; keep a separator at the end.
    label = _("NF4 levels: ")
    pad = display_width(label)
    lines = textwrap.wrap(" ".join(f"{v:+.4f}" for v in r.levels["NF4"]),
                          OBSERVATIONS_WIDTH - pad, break_on_hyphens=False)
    print("\n".join([label + lines[0]] + [" " * pad + line for line in lines[1:]]))
    e, h = r.errors, r.entropy
    s = {k: round(v, 2) for k, v in r.sqnr.items()}     # as printed, so the text adds up
    nv = e["NVFP4 (for reference)"]
    print_observations([
        # A literal "%" before a letter would read as a %-format to gettext tools: the
        # percentages of these messages come from the "%" format spec.
        _("NF4 has the lowest error of the three: {nf4:.2%} against {fp4:.2%} for FP4 and "
          "{int4:.2%} for INT4, a gain of {gain:.2f} dB over INT4 for the same bytes.").format(
            nf4=e["NF4"], fp4=e["FP4 E2M1"], int4=e["INT4"], gain=s["NF4"] - s["INT4"]),
        _("The entropy column says why. NF4's codes carry {nf4:.3f} bits of their 4; INT4's "
          "carry {int4:.3f}, because its outer levels are almost never used.").format(
            nf4=h["NF4"], int4=h["INT4"]),
        _("NVFP4's error ({error:.2f}%) is only {above:.1f}% above NF4's at the same 4.5 bits. "
          "It spends its bits on smaller blocks (16) instead of a better codebook, and a tensor "
          "core can multiply its elements directly.").format(
            error=nv * 100, above=(nv / e["NF4"] - 1) * 100),
        _("NF4 codes are indices into a table. Kernels look the values up and convert them to "
          "FP16 before multiplying; no hardware multiplies NF4."),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 3: double quantization
# ---------------------------------------------------------------------------------------------
PARAMS_65B = 65e9          # the largest model QLoRA fine-tuned


DQ_SCHEMES = (  # key, center, signed, second-level code, label (translated where printed)
    ("qlora", True, True, "dynamic", N_("DQ: mean subtracted, 8-bit float map (QLoRA)")),
    ("int8", True, True, "int8", N_("DQ: mean subtracted, INT8 (stand-in)")),
    ("signed", False, True, "int8", N_("DQ: no offset, INT8")),
    ("unsigned", False, False, "int8", N_("DQ: no offset, UINT8")),
)
OUTLIER_SHARE = 1e-3  # this fraction of the weights (0.1 %) ...
OUTLIER_SCALE = 1e3   # ... scaled by this
HUGE = 1e6            # and one weight in every 97th row set to HUGE * STD


def outlier_weights(seed: int = 0) -> np.ndarray:
    """The Gaussian weights with 0.1 % of them x1000 and a HUGE * STD in every 97th row.

    The stress case of a comparison with bitsandbytes: a few blocks of 256 absmax values
    then hold one absmax a million times the others.
    """
    w = gaussian_weights(seed=seed)
    rng = np.random.default_rng(seed + 1)
    w[rng.random(w.shape) < OUTLIER_SHARE] *= OUTLIER_SCALE
    w[::97, 0] = HUGE * STD
    return w


@dataclass
class DoubleQuantResult:
    rows: list              # [scheme, bits/weight, rel error %, max weight change %]
    bits: dict              # "single" or a DQ_SCHEMES key -> measured bits per weight
    bits_formula: dict      # "single" / "double" -> closed-form bits per weight
    errors: dict            # same keys as bits -> rel error of the weights (fraction)
    max_weight_change: dict  # DQ key -> max |double - single| / |single| (fraction)
    max_scale_error: dict   # DQ key -> max |c' - c| / c over blocks (fraction)
    mean_step: dict         # DQ key -> mean second-level step (FP32 units of the absmax)
    saved_bits: float       # single - QLoRA double quantization, bits per weight
    saved_gb_65b: float     # saved_bits for a 65-billion-parameter model, in GB (1e9 bytes)
    absmax: np.ndarray      # the first-level FP32 scales, (16384,)
    absmax_qlora: np.ndarray  # their reconstruction by QLoRA's double quantization
    outlier_sqnr: dict      # "single" / "qlora" / "int8" -> weight SQNR (dB), outlier weights


def demo3_double_quant(seed: int = 0) -> DoubleQuantResult:
    """NF4 in blocks of 64; then the FP32 absmax values quantized to 8 bits in blocks of 256.

    What to notice: the scales are one eighth of the cost of NF4 (32 bits per 64 weights).
    Storing them in 8 bits saves about 0.37 bits per weight and moves each weight by less
    than 1 %. The codes do not change, so a weight moves by exactly its scale's relative
    error. Subtracting the mean matters for a signed code: absmax values are all positive,
    and without the offset half of the signed codes would never be used. QLoRA's second level
    is bitsandbytes' 8-bit float map; an INT8 code does as well on these weights but fails on
    outlier-heavy ones (:func:`outlier_weights`), where one huge absmax sets the INT8 step.
    """
    w = gaussian_weights(seed=seed)
    single = qlora_quantize(w, double_quant=False)
    single_deq = qlora_dequantize(single)
    absmax = single.absmax.astype(np.float64)
    nonzero = single_deq != 0
    bits, errors, change, scale_err, step, recon = {}, {}, {}, {}, {}, {}
    bits["single"], errors["single"] = single.bits_per_parameter, rel_error(single_deq, w)
    rows = [[N_("NF4, FP32 absmax per 64"), f"{bits['single']:.4f}",
             f"{errors['single'] * 100:.4f}", "0"]]
    for key, center, signed, code, label in DQ_SCHEMES:
        t = qlora_quantize(w, center=center, signed=signed, code=code)
        deq = qlora_dequantize(t)
        recon[key] = double_dequantize(t.absmax)
        bits[key], errors[key] = t.bits_per_parameter, rel_error(deq, w)
        change[key] = float(np.max(np.abs(deq - single_deq)[nonzero] / np.abs(single_deq[nonzero])))
        scale_err[key] = float(np.max(np.abs(recon[key] - absmax) / absmax))
        step[key] = float(t.absmax.super_scales.astype(np.float64).mean())
        rows.append([label, f"{bits[key]:.4f}", f"{errors[key] * 100:.4f}",
                     f"{change[key] * 100:.3f}"])
    saved = bits["single"] - bits["qlora"]
    formula = {"single": qlora_bits_per_parameter(BLOCK, double_quant=False),
               "double": qlora_bits_per_parameter(BLOCK)}
    wo = outlier_weights(seed)
    outlier = {"single": sqnr_db(qlora_dequantize(qlora_quantize(wo, double_quant=False)), wo),
               "qlora": sqnr_db(qlora_dequantize(qlora_quantize(wo)), wo),
               "int8": sqnr_db(qlora_dequantize(qlora_quantize(wo, code="int8")), wo)}
    return DoubleQuantResult(rows, bits, formula, errors, change, scale_err, step, saved,
                             PARAMS_65B * saved / 8 / 1e9, single.absmax, recon["qlora"], outlier)


def show_demo3(r: DoubleQuantResult) -> None:
    print_header(_("Demo 3: double quantization: the scales, quantized"))
    print(_("DQ: double quantization. Max change: the largest move of a weight, relative to its "
            "single-quantized\nvalue."))
    print_table([_("scheme"), _("bits/weight"), _("rel. error (%)"), _("max change (%)")],
                [[_(row[0])] + row[1:] for row in r.rows])
    single, double = r.bits_formula["single"], r.bits_formula["double"]
    print("\n" + _("Per {block} weights: {codes} bits of codes + 32 bits of absmax = {total:g} "
                   "bits, {per_weight:g} bits per weight.").format(
        block=BLOCK, codes=BLOCK * 4, total=single * BLOCK, per_weight=single))
    print(_("Double quantized: {codes} + 8 + 32/256 bits = {total:g} bits, {per_weight:.6f} bits "
            "per weight\n(plus one FP32 mean per tensor).").format(
        codes=BLOCK * 4, total=double * BLOCK, per_weight=double))
    o = r.outlier_sqnr
    print("\n" + _("Outlier-heavy weights ({share:.1%} of them x{scale:g}, one 10^{exp:.0f} x "
                   "std in every 97th row), weight SQNR:\n  FP32 absmax {single:.1f} dB, QLoRA's "
                   "8-bit float map {qlora:.1f} dB, INT8 stand-in {int8:.1f} dB.").format(
        share=OUTLIER_SHARE, scale=OUTLIER_SCALE, exp=np.log10(HUGE), single=o["single"],
        qlora=o["qlora"], int8=o["int8"]))
    q, s, u, i8 = "qlora", "signed", "unsigned", "int8"
    change = {key: v * 100 for key, v in r.max_weight_change.items()}
    print_observations([
        _("Double quantization saves {saved:.3f} bits per weight: {single:.2f} -> {double:.3f}. "
          "On a 65-billion-parameter model that is {gb:.1f} GB.").format(
            saved=r.saved_bits, single=r.bits["single"], double=r.bits[q], gb=r.saved_gb_65b),
        _("The price is small. The relative error of the weights goes from {single:.4%} to "
          "{double:.4%}, and no weight moves by more than {change:.3%} of its "
          "single-quantized value.").format(single=r.errors["single"], double=r.errors[q],
                                            change=r.max_weight_change[q]),
        _("The absmax values all lie between {low:.4f} and {high:.4f}. Without the mean offset "
          "a signed code uses only its positive half: its step is {ratio:.1f}x larger and the "
          "worst weight moves by {change:.3f}%, over 1%.").format(
            low=r.absmax.min(), high=r.absmax.max(), ratio=r.mean_step[s] / r.mean_step[i8],
            change=change[s]),
        _("An unsigned code without offset ({unsigned:.3f}%) does about as well as the centered "
          "INT8 one ({int8:.3f}%). The offset exists because QLoRA's second level, "
          "bitsandbytes' 8-bit float map, is signed: 127 negative values, 0 and 128 positive "
          "ones, from 10^-6 up to 1 (QLoRA section 3; bitsandbytes create_dynamic_map).").format(
            unsigned=change[u], int8=change[i8]),
        _("Why floats and not INT8? On these well-behaved weights INT8 moves a weight by at most "
          "{int8:.3f}% against the float map's {qlora:.3f}%. On outlier-heavy weights one huge "
          "absmax per 256 sets INT8's step and every ordinary absmax collapses onto the mean: "
          "{single:.1f} dB becomes {int8_db:.1f} dB, while the float map, fine over seven "
          "decades, keeps {qlora_db:.1f} dB.").format(
            int8=change[i8], qlora=change[q], single=o["single"], int8_db=o["int8"],
            qlora_db=o["qlora"]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: why kernels want permuted layouts
# ---------------------------------------------------------------------------------------------
E4M3_EXAMPLES = (0x38, 0x40, 0x7E, 0x01, 0xB8)    # 1.0, 2.0, 448, smallest subnormal, -1.0


@dataclass
class LayoutResult:
    group_size: int
    g_idx: np.ndarray               # checkpoint order, (K,)
    g_idx_sorted: np.ndarray        # after the kernel's row sort, (K,)
    groups_per_tile: dict           # "checkpoint" / "sorted" -> mean distinct groups per 16 rows
    group_switches: dict            # same keys -> times the group changes walking down K
    same_output: bool               # x @ W == x[:, order] @ W[order] (rel. diff <= 1e-12)
    output_rel_diff: float
    thread_map: np.ndarray          # (16, 64) thread owning each element of a Marlin tile
    word_map: np.ndarray            # (16, 64) word index inside the tile
    lane_map: np.ndarray            # (16, 64) nibble lane inside the word
    thread0: list                   # (k, n) of the 8 codes in word 0, lane order
    marlin_round_trip: bool
    marlin_bytes: int
    gptq_bytes: int
    fp8_rows: list                  # [byte, E4M3 value, bits read as FP16, ratio]
    fp8_ratio: set                  # the distinct ratios E4M3 value / FP16 reading
    fp8_error: float                # rel error of FP8 channel-wise W8A16 on the weights
    fp8_bits: float


def demo4_layouts(seed: int = 0, group_size: int = 128) -> LayoutResult:
    """Act-order rows, Marlin tiles, and the FP8 scale that is 256 times too large.

    What to notice: act-order quantizes the input rows with the largest Hessian diagonal
    (the loudest activations) first, while many rows remain to absorb their rounding error
    (GPTQ's error feedback; act-order is a heuristic of the authors' repository,
    github.com/IST-DASLab/gptq, not of the paper); so the rows of one group end up scattered
    over K. The codes here are round-to-nearest on the symmetric grid of GPTQ checkpoints:
    only the layout is GPTQ's. A kernel reading 16 rows at a time would then need several
    scales per tile; sorting the rows by group once, and permuting the activations
    the same way, gives it one. Marlin then stores each 16 x 64 tile so that every thread
    finds the 8 values it needs in one 32-bit word, in the order the tensor core wants them.
    """
    rng = np.random.default_rng(seed + 1)
    w = gaussian_weights(seed=seed)                                     # (K, N)
    k, n = w.shape
    # Activation statistics with a few loud channels: diag(X^T X) over 512 tokens.
    x = rng.standard_normal((512, k)) * np.exp(rng.normal(0, 1, k))
    perm = act_order_permutation((x * x).sum(axis=0))
    gw = gptq_quantize(w, group_size, perm=perm, symmetric=True)
    order = kernel_row_order(gw.g_idx)
    tiles = {"checkpoint": gw.g_idx, "sorted": gw.g_idx[order]}
    per_tile = {key: float(np.mean([len(np.unique(g[i:i + 16])) for i in range(0, k, 16)]))
                for key, g in tiles.items()}
    switches = {key: int(np.count_nonzero(np.diff(g))) for key, g in tiles.items()}
    wq = gptq_dequantize(gw)
    y = x @ wq
    y_sorted = x[:, order] @ wq[order]
    rel_diff = float(np.abs(y_sorted - y).max() / np.abs(y).max())

    sorted_qweight = permute_qweight_rows(gw.qweight, order)
    marlin = gptq_to_marlin(sorted_qweight)
    round_trip = bool(np.array_equal(marlin_unpack_int4(marlin),
                                     gptq_unpack_qweight(sorted_qweight)))

    rows, cols = marlin_int4_tile_map()
    word_map = np.empty((16, 64), np.int64)
    lane_map = np.empty((16, 64), np.int64)
    word_map[rows, cols] = np.arange(128)[:, None]
    lane_map[rows, cols] = np.arange(8)[None, :]
    thread0 = [(int(r), int(c)) for r, c in zip(rows[0], cols[0])]

    codes = np.array(E4M3_EXAMPLES, np.uint8)
    exact = FP8_E4M3.decode(codes)
    as_fp16 = e4m3_bits_as_fp16(codes).astype(np.float64)
    fp8_rows = [[f"0x{c:02X}", f"{v:g}", f"{h:.6g}", f"{v / h:g}"]
                for c, v, h in zip(codes, exact, as_fp16)]
    fw = marlin_fp8_pack(w.T.astype(np.float16))
    fcodes, fscales = marlin_fp8_unpack(fw)
    w8 = (FP8_E4M3.decode(fcodes) * fscales[:, None]).T
    return LayoutResult(group_size, gw.g_idx, gw.g_idx[order], per_tile, switches,
                        rel_diff <= 1e-12, rel_diff, word_map // 4, word_map, lane_map, thread0,
                        round_trip, marlin.nbytes, gw.qweight.nbytes, fp8_rows,
                        {float(v) for v in exact / as_fp16}, rel_error(w8, w),
                        8 * fw.nbytes / w.size)


def marlin_where(k: int, n: int, size_n: int = SHAPE[1]) -> dict:
    """Where weight (k, n) of a (K, size_n) INT4 matrix lands in the Marlin array.

    Returns a dict with the packed row and word, the nibble lane, the tile, and the thread
    of the tile that owns the element.
    """
    row, word, lane = (int(v) for v in marlin_int4_location(k, n, size_n))
    local = word % 128
    return {"k": k, "n": n, "row": row, "word": word, "lane": lane,
            "tile": (k // 16, n // 64), "thread": local // 4, "sub_tile": local % 4}


def _yes_no(flag: bool) -> str:
    return _("yes") if flag else _("no")


def show_demo4(r: LayoutResult) -> None:
    print_header(_("Demo 4: act-order, Marlin tiles, and the FP8 exponent-bias trick"))
    print_table([_("row order (K = {k}, groups of {group})").format(k=r.g_idx.size,
                                                                   group=r.group_size),
                 _("groups per 16-row tile"),
                 _("group changes down K")],
                [[_("checkpoint (act-order)"), f"{r.groups_per_tile['checkpoint']:.2f}",
                  r.group_switches["checkpoint"]],
                 [_("sorted by g_idx"), f"{r.groups_per_tile['sorted']:.2f}",
                  r.group_switches["sorted"]]])
    print(_("x[:, order] @ W[order] equals x @ W up to summation order (difference below 1e-12 "
            "of max|y|): {answer}").format(answer=_yes_no(r.same_output)))
    print("\n" + _("Marlin INT4: which thread owns element (k, n) of a 16 x 64 tile (first 16 "
                   "columns):"))
    print_table(["k \\ n"] + [str(c) for c in range(16)],
                [[str(k)] + [int(t) for t in r.thread_map[k, :16]] for k in range(16)])
    print(_("Word 0 (thread 0), lanes 0..7: {pairs}").format(
        pairs=" ".join(f"({a},{b})" for a, b in r.thread0)))
    print(_("Marlin bytes {marlin:,} = GPTQ qweight bytes {gptq:,}; unpacking restores every "
            "code: {answer}").format(marlin=r.marlin_bytes, gptq=r.gptq_bytes,
                                     answer=_yes_no(r.marlin_round_trip)))
    print("\n" + _("FP8 E4M3 bytes read as FP16 by moving bits (sign -> bit 15, the rest -> bits "
                   "13..7):"))
    print_table([_("byte"), _("E4M3 value"), _("read as FP16"), _("ratio")], r.fp8_rows)
    print(_("Marlin FP8 (E4M3, FP16 scale per output channel) on the lecture's {rows} x {cols} "
            "Gaussian weights\n(std {std:g}): {bits:.4f} bits per weight, relative error "
            "{error:.2f}%.").format(rows=SHAPE[0], cols=SHAPE[1], std=STD, bits=r.fp8_bits,
                                   error=r.fp8_error * 100))
    ratio = ", ".join(f"{v:g}" for v in sorted(r.fp8_ratio))
    print_observations([
        _("Act-order (GPTQ's desc_act) quantizes the input rows in order of falling Hessian "
          "diagonal, here the activation energy diag(X^T X): the loudest rows go first, while "
          "many rows are left to absorb their rounding error. It is a heuristic of the GPTQ "
          "authors' repository (--act-order, github.com/IST-DASLab/gptq), not of the paper, "
          "whose section 3 finds that the order barely matters on large models. "
          "Groups still follow the checkpoint's rows, so a 16-row tile touches {before:.2f} "
          "groups on average and the group changes {switches_before} times down K. After "
          "sorting, each tile has {after:.2f} group and the group changes {switches_after} "
          "times: once per {group} rows.").format(
            before=r.groups_per_tile["checkpoint"], switches_before=r.group_switches["checkpoint"],
            after=r.groups_per_tile["sorted"], switches_after=r.group_switches["sorted"],
            group=r.group_size),
        _("The weights are sorted once, at load time. At run time only the activations are "
          "gathered with the same permutation, which is cheap next to the matrix product."),
        _("Thread t owns column t // 4 (and the one 8 to its right) and rows 2(t % 4), +1, +8, "
          "+9. Those are its B fragments of the tensor core's m16n8k16 instruction. Each word "
          "puts vertical neighbours 4 lanes apart, so one mask 0x000F000F lifts a pair into the "
          "two halves of a register."),
        _("Every E4M3 byte read this way comes out divided by {ratio}: the FP16 exponent bias is "
          "{bias} larger. Marlin multiplies the channel scale by {ratio} once instead of fixing "
          "every weight. On the lecture's Gaussian weights FP8 channel-wise costs {bits:.4f} "
          "bits per weight for a {error:.2%} error.").format(
            ratio=ratio, bias=FP16.bias - FP8_E4M3.bias, bits=r.fp8_bits, error=r.fp8_error),
    ])


# ---------------------------------------------------------------------------------------------
# A pure function for the notebook's explorer
# ---------------------------------------------------------------------------------------------
EXPLORER_FORMATS = ("INT4", "FP4 E2M1", "NF4", "NF4 + double quant", "MXFP4", "NVFP4")


def storage_tradeoff(fmt: str, block: int = BLOCK, distribution: str = "Gaussian",
                     n: int = 1 << 16, seed: int = 0) -> dict:
    """Bits per weight actually stored and the error, for one format and block size.

    Parameters: ``fmt`` in :data:`EXPLORER_FORMATS`; ``block`` divides 1024 (MXFP4 and NVFP4
    use it too, with their own scale formats); ``distribution`` "Gaussian" or "Student-t"
    (5 degrees of freedom, heavier tails). Returns bits per weight, relative error (fraction)
    and SQNR (dB).
    """
    if fmt not in EXPLORER_FORMATS:
        raise ValueError(f"fmt must be one of {EXPLORER_FORMATS}, got {fmt!r}")
    rng = np.random.default_rng(seed)
    if distribution == "Gaussian":
        w = rng.standard_normal((n // 1024, 1024)) * STD
    elif distribution == "Student-t":
        w = rng.standard_t(5, (n // 1024, 1024)) * STD
    else:
        raise ValueError(f"distribution must be 'Gaussian' or 'Student-t', got {distribution!r}")
    if fmt in CODEBOOKS:
        deq, _codes = codebook_quantize(w, fmt, block)
        bits = qlora_bits_per_parameter(block, double_quant=False)
    elif fmt == "NF4 + double quant":
        t = qlora_quantize(w, block=block)
        deq, bits = qlora_dequantize(t), t.bits_per_parameter
    else:
        kind = "mxfp4" if fmt == "MXFP4" else "nvfp4"
        bq = mx_quantize(w, FP4_E2M1, block) if kind == "mxfp4" else nvfp4_quantize(w, block)
        deq, bits = bq.values, pack_block_fp4(bq, kind).bits_per_element
    return {"format": fmt, "block": block, "distribution": distribution, "bits": bits,
            "rel_error": rel_error(deq, w), "sqnr_db": sqnr_db(deq, w)}


def title() -> str:
    """The lecture's title in the current language."""
    return _("Lecture 07: how quantized weights are stored")


def intro() -> list[str]:
    """The lecture's opening paragraphs in the current language."""
    return [
        _("\"A 4-bit model\" suggests half a byte per weight, in the order of the matrix. "
          "Neither is true: blocks of weights carry scales, sometimes zero points or scales for "
          "the scales, and GPU kernels want the bytes shuffled into the order their threads read "
          "them. This lecture opens the files."),
        _("Demo 1 shows packed 4-bit codes and MXFP4/NVFP4 blocks byte by byte, and the bits per "
          "weight each format really pays. Demo 2 compares the INT4, FP4 and NF4 codebooks at "
          "4.5 bits per weight. Demo 3 quantizes the scales themselves (QLoRA's double "
          "quantization). Demo 4 shows the permuted layouts kernels want: GPTQ act-order, "
          "Marlin tiles, FP8."),
        _("How to read the numbers: the data is one {rows} x {cols} matrix w of Gaussian weights "
          "(std {std:g}, fixed seed), and q is its quantized copy. Rel. error is ||q - w|| / "
          "||w|| in percent. Bits per weight count every stored byte, metadata included. Bytes "
          "are hex, lowest address first.").format(rows=SHAPE[0], cols=SHAPE[1], std=STD),
        _("SQNR = 10 log10(||w||² / ||q - w||²) is the signal-to-quantization-noise ratio in dB: "
          "higher is better, and 6 dB more means half the error."),
    ]


def main() -> None:
    print_title(title(), intro())
    show_demo1(demo1_bytes())
    show_demo2(demo2_codebooks())
    show_demo3(demo3_double_quant())
    show_demo4(demo4_layouts())


if __name__ == "__main__":
    run_lecture(main, lambda: lecture_parser(title()))
