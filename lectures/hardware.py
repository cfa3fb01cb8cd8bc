"""Data-sheet figures of the GPUs the course names: one table, each figure with its source.

Lecture 04 (and ``benchmarks/gpu_check.py``) divide measured GB/s by a device's peak memory
bandwidth; lecture 05 quotes the H100's tensor-core rates; lecture 12 divides measured
TFLOP/s by the dense peaks. All of them read :data:`DATASHEETS`.

Units: bandwidth in GB/s (1e9 bytes per second); throughput in dense TFLOP/s (TOPS for
int8). Where a data sheet prints only the "with sparsity" figure (2:4 structured sparsity,
marked ``*`` there), the dense figure is half of it, as the data sheets' footnotes say.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DATASHEETS", "DataSheet", "dense_tflops", "find_datasheet"]


@dataclass(frozen=True)
class DataSheet:
    """One GPU as its vendor's data sheet describes it.

    name : str
        A part of the name the device reports (``torch.cuda.get_device_name``).
    source : str
        The data sheet the figures come from.
    bandwidth_gbs : float
        Peak memory bandwidth, GB/s.
    tflops : dict
        Dense tensor-core peaks keyed "bf16", "fp8", "int8" (a format the GPU lacks is absent).
    """

    name: str
    source: str
    bandwidth_gbs: float
    tflops: dict = field(default_factory=dict)


_HOPPER_SXM = {"bf16": 1979 / 2, "fp8": 3958 / 2, "int8": 3958 / 2}
_A100 = {"bf16": 312.0, "int8": 624.0}

#: Looked up in this order by :func:`find_datasheet`, so a name that contains another comes
#: first ("GH200" holds "H200", "H100 NVL" holds "H100", "L40S" holds "L4").
DATASHEETS = {d.name: d for d in (
    DataSheet("GH200", "NVIDIA GH200 Grace Hopper Superchip data sheet (96 GB HBM3)", 4000.0,
              _HOPPER_SXM),
    DataSheet("H200", "NVIDIA H200 Tensor Core GPU data sheet (SXM)", 4800.0, _HOPPER_SXM),
    DataSheet("H100 NVL", "NVIDIA H100 Tensor Core GPU data sheet (NVL)", 3900.0,
              {"bf16": 1671 / 2, "fp8": 3341 / 2, "int8": 3341 / 2}),
    DataSheet("H100 PCIe", "NVIDIA H100 Tensor Core GPU data sheet (PCIe)", 2000.0,
              {"bf16": 1513 / 2, "fp8": 3026 / 2, "int8": 3026 / 2}),
    DataSheet("H100", "NVIDIA H100 Tensor Core GPU data sheet (SXM)", 3350.0, _HOPPER_SXM),
    DataSheet("B200", "NVIDIA HGX B200 data sheet", 8000.0),
    DataSheet("A100-SXM4-80GB", "NVIDIA A100 Tensor Core GPU data sheet (80GB SXM)", 2039.0,
              _A100),
    DataSheet("A100 80GB PCIe", "NVIDIA A100 Tensor Core GPU data sheet (80GB PCIe)", 1935.0,
              _A100),
    DataSheet("A100", "NVIDIA A100 Tensor Core GPU data sheet (40GB PCIe)", 1555.0, _A100),
    DataSheet("L40S", "NVIDIA L40S GPU data sheet", 864.0,
              {"bf16": 362.05, "fp8": 733.0, "int8": 733.0}),
    DataSheet("L4", "NVIDIA L4 Tensor Core GPU data sheet", 300.0,
              {"bf16": 242 / 2, "fp8": 485 / 2, "int8": 485 / 2}),
)}


def find_datasheet(device_name: str) -> DataSheet | None:
    """The first entry of :data:`DATASHEETS` whose name is part of ``device_name``; None when
    no entry matches."""
    for name, sheet in DATASHEETS.items():
        if name in device_name:
            return sheet
    return None


def dense_tflops(device_name: str, kind: str) -> float | None:
    """Dense peak TFLOP/s (TOPS for int8) of a GEMM kind on a device of that name.

    ``kind`` is "bf16", "int8", or "fp8" with any suffix ("fp8 per-tensor", "fp8 per-row":
    the scales do not change the peak). None when the device or the kind is unknown.
    """
    sheet = find_datasheet(device_name)
    key = "fp8" if kind.startswith("fp8") else kind
    return None if sheet is None else sheet.tflops.get(key)
