"""numfmt.torch.train: recipes, quantized operands, the quantized linear layer, loss scaling.

Oracles: torch.nn.functional.linear and its autograd (the FP32 recipe); numfmt's numpy
quantizers (tensor_scaled, block_quantize, mx_quantize, nvfp4_quantize) and 2-D tiles built
from FloatFormat.round in plain loops here; ml_dtypes and torch casts (BF16, FP16);
torch.amp.GradScaler (the loss scaler); TransformerEngine's delayed scaling rule written out
here; float64 matrix products; the binomial spread of stochastic rounding.
"""

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import numfmt as nf  # noqa: E402
import numfmt.torch.train as ntt  # noqa: E402
from numfmt.blocks import fp32_tensor_scale  # noqa: E402
from conftest import devices  # noqa: E402

DEVICES = devices()
FORMAT = {"e4m3": nf.FP8_E4M3, "e5m2": nf.FP8_E5M2, "e2m1": nf.FP4_E2M1}


def data(rows, inner, seed=0):
    """float32 (rows, inner) with rows spanning a few decades (as activations and gradients)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, inner)) * np.exp2(rng.integers(-6, 6, (rows, 1)))
    return x.astype(np.float32)


# ------------------------------------------------------------------ the numpy references
def tiles_reference(x: np.ndarray, fmt, a: int, b: int, scale: str, rule: str = "floor"
                    ) -> np.ndarray:
    """a x b tiles, each with one scale, in plain loops over tiles and numfmt's FloatFormat."""
    x = x.astype(np.float64)
    out = np.empty_like(x)
    g = fp32_tensor_scale(float(np.abs(x).max()), fmt) if scale == "e4m3" else 1.0
    for i in range(0, x.shape[0], a):
        for j in range(0, x.shape[1], b):
            tile = x[i:i + a, j:j + b]
            amax = float(np.abs(tile).max())
            if scale == "e4m3":   # NVFP4: E4M3 tile scale under the FP32 tensor scale
                s = float(nf.FP8_E4M3.round(amax / fmt.max_value / g)) * g
            elif scale == "exact":
                s = amax / fmt.max_value if amax > 0 else 1.0
            elif scale == "e8m0" and rule == "rceil":
                # TE's power-of-two block scales (recipe_common.cuh, compute_scale_from_amax):
                # the FP32 quotient max / amax with its mantissa bits cleared, inverted
                q = np.float32(fmt.max_value) / np.float32(amax) if amax > 0 else np.float32(1)
                s = 1.0 / float((np.array(q).view(np.uint32) & 0xFF800000).view(np.float32))
            else:
                raise AssertionError(scale)
            out[i:i + a, j:j + b] = fmt.round(tile / s) * s if s > 0 else 0.0
    return out.astype(np.float32)


def numpy_reference(x: np.ndarray, spec: ntt.OperandSpec) -> np.ndarray:
    """What numfmt's numpy quantizers give for ``spec`` on (rows, inner) ``x``."""
    if spec.fmt == "fp32":
        return x
    if spec.fmt == "bf16":
        import ml_dtypes
        return x.astype(ml_dtypes.bfloat16).astype(np.float32)
    if spec.fmt == "fp16":
        with np.errstate(over="ignore"):   # IEEE overflow to Inf, as torch's cast
            return x.astype(np.float16).astype(np.float32)
    fmt = FORMAT[spec.fmt]
    if spec.block == "tensor":
        return nf.tensor_scaled(x, fmt).values.astype(np.float32)
    a, b = (1, x.shape[1]) if spec.block == "row" else spec.block
    if a > 1:
        return tiles_reference(x, fmt, a, b, spec.scale_format, spec.scale_rule)
    if spec.scale_format == "e8m0" and spec.scale_rule == "floor":
        return nf.mx_quantize(x, fmt, b).values.astype(np.float32)
    if spec.scale_format == "e8m0":
        return nf.mx_quantize(x, fmt, b, scale_rule="rceil").values.astype(np.float32)
    if spec.scale_format == "e4m3" and fmt is nf.FP4_E2M1 and b == 16:
        return nf.nvfp4_quantize(x).values.astype(np.float32)
    return nf.block_quantize(x, fmt, b, {"exact": "exact", "e4m3": "e4m3"}[spec.scale_format]
                             ).values.astype(np.float32)


def nearest_specs():
    """Every distinct round-to-nearest, RHT-free operand spec of the recipes, plus extras."""
    specs = {s for r in ntt.RECIPES.values() for g in ntt.GEMMS for s in getattr(r, g)
             if s.mode == "nearest" and not s.rht and s.scaling == "current"}
    specs |= {ntt.OperandSpec("e4m3", "row", "exact"), ntt.OperandSpec("e5m2", (1, 32), "exact"),
              ntt.OperandSpec("e2m1", (1, 32), "e8m0", "rceil"),
              ntt.OperandSpec("e4m3", (32, 32), "exact")}
    return sorted(specs, key=repr)


# ------------------------------------------------------------------ operands
@pytest.mark.parametrize("spec", nearest_specs(), ids=lambda s: s.describe())
def test_each_operand_equals_numfmts_numpy_quantizer(spec):
    x = data(256, 256)
    got = ntt.quantize_operand(torch.from_numpy(x), spec)
    assert got.dtype == torch.float32 and got.shape == (256, 256)
    np.testing.assert_array_equal(got.numpy(), numpy_reference(x, spec))


