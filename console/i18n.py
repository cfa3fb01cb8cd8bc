"""Translations of printed text: gettext catalogs, compiled in memory by Babel.

English is the source language: every message is written in English in the code, marked with
``_()``, and looked up at call time in the catalog of the current language. A catalog is a
GNU gettext ``.po`` file, ``<localedir>/<language>/LC_MESSAGES/<domain>.po``; Babel
(https://babel.pocoo.org) compiles it to the ``.mo`` form that Python's :mod:`gettext` reads,
in memory, the first time a domain is used in a language. No compiled file is kept in the
repository, and a missing or empty catalog falls back to the English text.

Messages are ``str.format`` templates with named fields, so the computed numbers are
arguments and a translation cannot change them::

    _ = Domain("lecture05", LOCALE_DIR).gettext
    _("{n:,} values, error {error:.2f}%").format(n=n, error=100 * err)

Untranslated entries and entries marked fuzzy are not used (Babel's ``write_mo`` default).

The language is chosen, in this order, by :func:`set_language` (the lectures' ``--lang``),
else the first of the environment variables ``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES`` and
``LANG`` that is set and names something (the order of :func:`gettext.find`; an empty value or
one of only colons, such as ``LANGUAGE=:``, counts as unset); ``C``, ``POSIX`` and
unknown languages mean English. ``zh``, ``zh_CN.UTF-8``, ``zh-Hans`` and other Chinese tags all
select the Simplified Chinese catalog ``zh_CN``.
"""

from __future__ import annotations

import contextlib
import gettext as _gettext
import io
import os
from pathlib import Path

__all__ = ["LANGUAGES", "Domain", "N_", "current_language", "language", "resolve_language",
           "set_language"]

#: The languages the lectures are written in: tag -> name, in its own language.
LANGUAGES = {"en": "English", "zh_CN": "简体中文"}
_ALIASES = {"zh": "zh_CN"}            # a bare language picks its one catalog

_ENV_VARS = ("LANGUAGE", "LC_ALL", "LC_MESSAGES", "LANG")
_chosen: str | None = None             # set_language(); None: from the environment


def resolve_language(tag: str | None) -> str | None:
    """Map a language tag to one of :data:`LANGUAGES`.

    Parameters
    ----------
    tag : str or None
        A POSIX locale name (``zh_CN.UTF-8``, ``en_US``, ``C``), a BCP 47 tag (``zh-Hans``)
        or a bare language (``zh``, ``en``). A colon-separated ``LANGUAGE`` list is read
        left to right and its first known language wins.

    Returns
    -------
    str or None
        ``"zh_CN"`` for any Chinese tag; ``"en"`` for English, ``C`` and ``POSIX``; None if
        no part of `tag` names a language with a catalog.
    """
    for part in (tag or "").split(":"):
        name = part.split(".")[0].split("@")[0].replace("-", "_")
        lang = name.split("_")[0].lower()
        if name in LANGUAGES:
            return name
        if lang in _ALIASES:
            return _ALIASES[lang]
        if lang in LANGUAGES:
            return lang
        if name in ("C", "POSIX"):
            return "en"
    return None


def set_language(tag: str | None) -> str:
    """Choose the language of every message from now on; None returns to the environment's.

    Parameters
    ----------
    tag : str or None
        ``"en"``, ``"zh"`` (or any tag :func:`resolve_language` accepts), or None.

    Returns
    -------
    str
        The language now in use, a key of :data:`LANGUAGES`.

    Raises
    ------
    TypeError
        If `tag` is not a str or None.
    ValueError
        If `tag` names a language with no catalog (e.g. ``"fr"``).
    """
    global _chosen
    if tag is not None and not isinstance(tag, str):
        raise TypeError(f"language must be a str or None, got {type(tag).__name__}")
    resolved = None if tag is None else resolve_language(tag)
    if tag is not None and resolved is None:
        choices = sorted({"en", *_ALIASES})           # the short tags: en, zh
        raise ValueError(f"language {tag!r} has no translation; choose one of "
                         + ", ".join(choices))
    _chosen = resolved
    return current_language()


