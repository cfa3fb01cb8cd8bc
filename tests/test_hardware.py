"""lectures.hardware: the data-sheet table, checked against figures typed here from the data
sheets themselves (NVIDIA's H100, H200, GH200, A100, L40S and L4 data sheets), and its lookup
by the name a device reports."""

from __future__ import annotations

import pytest

from lectures import hardware

# (name, bandwidth GB/s, {kind: the data sheet's printed figure}, printed "with sparsity"?)
# The H100 data sheet prints "3,350 GB/s" for SXM and "BF16 Tensor Core 1,979 teraFLOPS*",
# "* With sparsity"; the A100 data sheet prints "312 | 624*" (dense first), and so on.
PRINTED = [
    ("H100", 3350, {"bf16": 1979, "fp8": 3958, "int8": 3958}, True),
    ("H100 PCIe", 2000, {"bf16": 1513, "fp8": 3026, "int8": 3026}, True),
    ("H100 NVL", 3900, {"bf16": 1671, "fp8": 3341, "int8": 3341}, True),
    ("H200", 4800, {"bf16": 1979, "fp8": 3958, "int8": 3958}, True),
    ("GH200", 4000, {"bf16": 1979, "fp8": 3958, "int8": 3958}, True),
    ("A100-SXM4-80GB", 2039, {"bf16": 312, "int8": 624}, False),
    ("A100 80GB PCIe", 1935, {"bf16": 312, "int8": 624}, False),
    ("A100", 1555, {"bf16": 312, "int8": 624}, False),
    ("L40S", 864, {"bf16": 362.05, "fp8": 733, "int8": 733}, False),
    ("L4", 300, {"bf16": 242, "fp8": 485, "int8": 485}, True),
    ("B200", 8000, {}, False),
]


@pytest.mark.parametrize("name,gbs,printed,sparse", PRINTED, ids=[p[0] for p in PRINTED])
def test_figures_are_the_data_sheets(name, gbs, printed, sparse):
    sheet = hardware.DATASHEETS[name]
    assert sheet.bandwidth_gbs == gbs
    assert sheet.tflops == {k: v / 2 if sparse else v for k, v in printed.items()}
    assert sheet.source.startswith("NVIDIA ") and "data sheet" in sheet.source


def test_every_entry_is_checked_above():
    assert sorted(hardware.DATASHEETS) == sorted(p[0] for p in PRINTED)


def test_lookup_takes_the_most_specific_name():
    assert hardware.find_datasheet("NVIDIA GH200 480GB").name == "GH200"     # holds "H200"
    assert hardware.find_datasheet("NVIDIA H100 80GB HBM3").name == "H100"
    assert hardware.find_datasheet("NVIDIA H100 NVL").name == "H100 NVL"
    assert hardware.find_datasheet("NVIDIA H100 PCIe").name == "H100 PCIe"
    assert hardware.find_datasheet("NVIDIA L40S").name == "L40S"             # holds "L4"
    assert hardware.find_datasheet("NVIDIA L4").name == "L4"
    assert hardware.find_datasheet("AMD EPYC 7763") is None


def test_dense_tflops_by_gemm_kind():
    assert hardware.dense_tflops("NVIDIA H200", "fp8 per-row") == 1979.0
    assert hardware.dense_tflops("NVIDIA GH200 480GB", "bf16") == 989.5
    assert hardware.dense_tflops("NVIDIA H100 PCIe", "int8") == 1513.0
    assert hardware.dense_tflops("NVIDIA A100-SXM4-80GB", "fp8 per-tensor") is None   # no FP8
    assert hardware.dense_tflops("NVIDIA B200", "bf16") is None
    assert hardware.dense_tflops("AMD EPYC", "bf16") is None
