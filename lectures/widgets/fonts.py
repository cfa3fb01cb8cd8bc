"""Fonts for the notebooks' figures in the language the course speaks.

matplotlib's default font, DejaVu Sans, has no Chinese characters: a Chinese title would draw
as empty boxes and warn ``Glyph ... missing from font(s) DejaVu Sans``. :func:`use_language`
chooses the course's language (as ``--lang`` does for a lecture) and, for Chinese, registers
Noto Sans SC, the Simplified Chinese face of Google and Adobe's Noto Sans CJK (SIL Open Font
License 1.1), shipped on PyPI by the package ``pylopdf-fonts-zh-cn`` (the notebooks' extra
installs it). DejaVu Sans (matplotlib's ``sans-serif``) stays the first font, so Latin
text, digits and the minus sign look as in the English notebooks; matplotlib (3.6 and later)
takes every glyph DejaVu Sans lacks from Noto Sans SC.
"""

from __future__ import annotations

from console.i18n import current_language, set_language

__all__ = ["CJK_FONT", "cjk_font_path", "use_language", "use_language_fonts"]

#: The family name matplotlib gives the Chinese font.
CJK_FONT = "Noto Sans SC"


def cjk_font_path() -> str:
    """Path of the Noto Sans SC font file (OpenType, CFF outlines).

    Raises
    ------
    ImportError
        If the package ``pylopdf-fonts-zh-cn`` is not installed
        (``pip install -e '.[notebooks]'`` installs it).
    """
    try:
        from pylopdf_fonts_zh_cn import sans_path
    except ImportError as err:
        raise ImportError("Chinese figures need the font package pylopdf-fonts-zh-cn: "
                          "pip install -e '.[notebooks]'") from err
    return str(sans_path())


def use_language_fonts(lang: str | None = None) -> list[str]:
    """Set matplotlib's fonts for language `lang` (default: the current language).

    For Chinese, registers :data:`CJK_FONT` and appends it to ``rcParams["font.family"]``
    (after ``sans-serif``, i.e. DejaVu Sans: matplotlib falls back to it glyph by glyph); for
    English, removes it again. Figures created afterwards use the new list.

    Parameters
    ----------
    lang : str or None
        A language tag :func:`console.i18n.set_language` accepts (``"zh"``, ``"en"``), or
        None for the language in use.

    Returns
    -------
    list of str
        The new ``rcParams["font.family"]``.
    """
    import matplotlib as mpl
    from matplotlib import font_manager

    from console.i18n import resolve_language
    if lang is not None and not isinstance(lang, str):
        raise TypeError(f"lang must be a str or None, got {type(lang).__name__}")
    resolved = current_language() if lang is None else resolve_language(lang)
    if resolved is None:
        raise ValueError(f"lang {lang!r} is not a language the course speaks (en, zh)")
    families = [f for f in mpl.rcParams["font.family"] if f != CJK_FONT] or ["sans-serif"]
    if resolved == "zh_CN":
        path = cjk_font_path()
        if not any(f.fname == path for f in font_manager.fontManager.ttflist):
            font_manager.fontManager.addfont(path)
        families.append(CJK_FONT)
    mpl.rcParams["font.family"] = families
    return families


def use_language(lang: str | None) -> str:
    """Choose the course's language for this process: the lectures' printed text, the
    widgets' labels and the figures' text and fonts (the first cell of a Chinese notebook).

    Parameters
    ----------
    lang : str or None
        ``"zh"``, ``"en"`` (any tag :func:`console.i18n.set_language` accepts), or None for
        the environment's language.

    Returns
    -------
    str
        The language now in use (``"zh_CN"`` or ``"en"``).

    Raises
    ------
    ValueError, TypeError
        As :func:`console.i18n.set_language`.
    """
    chosen = set_language(lang)
    use_language_fonts(chosen)
    return chosen
