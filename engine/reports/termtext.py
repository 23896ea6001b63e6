"""Text for a terminal: display width (CJK characters take two columns) and wrapping at
word boundaries, where Chinese may break between any two characters."""

from __future__ import annotations

import re
import shutil
import unicodedata

# a word, a run of spaces, or one wide character (which may end a line on its own)
_TOKEN = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]|\s+|[^\s\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]+")
_NO_LINE_START = set("，。、；：！？）》」』,.;:!?)")


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 0 if unicodedata.combining(c)
               else 1 for c in text)


# the widths text is laid out for: COLUMNS or a terminal beyond these (COLUMNS=999999999
# would have every line padded to a gigabyte) are taken as the nearest
MIN_WIDTH, MAX_WIDTH = 20, 512


def clamp_width(columns, default: int = 80) -> int:
    """``columns`` within MIN_WIDTH..MAX_WIDTH; ``default`` when it is no number."""
    try:
        columns = int(columns)
    except (TypeError, ValueError, OverflowError):
        columns = default
    return min(MAX_WIDTH, max(MIN_WIDTH, columns))


def terminal_width(default: int = 80) -> int:
    """The width to lay text out for, the one place every width is read: COLUMNS when it
    is a positive number (0, -5 or abc are ignored, as shutil does), else the terminal's,
    else ``default``; clamped to MIN_WIDTH..MAX_WIDTH."""
    return clamp_width(shutil.get_terminal_size((default, 24)).columns)


def wrap(text: str, width: int) -> list[str]:
    """``text`` as lines of at most ``width`` columns, continuation lines indented like the
    first; a word longer than a line is cut. Chinese punctuation never starts a line (it
    may overhang by one character instead)."""
    indent = text[:len(text) - len(text.lstrip(" "))]
    lines: list[str] = []
    line = indent
    for token in _TOKEN.findall(text[len(indent):]):
        if token.isspace():
            line += " " if line.strip() else ""
            continue
        overhang = len(token) == 1 and token in _NO_LINE_START
        if line.strip() and display_width(line) + display_width(token) > width and not overhang:
            lines.append(line.rstrip())
            line = indent
        while not line.strip() and display_width(line) + display_width(token) > width:
            cut = _cut(token, width - display_width(line))
            lines.append(line + token[:cut])
            token = token[cut:]
        line += token
    lines.append(line.rstrip())
    return lines


def _cut(token: str, room: int) -> int:
    """How many characters of ``token`` fit in ``room`` columns (at least one)."""
    used = 0
    for i, char in enumerate(token):
        used += display_width(char)
        if used > room:
            return max(1, i)
    return len(token)
