"""numfmt.torch.train's state at its edges: checkpoint and resume, evaluation, accumulated
micro-batches, delayed scaling's NaN and zero amaxes, the loss scaler's limits.

Oracles: the uninterrupted run (a resumed run equals it bit for bit); TransformerEngine's
fused delayed-scaling update (``kernel_bulk`` in
``transformer_engine/common/recipe/delayed_scaling.cu``) transcribed below;
torch.amp.GradScaler; torch's float16 cast; float64 products; the 1/sqrt(n) spread of
independent draws.
"""

import io
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numfmt as nf  # noqa: E402
import numfmt.torch.train as ntt  # noqa: E402
from numfmt.torch.train.lora import NF4Weight  # noqa: E402
from numfmt.torch.train.loss_scale import MIN_SCALE  # noqa: E402
from numfmt.torch.train.lsq import GroupQuantLinear  # noqa: E402


def data(rows, inner, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    return torch.from_numpy((rng.standard_normal((rows, inner)) * scale).astype(np.float32))


# ------------------------------------------------------------------ checkpoint and resume
def _train(layer, opt, steps, start=0):
    """``steps`` SGD steps on fixed data; gradients ~1e-6 (E5M2 flushes them at scale 1)."""
    grads = []
    for t in range(start, start + steps):
        x = data(32, 32, seed=t)
        dy = data(32, 32, seed=100 + t, scale=1e-6)
        opt.zero_grad()
        layer(x).backward(dy)
        grads.append(layer.weight.grad.clone())
        opt.step()
    return grads


@pytest.mark.parametrize("recipe", ["fp8_delayed", "nvfp4", "fp8_current"])
def test_resumed_run_equals_the_uninterrupted_run_bit_for_bit(recipe):
    ref = ntt.QuantLinear(32, 32, recipe, seed=3)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=1e3, momentum=0.9)
    ref_grads = _train(ref, ref_opt, 6)

    first = ntt.QuantLinear(32, 32, recipe, seed=3)
    first_opt = torch.optim.SGD(first.parameters(), lr=1e3, momentum=0.9)
    _train(first, first_opt, 3)
    buf = io.BytesIO()
    torch.save({"model": first.state_dict(), "opt": first_opt.state_dict()}, buf)
    buf.seek(0)
    ckpt = torch.load(buf, weights_only=True)      # plain numbers and tensors only

    fresh = ntt.QuantLinear(32, 32, recipe, seed=11)   # another seed: the checkpoint's wins
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=1e3, momentum=0.9)
    fresh.load_state_dict(ckpt["model"])
    fresh_opt.load_state_dict(ckpt["opt"])
    grads = _train(fresh, fresh_opt, 3, start=3)
    for a, b in zip(grads, ref_grads[3:]):
        assert torch.equal(a, b)
    assert torch.equal(fresh.weight, ref.weight) and fresh.step == ref.step == 6
    if recipe == "fp8_delayed":
        assert float(grads[0].abs().max()) > 0   # the first resumed dW is not flushed
        assert fresh._histories["dy"].history == ref._histories["dy"].history


def test_extra_state_is_documented_plain_data_and_checked():
    layer = ntt.QuantLinear(32, 32, "fp8_delayed")
    _train(layer, torch.optim.SGD(layer.parameters(), lr=0.1), 2)
    state = layer.state_dict()["_extra_state"]
    assert state["version"] == 1 and state["step"] == 2 and state["recipe"] == "fp8_delayed"
    assert set(state["histories"]) == {"x", "w", "dy"}
    assert len(state["histories"]["x"]["history"]) == 2
    other = ntt.QuantLinear(32, 32, "fp8_current")
    with pytest.raises(ValueError, match="fp8_delayed"):
        other.load_state_dict(layer.state_dict())
    with pytest.raises(ValueError, match="extra state"):
        other.set_extra_state({"step": 3})


# ------------------------------------------------------------------ evaluation
def test_eval_mode_backward_leaves_the_run_alone():
    def run(saliency):
        layer = ntt.QuantLinear(32, 32, "fp8_delayed", seed=1)
        x, dy = data(32, 32), data(32, 32, seed=1)
        layer(x).backward(dy)
        history = list(layer._histories["dy"].history)
        if saliency:                      # an input-saliency backward in eval mode
            layer.eval()
            xs = x.clone().requires_grad_()
            layer(xs).backward(torch.full((32, 32), 1e4))
            layer.train()
            assert layer._histories["dy"].history == history
        layer.weight.grad = None
        layer(x).backward(dy)
        return layer.weight.grad
    assert torch.equal(run(True), run(False))


