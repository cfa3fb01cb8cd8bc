"""Terminal output for lecture scripts: section headers, aligned tables, observations.

Every ``format_*`` function is pure and returns plain text (no trailing newline, no
trailing whitespace on any line); the matching ``print_*`` function prints that text,
styled with ANSI bold/colour only when the target stream is a terminal and the
``NO_COLOR`` environment variable is unset or empty (https://no-color.org).

Widths are display widths in terminal columns, measured with ``wcwidth.wcswidth``, so
CJK and other wide characters count as 2 columns and combining marks as 0.
This package knows nothing of numerics.
"""

from __future__ import annotations

import argparse
import numbers
import os
import re
import sys
from typing import Sequence, TextIO

from wcwidth import wcswidth, wcwidth

from console.encoding import install_fallbacks, unprintable
from console.i18n import (_ALIASES, DOMAINS_MADE, LANGUAGES, N_, Domain, current_language,
                          set_language)

__all__ = [
    "OBSERVATIONS_WIDTH", "display_width", "is_numeric", "use_color",
    "format_title", "format_header", "format_table", "format_observations",
    "format_paragraph", "print_title", "print_header", "print_table", "print_observations",
    "print_paragraph", "lecture_parser", "run_lecture", "save_path", "ROUNDING_BOUND",
    "below_bound",
]

HEADER_WIDTH = 72
OBSERVATIONS_WIDTH = 100

_ = Domain("console", os.path.join(os.path.dirname(__file__), "locale")).gettext

_BOLD, _CYAN, _RESET = "\x1b[1m", "\x1b[36m", "\x1b[0m"

#: Two float64 computations of one result differ by float64 rounding, whose last digits depend
#: on the BLAS kernel and the thread count: a lecture prints such a difference as this bound.
ROUNDING_BOUND = 1e-13


def below_bound(diff: float, bound: float = ROUNDING_BOUND) -> str:
    """``"< 1e-13"`` where ``diff`` (a difference, absolute or relative, >= 0) is below
    ``bound``, so that the printed text is the same on every machine; ``diff`` itself in three
    significant digits (``"2.50e-10"``) where it is not rounding."""
    return f"< {bound:.0e}" if diff < bound else f"{diff:.2e}"

# A decimal number as a lecture table writes it: optional sign, optional thousands
# separators, fraction, exponent, and one unit-free suffix (% or a ratio's x).
_NUMBER = re.compile(
    r"(?=\D*\d)[+-]?(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?[%x]?"
    r"|[+-]?(?:inf|nan)", re.IGNORECASE)


def display_width(text: str) -> int:
    """Return the number of terminal columns `text` occupies.

    Parameters
    ----------
    text : str
        One line of printable text.

    Returns
    -------
    int
        Display width in columns (wide characters 2, combining marks 0), as computed by
        ``wcwidth.wcswidth``.

    Raises
    ------
    ValueError
        If `text` contains a control character (newline, tab, escape, ...), whose width
        on a terminal is undefined.
    """
    width = wcswidth(text)
    if width < 0:
        raise ValueError(f"text contains a control character: {text!r}")
    return width


def is_numeric(cell: object) -> bool:
    """Return whether a table cell is a number and so is right-aligned.

    Parameters
    ----------
    cell : object
        A table cell: ints, floats and other ``numbers.Number`` (numpy scalars included,
        bool excluded) are numbers; so are strings such as ``"12.5%"``, ``"-3.1"``,
        ``"+6.0"``, ``"1,234"``, ``"1e-3"``, ``"2.5x"``, ``"inf"``.

    Returns
    -------
    bool
        True if the cell is numeric.
    """
    if isinstance(cell, bool):
        return False
    if isinstance(cell, numbers.Number):
        return True
    if isinstance(cell, str):
        return _NUMBER.fullmatch(cell.strip()) is not None
    return False


def use_color(stream: TextIO) -> bool:
    """Return whether output to `stream` should carry ANSI styling.

    Parameters
    ----------
    stream : file-like
        The target stream.

    Returns
    -------
    bool
        True only if ``stream.isatty()`` is true and ``NO_COLOR`` is unset or empty
        (https://no-color.org). Streams without a working ``isatty`` count as not a terminal.
    """
    if os.environ.get("NO_COLOR"):
        return False
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False


