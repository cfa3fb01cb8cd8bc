"""The memory bill of training a LLaMA-style decoder, and the bytes its collectives move.

Where the bytes of a training step go, per GPU, counted exactly from the model's shape:

    weights       the copy the GEMMs read (BF16, or FP8 where a recipe keeps one)
    master        the optimizer's copy (FP32; BF16 in a pure-BF16 run, where it *is* the weights)
    gradients     one per weight (FP32 or BF16)
    moments       Adam's m and v (numfmt.torch.train.optim's state formats, scales included)
    compensation  the BF16 Kahan buffer of "bf16_kahan" master weights
    activations   what the forward saves for the backward, for the GPU's local batch

Sharding over N GPUs: data parallel ("dp") keeps everything on every GPU; fully sharded data
parallel ("fsdp", ZeRO stage 3) keeps 1/N of weights, master, gradients and moments, and
all-gathers one layer's weights at a time (counted as working memory). Activations are never
sharded: each GPU holds those of its own batch.

The activation count is that of transformers' ``LlamaDecoderLayer`` in BF16 under torch's
scaled-dot-product attention (the flash kernel, which keeps the output and a float32
log-sum-exp per head and token, never the T x T scores), measured on torch's saved tensors and
tested equal, byte for byte per layer, in tests/test_memory.py. Per token and layer::

    20 d + 8 d_ff + 4 d_kv + 4 h + 8   bytes

(d the hidden size, d_ff the SwiGLU width, d_kv = kv_heads * head_dim, h the heads; the RMSNorms
upcast to float32, which is most of the 20 d). The embedding, final norm, head and loss add
``8 d + 4 V + 20`` bytes per token (V the vocabulary: the logits in float32 for the loss) and
``4 T * head_dim + 4`` (RoPE's cos and sin, a scalar; 8 bytes more for a batch of one).
With full activation checkpointing a
layer keeps only its BF16 input (2 d bytes per token), RoPE's tables are not kept, and the
backward recomputes one layer at a time, whose activations are then live.

Communication per step, per GPU, under the ring algorithms NCCL uses (Patarasuk and Yuan 2009;
each GPU sends and receives (N - 1) / N of the buffer in an all-gather or a reduce-scatter, twice
that in an all-reduce):

    dp    all-reduce of the gradients                          2 (N-1)/N P b_grad
    fsdp  all-gather of the weights in forward and backward    2 (N-1)/N P b_weight
          reduce-scatter of the gradients                        (N-1)/N P b_grad

FP8 all-gather (torchao's ``enable_fsdp_float8_all_gather``) sends the weights as E4M3 with one
FP32 scale per tensor: b_weight = 1 byte plus 4 bytes per weight tensor.

References
----------
Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models",
SC 2020, section 5 (the 2 + 2 + 12 bytes per parameter of mixed-precision Adam).
Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models",
MLSys 2023, section 4 (activation memory per layer, checkpointing).
Zhao et al., "PyTorch FSDP", VLDB 2023 (the all-gather / reduce-scatter schedule).
torchao ``torchao/float8/fsdp_utils.py`` (float8 all-gather of FSDP2 weights).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DecoderShape", "LLAMA_3_2_1B", "LLAMA_3_1_8B", "Precision", "PRECISIONS",
           "activation_bytes", "layer_activation_bytes", "memory_bill", "communication_bytes",
           "BILL_ITEMS"]


def _count(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


@dataclass(frozen=True)
class DecoderShape:
    """The counts of a LLaMA-style decoder (RMSNorm, GQA attention, SwiGLU) that set its bytes.

    The one definition of a decoder's shape: ``lectures.llm.speed.ModelShape`` subclasses it
    (same fields) to add what a forward pass reads and computes.

    Raises
    ------
    ValueError
        If a count is not a positive int or ``heads`` is not a multiple of ``kv_heads``.
    """
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool = False

    def __post_init__(self):
        for name in ("layers", "hidden", "intermediate", "heads", "kv_heads", "head_dim",
                     "vocab"):
            _count(getattr(self, name), name)
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads})")

    def layer_linears(self) -> list:
        """(out, in) of one layer's linears: q, k, v, o, gate, up, down."""
        h, q, kv, m = (self.hidden, self.heads * self.head_dim,
                       self.kv_heads * self.head_dim, self.intermediate)
        return [(q, h), (kv, h), (kv, h), (h, q), (m, h), (m, h), (h, m)]

    @property
    def layer_params(self) -> int:
        """One layer's weights: its seven linears and two RMSNorm gains."""
        return sum(o * i for o, i in self.layer_linears()) + 2 * self.hidden

    @property
    def params(self) -> int:
        """Every weight: embedding, layers, final norm and (unless tied) the head."""
        embed = self.vocab * self.hidden
        return (embed * (1 if self.tied else 2) + self.layers * self.layer_params
                + self.hidden)

    @property
    def tensors(self) -> int:
        """The number of weight tensors (one FP32 scale each under FP8 all-gather)."""
        return (1 if self.tied else 2) + 9 * self.layers + 1


