"""numfmt.memory: the training bill against torch's own counts and transformers' LLaMA."""

import pytest
import torch

from numfmt.memory import (LLAMA_3_1_8B, LLAMA_3_2_1B, PRECISIONS, DecoderShape,
                           activation_bytes, communication_bytes, layer_activation_bytes,
                           memory_bill)

transformers = pytest.importorskip("transformers")


def _llama(shape: DecoderShape):
    cfg = transformers.LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
        tie_word_embeddings=shape.tied, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    return cfg


def _saved_bytes(model, idx) -> int:
    """Bytes of the distinct storages the forward saves for the backward (torch's hooks)."""
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(input_ids=idx, labels=idx)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(v for k, v in seen.items() if k not in params)


@pytest.mark.parametrize("shape, published", [(LLAMA_3_2_1B, 1_235_814_400),
                                              (LLAMA_3_1_8B, 8_030_261_248)])
def test_params_equal_the_published_counts_and_transformers(shape, published):
    # published: the models' cards (safetensors parameter counts on the Hugging Face Hub)
    assert shape.params == published
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(_llama(shape))
    assert sum(p.numel() for p in model.parameters()) == published
    assert len(list(model.parameters())) == shape.tensors


SHAPES = [DecoderShape(2, 64, 128, 4, 2, 16, 256), DecoderShape(1, 96, 160, 6, 3, 16, 300),
          DecoderShape(3, 32, 48, 2, 1, 16, 100), DecoderShape(2, 128, 256, 8, 8, 16, 333)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("batch, seq", [(1, 8), (3, 16)])
def test_activation_bytes_equal_torchs_saved_tensors(shape, batch, seq):
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_llama(shape)).to(torch.bfloat16).train()
    idx = torch.randint(0, shape.vocab, (batch, seq))
    assert _saved_bytes(model, idx) == activation_bytes(shape, batch, seq)
    if hasattr(model, "activation_checkpointing_enable"):       # transformers 5
        model.activation_checkpointing_enable(
            activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": False})
    assert _saved_bytes(model, idx) == activation_bytes(shape, batch, seq, checkpointing=True)


def test_one_layer_is_the_difference_of_two_models():
    a, b = SHAPES[0], DecoderShape(3, 64, 128, 4, 2, 16, 256)
    assert (activation_bytes(b, 2, 16) - activation_bytes(a, 2, 16)
            == layer_activation_bytes(a, 2, 16))


def test_bill_counts_by_hand():
    s = LLAMA_3_2_1B
    p = 1_235_814_400
    bill = memory_bill(s, PRECISIONS["BF16 mixed"], 1, 2048)
    # ZeRO's 2 + 4 + 4 + 8 bytes per parameter of mixed-precision Adam (FP32 gradients here)
    assert (bill["weights"], bill["master"], bill["gradients"], bill["moments"]) == \
        (2 * p, 4 * p, 4 * p, 8 * p)
    bill8 = memory_bill(s, PRECISIONS["BF16 mixed, 8-bit Adam"], 1, 2048)
    assert bill8["moments"] == 2 * p + 2 * 4 * -(-p // 2048)
    sharded = memory_bill(s, PRECISIONS["BF16 mixed"], 1, 2048, devices=8, sharding="fsdp")
    assert sharded["master"] == 4 * -(-p // 8)
    assert sharded["activations"] == bill["activations"]
    # the largest all-gathered unit is the embedding (128256 x 2048) in BF16
    assert sharded["gathered"] == 128256 * 2048 * 2
    ck = memory_bill(s, PRECISIONS["BF16 mixed"], 1, 2048, checkpointing=True)
    assert ck["activations"] == (activation_bytes(s, 1, 2048, True)
                                 + layer_activation_bytes(s, 1, 2048))


def test_fp8_weights_bill_keeps_only_the_linears_in_fp8():
    s = LLAMA_3_1_8B
    p = 8_030_261_248
    # per layer q, k, v, o = 4096 x (4096 + 1024 + 1024 + 4096), gate, up, down = 3 x 4096 x 14336
    layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    linears = 32 * layer
    bill = memory_bill(s, PRECISIONS["FP8 weights, 8-bit Adam"], 1, 2048)
    # E4M3 linears (1 byte); embedding, head and norms in BF16 (2 bytes)
    assert bill["weights"] == linears + 2 * (p - linears)
    assert bill["master"] == 4 * p and bill["gradients"] == 2 * p
    sharded = memory_bill(s, PRECISIONS["FP8 weights, 8-bit Adam"], 1, 2048, devices=8,
                          sharding="fsdp")
    local, local_linears = -(-p // 8), -(-linears // 8)
    assert sharded["weights"] == local_linears + 2 * (local - local_linears)
    # the largest gathered unit: the BF16 embedding (128256 x 4096), not a layer (FP8 linears
    # and two BF16 norm gains)
    assert sharded["gathered"] == max(128256 * 4096 * 2, layer + 2 * 2 * 4096)


def test_communication_by_hand():
    s = LLAMA_3_1_8B
    p = 8_030_261_248
    c = communication_bytes(s, 8, "fsdp")
    assert c["all_gather"] == 2 * 7 / 8 * 2 * p and c["reduce_scatter"] == 7 / 8 * 2 * p
    f = communication_bytes(s, 8, "fsdp", fp8_all_gather=True)
    # torchao gathers the layers' linears in E4M3 (1 byte), the rest in BF16, and all-reduces
    # one FP32 amax per linear: per layer q, k, v, o = 4096 x (4096 + 1024 + 1024 + 4096) and
    # gate, up, down = 3 x 4096 x 14336
    linear = 32 * (4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336)
    assert linear == 6_979_321_856
    assert f["all_gather"] == 2 * 7 / 8 * (linear + 2 * (p - linear))
    assert f["all_reduce"] == 2 * 7 / 8 * 4 * 7 * 32
    d = communication_bytes(s, 8, "dp", grad_bytes=4)
    assert d["all_reduce"] == 2 * 7 / 8 * 4 * p and d["all_gather"] == 0
    assert communication_bytes(s, 1, "fsdp")["all_gather"] == 0


@pytest.mark.parametrize("call, match", [
    (lambda: DecoderShape(0, 1, 1, 1, 1, 1, 1), "layers"),
    (lambda: DecoderShape(1, 8, 8, 3, 2, 4, 8), "kv_heads"),
    (lambda: activation_bytes(LLAMA_3_2_1B, 0, 8), "batch"),
    (lambda: activation_bytes("llama", 1, 8), "shape"),
    (lambda: memory_bill(LLAMA_3_2_1B, "fp32", 1, 8), "precision"),
    (lambda: memory_bill(LLAMA_3_2_1B, PRECISIONS["FP32"], 1, 8, sharding="zero"), "sharding"),
    (lambda: memory_bill(LLAMA_3_2_1B, PRECISIONS["FP32"], 1, 8, devices=0), "devices"),
    (lambda: communication_bytes(LLAMA_3_2_1B, 8, "tp"), "sharding"),
    (lambda: communication_bytes(LLAMA_3_2_1B, 8, weight_bytes=0), "weight_bytes"),
])
def test_bad_inputs(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
