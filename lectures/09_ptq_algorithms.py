"""
Lecture 09: post-training quantization algorithms: GPTQ, AWQ, SmoothQuant, rotations.

The question
    Rounding every weight to its nearest grid point minimises the *weight* error. What a
    model feels is the *output* error of each layer, and with inputs x of second moment
    Σ = E[x xᵀ] the two differ: E‖(Ŵ − W)x‖² = tr(E Σ Eᵀ), E = Ŵ − W. Errors in channels where
    the activations are large cost the most, and errors in correlated channels can cancel.
    Every method here exploits that, each as a short piece of numfmt.ptq:

      Demo 1  A synthetic layer with correlated, outlier inputs: the tr(EΣEᵀ) identity, and
              GPTQ against round-to-nearest (RTN): output error against weight error.
      Demo 2  GPTQ on a real model (SmolLM2-135M): INT4 / INT3, groups of 128 / 32, act-order
              on and off, calibrated layer by layer: perplexity against RTN; act-order with
              static groups separates its rounding order from its regrouping.
      Demo 3  AWQ's activation-aware scales on the same settings and calibration tokens; both
              methods calibrated on another text (out-of-domain) against in-domain.
      Demo 4  Weights and activations: SmoothQuant's α for W8A8, a Hadamard rotation for
              W4A4 (with RTN and with GPTQ weights), and LLM.int8()'s float channels.
      Demo 5  Calibrating an activation range: min-max, percentile, MSE, KL; static against
              dynamic scales.
      Demo 6  One table: method × bits -> perplexity, bits per weight, calibration cost.

How to read the output
    Demo 1 uses synthetic data with fixed seeds. Demos 2-6 use the model and text of lecture 08
    (lectures/llm: the GGUF checkpoint dequantized to float32 and run in float64, norms
    included, so that the CPU's kernels leave the figures unchanged; CPython's language reference,
    4 evaluation windows of 512 tokens, 4 disjoint calibration windows of 512 tokens; for the
    out-of-domain rows, 4 windows of 512 tokens of the source of CPython's argparse module).
    Perplexity is exp(mean negative log-likelihood) per token: lower is better. Errors are
    relative, ‖Ŵ − W‖/‖W‖ and ‖X(Ŵ − W)ᵀ‖/‖XWᵀ‖, in percent. "What to notice" closes each demo.

Run
    python lectures/09_ptq_algorithms.py       (demo 1 alone: --synthetic; --quick: 2 windows
                                                of 256 tokens and two settings, the tests')
    python lectures/09_ptq_algorithms.py --save r.json   (also the results as JSON)
    Demo 1 takes about 10 s. The real-model demos run 9 sequential GPTQ calibrations, two
    AWQ passes (its 3 settings, then one out-of-domain) and 28 perplexity evaluations
    (progress on stderr: a bar on a terminal, one line per step otherwise); the groups of
    linears of each layer are quantized on torch's threads (lectures/llm/calibrate.py).
    Without the model package, demos 2-6 print how to install it. A change in brackets is one
    perplexity against another with its 95% interval over the evaluation windows, paired
    window by window (within noise when it contains 0).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import re
from dataclasses import dataclass, field

import numpy as np

from console import (lecture_parser, print_header, print_observations, print_table, print_title,
                     run_lecture)
from console.i18n import N_
from console.progress import LineProgress, progress
from lectures import llm
from lectures.i18n import domain, numbered_label
from lectures.llm.calibrate import INPUT_GROUPS, calibrate_layers, map_items, workers
from numfmt import quantize_int, rel_error
from numfmt.ptq import (awq_search, calibrate_kl, calibrate_mse, calibrate_percentile, gptq,
                        hadamard, hessian, llm_int8_matmul, rtn_values, smoothquant_scales)

_ = domain("lecture09").gettext

# The labels the demo functions write into their rows are data (the tests compare them); they
# are translated where they are printed. Fixed labels are looked up as they are; labels with a
# number in them are matched whole and printed from a message with that number as a field.
N_("RTN (round to nearest)"), N_("GPTQ, act-order"), N_("none"), N_("percentile 99.99")
N_("KL (entropy)"), N_("dynamic per-tensor"), N_("dynamic per-token"), N_("float32 (reference)")
N_("W4A4 INT4 g32, GPTQ weights")
_NUMBERED_LABELS = (
    (re.compile(r"GPTQ, (?P<tokens>\d+) calibration tokens"),
     N_("GPTQ, {tokens} calibration tokens")),
    (re.compile(r"layer (?P<layer>\d+) (?P<kind>\w+)"), N_("layer {layer} {kind}")),
    (re.compile(r"(?P<tokens>\d+) tokens, (?P<alphas>\d+) α × (?P<clips>\d+) clips"),
     N_("{tokens} tokens, {alphas} α × {clips} clips")),
    (re.compile(r"(?P<tokens>\d+) tokens, Hessians, sequential"),
     N_("{tokens} tokens, Hessians, sequential")),
    (re.compile(r"(?P<tokens>\d+) tokens, as GPTQ, by diag H"),
     N_("{tokens} tokens, as GPTQ, by diag H")),
)


def verdict(change) -> str:
    """"within noise" or "beyond noise" for a :class:`lectures.llm.PairedRatio` (its 95%
    interval over the evaluation windows contains 0 or not)."""
    return _("within noise") if change.within_noise else _("beyond noise")


def label(text: str) -> str:
    """A row label of a demo's result in the current language (itself where none is known)."""
    return numbered_label(text, _NUMBERED_LABELS, _)


GPTQ_SETTINGS = ((4, 128), (3, 128), (3, 32))   # (bits, group size), asymmetric as GPTQ's
ZERO_BITS_STORED = True      # GPTQ storage: an FP16 scale and a b-bit zero point per group


@dataclass(frozen=True)
class Workload(llm.Workload):
    """How much text the real-model demos read (lectures.llm.Workload: 4 evaluation and 4
    calibration windows of 512 tokens), and which weight settings demos 2-3 run."""

    settings: tuple = GPTQ_SETTINGS


FULL = Workload()
#: The tests' workload (``--quick``): the same code on 4x fewer tokens and the first two
#: settings (INT4 g128 against INT3 g128 still shows where GPTQ gains most).
QUICK = Workload(n_eval=2, n_calib=2, seq_len=256, settings=GPTQ_SETTINGS[:2])


# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """The lecture's command line, plus console.lecture_parser's --help and --lang; any other
    option is an error."""
    parser = lecture_parser(_("Lecture 09: post-training quantization algorithms."))
    parser.add_argument("--synthetic", action="store_true",
                        help=_("demo 1 only (the synthetic layer; no model needed)"))
    parser.add_argument("--quick", action="store_true",
                        help=_("the tests' workload: 2 windows of 256 tokens, two settings"))
    parser.add_argument("--save", metavar="PATH", type=llm.save_path,
                        help=_("also write the real-model demos' results as JSON to PATH "
                               "(lectures.llm.load_results reads them back)"))
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    return build_parser().parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    print_title(_("Lecture 09: post-training quantization algorithms"), [
        _("Round-to-nearest minimises the weight error; a model feels each layer's output "
          "error, tr(E Σ Eᵀ). GPTQ, AWQ, SmoothQuant, rotations and LLM.int8() are short pieces "
          "of numfmt.ptq that each act on that difference; demos 2-6 measure them on "
          "SmolLM2-135M."),
        _("Errors are relative, in percent; perplexity is exp(mean NLL per token), lower is "
          "better. Every run prints the same numbers, also on other floating-point kernels: the "
          "model calibrates and computes in float64 on its float32 weights (lecture 08 says "
          "why), its norms included, and layer-by-layer calibration keeps the new weights in "
          "float64. A rounding decision of GPTQ or AWQ could still turn a last-bit difference "
          "into another code, for a value within float64's rounding error of a tie, and "
          "layer-by-layer calibration would carry it on; under a second kernel configuration "
          "none did."),
    ])
    show_demo1(demo1_output_error())
    if not args.synthetic:
        real_model_demos(QUICK if args.quick else FULL, args.save)


def real_model_demos(workload: Workload = FULL, save: str | None = None) -> None:
    sys.stdout.flush()
    # the load and the reference perplexity take minutes on a busy machine: say so in a log
    print(_("Demos 2-6: loading SmolLM2-135M and its reference perplexity"), file=sys.stderr,
          flush=True)
    try:
        m = load_model(workload=workload)
    except llm.ModelUnavailableError as e:   # its message names the install command
        print_header(_("Demos 2-6: the real model"))
        print(_("Skipped: {error}").format(error=e.wrapped(90)))   # 100 columns with "Skipped: "
        return
    g = counted(m, 2, demo2_gptq)
    show_demo2(g)
    a = counted(m, 3, demo3_awq, g)
    show_demo3(a)
    d4 = counted(m, 4, demo4_activations)
    show_demo4(d4)
    d5 = counted(m, 5, demo5_calibration, activations=d4)
    show_demo5(d5)
    d6 = counted(m, 6, demo6_summary, g, a)
    show_demo6(d6)
    if save:
        results = {"reference": m.reference_ppl, "demo2": dataclasses.replace(g, weights={}),
                   "demo3": a, "demo4": d4, "demo5": d5, "demo6": d6}
        llm.save_results(save, results, {"workload": dataclasses.asdict(workload),
                                         "command": "09_ptq_algorithms.py"
                                         + (" --quick" if workload == QUICK else "")})


# ---------------------------------------------------------------------------------------------
# Demo 1: output error, not weight error (synthetic)
# ---------------------------------------------------------------------------------------------
SYNTH = {"out": 256, "in": 1024, "rank": 64, "noise": 0.3, "outliers": 8, "outlier_gain": 20.0,
         "calib": 1024, "held_out": 1024}


def synthetic_layer(seed: int = 0, correlated: bool = True, calib: int | None = None) -> dict:
    """Weights W (out, in) Student-t(5) × 0.02 and inputs X (calib + held_out, in).

    Correlated: a rank-64 signal (unit variance per channel) plus 0.3 × i.i.d. noise; else unit
    i.i.d. noise. Either way 8 channels are scaled by 20 (the outlier channels). ``calib``
    calibration tokens (default 1024) come first, then 1024 held-out tokens.
    """
    c = SYNTH
    calib = c["calib"] if calib is None else calib
    rng = np.random.default_rng(seed)
    w = rng.standard_t(5, (c["out"], c["in"])) * 0.02                         # (out, in)
    n = calib + c["held_out"]
    if correlated:
        x = rng.standard_normal((n, c["rank"])) @ rng.standard_normal((c["rank"], c["in"]))
        x = x / np.sqrt(c["rank"]) + c["noise"] * rng.standard_normal((n, c["in"]))
    else:
        x = rng.standard_normal((n, c["in"]))
    outliers = np.sort(rng.choice(c["in"], c["outliers"], replace=False))
    x[:, outliers] *= c["outlier_gain"]
    return {"w": w, "x_calib": x[:calib], "x_eval": x[calib:], "outliers": outliers}


def output_error(w_hat: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """‖X(Ŵ − W)ᵀ‖ / ‖XWᵀ‖: the layer's relative output error on inputs X (n, in)."""
    return float(np.linalg.norm(x @ (w_hat - w).T) / np.linalg.norm(x @ w.T))


@dataclass
class OutputErrorResult:
    rows: list            # [method, weight error, output error calib, output error held out]
    iid_rows: list        # the same for i.i.d. inputs (RTN, GPTQ)
    identity: dict        # mean ‖E x‖² over held-out tokens, tr(E Σ Eᵀ), relative difference
    outlier_share: float  # share of RTN's output error energy in the outlier channels
    outlier_count: int
    errors: dict = field(default_factory=dict)  # method -> (weight error, held-out output error)


#: The printed bound on |mean ‖E x‖² − tr(E Σ Eᵀ)| / tr(E Σ Eᵀ): the two float64 sums differ by
#: rounding only (0 on one machine, a few 1e-16 on another BLAS), far below it.
IDENTITY_BOUND = 1e-12


def _trace_identity(e: np.ndarray, x: np.ndarray) -> dict:
    sigma = x.T @ x / x.shape[0]                                               # (in, in)
    direct = float(np.mean(np.sum((x @ e.T) ** 2, axis=1)))                   # mean ‖E x‖²
    trace = float(np.trace(e @ sigma @ e.T))
    return {"direct": direct, "trace": trace, "rel_diff": abs(direct - trace) / trace}


def _channel_share(e: np.ndarray, x: np.ndarray, channels: np.ndarray) -> float:
    """Share of tr(E Σ Eᵀ) = Σ_j (E Σ)_{:,j} · E_{:,j} carried by the given input channels."""
    sigma = x.T @ x / x.shape[0]
    per_channel = np.sum((e @ sigma) * e, axis=0)                              # (in,)
    return float(per_channel[channels].sum() / per_channel.sum())


def demo1_output_error(seed: int = 0) -> OutputErrorResult:
    """RTN against GPTQ (INT4, one symmetric scale per row) on a layer whose inputs are
    correlated and have 8 outlier channels. Notice the weight error *rising* under GPTQ while
    the output error falls, and that the gain needs correlated inputs."""
    d = synthetic_layer(seed)
    w, xc, xe = d["w"], d["x_calib"], d["x_eval"]
    h = hessian(xc)
    methods = {
        "RTN (round to nearest)": quantize_int(w, 4, granularity="channel").values,
        "GPTQ": gptq(w, h, bits=4).weight,
        "GPTQ, act-order": gptq(w, h, bits=4, act_order=True).weight,
    }
    rows, errors = [], {}
    for name, wq in methods.items():
        errors[name] = (rel_error(wq, w), output_error(wq, w, xe))
        rows.append([name, rel_error(wq, w), output_error(wq, w, xc), errors[name][1]])
    rtn = methods["RTN (round to nearest)"]
    iid_rows = []
    for calib in (SYNTH["calib"], 8 * SYNTH["calib"]):
        iid = synthetic_layer(seed, correlated=False, calib=calib)
        wi, xc_i, xe_i = iid["w"], iid["x_calib"], iid["x_eval"]
        if not iid_rows:
            r = quantize_int(wi, 4, granularity="channel").values
            iid_rows.append(["RTN (round to nearest)", rel_error(r, wi), output_error(r, wi, xc_i),
                             output_error(r, wi, xe_i)])
        g = gptq(wi, hessian(xc_i), bits=4).weight
        iid_rows.append([f"GPTQ, {calib} calibration tokens", rel_error(g, wi),
                         output_error(g, wi, xc_i), output_error(g, wi, xe_i)])
    return OutputErrorResult(rows, iid_rows, _trace_identity(rtn - w, xe),
                             _channel_share(rtn - w, xe, d["outliers"]), len(d["outliers"]),
                             errors)


