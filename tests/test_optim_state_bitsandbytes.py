"""numfmt.optim_state and numfmt's 8-bit AdamW against bitsandbytes on this CPU.

bitsandbytes' CPU kernels (csrc/cpu_ops.cpp, ``quantize_cpu_impl``; read at
github.com/bitsandbytes-foundation/bitsandbytes commit 95f9af309d4d, the code of the 0.50.2
wheel) do not look up the nearest map value: they multiply by the float32 reciprocal of the
block's absmax, cut [-1, 1] into a linear table of 65,536 bins and give each bin the code of its
left edge's nearest map value (``build_quantize_lut``, ``norm_to_lut_index``). A bin is 3e-5
wide, while the dynamic map's values near 0 are 1e-7 apart: there the table picks a code
several map values away from the nearest. numfmt rounds to the nearest map value, as the paper
(section 2.2) and bitsandbytes' CUDA and pure-torch kernels do. The tests transcribe the table,
check that bitsandbytes computes exactly it, and check that every code where the two libraries
differ is one where the table is not the nearest value.
"""

import numpy as np
import pytest
import torch

from numfmt.optim_state import blockwise_dequantize, blockwise_quantize, dynamic_map
from numfmt.torch.train.optim import AdamW

bnb_functional = pytest.importorskip(
    "bitsandbytes.functional", reason="bitsandbytes is not installed (pip install --no-deps "
    "bitsandbytes)")
import bitsandbytes as bnb  # noqa: E402

F32 = np.float32
#: bitsandbytes' CPU 8-bit optimizer update quantizes in blocks of 256 whatever it is given
#: (backends/cpu/ops.py, ``_optimizer_update_8bit_blockwise_cpu``)
CPU_BLOCK = 256


def table_codes(x: np.ndarray, absmax: np.ndarray, qmap: np.ndarray, block: int) -> np.ndarray:
    """bitsandbytes' CPU quantizer, transcribed: float32 throughout, as csrc/cpu_ops.cpp."""
    q = qmap.astype(F32)
    mid = (F32(0.5) * (q[:-1] + q[1:])).astype(F32)
    grid = (F32(-1) + (F32(2) * np.arange(65536).astype(F32)) / F32(65535)).astype(F32)
    table = np.searchsorted(mid, grid, side="left")     # advance while a midpoint < the bin
    inv = F32(1) / absmax.astype(F32)
    v = np.clip((x.reshape(-1, block).astype(F32) * inv[:, None]).astype(F32), -1, 1)
    idx = ((v + F32(1)) * F32(0.5) * F32(65535) + F32(0.5)).astype(F32).astype(np.uint16)
    return table[idx].reshape(x.shape).astype(np.uint8)


def nearest_codes(x: np.ndarray, absmax: np.ndarray, qmap: np.ndarray, block: int):
    """The nearest map value to x / absmax (float64), ties to the lower index, by brute force."""
    v = x.reshape(-1, block).astype(np.float64) / absmax.astype(np.float64)[:, None]
    d = np.abs(v.reshape(-1, 1) - qmap.astype(np.float64)[None, :])
    return d.argmin(axis=1).reshape(x.shape).astype(np.uint8), v.reshape(x.shape)


def _inputs(signed):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64 * 256, generator=g)
    if not signed:
        x = x.square()                                  # a second moment: non-negative
    # and a tensor whose blocks span 15 e-folds below their absmax, as Adam's v does
    return x, x * torch.exp(torch.linspace(-15.0, 0.0, x.numel()))


@pytest.mark.parametrize("signed", [True, False])
def test_dynamic_map_is_bitsandbytes_within_two_ulps(signed):
    theirs = bnb_functional.create_dynamic_map(signed=signed).float().numpy()
    ours = dynamic_map(signed)
    # bitsandbytes builds the map in float32 torch.linspace; numfmt in float64, rounded once
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32))
    assert ulps.max() <= 2 and np.unique(ours).size == 256


