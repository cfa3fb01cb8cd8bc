"""Speed of the real model: what a decode step or a prefill must move and compute, and how
long it takes on this machine, in float32 and through real low-precision kernels.

The counts come from the model's configuration (layers, heads, sizes) and
:mod:`numfmt.cost`; the times are wall-clock measurements with their spread
(:mod:`lectures.machine`). The quantized paths are other libraries' kernels, not numfmt's
emulation: torch's dynamic int8 linear (``torch.ao.quantization.quantize_dynamic``, fbgemm on
x86, onednn or qnnpack elsewhere) and torchao's weight-only layouts, an optional extra
(``pip install --no-deps torchao==0.18.0``).
"""

from __future__ import annotations

import copy
import importlib.util
from dataclasses import dataclass
from typing import Callable

from numfmt import cost
from numfmt.memory import DecoderShape
from lectures.i18n import domain
from lectures.llm.hooks import decoder_linears
from lectures.machine import (PathUnavailable, Spread, int8_dynamic_module,
                              quantize_dynamic_linears, quiet_torch, repeat_seconds)

_ = domain("llm").gettext      # what a lecture prints of this module: why a path cannot run

__all__ = ["ModelShape", "PassCost", "pass_cost", "QuantizedPath", "PathUnavailable",
           "int8_dynamic", "int8_dynamic_module", "dynamic_input_qparams",
           "torchao_weight_only", "decode_seconds", "prefill_seconds",
           "TORCHAO_INSTALL", "LLAMA_CPP_INSTALL", "llama_cpp_status", "import_torchao_quietly"]

TORCHAO_INSTALL = "pip install --no-deps torchao==0.18.0"
LLAMA_CPP_INSTALL = "pip install llama-cpp-python"


@dataclass(frozen=True)
class ModelShape(DecoderShape):
    """:class:`numfmt.memory.DecoderShape` (the same fields, checked the same way) plus what a
    forward pass reads and computes: every linear's shape in layer order, the output
    projection and the norm gains counted apart, the K/V cache's bytes, and the shape read
    from a transformers configuration. numfmt.memory bills training state and knows nothing
    of a configuration object; this class serves :func:`pass_cost` and lecture 12."""

    @classmethod
    def of(cls, config) -> "ModelShape":
        """From a transformers configuration (``num_hidden_layers``, ``head_dim``, ...)."""
        head_dim = getattr(config, "head_dim", None) or (config.hidden_size
                                                         // config.num_attention_heads)
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                   config.num_attention_heads, config.num_key_value_heads, head_dim,
                   config.vocab_size, bool(getattr(config, "tie_word_embeddings", False)))

    def linear_shapes(self) -> list:
        """(out, in) of every decoder linear, layer by layer: q, k, v, o, gate, up, down."""
        return self.layer_linears() * self.layers

    @property
    def linear_params(self) -> int:
        return sum(o * k for o, k in self.linear_shapes())

    @property
    def head_params(self) -> int:
        """The output projection (vocab x hidden), read by every pass even when it is tied to
        the embedding (as in SmolLM2)."""
        return self.vocab * self.hidden

    @property
    def norm_params(self) -> int:
        """Two RMSNorm gains per layer and the final one."""
        return self.hidden * (2 * self.layers + 1)

    def kv_bytes(self, tokens: int = 1, bits: float = 16, batch: int = 1) -> float:
        """Bytes of the K/V cache for ``tokens`` positions (:func:`numfmt.cost.kv_cache_bytes`)."""
        return cost.kv_cache_bytes(self.layers, self.kv_heads, self.head_dim, tokens, bits,
                                   batch)


@dataclass(frozen=True)
class PassCost:
    """Work of one forward pass: operations by kind and bytes moved."""

    linear_flops: float     # the decoder linears (2 per weight per token)
    other_flops: float      # output projection and attention's two products
    weight_bytes: float     # linears (at their format), output projection, norms
    kv_bytes: float         # the cache read (context) and written (new positions)
    tokens: int             # tokens computed (batch x new tokens)

    @property
    def flops(self) -> float:
        return self.linear_flops + self.other_flops

    @property
    def nbytes(self) -> float:
        return self.weight_bytes + self.kv_bytes

    @property
    def intensity(self) -> float:
        return cost.arithmetic_intensity(self.flops, self.nbytes)