def show_demo1(r: OutputErrorResult) -> None:
    print_header(_("Demo 1: output error, not weight error (synthetic layer)"))
    c = SYNTH
    print(_("W: {out} × {inputs} Student-t(5) × 0.02; INT4, one symmetric scale per row.\n"
            "X: rank-{rank} signal + {noise} × noise, {outliers} channels × {gain:.0f};\n"
            "{calib} calibration tokens (GPTQ's Hessian), {held_out} held-out tokens.").format(
        out=c["out"], inputs=c["in"], rank=c["rank"], noise=c["noise"], outliers=c["outliers"],
        gain=c["outlier_gain"], calib=c["calib"], held_out=c["held_out"]))
    head = [_("method"), _("weight error"), _("output error (calib.)"),
            _("output error (held out)")]
    fmt = [[label(m), f"{a * 100:.2f}%", f"{b * 100:.2f}%", f"{e * 100:.2f}%"]
           for m, a, b, e in r.rows]
    print_table(head, fmt)
    print("\n" + _("The same layer with i.i.d. unit inputs (no correlation between channels):"))
    print_table(head, [[label(m), f"{a * 100:.2f}%", f"{b * 100:.2f}%", f"{e * 100:.2f}%"]
                       for m, a, b, e in r.iid_rows])
    rtn_w, rtn_o = r.errors["RTN (round to nearest)"]
    g_w, g_o = r.errors["GPTQ"]
    i = r.identity
    print_observations([
        _("The identity: over the held-out tokens, mean ‖E x‖² = {direct:.6e} and tr(E Σ Eᵀ) = "
          "{trace:.6e}, equal to float64 rounding (relative difference below {bound:.0e}, on any "
          "machine). Under RTN the "
          "{count} outlier channels ({count_share:.1f}% of them) carry {error_share:.0f}% of the "
          "output error.").format(
            direct=i["direct"], trace=i["trace"], bound=IDENTITY_BOUND, count=r.outlier_count,
            count_share=r.outlier_count / SYNTH["in"] * 100, error_share=r.outlier_share * 100),
        _("GPTQ cuts the held-out output error from {rtn_output:.1f}% to {gptq_output:.1f}% "
          "while the weight error rises from {rtn_weight:.1f}% to {gptq_weight:.1f}%: it rounds "
          "one input column at a time and moves the columns not yet rounded to cancel the output "
          "error so far (the least-squares update, with the inverse Hessian H = 2XᵀX/n).")
        .format(rtn_output=rtn_o * 100, gptq_output=g_o * 100, rtn_weight=rtn_w * 100,
                gptq_weight=g_w * 100),
        _("With i.i.d. inputs there is nothing to cancel: GPTQ fits its {calib} calibration "
          "tokens ({gptq_calib:.1f}% against RTN's {rtn_calib:.1f}%) but does worse held out "
          "({gptq_held_out:.1f}%; with {more} tokens {more_held_out:.1f}%; RTN "
          "{rtn_held_out:.1f}%). Its gain comes from correlated channels; on uncorrelated ones "
          "it only fits the noise of the calibration set.").format(
            calib=SYNTH["calib"], gptq_calib=r.iid_rows[1][2] * 100,
            rtn_calib=r.iid_rows[0][2] * 100, gptq_held_out=r.iid_rows[1][3] * 100,
            more=8 * SYNTH["calib"], more_held_out=r.iid_rows[2][3] * 100,
            rtn_held_out=r.iid_rows[0][3] * 100),
    ])


# ---------------------------------------------------------------------------------------------
# The real model: lecture 08's harness, and calibration layer by layer
# ---------------------------------------------------------------------------------------------
@dataclass
class Model:
    """The loaded reference model with its fixed windows (see lectures/llm).

    ``model`` is a float64 copy of the checkpoint's float32 model (the same weight values;
    :func:`lectures.llm.float64_copy`, norms and rotary embedding in float64 too), as lecture
    08's Lab: calibration and evaluation run in float64, so that a last-bit difference between
    two CPUs' kernels is 2^29 times smaller than in float32, and its GPTQ, AWQ, SmoothQuant and
    calibrator rows print the same under another BLAS configuration
    (tests/test_blas_independence.py runs them under a second one and says what each needs:
    float64 norms and angles, weights kept in float64 in sequential calibration, the exact zero
    point of a symmetric range). Sequential
    calibration computes with the new weights in float64; the perplexities read them rounded
    to float32, as the checkpoint would hold them."""

    ck: object               # lectures.llm.Checkpoint
    eval_windows: np.ndarray  # (n_eval, seq_len) token ids
    calib_windows: np.ndarray  # (n_calib, seq_len) token ids
    reference_ppl: float
    workload: Workload = FULL
    reference_nll: object = None  # float64 (n_eval,): the unquantized model's NLL per window
    ood_windows: np.ndarray | None = None  # (n_calib, seq_len): out-of-domain calibration
    model: object = None     # the float64 copy of ck.model that every demo runs
    progress: object = None  # a console.progress log that counts the perplexities, or None


def counted(m: Model, n: int, demo, *args, **kwargs):
    """``demo(m, *args, **kwargs)``, with a line on stderr for each perplexity it computes when
    stderr is not a terminal (a log file: between the calibration bars, the evaluations would
    otherwise run minutes without a line; on a terminal the bars show the activity). What was
    printed before is flushed first, so a redirected run shows each demo as it finishes."""
    sys.stdout.flush()
    try:
        terminal = sys.stderr.isatty()
    except (AttributeError, ValueError):       # no isatty, or a closed stream
        terminal = False
    m.progress = None if terminal else LineProgress(
        desc=_("Demo {n}: perplexities").format(n=n))
    try:
        return demo(m, *args, **kwargs)
    finally:
        m.progress = None


def load_model(ck=None, workload: Workload = FULL) -> Model:
    """SmolLM2-135M through the harness (``ck``: an already loaded lectures.llm.Checkpoint),
    with the evaluation and calibration windows of ``workload`` and its reference perplexity,
    on a float64 copy of the checkpoint's model (:func:`lectures.llm.float64_copy`; the
    checkpoint's model is left as it is).

    Raises
    ------
    ModelUnavailableError
        If ``ck`` is None and the model cannot be loaded (the message says how to install it).
    """
    ck = llm.load_checkpoint() if ck is None else ck
    tokens = llm.corpus_tokens(ck.tokenizer)
    w = workload
    ev = llm.eval_windows(tokens, w.n_eval, w.seq_len)
    cal = llm.calibration_windows(tokens, w.n_calib, w.seq_len)
    ood = llm.ood_calibration_windows(llm.ood_tokens(ck.tokenizer), w.n_calib, w.seq_len)
    model = llm.float64_copy(ck.model)
    ref = llm.window_nll(model, ev, batch_size=len(ev))
    return Model(ck, ev, cal, float(np.exp(ref.mean())), w, ref, ood, model)


def ppl(m: Model, weights: dict | None = None, inputs=None) -> float:
    """Perplexity on the evaluation windows, with some linears' weights swapped (a dict
    name -> (out, in) array) and their inputs replaced by ``inputs(x, name)``: ``exp`` of the
    mean of :func:`nll`."""
    return float(np.exp(nll(m, weights, inputs).mean()))


def nll(m: Model, weights: dict | None = None, inputs=None) -> np.ndarray:
    """Mean NLL per evaluation window (float64 (n_eval,), nats per token), as :func:`ppl`."""
    import torch
    with contextlib.ExitStack() as stack:
        if weights:
            # rounded to float32 as the checkpoint would hold them; the float64 pass reads them
            # exactly
            held = {n: torch.as_tensor(w).to(torch.float32) for n, w in weights.items()}
            stack.enter_context(llm.swapped_weights(m.model, held))
        if inputs is not None:
            stack.enter_context(llm.quantized_inputs(m.model, inputs, threads=workers()))
        # All windows in one forward pass, as lecture 08's Lab.ppl: the same numbers as one
        # window at a time here (tests/test_lecture09.py), about half the CPU time; the
        # activation hooks quantize each window of the batch on its own, the windows on
        # torch's threads at once (the quantizers are numpy's, which release the GIL).
        out = llm.window_nll(m.model, m.eval_windows, batch_size=len(m.eval_windows))
    if m.progress is not None:
        m.progress.update(1)
    return out


def float_weights(m: Model) -> dict:
    """Every decoder linear's weight as float64 (out, in), by harness name."""
    return {n: mod.weight.detach().double().cpu().numpy()
            for n, mod in llm.decoder_linears(m.model).items()}


# ---------------------------------------------------------------------------------------------
# Demo 2: GPTQ on the real model
# ---------------------------------------------------------------------------------------------
@dataclass
class GPTQRealResult:
    reference: float
    rows: list        # [setting, bits per weight, RTN ppl, GPTQ ppl, GPTQ act-order ppl]
    ppl: dict         # (method, bits, group) -> perplexity; method in RTN, GPTQ, GPTQ-act
    tokens: tuple     # (calibration tokens, evaluation tokens)
    weights: dict = field(default_factory=dict, repr=False)  # first setting, act-order only
    nll: dict = field(default_factory=dict)   # as ppl: NLL per evaluation window
    reference_nll: object = None
    g_idx_bits: float = 0.0   # act-order's g_idx (32 bits per input column), per weight
    order_setting: tuple | None = None   # (bits, group) of the static-groups run ("GPTQ-static")


def gptq_quantizer(bits: int, group: int, act_order: bool, static_groups: bool = False):
    """``q(w, x)`` for calibrate_layers: numfmt.ptq.gptq, asymmetric, groups of ``group`` (the
    last group of a 576-input linear holds 64 columns at group 128), on the Hessian of the
    inputs ``x``; returns the dequantized weights."""
    def q(w, x):
        return gptq(w, hessian(x), bits, group, symmetric=False, act_order=act_order,
                    partial_last_group=True, static_groups=static_groups).weight
    return q


