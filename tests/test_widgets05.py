"""Notebook 05's plots and widgets: callbacks driven by setting widget values, no browser.

Expected values are derived here by hand with numpy (symmetric quantization written out,
dominance checked point by point) or taken from ml_dtypes, never from the functions under test.
"""

import importlib

import matplotlib

matplotlib.use("Agg")

import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import numfmt  # noqa: E402

from lectures.widgets import lecture05 as W  # noqa: E402

L = importlib.import_module("lectures.05_quantization_basics")
N = 1 << 16


def hand_symmetric(z, bits, clip=1.0, axis=None):
    """Symmetric INTb written out: scale = clip * amax / (2^(b-1) - 1), round half even, clamp."""
    qmax = 2 ** (bits - 1) - 1
    s = clip * np.abs(z).max(axis=axis, keepdims=axis is not None) / qmax
    return np.clip(np.rint(z / s), -qmax, qmax) * s


def rel(q, x):
    return np.linalg.norm(q - x) / np.linalg.norm(x)


def dominated(p, others):
    """Whether some point of ``others`` is at least as good on both axes and better on one."""
    return any(b <= p[0] and e <= p[1] and (b < p[0] or e < p[1]) for b, e in others)


def assert_labelled(fig):
    """Every axes has a title (its own or the figure's), both axis labels and a legend."""
    for ax in fig.axes:
        assert ax.get_title() or fig._suptitle is not None
        assert ax.get_xlabel() and ax.get_ylabel()
        assert ax.get_legend() is not None


# ---------------------------------------------------------------------------------------------
# Clip explorer
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def clip():
    return W.clip_explorer()


def test_clip_explorer_draws_the_chosen_distribution(clip):
    clip.controls["distribution"].value = "Student-t"
    clip.controls["nu"].value = 3.0
    n = W.CLIP_SAMPLE
    # ν = 3 is not one of demo 2's distributions: a fresh draw of its own.
    np.testing.assert_array_equal(clip.state["z"], np.random.default_rng(0).standard_t(3.0, n))
    assert clip.state["source"] == "fresh draw"
    # Demo 2 draws Gaussian, Laplace, Student-t(5) in that order from one generator, seed 0:
    # the explorer shows those very values, so its numbers are the table's.
    rng = np.random.default_rng(0)
    demo = {"Gaussian": rng.standard_normal(n), "Laplace": rng.laplace(size=n),
            "Student-t": rng.standard_t(5, n)}
    clip.controls["distribution"].value = "Laplace"
    np.testing.assert_array_equal(clip.state["z"], demo["Laplace"])
    assert clip.controls["nu"].disabled  # ν means nothing for the Laplace distribution
    clip.controls["distribution"].value = "Gaussian"
    np.testing.assert_array_equal(clip.state["z"], demo["Gaussian"])
    clip.controls["distribution"].value = "Student-t"
    assert not clip.controls["nu"].disabled
    clip.controls["nu"].value = 5.0
    np.testing.assert_array_equal(clip.state["z"], demo["Student-t"])
    assert clip.state["source"] == "demo 2"


def test_clip_explorer_defaults_agree_with_the_demo_2_table():
    # The explorer samples the table's own data, so it shows the table's numbers.
    e = W.clip_explorer()
    r2 = L.demo2_clipping()
    e.controls["clip"].value = 1.0
    assert e.state["point"].error == r2.errors["Student-t (ν = 5)"][0]
    assert e.state["point"].error == pytest.approx(0.846, abs=5e-4)
    # The explorer's finer grid of c finds its minimum inside the table's flat region.
    flat = r2.flat["Student-t (ν = 5)"]
    assert min(flat) * 0.9 <= e.state["best_clip"] <= max(flat) * 1.1


@pytest.mark.parametrize("bits", range(2, 9))
def test_clip_explorer_grid_has_2_to_the_b_minus_1_minus_1_levels_per_side(clip, bits):
    clip.controls["clip"].value = 0.5
    clip.controls["bits"].value = bits
    levels, z = clip.state["point"].levels, clip.state["z"]
    per_side = 2 ** (bits - 1) - 1
    assert len(levels) == 2 * per_side + 1
    assert np.count_nonzero(levels > 0) == per_side and np.count_nonzero(levels == 0) == 1
    # The outermost level sits at the clip point, and the levels are equally spaced.
    assert levels[-1] == pytest.approx(0.5 * np.abs(z).max(), rel=1e-12)
    np.testing.assert_allclose(np.diff(levels), levels[-1] / per_side, rtol=1e-9)


