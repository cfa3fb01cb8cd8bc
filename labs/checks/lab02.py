"""Lab 02's checks: numfmt's FloatFormat.round (ml_dtypes' rounding) and its Kahan sum."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import numfmt
from numfmt.rounding import sum_in_format
from labs.checks.common import Exercise, Lab, show_format
from labs.checks.strategies import floats
from labs.i18n import N_

FORMATS = [f for f in numfmt.FORMATS.values() if f.signed and f.specials != "fnuz"]


def _format(man_bits, emin, max_value):
    return next(f for f in FORMATS if (f.man_bits, f.emin, f.max_value) == (man_bits, emin,
                                                                             max_value))


def _round(x, man_bits, emin, max_value):
    return _format(man_bits, emin, max_value).round(x, saturate=True)


@st.composite
def _round_args(draw):
    fmt = draw(st.sampled_from(FORMATS))
    scale = draw(st.sampled_from([1.0, 2.0 ** fmt.emin, fmt.max_value]))
    x = draw(hnp.arrays(np.float64, st.integers(1, 8), elements=floats(-2.0, 2.0))) * scale
    return (x, fmt.man_bits, fmt.emin, fmt.max_value)


def _kahan(x):
    return float(sum_in_format(x.astype(np.float64), numfmt.FP16, "kahan"))


E4M3 = numfmt.FP8_E4M3
LAB = Lab("02", "02_rounding_and_accumulation.py", N_("rounding and accumulation"), [
    Exercise("round_to_format", _round, cases=[
        (np.array([1.0625, 1.1875, -1.0625, 3.0e-3, -1e-9, 500.0, 464.0, 470.0]),
         E4M3.man_bits, E4M3.emin, E4M3.max_value),
        (np.array([2.0 ** -9 * 1.5, 2.0 ** -10, 2.0 ** -10 * 3]), E4M3.man_bits, E4M3.emin,
         E4M3.max_value)],
        inputs=_round_args(), examples=200,
        show_for=lambda args: show_format(_format(*args[1:]))),
    Exercise("kahan_sum_fp16", _kahan, cases=[
        (np.array([1.0] + [1e-4] * 50, dtype=np.float16),),
        (np.array([2048.0, 1.0, 1.0, 1.0, 1.0], dtype=np.float16),)],
        inputs=hnp.arrays(np.float16, st.integers(1, 40), elements=st.floats(
            -1000, 1000, width=16)).map(lambda x: (x,))),
])