def demo2_gptq(m: Model, settings=None) -> GPTQRealResult:
    """GPTQ (asymmetric, damp 0.01, lazy batches of 128) against RTN on every decoder linear,
    calibrated sequentially layer by layer on 2048 tokens. Notice how much more GPTQ buys at 3
    bits than at 4, and what act-order adds; at the last setting, act-order with static groups
    (groups of consecutive columns, as the authors' --static-groups) separates its two effects:
    the order of rounding, and which columns share a scale."""
    settings = m.workload.settings if settings is None else settings
    out, weights, rows, nlls = {}, {}, [], {}
    for bits, group in settings:
        rtn = rtn_weights(m, bits, group)
        nlls[("RTN", bits, group)] = nll(m, rtn)
        for act in (False, True):
            key = ("GPTQ-act" if act else "GPTQ", bits, group)
            new = calibrate_layers(m.model, m.calib_windows, gptq_quantizer(bits, group, act),
                                   desc=f"GPTQ INT{bits} g{group}" + (" act-order" if act else ""))
            nlls[key] = nll(m, new)
            if act and (bits, group) == settings[0]:    # kept for the tests (850 MB each)
                weights[key] = new
        out.update({k: float(np.exp(v.mean())) for k, v in nlls.items()})
        rows.append([f"INT{bits} g{group}", bits_per_weight(m, bits, group),
                     out[("RTN", bits, group)],
                     out[("GPTQ", bits, group)], out[("GPTQ-act", bits, group)],
                     llm.paired_ratio(nlls[("RTN", bits, group)],
                                      nlls[("GPTQ-act", bits, group)]).percent()])
    order = settings[-1]
    new = calibrate_layers(m.model, m.calib_windows, gptq_quantizer(*order, True, True),
                           desc=f"GPTQ INT{order[0]} g{order[1]} act-order, static groups")
    nlls[("GPTQ-static", *order)] = nll(m, new)
    out[("GPTQ-static", *order)] = float(np.exp(nlls[("GPTQ-static", *order)].mean()))
    return GPTQRealResult(m.reference_ppl, rows, out, (m.calib_windows.size, m.eval_windows.size),
                          weights, nlls, m.reference_nll, g_idx_bits(m), order)


def show_demo2(r: GPTQRealResult) -> None:
    print_header(_("Demo 2: GPTQ on SmolLM2-135M (every decoder linear, asymmetric)"))
    print(_("Reference (unquantized) perplexity: {reference:.2f}. Calibration: {calib} tokens, "
            "layer by layer;\nevaluation: {evaluation} other tokens.").format(
        reference=r.reference, calib=r.tokens[0], evaluation=r.tokens[1]))
    print_table([_("weights"), _("bits/weight"), "RTN", "GPTQ", _("GPTQ act-order"),
                 _("act-order against RTN")],
                [[s, f"{b:.3f}", f"{a:.2f}", f"{g:.2f}", f"{ga:.2f}", ch]
                 for s, b, a, g, ga, ch in r.rows])
    if r.order_setting is not None:
        bits, group = r.order_setting
        print("\n" + _("Act-order's two effects at INT{bits} g{group}:").format(bits=bits,
                                                                           group=group))
        print_table([_("original order"), _("act-order, static groups"),
                     _("act-order, groups in its order")],
                    [[f"{r.ppl[(k, bits, group)]:.2f}" for k in ("GPTQ", "GPTQ-static",
                                                                "GPTQ-act")]])
    c = gptq_counts(r)
    gain = {row[0]: row[2] - row[4] for row in r.rows}
    top = max(gain, key=gain.get)
    top_row = r.rows[[row[0] for row in r.rows].index(top)]
    print_observations([
        _("GPTQ beats RTN in {plain} of {n} settings ({plain_sure} beyond noise), with "
          "act-order in {act} of {n} ({act_sure} beyond noise); act-order is the better GPTQ in "
          "{act_better} of {n} ({act_better_sure} beyond noise). Float: {reference:.2f}.").format(
            plain=c["plain"], n=c["n"], act=c["act"], act_better=c["act_better"],
            plain_sure=c["plain_sure"], act_sure=c["act_sure"],
            act_better_sure=c["act_better_sure"], reference=r.reference),
        _("Act-order's gain over RTN is largest at {setting} ({rtn:.1f} -> {gptq:.1f}). "
          "Act-order, rounding the columns with the largest Hessian diagonal first, is a "
          "heuristic of the authors' repository (IST-DASLab/gptq, --act-order), not of the "
          "paper, whose section 3 finds that the order barely matters for large models. With "
          "groups it also regroups the columns by activation energy (groups form in the order "
          "of quantization), so its gain mixes order and grouping; the second table separates "
          "them.").format(setting=top, rtn=top_row[2], gptq=top_row[4]),
        _("Act-order stores that order too: a 32-bit group index per input column (g_idx) "
          "adds {g_idx:.3f} bits per weight to the table's bits for act-order.").format(
            g_idx=r.g_idx_bits),
    ] + ([] if r.order_setting is None else [order_observation(r)]))


def order_observation(r: GPTQRealResult) -> str:
    """The second table of demo 2 in words: act-order's rounding order alone (static groups)
    against plain GPTQ, and its regrouping on top, each with its paired interval."""
    bits, group = r.order_setting
    plain, static, act = (r.nll[(k, bits, group)] for k in ("GPTQ", "GPTQ-static", "GPTQ-act"))
    order, regroup = llm.paired_ratio(plain, static), llm.paired_ratio(static, act)
    return _("Static groups (the authors' --static-groups, AutoGPTQ's static_groups) fix every "
             "group's scale on consecutive columns of the original weights before any column is "
             "rounded, so act-order changes only the order of rounding: {plain:.2f} -> "
             "{static:.2f} ({order}, {order_verdict}). Groups formed in act-order's order also "
             "put columns of like activation energy under one scale: {static:.2f} -> {act:.2f} "
             "({regroup}, {regroup_verdict}). With static groups g_idx is column // group, which "
             "a kernel can compute instead of reading.").format(
        plain=r.ppl[("GPTQ", bits, group)], static=r.ppl[("GPTQ-static", bits, group)],
        act=r.ppl[("GPTQ-act", bits, group)], order=order.percent(),
        order_verdict=verdict(order), regroup=regroup.percent(), regroup_verdict=verdict(regroup))


def gptq_counts(r: GPTQRealResult) -> dict:
    """How many settings GPTQ (plain, act-order) beats RTN in, and act-order beats plain; the
    ``_sure`` counts only those beyond noise (95% interval over the evaluation windows)."""
    rows, n = r.rows, r.nll
    settings = list(dict.fromkeys((bits, group) for _m, bits, group in n))

    def wins(a, b, sure):
        count = 0
        for bits, group in settings:
            p = llm.paired_ratio(n[(a, bits, group)], n[(b, bits, group)])
            count += p.ratio < 1 and (not sure or not p.within_noise)
        return count
    return {"n": len(rows), "plain": wins("RTN", "GPTQ", False),
            "act": wins("RTN", "GPTQ-act", False), "act_better": wins("GPTQ", "GPTQ-act", False),
            "plain_sure": wins("RTN", "GPTQ", True), "act_sure": wins("RTN", "GPTQ-act", True),
            "act_better_sure": wins("GPTQ", "GPTQ-act", True)}


# ---------------------------------------------------------------------------------------------
# Demo 3: AWQ
# ---------------------------------------------------------------------------------------------
AWQ_GRID = 10                # alpha = 0, 0.1, ..., 0.9 (the reference: a grid of 20)


@dataclass
class AWQRealResult:
    rows: list        # [setting, RTN ppl, AWQ ppl, GPTQ act-order ppl]
    ppl: dict
    alphas: dict      # setting -> list of the chosen alpha of every layer group
    nll: dict = field(default_factory=dict)   # as ppl, NLL per window (GPTQ-act's too)
    tokens: tuple = (0, 0)   # calibration tokens: (AWQ per layer group, GPTQ)
    #: (bits, group) calibrated on the out-of-domain text too: keys ("AWQ-ood", bits, group)
    #: and ("GPTQ-act-ood", bits, group) in ppl and nll, on as many tokens as in-domain
    ood_setting: tuple | None = None


