"""GEMM outputs of QuantLinear against torch.autocast and torch.nn.functional.linear.

torch.autocast(cpu, bfloat16) casts a linear's operands to bf16 and returns y in bf16; its
backward returns dx and dW as bf16 products cast back to the leaves' dtype. A bf16 recipe's
layer must give the same y, dx and dW; "fp32" must stay F.linear's bit for bit.
"""

import pytest
import torch
from torch.nn import functional as F

import numfmt.torch.train as ntt


def _operands(seed, n=64, d_in=32, d_out=48, integers=False):
    g = torch.Generator().manual_seed(seed)
    if integers:  # sums of products exact in float32 (any order): only the output rounding
        def draw(*shape):
            return torch.randint(-15, 16, shape, generator=g).float() * 2.0 ** -3
    else:
        def draw(*shape):
            return torch.randn(*shape, generator=g)
    return draw(n, d_in), draw(d_out, d_in), draw(n, d_out)


def _autocast_linear(x, w, dy, dtype):
    x, w = x.clone().requires_grad_(), w.clone().requires_grad_()
    with torch.autocast("cpu", dtype=dtype):
        y = F.linear(x, w)
    assert y.dtype == dtype
    y.backward(dy.to(dtype))
    return y.float(), x.grad, w.grad


def _layer(x, w, dy, recipe, double=False):
    layer = ntt.QuantLinear(w.shape[1], w.shape[0], recipe)
    with torch.no_grad():
        layer.weight.copy_(w)
    if double:
        layer = layer.double()
        x, dy = x.double(), dy.double()
    x = x.clone().requires_grad_()
    y = layer(x)
    y.backward(dy)
    return y, x.grad, layer.weight.grad


@pytest.mark.parametrize("seed", range(3))
def test_fp32_recipe_is_f_linear_bit_for_bit(seed):
    x, w, dy = _operands(seed)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    yr = F.linear(xr, wr)
    yr.backward(dy)
    y, dx, dw = _layer(x, w, dy, "fp32")
    assert torch.equal(y, yr) and torch.equal(dx, xr.grad) and torch.equal(dw, wr.grad)


@pytest.mark.parametrize("double", [False, True])
@pytest.mark.parametrize("seed", range(3))
def test_bf16_recipe_outputs_are_autocasts(seed, double):
    x, w, dy = _operands(seed, integers=True)
    ref = _autocast_linear(x, w, dy, torch.bfloat16)
    got = _layer(x, w, dy, "bf16", double=double)
    for name, a, b in zip(("y", "dx", "dW"), got, ref):
        assert torch.equal(a.float(), b.float()), name
        assert torch.equal(a.to(torch.bfloat16).to(a.dtype), a), name   # on bf16's grid
    # the float64 layer without output rounding would keep bits that bf16 has not
    x64 = x.double() @ w.double().T
    assert not torch.equal(x64, got[0].double())


@pytest.mark.parametrize("seed", range(3))
def test_bf16_recipe_on_gaussian_operands_is_autocast_but_for_accumulation_order(seed):
    """On arbitrary float32 operands autocast's bf16 kernel and the layer sum in different
    orders: the outputs agree but where the float32 sums round to the two sides of a bf16
    rounding boundary, at most one bf16 step apart."""
    x, w, dy = _operands(seed)
    ref = _autocast_linear(x, w, dy, torch.bfloat16)
    got = _layer(x, w, dy, "bf16")
    for a, b in zip(got, ref):
        step = 2.0 ** (torch.floor(torch.log2(b.abs().clamp_min(1e-30))) - 7)
        assert bool(((a - b).abs() <= step).all())
        assert float((a != b).double().mean()) < 0.02


def test_fp16_outputs_are_half_and_overflow_to_inf():
    x, w, dy = _operands(0, integers=True)
    got = _layer(x, w, dy, "fp16")
    ref = _autocast_linear(x, w, dy, torch.float16)
    for a, b in zip(got, ref):
        assert torch.equal(a, b)
    # a product beyond 65504 is inf in FP16's output, as autocast's
    big = torch.full((16, 16), 64.0)
    y, dx, dw = _layer(big, big, torch.ones(16, 16), "fp16")
    assert bool(torch.isinf(y).all())
    # and a dx below FP16's smallest subnormal flushes to zero
    tiny = torch.full((16, 16), 2.0 ** -16)   # dx = 16 x 2^-32 = 2^-28 < 2^-24
    y, dx, dw = _layer(torch.full((16, 16), 2.0 ** -5), tiny, tiny, "fp16")
    assert bool((dx == 0).all()) and bool((dx.half() == 0).all())
    ref = _autocast_linear(torch.full((16, 16), 2.0 ** -5), tiny, tiny, torch.float16)
    assert bool((ref[1] == 0).all())


@pytest.mark.parametrize("name", ["fp8_delayed", "fp8_current", "fp8_blockwise", "mxfp8_rceil",
                                  "nvfp4", "mxfp4", "mxfp4_sr_rht"])
def test_fp8_and_fp4_recipes_output_bf16(name):
    assert ntt.RECIPES[name].output == "bf16"
    x, w, dy = _operands(1, n=128, d_in=128, d_out=128)
    for t in _layer(x, w, dy, name, double=True):
        assert torch.equal(t.to(torch.float32).to(torch.bfloat16).double(), t)


def test_recipe_refuses_an_unknown_output():
    with pytest.raises(ValueError, match="Recipe.output"):
        ntt.Recipe("x", output="e4m3")
