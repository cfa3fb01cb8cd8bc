"""Lab 06: quantization-aware training. Do it after lecture 06.

Replace each ``raise NotImplementedError`` with your code (torch: this lab is about autograd),
then run ``python -m labs check 06`` (``--lang zh``: in Chinese). ``python -m labs show 06``
prints the tasks.
"""

import torch


def round_ste(x):
    """Round x to the nearest integer (half to even) with a straight-through gradient.

    Forward: torch.round(x). Backward: the gradient passes through unchanged (d round / dx is
    taken as 1), so training can move x across rounding steps.

    Parameters
    ----------
    x : torch.Tensor of float32, requires_grad

    Returns
    -------
    torch.Tensor of float32, the shape of x, connected to x in the autograd graph

    Source
    ------
    Bengio, Leonard and Courville 2013, "Estimating or Propagating Gradients Through
    Stochastic Neurons", section 4 (the straight-through estimator).

    Hints
    -----
    x + (torch.round(x) - x).detach() has the forward value of the rounding and the gradient
    of x. A torch.autograd.Function with its own backward works as well.
    """
    raise NotImplementedError


def fake_quantize(x, scale, zero_point, qmin, qmax):
    """Fake-quantize x per tensor as torch.fake_quantize_per_tensor_affine does, forward and
    backward.

    Forward, in float32: q = round(x * inv_scale) + zero_point with inv_scale = float32(1 /
    scale), rounding half to even; y = (clamp(q, qmin, qmax) - zero_point) * float32(scale).
    Backward:
    the straight-through estimator with a mask: the gradient passes where qmin <= q <= qmax,
    and is 0 where q was clamped.

    Parameters
    ----------
    x : torch.Tensor of float32, requires_grad
    scale : float, positive
    zero_point, qmin, qmax : int

    Returns
    -------
    torch.Tensor of float32, the shape of x

    Source
    ------
    Jacob et al. 2018, section 3; PyTorch's fake_quantize_per_tensor_affine
    (aten/src/ATen/native/quantized/cpu/kernels/QuantizedOpKernels.cpp).

    Hints
    -----
    Multiply by the float32 inverse scale, do not divide: the quotient's last bit decides
    ties. Build the mask from q before clamping; then y = dequantized.detach() + mask * (x -
    x.detach()) has the right value and gradient.
    """
    raise NotImplementedError
