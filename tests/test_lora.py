"""numfmt.torch.train.lora (LoRA, NF4 base) and numfmt.torch.train.lsq (per-group STE, LSQ), against
hand-written references, numfmt's numpy storage, and peft where installed."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from numfmt.packing import (gptq_dequantize, gptq_pack_qweight, gptq_pack_qzeros, GPTQWeight,
                            qlora_dequantize, qlora_quantize)
from numfmt.torch.train.lora import LoRALinear, NF4Weight, lora_parameter_count
from numfmt.torch.train.lsq import (GroupQuantLinear, group_fake_quantize, int_codes,
                              lsq_fake_quantize)


def _grid(rng, out=16, k=80, group=32, bits=3):
    """A weight with a partial last group (80 = 2·32 + 16) and float16-exact scales."""
    w = rng.standard_normal((out, k)) * 0.05
    g = np.arange(k) // group
    n_groups = g[-1] + 1
    lo = np.stack([w[:, g == j].min(1) for j in range(n_groups)], 1)
    hi = np.stack([w[:, g == j].max(1) for j in range(n_groups)], 1)
    # a slightly narrow scale, so some codes clamp at both ends
    scale = ((hi - lo) / (2**bits - 1) * 0.8).astype(np.float16).astype(np.float64)
    zero = np.clip(np.rint(-lo / scale), 0, 2**bits - 1).astype(np.int64)
    return w, scale, zero, g


# ---------------------------------------------------------------------------------------------
# The fixed-scale STE
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bits", [2, 3, 4])
def test_group_ste_values_and_masked_identity(bits):
    rng = np.random.default_rng(bits)
    w, scale, zero, g = _grid(rng, bits=bits)
    qmax = 2**bits - 1
    t = np.rint(w / scale[:, g]) + zero[:, g]                  # numpy, float64, by hand
    expected = (np.clip(t, 0, qmax) - zero[:, g]) * scale[:, g]
    mask = (t >= 0) & (t <= qmax)
    assert 0 < mask.sum() < mask.size                           # both kinds of element occur
    wt = torch.tensor(w, dtype=torch.float32, requires_grad=True)
    v = group_fake_quantize(wt, torch.tensor(scale, dtype=torch.float32), torch.tensor(zero),
                            bits, 32)
    s32 = scale.astype(np.float32)                              # float16-exact scales
    t32 = (np.rint(w.astype(np.float32) / s32[:, g]) + zero[:, g]).astype(np.float64)
    exp32 = (np.clip(t32, 0, qmax) - zero[:, g]) * scale[:, g]
    np.testing.assert_array_equal(v.detach().numpy(), exp32.astype(np.float32))
    assert np.abs(exp32 - expected).max() <= scale.max()        # float32 input, same grid
    upstream = torch.tensor(rng.standard_normal(w.shape), dtype=torch.float32)
    v.backward(upstream)
    mask32 = (t32 >= 0) & (t32 <= qmax)
    np.testing.assert_array_equal(wt.grad.numpy(), upstream.numpy() * mask32)


def test_export_packed_equals_fake_quantized():
    rng = np.random.default_rng(0)
    w, scale, zero, g = _grid(rng, out=16, k=80, group=16, bits=4)
    lin = GroupQuantLinear(torch.tensor(w, dtype=torch.float32),
                           torch.tensor(scale, dtype=torch.float32), torch.tensor(zero), 4, 16)
    codes = lin.codes().numpy()
    gw = GPTQWeight(gptq_pack_qweight(codes.T), lin.stored_scale().numpy().T.copy(),
                    gptq_pack_qzeros(zero.T), (np.arange(80) // 16).astype(np.int32), 16)
    unpacked = gptq_dequantize(gw).T.astype(np.float32)
    np.testing.assert_array_equal(unpacked, lin.quantized_weight().detach().numpy())


def test_int_codes_match_numpy():
    rng = np.random.default_rng(1)
    w, scale, zero, g = _grid(rng)
    w32, s32 = w.astype(np.float32), scale.astype(np.float32)
    got = int_codes(torch.tensor(w32), torch.tensor(s32), torch.tensor(zero), 0, 7, 32).numpy()
    np.testing.assert_array_equal(got, np.clip(np.rint(w32 / s32[:, g]) + zero[:, g], 0, 7))


# ---------------------------------------------------------------------------------------------
# LSQ
# ---------------------------------------------------------------------------------------------
def _lsq_reference(w, s, z, bits, group):
    """Esser et al. 2020, appendix B's code (grad_scale, round_pass), with a zero point."""
    def grad_scale(x, scale):
        return (x - x * scale).detach() + x * scale

    def round_pass(x):
        return (x.round() - x).detach() + x
    qmax = 2**bits - 1
    g = torch.arange(w.shape[1]) // group
    n = torch.bincount(g).double()
    gs = 1.0 / torch.sqrt(n * qmax)                            # per group
    s_scaled = grad_scale(s, gs[None, :])
    sc = s_scaled[:, g]
    zc = z[:, g].double()
    return (round_pass(torch.clamp(w / sc + zc, 0, qmax)) - zc) * sc