#: Llama 3.2 1B and Llama 3.1 8B, from their config.json on the Hugging Face Hub
#: (meta-llama/Llama-3.2-1B: tied embeddings; meta-llama/Llama-3.1-8B).
LLAMA_3_2_1B = DecoderShape(16, 2048, 8192, 32, 8, 64, 128256, tied=True)
LLAMA_3_1_8B = DecoderShape(32, 4096, 14336, 32, 8, 128, 128256, tied=False)


@dataclass(frozen=True)
class Precision:
    """Bytes per weight of each item a recipe keeps (0: the item does not exist).

    ``state`` names the moments' format (numfmt.torch.train.optim.STATE_FORMATS).
    ``linears_only``: the GEMMs' copy at ``weights`` bytes holds only the decoder layers'
    linears; the embedding, the head and the norms keep a BF16 copy (2 bytes), as FP8
    training does (torchao's float8 all-gather casts the linears alone; lecture 10's FP8
    recipes keep the head in BF16).
    """
    name: str
    weights: int          # the GEMMs' copy, when it is not the master itself
    master: int
    gradients: int
    state: str
    compensation: int = 0
    linears_only: bool = False


#: The recipes the bill compares, by name.
PRECISIONS = {
    "FP32": Precision("FP32", 0, 4, 4, "fp32"),
    "BF16 mixed": Precision("BF16 mixed", 2, 4, 4, "fp32"),
    "BF16 mixed, 8-bit Adam": Precision("BF16 mixed, 8-bit Adam", 2, 4, 4, "int8"),
    "FP8 weights, 8-bit Adam": Precision("FP8 weights, 8-bit Adam", 1, 4, 2, "int8",
                                         linears_only=True),
    "pure BF16 + Kahan": Precision("pure BF16 + Kahan", 0, 2, 2, "bf16", compensation=2),
}

BILL_ITEMS = ("weights", "master", "gradients", "moments", "compensation", "activations",
              "gathered")