# ------------------------------------------------------------------ stochastic rounding draws
SR_DGRAD = ntt.Recipe("sr_dgrad", dgrad=(ntt.OperandSpec("e2m1", (1, 16), "e4m3",
                                                          mode="stochastic"),
                                         ntt.OperandSpec()))


def test_accumulated_micro_batches_draw_independently():
    # dx = SR(dy) W with W in FP32: unbiased, so the mean over n micro-batches of the same
    # (x, dy) has error ~1/sqrt(n) of one micro-batch's when the draws are independent, and
    # exactly one micro-batch's when they repeat. n = 16: 0.25 expected, 0.5 asserted.
    layer = ntt.QuantLinear(32, 32, SR_DGRAD, seed=0)
    x, dy = data(64, 32), data(64, 32, seed=1)
    n = 16
    xs = [x.clone().requires_grad_() for _ in range(n)]
    torch.autograd.backward([layer(a) for a in xs], [dy] * n)
    exact = dy.double() @ layer.weight.detach().double()           # (N, out) (out, in)
    assert not torch.equal(xs[0].grad, xs[1].grad)
    one = (xs[0].grad.double() - exact).pow(2).mean().sqrt()
    mean = (torch.stack([a.grad.double() for a in xs]).mean(0) - exact).pow(2).mean().sqrt()
    assert float(mean) < 0.5 * float(one)


def test_a_layer_applied_twice_draws_twice_and_a_single_step_is_unchanged():
    layer = ntt.QuantLinear(32, 32, SR_DGRAD, seed=0)
    x = data(32, 32).requires_grad_()
    layer(layer(x)).backward(data(32, 32, seed=1))
    # one forward and one backward per step draws from (seed, step + 1): a fixed point
    single = ntt.QuantLinear(32, 32, SR_DGRAD, seed=0)
    x1 = data(32, 32).requires_grad_()
    single(x1).backward(data(32, 32, seed=1))
    g = torch.Generator().manual_seed((0 * 1_000_003 + 1) * 2 + 1)
    spec = SR_DGRAD.dgrad[0]
    dyq = ntt.quantize_operand(data(32, 32, seed=1), spec, generator=g)
    assert torch.equal(x1.grad, dyq @ single.weight.detach())


# ------------------------------------------------------------------ delayed scaling's rule
def te_fused(stream, length, fmax=448.0):
    """TE's fused update (kernel_bulk, amax_compute_algo "max", margin 0), transcribed:
    slot 0 holds the step's amax; if it is not 0 the history rolls (the window's maximum
    taken with fmaxf, which skips NaN, starting from 0) and slot 0 is cleared; the scale
    (TE's multiplier) is fmax / amax when amax is finite and positive, else the previous.
    Returns numfmt's dequantization scale (1 / multiplier) before each step."""
    hist = [0.0] * length
    mult, out = 1.0, []

    def fmaxf(a, b):
        return b if math.isnan(a) else a if math.isnan(b) else max(a, b)
    for amax_now in stream:
        out.append(1.0 / mult)
        hist[0] = amax_now
        last, amax = hist[0], 0.0
        if last != 0.0:
            new = [0.0] * length
            for i in range(length):
                a = hist[i + 1] if i < length - 1 else last
                amax = fmaxf(amax, a)
                new[i] = a if i > 0 else 0.0
            hist = new
        if math.isfinite(amax) and amax > 0:
            mult = fmax / amax
    out.append(1.0 / mult)
    return out


NAN, INF = math.nan, math.inf
STREAMS = [
    [NAN, 1.0, 2.0, 1.0, 0.5, 0.5],             # NaN as the oldest entry
    [4.0, NAN, 1.0, 1.0, 1.0, 1.0],             # NaN after the window's maximum
    [1.0, 896.0, 0.0, 0.0, 0.0, 2.0, 1.0],      # zeros are not rolled in
    [0.0, 0.0, 3.0, NAN, NAN, NAN, 1.0],
    [2.0, INF, 1.0, 1.0, 1.0, 0.0, 1.0],
    [NAN, NAN, NAN, 5.0],
]