def edge_data(rows, inner):
    """data() with the rows a fast path could get wrong: all zeros, a zero block in a row,
    float32 subnormals (E8M0's smallest scale 2^-127), values near float32's max (the
    largest scales), a row whose NVFP4 block scales underflow to 0 against that tensor
    scale (its values must come back 0), a row of one repeated value."""
    x = data(rows, inner, seed=5)
    tiny = np.float32(2.0**-149) * np.arange(1, inner + 1, dtype=np.float32)
    x[0] = 0.0
    x[1, :inner // 2] = 0.0
    x[2] = tiny * np.where(np.arange(inner) % 2, 1, -1)
    x[3] = np.float32(1.0e38) * np.linspace(-1, 1, inner, dtype=np.float32)
    x[4] = np.float32(1.5)
    x[5] *= np.float32(1e30)
    return x


@pytest.mark.parametrize("spec", nearest_specs(), ids=lambda s: s.describe())
def test_each_operand_equals_numfmts_numpy_quantizer_on_edge_rows(spec):
    # The float32 path (power-of-two scales), the float64 path and the zero-scale masks of
    # quantize_operand's rounding, against numfmt's numpy quantizers.
    x = edge_data(256, 256)
    if spec.scale_format == "none":
        pytest.skip("plain casts: see test_plain_casts_are_torchs_casts_with_ieee_overflow")
    got = ntt.quantize_operand(torch.from_numpy(x), spec)
    np.testing.assert_array_equal(got.numpy().view(np.uint32),
                                  numpy_reference(x, spec).view(np.uint32))


@pytest.mark.parametrize("block", [(1, 32), (1, 128), (128, 128)])
def test_rceil_power_of_two_scales_round_as_a_plain_e4m3_cast(block):
    # Under a power-of-two scale 2^k that keeps every quotient in E4M3's normal range
    # ([2^-6, 448]: RCEIL never saturates), x -> 2^k * E4M3(x / 2^k) is E4M3's rounding of x
    # shifted by whole binades: the same for any k, so for any block shape. The expectation is
    # ml_dtypes' float8_e4m3fn cast of x brought into E4M3's range by an exact power of two.
    # Bands of 128 rows at activation (2^0), gradient (2^-24) and smallest-E8M0 (2^-120)
    # magnitudes; within a band values span 2^8, so no quotient falls below 2^-6.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(7)
    band = np.repeat([0, -24, -120], 128)[:, None]
    mag = np.exp2(rng.uniform(-4, 4, (384, 256)))
    x = (np.where(rng.random((384, 256)) < 0.5, -1, 1) * mag * np.exp2(band)).astype(np.float32)
    unit = x.astype(np.float64) * np.exp2(-band)                     # exact: within [2^-4, 2^4]
    want = (unit.astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.exp2(band))
    spec = ntt.OperandSpec("e4m3", block, "e8m0", "rceil")
    got = ntt.quantize_operand(torch.from_numpy(x), spec).numpy()
    np.testing.assert_array_equal(got, want.astype(np.float32))
    # FP32 (exact) tile scales put a different grid under each block: not a cast.
    exact = ntt.quantize_operand(torch.from_numpy(x), ntt.OperandSpec("e4m3", block, "exact"))
    assert (exact.numpy() != got).mean() > 0.3


def test_nvfp4_tensor_scale_is_fp32_rounding_of_the_ideal_clamped():
    # NVFP4's second-level scale: numfmt's FP32 format rounding amax / (6 * 448), kept
    # within FP32's finite range; ties, subnormals and overflow included.
    rng = np.random.default_rng(4)
    ideals = np.concatenate([rng.standard_normal(2000) ** 2 * np.exp2(rng.integers(-160, 140,
                                                                                  2000)),
                             [2.0**-150, 2.0**-149 * 1.5, 2.0**-149 * 2.5, 1 + 2.0**-24,
                              1 + 3 * 2.0**-24, 2.0**128, 3.5e38, 1e-50, 1.0]])
    for ideal in ideals:
        t_amax = float(ideal) * 6.0 * 448.0  # exact: times 2688 = 21 * 2^7
        if t_amax / (6.0 * 448.0) != ideal:
            continue
        want = float(np.clip(nf.FP32.round(ideal), nf.FP32.min_subnormal, nf.FP32.max_value))
        assert fp32_tensor_scale(t_amax, nf.FP4_E2M1) == want, ideal


def test_plain_casts_are_torchs_casts_with_ieee_overflow():
    x = torch.from_numpy(data(64, 64))
    x[0, 0] = 1e5  # beyond FP16's 65504: Inf, as the cast gives (loss scaling sees it)
    assert torch.equal(ntt.quantize_operand(x, ntt.OperandSpec("bf16")),
                       x.to(torch.bfloat16).float())
    fp16 = ntt.quantize_operand(x, ntt.OperandSpec("fp16"))
    assert torch.equal(fp16, x.to(torch.float16).float()) and math.isinf(float(fp16[0, 0]))
    assert ntt.quantize_operand(x, ntt.OperandSpec()).data_ptr() == x.data_ptr()  # no copy


def test_two_d_tiles_are_the_same_for_w_and_its_transpose_and_one_d_blocks_are_not():
    w = torch.from_numpy(data(64, 128, seed=3))
    tile = ntt.OperandSpec("e2m1", (16, 16), "e4m3")
    row = ntt.OperandSpec("e2m1", (1, 16), "e4m3")
    assert torch.equal(ntt.quantize_operand(w, tile).t(), ntt.quantize_operand(w.t(), tile))
    assert not torch.equal(ntt.quantize_operand(w, row).t(), ntt.quantize_operand(w.t(), row))
    frac = (ntt.quantize_operand(w, row).t() != ntt.quantize_operand(w.t(), row)).float().mean()
    assert frac > 0.1  # not a handful of ties: most elements see a different scale


def test_delayed_scale_and_margin_against_the_formula():
    x = torch.from_numpy(data(32, 64))
    spec = ntt.OperandSpec("e4m3", "tensor", "exact", scaling="delayed")
    amax = 3.0 * float(x.abs().max())   # an old spike: the tensor uses a third of the range
    s = amax * 2.0**2 / 448
    ref = nf.FP8_E4M3.round(x.numpy().astype(np.float64) / s) * s
    got = ntt.quantize_operand(x, spec, amax=amax, margin=2)
    np.testing.assert_array_equal(got.numpy(), ref.astype(np.float32))
    # scale 1 (TE's first step): a plain saturating cast to E4M3
    big = x * 1000
    np.testing.assert_array_equal(ntt.quantize_operand(big, spec, scale=1.0).numpy(),
                                  nf.FP8_E4M3.round(big.numpy()).astype(np.float32))


# ------------------------------------------------------------------ stochastic rounding
def test_stochastic_rounding_is_unbiased_and_nearest_is_not():
    # One E4M3 block per row, every row the same: 1.03 lies between the grid values 1 and
    # 1.125 under scale 1 (the row's amax 448 makes the scale exactly 1).
    n = 20000
    row = torch.tensor([448.0, 1.03, -1.03, 0.3])
    x = row.repeat(n, 1)
    sr = ntt.OperandSpec("e4m3", "row", "exact", mode="stochastic")
    g = torch.Generator().manual_seed(0)
    q = ntt.quantize_operand(x, sr, generator=g).double()
    assert set(q[:, 1].unique().tolist()) == {1.0, 1.125}
    for col, exact, lo, hi in ((1, 1.03, 1.0, 1.125), (2, -1.03, -1.125, -1.0),
                               (3, 0.3, 0.28125, 0.3125)):
        # Each draw is lo or hi with P(hi) = (x - lo) / (hi - lo): the mean of n draws has
        # standard deviation sqrt((hi - x)(x - lo) / n); 5 sigma bound the difference.
        sigma = math.sqrt((hi - exact) * (exact - lo) / n)
        assert abs(float(q[:, col].mean()) - exact) < 5 * sigma
    nearest = ntt.quantize_operand(x, ntt.OperandSpec("e4m3", "row", "exact"))
    assert float(nearest[0, 1]) == 1.0 and abs(1.0 - 1.03) > 50 * math.sqrt(
        0.095 * 0.03 / n)  # round-to-nearest's bias is 0.03, 50 sigma of the SR mean


def test_stochastic_rounding_under_nvfp4_scales_is_unbiased():
    n = 20000
    row = torch.linspace(-1.0, 1.0, 16) * 0.37  # amax 0.37: grid points are not the values
    x = row.repeat(n, 1)
    spec = ntt.OperandSpec("e2m1", (1, 16), "e4m3", mode="stochastic")
    q = ntt.quantize_operand(x, spec, generator=torch.Generator().manual_seed(1)).double()
    ref = nf.nvfp4_quantize(row.numpy()[None])
    full = float(ref.scales[0, 0]) * ref.tensor_scale
    grid = nf.FP4_E2M1.round(np.linspace(-6, 6, 1201)) * full
    grid = np.unique(grid)
    for j in range(16):
        v = float(row[j])
        if v == 0:
            assert float(q[:, j].abs().max()) == 0.0
            continue
        if abs(v) > grid.max():  # the E4M3 block scale rounded down: the amax saturates
            assert set(q[:, j].abs().unique().tolist()) == {float(np.float32(grid.max()))}
            continue
        lo, hi = grid[grid <= v].max(), grid[grid >= v].min()
        assert set(q[:, j].unique().tolist()) <= {float(np.float32(lo)), float(np.float32(hi))}
        sigma = math.sqrt(max((hi - v) * (v - lo), 1e-30) / n)
        assert abs(float(q[:, j].mean()) - v) < 5 * sigma + 1e-7


def test_stochastic_rounding_equals_numpy_rounding_with_the_same_draws():
    x = data(64, 64, seed=5)
    spec = ntt.OperandSpec("e2m1", (1, 16), "e4m3", mode="stochastic")
    g = torch.Generator().manual_seed(7)
    # the draws: float32 uniforms from the generator, in order (quantize_operand's docstring)
    u = torch.rand(x.size, dtype=torch.float32, generator=torch.Generator().manual_seed(7))
    u = u.double()
    got = ntt.quantize_operand(torch.from_numpy(x), spec, generator=g).numpy()
    ref = nf.nvfp4_quantize(x)
    full = np.repeat(ref.scales * ref.tensor_scale, 16, axis=1)
    y = x.astype(np.float64) / full
    a = np.abs(y)   # numfmt's stochastic rule: up with probability of the fractional step
    e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    q = np.exp2(np.maximum(e, nf.FP4_E2M1.emin) - nf.FP4_E2M1.man_bits)
    low = np.floor(a / q)
    up = u.numpy().reshape(x.shape) < a / q - low
    mag = np.minimum((low + up) * q, 6.0)
    np.testing.assert_array_equal(got, (np.copysign(mag, y) * full).astype(np.float32))


# ------------------------------------------------------------------ Hadamard transform
def test_random_hadamard_is_orthonormal_and_cancels_in_wgrad():
    h = ntt.random_hadamard(16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(h @ h.T, torch.eye(16, dtype=torch.float64))
    assert set(h.abs().unique().tolist()) == {0.25}
    h2 = ntt.random_hadamard(16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    assert not torch.equal(h, h2)
    rng = np.random.default_rng(0)
    dy, x = torch.from_numpy(rng.standard_normal((64, 48))), torch.from_numpy(
        rng.standard_normal((64, 32)))   # (N, out), (N, in)

    def rht(t):  # along the tokens, in runs of 16, t laid out (rows, N)
        return (t.reshape(t.shape[0], -1, 16) @ h).reshape(t.shape)
    dw = rht(dy.T) @ rht(x.T).T
    assert float((dw - dy.T @ x).abs().max()) < 1e-12
    # the library's transform (what QuantLinear applies to both wgrad operands), in float64
    dw_lib = ntt.apply_rht(dy.T.contiguous(), h) @ ntt.apply_rht(x.T.contiguous(), h).T
    assert dw_lib.dtype == torch.float64
    assert float((dw_lib - dy.T @ x).abs().max()) < 1e-12
    # quantize_operand applies the same transform (fp32: the rotation alone)
    spec = ntt.OperandSpec("fp32", rht=True)
    got = ntt.quantize_operand(dy.T.float(), spec, hadamard_matrix=h.float())
    torch.testing.assert_close(got.double(), rht(dy.T), rtol=0, atol=1e-5)


def test_rht_operand_is_numfmts_quantizer_on_the_rotated_operand():
    x = data(32, 64, seed=2)
    h = ntt.random_hadamard(16, generator=torch.Generator().manual_seed(4))
    rotated = (torch.from_numpy(x).reshape(-1, 16) @ h).reshape(32, 64).numpy()
    spec = ntt.OperandSpec("e2m1", (1, 16), "e4m3", rht=True)
    got = ntt.quantize_operand(torch.from_numpy(x), spec, hadamard_matrix=h)
    np.testing.assert_array_equal(got.numpy(), nf.nvfp4_quantize(rotated).values.astype(
        np.float32))


def test_layer_with_rht_on_fp32_wgrad_gives_the_plain_weight_gradient():
    f32, rot = ntt.OperandSpec(), ntt.OperandSpec("fp32", rht=True)
    recipe = ntt.Recipe("rht_only", (f32, f32), (f32, f32), (rot, rot))
    x = torch.from_numpy(data(64, 32)).requires_grad_()
    a, b = ntt.QuantLinear(32, 48, recipe, seed=3), ntt.QuantLinear(32, 48, "fp32", seed=3)
    dy = torch.from_numpy(data(64, 48, seed=1))
    a(x).backward(dy)
    b(x.detach()).backward(dy)
    # float32 rounding of the rotated operands and sums: relative 1e-5 of the magnitudes
    bound = 1e-5 * float((dy.abs().T @ x.detach().abs()).max())
    assert float((a.weight.grad - b.weight.grad).abs().max()) < bound


# ------------------------------------------------------------------ the layer
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(48, 32), (3, 16, 32)])
def test_fp32_layer_is_torch_linear_bit_for_bit(bias, shape):
    layer = ntt.QuantLinear(32, 24, "fp32", bias=bias, seed=4)
    x = torch.from_numpy(data(int(np.prod(shape[:-1])), 32)).reshape(shape)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()
    b = layer.bias.detach().clone().requires_grad_() if bias else None
    ya, yb = layer(xa), torch.nn.functional.linear(xb, w, b)
    assert torch.equal(ya, yb)
    g = torch.from_numpy(data(int(np.prod(shape[:-1])), 24, seed=2)).reshape(ya.shape)
    ya.backward(g)
    yb.backward(g)
    assert torch.equal(xa.grad, xb.grad) and torch.equal(layer.weight.grad, w.grad)
    if bias:
        assert torch.equal(layer.bias.grad, b.grad)


def test_fp32_first_layer_weight_gradient_is_torchs():
    # No gradient for the input: wgrad quantizes dy on its own (no dgrad to share it with).
    layer = ntt.QuantLinear(32, 24, "fp32", seed=4)
    w = layer.weight.detach().clone().requires_grad_()
    x = torch.from_numpy(data(48, 32))
    g = torch.from_numpy(data(48, 24, seed=2))
    layer(x).backward(g)
    torch.nn.functional.linear(x, w).backward(g)
    assert torch.equal(layer.weight.grad, w.grad)


@pytest.mark.parametrize("name", ["fp8_current", "fp8_blockwise", "mxfp8_floor", "mxfp8_rceil",
                                  "mxfp4", "nvfp4-nosr-norht", "bf16", "fp16"])
def test_layer_gemms_multiply_numfmts_operands(name):
    recipe = ntt.nvfp4_recipe(stochastic_rounding=False, rht=False, high_precision_layers=()) \
        if name.startswith("nvfp4") else ntt.RECIPES[name]
    n, d_in, d_out = 256, 256, 128
    layer = ntt.QuantLinear(d_in, d_out, recipe, seed=1)
    x = torch.from_numpy(data(n, d_in)).requires_grad_()
    dy = torch.from_numpy(data(n, d_out, seed=9)) * 1e-3
    y = layer(x)
    y.backward(dy)
    w = layer.weight.detach().numpy()
    xn, dyn = x.detach().numpy(), dy.numpy()

    def q(t, gemm, op):
        return numpy_reference(np.ascontiguousarray(t), recipe.spec(gemm, op)).astype(np.float64)

    out = {"fp32": (0.0, 0.0), "bf16": (2.0**-8, 0.0), "fp16": (2.0**-11, 2.0**-25)}
    rel, tiny = out[recipe.output]

    def check(got, a, b):
        # float32 products of float32 operands accumulate with relative error at most
        # k * 2^-24 of sum |a||b| (k the inner length); the operands themselves are exact;
        # the sum is then rounded to the recipe's output format (half a step: 2^-8 relative
        # in bf16, 2^-11 in fp16 and 2^-25 absolute among its subnormals)
        ref = a @ b.T
        bound = a.shape[1] * 2.0**-24 * (np.abs(a) @ np.abs(b).T) + 1e-30
        bound = bound + rel * (np.abs(ref) + bound) + tiny
        assert np.all(np.abs(got.detach().numpy() - ref) <= bound)
    check(y, q(xn, "fprop", "x"), q(w, "fprop", "w"))
    check(x.grad, q(dyn, "dgrad", "dy"), q(w.T, "dgrad", "w"))
    check(layer.weight.grad, q(dyn.T, "wgrad", "dy"), q(xn.T, "wgrad", "x"))


def test_delayed_scaling_follows_the_amax_history_rule():
    # TE's rule (delayed_scaling.cu), written out: step t uses the scale from the amaxes of
    # steps t-L .. t-1 (the largest of them), 1 before any is known.
    L = 3
    recipe = ntt.Recipe("delayed3", **{g: getattr(ntt.RECIPES["fp8_delayed"], g)
                                       for g in ntt.GEMMS}, amax_history=L)
    layer = ntt.QuantLinear(32, 16, recipe, seed=0)
    base = torch.from_numpy(data(16, 32))
    factors = [1.0, 2.0, 50.0, 1.0, 1.0, 1.0, 0.5, 0.5]   # a spike at step 2
    history = []
    w = layer.weight.detach().numpy().astype(np.float64)
    for t, f in enumerate(factors):
        x = base * f
        expected = max(history[-L:]) / 448 if history else 1.0
        assert layer._histories.get("x") is None or \
            layer._histories["x"].scale(nf.FP8_E4M3) == expected
        y = layer(x)
        xq = nf.FP8_E4M3.round(x.numpy().astype(np.float64) / expected) * expected
        w_amax = [float(np.abs(w).max())] * t
        ws = max(w_amax[-L:]) / 448 if w_amax else 1.0
        wq = nf.FP8_E4M3.round(w / ws) * ws
        ref = torch.from_numpy(xq.astype(np.float32)) @ torch.from_numpy(
            wq.astype(np.float32)).t()
        assert torch.equal(y.detach(), ref), t
        history.append(float(x.abs().max()))
    # after the spike leaves the window (steps 3..5), the scale follows the new amaxes
    assert layer._histories["x"].scale(nf.FP8_E4M3) == max(history[-L:]) / 448


def test_amax_history_keeps_its_scale_without_a_usable_amax():
    # TE's fused update: a zero amax is not recorded, and a non-finite window maximum leaves
    # the scale as it was (1 at the start).
    h = ntt.AmaxHistory(length=2)
    e4m3 = nf.FP8_E4M3
    assert h.scale(e4m3) == 1.0
    h.record(0.0, {e4m3})
    assert h.scale(e4m3) == 1.0 and h.history == []
    h.record(896.0, {e4m3})
    assert h.scale(e4m3) == 2.0
    h.record(0.0, {e4m3})            # not rolled in: the window is still (896,)
    assert h.scale(e4m3) == 2.0
    h.record(0.0, {e4m3})
    assert h.scale(e4m3) == 2.0 and h.history == [896.0]
    h.record(math.inf, {e4m3})       # window (896, inf): not finite, keep 2
    assert h.scale(e4m3) == 2.0
    h.record(56.0, {e4m3})           # window (inf, 56): still not finite
    assert h.scale(e4m3) == 2.0
    h.record(28.0, {e4m3})           # window (56, 28): 56 / 448
    assert h.scale(e4m3) == 0.125 and ntt.AmaxHistory(4, margin=1).margin == 1


def test_same_seed_same_bytes_and_other_seeds_other_draws():
    def grads(seed):
        layer = ntt.QuantLinear(64, 32, "nvfp4", seed=seed)
        x = torch.from_numpy(data(64, 64)).requires_grad_()
        layer(x).backward(torch.from_numpy(data(64, 32, seed=1)))
        return layer.weight.grad.clone(), x.grad.clone()
    a, b, c = grads(0), grads(0), grads(1)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[1], c[1])  # dgrad's SR draws differ with the seed


