"""numfmt.torch.train.lsq (per-group STE fake quantization, LSQ), against hand-written
references, numfmt's numpy storage (GPTQ's packed layout) and the LSQ paper's gradients."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from numfmt.packing import (gptq_dequantize, gptq_pack_qweight, gptq_pack_qzeros,  # noqa: E402
                            GPTQWeight)
from numfmt.torch.train.lsq import (GroupQuantLinear, group_fake_quantize, int_codes,  # noqa: E402
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
# Bad settings
# ---------------------------------------------------------------------------------------------
def test_bad_settings_raise_naming_the_argument():
    w = torch.zeros(8, 16)
    s, z = torch.ones(8, 1), torch.zeros(8, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="scale"):
        GroupQuantLinear(w, torch.ones(8, 2), torch.zeros(8, 2), 4, 16)
    with pytest.raises(ValueError, match="bits"):
        GroupQuantLinear(w, s, z, 1, 16)
    with pytest.raises(ValueError, match="scale must be positive"):
        GroupQuantLinear(w, -s, z, 4, 16)
    with pytest.raises(ValueError, match="group"):
        group_fake_quantize(w, s, z, 4, 0)


@pytest.mark.parametrize("learn_scale", [False, True])
def test_a_float64_input_computes_in_float64_on_the_float32_values(learn_scale):
    """GroupQuantLinear keeps float32 master weights and scales but takes its input's dtype:
    a float64 x gets x @ Ŵᵀ + b in float64 (Ŵ's float32 values are exact there), and the
    parameters' gradients are the float64 ones rounded once to float32."""
    rng = np.random.default_rng(3)
    w, scale, zero, _g = _grid(rng, out=16, k=80, group=16, bits=4)
    bias = torch.tensor(rng.standard_normal(16), dtype=torch.float32)
    lin = GroupQuantLinear(torch.tensor(w, dtype=torch.float32),
                           torch.tensor(scale, dtype=torch.float32), torch.tensor(zero), 4, 16,
                           bias, learn_scale)
    x = torch.tensor(rng.standard_normal((5, 80)), dtype=torch.float64)
    y = lin(x)
    w_hat = lin.quantized_weight().detach().double().numpy()
    want = x.numpy() @ w_hat.T + bias.double().numpy()
    assert y.dtype == torch.float64
    np.testing.assert_allclose(y.detach().numpy(), want, rtol=1e-13, atol=1e-13)
    y.pow(2).sum().backward()
    # d/dŴ of Σ y² is 2 yᵀ x; the STE passes it where the code was not clamped (LSQ: where
    # the unrounded code lies strictly inside the grid)
    cols = np.arange(80) // 16
    u = w.astype(np.float32) / scale.astype(np.float32)[:, cols]
    inside = (((u + zero[:, cols] > 0) & (u + zero[:, cols] < 15)) if learn_scale else
              ((np.rint(u) + zero[:, cols] >= 0) & (np.rint(u) + zero[:, cols] <= 15)))
    grad = (2 * y.detach().numpy().T @ x.numpy()) * inside
    assert lin.weight.grad.dtype == torch.float32
    np.testing.assert_allclose(lin.weight.grad.numpy(), grad.astype(np.float32), rtol=1e-6,
                               atol=1e-6)
    if learn_scale:
        assert lin.scale.grad.dtype == torch.float32
