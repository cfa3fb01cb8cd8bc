"""The translation catalogs' tooling: extract the marked messages, merge them into the
``.po`` files, and check the catalogs (the run-time side is :mod:`lectures.i18n`).

::

    python -m lectures.i18n update        # extract every domain, merge into its .po files
    python -m lectures.i18n check         # what tests/test_i18n.py checks, as a report

(``python -m lectures.i18n_catalogs`` is the same command.) A notebook's markdown is split into
paragraphs here (:func:`markdown_messages`), one message each.
"""

from __future__ import annotations

import re
import string
import sys
from pathlib import Path

from console.i18n import LANGUAGES
from lectures.i18n import DOMAINS, ROOT, domain

__all__ = ["check_domain", "extract", "main", "markdown_messages", "read_catalog",
           "source_files", "translate_markdown", "update_domain"]

TRANSLATED = [lang for lang in LANGUAGES if lang != "en"]

_SPLIT = re.compile(r"(\n[ \t]*\n)")
_TAG = re.compile(r"<[^>]*>")


def _pieces(text: str) -> list[str]:
    """`text` split into paragraphs and the blank-line separators between them (joined back,
    they give `text`); a fenced code block is never split."""
    parts = _SPLIT.split(text)
    merged: list[str] = []
    open_fence = False
    for part in parts:
        if open_fence:
            merged[-1] += part
        else:
            merged.append(part)
        if not _SPLIT.fullmatch(part) and part.count("```") % 2:
            open_fence = not open_fence
    return merged


def _is_message(piece: str) -> bool:
    """Whether a paragraph has prose to translate (not a separator, not bare HTML tags)."""
    return not _SPLIT.fullmatch(piece) and bool(re.search(r"[A-Za-z]", _TAG.sub("", piece)))


def markdown_messages(text: str) -> list[str]:
    """The translatable paragraphs of one markdown cell, in order."""
    return [p for p in _pieces(text) if _is_message(p)]


def translate_markdown(text: str, translate) -> str:
    """`text` with every translatable paragraph replaced by ``translate(paragraph)``."""
    return "".join(translate(p) if _is_message(p) else p for p in _pieces(text))


def source_files(name: str) -> list[Path]:
    """The files domain `name` extracts its messages from, sorted."""
    return sorted({p for pattern in DOMAINS[name][1] for p in ROOT.glob(pattern)})


