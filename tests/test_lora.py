"""numfmt.torch.train.lora (LoRA over a float or NF4 base), against hand-written references,
numfmt's numpy NF4 storage, and peft where installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from numfmt.packing import qlora_dequantize, qlora_quantize  # noqa: E402
from numfmt.torch.train.lora import LoRALinear, NF4Weight, lora_parameter_count  # noqa: E402


# ---------------------------------------------------------------------------------------------
# NF4 storage on the fly
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape,dq", [((48, 96), True), ((7, 37), True), ((33, 64), False),
                                      ((300, 200), True)])
def test_nf4_dequantize_bit_for_bit_numfmt(shape, dq):
    rng = np.random.default_rng(sum(shape))
    w = rng.standard_t(4, shape) * 0.03
    t = qlora_quantize(w, double_quant=dq)
    mirror = NF4Weight.from_qlora(t)
    expected = qlora_dequantize(t)
    got = mirror.dequantize(torch.float64).numpy()
    np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(mirror.dequantize().numpy(), expected.astype(np.float32))
    assert mirror.nbytes == t.nbytes


def test_nf4_weight_rejects_other_objects():
    with pytest.raises(TypeError, match="QLoRATensor"):
        NF4Weight.from_qlora(np.zeros(4))
    t = qlora_quantize(np.ones((8, 8)), code="int8")
    with pytest.raises(TypeError, match="dynamic"):
        NF4Weight.from_qlora(t)


# ---------------------------------------------------------------------------------------------
# LoRA
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nf4", [False, True])
def test_lora_with_zero_b_is_the_base_bit_for_bit(nf4):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((24, 40)) * 0.1
    b = torch.tensor(rng.standard_normal(24), dtype=torch.float32)
    x = torch.tensor(rng.standard_normal((5, 7, 40)), dtype=torch.float32)
    if nf4:
        t = qlora_quantize(w)
        base_w = torch.tensor(qlora_dequantize(t), dtype=torch.float32)
        layer = LoRALinear(NF4Weight.from_qlora(t), 4, 8.0, b)
    else:
        base_w = torch.tensor(w, dtype=torch.float32)
        layer = LoRALinear(base_w, 4, 8.0, b)
    expected = torch.nn.functional.linear(x, base_w, b)
    assert torch.equal(layer(x), expected)
    assert torch.equal(layer.merged_weight(), base_w)


def test_two_lora_steps_by_hand():
    """Two SGD steps on loss = Σ y · G, in float64; grads written out from the chain rule."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((6, 10))
    x = rng.standard_normal((9, 10))
    up = rng.standard_normal((9, 6))
    r, alpha, lr = 3, 6.0, 0.1
    layer = LoRALinear(torch.tensor(w), r, alpha).double()
    a = layer.lora_A.detach().numpy().copy()
    bm = np.zeros((6, r))
    opt = torch.optim.SGD([layer.lora_A, layer.lora_B], lr=lr)
    s = alpha / r
    for _ in range(2):
        opt.zero_grad()
        (layer(torch.tensor(x)) * torch.tensor(up)).sum().backward()
        opt.step()
        # y = x wᵀ + s (x aᵀ) bᵀ  ->  dL/db = s upᵀ (x aᵀ),  dL/da = s (up b)ᵀ x
        ga, gb = s * (up @ bm).T @ x, s * up.T @ (x @ a.T)
        a, bm = a - lr * ga, bm - lr * gb
    np.testing.assert_allclose(layer.lora_A.detach().numpy(), a, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(layer.lora_B.detach().numpy(), bm, rtol=1e-12, atol=1e-14)
    assert np.abs(a - layer.lora_A.detach().numpy()).max() < np.abs(ga).max()


def test_lora_against_peft():
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(20, 12)

        def forward(self, x):
            return self.lin(x)

    model = Tiny().double()
    w0, b0 = model.lin.weight.detach().clone(), model.lin.bias.detach().clone()
    pm = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["lin"],
                                                    lora_dropout=0.0))
    lin = pm.base_model.model.lin
    ours = LoRALinear(w0, 4, 8.0, b0).double()
    with torch.no_grad():
        ours.lora_A.copy_(lin.lora_A["default"].weight)
        b = torch.randn(12, 4, dtype=torch.float64)
        ours.lora_B.copy_(b)
        lin.lora_B["default"].weight.copy_(b)
    x = torch.randn(5, 20, dtype=torch.float64)
    y1, y2 = ours(x), pm(x)
    torch.testing.assert_close(y1, y2, rtol=1e-12, atol=1e-12)
    y1.square().sum().backward()
    y2.square().sum().backward()
    torch.testing.assert_close(ours.lora_A.grad, lin.lora_A["default"].weight.grad)
    torch.testing.assert_close(ours.lora_B.grad, lin.lora_B["default"].weight.grad)
    # peft's initialisation draws A from the same range as ours (Kaiming-uniform, a = sqrt 5)
    assert float(lin.lora_A["default"].weight.detach().abs().max()) <= 1 / np.sqrt(20)


