"""Lab 07's checks: numfmt.packing's nibble packing and QLoRA's absmax quantizer and cost."""

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from numfmt.packing import nibbles, qlora
from labs.checks.common import Exercise, Lab
from labs.checks.strategies import floats
from labs.i18n import N_

NF4 = qlora.nf4_levels()


def _nf4(x, levels, block):
    q = qlora.absmax_quantize(x, levels, block)
    return q.codes, q.absmax


@st.composite
def _nf4_args(draw):
    block = draw(st.sampled_from([2, 4, 8, 64]))
    n = block * draw(st.integers(1, 3))
    return (draw(hnp.arrays(np.float64, n, elements=floats(-10.0, 10.0).filter(
        lambda v: v == 0 or abs(v) > 1e-6))), NF4, block)


LAB = Lab("07", "07_weight_storage.py", N_("weight storage"), [
    Exercise("pack_nibbles", nibbles.pack_nibbles, cases=[
        (np.array([1, 2, 15, 0], np.uint8),)],
        inputs=st.integers(1, 8).flatmap(lambda n: hnp.arrays(
            np.uint8, 2 * n, elements=st.integers(0, 15))).map(lambda c: (c,))),
    Exercise("unpack_nibbles", nibbles.unpack_nibbles, cases=[
        (np.array([0x21, 0x0F], np.uint8),)],
        inputs=hnp.arrays(np.uint8, st.integers(1, 8)).map(lambda p: (p,))),
    Exercise("nf4_quantize", _nf4, outputs=("codes", "absmax"), cases=[
        (np.array([1.0, -1.0, 0.0, 0.5]), NF4, 4),
        (np.zeros(4), NF4, 2),
        (np.r_[np.array([(NF4[7] + NF4[8]) / 2, 1.0]), np.array([3.0, 3.0])], NF4, 2)],
        inputs=_nf4_args()),
    Exercise("bits_per_parameter", lambda b, d, s: qlora.qlora_bits_per_parameter(b, d, s),
             cases=[(64, True, 256), (64, False, 256)],
             inputs=st.tuples(st.sampled_from([16, 32, 64, 128, 256]), st.booleans(),
                              st.sampled_from([64, 128, 256]))),
])
