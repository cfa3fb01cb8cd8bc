"""console.progress: a tqdm bar on a terminal, one plain line per step otherwise."""

import io

from console.progress import LineProgress, progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_redirected_stream_gets_one_line_per_step_and_no_carriage_returns():
    out = io.StringIO()
    seen = list(progress(range(3), "GPTQ", file=out))
    assert seen == [0, 1, 2]
    lines = out.getvalue().splitlines()
    assert [line.split(" (")[0] for line in lines] == ["GPTQ: 1/3", "GPTQ: 2/3", "GPTQ: 3/3"]
    assert "\r" not in out.getvalue()


def test_manual_updates_and_context_manager_without_total():
    out = io.StringIO()
    with progress(desc="ppl", file=out) as bar:
        assert isinstance(bar, LineProgress)
        bar.update(1)
        bar.update(2)
    assert [line.split(" (")[0] for line in out.getvalue().splitlines()] == ["ppl: 1", "ppl: 3"]


def test_terminal_gets_a_tqdm_bar():
    tqdm = __import__("pytest").importorskip("tqdm")
    out = _Tty()
    bar = progress(range(2), "x", file=out)
    assert isinstance(bar, tqdm.tqdm)
    assert list(bar) == [0, 1]
    assert "\r" in out.getvalue()


def test_closed_or_plain_objects_are_not_terminals():
    out = io.StringIO()
    out.close()
    assert isinstance(progress(range(1), file=out), LineProgress)


def test_each_line_estimates_what_is_left_from_the_mean_step(monkeypatch):
    """Steps of 4 s, 6 s, then 2 s on a fake clock: after step n of 4 the estimate is the mean
    step so far times the steps left (10 s / 2 * 2 = 10 s after step 2); the last line and a
    bar without a total give the elapsed time only."""
    import console.progress as P
    clock = iter([100.0, 104.0, 110.0, 112.0, 200.0, 203.0, 210.0])
    monkeypatch.setattr(P.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    with P.progress(total=4, desc="Demo 2", file=out) as bar:
        for _ in range(3):
            bar.update(1)
        bar.update(1)
    with P.progress(desc="ppl", file=out) as bar:
        bar.update(1)
    assert out.getvalue().splitlines() == [
        "Demo 2: 1/4 (4 s, about 12 s left)",
        "Demo 2: 2/4 (10 s, about 10 s left)",
        "Demo 2: 3/4 (12 s, about 4 s left)",
        "Demo 2: 4/4 (100 s)",
        "ppl: 1 (7 s)",
    ]


def test_time_left_is_the_mean_step_times_the_steps_left():
    """12 s for 3 of 30 steps: 4 s a step, 27 steps left, 108 s; none once all are done, none
    without a total."""
    from console.progress import with_time_left
    assert with_time_left("GPTQ: 3/30", 3, 30, 12.0) == "GPTQ: 3/30 (12 s, about 108 s left)"
    assert with_time_left("GPTQ: 30/30", 30, 30, 120.4) == "GPTQ: 30/30 (120 s)"
    assert with_time_left("ppl: 5", 5, None, 7.0) == "ppl: 5 (7 s)"


def test_time_left_in_chinese():
    from console.i18n import language
    from console.progress import with_time_left
    with language("zh"):
        assert with_time_left("第 3/30 次运行", 3, 30, 12.0) == "第 3/30 次运行（已用 12 秒，约剩 108 秒）"
        assert with_time_left("第 30/30 次运行", 30, 30, 120.0) == "第 30/30 次运行（120 秒）"


def test_notebook_streams_are_told_from_logs():
    from console.progress import is_notebook_stream
    OutStream = type("OutStream", (io.StringIO,), {"__module__": "ipykernel.iostream"})
    assert is_notebook_stream(OutStream())
    assert not is_notebook_stream(io.StringIO()) and not is_notebook_stream(_Tty())


def test_chinese_lines_take_a_full_width_colon(monkeypatch):
    """评估：3/28（…）, not 评估: 3/28 (the Chinese catalogs' punctuation)."""
    import console.progress as P
    from console.i18n import language
    clock = iter([0.0, 12.0])
    monkeypatch.setattr(P.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    with language("zh"):
        bar = P.LineProgress(total=4, desc="评估", file=out)
        bar.update(1)
    assert out.getvalue() == "评估：1/4（已用 12 秒，约剩 36 秒）\n"
