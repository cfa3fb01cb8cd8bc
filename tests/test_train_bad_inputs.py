"""Bad input to numfmt.torch.train (recipes, operands, layers, the loss scaler, LSQ, LoRA,
NF4) and to the lectures' fine-tuning, timing and results helpers: a ValueError or TypeError
naming the argument, before any work; numpy integers and reals accepted where Python ones
are; empty batches as nn.Linear has them.

Oracles: torch.nn.Linear (empty batches), torch's float16 cast, the docstrings' stated ranges.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numfmt.torch.train as ntt  # noqa: E402
from numfmt.torch.train.lora import LoRALinear  # noqa: E402
from numfmt.torch.train.lsq import (GroupQuantLinear, group_fake_quantize,  # noqa: E402
                                    lsq_fake_quantize, lsq_gradient_scale)

E4M3_T = ntt.OperandSpec("e4m3", "tensor", "exact")
W, Z = torch.randn(8, 16), torch.full((8, 1), 8)


def raises(exc, name, fn):
    with pytest.raises(exc, match=name):
        fn()


# ------------------------------------------------------------------ recipes and operands
@pytest.mark.parametrize("name, fn", [
    (r"Recipe\.margin", lambda: ntt.fp8_recipe(scaling="current", margin=3)),
    (r"Recipe\.margin", lambda: ntt.Recipe("x", margin=1)),
    (r"Recipe\.amax_history", lambda: ntt.Recipe("x", amax_history=True)),
    (r"Recipe\.margin", lambda: ntt.fp8_recipe(scaling="delayed", margin=True)),
    ("margin", lambda: ntt.AmaxHistory(4, margin=0.5)),
    ("length", lambda: ntt.AmaxHistory(True)),
    ("scale", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, scale=0.0)),
    ("scale", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, scale=math.nan)),
    ("scale", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, scale=-2.0)),
    ("scale", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, scale=math.inf)),
    ("amax", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, amax=-5.0)),
    ("margin", lambda: ntt.quantize_operand(torch.ones(4, 32), E4M3_T, margin=0.5)),
    ("n", lambda: ntt.hadamard(True)),
    ("t must be a 2-D", lambda: ntt.apply_rht(torch.ones(4, 32, 2), ntt.random_hadamard())),
    ("n_tokens", lambda: ntt.RECIPES["nvfp4"].bits_moved(-16, 32, 32)),
    ("inner", lambda: ntt.OperandSpec("e4m3", "row", "exact").bits_per_element(0)),
])
def test_recipe_and_operand_arguments_are_named(name, fn):
    raises(ValueError, name, fn)


def test_complex_operand_is_a_type_error_without_a_warning(recwarn):
    raises(TypeError, "t must be a real",
           lambda: ntt.quantize_operand(torch.ones(2, 32, dtype=torch.complex64), E4M3_T))
    assert len(recwarn) == 0


def test_numpy_and_tensor_amax_and_scale_are_numbers():
    x = torch.full((4, 32), 3.3)
    ref = ntt.quantize_operand(x, E4M3_T, scale=0.5)
    for s in (np.float32(0.5), np.float64(0.5), torch.tensor(0.5)):
        assert torch.equal(ntt.quantize_operand(x, E4M3_T, scale=s), ref)
    assert torch.equal(ntt.quantize_operand(x, E4M3_T, amax=np.float32(224.0)), ref)


@pytest.mark.parametrize("recipe", ["fp8_current", "fp8_delayed", "mxfp8_floor", "nvfp4"])
def test_an_empty_batch_is_an_empty_output_as_nn_linear(recipe):
    ref = torch.nn.Linear(32, 32, bias=False)(torch.zeros(0, 32))
    layer = ntt.QuantLinear(32, 32, recipe)
    x = torch.zeros(0, 32, requires_grad=True)
    y = layer(x)
    assert y.shape == ref.shape == (0, 32)
    y.sum().backward()
    assert torch.equal(layer.weight.grad, torch.zeros(32, 32))
    w_amax = float(layer.weight.detach().abs().max())
    assert {op: h.history for op, h in layer._histories.items()} in (
        {}, {"x": [], "w": [w_amax], "dy": []})          # W's amax only; none of x or dy


def test_empty_operand_is_empty():
    assert ntt.quantize_operand(torch.zeros(0, 32), E4M3_T).shape == (0, 32)


# ------------------------------------------------------------------ loss scaler
@pytest.mark.parametrize("kw, name", [
    (dict(growth_interval=True), "growth_interval"),
    (dict(growth_interval=2.0), "growth_interval"),
    (dict(init_scale=1e-45), "init_scale"),
    (dict(init_scale=math.inf), "init_scale"),
    (dict(backoff_factor=True), "backoff_factor"),
])
def test_loss_scaler_arguments_are_named(kw, name):
    raises(ValueError, name, lambda: ntt.DynamicLossScaler(**kw))


def test_loss_scaler_accepts_numpy_numbers_and_refuses_fp16_gradients():
    s = ntt.DynamicLossScaler(np.float32(8.0), np.float64(2.0), growth_interval=np.int64(3))
    assert s.scale == 8.0 and s.growth_interval == 3
    p = torch.nn.Parameter(torch.ones(2, dtype=torch.float16))
    s.scale_loss(p.sum()).backward()
    raises(ValueError, "FP16 gradients", lambda: s.unscale_([p]))


# ------------------------------------------------------------------ LSQ and LoRA
@pytest.mark.parametrize("name, fn", [
    ("scale", lambda: lsq_fake_quantize(W, torch.zeros(8, 1), Z, 4, 16)),
    ("scale", lambda: lsq_fake_quantize(W, torch.full((8, 1), -0.1), Z, 4, 16)),
    ("scale", lambda: group_fake_quantize(W, torch.zeros(8, 1), Z, 4, 16)),
    ("scale", lambda: GroupQuantLinear(W, torch.full((8, 1), 1e-9), Z, 4, 16)),
    ("scale", lambda: GroupQuantLinear(W, torch.full((8, 1), 1e6), Z, 4, 16)),
    ("zero", lambda: GroupQuantLinear(W, torch.full((8, 1), .1), torch.full((8, 1), 40), 4, 16)),
    ("zero", lambda: GroupQuantLinear(W, torch.full((8, 1), .1), torch.full((8, 1), -1), 4, 16)),
    ("w", lambda: group_fake_quantize(torch.zeros(8, 0), torch.ones(8, 1), Z, 4, 16)),
    ("qmax", lambda: lsq_gradient_scale(torch.tensor([4]), 0)),
    ("alpha", lambda: LoRALinear(torch.randn(8, 16), 2, math.inf)),
    ("alpha", lambda: LoRALinear(torch.randn(8, 16), 2, math.nan)),
    ("bias", lambda: LoRALinear(torch.randn(8, 16), 2, 4.0, bias=torch.ones(9))),
])
def test_lsq_and_lora_arguments_are_named(name, fn):
    raises(ValueError, name, fn)


def test_lora_accepts_numpy_rank_and_alpha():
    a = LoRALinear(torch.randn(8, 16), np.int64(2), np.float32(16))
    assert a.rank == 2 and isinstance(a.rank, int) and a.scaling == 8.0


def test_lsq_scale_that_trains_below_float16_is_refused_on_the_next_call():
    s = torch.full((8, 1), 0.1, requires_grad=True)
    lsq_fake_quantize(W, s, Z, 4, 16)
    with torch.no_grad():
        s.fill_(2.0**-26)                       # 0 in float16
    assert float(torch.tensor(2.0**-26).half()) == 0.0
    raises(ValueError, "scale", lambda: lsq_fake_quantize(W, s, Z, 4, 16))


# ------------------------------------------------------------------ lectures' helpers
def test_timing_helpers_name_their_arguments():
    from lectures import machine
    raises(TypeError, "repeats", lambda: machine.repeat_seconds(lambda: None, 2.5))
    raises(TypeError, "repeats", lambda: machine.repeat_seconds(lambda: None, "3"))
    raises(ValueError, "zero time", lambda: machine.Spread.of([0.0]).inverse())
    raises(ValueError, "numel", lambda: machine.stream_bandwidth(1 << 42, 1))
    raises(ValueError, "n=", lambda: machine.matmul_throughput("float32", 1 << 20))
    assert machine.repeat_seconds(lambda: None, np.int64(2)).repeats == 2


def test_torchao_weight_only_bits():
    from lectures.llm.speed import torchao_weight_only
    for bits in (3, True, 16):
        raises(ValueError, "bits", lambda: torchao_weight_only(bits))


def test_save_results_refuses_a_directory(tmp_path):
    import argparse

    from lectures import llm
    raises(ValueError, "directory", lambda: llm.save_results(tmp_path, {}))
    raises(argparse.ArgumentTypeError, "directory", lambda: llm.save_path(str(tmp_path)))
    assert llm.save_path(str(tmp_path / "r.json")) == tmp_path / "r.json"


@pytest.fixture(scope="module")
def tiny_tail():
    transformers = pytest.importorskip("transformers")
    from lectures.llm.finetune import layer_inputs
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                                      num_hidden_layers=2, num_attention_heads=2,
                                      num_key_value_heads=1, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).float().eval()
    windows = np.random.default_rng(0).integers(0, 32, (4, 8))
    return model, windows, layer_inputs(model, windows, 1, batch_size=2)


def test_fine_tuning_checks_windows_and_lr(tiny_tail):
    from lectures.llm.finetune import tail_window_nll, train
    model, windows, states = tiny_tail
    assert tail_window_nll(model, 1, states, windows).shape == (4,)
    for bad in (windows[:3], np.concatenate([windows, windows])):
        raises(ValueError, "windows", lambda: tail_window_nll(model, 1, states, bad))
    params = [p for p in model.model.layers[1].parameters()]
    raises(ValueError, "windows", lambda: train(model, 1, params, states, windows[:2], 2, 1e-3))
    raises(ValueError, "lr", lambda: train(model, 1, params, states, windows, 1, math.inf))
    before = [p.detach().clone() for p in params]
    for p in params:
        p.requires_grad_(True)
    try:
        r = train(model, 1, params, states, windows, 1, np.float32(1e-3))
        assert len(r.losses) == 1
    finally:
        with torch.no_grad():
            for p, b in zip(params, before):
                p.copy_(b)
                p.requires_grad_(False)


def test_numpy_integers_are_sizes_and_seeds():
    a = ntt.QuantLinear(np.int64(32), np.int32(16), "fp32", seed=np.int64(3))
    b = ntt.QuantLinear(32, 16, "fp32", seed=3)
    assert a.in_features == 32 and isinstance(a.in_features, int)
    assert torch.equal(a.weight, b.weight)
    s = torch.full((8, 2), 0.1)
    assert torch.equal(group_fake_quantize(W, s, torch.full((8, 2), 8), 4, np.int64(8)),
                       group_fake_quantize(W, s, torch.full((8, 2), 8), 4, 8))
