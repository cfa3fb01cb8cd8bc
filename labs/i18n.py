"""The labs' translations: one gettext domain, ``labs``, in ``labs/locale/<lang>/LC_MESSAGES/``.

It holds the checker's messages (marked with ``_()`` in ``labs/*.py`` and ``labs/checks/*.py``)
and the docstring of every exercise, whole: the English docstring in the lab file is the one
source, and its Chinese translation is the catalog entry whose msgid is that docstring
(``inspect.cleandoc``-ed). ``python -m labs show NN --lang zh`` and the checker's report print
it. The language is chosen as the lectures choose it (:mod:`console.i18n`: ``--lang``, then the
environment).

::

    python -m labs.i18n update     # new messages and docstrings into labs.po (then translate)
    python -m labs.i18n check      # untranslated, fuzzy, missing, obsolete or mismatched entries
"""

from __future__ import annotations

import ast
import inspect
import string
import sys
from pathlib import Path

from console.i18n import LANGUAGES, N_, Domain

__all__ = ["DOMAIN", "N_", "_", "docstring", "lab_files", "main"]

LABS_DIR = Path(__file__).resolve().parent
ROOT = LABS_DIR.parent
DOMAIN = Domain("labs", LABS_DIR / "locale")
TRANSLATED = [lang for lang in LANGUAGES if lang != "en"]


def _(message: str) -> str:
    """`message` in the current language."""
    return DOMAIN.gettext(message)


def docstring(text: str | None) -> str:
    """An exercise's docstring (cleaned as ``inspect.getdoc`` does) in the current language;
    the English text where the catalog has no entry for it (an edited docstring)."""
    text = inspect.cleandoc(text or "")
    return DOMAIN.gettext(text) if text else ""


def lab_files() -> list[Path]:
    """The lab files ``labs/NN_topic.py``, sorted."""
    return sorted(LABS_DIR.glob("[0-9][0-9]_*.py"))


def _code_files() -> list[Path]:
    return sorted([*LABS_DIR.glob("[a-z_]*.py"), *(LABS_DIR / "checks").glob("*.py")])


def extract():
    """A Babel catalog template: the checker's marked messages and the exercises' docstrings."""
    from babel.messages.catalog import Catalog
    from babel.messages.extract import DEFAULT_KEYWORDS, extract_from_file
    template = Catalog(domain="labs", project="lowprec-course", fuzzy=False)
    for path in _code_files():
        for lineno, message, comments, context in extract_from_file(
                "python", str(path), keywords=DEFAULT_KEYWORDS, comment_tags=("TRANSLATORS:",)):
            template.add(message, locations=[(str(path.relative_to(ROOT)), lineno)],
                         auto_comments=comments, context=context)
    for path in lab_files():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.FunctionDef) and ast.get_docstring(node):
                template.add(inspect.cleandoc(ast.get_docstring(node, clean=False)),
                             locations=[(str(path.relative_to(ROOT)), node.lineno)])
    return template


def _read(lang: str):
    from babel.messages.catalog import Catalog
    from babel.messages.pofile import read_po
    path = DOMAIN.catalog_path(lang)
    if not path.is_file():
        return Catalog(locale=lang, domain="labs", project="lowprec-course", version="0.1.0",
                       header_comment=f"# {LANGUAGES[lang]} translation of the lowprec-course "
                       "labs.\n# Written by the course's authors; distributed under the "
                       "project's MIT license.", msgid_bugs_address="",
                       last_translator="lowprec-course authors", language_team=LANGUAGES[lang],
                       fuzzy=False)
    with open(path, "rb") as f:
        return read_po(f, locale=lang, domain="labs")


def update(lang: str) -> Path:
    """Merge the current messages into the `lang` catalog; return its path."""
    from babel.messages.pofile import write_po
    catalog = _read(lang)
    created = catalog.creation_date
    catalog.update(extract(), no_fuzzy_matching=True)
    catalog.creation_date = catalog.revision_date = created
    for message in catalog:
        message.flags.discard("python-format")
    path = DOMAIN.catalog_path(lang)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        write_po(f, catalog, width=100, no_location=True, omit_header=False,
                 ignore_obsolete=True, sort_output=False)
    return path


def check(lang: str) -> list[str]:
    """Everything wrong with the `lang` catalog, one line each: missing, obsolete, untranslated
    or fuzzy entries, and translations whose ``{fields}`` differ from the English ones (the
    docstrings hold no fields: they are compared as plain text)."""
    problems = []
    docs = {m.id for m in extract() if m.id and any(p.name[:2].isdigit()
                                                     for p in map(Path, (loc[0] for loc in
                                                                         m.locations)))}
    code = {m.id: m for m in extract() if m.id}
    catalog = {m.id: m for m in _read(lang) if m.id}
    problems += [f"labs/{lang}: missing {k[:60]!r}" for k in code.keys() - catalog.keys()]
    problems += [f"labs/{lang}: obsolete {k[:60]!r}" for k in catalog.keys() - code.keys()]
    for key in code.keys() & catalog.keys():
        m = catalog[key]
        if m.fuzzy or not m.string:
            problems.append(f"labs/{lang}: untranslated or fuzzy {key[:60]!r}")
        elif key not in docs and _fields(key) != _fields(m.string):
            problems.append(f"labs/{lang}: fields differ in {key[:60]!r}")
    return sorted(problems)


def _fields(message: str) -> list:
    """The ``{name!conversion:spec}`` fields of a str.format template, sorted."""
    return sorted((f, c or "", s or "") for _, f, s, c in string.Formatter().parse(message)
                  if f is not None)


def main(argv=None) -> int:
    """``python -m labs.i18n update|check``."""
    import argparse
    parser = argparse.ArgumentParser(prog="python -m labs.i18n",
                                     description="Keep the labs' translation catalog in step.")
    parser.add_argument("command", choices=["update", "check"])
    args = parser.parse_args(argv)
    problems = []
    for lang in TRANSLATED:
        if args.command == "update":
            print(update(lang).relative_to(ROOT))
        problems += check(lang)
    print("\n".join(problems) if problems else "all catalogs complete")
    return 1 if problems and args.command == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