def test_high_precision_layers_run_bf16():
    recipe = ntt.nvfp4_recipe(high_precision_layers=("layers.3.*", "lm_head"))
    x = torch.from_numpy(data(32, 32))
    for name, hp in (("layers.3.mlp.up", True), ("lm_head", True), ("layers.0.mlp.up", False)):
        a = ntt.QuantLinear(32, 32, recipe, name=name, seed=2)
        b = ntt.QuantLinear(32, 32, "bf16", name=name, seed=2)
        assert (a.effective_recipe.name == "bf16") is hp
        assert torch.equal(a(x), b(x)) is hp


def test_capture_keeps_the_raw_operands_of_the_last_step():
    layer = ntt.QuantLinear(32, 32, "mxfp8_floor", seed=0)
    layer.capture = True
    x = torch.from_numpy(data(32, 32)).requires_grad_()
    dy = torch.from_numpy(data(32, 32, seed=3))
    layer(x).backward(dy)
    ops = layer.last_operands
    assert torch.equal(ops["x"], x.detach()) and torch.equal(ops["w"], layer.weight.detach())
    assert torch.equal(ops["dy"], dy)


def test_recipe_is_settable_and_nvfp4_switches():
    layer = ntt.QuantLinear(32, 32, "fp32")
    layer.recipe = "nvfp4"
    assert layer.recipe is ntt.RECIPES["nvfp4"]
    r = ntt.RECIPES["nvfp4"]
    assert r.wgrad[0].rht and r.wgrad[1].rht and r.dgrad[0].mode == "stochastic"
    assert r.fprop[1].block == (16, 16) and r.fprop[0].mode == "nearest"
    plain = ntt.nvfp4_recipe(stochastic_rounding=False, rht=False, weight_2d=False,
                             high_precision_layers=())
    assert all(s == ntt.OperandSpec("e2m1", (1, 16), "e4m3")
               for g in ntt.GEMMS for s in getattr(plain, g))
    assert set(ntt.RECIPES) == {"fp32", "bf16", "fp16", "fp8_delayed", "fp8_current",
                                "fp8_blockwise", "fp8_blockwise_pow2", "mxfp8_floor",
                                "mxfp8_rceil", "nvfp4", "mxfp4", "mxfp4_sr_rht"}
    assert ntt.RECIPES["fp16"].loss_scaling and not ntt.RECIPES["bf16"].loss_scaling
    # TE's HYBRID: E4M3 forward tensors, E5M2 gradient
    for name in ("fp8_delayed", "fp8_current"):
        r = ntt.RECIPES[name]
        assert [s.fmt for g in ntt.GEMMS for s in getattr(r, g)] == \
            ["e4m3", "e4m3", "e5m2", "e4m3", "e5m2", "e4m3"]


