"""Lab 11: quantized fine-tuning. Do it after lecture 11.

Replace each ``raise NotImplementedError`` with your code (torch: this lab is about autograd),
then run ``python -m labs check 11`` (``--lang zh``: in Chinese). ``python -m labs show 11``
prints the tasks.
"""

import torch


def lora_forward(x, weight, a, b, alpha, r):
    """Return a LoRA layer's output y = x W^T + (alpha / r) (x A^T) B^T.

    The frozen weight W (possibly dequantized from 4 bits, as in QLoRA) is left alone; only
    the low-rank factors A and B are trained, and the update B A is scaled by alpha / r.

    Parameters
    ----------
    x : torch.Tensor of float32, shape (n, in)
    weight : torch.Tensor of float32, shape (out, in), frozen
    a : torch.Tensor of float32, shape (r, in), requires_grad
    b : torch.Tensor of float32, shape (out, r), requires_grad
    alpha : float
    r : int, the rank

    Returns
    -------
    torch.Tensor of float32, shape (n, out); graded with its gradients with respect to a and
    b, within 1e-5 relative and 1e-6 absolute

    Source
    ------
    Hu et al. 2022, "LoRA", section 4.1, equation (3); peft's LoraLayer (scaling = lora_alpha
    / r).

    Hints
    -----
    x @ weight.T is the frozen path. Multiply x by A^T first: (n, r) is small, B A (out, in)
    is not.
    """
    raise NotImplementedError


def lsq_quantize(v, s, qmin, qmax):
    """LSQ: fake-quantize v with a learned step size s, with LSQ's gradients for v and s.

    Forward: y = clamp(round(v / s), qmin, qmax) * s (half to even). Backward, for v: the
    straight-through estimator, 1 inside the range, else 0. For s, element by element:
    round(v / s) - v / s inside the range, qmin below it, qmax above it, all multiplied by
    the gradient scale g = 1 / sqrt(numel(v) * qmax). "Inside" means qmin <= round(v / s) <=
    qmax, as PyTorch tests it (the paper tests v / s itself: the two differ within half a step
    of the range's ends).

    Parameters
    ----------
    v : torch.Tensor of float32, shape (n,), requires_grad
    s : torch.Tensor of float32, shape (1,), positive, requires_grad
    qmin, qmax : int (4-bit signed: -8 and 7)

    Returns
    -------
    torch.Tensor of float32, shape (n,); graded with the gradients of v and s, within 1e-5
    relative and 1e-6 absolute

    Source
    ------
    Esser et al. 2020, "Learned Step Size Quantization", equations (1)-(3) and section 2.2;
    PyTorch's _fake_quantize_learnable_per_tensor_affine.

    Hints
    -----
    Write a torch.autograd.Function: forward saves v and s, backward returns (grad_y * mask,
    (grad_y * ds).sum() * g reshaped like s, None, None). Or build it from detach() tricks.
    """
    raise NotImplementedError