def extract(name: str):
    """A Babel catalog template of every message marked in domain `name`'s files."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_file
    template = Catalog(domain=name, project="lowprec-course", fuzzy=False)
    for path in source_files(name):
        if path.suffix == ".ipynb":
            _extract_notebook(template, path)
            continue
        for lineno, message, comments, context in extract_from_file(
                "python", str(path), keywords=DEFAULT_KEYWORDS, comment_tags=("TRANSLATORS:",)):
            template.add(message, locations=[(str(path.relative_to(ROOT)), lineno)],
                         auto_comments=comments, context=context)
    return template


def _extract_notebook(template, path: Path) -> None:
    """Add the markdown paragraphs of notebook `path` to `template`, and the messages its code
    cells mark with ``_()`` (the answer cells' printed sentences; location: cell number)."""
    import io

    import nbformat
    from babel.messages.extract import DEFAULT_KEYWORDS, extract_python

    nb = nbformat.read(path, as_version=4)
    where = str(path.relative_to(ROOT))
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            for message in markdown_messages(cell.source):
                template.add(message, locations=[(where, i + 1)])
        elif cell.cell_type == "code" and "_(" in cell.source:
            source = io.BytesIO(cell.source.encode("utf-8"))
            for _lineno, _func, message, comments in extract_python(
                    source, DEFAULT_KEYWORDS, ["TRANSLATORS:"], {}):
                template.add(message, locations=[(where, i + 1)], auto_comments=comments)


def _markdown_ids(name: str) -> set[str]:
    """The markdown paragraphs of notebook domain `name` (its other messages come from code)."""
    import nbformat

    return {m for path in source_files(name)
            for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"
            for m in markdown_messages(cell.source)}


_HEADER = """\
# {language} translation of the lowprec-course lectures ({domain}).
# Written by the course's authors; distributed under the project's MIT license."""


def read_catalog(name: str, lang: str):
    """Domain `name`'s `lang` catalog as a Babel Catalog (an empty one if it has no file)."""
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po
    path = domain(name).catalog_path(lang)
    if not path.is_file():
        return Catalog(locale=lang, domain=name, project="lowprec-course", version="0.1.0",
                       header_comment=_HEADER.format(language=LANGUAGES[lang], domain=name),
                       msgid_bugs_address="", last_translator="lowprec-course authors",
                       language_team=LANGUAGES[lang], fuzzy=False)
    with open(path, "rb") as f:
        return read_po(f, locale=lang, domain=name)


def update_domain(name: str, lang: str) -> Path:
    """Merge domain `name`'s current messages into its `lang` catalog; return its path."""
    from babel.messages.pofile import write_po
    catalog = read_catalog(name, lang)
    created = catalog.creation_date       # kept, so an update without changes changes nothing
    catalog.update(extract(name), no_fuzzy_matching=True)
    catalog.creation_date = catalog.revision_date = created
    for message in catalog:       # str.format templates, never %-format: Babel flags every
        message.flags.discard("python-format")    # "5% of" ("% o") as python-format
    path = domain(name).catalog_path(lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        write_po(f, catalog, width=100, no_location=True, omit_header=False,
                 ignore_obsolete=True, sort_output=False)
    return path


def _fields(message: str) -> list[tuple[str, str, str]]:
    """The ``{name!conversion:spec}`` fields of a str.format template, sorted."""
    return sorted((f, c or "", s or "") for _, f, s, c in string.Formatter().parse(message)
                  if f is not None)


def _code_spans(markdown: str) -> list[str]:
    """The `code` spans of a markdown paragraph, sorted (a translation keeps them all). Fenced
    blocks are left out: a stored output in a ```text block is translated as printed text."""
    return sorted(re.findall(r"`[^`]+`", re.sub(r"```.*?```", "", markdown, flags=re.S)))


def _ids(message) -> tuple:
    return message.id if isinstance(message.id, tuple) else (message.id,)


def check_domain(name: str, lang: str) -> list[str]:
    """Everything wrong with domain `name`'s `lang` catalog, one line each (empty: all well).

    Checks: every message of the code is in the catalog and translated (no fuzzy entry), the
    catalog holds no message the code no longer has, and each translation has exactly the
    English text's ``str.format`` fields (names, conversions and format specs); for a
    notebook's markdown paragraph (domains ``notebookNN``), exactly its `code` spans.
    """
    problems = []
    markdown = _markdown_ids(name) if name.startswith("notebook") else set()
    code = {(_ids(m), m.context): m for m in extract(name) if m.id}
    catalog = {(_ids(m), m.context): m for m in read_catalog(name, lang) if m.id}
    for key in code.keys() - catalog.keys():
        problems.append(f"{name}/{lang}: missing {key[0][0]!r}")
    for key in catalog.keys() - code.keys():
        problems.append(f"{name}/{lang}: obsolete {key[0][0]!r}")
    for key in code.keys() & catalog.keys():
        m = catalog[key]
        strings = m.string if isinstance(m.string, tuple) else (m.string,)
        if m.fuzzy or not all(strings):
            problems.append(f"{name}/{lang}: untranslated or fuzzy {key[0][0]!r}")
            continue
        if key[0][0] in markdown:      # markdown, not a str.format template
            if _code_spans(key[0][0]) != [_code_spans(s) for s in strings][0]:
                problems.append(f"{name}/{lang}: `code` differs in {key[0][0][:60]!r}")
            continue
        try:
            want = _fields(key[0][-1])
            got = [_fields(s) for s in strings]
        except ValueError as err:
            problems.append(f"{name}/{lang}: bad template {key[0][0]!r}: {err}")
            continue
        if any(g != want for g in got):
            problems.append(f"{name}/{lang}: fields differ in {key[0][0]!r}: {got} vs {want}")
    return sorted(problems)


def main(argv=None) -> int:
    """``python -m lectures.i18n update|check [domain ...]``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m lectures.i18n",
                                     description="Keep the translation catalogs in step.")
    parser.add_argument("command", choices=["update", "check"])
    parser.add_argument("domains", nargs="*", help="default: all of " + ", ".join(DOMAINS))
    args = parser.parse_args(argv)
    names = args.domains or list(DOMAINS)
    for bad in set(names) - DOMAINS.keys():
        parser.error(f"unknown domain {bad!r}")
    problems = []
    for name in names:
        for lang in TRANSLATED:
            if args.command == "update":
                print(update_domain(name, lang).relative_to(ROOT))
            problems += check_domain(name, lang)
    print("\n".join(problems) if problems else "all catalogs complete")
    return 1 if problems and args.command == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
