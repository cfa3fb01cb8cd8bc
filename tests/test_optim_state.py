"""numfmt.optim_state and numfmt.torch.train.optim against torchao's low-bit optimizers and
torch.optim.AdamW."""

import numpy as np
import pytest
import torch

from numfmt.optim_state import blockwise_dequantize, blockwise_quantize, dynamic_map
from numfmt.torch.train.optim import AdamW, state_bytes_per_weight

torchao_optim = pytest.importorskip("torchao.optim")
from torchao.optim.quant_utils import (create_dynamic_map, dequant_with_qmap,  # noqa: E402
                                       quantize_8bit_with_qmap, scale_tensor)


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_map_is_torchaos_within_two_ulps(signed):
    ours = dynamic_map(signed)
    theirs = np.array(create_dynamic_map(signed=signed), dtype=np.float32)
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32))
    assert ulps.max() <= 2          # float64 against float32 linspace, rounded once
    assert ours[-1] == 1.0 and (ours[0] == -ours[-2] if signed else ours[0] == 0.0)
    assert np.unique(ours).size == 256


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e4])
def test_codes_equal_torchaos_with_its_map(signed, scale):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(64 * 256, generator=g) * scale
    if not signed:
        x = x.square()                                   # a second moment: non-negative
    qmap = torch.tensor(create_dynamic_map(signed=signed), dtype=torch.float32)
    xs, absmax = scale_tensor(x, 256)
    codes = quantize_8bit_with_qmap(xs, qmap)
    ours = blockwise_quantize(x.numpy(), 256, signed, qmap=qmap.numpy())
    assert np.array_equal(ours.absmax, absmax.numpy())
    assert np.array_equal(ours.codes, codes.numpy())
    back = dequant_with_qmap(codes, qmap, absmax).numpy()
    # torchao multiplies in float32; numfmt in float64: the same value rounded once
    assert np.array_equal(blockwise_dequantize(ours).astype(np.float32), back)


def test_dynamic_map_beats_linear_int8_on_a_second_moment():
    # v spans decades below its block's absmax: a linear grid (step absmax / 255) flushes it
    g = np.random.default_rng(0)
    v = 10.0 ** g.uniform(-9, -3, 8 * 2048)
    dyn = blockwise_dequantize(blockwise_quantize(v, 2048, signed=False))
    amax = np.abs(v.reshape(-1, 2048)).max(axis=1, keepdims=True)
    lin = (np.round(v.reshape(-1, 2048) / amax * 255) * amax / 255).reshape(-1)
    assert (lin == 0).mean() > 0.5 and (dyn == 0).mean() == 0


def test_short_last_block_and_zero_block():
    x = np.zeros(5000)
    x[:10] = np.arange(10)
    st = blockwise_quantize(x, 2048)
    assert st.absmax.tolist() == [9.0, 0.0, 0.0] and st.codes.shape == (5000,)
    assert np.array_equal(blockwise_dequantize(st)[:10],
                          dynamic_map()[st.codes[:10]].astype(np.float64) * 9.0)
    assert not blockwise_dequantize(st)[10:].any()
    assert st.nbytes == 5000 + 12


@pytest.mark.parametrize("call, exc, match", [
    (lambda: blockwise_quantize([1.0, np.nan]), ValueError, "finite"),
    (lambda: blockwise_quantize([]), TypeError, "non-empty"),
    (lambda: blockwise_quantize(["a"]), TypeError, "real"),
    (lambda: blockwise_quantize([1.0], block=0), ValueError, "block"),
    (lambda: blockwise_quantize([1.0], qmap=np.zeros(3)), ValueError, "qmap"),
    (lambda: blockwise_dequantize(np.zeros(3)), TypeError, "BlockwiseState"),
])
def test_bad_inputs(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


# ------------------------------------------------------------------------------ the optimizer
def _pair(ours_kw, theirs_cls, theirs_kw, shape=(64, 256), steps=5, dtype=torch.float32,
          wd=0.0):
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=dtype)
    a, b = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    oa = AdamW([a], lr=1e-2, weight_decay=wd, **ours_kw)
    ob = theirs_cls([b], lr=1e-2, weight_decay=wd, **theirs_kw)
    g0 = torch.Generator().manual_seed(1)
    for _ in range(steps):
        g = torch.randn(shape, generator=g0, dtype=dtype)
        a.grad, b.grad = g.clone(), g.clone()
        oa.step()
        ob.step()
    return a.detach(), b.detach(), oa, ob


def test_fp32_state_is_torchs_adamw():
    a, b, _, _ = _pair({}, torch.optim.AdamW, {}, dtype=torch.float64, wd=0.1, steps=20)
    # the same formula in another operation order: float64 rounding only
    assert torch.allclose(a, b, rtol=1e-14, atol=1e-15)


