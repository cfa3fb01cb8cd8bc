"""Printing in an output encoding that lacks some characters: one fallback table.

A lecture's text uses a few characters outside ASCII (``x²``, ``Wᵀ``, ``≈``, ``…``); a
redirected run on Chinese Windows writes GBK (cp936), which has the Chinese text but not ``²``
or ``ᵀ``, and ``PYTHONIOENCODING=ascii`` has neither. :func:`install_fallbacks` makes stdout
and stderr write such a character as its entry in :data:`FALLBACKS` (``²`` -> ``^2``) when, and
only when, the stream's encoding cannot encode it: a UTF-8 stream writes the same bytes as
before. A character with no entry is written as Python's backslash escape (``\\u1d40``), so
a run is never cut short; :func:`unprintable` finds, before a lecture starts, the characters
of its text that neither the encoding nor a fallback can show (Chinese text under ASCII).
"""

from __future__ import annotations

import codecs

__all__ = ["FALLBACKS", "ERRORS", "install_fallbacks", "is_unicode", "unprintable"]

#: ASCII spellings of the characters lectures print, used only where the encoding lacks them.
FALLBACKS = {
    "±": "+-", "²": "^2", "³": "^3", "¹": "^1", "·": ".", "×": "x", "÷": "/", "°": " deg",
    "µ": "u", "Ŵ": "W^", "ᵀ": "^T", "Σ": "Sum", "Δ": "Delta", "α": "alpha", "β": "beta",
    "γ": "gamma", "δ": "delta", "ε": "eps", "θ": "theta", "λ": "lambda", "μ": "mu",
    "ν": "nu", "π": "pi", "σ": "sigma", "–": "-", "—": "--", "‖": "||", "‘": "'", "’": "'",
    "“": '"', "”": '"', "…": "...", "›": ">", "‹": "<", "→": "->", "←": "<-", "∂": "d",
    "−": "-", "√": "sqrt", "∝": "~", "∞": "inf", "≈": "~=", "≠": "!=", "≤": "<=", "≥": ">=",
    "⊗": "(x)", "\u00a0": " ",
    # Chinese punctuation, for Chinese text in an encoding that has the characters but not
    # these (rare: GBK has them all)
    "、": ",", "。": ".", "《": "<<", "》": ">>", "「": '"', "」": '"', "『": '"', "』": '"',
    "【": "[", "】": "]", "！": "!", "％": "%", "（": "(", "）": ")", "，": ",", "：": ":",
    "；": ";", "？": "?",
}

#: The codec error handler's name (``str.encode(encoding, ERRORS)``).
ERRORS = "console_fallback"


def _encodable(text: str, encoding: str) -> bool:
    try:
        text.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def _fallback(err: UnicodeError):
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for ch in err.object[err.start:err.end]:
        alt = FALLBACKS.get(ch)
        out.append(alt if alt is not None and _encodable(alt, err.encoding)
                   else ch.encode("ascii", "backslashreplace").decode("ascii"))
    return "".join(out), err.end


codecs.register_error(ERRORS, _fallback)


def is_unicode(encoding: str | None) -> bool:
    """Whether ``encoding`` encodes every character (UTF-8, -16, -32)."""
    try:
        return codecs.lookup(encoding or "ascii").name.startswith("utf")
    except LookupError:
        return False


def install_fallbacks(*streams) -> None:
    """Make each text stream (an ``io.TextIOWrapper``) write :data:`FALLBACKS` for the
    characters its encoding lacks; streams in a Unicode encoding, or that cannot be
    reconfigured, are left as they are."""
    for stream in streams:
        if is_unicode(getattr(stream, "encoding", None)):
            continue
        try:
            stream.reconfigure(errors=ERRORS)
        except (AttributeError, ValueError, OSError):
            pass


def unprintable(text: str, encoding: str | None) -> list[str]:
    """The distinct characters of ``text`` that ``encoding`` can show neither as they are nor
    through :data:`FALLBACKS`, in order of first appearance (empty for Unicode encodings)."""
    if is_unicode(encoding):
        return []
    bad: dict[str, None] = {}
    for ch in dict.fromkeys(text):
        if ch.isascii() and _encodable(ch, encoding or "ascii"):
            continue
        alt = FALLBACKS.get(ch)
        if not _encodable(ch, encoding or "ascii") and not (alt and _encodable(alt, encoding)):
            bad[ch] = None
    return list(bad)
