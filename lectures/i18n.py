"""The lectures' translations at run time: one gettext domain per lecture.

Each lecture marks its printed text with ``_`` from its own domain::

    from lectures.i18n import domain
    _ = domain("lecture05").gettext

and every catalog is a ``.po`` file under ``lectures/locale/<language>/LC_MESSAGES/``
(``console/locale/`` for the console's few words). The notebooks that have a Chinese edition
have one domain each, ``notebookNN``, holding their markdown paragraphs and the sentences
their answer cells print (:mod:`lectures.i18n_notebooks`). :mod:`console.i18n` explains how the
language is chosen and how catalogs are compiled (in memory, by Babel).

After changing a marked message, run (:mod:`lectures.i18n_catalogs`, the catalog tooling)::

    python -m lectures.i18n update        # extract every domain, merge into its .po files
    python -m lectures.i18n check         # what tests/test_i18n.py checks, as a report

``update`` adds new messages untranslated (then translate them in the ``.po`` file) and drops
messages no longer in the code; ``check`` lists untranslated, fuzzy, missing and obsolete
entries and translations whose ``{placeholders}`` differ from the English ones.
"""

from __future__ import annotations

from pathlib import Path

from console.i18n import Domain

__all__ = ["DOMAINS", "LECTURES", "LOCALE_DIR", "NOTEBOOKS", "domain", "gettext_from",
           "numbered_label"]

ROOT = Path(__file__).resolve().parent.parent
LOCALE_DIR = Path(__file__).resolve().parent / "locale"

#: Every lecture's number, "01", "02", ...: the scripts ``lectures/NN_*.py``.
LECTURES = tuple(sorted(p.name[:2] for p in LOCALE_DIR.parent.glob("[0-9][0-9]_*.py")))
#: The notebooks, each with a Chinese edition: ``notebooks/NN_*.ipynb`` (none in an install
#: without the repository's notebooks/ folder).
NOTEBOOKS = tuple(sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")))

#: domain -> (locale folder, the source files whose messages it holds, as globs under ROOT)
DOMAINS = {
    "console": (ROOT / "console" / "locale", ["console/__init__.py", "console/progress.py"]),
    **{f"lecture{nn}": (LOCALE_DIR, [f"lectures/{nn}_*.py", f"lectures/widgets/lecture{nn}.py"])
       for nn in LECTURES},
    "llm": (LOCALE_DIR, ["lectures/llm/*.py"]),
    "widgets": (LOCALE_DIR, ["lectures/widgets/explorer.py"]),    # what every explorer says
    # the notebooks that have a Chinese edition: markdown, and code cells' _() (i18n_notebooks)
    **{f"notebook{nn}": (LOCALE_DIR, [f"notebooks/{nn}_*.ipynb"])
       for nn in NOTEBOOKS},
}
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


def gettext_from(*names: str):
    """A gettext that looks a message up in the domains ``names`` in turn (the first that
    translates it wins; the message itself where none does): for a lecture that prints names
    marked in another module's catalog, as lecture 08 prints the weight formats of
    :mod:`lectures.llm.formats` (domain ``llm``)."""
    domains = [domain(name) for name in names]

    def gettext(message: str) -> str:
        for d in domains:
            text = d.gettext(message)
            if text != message:
                return text
        return message
    return gettext


if __name__ == "__main__":     # the command-line tool lives beside it: lectures.i18n_catalogs
    import runpy
    runpy.run_module("lectures.i18n_catalogs", run_name="__main__", alter_sys=True)
