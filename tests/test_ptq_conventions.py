"""numfmt.ptq's conventions against the reference implementations' rules, transcribed here:
pytorch-quantization's entropy calibrator, and one percentile convention for ptq and qat."""

from collections import Counter

import numpy as np
import pytest

from numfmt import qat
from numfmt.ptq import calibrate_kl, calibrate_percentile

scipy_stats = pytest.importorskip("scipy.stats")


def trt_entropy_amax(calib_hist, calib_bin_edges, num_bits, unsigned, stride=1, start_bin=128):
    """pytorch-quantization's ``_compute_amax_entropy`` (github.com/NVIDIA/TensorRT,
    tools/pytorch-quantization/pytorch_quantization/calib/histogram.py), transcribed with its
    loops as they are (logging and the count check left out; ``_normalize_distr`` there returns
    nothing, so scipy's entropy does the normalising)."""
    bins = calib_hist[:]
    bins[0] = bins[1]
    divergences = []
    nbins = 1 << (num_bits - 1 + int(unsigned))
    new_density_counts = np.zeros(nbins, dtype=np.float64)
    for i in range(start_bin, len(bins) + 1, stride):
        new_density_counts.fill(0)
        space = np.linspace(0, i, num=nbins + 1)
        digitized_space = np.digitize(range(i), space) - 1
        digitized_space[bins[:i] == 0] = -1
        for idx, digitized in enumerate(digitized_space):
            if digitized != -1:
                new_density_counts[digitized] += bins[idx]
        counter = Counter(digitized_space)
        for key, val in counter.items():
            if key != -1:
                new_density_counts[key] = new_density_counts[key] / val
        new_density = np.zeros(i, dtype=np.float64)
        for idx, digitized in enumerate(digitized_space):
            if digitized != -1:
                new_density[idx] = new_density_counts[digitized]
        reference_density = np.array(bins[:len(digitized_space)])
        reference_density[-1] += np.sum(bins[i:])
        divergences.append(scipy_stats.entropy(reference_density, new_density))
    divergences = np.array(divergences)
    last_argmin = len(divergences) - 1 - np.argmin(divergences[::-1])
    return calib_bin_edges[last_argmin * stride + start_bin]


def trt_on(x, bits, unsigned, bins):
    """The reference's amax on the histogram its calibrate_weights builds:
    np.histogram(|x|, bins, range=(0, max|x|))."""
    a = np.abs(x)
    hist, edges = np.histogram(a, bins=bins, range=(0, a.max()))
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(trt_entropy_amax(hist, edges, bits, unsigned))


RNG = np.random.default_rng(1)
CASES = {
    "gaussian": (RNG.standard_normal(20000), False),
    "laplace": (RNG.laplace(size=20000), False),
    "outliers": (np.r_[RNG.standard_normal(20000), 20 * RNG.standard_normal(20)], False),
    "relu-unsigned": (np.maximum(RNG.standard_normal(20000), 0), True),
    "relu-signed": (np.maximum(RNG.standard_normal(20000), 0), False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_kl_tensorrt_convention_is_pytorch_quantizations_amax(case):
    x, unsigned = CASES[case]
    assert calibrate_kl(x, 8, 2048, convention="tensorrt", unsigned=unsigned) == \
        trt_on(x, 8, unsigned, 2048)


@pytest.mark.parametrize("bits, bins", [(8, 300), (6, 1000), (4, 129)])
def test_kl_tensorrt_convention_other_sizes(bits, bins):
    x = RNG.standard_t(3, size=5000)
    assert calibrate_kl(x, bits, bins, convention="tensorrt") == trt_on(x, bits, False, bins)


def test_kl_tensorrt_convention_degenerate_histograms():
    # all the mass in the last bins: the reference's entropy is NaN below them, and its
    # argmin picks the last NaN; a single value repeated: every candidate but the last is NaN
    for x in (np.r_[np.ones(100), -np.ones(50)], np.r_[np.full(100, 3.0), 2.99, 0.0]):
        assert calibrate_kl(x, 8, 512, convention="tensorrt") == trt_on(x, 8, False, 512)


def test_kl_conventions_differ_on_relu_outputs():
    # the zero spike of ReLU outputs decides: TensorRT discards it, Migacz's rule keeps it
    x, _ = CASES["relu-signed"]
    assert calibrate_kl(x, convention="tensorrt") > 1.5 * calibrate_kl(x)


def test_kl_unsigned_uses_twice_the_levels():
    # unsigned b bits has 2^b levels on [0, T], as signed b + 1 bits has per sign
    x = np.abs(RNG.laplace(size=20000))
    assert calibrate_kl(x, 7, unsigned=True) == calibrate_kl(x, 8)
    assert calibrate_kl(x, 8, unsigned=True) != calibrate_kl(x, 8)
    with pytest.raises(ValueError, match="unsigned calibration needs x >= 0"):
        calibrate_kl([-1.0, 2.0], unsigned=True)
    with pytest.raises(ValueError, match="convention"):
        calibrate_kl([1.0, 2.0], convention="trt")
    with pytest.raises(TypeError, match="unsigned"):
        calibrate_kl([1.0, 2.0], unsigned="yes")
    with pytest.raises(ValueError, match="bins must be at least 128"):
        calibrate_kl([1.0, 2.0], 4, 64, convention="tensorrt")


# --------------------------------------------------------------------------- percentiles
def test_percentile_is_in_percent_for_ptq_and_qat():
    x = RNG.standard_normal(10001)
    for p in (99.0, 99.9, 99.99):
        want = np.percentile(np.abs(x), p, method="higher")           # numpy's nearest rank
        assert calibrate_percentile(x, p) == want
        hi = qat.calibrate_percentile(x, 8, percentile=p, symmetric=False)
        lo = np.percentile(x, 100 - p, method="lower")
        top = np.percentile(x, p, method="higher")
        ref = qat.calibrate_percentile(np.array([lo, top]), 8, 0.0, symmetric=False)
        assert (hi.scale, hi.zero_point) == (ref.scale, ref.zero_point)


def test_a_fraction_for_a_percent_is_refused():
    with pytest.raises(ValueError, match="99.99, not 0.9999"):
        calibrate_percentile([1.0, 2.0], 0.9999)
    with pytest.raises(ValueError, match="percentile=99.99"):
        qat.calibrate_percentile([1.0, 2.0], 8, 99.99)
    with pytest.raises(ValueError, match="in percent"):
        qat.calibrate_percentile([1.0, 2.0], 8, percentile=0.9999)
    with pytest.raises(TypeError, match="exactly one"):
        qat.calibrate_percentile([1.0, 2.0], 8, 0.01, percentile=99.0)
    with pytest.raises(TypeError, match="exactly one"):
        qat.calibrate_percentile([1.0, 2.0], 8)