@pytest.mark.parametrize("bits", [3, 4])
def test_lsq_gradients_against_the_papers_code(bits):
    rng = np.random.default_rng(10 + bits)
    w, scale, zero, g = _grid(rng, bits=bits)
    up = rng.standard_normal(w.shape)
    # ours (float32 tensors, float64 inside)
    w1 = torch.tensor(w, dtype=torch.float32, requires_grad=True)
    s1 = torch.tensor(scale, dtype=torch.float32, requires_grad=True)
    v1 = lsq_fake_quantize(w1, s1, torch.tensor(zero), bits, 32)
    v1.backward(torch.tensor(up, dtype=torch.float32))
    # reference, float64, on the same float32 inputs
    w2 = torch.tensor(w.astype(np.float32), dtype=torch.float64, requires_grad=True)
    s2 = torch.tensor(scale, dtype=torch.float64, requires_grad=True)
    v2 = _lsq_reference(w2, s2, torch.tensor(zero), bits, 32)
    v2.backward(torch.tensor(up.astype(np.float32), dtype=torch.float64))
    np.testing.assert_array_equal(v1.detach().numpy(), v2.detach().numpy().astype(np.float32))
    np.testing.assert_array_equal(w1.grad.numpy(), w2.grad.numpy().astype(np.float32))
    # a sum of up to 32 float32 terms of size ~1 against float64: 1e-6 absolute covers it
    np.testing.assert_allclose(s1.grad.numpy(), s2.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert np.abs(s2.grad.numpy()).min() > 0


def test_lsq_scale_passes_float16():
    """A scale that float16 cannot hold is used rounded; its gradient is the rounded one's."""
    w = torch.tensor([[0.1, -0.2, 0.3, 0.05]], requires_grad=True)
    s = torch.tensor([[0.0312345]], requires_grad=True)
    v = lsq_fake_quantize(w, s, torch.tensor([[4]]), 3, 4)
    s16 = float(np.float16(0.0312345))
    u = np.array([0.1, -0.2, 0.3, 0.05], np.float32).astype(np.float64) / s16
    q = np.clip(np.rint(u) + 4, 0, 7)
    np.testing.assert_array_equal(v.detach().numpy()[0], ((q - 4) * s16).astype(np.float32))


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
    s, z = torch.ones(8, 1), torch.zeros(8, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="scale"):
        GroupQuantLinear(w, torch.ones(8, 2), torch.zeros(8, 2), 4, 16)
    with pytest.raises(ValueError, match="bits"):
        GroupQuantLinear(w, s, z, 1, 16)
    with pytest.raises(ValueError, match="scale must be positive"):
        GroupQuantLinear(w, -s, z, 4, 16)
    with pytest.raises(ValueError, match="group"):
        group_fake_quantize(w, s, z, 4, 0)