def test_fp8_recipe_builds_tes_formats():
    assert ntt.fp8_recipe(scaling="delayed").fprop == ntt.RECIPES["fp8_delayed"].fprop
    assert ntt.fp8_recipe(scaling="delayed").dgrad == ntt.RECIPES["fp8_delayed"].dgrad
    e4 = ntt.fp8_recipe(backward="e4m3")
    assert {s.fmt for g in ntt.GEMMS for s in getattr(e4, g)} == {"e4m3"}
    with pytest.raises(ValueError, match=r"OperandSpec\.scaling"):
        ntt.fp8_recipe(scaling="soon")
    with pytest.raises(ValueError, match=r"OperandSpec\.fmt"):
        ntt.fp8_recipe(backward="e6m1")


def test_bits_per_element():
    assert ntt.OperandSpec("e2m1", (1, 16), "e4m3").bits_per_element(64) == 4.5
    assert ntt.OperandSpec("e2m1", (16, 16), "e4m3").bits_per_element(64) == 4 + 8 / 256
    assert ntt.OperandSpec("e4m3", (1, 32), "e8m0").bits_per_element(64) == 8.25
    assert ntt.OperandSpec("e4m3", (1, 128), "exact").bits_per_element(128) == 8.25
    assert ntt.OperandSpec("bf16").bits_per_element(64) == 16
    assert ntt.OperandSpec("e4m3", "tensor", "exact").bits_per_element(64, rows=2) == 8.25