@pytest.mark.parametrize("c", [1.0, 0.6, 0.3, 0.1, 0.02])
def test_clip_explorer_clipped_mass_and_error_match_a_direct_computation(clip, c):
    clip.controls["distribution"].value = "Laplace"
    clip.controls["bits"].value = 4
    clip.controls["clip"].value = c
    z, p = clip.state["z"], clip.state["point"]
    assert p.clipped == np.mean(np.abs(z) > c * np.abs(z).max())
    assert p.error == pytest.approx(rel(hand_symmetric(z, 4, c), z), rel=1e-12)
    if c < 1.0:
        assert p.clipped > 0  # a continuous sample has values beyond any cut below its max


def test_clip_explorer_u_curve_optimum_moves_in_with_heavier_tails(clip):
    clip.controls["bits"].value = 4
    best = {}
    for dist, nu in (("Gaussian", 5.0), ("Laplace", 5.0), ("Student-t", 3.0)):
        clip.controls["distribution"].value = dist
        clip.controls["nu"].value = nu
        s = clip.state
        assert s["best_error"] == min(s["curve"])
        assert s["best_clip"] == s["clips"][int(np.argmin(s["curve"]))]
        # The curve is a U: both ends are worse than the optimum (lecture 05, demo 2).
        assert s["curve"][0] > s["best_error"] and s["curve"][-1] > s["best_error"]
        best[dist] = s["best_clip"]
    assert best["Gaussian"] > best["Laplace"] > best["Student-t"]


def test_clip_explorer_figure_is_labelled_and_text_fallback_is_fixed(clip):
    assert_labelled(clip.figure)
    bundle = clip._repr_mimebundle_()
    assert bundle["text/plain"].startswith("[Clipping")
    assert "application/vnd.jupyter.widget-view+json" in bundle


# ---------------------------------------------------------------------------------------------
# Granularity explorer
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gran():
    return W.granularity_explorer(rows=64)


@pytest.fixture(scope="module")
def gran_data():
    return {k: M[:64] for k, M in L.granularity_data(1).items()}