def _moment_bytes(state: str, n: int, block: int) -> int:
    """Bytes of the two moments of n weights under ``state`` (torchao and bitsandbytes keep
    FP32 moments for tensors under 4,096 elements; the bill ignores that small correction)."""
    if state == "fp32":
        return 8 * n
    if state == "bf16":
        return 4 * n
    if state in ("int8", "fp8"):
        return 2 * n + 2 * 4 * -(-n // block)
    raise ValueError(f"state must be fp32, bf16, int8 or fp8, got {state!r}")


def _tokens(shape, batch, seq) -> int:
    """``batch * seq`` after checking ``shape`` is a DecoderShape and both counts positive."""
    if not isinstance(shape, DecoderShape):
        raise TypeError(f"shape must be a DecoderShape, got {type(shape).__name__}")
    return _count(batch, "batch") * _count(seq, "seq")


def activation_bytes(shape: DecoderShape, batch: int, seq: int,
                     checkpointing: bool = False) -> int:
    """Bytes the forward saves for the backward (BF16 compute, see the module docstring).

    With ``checkpointing`` (every layer recomputed, torch.utils.checkpoint), what the forward
    keeps: every layer's BF16 input and the rest outside the layers. The backward's peak adds
    one layer's recomputed activations (:func:`layer_activation_bytes`; :func:`memory_bill`
    counts it).

    Raises
    ------
    ValueError
        If ``batch`` or ``seq`` is not a positive int.
    """
    n = _tokens(shape, batch, seq)
    d = shape.hidden
    layer = layer_activation_bytes(shape, batch, seq)
    rest = (n * (8 * d + 4 * shape.vocab + 20) + 4 * seq * shape.head_dim
            + (12 if batch == 1 else 4))
    if checkpointing:  # RoPE's tables are recomputed with the layers
        return shape.layers * 2 * n * d + rest - 4 * seq * shape.head_dim
    return shape.layers * layer + rest


def layer_activation_bytes(shape: DecoderShape, batch: int, seq: int) -> int:
    """Bytes one decoder layer saves for the backward (the per-layer term of
    :func:`activation_bytes`): what a checkpointed layer's recomputation holds at its peak.

    Raises
    ------
    ValueError
        If ``batch`` or ``seq`` is not a positive int.
    """
    n = _tokens(shape, batch, seq)
    d, kv = shape.hidden, shape.kv_heads * shape.head_dim
    return n * (20 * d + 8 * shape.intermediate + 4 * kv + 4 * shape.heads + 8)


def memory_bill(shape: DecoderShape, precision: Precision, batch: int, seq: int, *,
                devices: int = 1, sharding: str = "dp", checkpointing: bool = False,
                block: int = 2048) -> dict:
    """Bytes per GPU of each item of :data:`BILL_ITEMS` for one training step.

    Parameters
    ----------
    shape : DecoderShape
    precision : Precision
    batch, seq : int
        The GPU's local batch (sequences) and their length.
    devices : int, default 1
    sharding : {"dp", "fsdp"}
    checkpointing : bool
    block : int, default 2048
        Block size of an 8-bit state (one FP32 scale per block and moment).

    Returns
    -------
    dict item -> int bytes, in :data:`BILL_ITEMS` order. A sharded item is its ceiling share
    ``ceil(P / N)`` of the weights; "gathered" is the largest layer's all-gathered weights
    (FSDP's working copy; 0 under "dp").

    Raises
    ------
    ValueError
        For a bad count, an unknown ``sharding`` or state.
    TypeError
        If ``shape`` or ``precision`` has the wrong type.
    """
    if not isinstance(precision, Precision):
        raise TypeError(f"precision must be a Precision, got {type(precision).__name__}")
    if sharding not in ("dp", "fsdp"):
        raise ValueError(f"sharding must be 'dp' or 'fsdp', got {sharding!r}")
    n = _count(devices, "devices")
    _count(block, "block")
    acts = activation_bytes(shape, batch, seq, checkpointing)
    if checkpointing:  # the backward's peak: one layer recomputed at a time
        acts += layer_activation_bytes(shape, batch, seq)
    p = shape.params
    local = -(-p // n) if sharding == "fsdp" else p
    per_weight = precision.weights or precision.master
    layer_linears = sum(o * i for o, i in shape.layer_linears())
    if precision.linears_only:   # the linears at `weights` bytes, every other weight in BF16
        linears = shape.layers * layer_linears
        local_linears = -(-linears // n) if sharding == "fsdp" else linears
        weights = local_linears * precision.weights + (local - local_linears) * 2
        layer_unit = layer_linears * per_weight + (shape.layer_params - layer_linears) * 2
        embed_unit = shape.vocab * shape.hidden * 2
    else:
        weights = local * precision.weights
        layer_unit = shape.layer_params * per_weight
        embed_unit = shape.vocab * shape.hidden * per_weight
    gathered = max(layer_unit, embed_unit) if sharding == "fsdp" else 0
    return {
        "weights": weights,
        "master": local * precision.master,
        "gradients": local * precision.gradients,
        "moments": _moment_bytes(precision.state, local, block),
        "compensation": local * precision.compensation,
        "activations": acts,
        "gathered": gathered,
    }


def communication_bytes(shape: DecoderShape, devices: int, sharding: str = "fsdp",
                        weight_bytes: int = 2, grad_bytes: int = 2,
                        fp8_all_gather: bool = False) -> dict:
    """Bytes each GPU sends (and receives) in one step's collectives, ring algorithms.

    Returns
    -------
    dict with "all_gather" (weights, forward and backward), "reduce_scatter" (gradients,
    fsdp) and "all_reduce" (gradients under dp; the FP8 weights' amax under fsdp with
    ``fp8_all_gather``), floats in bytes.

    Notes
    -----
    ``fp8_all_gather`` is torchao's float8 all-gather under FSDP2
    (``Float8LinearConfig(enable_fsdp_float8_all_gather=True)``,
    torchao/float8/fsdp_utils.py): each GPU keeps its shard of the FP32 master weights; before
    the all-gather, the shard of every layer linear's weight is cast to E4M3 with one
    tensorwise FP32 scale, 448 / amax of the whole weight, whose amax
    ``precompute_float8_dynamic_scale_for_fsdp`` all-reduces once per step for all of them
    (one FP32 per linear). Only the E4M3 codes are all-gathered; the scale travels as metadata.
    The embedding, the norms and the head are not converted (the head stays in BF16, as in the
    FP8 recipes of numfmt.torch.train) and are gathered at ``weight_bytes``.

    Raises
    ------
    ValueError
        For a bad count or an unknown ``sharding``.
    """
    if not isinstance(shape, DecoderShape):
        raise TypeError(f"shape must be a DecoderShape, got {type(shape).__name__}")
    if sharding not in ("dp", "fsdp"):
        raise ValueError(f"sharding must be 'dp' or 'fsdp', got {sharding!r}")
    n = _count(devices, "devices")
    _count(weight_bytes, "weight_bytes")
    _count(grad_bytes, "grad_bytes")
    share = (n - 1) / n
    p = shape.params
    if sharding == "dp":
        return {"all_gather": 0.0, "reduce_scatter": 0.0,
                "all_reduce": 2 * share * p * grad_bytes}
    gather, amax = p * weight_bytes, 0.0
    if fp8_all_gather:
        linear = shape.layers * sum(o * i for o, i in shape.layer_linears())
        gather = linear * 1 + (p - linear) * weight_bytes
        amax = 2 * share * 4 * 7 * shape.layers
    return {"all_gather": 2 * share * gather, "reduce_scatter": share * p * grad_bytes,
            "all_reduce": amax}