def awq_quantizer(bits: int, group: int):
    """``q(w, x)`` for calibrate_layers: numfmt.ptq.awq_search (α on a grid of AWQ_GRID, then
    the clip search) with :func:`weight_rtn` on all the calibration tokens ``x``."""
    def q(w, x):
        r = awq_search(w, x, lambda v: weight_rtn(v, bits, group), grid=AWQ_GRID,
                       clip_search=True, group_size=group)
        # float32, as the model will hold it: the settings' weights live at once
        return r._replace(weight=r.weight.astype(np.float32))
    return q


def demo3_awq(m: Model, gptq_result: GPTQRealResult | None = None,
              settings=None) -> AWQRealResult:
    """AWQ: per-input-channel scales s = mean|x|^α, α on a grid of 10, folded into the layer
    (the weight becomes Q(W·s)/s), then its clip search; calibrated on the float model's
    inputs (AWQ is not sequential), on GPTQ's calibration tokens. Notice how much a search
    over scales alone recovers; and, at the last setting, what calibrating on the evaluation
    text's own domain buys each method (the same number of tokens of another stdlib file)."""
    settings = m.workload.settings if settings is None else settings

    # AWQ calibrates on the float model's inputs: one pass serves every setting
    found = {}
    new = calibrate_layers(m.model, m.calib_windows, {s: awq_quantizer(*s) for s in settings},
                           sequential=False,
                           desc="AWQ " + ", ".join(f"INT{b} g{g}" for b, g in settings),
                           results=found)
    out, alphas, rows, nlls = {}, {}, [], {}
    for bits, group in settings:
        key = ("AWQ", bits, group)
        nlls[key] = nll(m, new[(bits, group)])
        out[key] = float(np.exp(nlls[key].mean()))
        alphas[key] = [r.alpha for (k, _, _), r in found.items() if k == (bits, group)]
        for method in ("RTN", "GPTQ-act"):
            if gptq_result is not None:
                nlls[(method, bits, group)] = gptq_result.nll[(method, bits, group)]
            elif method == "RTN":
                nlls[(method, bits, group)] = nll(m, rtn_weights(m, bits, group))
        rtn = float(np.exp(nlls[("RTN", bits, group)].mean()))
        out[("RTN", bits, group)] = rtn
        g = gptq_result.ppl[("GPTQ-act", bits, group)] if gptq_result else float("nan")
        rows.append([f"INT{bits} g{group}", rtn, out[("AWQ", bits, group)], g])
    ood = None
    if m.ood_windows is not None:
        ood = bits, group = settings[-1]
        nlls[("AWQ-ood", *ood)] = nll(m, calibrate_layers(
            m.model, m.ood_windows, awq_quantizer(*ood), sequential=False,
            desc=f"AWQ INT{bits} g{group}, out-of-domain"))
        if gptq_result is not None:
            nlls[("GPTQ-act-ood", *ood)] = nll(m, calibrate_layers(
                m.model, m.ood_windows, gptq_quantizer(*ood, True),
                desc=f"GPTQ INT{bits} g{group} act-order, out-of-domain"))
        out.update({k: float(np.exp(v.mean())) for k, v in nlls.items() if k[0].endswith("-ood")})
    return AWQRealResult(rows, out, alphas, nlls, (m.calib_windows.size, m.calib_windows.size),
                         ood)


def show_demo3(r: AWQRealResult) -> None:
    print_header(_("Demo 3: AWQ, activation-aware scales (weight-only)"))
    print(_("Calibration: {awq} tokens for AWQ's search, {gptq} for GPTQ's Hessians (the same "
            "windows).").format(awq=r.tokens[0], gptq=r.tokens[1]))
    print_table([_("weights"), "RTN", _("AWQ (scales + clip)"), _("GPTQ act-order")],
                [[s, f"{a:.2f}", f"{b:.2f}", f"{g:.2f}"] for s, a, b, g in r.rows])
    if r.ood_setting is not None:
        show_ood(r)
    key = next(iter(r.alphas))
    al = np.array(r.alphas[key])
    settings = [(b, g) for _m, b, g in r.alphas]
    sure = {other: sum(not llm.paired_ratio(r.nll[(other, b, g)], r.nll[("AWQ", b, g)])
                       .within_noise for b, g in settings if (other, b, g) in r.nll)
            for other in ("RTN", "GPTQ-act")}
    print_observations([
        _("AWQ beats RTN in {wins} of {n} settings ({sure} of the differences beyond noise); "
          "the α it picks ({setting}) spans {low:.2f} to "
          "{high:.2f} over the {groups} layer groups, median {median:.2f}: the channels that see "
          "large activations get larger weights, so their rounding error shrinks relative to "
          "them (Lin et al. 2024, section 3.2).").format(
            wins=sum(row[2] < row[1] for row in r.rows), n=len(r.rows), sure=sure["RTN"],
            setting=f"{key[0]} INT{key[1]} g{key[2]}", low=al.min(), high=al.max(),
            groups=len(al), median=np.median(al)),
        _("AWQ needs no Hessian and no error feedback: one search per layer group. Here it beats "
          "GPTQ with act-order in {wins} of {n} settings ({sure} of the differences beyond "
          "noise), on the same calibration tokens: AWQ searched on {awq_tokens} tokens per layer "
          "group, GPTQ accumulated its Hessians over {gptq_tokens}, both from other windows of "
          "the evaluation's document. The two combine in practice (AWQ's scales, then GPTQ's "
          "rounding).")
        .format(wins=sum(row[2] < row[3] for row in r.rows), n=len(r.rows),
                sure=sure["GPTQ-act"], awq_tokens=r.tokens[0], gptq_tokens=r.tokens[1]),
    ] + ([] if r.ood_setting is None else [ood_observation(r)]))


OOD_METHODS = (("AWQ", "AWQ"), ("GPTQ-act", N_("GPTQ act-order")))   # key, printed label


def ood_rows(r: AWQRealResult) -> list:
    """[label, in-domain ppl, out-of-domain ppl, PairedRatio out / in] of the methods that
    were calibrated on both texts at ``r.ood_setting``."""
    bits, group = r.ood_setting
    rows = []
    for key, name in OOD_METHODS:
        inside, outside = (key, bits, group), (f"{key}-ood", bits, group)
        if outside in r.nll:
            rows.append([name, float(np.exp(r.nll[inside].mean())), r.ppl[outside],
                         llm.paired_ratio(r.nll[inside], r.nll[outside])])
    return rows


def show_ood(r: AWQRealResult) -> None:
    bits, group = r.ood_setting
    print("\n" + _("Calibration text at INT{bits} g{group}, {tokens} tokens each: other windows "
                   "of the language reference\n(in-domain) or the source of the stdlib's "
                   "{module}.py (out-of-domain):").format(
        bits=bits, group=group, tokens=r.tokens[1], module=llm.OOD_MODULE))
    print_table([_("method"), _("in-domain"), _("out-of-domain"), _("change")],
                [[_(name), f"{a:.2f}", f"{b:.2f}", p.percent()] for name, a, b, p in ood_rows(r)])


def ood_observation(r: AWQRealResult) -> str:
    """What in-domain calibration buys, in words, from :func:`ood_rows`."""
    rows = ood_rows(r)
    changes = _("; ").join(_("{method} {inside:.2f} -> {outside:.2f} ({change}, {verdict})").format(
        method=_(name), inside=a, outside=b, change=p.percent(), verdict=verdict(p))
        for name, a, b, p in rows)
    worse = [_(name) for name, _a, _b, p in rows if not p.within_noise and p.ratio > 1]
    better = [_(name) for name, _a, _b, p in rows if not p.within_noise and p.ratio < 1]
    tail = []
    # TRANSLATORS: the separator between the items of a list inside a sentence
    if worse:
        tail.append(_("In-domain calibration buys {methods} a gain beyond noise.").format(
            methods=_(", ").join(worse)))
    if better:
        tail.append(_("{methods} does better calibrated out of domain, beyond noise.").format(
            methods=_(", ").join(better)))
    if not tail:
        tail.append(_("Neither change is beyond noise: here calibrating in the evaluation's "
                      "domain buys nothing these windows can measure."))
    return _("Calibrated on {module}.py instead of the language reference (as many tokens): "
             "{changes}. {tail} The papers calibrate on web text (GPTQ on C4, AWQ on the Pile) "
             "and evaluate on other text (Frantar et al. 2023, section 5; Lin et al. 2024, "
             "section 5.1).").format(module=llm.OOD_MODULE, changes=changes,
                                     tail=" ".join(tail))