def _style(text: str, code: str, color: bool) -> str:
    return f"{code}{text}{_RESET}" if color and text else text


def _pad(text: str, width: int, right: bool) -> str:
    fill = " " * (width - display_width(text))
    return fill + text if right else text + fill


def format_title(title: str, intro: Sequence[str] = (), *, width: int = OBSERVATIONS_WIDTH,
                 color: bool = False) -> str:
    """Return a lecture's opening: the title between ``#`` rules, then intro paragraphs.

    Parameters
    ----------
    title : str
        One line, e.g. ``"Lecture 05: quantization basics"``.
    intro : sequence of str, optional
        Paragraphs, each wrapped to `width` display columns, separated by blank lines.
    width : int, optional
        Wrap width in display columns (default 100); also the rule's length.
    color : bool, optional
        Bold title (ANSI). Default False.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        If `title` is not a str or `intro` is a bare str instead of a sequence of str.
    ValueError
        If `title` is blank or contains a control character.
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    if isinstance(intro, str):
        raise TypeError("intro must be a sequence of paragraphs, not a single str")
    title = title.strip()
    if not title:
        raise ValueError("title must not be empty")
    rule = "#" * max(width, display_width(title))
    out = [rule, _style(title, _BOLD, color), rule]
    for paragraph in intro:
        out += [""] + _wrap(str(paragraph), width)
    return "\n".join(out)


def print_title(title: str, intro: Sequence[str] = (), *, file: TextIO | None = None) -> None:
    """Print `format_title(title, intro)` to `file`, styled if `file` is a terminal.

    Raises as `format_title`.
    """
    file = sys.stdout if file is None else file
    print(format_title(title, intro, color=use_color(file)), file=file)


def format_header(title: str, *, color: bool = False) -> str:
    """Return a section header: a blank line, a rule, the title, a rule.

    Parameters
    ----------
    title : str
        The section title, one line.
    color : bool, optional
        Wrap the title in ANSI bold cyan. Default False (plain text).

    Returns
    -------
    str
        Four lines joined by newlines, the first empty; the rules are ``=`` repeated to
        ``max(72, display width of title)`` columns.

    Raises
    ------
    TypeError
        If `title` is not a str.
    ValueError
        If `title` is empty or blank, or contains a control character such as a newline.
    """
    if not isinstance(title, str):
        raise TypeError(f"title must be a str, got {type(title).__name__}")
    title = title.strip()
    if not title:
        raise ValueError("title must not be empty")
    rule = "=" * max(HEADER_WIDTH, display_width(title))
    return "\n".join(["", rule, _style(title, _BOLD + _CYAN, color), rule])


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                 color: bool = False) -> str:
    """Return an aligned text table (a GitHub Markdown pipe table).

    Parameters
    ----------
    headers : sequence of str
        Column titles, at least one.
    rows : sequence of sequences
        Each row has exactly ``len(headers)`` cells; each cell is shown as ``str(cell)``.
    color : bool, optional
        Show the header cells in ANSI bold. Default False (plain text).

    Returns
    -------
    str
        Lines ``| cell | cell |``, a ``|---|---|`` rule under the headers. Numeric cells
        (see `is_numeric`) are right-aligned, other cells left-aligned; a header is
        right-aligned when every cell in its column is numeric. Columns are padded to the
        same display width, so every line has the same display width and every ``|``
        falls at the same column on every line.

    Raises
    ------
    TypeError
        If `headers` or a row is a str rather than a sequence of cells.
    ValueError
        If `headers` is empty, a row's length differs from ``len(headers)`` (the message
        names the row index), or a cell contains a control character such as a newline.
    """
    if isinstance(headers, str):
        raise TypeError("headers must be a sequence of str, not a str")
    headers = [str(h) for h in headers]
    if not headers:
        raise ValueError("headers must not be empty")
    body = []
    for i, row in enumerate(rows):
        if isinstance(row, str):
            raise TypeError(f"row {i} is a str, not a sequence of cells")
        row = list(row)
        if len(row) != len(headers):
            raise ValueError(f"row {i} has {len(row)} cells, expected {len(headers)} "
                             f"(one per header)")
        body.append(row)

    def text(cell: object, where: str) -> str:
        s = str(cell)
        if wcswidth(s) < 0:
            raise ValueError(f"{where} contains a control character: {s!r}")
        return s

    head = [text(h, f"header {j}") for j, h in enumerate(headers)]
    cells = [[text(c, f"row {i}, column {j}") for j, c in enumerate(r)]
             for i, r in enumerate(body)]
    right = [[is_numeric(c) for c in r] for r in body]
    n = len(head)
    widths = [max(display_width(s) for s in [head[j]] + [r[j] for r in cells])
              for j in range(n)]
    head_right = [bool(body) and all(r[j] for r in right) for j in range(n)]

    def line(parts: list[str]) -> str:
        return "| " + " | ".join(parts) + " |"

    out = [line([_style(_pad(h, w, r), _BOLD, color)
                 for h, w, r in zip(head, widths, head_right)]),
           "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line([_pad(c, w, r) for c, w, r in zip(row, widths, rr)])
            for row, rr in zip(cells, right)]
    return "\n".join(out)


# Chinese and Japanese text has no spaces: a line may break between any two wide characters,
# except before closing punctuation or after opening punctuation (the line-breaking rules of
# W3C, "Requirements for Chinese Text Layout", section 3.1.7).
_NO_LINE_START = set("，。、；：！？）】》」』”’％,.;:!?)%")
_NO_LINE_END = set("（【《「『“‘(")


def _segments(word: str) -> list[str]:
    """Split one space-free word where a line may break inside it (next to wide characters)."""
    parts, start = [], 0
    for i in range(1, len(word)):
        a, b = word[i - 1], word[i]
        if ((wcwidth(a) == 2 or wcwidth(b) == 2) and b not in _NO_LINE_START
                and a not in _NO_LINE_END):
            parts.append(word[start:i])
            start = i
    parts.append(word[start:])
    return parts


def _wrap(text: str, width: int) -> list[str]:
    """Greedy wrap to `width` display columns: at spaces, and between wide (CJK) characters
    where the line-breaking rules allow; a piece wider than a line is split between
    characters."""
    lines: list[str] = []
    cur, cur_w = "", 0
    for word in text.split():
        for k, piece in enumerate(_segments(word)):
            sep = " " if k == 0 and cur else ""
            w = display_width(piece)
            if cur and cur_w + len(sep) + w <= width:
                cur, cur_w = cur + sep + piece, cur_w + len(sep) + w
                continue
            if cur and w <= width:
                lines.append(cur)
                cur, cur_w = piece, w
                continue
            if cur:  # an over-long piece: fill the rest of this line first
                cur, cur_w = cur + sep, cur_w + len(sep)
            for ch in piece:
                cw = wcwidth(ch)
                # zero-width characters (combining marks) always stay with their base
                if cw > 0 and cur_w + cw > width and cur.strip():
                    lines.append(cur.rstrip())
                    cur, cur_w = "", 0
                cur, cur_w = cur + ch, cur_w + max(cw, 0)
    if cur:
        lines.append(cur)
    return lines


def format_paragraph(text: str, *, width: int = OBSERVATIONS_WIDTH) -> str:
    """Return `text` wrapped to `width` display columns (whitespace collapsed).

    Unlike :func:`textwrap.fill`, widths are display widths (a CJK character is 2 columns) and
    Chinese text without spaces breaks between characters, never before closing or after
    opening punctuation.

    Parameters
    ----------
    text : str
    width : int, optional
        Maximum display width of a line, in columns (at least 2). Default 100.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        If `text` is not a str.
    ValueError
        If `width` < 2.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    if isinstance(width, bool) or not isinstance(width, int) or width < 2:
        raise ValueError(f"width must be an integer >= 2, got {width!r}")
    return "\n".join(_wrap(text, width))


