"""numfmt.torch.qat: the STE autograd Function and QATLinear (skipped without torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from numfmt.qat import WEIGHT_FORMATS, fake_quantize_weight  # noqa: E402
from numfmt.torch.qat import (ActivationFakeQuant, QATLinear, fake_quantize_int,  # noqa: E402
                              fake_quantize_weight_ste)


def test_issue_example_gradient():
    x = torch.tensor([-8.6, -8.4, -8.0, 7.0, 7.4, 7.6, float("inf")], requires_grad=True)
    y = fake_quantize_int(x, 1.0, 0, -8, 7)
    (y * torch.arange(1.0, 8.0)).sum().backward()
    assert y.tolist() == [-8, -8, -8, 7, 7, 7, 7]
    assert x.grad.tolist() == [0, 2, 3, 4, 5, 0, 0]


@pytest.mark.parametrize("scale,zp,qmin,qmax", [(1.0, 0, -8, 7), (0.125, 0, -127, 127),
                                               (0.5, 3, 0, 15), (2.0**-4, 128, 0, 255)])
def test_matches_torch_fake_quantize_per_tensor_affine(scale, zp, qmin, qmax):
    g = torch.Generator().manual_seed(0)
    x = (torch.rand(5000, generator=g) - 0.5) * (qmax - qmin + 8) * scale
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    w = torch.rand(5000, generator=g)
    y1 = fake_quantize_int(x1, scale, zp, qmin, qmax)
    y2 = torch.fake_quantize_per_tensor_affine(x2, scale, zp, qmin, qmax)
    (y1 * w).sum().backward()
    (y2 * w).sum().backward()
    assert torch.equal(y1, y2)
    assert torch.equal(x1.grad, x2.grad)
    assert 0 < (x1.grad == 0).float().mean() < 1   # both saturated and passing elements occur


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_weight_ste_values_equal_numpy_and_gradient_is_the_mask(fmt):
    w = torch.randn(8, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    w.requires_grad_()
    y = fake_quantize_weight_ste(w, fmt)
    y.sum().backward()
    fq = fake_quantize_weight(w.detach().numpy(), fmt)
    np.testing.assert_array_equal(y.detach().numpy(), fq.values)
    np.testing.assert_array_equal(w.grad.numpy(), fq.mask.astype(np.float64))


def test_qatlinear_trains_its_fp32_master_with_a_torch_optimizer():
    torch.manual_seed(0)
    layer = QATLinear(16, 4, weight_format="INT4", act_bits=8)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3)
    x = torch.rand(32, 16)
    before = layer.weight.detach().clone()
    loss = layer(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    assert not torch.equal(layer.weight, before)              # the master moved
    view = layer.quantized_weight()
    scale = layer.weight.detach().abs().max() / 7              # INT4 absmax scale, by hand
    codes = view / scale
    assert torch.allclose(codes, codes.round(), atol=1e-5)     # the view is on the grid
    master_codes = layer.weight.detach() / scale
    assert (master_codes - master_codes.round()).abs().max() > 0.05   # the master is not


def test_qatlinear_forward_uses_the_view():
    torch.manual_seed(0)
    base = torch.nn.Linear(32, 3)
    q = QATLinear.from_linear(base, "NVFP4")
    x = torch.randn(5, 32)
    w = torch.from_numpy(fake_quantize_weight(base.weight.detach().double().numpy(),
                                              "NVFP4").values).float()
    assert torch.allclose(q(x), x @ w.T + base.bias, atol=1e-6)
    assert torch.equal(QATLinear.from_linear(base)(x), base(x))


def test_activation_range_moving_average_and_eval_mode():
    act = ActivationFakeQuant(8, momentum=0.5)
    act(torch.tensor([0.0, 2.0]))
    act(torch.tensor([0.0, 4.0]))
    assert act.hi.item() == 3.0                               # 2 + 0.5 (4 - 2)
    act.eval()
    y = act(torch.tensor([0.0, 3.0, 5.0]))
    assert y.tolist() == [0.0, 3.0, 3.0]                      # range [0, 3] in eval: 5 clamps


def test_bad_input():
    with pytest.raises(ValueError, match="weight_format"):
        QATLinear(4, 4, weight_format="INT3")
    with pytest.raises(ValueError, match="calibrated"):
        ActivationFakeQuant().eval()(torch.ones(2))
    with pytest.raises(ValueError, match="momentum"):
        ActivationFakeQuant(momentum=0.0)
    with pytest.raises(ValueError, match="bits"):
        ActivationFakeQuant(bits=1)
    with pytest.raises(TypeError, match="floating"):
        fake_quantize_int(torch.ones(2, dtype=torch.int32), 1.0, 0, -8, 7)
    with pytest.raises(ValueError, match="scale"):
        fake_quantize_int(torch.ones(2), 0.0, 0, -8, 7)
    with pytest.raises(ValueError, match="NaN"):
        fake_quantize_int(torch.tensor([float("nan")]), 1.0, 0, -8, 7)
    with pytest.raises(ValueError, match="qmin"):
        fake_quantize_int(torch.ones(2), 1.0, 0, 7, -8)
    with pytest.raises(TypeError, match="floating"):
        fake_quantize_weight_ste(np.ones(4), "INT8")


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_zero_initialised_qatlinear_runs_and_its_weights_get_gradients(fmt):
    # nn.init.zeros_ is a common init (output projections, LoRA B): every format quantizes the
    # zeros to zeros, and the STE passes the whole gradient (nothing is saturated), so the
    # first step moves the weights. Hand case: y = W x with x = ones(32), loss = sum(y),
    # dloss/dW = ones.
    layer = QATLinear(32, 2, bias=False, weight_format=fmt)
    torch.nn.init.zeros_(layer.weight)
    y = layer(torch.ones(1, 32))
    assert torch.equal(y, torch.zeros(1, 2))
    y.sum().backward()
    assert torch.equal(layer.weight.grad, torch.ones(2, 32))


def test_activation_quantizer_accepts_an_all_zero_first_batch():
    # A dead-ReLU batch of zeros calibrates the range [0, 0]: scale 1, output zeros.
    act = ActivationFakeQuant(8)
    assert torch.equal(act(torch.zeros(4)), torch.zeros(4))
    act(torch.tensor([0.0, 2.0]))
    assert act.hi.item() == pytest.approx(0.2)               # 0 + 0.1 (2 - 0)



@pytest.mark.parametrize("args,exc,match", [
    ((1.0, 0.5, -8, 7), TypeError, "zero_point must be an integer"),
    ((1.0, 0, -8.5, 7), TypeError, "qmin must be an integer"),
    (("0.5", 0, -8, 7), TypeError, "scale must be a real number"),
    ((True, 0, -8, 7), TypeError, "scale must be a real number"),
])
def test_fake_quantize_int_refuses_non_integer_grid_parameters(args, exc, match):
    # Before: int(0.5) silently truncated the zero point to 0, int(-8.5) the range to -8.
    with pytest.raises(exc, match=match):
        fake_quantize_int(torch.ones(2), *args)


def test_fake_quantize_int_accepts_a_one_element_tensor_scale_without_warnings():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = fake_quantize_int(torch.tensor([1.2]), torch.tensor(0.5), np.int64(0), -8, 7)
    assert y.tolist() == [1.0]   # round(1.2 / 0.5) = round(2.4) = 2 -> 2 * 0.5

@pytest.mark.parametrize("bad,match", [([1.0, float("inf")], "non-finite"),
                                       ([float("nan"), 1.0], "non-finite"),
                                       ([], "empty")])
def test_activation_quantizer_refuses_a_bad_batch_and_keeps_its_range(bad, match):
    # Before: the Inf/NaN batch was folded into the moving average first (range -inf or NaN
    # for good: every later batch failed, or the range silently reset), and an empty batch
    # gave torch's "min(): Expected reduction dim" error.
    act = ActivationFakeQuant(8, momentum=0.5)
    act(torch.tensor([-1.0, 1.0]))
    with pytest.raises(ValueError, match=match):
        act(torch.tensor(bad))
    assert (act.lo.item(), act.hi.item()) == (-1.0, 1.0)
    act(torch.tensor([-1.0, 3.0]))
    assert act.hi.item() == 2.0                               # 1 + 0.5 (3 - 1)


@pytest.mark.parametrize("momentum", [True, "0.1"])
def test_activation_quantizer_refuses_a_momentum_that_is_not_a_number(momentum):
    with pytest.raises(TypeError, match="momentum"):
        ActivationFakeQuant(8, momentum=momentum)