@pytest.mark.parametrize("length", [1, 2, 3])
@pytest.mark.parametrize("stream", STREAMS)
def test_amax_history_follows_tes_fused_update(stream, length):
    h = ntt.AmaxHistory(length)
    e4m3 = nf.FP8_E4M3
    got = [h.scale(e4m3)]
    for a in stream:
        h.record(a, {e4m3})
        got.append(h.scale(e4m3))
    want = te_fused(stream, length)
    assert got == pytest.approx(want, rel=1e-6)   # TE's multiplier is an FP32 quotient


# ------------------------------------------------------------------ loss scaler
def test_unscale_twice_is_refused_as_gradscaler_refuses():
    p = torch.nn.Parameter(torch.ones(2))
    ref = torch.amp.GradScaler("cpu", init_scale=2.0)
    opt = torch.optim.SGD([p], lr=0.1)
    ref.scale(p.sum()).backward()
    ref.unscale_(opt)
    with pytest.raises(RuntimeError, match="already been called"):
        ref.unscale_(opt)
    q = torch.nn.Parameter(torch.ones(2))
    s = ntt.DynamicLossScaler(init_scale=2.0)
    s.scale_loss(q.sum()).backward()
    s.unscale_([q])
    with pytest.raises(RuntimeError, match="already been called"):
        s.unscale_([q])
    assert torch.equal(q.grad, p.grad)             # divided once
    s.update(False)
    s.scale_loss(q.sum()).backward()               # a new step may unscale again
    s.unscale_([q])


def test_backoff_follows_gradscaler_then_stops_above_zero():
    kw = dict(init_scale=2.0**10, growth_interval=1000)
    ref, ours = torch.amp.GradScaler("cpu", **kw), ntt.DynamicLossScaler(**kw)
    p, q = torch.nn.Parameter(torch.ones(1)), torch.nn.Parameter(torch.ones(1))
    opt = torch.optim.SGD([p], lr=0.1)
    for _ in range(200):                           # every step overflows
        opt.zero_grad()
        q.grad = None
        ref.scale(p.sum() * math.inf).backward()
        ref.step(opt)
        ref.update()
        ours.scale_loss(q.sum() * math.inf).backward()
        assert ours.unscale_([q]) is True
        ours.update(True)
        if float(ref.get_scale()) >= MIN_SCALE:
            assert ours.scale == float(ref.get_scale())
    assert float(ref.get_scale()) == 0.0           # GradScaler's scale underflows
    assert ours.scale == MIN_SCALE == 2.0**-127
    q.grad = None
    ours.scale_loss(q.sum()).backward()            # a clean step still unscales
    assert ours.unscale_([q]) is False and torch.equal(q.grad, torch.ones(1))


def test_loss_scaler_state_round_trips_through_gradscalers_keys():
    ref = torch.amp.GradScaler("cpu", init_scale=8.0, growth_interval=3)
    p = torch.nn.Parameter(torch.ones(1))
    ref.scale(p.sum()).backward()
    ref.unscale_(torch.optim.SGD([p], lr=0.1))
    ref.update()
    ours = ntt.DynamicLossScaler()
    ours.load_state_dict(ref.state_dict())
    assert ours.scale == float(ref.get_scale()) and ours.growth_tracker == 1
    assert set(ours.state_dict()) == set(ref.state_dict())


# ------------------------------------------------------------------ storage dtypes
def test_group_quant_linear_refuses_scales_float16_cannot_hold():
    assert float(torch.tensor(1e-9).half()) == 0.0 and math.isinf(float(torch.tensor(1e6).half()))
    w, z = torch.randn(8, 16), torch.full((8, 1), 8)
    for bad in (1e-9, 1e6):
        with pytest.raises(ValueError, match="scale"):
            GroupQuantLinear(w, torch.full((8, 1), bad), z, 4, 16)


def test_nf4_weight_keeps_its_storage_dtypes_under_module_to():
    w = torch.randn(32, 64)
    ref = NF4Weight.quantize(w)
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        moved = NF4Weight.quantize(w).to(dtype)
        assert all(moved._buffers[k].dtype == ref._buffers[k].dtype for k in ref._buffers)
        assert torch.equal(moved.dequantize(), ref.dequantize())
    # one rounding, to the dtype asked for: torch's cast of the float64 values
    assert torch.equal(ref.dequantize(torch.bfloat16),
                       ref.dequantize(torch.float64).to(torch.bfloat16))