def print_paragraph(text: str, *, width: int = OBSERVATIONS_WIDTH,
                    file: TextIO | None = None) -> None:
    """Print `format_paragraph(text, width=width)` to `file` (default ``sys.stdout``)."""
    print(format_paragraph(text, width=width), file=sys.stdout if file is None else file)


def format_observations(lines: Sequence[str], *, title: str | None = None,
                        width: int = OBSERVATIONS_WIDTH, color: bool = False) -> str:
    """Return a titled, numbered list of observations wrapped to `width` columns.

    Parameters
    ----------
    lines : sequence of str
        The observations, one per item. Whitespace inside an item (newlines included)
        is collapsed to single spaces before wrapping.
    title : str, optional
        The heading, followed by a colon. Default ``"What to notice"`` in the current
        language (:mod:`console.i18n`).
    width : int, optional
        Maximum display width of every output line, in columns. Default 100.
    color : bool, optional
        Show the heading in ANSI bold and the item numbers in cyan. Default False.

    Returns
    -------
    str
        The heading line, then items ``"1. text"`` with right-aligned numbers; wrapped
        continuation lines are indented to where the text starts (hanging indent).

    Raises
    ------
    TypeError
        If `lines` is a str rather than a sequence of str, or an item is not a str.
    ValueError
        If `lines` is empty, an item is blank, or `width` leaves fewer than 2 columns
        for text after the number (a wide character needs 2).
    """
    if isinstance(lines, str):
        raise TypeError("lines must be a sequence of str, not a str")
    lines = list(lines)
    if not lines:
        raise ValueError("lines must contain at least one observation")
    indent = len(f"{len(lines)}. ")
    if width - indent < 2:
        raise ValueError(f"width {width} is too small: need at least {indent + 2} columns")
    if title is None:
        title = _("What to notice")
    out = [_style(_("{title}:").format(title=title), _BOLD, color)]
    for i, item in enumerate(lines, 1):
        if not isinstance(item, str):
            raise TypeError(f"observation {i - 1} is a {type(item).__name__}, not a str")
        wrapped = _wrap(item, width - indent)
        if not wrapped:
            raise ValueError(f"observation {i - 1} is blank")
        marker = _style(f"{i}.".rjust(indent - 1), _CYAN, color)
        out.append(f"{marker} {wrapped[0]}")
        out += [" " * indent + rest for rest in wrapped[1:]]
    return "\n".join(out)