# ---------------------------------------------------------------------------------------------
# Demo 4: activations too: SmoothQuant (W8A8), a Hadamard rotation (W4A4), LLM.int8()
# ---------------------------------------------------------------------------------------------
SMOOTH_ALPHAS = (0.25, 0.5, 0.75)
SMOOTHED = ("attn_in", "mlp_in")   # linears after an RMSNorm, where s folds into its gain


def _linear_stats(m: Model) -> dict:
    """Per-input-channel absmax of every decoder linear on the calibration windows."""
    return {n: s.absmax for n, s in
            llm.capture_linear_inputs(m.model, m.calib_windows).items()}


def _per_tensor(x, bits: int = 8):
    """Dynamic per-tensor symmetric INT``bits`` of a (tokens, in) float32 tensor."""
    return quantize_int(np.asarray(x, np.float64), bits).values


def _per_token(x, bits: int):
    return quantize_int(np.asarray(x, np.float64), bits, granularity="channel").values


def _group_head(name: str) -> str:
    """The first linear of the group that reads the same tensor as linear ``name``."""
    parts = name.split(".")                       # model.layers.<i>.<self_attn|mlp>.<kind>
    prefix, local = ".".join(parts[:3]), ".".join(parts[3:])
    return f"{prefix}.{next(ns[0] for ns in INPUT_GROUPS.values() if local in ns)}"


@dataclass
class ActivationResult:
    smooth_rows: list      # [alpha or "none", W8A8 per-tensor ppl]
    smooth_ppl: dict
    rotation_rows: list    # [setting, ppl without rotation, ppl with Hadamard]
    rotation_ppl: dict
    outlier: dict          # last down_proj input: max/median channel absmax, before and after H
    int8_rows: list        # [kind, channels in float (%), LLM.int8 error, INT8 per-token error]
    int8_float_share: float  # share of all decoder input channels with |x| > 6 somewhere
    smooth_nll: dict = field(default_factory=dict)     # as smooth_ppl, NLL per window
    rotation_nll: dict = field(default_factory=dict)   # as rotation_ppl


def _smoothing_scales(m: Model, stats: dict, weights: dict, alpha: float) -> dict:
    """SmoothQuant's s per linear name (shared by the linears that read one RMSNorm output)."""
    scales = {}
    for li in range(len(m.model.model.layers)):
        for g in SMOOTHED:
            names = [f"model.layers.{li}.{n}" for n in INPUT_GROUPS[g]]
            wmax = np.max([np.abs(weights[n]).max(axis=0) for n in names], axis=0)
            s = smoothquant_scales(stats[names[0]], wmax, alpha)
            scales.update({n: s for n in names})
    return scales


def w8a8_smoothquant(m: Model, stats: dict, weights: dict, alpha: float | None) -> np.ndarray:
    """W8A8: INT8 weights per output channel, INT8 activations per tensor (dynamic), with the
    smoothed linears computing Q(x/s)·Q(W·s)ᵀ (``alpha=None``: no smoothing). Returns the NLL
    per evaluation window (:func:`nll`)."""
    scales = {} if alpha is None else _smoothing_scales(m, stats, weights, alpha)
    one = {n: np.ones(w.shape[1]) for n, w in weights.items()}
    s = {**one, **scales}
    # numfmt.ptq.rtn_values per row: quantize_int(..., granularity="channel")'s values, bit for bit
    wq = map_items(lambda n, w: rtn_values(w * s[n], 8, symmetric=True) / s[n], weights)

    def act(x, name):
        return _per_tensor(np.asarray(x, np.float64) / s[name]) * s[name]

    return nll(m, wq, act)


HADAMARD_FACTORS = {576: (16, 36), 1536: (128, 12)}   # n = 2^k · m, as numfmt.ptq.hadamard builds


def rotate(x, n: int, transpose: bool = False):
    """``x @ hadamard(n)`` (or ``@ hadamard(n).T``) for a torch tensor (..., n), through the
    Kronecker factors ``hadamard(n) = hadamard(2^k) ⊗ hadamard(m)``: n·(2^k + m) operations
    per row instead of n²."""
    import torch
    p, q = HADAMARD_FACTORS[n]
    hp = torch.as_tensor(hadamard(p), dtype=x.dtype, device=x.device)
    hq = torch.as_tensor(hadamard(q), dtype=x.dtype, device=x.device)
    if transpose:
        hp, hq = hp.T, hq.T
    y = torch.einsum("...kl,ki,lj->...ij", x.reshape(*x.shape[:-1], p, q), hp, hq)
    return y.reshape(x.shape)


def w4a4(m: Model, weights: dict, rotated: bool, group: int = 32,
         prepared: dict | None = None) -> np.ndarray:
    """W4A4: INT4 weights and activations, symmetric, groups of ``group`` along the input
    (dynamic activation scales per token and group). ``rotated``: every linear's input is
    multiplied online by a Hadamard matrix H and its weight fused with it (W·H, what
    numfmt.ptq.fuse_rotation returns), so the quantized layer computes Q(x·H)·Q(W·H)ᵀ, equal
    to x·Wᵀ before rounding. The products with H go through :func:`rotate`'s Kronecker
    factors; Q is numfmt.ptq.rtn_values, quantize_int's group values bit for bit.
    ``prepared``: the weights the harness should hold instead (name -> (out, in)), already
    quantized, for the rotated model Q(W·H)·Hᵀ (:func:`rotated_gptq`'s). Returns the NLL per
    evaluation window (:func:`nll`)."""
    import torch

    def rot(a, transpose=False):
        return rotate(torch.from_numpy(a), a.shape[-1], transpose).numpy()

    def weight(name, w):
        # the harness multiplies its input by the weight it holds: hand it Q(W·H)·Hᵀ and the
        # activations Q(x·H)·Hᵀ, whose product is Q(x·H)·Q(W·H)ᵀ
        q = rtn_values(rot(w) if rotated else w, 4, group, symmetric=True)
        return rot(q, transpose=True) if rotated else q

    def act(x, name):
        xr = rotate(x, x.shape[-1]) if rotated else x
        q = torch.as_tensor(rtn_values(xr.double().numpy(), 4, group, symmetric=True),
                            dtype=x.dtype)
        return rotate(q, x.shape[-1], transpose=True) if rotated else q

    return nll(m, map_items(weight, weights) if prepared is None else prepared, act)


def rotated_gptq(bits: int = 4, group: int = 32):
    """``q(w, x)`` for calibrate_layers: GPTQ on the rotated layer (weights W·H, Hessian of
    the rotated inputs x·H), symmetric with the restricted grid of :func:`w4a4`'s RTN (equal to
    it for a diagonal Hessian); returns Q(W·H)·Hᵀ, the weight the harness holds for a rotated
    linear (the function x·Wᵀ up to rounding, so later layers calibrate on float inputs)."""
    import torch

    def rot(a, transpose=False):
        return rotate(torch.from_numpy(np.ascontiguousarray(a)), a.shape[-1], transpose).numpy()

    def q(w, x):
        r = gptq(rot(w), hessian(rot(x)), bits, group, symmetric=True)
        return rot(r.weight, transpose=True)
    return q