def test_bits_moved_per_gemm_by_hand():
    # 32 tokens, 32 x 32 weight: every operand has 1024 elements.
    r = ntt.RECIPES["fp8_current"]   # 8 bits each, one 32-bit scale per tensor
    assert r.bits_moved(32, 32, 32) == {g: 2 * (1024 * 8 + 32) for g in ntt.GEMMS}
    r = ntt.RECIPES["nvfp4"]         # 4.5 bits per 1x16 element, 4 + 8/256 per 16x16 one
    assert r.bits_moved(32, 32, 32) == {"fprop": 1024 * 4.5 + 1024 * (4 + 8 / 256),
                                        "dgrad": 1024 * 4.5 + 1024 * (4 + 8 / 256),
                                        "wgrad": 2 * 1024 * 4.5}
    assert ntt.RECIPES["bf16"].bits_moved(32, 32, 32)["wgrad"] == 2 * 1024 * 16


# ------------------------------------------------------------------ loss scaling
def test_loss_scaler_makes_gradscalers_decisions():
    # A gradient sequence with Inf and NaN steps, clean runs that reach the growth interval,
    # and gradients that overflow only at large scales.
    coefs = [1.0, 1.0, math.inf, 1.0, 1.0, 1.0, 1.0, math.nan, 1.0, 1e30, 1.0, 1.0, 1.0]
    kw = dict(init_scale=2.0**10, growth_factor=2.0, backoff_factor=0.5, growth_interval=3)
    p_ref = torch.nn.Parameter(torch.ones(4))
    p_our = torch.nn.Parameter(torch.ones(4))
    opt_ref = torch.optim.SGD([p_ref], lr=0.1)
    opt_our = torch.optim.SGD([p_our], lr=0.1)
    ref = torch.amp.GradScaler("cpu", **kw)
    ours = ntt.DynamicLossScaler(**kw)
    for c in coefs:
        scale = torch.tensor([c, 1.0, 2.0, 3.0], dtype=torch.float32)
        for p, opt in ((p_ref, opt_ref), (p_our, opt_our)):
            opt.zero_grad()
        ref.scale((p_ref * scale).sum() * 1e8).backward()   # 1e8 * 2^k overflows float32 soon
        ours.scale_loss((p_our * scale).sum() * 1e8).backward()
        before = p_ref.detach().clone()
        ref.step(opt_ref)
        ref.update()
        skipped = ours.step(opt_our, [p_our])
        assert skipped == torch.equal(before, p_ref.detach())
        assert ours.scale == float(ref.get_scale())
        assert torch.equal(p_our, p_ref)