def pass_cost(shape: ModelShape, linear_bits: float, context: int = 0, new_tokens: int = 1,
              batch: int = 1, head_bits: float = 32, kv_bits: float = 32,
              all_logits: bool = False) -> PassCost:
    """Operations and bytes of one forward pass: ``batch`` sequences, each computing
    ``new_tokens`` positions after ``context`` cached ones.

    Weights are read once per pass (every token of the pass shares them); the K/V cache of the
    ``context`` positions is read and that of the new positions written, per sequence.
    Activations are not counted: at decode sizes they stay in the caches. The output projection
    runs on the last position of each sequence (``all_logits=False``, as in decoding) or on
    every position (a plain ``model(ids)`` call, as the prefill timings here make it).

    Parameters
    ----------
    shape : ModelShape
    linear_bits : float, bits per weight of the decoder linears, scales included
    context, new_tokens, batch : int
    head_bits, kv_bits : float, bits per element of the output projection and of the cache
    all_logits : bool

    Returns
    -------
    PassCost
    """
    tokens = batch * new_tokens
    head_tokens = tokens if all_logits else batch
    linear_flops = 2.0 * shape.linear_params * tokens
    other = (2.0 * shape.head_params * head_tokens
             + batch * cost.attention_flops(shape.layers, shape.heads, shape.head_dim, context,
                                            new_tokens))
    weights = (cost.weight_bytes(shape.linear_params, linear_bits)
               + cost.weight_bytes(shape.head_params, head_bits)
               + cost.weight_bytes(shape.norm_params, 32))
    kv = shape.kv_bytes(context + new_tokens, kv_bits, batch)
    return PassCost(linear_flops, other, weights, kv, tokens)


# ---------------------------------------------------------------------------------------------
# Quantized paths: real kernels of other libraries
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QuantizedPath:
    """A way to run the model's decoder linears, and what it stores and computes them in."""

    label: str
    build: Callable        # float model -> model to time (a copy; the float model is unchanged)
    linear_bits: Callable  # ModelShape -> bits per weight of the decoder linears as stored
    compute: str           # "float32" or "int8": the dtype of the linears' products


def _row_scale_bits(bits: int, scale_bits: int = 32) -> Callable:
    """Bits per weight of ``bits``-bit codes with one ``scale_bits`` scale per output row."""
    def per_weight(shape: ModelShape) -> float:
        shapes = shape.linear_shapes()
        total = sum(o * k for o, k in shapes)
        return bits + sum(o * scale_bits for o, _ in shapes) / total
    return per_weight


def int8_dynamic(model):
    """A copy of ``model`` whose decoder linears are torch's dynamic int8 linears.

    ``torch.ao.quantization.quantize_dynamic`` with per-channel weights: each row's int8 codes
    and an FP32 scale (symmetric, codes in [-128, 127], scale amax / 127.5); each input is
    quantized at run time to uint8 per tensor (scale and zero point from its min and max,
    :func:`dynamic_input_qparams`) and the product runs in int8 with int32 accumulation
    (fbgemm on x86). The output projection stays float32.
    """
    return quantize_dynamic_linears(copy.deepcopy(model), list(decoder_linears(model)))


def dynamic_input_qparams(x) -> tuple[float, int]:
    """The (scale, zero point) torch's dynamic int8 linear gives its input ``x`` (a tensor).

    Per tensor, affine, from ``min(x, 0)`` and ``max(x, 0)`` onto uint8 codes; on x86
    (fbgemm, x86 engines) onto [0, 127] only ("reduce_range"), so that the int8 x uint8 pair
    products of the AVX2/AVX-512 instruction VPMADDUBSW cannot saturate its int16 sums.
    """
    import torch
    reduce = torch.backends.quantized.engine in ("x86", "fbgemm")
    scale, zero_point = torch._choose_qparams_per_tensor(x, reduce_range=reduce)
    return float(scale), int(zero_point)


def torchao_weight_only(bits: int) -> Callable:
    """A builder for torchao's weight-only int8 (``bits=8``) or int4 (``bits=4``) linears.

    int8: ``Int8WeightOnlyConfig`` (per-row scales). int4: ``Int4WeightOnlyConfig`` in groups of
    64 (576 = 9 x 64; groups of 128 do not divide it), which in torchao 0.18 has CUDA layouts
    only. The builder raises :class:`PathUnavailable` when torchao is missing, the layout does
    not run on this machine, or a decoder linear was left unconverted (torchao skips a layer
    narrower than its group: a timing labelled int4 would be bfloat16's), with the reason.

    Raises
    ------
    ValueError
        If ``bits`` is not 4 or 8.
    """
    if isinstance(bits, bool) or bits not in (4, 8):
        raise ValueError(f"bits must be 4 or 8 (torchao's weight-only int4 and int8), "
                         f"got {bits!r}")

    def build(model):
        if importlib.util.find_spec("torchao") is None:
            raise PathUnavailable(f"torchao is not installed ({TORCHAO_INSTALL})")
        with quiet_torch():
            from torchao.quantization import (Int4WeightOnlyConfig, Int8WeightOnlyConfig,
                                              quantize_)
            # torchao's int4 layouts take bfloat16 weights; int8 keeps the model's float32.
            q = copy.deepcopy(model) if bits == 8 else copy.deepcopy(model).bfloat16()
            names = set(decoder_linears(q))
            config = (Int8WeightOnlyConfig() if bits == 8
                      else Int4WeightOnlyConfig(group_size=64,
                                                int4_packing_format="tile_packed_to_4d"))
            try:
                quantize_(q, config, filter_fn=lambda m, name: name in names)
                probe = next(iter(decoder_linears(q).values()))
                import torch
                probe(torch.zeros(1, probe.in_features, dtype=probe.weight.dtype))
            except Exception as exc:  # noqa: BLE001 - the reason is what the lecture prints
                raise PathUnavailable(f"torchao {bits}-bit weight-only: {type(exc).__name__}: "
                                      f"{str(exc).strip().splitlines()[0][:90]}") from exc
            # a converted weight is one of torchao's tensor subclasses, a skipped one a tensor
            left = [n for n, m in decoder_linears(q).items()
                    if type(m.weight.detach()) is torch.Tensor]
            if left:
                raise PathUnavailable(f"torchao {bits}-bit weight-only left {len(left)} of "
                                      f"{len(names)} linears unconverted (e.g. {left[0]})")
        return q
    return build


