"""The lectures' translations: one gettext domain per lecture, and the tool that keeps the
catalogs in step with the code.

Each lecture marks its printed text with ``_`` from its own domain::

    from lectures.i18n import domain
    _ = domain("lecture05").gettext

and every catalog is a ``.po`` file under ``lectures/locale/<language>/LC_MESSAGES/``
(``console/locale/`` for the console's few words). The notebooks that have a Chinese edition
have one domain each, ``notebookNN``, holding their markdown paragraphs and the sentences
their answer cells print (:mod:`lectures.i18n_notebooks`). :mod:`console.i18n` explains how the
language is chosen and how catalogs are compiled (in memory, by Babel).

After changing a marked message, run::

    python -m lectures.i18n update        # extract every domain, merge into its .po files
    python -m lectures.i18n check         # what tests/test_i18n.py checks, as a report

``update`` adds new messages untranslated (then translate them in the ``.po`` file) and drops
messages no longer in the code; ``check`` lists untranslated, fuzzy, missing and obsolete
entries and translations whose ``{placeholders}`` differ from the English ones.
"""

from __future__ import annotations

import string
import sys
from pathlib import Path

from console.i18n import LANGUAGES, Domain
from lectures.i18n_notebooks import TRANSLATED as NOTEBOOKS_TRANSLATED

__all__ = ["DOMAINS", "LOCALE_DIR", "check_domain", "domain", "main", "numbered_label",
           "update_domain"]

ROOT = Path(__file__).resolve().parent.parent
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

#: domain -> (locale folder, the source files whose messages it holds, as globs under ROOT)
DOMAINS = {
    "console": (ROOT / "console" / "locale", ["console/__init__.py"]),
    **{f"lecture{n:02d}": (LOCALE_DIR, [f"lectures/{n:02d}_*.py",
                                        f"lectures/widgets/lecture{n:02d}.py"])
       for n in range(1, 14)},
    "llm": (LOCALE_DIR, ["lectures/llm/*.py"]),
    "widgets": (LOCALE_DIR, ["lectures/widgets/explorer.py"]),    # what every explorer says
    # the notebooks that have a Chinese edition: markdown, and code cells' _() (i18n_notebooks)
    **{f"notebook{nn}": (LOCALE_DIR, [f"notebooks/{nn}_*.ipynb"])
       for nn in NOTEBOOKS_TRANSLATED},
}
TRANSLATED = [lang for lang in LANGUAGES if lang != "en"]
_domains: dict[str, Domain] = {}


def numbered_label(text: str, patterns, gettext) -> str:
    """``text`` (a row label such as "INT3 g128, 40 steps") in the current language.

    ``patterns`` is a sequence of ``(compiled regex, message)``: the first regex that matches
    the whole text gives the message, translated by ``gettext`` and formatted with the
    regex's named groups; without a match the text itself is translated (returned as it is
    where the catalog has no entry).
    """
    for pattern, message in patterns:
        m = pattern.fullmatch(text)
        if m:
            return gettext(message).format(**m.groupdict())
    return gettext(text)


def domain(name: str) -> Domain:
    """The :class:`console.i18n.Domain` called `name` (a key of :data:`DOMAINS`)."""
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; add it to lectures.i18n.DOMAINS")
    if name not in _domains:
        _domains[name] = Domain(name, DOMAINS[name][0])
    return _domains[name]


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

    from lectures.i18n_notebooks import markdown_messages
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

    from lectures.i18n_notebooks import markdown_messages
    return {m for path in source_files(name)
            for cell in nbformat.read(path, as_version=4).cells if cell.cell_type == "markdown"
            for m in markdown_messages(cell.source)}


_HEADER = """\
# {language} translation of the lowprec-course lectures ({domain}).
# Written by the course's authors; distributed under the project's MIT license."""


def _read(name: str, lang: str):
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
    catalog = _read(name, lang)
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
    import re
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
    catalog = {(_ids(m), m.context): m for m in _read(name, lang) if m.id}
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