def current_language() -> str:
    """The language in use: the one set by :func:`set_language`, else the environment's
    (English where the environment names none with a catalog)."""
    if _chosen is not None:
        return _chosen
    for var in _ENV_VARS:
        value = os.environ.get(var, "")
        if value.strip(":"):              # as GNU gettext, a LANGUAGE of only colons is unset
            return resolve_language(value) or "en"
    return "en"


def sentences(*parts: str) -> str:
    """Sentences run together as one paragraph: after a space in English, straight after the
    full stop (。) in Chinese, which puts no space between sentences. Empty parts are left out."""
    sep = "" if current_language().startswith("zh") else " "
    return sep.join(p for p in parts if p)


@contextlib.contextmanager
def language(tag: str | None):
    """Use language `tag` inside a ``with`` block, then restore the previous choice."""
    global _chosen
    before = _chosen
    set_language(tag)
    try:
        yield current_language()
    finally:
        _chosen = before


def N_(message: str) -> str:
    """Mark `message` for extraction without translating it now (translate it at use)."""
    return message


#: Every :class:`Domain` made in this process (the lecture's, the console's, ...), in order.
DOMAINS_MADE: list = []


class Domain:
    """The messages of one part of the course (a lecture, the console) and their catalogs.

    Parameters
    ----------
    name : str
        The gettext domain, also the catalog's file name (``<name>.po``).
    localedir : str or Path
        The folder holding ``<language>/LC_MESSAGES/<name>.po``.
    """

    def __init__(self, name: str, localedir) -> None:
        self.name = name
        self.localedir = Path(localedir)
        self._catalogs: dict[str, _gettext.NullTranslations] = {}
        DOMAINS_MADE.append(self)

    def catalog_path(self, lang: str) -> Path:
        """Where the ``.po`` catalog of language `lang` lives (it may not exist)."""
        return self.localedir / lang / "LC_MESSAGES" / f"{self.name}.po"

    def translations(self, lang: str | None = None) -> _gettext.NullTranslations:
        """The compiled catalog of `lang` (default: the current language)."""
        lang = current_language() if lang is None else lang
        if lang not in self._catalogs:
            self._catalogs[lang] = self._compile(lang)
        return self._catalogs[lang]

    def _compile(self, lang: str) -> _gettext.NullTranslations:
        path = self.catalog_path(lang)
        if lang == "en" or not path.is_file():
            return _gettext.NullTranslations()
        from babel.messages.mofile import write_mo
        from babel.messages.pofile import read_po
        with open(path, "rb") as f:
            catalog = read_po(f, locale=lang, domain=self.name)
        buf = io.BytesIO()
        write_mo(buf, catalog)            # leaves out untranslated and fuzzy entries
        buf.seek(0)
        return _gettext.GNUTranslations(buf)

    def messages(self, lang: str) -> list[str]:
        """Every message of this domain as `lang` prints it: the translations of its `lang`
        catalog, or for English the messages themselves (read from the other languages'
        catalogs, which list them)."""
        if lang != "en":
            cat = getattr(self.translations(lang), "_catalog", {})
            return [v for v in cat.values() if isinstance(v, str)]
        out = []
        for other in LANGUAGES:
            if other != "en":
                for k in getattr(self.translations(other), "_catalog", {}):
                    text = k[0] if isinstance(k, tuple) else k
                    out.append(text.split("\x04", 1)[-1])      # without a pgettext context
        return out

    def gettext(self, message: str) -> str:
        """`message` in the current language (itself where no translation exists)."""
        return self.translations().gettext(message)

    def pgettext(self, context: str, message: str) -> str:
        """`message` in the current language as translated in `context` (the same English word
        may need two translations: a table's "quantized" column against a legend's)."""
        return self.translations().pgettext(context, message)

    def ngettext(self, singular: str, plural: str, n: int) -> str:
        """The singular or plural form for count `n`, in the current language."""
        return self.translations().ngettext(singular, plural, n)