def print_header(title: str, *, file: TextIO | None = None) -> None:
    """Print `format_header(title)` to `file`, styled if `file` is a terminal.

    Parameters
    ----------
    title : str
        The section title.
    file : file-like, optional
        Target stream; default ``sys.stdout`` (looked up at call time).

    Returns
    -------
    None

    Raises
    ------
    TypeError, ValueError
        As `format_header`.
    """
    file = sys.stdout if file is None else file
    print(format_header(title, color=use_color(file)), file=file)


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]], *,
                file: TextIO | None = None) -> None:
    """Print `format_table(headers, rows)` to `file`, styled if `file` is a terminal.

    Parameters
    ----------
    headers : sequence of str
        Column titles.
    rows : sequence of sequences
        Table rows, ``len(headers)`` cells each.
    file : file-like, optional
        Target stream; default ``sys.stdout`` (looked up at call time).

    Returns
    -------
    None

    Raises
    ------
    TypeError, ValueError
        As `format_table`.
    """
    file = sys.stdout if file is None else file
    print(format_table(headers, rows, color=use_color(file)), file=file)


def print_observations(lines: Sequence[str], *, title: str | None = None,
                       width: int = OBSERVATIONS_WIDTH, file: TextIO | None = None) -> None:
    """Print `format_observations(lines)` to `file`, styled if `file` is a terminal.

    Parameters
    ----------
    lines : sequence of str
        The observations.
    title : str, optional
        The heading. Default ``"What to notice"`` in the current language.
    width : int, optional
        Maximum display width of a line, in columns. Default 100.
    file : file-like, optional
        Target stream; default ``sys.stdout`` (looked up at call time).

    Returns
    -------
    None

    Raises
    ------
    TypeError, ValueError
        As `format_observations`.
    """
    file = sys.stdout if file is None else file
    print(format_observations(lines, title=title, width=width, color=use_color(file)),
          file=file)


