"""Every notebook as a reader meets it: JupyterLab in a real Chromium, driven by Playwright.

nbval checks what a notebook prints; it cannot see what the page shows. This test starts
JupyterLab on a copy of the notebooks, opens each one in Debian's Chromium, runs all cells, and
asserts that nothing a reader would see is broken (cells that nbval skips are left out here too):

* no "Error displaying widget" (a widget whose frontend failed to load),
* no JavaScript console error and no uncaught page error,
* every cell that stores a figure shows one, and every explorer draws one,
* moving one slider of each explorer (or its first menu, where it has no slider) redraws it.

The Chinese notebooks (``notebooks/zh/``) run this way, and their Chinese text must be drawn
with glyphs: for the notebook's title and its explorers' labels, every character is in a font
Chromium reports using for that text (DevTools' ``CSS.getPlatformFontsForNode``, the font files
read by fontTools), so an empty box would fail. A reader's system has a Chinese font; this
machine may not, so Chromium is given the Noto Sans SC that the notebooks' extra installs
(``pylopdf-fonts-zh-cn``) through a fontconfig file of the test's own. An English notebook with
a Chinese edition (the same code, widgets and figures) is opened, not run: its stored figures
must show and the page log no error. One without runs as above. Notebook 08, whose live cells
need the real model, is opened in both languages.

It needs the ``playwright`` Python package and a Chromium binary (``apt-get install chromium``;
Playwright's own browser download is not used, it points at the installed binary). Without
either it skips and says which is missing. Set ``CHROMIUM`` to use another binary.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb")) + sorted((NOTEBOOK_DIR / "zh").glob("*.ipynb"))
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")

playwright_sync = pytest.importorskip("playwright.sync_api", reason="needs the playwright package "
                                     "(pip install playwright) to drive a real browser")
pytestmark = [
    pytest.mark.long,
    pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium (apt-get install chromium)"),
]

# The page loads nothing from outside localhost: JupyterLab's news and update checks would
# otherwise try the network and log errors. Windowing off keeps every cell in the DOM.
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings":
        {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
}
# Chromium as root needs --no-sandbox; the rest keep it from reaching for Google's services,
# which this machine's closed network refuses.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: The line an Explorer stores beside its widget view ends so, in English or in Chinese.
EXPLORER_TEXTS = (": interactive, needs a running Jupyter kernel]",
                  "：可交互，需要运行中的 Jupyter 内核]")
RUN_TIMEOUT_MS = 240_000     # all cells of one notebook; the slowest (06) takes ~15 s alone
REDRAW_TIMEOUT_MS = 60_000   # one explorer redraw after a slider step


def _attachment_request(text: str, path: Path) -> bool:
    """JupyterLab first asks the browser for a markdown image's ``attachment:NAME`` URL, which
    fails (an unknown scheme), then draws the image from the cell's attachments. Notebooks 08
    and 09 keep their stored figures as attachments, so that console message is expected
    there and nowhere else."""
    return "ERR_UNKNOWN_URL_SCHEME" in text and '"attachments"' in path.read_text()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runnable(path: Path) -> dict:
    """The notebook without the cells nbval skips (tag ``nbval-skip``: real-model runs of
    minutes, left to the lecture's own tests); the browser runs what nbval runs."""
    nb = json.loads(path.read_text())
    nb["cells"] = [c for c in nb["cells"]
                   if not (c["cell_type"] == "code" and (
                       "NBVAL_SKIP" in "".join(c["source"])
                       or "nbval-skip" in c.get("metadata", {}).get("tags", [])))]
    # Answer cells are stored collapsed; a collapsed cell shows no prompt, and the run is
    # followed through the prompts, so the browser run shows them.
    for c in nb["cells"]:
        c.get("metadata", {}).get("jupyter", {}).pop("source_hidden", None)
    return nb


def _stored_outputs(path: Path) -> list[dict]:
    """For each code cell, in order: does it store a figure, a widget view, an explorer."""
    cells = _runnable(path)["cells"]
    rows = []
    for cell in cells:
        if cell["cell_type"] != "code":
            continue
        data = [out.get("data", {}) for out in cell.get("outputs", [])]
        kinds = {k for d in data for k in d}
        # lectures.widgets.Explorer stores this plain-text line beside its widget view.
        explorer = any(end in "".join(d.get("text/plain", "")) for d in data
                       for end in EXPLORER_TEXTS)
        rows.append({"figure": "image/png" in kinds, "explorer": explorer,
                     "widget": "application/vnd.jupyter.widget-view+json" in kinds})
    return rows


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A JupyterLab server on a copy of the notebooks (running cells must not touch the repo)."""
    home = tmp_path_factory.mktemp("lab")
    work = home / "notebooks"
    work.mkdir()
    for nb in NOTEBOOKS:
        (work / _rel(nb)).parent.mkdir(parents=True, exist_ok=True)
        (work / _rel(nb)).write_text(json.dumps(_runnable(nb)))
    settings = home / "settings"
    for name, value in LAB_SETTINGS.items():
        f = settings / name
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))
    port, token = _free_port(), "lowprec-browser-test"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(home / "ws"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={work}",
           "--ServerApp.open_browser=False"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")  # JupyterLab refuses to run as root without it
    log = open(home / "lab.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=work)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail("JupyterLab did not start:\n" + (home / "lab.log").read_text()[-3000:])
            time.sleep(0.5)
    yield {"base": base, "token": token}
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
    log.close()


def _rel(path: Path) -> str:
    """The notebook's path under notebooks/ (``03_scaling.ipynb``, ``zh/03_scaling.ipynb``)."""
    return path.relative_to(NOTEBOOK_DIR).as_posix()


def _chinese(path: Path) -> bool:
    return path.parent.name == "zh"


#: Notebooks only opened, in both languages: 08's live cells score the real model (its reduced
#: run, minutes of CPU), which nbval runs in both languages and tests/test_widgets08.py drives;
#: the page shows nothing there that the other notebooks' figures and explorers do not.
OPENED_ONLY = {"08_real_model.ipynb"}


def _runs_all(path: Path) -> bool:
    """Run All runs in the Chinese edition of a notebook, which has the English code, widgets
    and figures and needs Chinese glyphs on top; the English notebook beside it is opened, and
    its stored figures must show. A notebook without a Chinese edition runs in English."""
    if path.name in OPENED_ONLY:
        return False
    return _chinese(path) or not (NOTEBOOK_DIR / "zh" / path.name).is_file()


@pytest.fixture(scope="module")
def fonts_env(tmp_path_factory) -> dict:
    """The environment that gives Chromium (and fc-match) the system's fonts plus Noto Sans SC."""
    from lectures.widgets.fonts import cjk_font_path
    home = tmp_path_factory.mktemp("fonts")
    conf = home / "fonts.conf"
    conf.write_text('<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "fonts.dtd">\n<fontconfig>'
                    '<include ignore_missing="yes">/etc/fonts/fonts.conf</include>'
                    f"<dir>{Path(cjk_font_path()).parent}</dir><cachedir>{home / 'cache'}</cachedir>"
                    "</fontconfig>\n")
    return dict(os.environ, FONTCONFIG_FILE=str(conf))


@pytest.fixture(scope="module")
def browser(fonts_env):
    with playwright_sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                              env=fonts_env)
        yield b
        b.close()