def _ulps_apart(a, b):
    return ((a - b).abs() / torch.finfo(torch.float32).eps / b.abs().clamp_min(1e-30)).max()


def test_int8_state_is_torchaos_adamw8bit():
    a, b, oa, ob = _pair({"state": "int8", "block": 256}, torchao_optim.AdamW8bit,
                         {"block_size": 256})
    sa = next(iter(oa.state.values()))
    sb = next(iter(ob.state.values()))
    # every stored code equal after five steps (numfmt's map is torchao's to 2 ulps)
    assert np.array_equal(sa["exp_avg"].codes, sb["exp_avg"].codes.numpy())
    assert np.array_equal(sa["exp_avg_sq"].codes, sb["exp_avg_sq"].codes.numpy())
    # weights: the same update, torchao compiled in float32 (a few ulps of the update)
    assert (a - b).abs().max() < 1e-6


def test_fp8_state_is_torchaos_adamwfp8_within_an_ulp():
    a, b, oa, ob = _pair({"state": "fp8", "block": 256}, torchao_optim.AdamWFp8,
                         {"block_size": 256}, steps=1)
    sa, sb = next(iter(oa.state.values())), next(iter(ob.state.values()))
    m_ours, m_theirs = sa["exp_avg"], sb["exp_avg"].dequantize()
    # torchao scales by fl32(amax / 448) and multiplies back in float32; numfmt's scale is exact
    assert _ulps_apart(m_ours, m_theirs) <= 2
    assert (a - b).abs().max() < 1e-6


def test_state_bytes():
    p = torch.nn.Parameter(torch.zeros(4096))
    for state, expected in (("fp32", 8 * 4096), ("bf16", 4 * 4096),
                            ("int8", 2 * 4096 + 2 * 4 * 2), ("fp8", 2 * 4096 + 2 * 4 * 2)):
        o = AdamW([p], state=state)
        p.grad = torch.ones(4096)
        o.step()
        assert o.state_nbytes() == expected == state_bytes_per_weight(state) * 4096
    small = torch.nn.Parameter(torch.zeros(100))
    o = AdamW([small], state="int8")
    small.grad = torch.ones(100)
    o.step()
    assert o.state_nbytes() == 800                      # under 4,096 elements: FP32


def _bf16(x):
    return x.to(torch.bfloat16).to(x.dtype)


def test_bf16_master_loses_small_updates_and_sr_kahan_keep_them():
    # weights at 1.0, an update of 1e-4 per step: below half a BF16 ulp (2^-8 / 2 = 2e-3)
    n, steps = 4096, 200
    results = {}
    for master in ("fp32", "bf16", "bf16_sr", "bf16_kahan"):
        p = torch.nn.Parameter(torch.ones(n, dtype=torch.float64))
        o = AdamW([p], lr=1e-4, master=master, seed=3)
        for _ in range(steps):
            p.grad = -torch.ones(n, dtype=torch.float64)    # Adam's step is lr at every step
            o.step()
        results[master] = p.detach()
    exact = results["fp32"]
    assert torch.allclose(exact, torch.full((n,), 1 + steps * 1e-4, dtype=torch.float64),
                          rtol=1e-9)
    assert (results["bf16"] == 1.0).all()                  # every update rounded away
    for master in ("bf16_sr", "bf16_kahan"):
        assert torch.equal(_bf16(results[master]), results[master])   # on the BF16 grid
    # SR: unbiased, mean within 4 sigma of the exact sum (each step's rounding error has a
    # standard deviation of at most half an ulp, 2^-8; n independent weights)
    sigma = 2.0 ** -8 * steps ** 0.5 / n ** 0.5
    assert abs(results["bf16_sr"].mean() - exact.mean()) < 4 * sigma
    # Kahan: within one BF16 ulp of the exact sum
    assert (results["bf16_kahan"] - exact).abs().max() <= 2.0 ** -7


@pytest.mark.parametrize("kw, exc, match", [
    ({"state": "int4"}, ValueError, "state"), ({"master": "fp16"}, ValueError, "master"),
    ({"block": 0}, ValueError, "block"), ({"lr": -1.0}, ValueError, "lr"),
    ({"betas": (0.9, 1.0)}, ValueError, "betas"),
])
def test_optimizer_bad_inputs(kw, exc, match):
    with pytest.raises(exc, match=match):
        AdamW([torch.nn.Parameter(torch.zeros(3))], **kw)
    with pytest.raises(TypeError, match="float32"):
        AdamW([torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))])
    with pytest.raises(ValueError, match="state"):
        state_bytes_per_weight("int4")