def test_loss_scaler_unscale_then_step():
    s = ntt.DynamicLossScaler(init_scale=8.0, growth_interval=1)
    p = torch.nn.Parameter(torch.ones(2))
    s.scale_loss(p.sum()).backward()
    assert s.unscale_([p]) is False and torch.equal(p.grad, torch.ones(2))
    opt = torch.optim.SGD([p], lr=1.0)
    assert s.step(opt, [p]) is False and torch.equal(p.detach(), torch.zeros(2))
    assert s.scale == 16.0


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("kwargs, field", [
    (dict(fmt="e9m9"), "fmt"),
    (dict(fmt="e4m3", block=(1, 0), scale_format="exact"), "block"),
    (dict(fmt="e4m3", block="column", scale_format="exact"), "block"),
    (dict(fmt="bf16", mode="stochastic"), "mode"),
    (dict(fmt="e4m3", mode="up", scale_format="exact"), "mode"),
    (dict(fmt="e4m3"), "scale_format"),                           # FP8 needs a scale
    (dict(fmt="bf16", scale_format="e8m0", block=(1, 32)), "scale_format"),
    (dict(fmt="e4m3", scale_format="e4m3", block=(1, 16)), "scale_format"),
    (dict(fmt="e4m3", scale_format="mx", block=(1, 32)), "scale_format"),
    (dict(fmt="e4m3", scale_format="exact", block=(1, 32), scaling="delayed"), "scaling"),
    (dict(fmt="e4m3", scale_format="exact", scaling="later"), "scaling"),
    (dict(fmt="bf16", block=(1, 32)), "block"),
    (dict(fmt="e4m3", scale_format="exact", scale_rule="rceil"), "scale_rule"),
    (dict(fmt="e4m3", scale_format="e8m0", scale_rule="round", block=(1, 32)), "scale_rule"),
    (dict(fmt="fp32", rht="yes"), "rht"),
])
def test_bad_operand_specs_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"OperandSpec\.{field}"):
        ntt.OperandSpec(**kwargs)