def _is_cjk(ch: str) -> bool:
    return "\u3000" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef"


def _font_file(postscript_name: str, env: dict) -> str:
    return subprocess.run(["fc-match", "-f", "%{file}", f":postscriptname={postscript_name}"],
                          env=env, capture_output=True, text=True, check=True).stdout


def _glyphless(page, selector: str, env: dict) -> tuple[str, list[str]]:
    """(text, characters without a glyph) of the first element matching `selector`: the
    characters of its text that no font Chromium used to draw it maps (empty boxes)."""
    from fontTools.ttLib import TTFont
    client = page.context.new_cdp_session(page)
    try:
        client.send("DOM.enable")
        client.send("CSS.enable")
        root = client.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
        node = client.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        assert node, f"nothing matches {selector!r}"
        fonts = client.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    finally:
        client.detach()
    text = page.locator(selector).first.inner_text()
    mapped = set()
    for f in fonts:
        with TTFont(_font_file(f["postScriptName"], env), fontNumber=0, lazy=True) as font:
            mapped |= set(font.getBestCmap())
    return text, sorted({ch for ch in text if not ch.isspace() and ord(ch) not in mapped})


TITLE = ".jp-MarkdownCell .jp-RenderedMarkdown h1"
WIDGET_LABEL = ".jp-OutputArea-output .widget-label:not(:empty)"


def _assert_drawn_in_chinese(page, selectors: list[str], env: dict) -> None:
    """The first element matching each selector shows Chinese text, every character with a glyph."""
    for selector in selectors:
        text, boxes = _glyphless(page, selector, env)
        assert sum(map(_is_cjk, text)) >= 2, (selector, text)
        assert boxes == [], f"{selector} {text!r}: no glyph for {boxes}"


def _cell_image(cell) -> str | None:
    """The src of the first figure a cell shows (inline plot or inside a widget)."""
    img = cell.locator(".jp-OutputArea-output img")
    return img.first.get_attribute("src") if img.count() else None


def _nudge(cell) -> str:
    """Move the cell's first slider one step (or pick another entry of its first menu)."""
    handle = cell.locator(".widget-slider .noUi-handle")
    if handle.count():
        handle.first.focus()
        handle.first.press("ArrowRight")
        return "slider"
    select = cell.locator(".widget-dropdown select")
    if select.count():
        options = select.first.locator("option")
        current = select.first.input_value()
        values = [options.nth(i).get_attribute("value") for i in range(options.count())]
        select.first.select_option(next(v for v in values if v != current))
        return "menu"
    return "none"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[_rel(p).removesuffix(".ipynb") for p in NOTEBOOKS])
