"""Lab 11's checks: torch autograd through the LoRA formula, and torch's own LSQ
(_fake_quantize_learnable_per_tensor_affine, with grad_factor 1 / sqrt(N qmax))."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_


def _lora_run(fn):
    def run(x, weight, a, b, alpha, r):
        import torch
        at = torch.tensor(a, requires_grad=True)
        bt = torch.tensor(b, requires_grad=True)
        y = fn(torch.tensor(x), torch.tensor(weight), at, bt, alpha, r)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"the function returned {type(y).__name__}, not a torch.Tensor")
        y.pow(2).sum().backward()
        grads = [t.grad.numpy() if t.grad is not None else np.zeros(t.shape, np.float32)
                 for t in (at, bt)]
        return (y.detach().numpy(), *grads)
    return run


def _lora(x, weight, a, b, alpha, r):
    import torch
    import torch.nn.functional as F
    at = torch.tensor(a, requires_grad=True)
    bt = torch.tensor(b, requires_grad=True)
    y = F.linear(torch.tensor(x), torch.tensor(weight)) + F.linear(
        F.linear(torch.tensor(x), at), bt) * (alpha / r)
    y.pow(2).sum().backward()
    return y.detach().numpy(), at.grad.numpy(), bt.grad.numpy()


@st.composite
def _lora_args(draw):
    n, k, out, r = (draw(st.integers(1, 4)) for _ in range(4))
    el = floats(-2.0, 2.0, 32)
    arr = lambda *shape: draw(hnp.arrays(np.float32, shape, elements=el))
    return (arr(n, k), arr(out, k), arr(r, k), arr(out, r),
            draw(st.sampled_from([1.0, 8.0, 16.0])), r)


def _lsq_run(fn):
    def run(v, s, qmin, qmax):
        import torch
        vt = torch.tensor(v, requires_grad=True)
        st_ = torch.tensor([s], dtype=torch.float32, requires_grad=True)
        y = fn(vt, st_, qmin, qmax)
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"the function returned {type(y).__name__}, not a torch.Tensor")
        y.sum().backward()
        gv = vt.grad.numpy() if vt.grad is not None else np.zeros_like(v)
        gs = st_.grad.numpy() if st_.grad is not None else np.zeros(1, np.float32)
        return y.detach().numpy(), gv, gs
    return run


def _lsq(v, s, qmin, qmax):
    import torch
    vt = torch.tensor(v, requires_grad=True)
    st_ = torch.tensor([s], dtype=torch.float32, requires_grad=True)
    y = torch._fake_quantize_learnable_per_tensor_affine(
        vt, st_, torch.zeros(1), qmin, qmax, 1.0 / (v.size * qmax) ** 0.5)
    y.sum().backward()
    return y.detach().numpy(), vt.grad.numpy(), st_.grad.numpy()


def _off_ties(args):
    """No v / s within 1e-3 of a half-integer or of the range's ends: there float32's
    division and torch's multiplication by 1 / s may round to different sides, and the
    exercise states no such tie rule."""
    v, s, qmin, qmax = args
    u = v.astype(np.float64) / s
    return bool(np.all(np.abs(u - np.floor(u) - 0.5) > 1e-3)
                and np.all(np.abs(u - qmin) > 1e-3) and np.all(np.abs(u - qmax) > 1e-3))


@st.composite
def _lsq_args(draw):
    qmin, qmax = draw(st.sampled_from([(-8, 7), (-4, 3), (0, 15)]))
    v = draw(hnp.arrays(np.float32, st.integers(1, 8), elements=floats(-10.0, 10.0, 32)))
    s = float(np.float32(draw(st.sampled_from([0.1, 0.5, 1.0, 2.0, 0.3]))))
    return (v, s, qmin, qmax)


LAB = Lab("11", "11_quantized_finetuning.py", N_("quantized fine-tuning"), [
    Exercise("lora_forward", _lora, adapter=_lora_run, tol=(1e-5, 1e-6),
             outputs=("y", "a.grad", "b.grad"), cases=[
        (np.ones((1, 2), np.float32), np.eye(2, dtype=np.float32),
         np.array([[1.0, -1.0]], np.float32), np.array([[0.5], [2.0]], np.float32), 16.0, 1)],
        inputs=_lora_args()),
    Exercise("lsq_quantize", _lsq, adapter=_lsq_run, tol=(1e-5, 1e-6),
             outputs=("y", "v.grad", "s.grad"), cases=[
        (np.array([0.3, 1.7, -5.0, 9.0], np.float32), 0.5, -4, 3)],
        inputs=_lsq_args().filter(_off_ties)),
])