@pytest.mark.parametrize("signed", [True, False])
def test_blockwise_codes_against_bitsandbytes_cpu(signed):
    qmap = bnb_functional.create_dynamic_map(signed=signed).float()
    q = qmap.numpy()
    for x in _inputs(signed):
        codes, st = bnb_functional.quantize_blockwise(x, code=qmap, blocksize=256)
        theirs = codes.numpy()
        ours = blockwise_quantize(x.numpy(), 256, signed, qmap=q)
        assert np.array_equal(ours.absmax, st.absmax.numpy())
        # bitsandbytes computes exactly the transcribed table ...
        assert np.array_equal(theirs, table_codes(x.numpy(), ours.absmax, q, 256))
        # ... numfmt the nearest map value
        near, v = nearest_codes(x.numpy(), ours.absmax, q, 256)
        assert np.array_equal(ours.codes, near)
        # every code that differs is one where the table's code is not the nearest: numfmt's
        # error is never larger, and strictly smaller wherever the codes differ
        differ = ours.codes != theirs
        assert differ.any()                             # the table does cost something here
        err_ours = np.abs(q.astype(np.float64)[ours.codes] - v)
        err_theirs = np.abs(q.astype(np.float64)[theirs] - v)
        assert (err_ours <= err_theirs).all() and (err_ours[differ] < err_theirs[differ]).all()
        # the same codes decode to the same values: bitsandbytes multiplies in float32
        back = bnb_functional.dequantize_blockwise(codes, st).numpy()
        mine = blockwise_dequantize(type(ours)(theirs, ours.absmax, 256, q))
        assert np.array_equal(mine.astype(F32), back)


def test_adamw8bit_step_against_bitsandbytes():
    shape, lr, betas = (64, 256), 1e-2, (0.9, 0.999)
    w0 = torch.randn(shape, generator=torch.Generator().manual_seed(0))
    g = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    a, b = torch.nn.Parameter(w0.clone()), torch.nn.Parameter(w0.clone())
    oa = AdamW([a], lr=lr, betas=betas, weight_decay=0.01, state="int8", block=CPU_BLOCK)
    ob = bnb.optim.AdamW8bit([b], lr=lr, betas=betas, weight_decay=0.01)
    a.grad, b.grad = g.clone(), g.clone()
    oa.step()
    ob.step()
    # step 1 updates with the moments before they are stored, in both: the updates differ by
    # bitsandbytes' float32 roundings (the decay, m / denom, its product by lr, the sum: four
    # of at most 2^-24 relative each on values below |w| + lr; Adam's first step is about lr)
    # against numfmt's float64 update rounded once to the float32 weight
    diff = (a.detach() - b.detach()).abs()
    assert (diff <= 4 * 2.0 ** -23 * (w0.abs() + lr)).all() and (diff == 0).float().mean() > 0.5
    sa, sb = oa.state[a], ob.state[b]
    # each library's first moments as its code computes them in float32: bitsandbytes'
    # mul_/add_/addcmul_ (backends/cpu/ops.py), numfmt's lerp; they differ by an ulp at most
    zero = torch.zeros(shape)
    bnb_m = zero.clone().mul_(betas[0]).add_(g, alpha=1 - betas[0]).numpy()
    bnb_v = zero.clone().mul_(betas[1]).addcmul_(g, g, value=1 - betas[1]).numpy()
    our_m, our_v = zero.lerp(g, 1 - betas[0]).numpy(), zero.lerp(g * g, 1 - betas[1]).numpy()
    for ours, codes, absmax, qmap, x_bnb, x_ours in (
            (sa["exp_avg"], sb["state1"], sb["absmax1"], sb["qmap1"], bnb_m, our_m),
            (sa["exp_avg_sq"], sb["state2"], sb["absmax2"], sb["qmap2"], bnb_v, our_v)):
        q = qmap.numpy()
        # the maps bitsandbytes' AdamW8bit stores (signed for m, unsigned for v) are numfmt's
        # to 2 ulps
        assert np.abs(q.view(np.int32).astype(np.int64)
                      - ours.qmap.view(np.int32)).max() <= 2
        assert np.abs(ours.absmax.view(np.int32).astype(np.int64)
                      - absmax.numpy().view(np.int32)).max() <= 1
        # bitsandbytes stores the table's codes of its moment, numfmt the nearest of its own
        assert np.array_equal(codes.numpy(), table_codes(x_bnb, absmax.numpy(), q, CPU_BLOCK))
        near, _v = nearest_codes(x_ours, ours.absmax, ours.qmap, CPU_BLOCK)
        assert np.array_equal(ours.codes, near)