#: argparse's own messages (Python's argparse module, 3.10 and later), marked here so that the
#: console's catalog translates a lecture's --help, usage and errors with the lecture's text.
_ARGPARSE_MESSAGES = (
    N_("usage: "), N_("options"), N_("positional arguments"),
    N_("show this help message and exit"), N_("%(prog)s: error: %(message)s\n"),
    N_("unrecognized arguments: %s"), N_("argument %(argument_name)s: %(message)s"),
    N_("expected one argument"), N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("ignored explicit argument %r"), N_("the following arguments are required: %s"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("invalid %(type)s value: %(value)r"),
)


class _Translated:
    """Inside ``with``, argparse's messages come from the console's catalog in the current
    language (argparse looks its ``_`` up at call time; the original is put back after)."""

    def __enter__(self):
        self._saved = argparse._
        argparse._ = _
        return self

    def __exit__(self, *exc):
        argparse._ = self._saved


class _LectureParser(argparse.ArgumentParser):
    """An ArgumentParser whose own messages (usage, --help, errors) follow the language."""

    def parse_known_args(self, args=None, namespace=None):
        with _Translated():
            return super().parse_known_args(args, namespace)

    def parse_args(self, args=None, namespace=None):
        with _Translated():
            return super().parse_args(args, namespace)

    def format_usage(self):
        with _Translated():
            return super().format_usage()

    def format_help(self):
        with _Translated():
            text = super().format_help()
        # argparse ends each section title with an ASCII colon; the console's "{title}:"
        # message gives the language's own (a full-width colon in Chinese)
        for group in self._action_groups:
            if group.title:
                text = text.replace(f"\n{group.title}:\n",
                                    "\n" + _("{title}:").format(title=group.title) + "\n")
        return text

    def error(self, message):
        with _Translated():
            super().error(message)


def lecture_parser(description: str | None = None, prog: str | None = None):
    """The command-line parser of a lecture script: ``-h/--help`` and ``--lang``; add the
    lecture's own options to it.

    Build it after the language is chosen (inside ``main`` or in the callable given to
    :func:`run_lecture`), with the description and option help already translated: argparse's
    own words (``usage:``, ``options``, error messages) are translated by the console's catalog.

    Parameters
    ----------
    description : str, optional
        One line: what the lecture is (its title).
    prog : str, optional
        The program name in usage lines; default the script's file name.

    Returns
    -------
    argparse.ArgumentParser
        Unknown options are errors (exit status 2, argparse's message); abbreviations of a
        lecture's own options are accepted (``--q`` for ``--quick``) when unambiguous.
    """
    with _Translated():
        parser = _LectureParser(prog=prog, description=description, add_help=False)
    parser.add_argument("-h", "--help", action="help",
                        help=_("show this help message and exit"))
    parser.add_argument("--lang", metavar="LANG",
                        help=_("language of the lecture's text: en or zh (default: from the "
                               "environment, LANGUAGE, LC_ALL, LC_MESSAGES or LANG)"))
    return parser


def save_path(text: str):
    """``--save PATH``'s argparse type: the path as a ``pathlib.Path``, refused at once
    (argparse's exit 2 with the usage line, before a long run starts) where the file could not
    be written at its end.

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` names a directory, or its directory does not exist or is not writable.
    """
    from pathlib import Path
    path = Path(text)
    parent = path.parent
    if path.is_dir():
        why = _("{path} is a directory; --save needs the path of a file").format(path=text)
    elif not parent.is_dir():
        why = _("{path}: its directory {parent} does not exist").format(path=text,
                                                                      parent=parent)
    elif not os.access(parent, os.W_OK | os.X_OK):
        why = _("{path}: its directory {parent} is not writable").format(path=text,
                                                                       parent=parent)
    else:
        return path
    raise argparse.ArgumentTypeError(why)


def _default_parser():
    """The parser of a lecture without options: its description is the first line of the
    running script's docstring."""
    doc = (getattr(sys.modules.get("__main__"), "__doc__", None) or "").strip()
    return lecture_parser(doc.splitlines()[0] if doc else None)


def _check_output_encoding(prog: str) -> None:
    """Exit with a clear message (status 1), before the lecture starts, when stdout's encoding
    cannot show the chosen language's text even through :data:`console.encoding.FALLBACKS`:
    the text checked is every message of every catalog domain loaded so far (the lecture's
    own among them) in that language, and the language's name."""
    lang = current_language()
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    text = LANGUAGES[lang] if lang != "en" else ""
    bad = unprintable(text, encoding)
    if not bad:
        bad = unprintable("".join(m for d in DOMAINS_MADE for m in d.messages(lang)), encoding)
    if bad:   # in English: the encoding cannot show the other language's own words
        shown = ", ".join(ascii(c) for c in bad[:5]) + (", ..." if len(bad) > 5 else "")
        sys.exit(f"{prog}: the output encoding {encoding!r} cannot show {lang} text ({shown}); "
                 "set PYTHONIOENCODING=utf-8 (or a UTF-8 locale), or choose --lang en")


def run_lecture(main, parser=None) -> None:
    """Call a lecture's ``main()`` after reading its command line, in the language asked for,
    ending quietly if the reader closes the pipe early.

    ``--lang LANG`` (``en`` or ``zh``) anywhere on the command line chooses the language of
    the lecture's text (:func:`console.i18n.set_language`) and is removed from ``sys.argv``
    before ``main`` runs, so a lecture's own options parse as before. Without it the
    environment decides (``LANGUAGE``, ``LC_ALL``, ``LC_MESSAGES``, ``LANG``). Then the whole
    command line is parsed by ``parser()`` (default: :func:`lecture_parser` with the script's
    first docstring line), built in that language: ``--help`` prints the usage and options
    and exits 0 without running the lecture, and an unknown option exits 2 with argparse's
    message, as does a ``--lang`` without a translation. Where the output's encoding lacks a
    character the lecture prints (``²`` in GBK, ``ᵀ`` in ASCII), stdout and stderr write its
    ASCII spelling from :data:`console.encoding.FALLBACKS` (``^2``, ``^T``); a UTF-8 output
    is unchanged. A language whose text the encoding cannot show even so
    (``PYTHONIOENCODING=ascii`` with ``--lang zh``) exits with status 1 and a message before
    the lecture starts, having printed nothing.

    ``python lectures/05_quantization_basics.py | head`` closes stdout after ten lines; Python
    would then print a BrokenPipeError traceback. This sends the rest of the output to
    /dev/null and exits with status 1, as command-line tools do (Python docs, "Note on SIGPIPE").

    Parameters
    ----------
    main : callable taking no arguments
        It may read its own options from ``sys.argv[1:]`` (``--lang`` removed).
    parser : callable returning an argparse.ArgumentParser, optional
        The lecture's parser, from :func:`lecture_parser` with its options added; called once
        the language is chosen, so that its help text is translated.
    """
    prog = os.path.basename(sys.argv[0])
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--lang")
    args, rest = pre.parse_known_args(sys.argv[1:])
    if args.lang is not None:
        try:
            set_language(args.lang)
        except ValueError:              # said in the environment's language, as argparse does
            choices = ", ".join(sorted({"en", *_ALIASES}))     # the short tags: en, zh
            (parser or _default_parser)().error(
                _("--lang: language '{tag}' has no translation; choose one of "
                  "{choices}").format(tag=args.lang, choices=choices))
    _check_output_encoding(prog)
    install_fallbacks(sys.stdout, sys.stderr)
    (parser or _default_parser)().parse_args(sys.argv[1:])
    sys.argv[1:] = rest
    try:
        main()
        sys.stdout.flush()
    except UnicodeEncodeError as err:
        sys.exit(f"\n{prog}: the output encoding {sys.stdout.encoding!r} cannot show "
                 f"{err.object[err.start:err.end]!a}; set PYTHONIOENCODING=utf-8 (or a UTF-8 "
                 "locale)")
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
