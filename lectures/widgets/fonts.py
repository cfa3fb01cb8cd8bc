"""Fonts for the notebooks' figures in the language the course speaks.

matplotlib's default font, DejaVu Sans, has no Chinese characters: a Chinese title would draw
as empty boxes and warn ``Glyph ... missing from font(s) DejaVu Sans``. :func:`use_language`
chooses the course's language (as ``--lang`` does for a lecture) and, for Chinese, appends a
Simplified Chinese font to matplotlib's font list. DejaVu Sans (matplotlib's ``sans-serif``)
stays the first font, so Latin text, digits and the minus sign look as in the English
notebooks; matplotlib (3.6 and later) takes every glyph DejaVu Sans lacks from the Chinese font.

The Chinese font is the first of, in order:

1. a font shipped as a Python package: Noto Sans SC from ``pylopdf-fonts-zh-cn`` (the
   notebooks' extra installs it; the stored figures were drawn with it), else Noto Sans CJK SC
   from ``mplfonts``;
2. a font the system already has, in the order of :data:`CJK_FAMILIES` (Noto Sans CJK SC,
   Source Han Sans SC, Microsoft YaHei on Windows, PingFang SC on macOS, SimHei, WenQuanYi on
   Linux, ...). matplotlib lists the system's fonts once and caches the list; a font installed
   after that is not in it, so without a Chinese font in the list the system's font folders
   are read again (a font installed a minute ago serves after a kernel restart).

Without any, the text of a Chinese notebook is still Chinese, its figures draw the Chinese
characters as boxes, and :func:`use_language_fonts` warns once, saying how to get a font.
Noto Sans CJK and Source Han Sans are the same design (Google and Adobe, SIL Open Font
License 1.1).
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

from console.i18n import current_language, set_language

__all__ = ["CJK_FAMILIES", "CJK_FONT", "NoCJKFontWarning", "choose_cjk_font", "cjk_font",
           "cjk_font_path", "use_language", "use_language_fonts"]

#: The family name of the font the notebooks' extra installs (``pylopdf-fonts-zh-cn``).
CJK_FONT = "Noto Sans SC"

#: Family names of Simplified Chinese fonts, in the order they are preferred when installed on
#: the system. The last is the face matplotlib reads first from Debian's and Ubuntu's
#: ``fonts-noto-cjk`` collection: its Chinese characters are all there, some drawn in the
#: Japanese convention.
CJK_FAMILIES = (
    "Noto Sans SC", "Noto Sans CJK SC", "Source Han Sans SC", "Source Han Sans CN",
    "Microsoft YaHei", "PingFang SC", "SimHei", "WenQuanYi Micro Hei", "WenQuanYi Zen Hei",
    "Noto Sans CJK JP",
)

#: What a student without a Chinese font can install.
_HOW_TO_GET_ONE = (
    "no Chinese font found for the figures (their Chinese text will show as boxes). Install "
    "one: pip install -e '.[notebooks]' (the package pylopdf-fonts-zh-cn), or a system font: "
    "apt install fonts-noto-cjk (Debian, Ubuntu), dnf install google-noto-sans-cjk-fonts "
    "(Fedora); Windows and macOS have Microsoft YaHei and PingFang SC. Then restart the kernel.")


class NoCJKFontWarning(UserWarning):
    """No Chinese font was found: the figures' Chinese characters draw as boxes."""


def _packaged_fonts() -> list[str]:
    """Paths of the Chinese fonts that installed Python packages ship, preferred first.

    Found by the packages' locations, without importing them (mplfonts changes matplotlib's
    settings when imported)."""
    paths = []
    for package, name in (("pylopdf_fonts_zh_cn", "NotoSansSC-Regular.otf"),
                          ("mplfonts", "fonts/NotoSansCJKsc-Regular.otf")):
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            spec = None
        if spec is not None and spec.submodule_search_locations:
            for folder in spec.submodule_search_locations:
                path = Path(folder) / name
                if path.is_file():
                    paths.append(str(path))
    return paths


def _system_fonts() -> list[tuple[str, str]]:
    """(family name, path) of every font matplotlib's font manager knows."""
    from matplotlib import font_manager
    return [(f.name, f.fname) for f in font_manager.fontManager.ttflist]


