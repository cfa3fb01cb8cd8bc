"""What a lab's checks are made of: an exercise (its oracle, fixed cases and random inputs), the
comparisons (bit for bit, or within a stated tolerance) and the way values are shown.

A lab's module ``labs/checks/labNN.py`` defines ``LAB``, a :class:`Lab` listing its
:class:`Exercise` objects in the order the lecture teaches them. The oracle of an exercise is
independent of the reference solution: numfmt (itself checked against ml_dtypes, torch and the
authors' code), torch, or a plain reference written in the check.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from labs.i18n import _

__all__ = ["Exercise", "Lab", "Verdict", "close", "exact", "float_bits", "show_format"]


@dataclass
class Verdict:
    """The comparison of a student's output with the expected one: ``ok``, and where they
    differ, one line saying where and how (values shown in bits where the format is exact)."""

    ok: bool
    detail: str = ""


@dataclass
class Exercise:
    """One function a student writes.

    Parameters
    ----------
    name : the function's name in the lab file
    oracle : ``oracle(*args)`` -> the expected output
    cases : fixed inputs (tuples of arguments), the edge cases, tried first in order
    inputs : a hypothesis strategy of argument tuples (None: the fixed cases only); on a wrong
        answer hypothesis shrinks it to the smallest input that still fails
    show : how to show one value of the output (default: a float64's bits, an integer)
    tol : None (bit for bit) or ``(rtol, atol)``: right within ``atol + rtol |expected|``
    examples : how many random inputs to try
    names : the arguments' names as shown in a report (default: the student's signature)
    signed_zeros : False where -0.0 and +0.0 count as equal (the STE idiom's +0.0 of a -0.0)
    outputs : the names of a tuple output's parts, as a report shows them (default "output k")
    show_for : ``show_for(args)`` -> the ``show`` of one input (the format its arguments name)
    adapter : ``adapter(fn)`` -> the callable to grade, for exercises graded through more than
        a call (autograd: the forward output and the gradient of the student's function)
    """

    name: str
    oracle: Callable
    cases: list = field(default_factory=list)
    inputs: Any = None
    show: Callable = None
    tol: tuple = None
    examples: int = 150
    adapter: Callable = None
    names: tuple = None
    signed_zeros: bool = True
    outputs: tuple = None
    show_for: Callable = None

    def compare(self, got, want, args=()) -> Verdict:
        if not self.signed_zeros:
            got, want = _unsigned_zeros(got), _unsigned_zeros(want)
        show = self.show_for(args) if self.show_for is not None else self.show
        return (exact(show, self.outputs) if self.tol is None
                else close(*self.tol, outputs=self.outputs))(got, want)


def _unsigned_zeros(v):
    """``v`` with -0.0 made +0.0 (tuples part by part; anything not numeric left alone)."""
    if isinstance(v, tuple):
        return tuple(_unsigned_zeros(p) for p in v)
    try:
        a = _as_array(v)
    except (TypeError, ValueError):
        return v
    return a + 0.0 if a.dtype.kind == "f" else v


@dataclass
class Lab:
    """A lab: its number (the lecture's), the student's file under labs/, a title."""

    number: str
    file: str
    title: str
    exercises: list


def float_bits(v) -> str:
    """A float as its float64 bits and its value: ``0x3ff0000000000000 (1.0)``."""
    v = float(v)
    return f"0x{np.float64(v).view(np.uint64):016x} ({v!r})"


def show_format(fmt):
    """A function showing a value of ``fmt`` (a numfmt FloatFormat) as its code and value,
    ``0x3c00 (1.0)``; a value off the format's grid is shown as a float64 with its bits."""
    def show(v):
        v = float(v)
        if np.isnan(v) or fmt.round(v) == v or np.isinf(v):
            try:
                code = int(np.asarray(fmt.encode(np.float64(v))).reshape(-1)[0])
                return f"0x{code:0{-(-fmt.bits // 4)}x} ({v!r})"
            except (ValueError, TypeError):
                pass
        return float_bits(v) + " " + _("(off the {name} grid)").format(name=fmt.name)
    return show


def _scalar_text(v, show) -> str:
    if show is not None:
        return show(v)
    if isinstance(v, (bool, np.bool_)):
        return repr(bool(v))
    if isinstance(v, (int, np.integer)):
        return repr(int(v))
    if isinstance(v, (float, np.floating)):
        return float_bits(v)
    return repr(v)


def _as_array(v):
    if hasattr(v, "detach"):                 # a torch tensor
        v = v.detach().cpu().numpy()
    return np.asarray(v)


def _shapes(got, want):
    g, w = _as_array(got), _as_array(want)
    if g.shape != w.shape:
        return None, _("shape {got} instead of {want}").format(got=g.shape, want=w.shape)
    return (g, w), ""


def _first_difference(g, w, same, show) -> str:
    bad = ~same
    idx = tuple(int(i) for i in np.argwhere(bad)[0]) if g.ndim else ()
    where = _("at index {index}: ").format(index=list(idx)) if g.ndim else ""
    n = int(bad.sum())
    return where + _("expected {want}, got {got}").format(
        want=_scalar_text(w[idx] if g.ndim else w[()], show),
        got=_scalar_text(g[idx] if g.ndim else g[()], show)) + (
        _(" ({n} of {total} elements differ)").format(n=n, total=g.size) if g.size > 1 else "")


def _equal_bits(g, w):
    """Elementwise: the same float64 value and sign (NaN equals NaN), or the same integer."""
    if w.dtype.kind in "iub":
        if g.dtype.kind == "f":          # integer-valued floats for integer codes: the values
            with np.errstate(invalid="ignore"):
                return (g == w) & np.isfinite(g)
        return g.astype(np.int64) == w.astype(np.int64)
    g64, w64 = g.astype(np.float64), w.astype(np.float64)
    both_nan = np.isnan(g64) & np.isnan(w64)
    return (g64.view(np.uint64) == w64.view(np.uint64)) | both_nan


def _part(k: int, outputs) -> str:
    return (f"{outputs[k]}: " if outputs and k < len(outputs)
            else _("output {k}: ").format(k=k))


def _numeric_parts(compare_arrays, outputs):
    """A comparison of outputs: tuples part by part, then each part as two numeric arrays of
    one shape given to ``compare_arrays(g, w)``, or a Verdict saying why they are not."""
    def compare(got, want):
        if isinstance(want, tuple):
            if not isinstance(got, (tuple, list)) or len(got) != len(want):
                return Verdict(False, _("expected a tuple of {n} outputs, got {got}").format(
                    n=len(want), got=type(got).__name__))
            for k, (g1, w1) in enumerate(zip(got, want)):
                v = compare(g1, w1)
                if not v.ok:
                    return Verdict(False, _part(k, outputs) + v.detail)
            return Verdict(True)
        try:
            arrays, why = _shapes(got, want)
        except (TypeError, ValueError) as err:
            return Verdict(False, _("not an array: {error}").format(error=err))
        if arrays is None:
            return Verdict(False, why)
        g, w = arrays
        if g.dtype.kind not in "iubf":
            return Verdict(False, _("expected numbers, got dtype {dtype}").format(dtype=g.dtype))
        return compare_arrays(g, w)
    return compare


def exact(show=None, outputs=None):
    """Bit for bit: floats equal including the sign of zero (any NaN matches NaN), integers
    equal; a tuple output compares part by part. ``show`` formats one value (e.g. in a
    format's bits); default: float64 bits."""
    def compare_arrays(g, w):
        same = _equal_bits(g, w)
        if bool(np.all(same)):
            return Verdict(True)
        return Verdict(False, _first_difference(g, w, same, show))
    return _numeric_parts(compare_arrays, outputs)


def close(rtol: float, atol: float = 0.0, outputs=None):
    """Within ``|got - want| <= atol + rtol |want|`` elementwise (infinities equal, NaN
    matches NaN); tuple outputs part by part."""
    def compare_arrays(g, w):
        g, w = g.astype(np.float64), w.astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            same = ((np.abs(g - w) <= atol + rtol * np.abs(w)) | (g == w)
                    | (np.isnan(g) & np.isnan(w)))
        if bool(np.all(same)):
            return Verdict(True)
        return Verdict(False, _first_difference(g, w, same, lambda v: repr(float(v))))
    return _numeric_parts(compare_arrays, outputs)