def test_lora_parameter_count():
    assert lora_parameter_count([(576, 576), (192, 576)], 8) == 8 * (1152 + 768)


# ---------------------------------------------------------------------------------------------
# Bad settings
# ---------------------------------------------------------------------------------------------
def test_bad_settings_raise_naming_the_argument():
    w = torch.zeros(8, 16)
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(w, 9, 16.0)                              # larger than min(out, in) = 8
    with pytest.raises(ValueError, match="rank"):
        LoRALinear(w, 0, 16.0)
    with pytest.raises(ValueError, match="alpha"):
        LoRALinear(w, 2, 0.0)
    with pytest.raises(TypeError, match="base"):
        LoRALinear(np.zeros((8, 16)), 2, 4.0)
    with pytest.raises(ValueError, match="rank"):
        lora_parameter_count([(8, 16)], 10)


@pytest.mark.parametrize("nf4", [False, True])
def test_a_float64_input_computes_in_float64_on_the_float32_values(nf4):
    """LoRALinear keeps W (or its NF4 storage), A and B as they are but takes its input's
    dtype: a float64 x gets every product in float64 on the float32 values, and A's and B's
    gradients are the float64 ones rounded once to float32."""
    rng = np.random.default_rng(5)
    w = torch.tensor(rng.standard_normal((12, 20)) * 0.1, dtype=torch.float32)
    base = NF4Weight.quantize(w) if nf4 else w
    bias = torch.tensor(rng.standard_normal(12), dtype=torch.float32)
    lin = LoRALinear(base, 3, 6.0, bias, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lin.lora_B.copy_(torch.tensor(rng.standard_normal((12, 3)), dtype=torch.float32))
    x = torch.tensor(rng.standard_normal((4, 20)), dtype=torch.float64)
    y = lin(x)
    W = (base.dequantize() if nf4 else w).double().numpy()
    A, B = lin.lora_A.detach().double().numpy(), lin.lora_B.detach().double().numpy()
    xa = x.numpy() @ A.T
    want = x.numpy() @ W.T + bias.double().numpy() + 2.0 * xa @ B.T
    assert y.dtype == torch.float64
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-13, atol=1e-13)
    y.sum().backward()
    # d/dB of Σ y = 2 · 1ᵀ (x Aᵀ); d/dA = 2 · (1 B)ᵀ x
    ones = np.ones((4, 12))
    np.testing.assert_allclose(lin.lora_B.grad.numpy(), (2.0 * ones.T @ xa).astype(np.float32),
                               rtol=1e-6)
    np.testing.assert_allclose(lin.lora_A.grad.numpy(),
                               (2.0 * (ones @ B).T @ x.numpy()).astype(np.float32), rtol=1e-6)
    assert lin.lora_A.grad.dtype == lin.lora_B.grad.dtype == torch.float32
