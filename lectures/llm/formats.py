"""The weight formats lectures 08 and 12 compare, and the K/V cache formats' bits per element.

One table for both lectures: lecture 08 measures each format's perplexity on the real model,
lecture 12 the bytes and the time each costs. The names are marked for translation here
(the ``llm`` catalog); a lecture translates them with
``lectures.i18n.gettext_from("lectureNN", "llm")``.
"""

from __future__ import annotations

from console.i18n import N_
from lectures.llm.quantizers import WeightFormat

__all__ = ["KV_BITS", "WEIGHT_FORMATS"]

#: The number formats of lecture 08's demo 2, in the order of its table.
WEIGHT_FORMATS = (
    WeightFormat(N_("FP8 E4M3, per channel"), "fp8"),
    WeightFormat(N_("INT8, per channel"), "int", 8),
    WeightFormat(N_("INT4, per channel"), "int", 4),
    WeightFormat(N_("INT4, groups of 128"), "int", 4, "group", 128),
    WeightFormat(N_("INT4, groups of 32"), "int", 4, "group", 32),
    WeightFormat(N_("INT3, groups of 128"), "int", 3, "group", 128),
    WeightFormat(N_("INT3, groups of 32"), "int", 3, "group", 32),
    WeightFormat(N_("INT4 + zero point, groups of 128"), "int", 4, "group", 128, False),
    WeightFormat(N_("INT4 + zero point, groups of 32"), "int", 4, "group", 32, False),
    WeightFormat(N_("INT3 + zero point, groups of 128"), "int", 3, "group", 128, False),
    WeightFormat(N_("INT3 + zero point, groups of 32"), "int", 3, "group", 32, False),
    WeightFormat(N_("MXFP4 (E2M1, E8M0 per 32)"), "mxfp4"),
    WeightFormat(N_("NVFP4 (E2M1, E4M3 per 16)"), "nvfp4"),
    WeightFormat(N_("NF4 (per 64, FP32 absmax)"), "nf4"),
    WeightFormat(N_("NF4 + double quantization"), "nf4", double_quant=True),
)

#: Bits per element of a K/V cache stored in each format, block scales included (MXFP4: an
#: 8-bit E8M0 scale per 32 elements; NVFP4: an 8-bit E4M3 scale per 16).
KV_BITS = {"int8": 8, "fp8": 8, "mxfp4": 4 + 8 / 32, "nvfp4": 4 + 8 / 16}
