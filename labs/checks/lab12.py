"""Lab 12's checks: numfmt.cost's kv_cache_bytes, weight_bytes and roofline_seconds."""

from hypothesis import strategies as st

from numfmt import cost
from labs.checks.common import Exercise, Lab
from labs.i18n import N_

_counts = st.integers(1, 128)


def _step(params, bits, kv_per_token, context):
    return cost.weight_bytes(params, bits) + context * kv_per_token


LAB = Lab("12", "12_time_and_memory.py", N_("time and memory"), [
    Exercise("kv_cache_bytes", cost.kv_cache_bytes, cases=[
        (30, 3, 64, 1, 16), (30, 3, 64, 2048, 8.25)],
        inputs=st.tuples(_counts, _counts, st.sampled_from([64, 128]), st.integers(1, 8192),
                         st.sampled_from([16, 8.25, 8, 4.5, 4.25, 2.125]))),
    Exercise("decode_step_bytes", _step, cases=[(135_000_000, 4.5, 7680.0, 2048)],
             inputs=st.tuples(st.integers(1, 10 ** 10), st.sampled_from([16, 8.5, 4.5, 4.25]),
                              st.sampled_from([7680.0, 3840.0, 1024.0]),
                              st.integers(0, 32768)),
             tol=(1e-12, 0.0)),
    Exercise("roofline_seconds", cost.roofline_seconds, cases=[
        (2.7e8, 1.35e8, 9.9e14, 3.35e12), (1e15, 1e6, 9.9e14, 3.35e12)],
        inputs=st.tuples(*(st.floats(1.0, 1e16) for _ in range(4)))),
])
