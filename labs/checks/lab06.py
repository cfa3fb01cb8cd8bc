"""Lab 06's checks: torch.round and torch.fake_quantize_per_tensor_affine, forward and backward
(torch's own STE), on float32 tensors."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_


def _autograd(fn):
    """Grade fn(x, *rest) through autograd: (forward output, dL/dx for L = sum(y * g))."""
    def run(x, g, *rest):
        import torch
        xt = torch.tensor(x, requires_grad=True)
        y = fn(xt, *rest)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"the function returned {type(y).__name__}, not a torch.Tensor")
        if y.requires_grad:
            (y * torch.tensor(g)).sum().backward()
        grad = xt.grad.numpy() if xt.grad is not None else np.zeros_like(x)
        return y.detach().numpy(), grad
    return run


def _round(x, g):
    import torch
    return torch.round(torch.tensor(x)).numpy(), g


def _fake(x, g, scale, zero_point, qmin, qmax):
    import torch
    xt = torch.tensor(x, requires_grad=True)
    y = torch.fake_quantize_per_tensor_affine(xt, scale, zero_point, qmin, qmax)
    (y * torch.tensor(g)).sum().backward()
    return y.detach().numpy(), xt.grad.numpy()


def _pairs(n_max=8, lo=-100.0, hi=100.0):
    """(x, g): float32 inputs and the upstream gradient, the same shape."""
    return st.integers(1, n_max).flatmap(lambda n: st.tuples(
        hnp.arrays(np.float32, n, elements=floats(lo, hi, 32)),
        hnp.arrays(np.float32, n, elements=st.sampled_from([1.0, -2.0, 0.5]))))


@st.composite
def _fake_args(draw):
    x, g = draw(_pairs())
    qmin, qmax = draw(st.sampled_from([(-128, 127), (0, 255), (-8, 7), (0, 15)]))
    return (x, g, draw(floats(0.01, 4.0).filter(lambda s: s > 0.01)),
            draw(st.integers(qmin, qmax)), qmin, qmax)


LAB = Lab("06", "06_quantization_aware_training.py", N_("quantization-aware training"), [
    Exercise("round_ste", _round, adapter=_autograd, outputs=("y", "x.grad"),
             names=("x", "grad_y"), signed_zeros=False, cases=[
        (np.array([0.5, 1.5, 2.5, -0.5, 0.7], np.float32), np.array([1, 2, 3, 4, 5], np.float32))],
        inputs=_pairs()),
    Exercise("fake_quantize", _fake, adapter=_autograd, outputs=("y", "x.grad"), signed_zeros=False,
             names=("x", "grad_y", "scale", "zero_point", "qmin", "qmax"), cases=[
        (np.array([0.5, 1.5, 300.0, -300.0, 0.1], np.float32), np.ones(5, np.float32),
         1.0, 0, -128, 127),
        (np.array([0.3, 0.9, -0.3], np.float32), np.ones(3, np.float32), 0.1, 3, 0, 15)],
        inputs=_fake_args()),
])
