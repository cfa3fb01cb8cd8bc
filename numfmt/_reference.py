"""The reference types of numfmt's formats, for tests and benchmarks (private).

:data:`numfmt.formats.REFERENCE_DTYPES` names, for each format, the numpy or ml_dtypes type it
agrees with bit for bit; :func:`reference_dtypes` resolves those names. Oracle tables are
derived from here (as ml_dtypes' own tests parametrize over one list of dtypes), so a new
format with an ml_dtypes twin joins every oracle test by its one entry in that table.
"""

from __future__ import annotations

import numpy as np

from numfmt.formats import FORMATS, FP32, REFERENCE_DTYPES, FloatFormat

__all__ = ["reference_dtype", "reference_dtypes"]


def reference_dtype(fmt: FloatFormat):
    """The numpy or ml_dtypes scalar type of ``fmt`` (imports ml_dtypes), or None if it has none."""
    name = REFERENCE_DTYPES.get(fmt.name)
    if name is None:
        return None
    if name in ("float32", "float16"):
        return getattr(np, name)
    import ml_dtypes
    return getattr(ml_dtypes, name, None)  # an older ml_dtypes may lack a newer type


def reference_dtypes(formats=None, fp32: bool = False) -> dict:
    """``{FloatFormat: reference type}`` for ``formats`` (default: every format in
    :data:`numfmt.FORMATS`, plus FP32 if ``fp32``), leaving out those without a reference."""
    if formats is None:
        formats = ([FP32] if fp32 else []) + list(FORMATS.values())
    pairs = {f: reference_dtype(f) for f in formats}
    return {f: t for f, t in pairs.items() if t is not None}