def test_granularity_explorer_group_ranges_are_the_group_maxima(gran, gran_data):
    gran.controls["matrix"].value = "A"
    gran.controls["bits"].value = 4
    gran.controls["granularity"].value = "group"
    gran.controls["group"].value = 32
    A = gran_data["A"]
    s = gran.state
    assert s["selected"] == 2 and not gran.controls["group"].disabled
    expected = np.repeat(np.abs(A[0]).reshape(-1, 32).max(axis=1), 32)
    np.testing.assert_allclose(s["ranges"], expected, rtol=1e-12)
    np.testing.assert_array_equal(s["row"], np.abs(A[0]))
    # One FP16 scale per tensor, per row of 4096, per group of 32.
    assert s["extra_bits"] == [0.0, 16 / 4096, 16 / 32]
    for err, axis_shape in zip(s["errors"], ((A.shape[0] * 4096,), (A.shape[0], 4096),
                                             (A.shape[0] * 4096 // 32, 32))):
        Ar = A.reshape(axis_shape)
        hand = hand_symmetric(Ar, 4, axis=None if Ar.ndim == 1 else -1)
        assert err == pytest.approx(rel(hand, Ar), rel=1e-12)
    # Outlier channels set every row's maximum, so only groups help (lecture 05, demo 3).
    assert s["errors"][2] < 0.5 * s["errors"][1]


def test_granularity_explorer_tensor_and_row_ranges_are_flat(gran, gran_data):
    gran.controls["matrix"].value = "W"
    gran.controls["granularity"].value = "tensor"
    W_ = gran_data["W"]
    assert gran.controls["group"].disabled
    np.testing.assert_allclose(gran.state["ranges"], np.abs(W_).max(), rtol=1e-12)
    gran.controls["granularity"].value = "channel"
    np.testing.assert_allclose(gran.state["ranges"], np.abs(W_[0]).max(), rtol=1e-12)
    assert gran.state["selected"] == 1
    # Rows of W have different scales: per-row scales beat one tensor scale.
    assert gran.state["errors"][1] < gran.state["errors"][0]
    assert_labelled(gran.figure)


@pytest.mark.parametrize("group", W.GROUP_SIZES)
def test_granularity_explorer_smaller_groups_cost_16_over_g_bits(gran, group):
    gran.controls["group"].value = group
    assert gran.state["labels"][2] == f"groups of {group}"
    assert gran.state["extra_bits"][2] == 16 / group


# ---------------------------------------------------------------------------------------------
# Block explorer
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def block():
    return W.block_explorer()


def set_block(ex, element, size, scale):
    ex.controls["element"].value = element
    ex.controls["block"].value = size
    ex.controls["scale"].value = scale
    return ex.state


def test_block_explorer_exact_scale_matches_an_ml_dtypes_oracle(block):
    s = set_block(block, "E4M3", 32, "exact")
    x = np.random.default_rng(0).standard_t(df=5, size=W.BLOCK_SAMPLE) * 0.02
    xb = x.reshape(-1, 32)
    scale = np.abs(xb).max(axis=1, keepdims=True) / 448.0      # E4M3's largest finite value
    q = (xb / scale).astype(ml_dtypes.float8_e4m3fn).astype(np.float64) * scale
    assert s["error"] == pytest.approx(rel(q.ravel(), x), rel=1e-12)
    assert s["bits"] == 8 + 32 / 32                              # an FP32 scale per 32
    # An exact scale maps each block's maximum to 448 itself, so nothing beyond the block
    # maxima (1 in 32) can exceed the range; numfmt counts a maximum that lands one ulp above
    # 448 as clipped, so the bound is 1/32 rather than 0.
    assert s["clipped"] <= 1 / 32


@pytest.mark.parametrize("element, bits", [("E4M3", 8), ("E5M2", 8), ("E2M3", 6), ("E3M2", 6),
                                           ("E2M1", 4)])
@pytest.mark.parametrize("size", W.BLOCK_SIZES)
def test_block_explorer_bits_per_element(block, element, bits, size):
    s = set_block(block, element, size, "e8m0")
    assert s["bits"] == bits + 8 / size


def test_block_explorer_references_are_demo_4s_table(block):
    # The explorer's references are the table's (2^20 values): INT8 with one tensor scale has
    # 6.68 %, off the front (a smaller sample would put it on the front).
    r4 = L.demo4_block_formats()
    assert block.state["ref_errors"] == [e for _, _, e, _ in r4.formats]
    i = block.state["ref_labels"].index("INT8, one tensor scale (symmetric)")
    assert i + 1 not in block.state["front"]            # index 0 of the front is yours


def test_block_explorer_rules_reproduce_demo_4s_rule_table(block):
    r4 = L.demo4_block_formats()
    for label, elem in L.MX_RULE_FORMATS:
        for rule in ("floor", "rceil"):
            s = set_block(block, elem.name, 32, "e8m0")
            block.controls["rule"].value = rule
            s = block.state
            assert (s["error"], s["clipped"]) == (r4.rules[(label, rule)].error,
                                                  r4.rules[(label, rule)].clipped)
    block.controls["rule"].value = "rceil"
    s = set_block(block, "E2M1", 16, "e4m3")             # the rule is for E8M0 scales only
    assert s["rule"] == "floor" and block.controls["rule"].disabled
    block.controls["rule"].value = "floor"


def test_block_explorer_nvfp4_and_mxfp4_settings_reproduce_demo_4_rows(block):
    s = set_block(block, "E2M1", 16, "e4m3")
    assert s["error"] == s["ref_errors"][s["ref_labels"].index(
        "NVFP4 (E2M1, 16 per E4M3 scale + FP32)")]
    assert s["on_front"]
    s = set_block(block, "E2M1", 32, "e8m0")
    i = s["ref_labels"].index("MXFP4 (E2M1, 32 per E8M0 scale)")
    assert (s["bits"], s["error"]) == (s["ref_bits"][i], s["ref_errors"][i])
    assert s["on_front"]  # a tie with a format on the front is on the front


@pytest.mark.parametrize("config", [("E2M1", 8, "exact"), ("E3M2", 256, "e8m0"), ("E2M3", 64, "e4m3"),
                                    ("E5M2", 16, "e8m0"), ("E2M1", 128, "e8m0")])
def test_block_explorer_on_front_means_not_dominated(block, config):
    s = set_block(block, *config)
    refs = list(zip(s["ref_bits"], s["ref_errors"]))
    assert s["on_front"] == (not dominated((s["bits"], s["error"]), refs))
    assert_labelled(block.figure)


# ---------------------------------------------------------------------------------------------
# SQNR explorer
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sqnr():
    return W.sqnr_explorer()


def test_sqnr_explorer_gains_about_6_db_per_bit(sqnr):
    sqnr.controls["distribution"].value = "Gaussian"
    sqnr.controls["granularity"].value = "channel"
    s = sqnr.state
    z = np.random.default_rng(0).standard_normal(N).reshape(64, -1)
    q = hand_symmetric(z, 8, axis=-1)
    assert s["sqnr"][-1] == (8, pytest.approx(10 * np.log10(np.sum(z**2) / np.sum((q - z) ** 2))))
    assert [b for b, _ in s["sqnr"]] == list(range(2, 9))
    # From 4 bits on, the uniform-noise model holds better with every bit: within 0.75 dB of
    # 20 log10 2, and within 0.2 dB from 7 to 8 bits.
    for gain in s["db_per_bit"][2:]:
        assert abs(gain - 20 * np.log10(2)) < 0.75
    assert abs(s["db_per_bit"][-1] - 20 * np.log10(2)) < 0.2
    assert_labelled(sqnr.figure)


def test_sqnr_explorer_heavy_tails_cost_sqnr_at_every_bit_width(sqnr):
    sqnr.controls["granularity"].value = "tensor"
    sqnr.controls["distribution"].value = "Gaussian"
    gauss = [s for _, s in sqnr.state["sqnr"]]
    sqnr.controls["distribution"].value = "Student-t"
    sqnr.controls["nu"].value = 3.0
    heavy = [s for _, s in sqnr.state["sqnr"]]
    # A max-based scale spreads the grid over the far tail: coarser steps where the data are.
    assert all(h < g for h, g in zip(heavy, gauss))


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------
def test_pareto_front_by_hand():
    pts = [(4, 10), (4.25, 12), (4.5, 9), (6, 9), (8, 2), (8, 3), (4, 10)]
    # (4.25, 12) is beaten by (4, 10); (6, 9) by (4.5, 9); (8, 3) by (8, 2); the second (4, 10)
    # ties with the first, which is kept.
    assert W.pareto_front(pts) == [0, 2, 4]
    assert W.pareto_front([(5, 1)]) == [0]


@pytest.mark.parametrize("bad", [[], [(1, 2, 3)], [(1, np.nan)], [1, 2]])
def test_pareto_front_refuses_bad_points(bad):
    with pytest.raises(ValueError, match="pairs"):
        W.pareto_front(bad)


def test_db_per_bit_intercept_by_hand():
    # Points exactly on a + 6.0206 b with a = 1.5; the 2- and 3-bit points are ignored.
    pts = [(2, 0.0), (3, 100.0)] + [(b, 1.5 + 20 * np.log10(2) * b) for b in (4, 5, 6)]
    assert W.db_per_bit_intercept(pts) == pytest.approx(1.5)
    with pytest.raises(ValueError, match="bits >= 4"):
        W.db_per_bit_intercept([(2, 1.0), (3, 7.0)])


# ---------------------------------------------------------------------------------------------
# Static plots of the demos' results
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def results():
    return {"1": L.demo1_affine_and_integer_matmul(), "2": L.demo2_clipping(n=1 << 14),
            "3": L.demo3_granularity(), "4": L.demo4_block_formats(n=1 << 14),
            "5": L.demo5_error_propagation()}


PLOTS = {"1": W.plot_affine, "2": W.plot_clipping, "3": W.plot_granularity,
         "4": W.plot_block_formats, "5": W.plot_propagation}


@pytest.mark.parametrize("demo", sorted(PLOTS))
def test_plots_are_labelled_and_refuse_other_results(results, demo):
    assert_labelled(PLOTS[demo](results[demo]))
    other = results["1" if demo != "1" else "2"]
    with pytest.raises(TypeError, match="returns"):
        PLOTS[demo](other)


def test_plot_clipping_marks_each_optimum(results):
    r = results["2"]
    stars = [ln for ln in PLOTS["2"](r).axes[0].lines if ln.get_marker() == "*"]
    assert [(ln.get_xdata()[0], ln.get_ydata()[0]) for ln in stars] == [
        (c, e * 100) for c, e, _, _ in r.best.values()]
    for (c, e, _, _), errs in zip(r.best.values(), r.errors.values()):
        assert e == min(errs)


def test_plot_block_formats_draws_the_undominated_formats_as_the_front(results):
    r = results["4"]
    points = [(b, e) for _, b, e, _ in r.formats]
    expected = sorted(p for i, p in enumerate(points) if not dominated(p, points[:i] + points[i + 1:]))
    front = next(ln for ln in PLOTS["4"](r).axes[0].lines if ln.get_linestyle() == "--")
    np.testing.assert_allclose(np.column_stack([front.get_xdata(), front.get_ydata() / 100]),
                               np.array(expected), rtol=1e-12)
    labels = [lab for lab, *_ in r.formats]
    # NVFP4 is on the front, INT4 in groups of 32 is not (lecture 05, demo 4).
    assert points[labels.index("NVFP4 (E2M1, 16 per E4M3 scale + FP32)")] in expected
    assert points[labels.index("INT4, groups of 32 (FP16 scale)")] not in expected


def test_plot_propagation_reference_line_has_slope_6_02_db(results):
    ax = PLOTS["5"](results["5"]).axes[1]
    ref = next(ln for ln in ax.lines if ln.get_linestyle() == "--")
    x, y = ref.get_xdata(), ref.get_ydata()
    np.testing.assert_allclose(np.diff(y) / np.diff(x), 20 * np.log10(2), rtol=1e-12)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("builder", [W.clip_explorer, W.block_explorer, W.sqnr_explorer])
@pytest.mark.parametrize("n", [0, 1000, (1 << 16) + 1, 2.0**16, True])
def test_explorers_refuse_a_bad_sample_size(builder, n):
    with pytest.raises(ValueError, match="multiple of 1024"):
        builder(n=n)


@pytest.mark.parametrize("rows", [0, -1, 2.5, True])
def test_granularity_explorer_refuses_bad_rows(rows):
    with pytest.raises(ValueError, match="rows"):
        W.granularity_explorer(rows=rows)


@pytest.mark.parametrize("kwargs, match", [({"name": "Cauchy"}, "name"),
                                           ({"name": "Gaussian", "n": 0}, "n "),
                                           ({"name": "Student-t", "nu": 0.0}, "nu"),
                                           ({"name": "Student-t", "nu": "5"}, "nu")])
def test_sample_distribution_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        L.sample_distribution(**kwargs)


def test_clip_point_refuses_a_clip_outside_0_1():
    with pytest.raises(ValueError, match="clip"):
        L.clip_point(np.ones(8), 4, 1.5)


# ---------------------------------------------------------------------------------------------
# The menus come from the lecture: a format, scale kind or granularity added there reaches them
# ---------------------------------------------------------------------------------------------
def test_block_elements_are_the_ocp_mx_element_formats():
    # OCP MX v1.0, section 5: MXFP8 (E5M2, E4M3), MXFP6 (E3M2, E2M3), MXFP4 (E2M1)
    assert {f.name for f in L.BLOCK_ELEMENTS} == {"E5M2", "E4M3", "E3M2", "E2M3", "E2M1"}
    assert {elem.name for _, elem in L.MX_RULE_FORMATS} <= {f.name for f in L.BLOCK_ELEMENTS}


def test_block_explorer_menus_are_the_lectures(block):
    assert [v for _, v in block.controls["element"].options] == [f.name for f in L.BLOCK_ELEMENTS]
    assert list(block.controls["scale"].options) == [(label, kind) for kind, label in L.SCALE_KINDS]
    assert [v for _, v in block.controls["rule"].options] == list(numfmt.SCALE_RULES)


def test_granularity_explorer_menus_are_the_lectures(gran):
    kinds = [gran for _, gran, _ in L.GRANULARITY]
    assert [v for _, v in gran.controls["granularity"].options] == list(dict.fromkeys(kinds))
    assert {g for _, _, g in L.GRANULARITY if g} <= set(gran.controls["group"].options)
    gran.controls["granularity"].value = "channel"
    assert gran.state["labels"][:2] == [label for label, _, g in L.GRANULARITY if g is None]


def test_a_scale_kind_added_to_the_lecture_reaches_the_block_explorer(monkeypatch):
    """The block explorer lists the lecture's scale kinds, not a list of its own."""
    extra = ("e8m0_up", "E8M0 scale, rounded up")
    monkeypatch.setattr(L, "SCALE_KINDS", L.SCALE_KINDS + (extra,))
    try:
        fresh = importlib.reload(W)
        assert fresh.SCALES[-1] == (extra[1], extra[0])
    finally:
        monkeypatch.undo()
        importlib.reload(W)


def test_no_control_updates_while_it_is_dragged(clip, gran, block):
    for e in (clip, gran, block):
        assert not any(getattr(w, "continuous_update", False) for w in e.controls.values())


def test_affine_figure_labels_overprint_nothing():
    """Demo 1's bars: each legend clear of every bar, each error label inside its axes and
    clear of the legend, measured on the drawn figure's boxes (pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.patches import Rectangle
    fig = W.plot_affine(L.demo1_affine_and_integer_matmul())
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        bars = [p.get_window_extent(renderer) for p in ax.patches if isinstance(p, Rectangle)]
        assert bars and not any(legend.overlaps(b) for b in bars), ax.get_title()
        frame = ax.get_window_extent(renderer)
        for t in ax.texts:
            box = t.get_window_extent(renderer)
            assert frame.y0 <= box.y0 and box.y1 < frame.y1 - 1, (ax.get_title(), t.get_text())
            assert not box.overlaps(legend), t.get_text()