def test_bad_recipes_name_the_field():
    f32, rot = ntt.OperandSpec(), ntt.OperandSpec("fp32", rht=True)
    with pytest.raises(ValueError, match=r"Recipe\.fprop"):
        ntt.Recipe("bad", fprop=(rot, f32), dgrad=(f32, f32), wgrad=(f32, f32))
    with pytest.raises(ValueError, match=r"Recipe\.dgrad"):
        ntt.Recipe("bad", dgrad=(f32, rot))
    with pytest.raises(ValueError, match=r"Recipe\.wgrad"):
        ntt.Recipe("bad", wgrad=(rot, f32))
    with pytest.raises(ValueError, match=r"Recipe\.amax_history"):
        ntt.Recipe("bad", amax_history=0)
    with pytest.raises(TypeError, match=r"Recipe\.wgrad"):
        ntt.Recipe("bad", wgrad=(f32,))
    with pytest.raises(ValueError, match="recipe must be one of"):
        ntt.get_recipe("fp6")
    with pytest.raises(ValueError, match="recipe must be one of"):
        ntt.QuantLinear(16, 16, "fp6")
    with pytest.raises(ValueError, match="stochastic_rounding"):
        ntt.nvfp4_recipe(stochastic_rounding=1)


def test_a_block_that_does_not_divide_names_block():
    x = torch.ones(16, 48)
    with pytest.raises(ValueError, match="block"):
        ntt.quantize_operand(x, ntt.OperandSpec("e4m3", (1, 32), "e8m0"))
    with pytest.raises(ValueError, match="block"):
        ntt.quantize_operand(torch.ones(24, 32), ntt.OperandSpec("e2m1", (16, 16), "e4m3"))
    layer = ntt.QuantLinear(48, 32, "mxfp8_floor")
    with pytest.raises(ValueError, match="block"):
        layer(torch.ones(4, 48))
    with pytest.raises(ValueError, match="rht"):
        ntt.quantize_operand(torch.ones(4, 24), ntt.OperandSpec("fp32", rht=True))


def test_non_finite_operands_give_nan_not_an_exception():
    x = torch.ones(16, 32)
    x[1, 3] = math.inf
    for spec in (ntt.OperandSpec("e4m3", "tensor", "exact"),
                 ntt.OperandSpec("e4m3", (1, 32), "e8m0")):
        assert torch.isnan(ntt.quantize_operand(x, spec)).all()
    for name in ("fp8_delayed", "nvfp4", "fp8_current"):
        layer = ntt.QuantLinear(32, 32, name)
        assert torch.isnan(layer(x)).all()
    fp16 = ntt.QuantLinear(32, 32, "fp16")(x)   # a cast: Inf stays Inf, for the loss scaler
    assert not torch.isfinite(fp16).all()


# ------------------------------------------------------------------ devices
@pytest.mark.parametrize("device", DEVICES)
def test_same_numerics_on_every_device(device):
    x = torch.from_numpy(data(64, 64))
    for name in ("fp8_current", "mxfp8_rceil", "fp8_blockwise"):
        spec = ntt.RECIPES[name].fprop[0]
        if spec.block == (1, 128):
            continue
        got = ntt.quantize_operand(x.to(device), spec).cpu()
        np.testing.assert_array_equal(got.numpy(), numpy_reference(x.numpy(), spec))
    # every round-to-nearest spec, on the edge rows too, against numfmt numpy (on the CPU
    # the parametrized tests above do this)
    for spec in nearest_specs() if device != "cpu" else ():
        for xs in (data(256, 256), edge_data(256, 256)):
            got = ntt.quantize_operand(torch.from_numpy(xs).to(device), spec)
            assert got.device.type == device
            np.testing.assert_array_equal(got.cpu().numpy().view(np.uint32),
                                          numpy_reference(xs, spec).view(np.uint32))
    layer = ntt.QuantLinear(64, 32, "nvfp4", seed=0, device=device)
    assert layer.weight.device.type == device
    xx = x.to(device).requires_grad_()
    layer(xx).sum().backward()
    assert xx.grad.device.type == device and torch.isfinite(layer.weight.grad).all()


