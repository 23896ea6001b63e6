"""What text from a case may show, in every output: the terminal view, error messages,
Markdown, HTML, SARIF, JUnit and JSON all go through this one policy.

Case text (titles, folder and file names, layer names, keys of case.yaml, qcdoctor.toml
or an answers file) may hold characters that act on whoever reads it rather than being
read: C0 and C1 control characters and DEL (a terminal obeys ESC sequences: they retitle
the window, clear the screen, write hyperlinks) and the bidirectional controls (they
reorder what is shown: U+202E before "gnp.exe" makes it read "exe.png"). Each is shown as U+FFFD;
line feed and tab are kept where the output has lines. A lone surrogate (a byte of a
file name that is not UTF-8, as Python decodes it) is shown as its escape, ``\\udcff``:
the name stays recognisable and any encoder can write it.

JSON keeps the data as it is and escapes the same characters in its text instead
(``json_text``): a reader of the file sees ``\\u202e``, a program reading it gets the
original string back.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"
# C0 controls but tab and line feed, DEL and the C1 controls
_CONTROLS = "\x00-\x08\x0b-\x1f\x7f-\x9f"
# ALM, LRM, RLM, the embeddings and overrides (LRE..RLO) and the isolates (LRI..PDI)
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_SURROGATES = "\ud800-\udfff"
_HIDDEN = re.compile(f"[{_CONTROLS}{BIDI_CONTROLS}{_SURROGATES}]")
_HIDDEN_IN_A_LINE = re.compile(f"[\t\n{_CONTROLS}{BIDI_CONTROLS}{_SURROGATES}]")
# what JSON text escapes beyond what json.dumps does (it escapes only C0 and " and \)
_JSON_ESCAPED = re.compile(f"[\x7f-\x9f{BIDI_CONTROLS}{_SURROGATES}]")


def _shown(match: re.Match) -> str:
    char = match.group()
    return f"\\u{ord(char):04x}" if "\ud800" <= char <= "\udfff" else REPLACEMENT


def visible(value, *, lines: bool = True) -> str:
    """``value`` as text that only shows: controls, DEL and bidi controls as U+FFFD, lone
    surrogates as ``\\udcff``; line feeds and tabs kept when ``lines``, else replaced too."""
    text = value if type(value) is str else str(value)
    return (_HIDDEN if lines else _HIDDEN_IN_A_LINE).sub(_shown, text)


def one_line(value) -> str:
    """``value`` on one line (every run of white space one space), then ``visible``."""
    return visible(" ".join(str(value).split()))


def visible_data(value):
    """A copy of nested lists, tuples and dicts with every string (keys too) ``visible``."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible_data(k): visible_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(visible_data(v) for v in value)
    return value


def json_text(text: str) -> str:
    """JSON text (from ``json.dumps(..., ensure_ascii=False)``) with DEL, the C1 and bidi
    controls and lone surrogates written as ``\\uXXXX`` escapes: the same data, shown
    harmlessly. Outside strings JSON text is ASCII, so every match is inside one."""
    return _JSON_ESCAPED.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


# the encoding error handler of a stdout that cannot hold every character (an ASCII
# locale): stdout carries JSON (--format json, jsonl, sarif), so its escapes are JSON's
JSON_ESCAPES = "qcdoctor.json_escape"


def _json_escape(error: UnicodeEncodeError) -> tuple[str, int]:
    """What the encoding cannot hold as JSON's escapes: ``\\u00e9``, and a character
    beyond the BMP as its surrogate pair (``\\ud83d\\ude80``), never Python's
    ``\\U0001f680`` or ``\\xe9``, which no JSON reader takes. Text shows them as escapes
    all the same."""
    out = []
    for char in error.object[error.start:error.end]:
        code = ord(char)
        if code > 0xFFFF:
            code -= 0x10000
            out.append(f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}")
        else:
            out.append(f"\\u{code:04x}")
    return "".join(out), error.end


def json_escapes() -> str:
    """The name of the JSON-escaping error handler, registered on first use."""
    import codecs
    try:
        codecs.lookup_error(JSON_ESCAPES)
    except LookupError:
        codecs.register_error(JSON_ESCAPES, _json_escape)
    return JSON_ESCAPES
