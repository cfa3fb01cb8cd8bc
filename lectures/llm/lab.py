"""A lab bench for weight, activation and KV formats: the model, its text windows, perplexity.

:class:`Lab` holds the loaded checkpoint and the evaluation and calibration windows of a
:class:`~lectures.llm.workload.Workload`, and measures perplexity with any mix of quantized
weights, linear inputs and KV cache in place (:meth:`Lab.ppl`). Quantized weights can be kept
for planned reuse, so a lecture that uses one format in several demos quantizes it once.

Every perplexity is computed in float64, on a float64 copy of the float32 model (the same
weight values). In float32 the matmuls, reductions and exponentials of the forward pass round
differently on different CPUs, BLAS libraries and thread counts, and a quantizer of the
activations or the KV cache turns a last-bit difference of its input into another code, and a
row of lecture 08 with quantized activations would print other perplexities on other machines.
In float64 the same differences are 2^29 times smaller, and the printed figures are the same
on every machine (tests/test_blas_independence.py runs them under a second configuration).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import queue
import threading
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from lectures.llm.checkpoint import Checkpoint, load_checkpoint
from lectures.llm.evaluate import window_nll
from lectures.llm.hooks import (quantized_inputs, quantized_kv, quantized_weight_tensors,
                                swapped_weights)
from lectures.llm.quantizers import WeightFormat
from lectures.llm.text import calibration_windows, corpus_tokens, eval_windows
from lectures.llm.workload import FULL, Workload

__all__ = ["Lab", "float64_copy", "open_lab"]


def float64_copy(model):
    """A float64 copy of a (float32) transformers Llama model: the same weight values, each
    held exactly, and every activation, sum and function of the forward pass in float64;
    ``model`` itself is not changed. The lectures measure on such a copy (module docstring:
    why).

    transformers computes two things in float32 whatever the model's dtype: the RMSNorms (the
    input is cast to float32, normalized, and cast back) and the rotary embedding's angles,
    cos and sin. In the copy they compute in float64 (:func:`_norm_forward`,
    :func:`_rotary_forward`). Otherwise every norm rounds its output to float32, and a
    last-bit difference of a float64 sum upstream (another CPU's kernels) now and then crosses
    a float32 rounding boundary there, a jump of 2^-24 that GPTQ's sequential calibration
    carries on to other codes; and the float32 angles position x frequency are off by up to
    1.5e-5 rad at position 511 (so are their cos and sin), computed by float32 kernels that
    differ by CPU (measured: 1.53e-5 rad, 1.49e-5 in cos).

    The float64 copy is the model's mathematics in float64, norms and angles included.

    Raises
    ------
    TypeError
        If the model has no Llama RMSNorm or rotary embedding to compute in float64 (another
        architecture, or a transformers version whose classes changed).
    """
    import torch
    copy64 = copy.deepcopy(model).to(torch.float64)
    found = Counter()
    for module in copy64.modules():
        kind = _float64_kind(module)
        if kind:
            module.__class__ = _float64_class(type(module), kind)
            found[kind] += 1
    if not (found["norm"] and found["rotary"]):
        raise TypeError("float64_copy computes a Llama model's RMSNorms and rotary embedding "
                        f"in float64; found {dict(found) or 'neither'} in "
                        f"{type(model).__name__}")
    return copy64


def _float64_kind(module) -> str | None:
    """"norm" for a transformers Llama RMSNorm, "rotary" for its rotary embedding (already
    made float64 or not), None otherwise."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding
    if isinstance(module, LlamaRMSNorm):
        return "norm"
    if isinstance(module, LlamaRotaryEmbedding):
        return "rotary"
    return None


def _norm_forward(self, hidden_states):
    """LlamaRMSNorm.forward without its cast to float32: the same steps in the input's dtype."""
    import torch
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    return self.weight * (hidden_states * torch.rsqrt(variance + self.variance_epsilon))


def _rotary_forward(self, x, position_ids):
    """LlamaRotaryEmbedding.forward with the angles, cos and sin in float64 (the positions
    times the float32 inverse frequencies are exact there) instead of float32; transformers'
    ``dynamic_rope_update`` still recomputes ``inv_freq`` first for the RoPE types that need
    it (:func:`_float64_class` wraps this in it)."""
    import torch
    freqs = position_ids[..., None].to(torch.float64) * self.inv_freq.to(x.device, torch.float64)
    emb = torch.cat((freqs, freqs), dim=-1)
    return ((emb.cos() * self.attention_scaling).to(x.dtype),
            (emb.sin() * self.attention_scaling).to(x.dtype))


_FLOAT64_CLASSES: dict = {}   # transformers' class -> its float64 subclass


def _float64_class(cls, kind: str):
    """A subclass of ``cls`` whose forward is :func:`_norm_forward` or
    :func:`_rotary_forward`: a copy made of it (copy.deepcopy) keeps it."""
    if cls in _FLOAT64_CLASSES.values():
        return cls
    if cls not in _FLOAT64_CLASSES:
        if kind == "norm":
            forward = _norm_forward
        else:
            from transformers.modeling_rope_utils import dynamic_rope_update
            forward = dynamic_rope_update(_rotary_forward)
        _FLOAT64_CLASSES[cls] = type(f"Float64{cls.__name__}", (cls,),
                                     {"forward": forward, "__module__": __name__,
                                      "__doc__": f"{cls.__name__} computing in float64."})
    return _FLOAT64_CLASSES[cls]


@dataclass
class Lab:
    """The model and the text, loaded once; every measurement goes through :meth:`ppl`."""

    checkpoint: Checkpoint
    tokens: np.ndarray
    workload: Workload
    eval: np.ndarray = field(init=False)           # (n_eval, seq_len) token ids
    calib: np.ndarray = field(init=False)          # (n_calib, seq_len), disjoint from eval
    progress: object = None                        # a console.progress bar, or None
    #: the forward pass's dtype: "float64" (the lectures), or "float32" to run the checkpoint's
    #: model itself (whose quantized perplexities depend on the CPU's kernels)
    dtype: str = "float64"
    _reference: np.ndarray | None = field(default=None, init=False, repr=False)
    _weight_norm2: float | None = field(default=None, init=False, repr=False)  # Σ W² (float64)
    #: weight format (label blanked) -> planned uses left; a lecture fills it from its plan
    reuse: Counter = field(default_factory=Counter, repr=False)
    #: how many measurements :meth:`map` runs at once, each on a float64 copy of its own
    workers: int = 1
    _weights: dict = field(default_factory=dict, init=False, repr=False)  # format -> tensors
    _model64: object = field(default=None, init=False, repr=False)
    _copies: list = field(default_factory=list, init=False, repr=False)   # more for map()
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _format_locks: dict = field(default_factory=dict, init=False, repr=False)  # format -> Lock

    def __post_init__(self):
        if self.dtype not in ("float64", "float32"):
            raise ValueError(f"dtype must be 'float64' or 'float32', got {self.dtype!r}")
        if isinstance(self.workers, bool) or not isinstance(self.workers, int) \
                or self.workers < 1:
            raise ValueError(f"workers must be a positive integer, got {self.workers!r}")
        w = self.workload
        self.eval = eval_windows(self.tokens, w.n_eval, w.seq_len)
        self.calib = calibration_windows(self.tokens, w.n_calib, w.seq_len)

    @property
    def model(self):
        """The model every measurement runs: a float64 copy of the checkpoint's float32 model,
        with the same weight values (made on first use; the checkpoint's model is not
        changed), or with ``dtype="float32"`` the checkpoint's model. Hooks for activations
        and the KV cache go on this one. Inside :meth:`map`, each thread's own copy."""
        mine = getattr(self._local, "model", None)
        if mine is not None:
            return mine
        if self.dtype == "float32":
            return self.checkpoint.model
        if self._model64 is None:
            self._model64 = float64_copy(self.checkpoint.model)
        return self._model64

    @property
    def float32_model(self):
        """The checkpoint's float32 model: the weights as stored, which quantizers read."""
        return self.checkpoint.model

    @property
    def reference_nll(self) -> np.ndarray:
        """The unquantized model's NLL per evaluation window (computed once)."""
        if self._reference is None:
            self._reference = self.nll()
        return self._reference

    @property
    def reference(self) -> float:
        """The unquantized model's perplexity on the evaluation windows."""
        return float(np.exp(self.reference_nll.mean()))

    def quantized(self, fmt, names=None) -> dict:
        """``{name: float32 tensor}``: the chosen linears' weights (default: every decoder
        linear) quantized with ``fmt`` (a WeightFormat or any ``quantize(weight, name)``), from
        the float32 weights and rounded to float32, as a float32 model would hold them. The
        float64 forward pass then reads them exactly."""
        return quantized_weight_tensors(self.float32_model, fmt, names)

    def weight_tensors(self, fmt: WeightFormat) -> dict:
        """Every decoder linear's weight quantized with ``fmt``: {name: float32 tensor}
        (:meth:`quantized`).

        Formats are told apart by every field but the label. A format with planned uses left
        in :attr:`reuse` is kept until its last one, so a run quantizes each format once (the
        tensors are the same either way: numfmt is deterministic); others are not kept.
        """
        key = dataclasses.replace(fmt, label="")
        with self._lock:
            format_lock = self._format_locks.setdefault(key, threading.Lock())
        with format_lock:       # map()'s threads: one quantizes, another waits for its tensors
            with self._lock:
                tensors = self._weights.pop(key, None)
            if tensors is None:
                tensors = self.quantized(fmt)
            with self._lock:
                if self.reuse[key] > 0:
                    self.reuse[key] -= 1
                if self.reuse[key] > 0:
                    self._weights[key] = tensors
        return tensors

    def map(self, fn, items) -> list:
        """``[fn(item) for item in items]``, with up to :attr:`workers` calls at once.

        Each call runs on a thread that holds a float64 copy of the model of its own
        (:attr:`model` returns it, so ``fn`` measures with :meth:`nll` as usual; the copies
        after the first are made on first use and kept). Every copy holds the same weights,
        and a forward pass computes each window's NLL with the same operations in the same
        order whichever thread runs it (torch on one thread inside each), so the results are
        those of the loop, in the order of ``items``; on two idle cores two passes take about
        the time of one. ``fn`` must not change the model outside :meth:`nll`'s hooks.
        """
        items = list(items)
        n = min(self.workers, len(items))
        if n < 2 or self.dtype != "float64" or getattr(self._local, "model", None) is not None:
            return [fn(item) for item in items]
        while len(self._copies) < n - 1:
            self._copies.append(float64_copy(self.checkpoint.model))
        idle = queue.SimpleQueue()
        for model in [self.model] + self._copies[:n - 1]:
            idle.put(model)

        def one(item):
            self._local.model = idle.get()
            try:
                return fn(item)
            finally:
                idle.put(self._local.model)
                self._local.model = None
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=n) as pool:
            return list(pool.map(one, items))

    def ppl(self, weights=None, names=None, acts=None, kv=None) -> float:
        """Perplexity on the evaluation windows, with the given quantizers in place:
        ``exp`` of the mean of :meth:`nll`."""
        return float(np.exp(self.nll(weights, names, acts, kv).mean()))

    def nll(self, weights=None, names=None, acts=None, kv=None) -> np.ndarray:
        """Mean NLL per evaluation window (float64 (n_eval,), nats per token), with the given
        quantizers in place.

        ``weights`` is a WeightFormat (quantized by :meth:`quantized`) or a prepared
        {name: tensor} dict (swapped in for the linears ``names`` or all of them); ``acts`` an
        ActFormat for every linear's input; ``kv`` a pair of K and V quantizers. The forward
        pass is in float64 (:attr:`model`).
        """
        with contextlib.ExitStack() as stack:
            if isinstance(weights, dict):
                chosen = weights if names is None else {n: weights[n] for n in names}
                stack.enter_context(swapped_weights(self.model, chosen))
            elif weights is not None:
                stack.enter_context(swapped_weights(self.model, self.quantized(weights, names)))
            if acts is not None:
                stack.enter_context(quantized_inputs(self.model, acts))
            if kv is not None:
                stack.enter_context(quantized_kv(self.model, *kv))
            # All windows in one forward pass (same numbers as one at a time, less CPU time).
            # The activation and KV hooks quantize each window of the batch on its own, so a
            # per-tensor scale (NVFP4's FP32 one) never spans two windows.
            value = window_nll(self.model, self.eval, batch_size=len(self.eval))
        if self.progress is not None:
            with self._lock:
                self.progress.update(1)
        return value


def open_lab(workload: Workload = FULL) -> Lab:
    """Load the model (cached after the first run) and cut the text into windows.

    Raises
    ------
    ModelUnavailableError
        If the model package or a library is missing (the message says how to install it).
    """
    ck = load_checkpoint()
    return Lab(ck, corpus_tokens(ck.tokenizer), workload)