def test_notebook_runs_cleanly_in_a_browser(lab, browser, fonts_env, path):
    expected = _stored_outputs(path)
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console: {m.text}")
            if m.type == "error" and not _attachment_request(m.text, path) else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    try:
        # A workspace of its own, reset: the page shows this notebook alone.
        workspace = path.stem + ("-zh" if _chinese(path) else "")
        page.goto(f"{lab['base']}/lab/workspaces/{workspace}/tree/{_rel(path)}"
                  f"?reset&token={lab['token']}")
        cells = page.locator(".jp-Notebook .jp-Cell.jp-CodeCell")
        # Every code cell of the file is on the page (JupyterLab renders them in batches).
        page.wait_for_function(
            "n => document.querySelectorAll('.jp-Notebook .jp-Cell.jp-CodeCell').length === n",
            arg=len(expected), timeout=60_000)
        _wait_for_idle_kernel(lab, _rel(path))
        if not _runs_all(path):
            for i, want in enumerate(expected):
                if want["figure"]:
                    cells.nth(i).locator(".jp-OutputArea-output img").first.wait_for(
                        state="attached", timeout=REDRAW_TIMEOUT_MS)
            assert not errors, "\n".join(errors)
            if _chinese(path):
                _assert_drawn_in_chinese(page, [TITLE], fonts_env)
            return
        _run_all_cells(page)
        page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']",
                               timeout=RUN_TIMEOUT_MS)
        _wait_for_idle_kernel(lab, _rel(path))
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']"
                            ).filter(has_text="Traceback").count() == 0, "no cell raised"
        assert page.get_by_text("Error displaying widget").count() == 0

        nudged = 0
        for i, want in enumerate(expected):
            cell = cells.nth(i)
            if want["figure"] or want["explorer"]:
                cell.locator(".jp-OutputArea-output img").first.wait_for(
                    state="attached", timeout=REDRAW_TIMEOUT_MS)
            if not want["explorer"]:
                continue
            before = _cell_image(cell)
            assert _nudge(cell) != "none", f"code cell {i}: an explorer without slider or menu"
            page.wait_for_function(
                """([i, before]) => {
                     const c = document.querySelectorAll('.jp-Notebook .jp-Cell.jp-CodeCell')[i];
                     const img = c && c.querySelector('.jp-OutputArea-output img');
                     return img && img.getAttribute('src') !== before; }""",
                arg=[i, before], timeout=REDRAW_TIMEOUT_MS)
            nudged += 1
        explorers = sum(w["explorer"] for w in expected)
        assert nudged == explorers, f"{nudged} of {explorers} explorers redrew after a change"
        assert page.get_by_text("Error displaying widget").count() == 0
        assert not errors, "\n".join(errors)
        if _chinese(path):
            _assert_drawn_in_chinese(page, [TITLE, WIDGET_LABEL] if explorers else [TITLE],
                                     fonts_env)
    finally:
        page.close()
        _shut_down_kernels(lab)


def _sessions(lab) -> list[dict]:
    req = urllib.request.Request(f"{lab['base']}/api/sessions",
                                 headers={"Authorization": f"token {lab['token']}"})
    return json.load(urllib.request.urlopen(req, timeout=10))


def _wait_for_idle_kernel(lab, name: str) -> None:
    """Until the server reports this notebook's kernel (path `name` under notebooks/) started
    and idle."""
    deadline = time.monotonic() + RUN_TIMEOUT_MS / 1000
    while time.monotonic() < deadline:
        states = [s["kernel"]["execution_state"] for s in _sessions(lab)
                  if s.get("path", "") == name and s.get("kernel")]
        if states and all(st == "idle" for st in states):
            return
        time.sleep(0.5)
    pytest.fail(f"the kernel of {name} never became idle")


def _run_all_cells(page) -> None:
    """Run > Run All Cells, then wait until every code cell shows an execution count.

    On a busy machine the first click can land before the kernel's connection is complete and
    run nothing; a second click is made if no cell has started within 30 s.
    """
    started = """() => [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]
                        .some(e => /\\[(\\*|\\d+)\\]/.test(e.textContent))"""
    for attempt in range(2):
        page.locator(".lm-MenuBar-item", has_text="Run").first.click()
        page.locator("li.lm-Menu-item[data-command='runmenu:run-all']").click()
        try:
            page.wait_for_function(started, timeout=30_000)
            break
        except playwright_sync.TimeoutError:
            if attempt:
                raise
    page.wait_for_function(
        """() => { const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')];
                   return p.length > 0 && p.every(e => /\\[\\d+\\]/.test(e.textContent)); }""",
        timeout=RUN_TIMEOUT_MS)


def _shut_down_kernels(lab) -> None:
    """Stop every kernel the test started, so the next notebook has the CPU to itself."""
    auth = {"Authorization": f"token {lab['token']}"}
    for s in _sessions(lab):
        urllib.request.urlopen(urllib.request.Request(
            f"{lab['base']}/api/sessions/{s['id']}", method="DELETE", headers=auth), timeout=30)