def demo4_activations(m: Model) -> ActivationResult:
    """SmoothQuant's α sweep for W8A8 with per-tensor activation scales; a Hadamard rotation
    for W4A4; LLM.int8()'s decomposition on the real inputs. Notice how one outlier channel
    dictates every method's design."""
    weights = float_weights(m)
    stats = _linear_stats(m)
    smooth_nll = {None: w8a8_smoothquant(m, stats, weights, None)}
    for a in progress(SMOOTH_ALPHAS, "SmoothQuant α"):
        smooth_nll[a] = w8a8_smoothquant(m, stats, weights, a)
    smooth = {a: float(np.exp(v.mean())) for a, v in smooth_nll.items()}
    smooth_rows = [["none" if a is None else f"{a:.2f}", v] for a, v in smooth.items()]
    rot_nll = {r: w4a4(m, weights, r) for r in progress((False, True), "W4A4")}
    rot_nll["GPTQ"] = w4a4(m, weights, True, prepared=calibrate_layers(
        m.model, m.calib_windows, rotated_gptq(4, 32), desc="GPTQ INT4 g32, rotated"))
    rot = {r: float(np.exp(v.mean())) for r, v in rot_nll.items()}
    rotation_rows = [["W4A4 INT4 g32", rot[False], rot[True]],
                     ["W4A4 INT4 g32, GPTQ weights", None, rot["GPTQ"]]]

    last = f"model.layers.{len(m.model.model.layers) - 1}.mlp.down_proj"
    # one pass over the first calibration window for the last down_proj and the table's
    # linears (the last down_proj is among them)
    inputs = llm.capture_linear_inputs(m.model, m.calib_windows[:1],
                                       [f"model.layers.{li}.{n}" for li in (0, 15, 29)
                                        for n in ("self_attn.q_proj", "mlp.down_proj")],
                                       keep_inputs=True)
    x = inputs[last].inputs.astype(np.float64)
    before = np.abs(x).max(axis=0)
    after = np.abs(x @ hadamard(x.shape[1])).max(axis=0)
    outlier = {"name": last, "before_max": float(before.max()),
               "before_median": float(np.median(before)), "after_max": float(after.max()),
               "after_median": float(np.median(after))}

    int8_rows, n_float, n_all = [], 0, 0
    for n, s in inputs.items():
        xs, w = s.inputs.astype(np.float64), weights[n]
        r = llm_int8_matmul(xs, w)
        exact = xs @ w.T
        plain = llm_int8_matmul(xs, w, threshold=np.inf).output
        li, kind = llm.layer_of(n)
        int8_rows.append([f"layer {li} {kind}", r.outliers.mean(),
                          rel_error(r.output, exact), rel_error(plain, exact)])
    for n, a in stats.items():
        n_float += int((a > 6.0).sum())
        n_all += a.size
    return ActivationResult(smooth_rows, smooth, rotation_rows, rot, outlier, int8_rows,
                            n_float / n_all, smooth_nll, rot_nll)


def show_demo4(r: ActivationResult) -> None:
    print_header(_("Demo 4: activations too: SmoothQuant, Hadamard rotation, LLM.int8()"))
    print(_("W8A8: INT8 weights per output channel, INT8 activations with one dynamic scale per "
            "tensor;\nSmoothQuant on the linears after an RMSNorm (q, k, v, gate, up)."))
    print_table([_("SmoothQuant α"), _("perplexity")],
                [[label(a), f"{v:.2f}"] for a, v in r.smooth_rows])
    best = min((v, a) for a, v in r.smooth_ppl.items() if a is not None)
    runner_up = sorted((v, a) for a, v in r.smooth_ppl.items() if a is not None)[1]
    tie = llm.paired_ratio(r.smooth_nll[best[1]], r.smooth_nll[runner_up[1]])
    rotation = llm.paired_ratio(r.rotation_nll[False], r.rotation_nll[True])
    rotation_gptq = llm.paired_ratio(r.rotation_nll[True], r.rotation_nll["GPTQ"])
    print()
    print_table([_("setting"), _("no rotation"), _("Hadamard rotation")],
                [[label(s), "—" if a is None else f"{a:.2f}", f"{b:.2f}"]
                 for s, a, b in r.rotation_rows])
    o = r.outlier
    print()
    print_table([_("linear (one window)"), _("channels in float"), _("LLM.int8() error"),
                 _("INT8 per-token error")],
                [[label(n), f"{f * 100:.2f}%", f"{a * 100:.3f}%", f"{b * 100:.3f}%"]
                 for n, f, a, b in r.int8_rows])
    print_observations([
        _("W8A8 with per-tensor activation scales gives {plain:.2f} without smoothing; "
          "SmoothQuant moves part of each outlier channel's range into the weights, best here at "
          "α = {alpha:.2f} ({best:.2f}; α = {next_alpha:.2f} gives {next_ppl:.2f}, {change}, "
          "{verdict}) (Xiao et al. 2023, section 4). Only the linears after an RMSNorm are "
          "smoothed: the massive inputs of down_proj (lecture 08) keep one per-tensor "
          "scale.").format(
            plain=r.smooth_ppl[None], alpha=best[1], best=best[0], next_alpha=runner_up[1],
            next_ppl=runner_up[0], change=tie.percent(), verdict=verdict(tie)),
        _("{name}: its input's largest channel absmax is {before_max:.0f} against a median "
          "channel of {before_median:.1f}; after the Hadamard rotation {after_max:.1f} against "
          "{after_median:.1f}. The function is unchanged; W4A4 goes from {plain:.1f} to "
          "{rotated:.1f} ({change}, {verdict}). This is a Hadamard rotation, QuaRot's idea "
          "(Ashkboos et al. 2024), not its recipe, which fuses randomized Hadamards into the "
          "weights offline and rounds them with GPTQ.").format(
            name=o["name"], before_max=o["before_max"], before_median=o["before_median"],
            after_max=o["after_max"], after_median=o["after_median"],
            plain=r.rotation_ppl[False], rotated=r.rotation_ppl[True],
            change=rotation.percent(), verdict=verdict(rotation)),
        _("GPTQ instead of round-to-nearest for the rotated weights (Hessians of the rotated "
          "inputs, calibrated layer by layer as in demo 2; the activations still rounded to "
          "nearest): {rotated:.2f} -> {gptq:.2f} ({change}, {verdict}).").format(
            rotated=r.rotation_ppl[True], gptq=r.rotation_ppl["GPTQ"],
            change=rotation_gptq.percent(), verdict=verdict(rotation_gptq)),
        _("LLM.int8() keeps {share:.2f}% of all decoder input channels in float (|x| > 6 "
          "somewhere in the calibration tokens). On the layers above, where it keeps any channel "
          "in float its error is below plain per-token INT8's in {better} of {with_float}; "
          "elsewhere it is plain INT8 (Dettmers et al. 2022, section 3).").format(
            share=r.int8_float_share * 100,
            better=sum(a < b for _n, f, a, b in r.int8_rows if f > 0),
            with_float=sum(f > 0 for _n, f, _a, _b in r.int8_rows)),
    ])


# ---------------------------------------------------------------------------------------------
# Demo 5: calibrating activation ranges; static against dynamic
# ---------------------------------------------------------------------------------------------
#: label -> (clip of a float64 (tokens, in) input, whether it runs on threads). KL's search is
#: a Python loop over its candidates, which holds the GIL (slower on 2 threads than on one), so
#: it runs on one.
CALIBRATORS = {
    "min-max": (lambda x: float(np.abs(x).max()), True),
    "percentile 99.99": (lambda x: calibrate_percentile(x, 99.99), True),
    "MSE": (lambda x: calibrate_mse(x, 8, grid=20), True),
    # TensorRT's entropy calibrator histograms into 2048 bins (Migacz 2017, slide 29)
    "KL (entropy)": (lambda x: calibrate_kl(x, 8, bins=2048), False),
}


@dataclass
class CalibrationResult:
    rows: list       # [method, static per-tensor W8A8 ppl]
    ppl: dict        # method -> ppl; also "dynamic per-tensor", "dynamic per-token"
    clip_ratio: dict  # method -> median over linears of clip / max|x|
    tokens: int       # calibration tokens
    nll: dict = field(default_factory=dict)   # as ppl, NLL per evaluation window
    smoothquant: tuple | None = None  # demo 4's best SmoothQuant: (α, ppl, NLL per window)


