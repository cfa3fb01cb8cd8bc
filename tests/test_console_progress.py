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


def test_lines_estimate_what_is_left_at_the_pace_so_far():
    out = io.StringIO()
    bar = LineProgress(total=4, desc="x", file=out)
    bar._start -= 10.0                      # 10 s for the first of 4 steps: about 30 s left
    bar.update(1)
    bar.update(3)
    first, last = out.getvalue().splitlines()
    assert first.startswith("x: 1/4 (10 s, about 3") and first.endswith(" s left)")
    assert int(first.split("about ")[1].split(" s")[0]) in (30, 31)
    assert last.startswith("x: 4/4 (") and "left" not in last
