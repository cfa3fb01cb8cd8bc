"""A lecture's stored English output re-rendered in Chinese through the lecture's catalog.

Notebook 09 keeps one full run of lecture 09's real-model demos as the text the lecture
printed (a markdown cell: ```text blocks and a figure). The run's results were not saved, and
running it again costs many CPU-minutes; yet every sentence it printed is one of the lecture's
messages with its fields filled in. :func:`render_demo` reads a demo's printed text back:

- each sentence is matched against the English templates of the lecture's catalog (a field
  with a numeric format spec matches a number, one without it any text, a paired interval
  ``-17.3% [-23.7%, -10.3%]`` first); the English rebuilt from the fields must equal the
  sentence read, and the Chinese template is filled with the same field texts, each translated
  where it is itself a message, a row label (``L.label``) or a list of them;
- tables are laid out again by :func:`console.format_table` with translated headers and row
  labels, observations by :func:`console.format_observations`, headers by
  :func:`console.format_header`, all in Chinese.

The result is what the lecture prints in Chinese for the same numbers (the tests check it
byte for byte on demo 1, which is cheap to run in both languages). ::

    python -m lectures.i18n_stored 09    # notebook09.po's stored block and notebooks/zh/09's
                                         # figure, from the English notebook
"""

from __future__ import annotations

import base64
import importlib
import io
import re
import sys

from console import format_header, format_observations, format_table
from console.i18n import language

__all__ = ["Renderer", "render_demo", "render_stored", "stored_block", "write_notebook09"]

FIELD = re.compile(r"\{(\w+)(?::([^{}]*))?\}")
NUMBER = r"(?:[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?%?)"
INTERVAL = r"(?:[-+]\d+\.\d%\s\[[-+]\d+\.\d%,\s[-+]\d+\.\d%\])"   # PairedRatio.percent()
STORED_HEAD = "**Stored** (a full run of the script)"
STORED_HEAD_ZH = "**保存的结果**（脚本的一次完整运行）"


def _literal(text: str) -> str:
    if not text:
        return ""
    if not text.strip():
        return r"\s+"
    return r"\s+".join(re.escape(p) for p in re.split(r"\s+", text))


def _pattern(template: str) -> tuple:
    """(compiled regex of an English template, its field names in order)."""
    parts, names, pos = [], [], 0
    for m in FIELD.finditer(template):
        parts.append(_literal(template[pos:m.start()]))
        numeric = re.search(r"[fedg%,]$", m.group(2) or "")
        group = f"f{len(names)}"
        parts.append(f"(?P<{group}>{NUMBER})" if numeric else f"(?P<{group}>{INTERVAL}|.+?)")
        names.append(m.group(1))
        pos = m.end()
    parts.append(_literal(template[pos:]))
    return re.compile("".join(parts), re.S), names


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _cells(lines: list[str]) -> list[list[str]]:
    """A printed table's cells, the columns cut where its rule line has a ``|`` (a cell may
    hold one, as in ``max|x|``)."""
    bars = [k for k, ch in enumerate(lines[1]) if ch == "|"]
    return [[line[a + 1:b].strip() for a, b in zip(bars, bars[1:])] for line in lines]


class Renderer:
    """The Chinese of one lecture's printed English, by its catalog (`lecture`: "09")."""

    def __init__(self, lecture: str, lang: str = "zh_CN"):
        from lectures.i18n_catalogs import read_catalog
        self.module = importlib.import_module(
            next(f"lectures.{p.stem}" for p in _lecture_files(lecture)))
        self.catalog = {m.id: m.string for m in read_catalog(f"lecture{lecture}", lang)
                        if isinstance(m.id, str) and m.id and m.string}
        self.templates = sorted(
            ((len(FIELD.sub("", mid)), mid, text, *_pattern(mid))
             for mid, text in self.catalog.items() if len(mid) > 3),
            key=lambda t: -t[0])

    def label(self, text: str) -> str:
        with language("zh"):
            return self.module.label(text) if hasattr(self.module, "label") else text

    def value(self, text: str) -> str:
        """A field's text in Chinese: a number or interval as it is, else a message, a row
        label, sentences joined by "; ", a sentence, or names joined by ", "."""
        if re.fullmatch(NUMBER, text) or re.fullmatch(INTERVAL, text):
            return text
        if text in self.catalog:
            return self.catalog[text]
        if self.label(text) != text:
            return self.label(text)
        if "; " in text:
            parts = [self.sentence(p, strict=False) for p in text.split("; ")]
            if all(p is not None for p in parts):
                return self.catalog.get("; ", "; ").join(parts)
        done = self.sentence(text, strict=False)
        if done is not None:
            return done
        names = text.split(", ")
        if len(names) > 1 and any(n in self.catalog for n in names):
            return self.catalog.get(", ", ", ").join(self.catalog.get(n, n) for n in names)
        return text

    def sentence(self, text: str, strict: bool = True) -> str | None:
        """The Chinese of one printed sentence (its whitespace as printed, wrapped or not).

        Raises
        ------
        KeyError
            If `strict` and no template of the catalog matches it.
        """
        flat = _norm(text)
        if flat in self.catalog:
            return self.catalog[flat]
        for _size, english, chinese, pattern, names in self.templates:
            m = pattern.fullmatch(flat)
            if m is None:
                continue
            got = {}
            for i, name in enumerate(names):
                got.setdefault(name, m.group(f"f{i}"))
            rebuilt = FIELD.sub(lambda f: got[f.group(1)], english)
            if _norm(rebuilt) != flat:
                continue
            values = {name: self.value(v) for name, v in got.items()}
            return FIELD.sub(lambda f: values.get(f.group(1), f.group(0)), chinese)
        if strict:
            raise KeyError(f"no message of the catalog prints {flat[:100]!r}")
        return None

    def cell(self, text: str) -> str:
        if re.fullmatch(NUMBER, text) or text in ("", "—"):
            return text
        return self.value(text)

    def table(self, lines: list[str]) -> str:
        rows = _cells(lines)
        with language("zh"):
            return format_table([self.cell(h) for h in rows[0]],
                                [[self.cell(c) for c in row] for row in rows[2:]])


