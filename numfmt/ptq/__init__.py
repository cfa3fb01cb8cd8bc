"""Post-training quantization algorithms on arrays: what to do besides rounding to nearest.

Every method here minimises (or makes cheap to minimise) a layer's *output* error on
calibration inputs rather than its weight error: with E = W_hat - W and inputs of second
moment Sigma = E[x x^T], ``E||E x||^2 = tr(E Sigma E^T)``, so errors in channels where the
activations are large cost the most.

* :mod:`~numfmt.ptq.gptq_algorithm`: :func:`gptq` (Frantar et al. 2023) and :func:`hessian`;
  :mod:`~numfmt.ptq.gptq_readable`: :func:`gptq_reference`, the same in the paper's notation.
* :mod:`~numfmt.ptq.scaling`: :func:`smoothquant_scales` (Xiao et al. 2023) and
  :func:`awq_search` (Lin et al. 2024).
* :mod:`~numfmt.ptq.rotation`: :func:`hadamard`, :func:`random_rotation`,
  :func:`fuse_rotation` (QuaRot, SpinQuant).
* :mod:`~numfmt.ptq.llm_int8`: :func:`llm_int8_matmul` (Dettmers et al. 2022).
* :mod:`~numfmt.ptq.calibration`: :func:`calibrate_percentile`, :func:`calibrate_mse`,
  :func:`calibrate_kl` (clip values for activation ranges).

Model-agnostic: weights are (out, in) arrays as in ``torch.nn.Linear``, inputs (..., in).
"""

from .calibration import *  # noqa: F401,F403
from .gptq_algorithm import *  # noqa: F401,F403
from .gptq_readable import *  # noqa: F401,F403
from .llm_int8 import *  # noqa: F401,F403
from .rotation import *  # noqa: F401,F403
from .scaling import *  # noqa: F401,F403
from . import (calibration, gptq_algorithm, gptq_readable, llm_int8, rotation,  # noqa: F401
               scaling)

__all__ = (calibration.__all__ + gptq_algorithm.__all__ + gptq_readable.__all__
           + llm_int8.__all__ + rotation.__all__ + scaling.__all__)