def import_torchao_quietly() -> bool:
    """Import torchao, if installed, with its import-time messages (kernels it cannot load
    on this machine, deprecations) kept off the output; whether it is installed.

    Libraries such as transformers import torchao by themselves when it is installed; calling
    this first keeps those messages out of a lecture's text.
    """
    if importlib.util.find_spec("torchao") is None:
        return False
    with quiet_torch():
        import torchao  # noqa: F401
        import torchao.quantization  # noqa: F401
        try:    # imported later on first use otherwise, with a deprecation notice of torch's
            importlib.import_module("torchao.prototype.mx_formats")
        except ImportError:
            pass
    return True


def llama_cpp_status() -> str | None:
    """None when the llama.cpp binding (llama-cpp-python) is importable, else why not."""
    if importlib.util.find_spec("llama_cpp") is None:
        return _("llama-cpp-python is not installed ({command}; PyPI has no wheel for this "
                 "platform, so pip builds llama.cpp from source)").format(command=LLAMA_CPP_INSTALL)
    return None


# ---------------------------------------------------------------------------------------------
# Timings
# ---------------------------------------------------------------------------------------------
def decode_seconds(model, prompt, new_tokens: int = 8, repeats: int = 3) -> Spread:
    """Seconds per decoded token: greedy steps with the K/V cache after a prompt.

    Each repeat runs the prompt (untimed), then ``new_tokens`` single-token steps, each
    reading the cache of all positions before it; the repeat's time is their total divided
    by ``new_tokens``.

    Parameters
    ----------
    model : a transformers causal LM
    prompt : (B, T) int64 tensor of token ids
    new_tokens, repeats : int

    Raises
    ------
    ValueError
        If ``new_tokens`` or ``repeats`` < 1.
    """
    import torch

    if new_tokens < 1 or repeats < 1:
        raise ValueError(f"need new_tokens >= 1 and repeats >= 1, got {new_tokens}, {repeats}")
    state = {}
    cache_kw = _cache_keyword(model)

    def start():
        out = model(prompt, use_cache=True, logits_to_keep=1)
        state["cache"], state["token"] = _cache_of(out), out.logits[:, -1:].argmax(-1)

    def steps(n):
        for _ in range(n):
            out = model(state["token"], use_cache=True, logits_to_keep=1,
                        **{cache_kw: state["cache"]})
            state["cache"], state["token"] = _cache_of(out), out.logits[:, -1:].argmax(-1)

    times = []
    with torch.inference_mode():
        start()
        steps(1)                                   # warm-up: first calls allocate and pack
        for _ in range(repeats):
            start()
            times.append(repeat_seconds(lambda: steps(new_tokens), 1, 0).median / new_tokens)
    return Spread.of(times)


def _cache_keyword(model) -> str:
    """The forward argument that takes the K/V cache: ``cache`` in recent transformers,
    ``past_key_values`` before."""
    import inspect
    return "cache" if "cache" in inspect.signature(model.forward).parameters \
        else "past_key_values"


def _cache_of(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values


def prefill_seconds(model, batch: int, seq_len: int, repeats: int = 3, seed: int = 0) -> Spread:
    """Seconds of one forward pass over a (batch, seq_len) block of token ids (no cache kept).

    Raises
    ------
    ValueError
        If a size or ``repeats`` < 1.
    """
    import torch

    if batch < 1 or seq_len < 1:
        raise ValueError(f"batch and seq_len must be positive, got {batch}, {seq_len}")
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq_len), generator=g)
    with torch.inference_mode():
        return repeat_seconds(lambda: model(ids, use_cache=False), repeats, warmup=1)
