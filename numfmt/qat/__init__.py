"""Quantization-aware training on numpy: fake quantization, the straight-through estimator,
calibration, rounding, and an Adam optimizer over FP32 master weights.

Fake quantization rounds a tensor onto a low-precision grid and maps it straight back, so the
result stays in floating point but only takes values the low-precision format can hold::

    integer grid:  x_hat = (clamp(round(x / scale) + zero_point, qmin, qmax) - zero_point) * scale
    float format:  x_hat = fmt.round(x / scale) * scale            (saturating at fmt.max_value)
    block format:  x_hat = block_quantize(x, elem, block).values    (MX, NVFP4)

Its derivative is zero almost everywhere (a staircase), so training uses the straight-through
estimator (STE): the backward pass treats rounding as the identity and keeps only the clamp.
The gradient passes where the rounded code lies in ``[qmin, qmax]`` (boundaries included) and is
zero where the clamp saturates, exactly as ``torch.fake_quantize_per_tensor_affine`` does.

The optimizer keeps full-precision master weights. Adam integrates them; the fake-quantized view
that the forward pass uses is re-derived from them after every step. Updates far smaller than
half a grid step accumulate in the master instead of being rounded away.

References: Bengio, Leonard and Courville, "Estimating or Propagating Gradients Through
Stochastic Neurons", 2013 (the STE); Jacob et al., CVPR 2018, section 3 (fake quantization,
zero-point nudging); Gupta et al., "Deep Learning with Limited Numerical Precision", ICML 2015
(stochastic rounding); Kingma and Ba, "Adam", ICLR 2015, Algorithm 1; Loshchilov and Hutter,
"Decoupled Weight Decay Regularization", ICLR 2019 (AdamW).

* :mod:`~numfmt.qat.calibration`: :class:`QParams` and the ``calibrate_*`` functions.
* :mod:`~numfmt.qat.fake_quant`: ``fake_quantize*``, integer rounding, :func:`ste_backward`.
* :mod:`~numfmt.qat.optim`: :func:`adam_update` and :class:`QATAdam`.
"""

from numfmt.qat.calibration import *  # noqa: F401,F403
from numfmt.qat.fake_quant import *  # noqa: F401,F403
from numfmt.qat.optim import *  # noqa: F401,F403
from numfmt.qat import calibration, fake_quant, optim  # noqa: F401

__all__ = calibration.__all__ + fake_quant.__all__ + optim.__all__