def _fonts_new_to_matplotlib(folders=None) -> list[tuple[str, str]]:
    """(family name, path) of the font files in the system's font folders (or `folders`) that
    matplotlib's cached font list lacks, each registered with matplotlib as it is found.

    matplotlib builds that list once (``~/.cache/matplotlib``) and never rescans, so a font
    installed afterwards (``apt install fonts-noto-cjk``) would stay unseen."""
    from matplotlib import font_manager
    known = {f.fname for f in font_manager.fontManager.ttflist}
    found = []
    for path in sorted(set(font_manager.findSystemFonts(folders)) - known):
        try:
            font_manager.fontManager.addfont(path)
            found.append((font_manager.FontProperties(fname=path).get_name(), path))
        except (OSError, RuntimeError, ValueError):     # unreadable or not a font
            continue
    return found


def choose_cjk_font(packaged: list[tuple[str, str]],
                    installed: list[tuple[str, str]]) -> tuple[str, str] | None:
    """The Chinese font to use: the first packaged one, else the first installed font whose
    family is in :data:`CJK_FAMILIES`, in that list's order.

    Parameters
    ----------
    packaged : list of (str, str)
        (family, path) of the fonts Python packages ship, preferred first.
    installed : list of (str, str)
        (family, path) of the fonts the system has, in any order.

    Returns
    -------
    (str, str) or None
        (family, path) of the chosen font, or None when there is none.
    """
    if packaged:
        return packaged[0]
    by_family = {}
    for family, path in installed:
        by_family.setdefault(family, path)
    for family in CJK_FAMILIES:
        if family in by_family:
            return family, by_family[family]
    return None


def cjk_font() -> tuple[str, str] | None:
    """(family, path) of the Chinese font the figures use (:func:`choose_cjk_font` over this
    machine's packages and fonts), registered with matplotlib; None when there is none."""
    from matplotlib import font_manager
    packaged = []
    for path in _packaged_fonts():
        if not any(f.fname == path for f in font_manager.fontManager.ttflist):
            font_manager.fontManager.addfont(path)
        packaged.append((font_manager.FontProperties(fname=path).get_name(), path))
    found = choose_cjk_font(packaged, _system_fonts())
    if found is None:
        found = choose_cjk_font([], _fonts_new_to_matplotlib())
    return found


def cjk_font_path() -> str:
    """Path of the Chinese font file the figures use (see :func:`cjk_font`).

    Raises
    ------
    FileNotFoundError
        If this machine has no Chinese font (the message says how to get one).
    """
    found = cjk_font()
    if found is None:
        raise FileNotFoundError(_HOW_TO_GET_ONE[0].upper() + _HOW_TO_GET_ONE[1:])
    return found[1]


def use_language_fonts(lang: str | None = None) -> list[str]:
    """Set matplotlib's fonts for language `lang` (default: the current language).

    For Chinese, registers the Chinese font (:func:`cjk_font`) and appends its family to
    ``rcParams["font.family"]`` (after ``sans-serif``, i.e. DejaVu Sans: matplotlib falls back
    to it glyph by glyph); for English, removes it again. Figures created afterwards use the
    new list. Without a Chinese font, warns :class:`NoCJKFontWarning` (saying what to install)
    and leaves the list without one.

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

    from console.i18n import resolve_language
    if lang is not None and not isinstance(lang, str):
        raise TypeError(f"lang must be a str or None, got {type(lang).__name__}")
    resolved = current_language() if lang is None else resolve_language(lang)
    if resolved is None:
        raise ValueError(f"lang {lang!r} is not a language the course speaks (en, zh)")
    families = [f for f in mpl.rcParams["font.family"] if f not in CJK_FAMILIES] or [
        "sans-serif"]
    if resolved == "zh_CN":
        found = cjk_font()
        if found is None:
            warnings.warn(_HOW_TO_GET_ONE[0].upper() + _HOW_TO_GET_ONE[1:], NoCJKFontWarning,
                          stacklevel=2)
        else:
            families.append(found[0])
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
