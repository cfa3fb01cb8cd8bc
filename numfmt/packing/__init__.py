"""How quantized weights are stored: bytes, layouts and their round trips.

* :mod:`~numfmt.packing.nibbles`: two 4-bit codes per byte (int4, uint4, FP4 E2M1).
* :mod:`~numfmt.packing.block_bytes`: MXFP4 and NVFP4 tensors as bytes.
* :mod:`~numfmt.packing.gptq`: the GPTQ ``qweight``/``qzeros`` layout and act-order.
* :mod:`~numfmt.packing.marlin`: Marlin 16 x 64 tiles for INT4 and FP8 W8A16.
* :mod:`~numfmt.packing.qlora`: NF4, blockwise absmax codebooks, double quantization.

Every packer has an unpacker, and unpack(pack(x)) == x exactly.
"""

from .nibbles import *  # noqa: F401,F403
from .block_bytes import *  # noqa: F401,F403
from .gptq import *  # noqa: F401,F403
from .marlin import *  # noqa: F401,F403
from .qlora import *  # noqa: F401,F403
from . import block_bytes, gptq, marlin, nibbles, qlora  # noqa: F401

__all__ = nibbles.__all__ + block_bytes.__all__ + gptq.__all__ + marlin.__all__ + qlora.__all__