def _lecture_files(lecture: str):
    from lectures.i18n import ROOT
    return sorted((ROOT / "lectures").glob(f"{lecture}_*.py"))


def render_demo(text: str, renderer: Renderer) -> str:
    """One demo's printed English (header, paragraphs, tables, observations) in Chinese."""
    lines = text.strip("\n").split("\n")
    if len(lines) < 3 or set(lines[0]) != {"="} or set(lines[2]) != {"="}:
        raise ValueError("text must start with a header (a rule, the title, a rule)")
    with language("zh"):
        out = [format_header(renderer.sentence(lines[1])).lstrip("\n")]
    para: list[str] = []

    def flush():
        if para:
            out.append(renderer.sentence("\n".join(para)))
            para.clear()
    i = 3
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            flush()
            j = i
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            out.append(renderer.table(lines[i:j]))
            i = j
        elif line == "":
            flush()
            out.append("")
            i += 1
        elif line == "What to notice:":
            flush()
            items: list[list[str]] = []
            for rest in lines[i + 1:]:
                m = re.match(r"^\s*\d+\. (.*)$", rest)
                if m:
                    items.append([m.group(1)])
                else:
                    items[-1].append(rest.strip())
            with language("zh"):
                out.append(format_observations([renderer.sentence(" ".join(it))
                                                for it in items]))
            break
        else:
            para.append(line)
            i += 1
    flush()
    return "\n".join(out)


def render_stored(stored: str, renderer: Renderer) -> str:
    """A stored markdown block (its head line, ```text blocks, then an image) in Chinese."""
    head, rest = stored.split("\n", 1)
    if head != STORED_HEAD:
        raise ValueError(f"stored block must start with {STORED_HEAD!r}, got {head!r}")
    blocks = re.findall(r"```text\n(.*?)\n```", rest, re.S)
    tail = re.sub(r"!\[([^\]]*)\]",                  # an image's alt text, translated
                  lambda m: f"![{renderer.catalog.get(m.group(1)) or m.group(1)}]",
                  rest[rest.rindex("```") + 3:])
    return (STORED_HEAD_ZH + "\n"
            + "\n".join(f"```text\n{render_demo(b, renderer)}\n```" for b in blocks) + tail)


def stored_block(nb) -> str:
    """The stored-run markdown cell's text of a notebook."""
    return next(c.source for c in nb.cells
                if c.cell_type == "markdown" and c.source.startswith(STORED_HEAD))


def figure09(stored: str) -> bytes:
    """Notebook 09's stored figure drawn in Chinese from its stored demo 6 table (the printed
    rows, as ``W.plot_perplexity`` takes them), as the inline backend saves it."""
    import matplotlib

    from lectures.widgets import lecture09 as W
    from lectures.widgets.fonts import use_language_fonts
    last = re.findall(r"```text\n(.*?)\n```", stored, re.S)[-1].split("\n")
    rows = _cells([line for line in last if line.startswith("|")])[2:]
    buf = io.BytesIO()
    with matplotlib.rc_context(), language("zh"):
        use_language_fonts()
        W.plot_perplexity(rows).savefig(buf, format="png", dpi=100, bbox_inches="tight")
    return buf.getvalue()


def write_notebook09() -> None:
    """notebook09.po's stored block and notebooks/zh/09's stored figure, from the English
    notebook; then regenerate the Chinese notebook with ``python -m lectures.i18n_notebooks 09``."""
    import nbformat
    from babel.messages.pofile import read_po, write_po

    from lectures import i18n_notebooks as zh
    from lectures.i18n import domain, update_domain
    english = nbformat.read(zh.english_path("09"), as_version=4)
    stored = stored_block(english)
    path = domain("notebook09").catalog_path("zh_CN")
    with open(path, "rb") as f:
        catalog = read_po(f)
    catalog[stored].string = render_stored(stored, Renderer("09"))
    with open(path, "wb") as f:
        write_po(f, catalog, width=100, no_location=True, omit_header=False,
                 ignore_obsolete=True, sort_output=False)
    update_domain("notebook09", "zh_CN")       # the catalog's own layout and flags
    png = base64.b64encode(figure09(stored)).decode("ascii")
    nb = zh.build("09", english=english)
    for cell in nb.cells:
        if cell.cell_type == "markdown" and "figure1.png" in cell.get("attachments", {}):
            cell.attachments["figure1.png"]["image/png"] = png
    if zh.zh_path("09").is_file():       # keep the executed outputs: set the figure only
        old = nbformat.read(zh.zh_path("09"), as_version=4)
        for cell in old.cells:
            if cell.cell_type == "markdown" and "figure1.png" in cell.get("attachments", {}):
                cell.attachments["figure1.png"]["image/png"] = png
        nb = old
    nbformat.write(nb, zh.zh_path("09"))


def main(argv=None) -> int:
    """``python -m lectures.i18n_stored 09``."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["09"]:
        print("usage: python -m lectures.i18n_stored 09", file=sys.stderr)
        return 2
    write_notebook09()
    return 0


if __name__ == "__main__":
    sys.exit(main())