def demo5_calibration(m: Model, tokens: int = 512,
                      activations: ActivationResult | None = None) -> CalibrationResult:
    """W8A8 with static per-tensor activation scales fixed on calibration tokens by four
    calibrators, against dynamic scales computed on every batch. Notice what cutting the
    tail buys a per-tensor scale, and what per-token scales buy without any calibration.

    ``activations``: demo 4's result, when measured. Its W8A8 without smoothing is the model
    with dynamic per-tensor scales here (s = 1 leaves its weights and activations bit for bit
    as here), so it is not measured twice; and its best SmoothQuant is compared with
    per-token scales."""
    weights = float_weights(m)
    wq = map_items(lambda n, w: rtn_values(w, 8, symmetric=True), weights)   # as in demo 4
    names = [n for n in weights if any(n.endswith(ns[0]) for ns in INPUT_GROUPS.values())]
    windows = m.calib_windows[:max(1, tokens // m.calib_windows.shape[1])]
    caps = llm.capture_linear_inputs(m.model, windows, names, keep_inputs=True)
    nlls, ratio = {}, {}
    for method in progress(CALIBRATORS, _("calibrators")):
        calibrate, threaded = CALIBRATORS[method]

        def clip(n, c, calibrate=calibrate):
            return calibrate(c.inputs.astype(np.float64))
        clips = (map_items(clip, caps) if threaded
                 else {n: clip(n, c) for n, c in caps.items()})
        ratio[method] = float(np.median([clips[n] / np.abs(caps[n].inputs).max()
                                         for n in caps]))

        def act(x, name, clips=clips):
            t = clips[_group_head(name)]
            scale = t / 127
            return np.clip(np.rint(np.asarray(x, np.float64) / scale), -127, 127) * scale

        nlls[method] = nll(m, wq, act)
    nlls["dynamic per-tensor"] = (nll(m, wq, lambda x, n: _per_tensor(x))
                                  if activations is None else activations.smooth_nll[None])
    nlls["dynamic per-token"] = nll(m, wq, lambda x, n: _per_token(x, 8))
    out = {k: float(np.exp(v.mean())) for k, v in nlls.items()}
    rows = [[k, v] for k, v in out.items()]
    smoothquant = None
    if activations is not None:
        p, alpha = min((v, a) for a, v in activations.smooth_ppl.items() if a is not None)
        smoothquant = (alpha, p, activations.smooth_nll[alpha])
    return CalibrationResult(rows, out, ratio, int(caps[names[0]].n_tokens), nlls, smoothquant)


def show_demo5(r: CalibrationResult) -> None:
    print_header(_("Demo 5: activation ranges: min-max, percentile, MSE, KL; static vs dynamic"))
    print(_("W8A8, INT8 weights per output channel; activations INT8 symmetric, with a static "
            "scale per linear\n(calibrated on {tokens} tokens) or a dynamic one.").format(
        tokens=r.tokens))
    print_table([_("activation scale"), _("median clip / max|x|"), _("perplexity")],
                [[label(k), f"{r.clip_ratio[k]:.3f}" if k in r.clip_ratio else "—", f"{v:.2f}"]
                 for k, v in r.rows])
    static = {k: r.ppl[k] for k in CALIBRATORS}
    best, worst = min(static, key=static.get), max(static, key=static.get)
    hardest = min(r.clip_ratio, key=r.clip_ratio.get)
    print_observations([
        _("Among static scales {best} does best ({best_ppl:.2f}) and {worst} worst "
          "({worst_ppl:.2f}; min-max {minmax_ppl:.2f}). The calibrator that clips hardest, "
          "{hardest} (to {hardest_ratio:.2f} of max|x| for the median linear), gives "
          "{hardest_ppl:.2f}: in this model the largest activations are the massive ones it "
          "relies on (lecture 08), not noise in a tail.").format(
            best=label(best), best_ppl=static[best], worst=label(worst),
            worst_ppl=static[worst], minmax_ppl=static["min-max"], hardest=label(hardest),
            hardest_ratio=r.clip_ratio[hardest], hardest_ppl=static[hardest]),
        _("Dynamic scales need no calibration: per tensor {per_tensor:.2f}, per token "
          "{per_token:.2f}, at the cost of an absmax over every activation tensor at run time.")
        .format(per_tensor=r.ppl["dynamic per-tensor"], per_token=r.ppl["dynamic per-token"]),
    ] + ([] if r.smoothquant is None else [
        _("Per-token INT8 without any smoothing ({per_token:.2f}) against demo 4's best "
          "SmoothQuant with per-tensor scales (α = {alpha:.2f}, {smooth:.2f}): {change}, "
          "{verdict}. Per-token scales also cover the massive down_proj inputs that SmoothQuant "
          "leaves unsmoothed.").format(
            per_token=r.ppl["dynamic per-token"], alpha=r.smoothquant[0],
            smooth=r.smoothquant[1],
            change=llm.paired_ratio(r.smoothquant[2], r.nll["dynamic per-token"]).percent(),
            verdict=verdict(llm.paired_ratio(r.smoothquant[2], r.nll["dynamic per-token"])))]))


# ---------------------------------------------------------------------------------------------
# Demo 6: summary
# ---------------------------------------------------------------------------------------------
def demo6_summary(m: Model, g: GPTQRealResult, a: AWQRealResult) -> list:
    """Method × bits -> perplexity, bits per weight and what calibration costs."""
    n = m.calib_windows.size
    cost = {"RTN": "none",
            "AWQ": f"{n} tokens, {AWQ_GRID} α × {AWQ_GRID // 2} clips",
            "GPTQ": f"{n} tokens, Hessians, sequential",
            "GPTQ-act": f"{n} tokens, as GPTQ, by diag H"}
    extra = {"GPTQ-act": g.g_idx_bits}      # act-order's g_idx
    rows = [["float32 (reference)", "32", f"{m.reference_ppl:.2f}", "—"]]
    for bits, group in m.workload.settings:
        for method in ("RTN", "AWQ", "GPTQ", "GPTQ-act"):
            v = g.ppl.get((method, bits, group), a.ppl.get((method, bits, group)))
            b = bits_per_weight(m, bits, group) + extra.get(method, 0.0)
            rows.append([f"{method} INT{bits} g{group}", f"{b:.3f}", f"{v:.2f}", cost[method]])
    return rows


def show_demo6(rows: list) -> None:
    print_header(_("Demo 6: summary: method × bits -> perplexity"))
    print_table([_("method"), _("bits/weight"), _("perplexity"), _("calibration")],
                [[label(m), b, p, label(c)] for m, b, p, c in rows])
    print_observations([
        _("Bits per weight count an FP16 scale and a b-bit zero point per group (GPTQ's "
          "storage), and act-order's 32-bit g_idx per input column. The checkpoint itself was "
          "stored as Q4_1 (lecture 08): its weights already sit on a 4-bit grid per block of "
          "32, which favours re-quantizing them with small groups; how the methods compare on a "
          "float checkpoint is not measured here."),
    ])


# ---------------------------------------------------------------------------------------------
# Helpers: RTN weights and their storage
# ---------------------------------------------------------------------------------------------
def weight_rtn(w: np.ndarray, bits: int, group: int) -> np.ndarray:
    """Round-to-nearest, asymmetric, groups of ``group`` input columns (the last group of a
    576-input linear holds 64 columns when group = 128: 576 = 4 · 128 + 64): numfmt.ptq.rtn's
    weights, through its values-only twin (AWQ's search calls this 14 times per layer group)."""
    return rtn_values(w, bits, group, symmetric=False, partial_last_group=True)


def rtn_weights(m: Model, bits: int, group: int) -> dict:
    """Every decoder linear quantized by :func:`weight_rtn`."""
    return map_items(lambda n, w: weight_rtn(w, bits, group), float_weights(m))


def g_idx_bits(m: Model) -> float:
    """Act-order's extra storage: one 32-bit group index per input column of every decoder
    linear (GPTQ's g_idx, numfmt.packing.gptq), per weight."""
    shapes = [tuple(mod.weight.shape) for mod in llm.decoder_linears(m.model).values()]
    return sum(32 * i for _o, i in shapes) / sum(o * i for o, i in shapes)


def bits_per_weight(m: Model, bits: int, group: int) -> float:
    """Storage of every decoder linear with an FP16 scale and a b-bit zero point per row and
    group (GPTQ's checkpoint layout, numfmt.packing.gptq), averaged over all their weights."""
    shapes = [tuple(mod.weight.shape) for mod in llm.decoder_linears(m.model).values()]
    total = sum(o * i for o, i in shapes)
    meta = sum(o * -(-i // group) * (16 + bits) for o, i in shapes)
    return bits + meta / total




if __name__ == "__main__":
    run_lecture(main, build_parser)