@pytest.mark.parametrize("device", DEVICES[1:])
def test_lecture10_model_trains_on_cuda(device):
    # a few steps of lecture 10's model and training loop under every recipe, on the device:
    # the parameters and the losses stay there, and the losses are finite (on the CPU,
    # tests/test_lecture10.py trains it under every recipe)
    from lectures.tinylm.loop import TrainConfig, train
    from lectures.tinylm.model import TinyLM, TinyLMConfig
    cfg = TinyLMConfig()
    for name in ntt.RECIPES:
        model = TinyLM(cfg, name, seed=0).to(device)
        assert all(p.device.type == device for p in model.parameters())
        r = train(name, TrainConfig(steps=2, batch=2, warmup=1, eval_steps=(2,),
                                    val_windows=2, seed=0), cfg, device=device)
        assert np.isfinite(r.train_loss).all() and np.isfinite(r.val_loss).all(), name


# --------------------------------------------------------------------- the float64 emulation
def test_float64_operand_is_quantized_as_its_float32_rounding():
    """A float64 operand is rounded to float32 first (the FP32 activation it stands for), then
    quantized; under fp32 it is returned unrounded. Reference: torch's own float32 cast."""
    g = torch.Generator().manual_seed(3)
    t = torch.randn(32, 64, generator=g, dtype=torch.float64) * 3
    for name in ("bf16", "fp8_current", "mxfp8_rceil", "nvfp4"):
        spec = ntt.RECIPES[name].fprop[0]
        got = ntt.quantize_operand(t, spec)
        want = ntt.quantize_operand(t.to(torch.float32), spec)
        assert got.dtype == torch.float64 and torch.equal(got, want.double()), name
    assert torch.equal(ntt.quantize_operand(t, ntt.RECIPES["fp32"].fprop[0]), t)
    assert not torch.equal(t.float().double(), t)          # the fp32 case really skips a rounding


def test_float64_fp32_layer_is_torch_linear_in_float64():
    """After ``.double()`` an all-FP32 layer is float64 ``F.linear``, forward and backward."""
    layer = ntt.QuantLinear(64, 32, "fp32", bias=True, seed=1).double()
    x = torch.randn(16, 64, dtype=torch.float64, generator=torch.Generator().manual_seed(2),
                    requires_grad=True)
    x2 = x.detach().clone().requires_grad_(True)
    w = layer.weight.detach().clone().requires_grad_(True)
    b = layer.bias.detach().clone().requires_grad_(True)
    y = layer(x)
    ref = torch.nn.functional.linear(x2, w, b)
    assert y.dtype == torch.float64 and torch.equal(y, ref)
    dy = torch.randn(16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    y.backward(dy)
    ref.backward(dy)
    assert torch.allclose(x.grad, x2.grad, rtol=0, atol=1e-12)
    assert torch.allclose(layer.weight.grad, w.grad, rtol=0, atol=1e-12)
    assert torch.equal(layer.bias.grad, b.grad)


def test_an_interrupt_cancels_the_runs_not_yet_started(tmp_path):
    """Kernel > Interrupt during notebook 10's full run raises KeyboardInterrupt in the caller,
    and leaving the process pool must not wait for every submitted run (minutes): the runs not
    yet started are cancelled. Of 16 jobs on 2 workers, interrupted at the first result, only
    those already handed to a worker run (the pool queues at most workers + 1 ahead)."""
    from lectures.tinylm.runs import in_processes
    from pool_jobs import mark_and_wait
    seen = []

    def interrupt(i, result):
        seen.append(result)
        raise KeyboardInterrupt

    jobs = [(str(tmp_path), i) for i in range(16)]
    with pytest.raises(KeyboardInterrupt):
        in_processes(mark_and_wait, jobs, 2, interrupt)
    started = sorted(tmp_path.glob("started.*"))
    assert len(seen) == 1 and 1 <= len(started) <= 2 + 3, started


def test_in_processes_returns_every_result_by_index(tmp_path):
    from lectures.tinylm.runs import in_processes
    from pool_jobs import mark_and_wait
    got = {}
    in_processes(mark_and_wait, [(str(tmp_path), i) for i in range(5)], 2,
                 lambda i, r: got.__setitem__(i, r))
    assert got == {i: i for i in range(5)} and len(list(tmp_path.glob("started.*"))) == 5


def test_linear_in_input_dtype_is_autocasts_cast_and_float64s_product():
    """``linear_in_input_dtype`` casts the float32 parameters to x's dtype: with a bf16 x it is
    what torch.autocast(cpu, bfloat16) makes of F.linear on float32 parameters; with a float64 x
    the product of the float32 values in float64 (numpy's), and float32 gradients."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(5, 7, generator=gen).requires_grad_(True)
    b = torch.randn(5, generator=gen)
    x = torch.randn(2, 3, 7, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = torch.nn.functional.linear(x.bfloat16(), w, b)
    got = ntt.linear_in_input_dtype(x.bfloat16(), w, b)
    assert got.dtype == want.dtype == torch.bfloat16 and torch.equal(got, want)
    x64 = x.double()
    y = ntt.linear_in_input_dtype(x64, w, b)
    assert y.dtype == torch.float64 and y.shape == (2, 3, 5)
    ref = x64.numpy() @ w.detach().double().numpy().T + b.double().numpy()
    np.testing.assert_allclose(y.detach().numpy(), ref, rtol=1e-14, atol=1e-14)
    y.sum().backward()
    assert w.grad.dtype == torch.float32
    # the float64 gradient rounded once to float32 (within that rounding of numpy's sum)
    np.testing.assert_allclose(w.grad.numpy(), np.tile(x64.numpy().reshape(-1, 7).sum(0), (5, 1)),
                               rtol=2**-24, atol=0)
    assert ntt.linear_in_input_dtype(x64, w).shape == (2, 3, 5)      # no bias
