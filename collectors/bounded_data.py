"""The one JSON reader and the one TOML reader for files qcdoctor did not write itself
(dump sidecars, qcdoctor.toml / pyproject.toml, reports given back to ``diff``).

Python's json and tomllib recurse once per nesting level: a file of 100,000 ``[`` ends in
a RecursionError, and tomllib takes quadratic time and memory on a long dotted key. So the
text is measured before it is parsed: nesting (brackets outside strings; for TOML also
each part of a dotted key and of a table header) is refused past ``limits.YAML_DEPTH``
levels, the same limit as YAML's, and integers too long to be a number past
``MAX_DIGITS`` digits. Every refusal is a ``DataRefused`` naming the line, with a reason
in both languages (``collectors/reasons.py``); callers make it an error of their file or
an artifact_problem.
"""

from __future__ import annotations

import re
from itertools import accumulate

from qcdoctor.collectors import limits
from qcdoctor.collectors.reasons import Reason, reason

MAX_DIGITS = limits.NUMBER_DIGITS   # an integer longer than this is no float (1.8e308 at most)

# a JSON string, escapes included (an unterminated one is left to the parser's message)
_JSON_STRING = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"')
_JSON_TOKEN = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[\[\]{}]')
_STEP = [0] * 256
_STEP[ord("[")] = _STEP[ord("{")] = 1
_STEP[ord("]")] = _STEP[ord("}")] = -1
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
# a JSON string (skipped) or an integer of more digits than a float holds
_JSON_LONG_NUMBER = re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"|[0-9]{%d,}' % (MAX_DIGITS + 1))
_LONG_NUMBER = re.compile(r"[0-9]{%d,}" % (MAX_DIGITS + 1))


class DataRefused(ValueError):
    """A JSON or TOML text that is not read: ``problem`` and ``fix`` are reasons, ``line``
    where it is (None when unknown)."""

    def __init__(self, problem: Reason, line: int | None = None, fix: Reason | None = None):
        super().__init__(problem)
        self.problem, self.line, self.fix = problem, line, fix


def _too_deep(line: int) -> DataRefused:
    depth = limits.YAML_DEPTH
    return DataRefused(reason("nested more than {depth} levels deep (limit: {depth} levels)",
                              depth=depth), line,
                       reason("write the values flat; no real file nests this deep"))


def _line_of(text: str, position: int) -> int:
    return text.count("\n", 0, position) + 1


def check_json_depth(text: str, depth: int | None = None) -> None:
    """DataRefused when ``text`` nests brackets deeper than ``depth`` (default: the YAML
    limit) outside strings; cheap for megabytes of text."""
    depth = limits.YAML_DEPTH if depth is None else depth
    brackets = _NOT_BRACKETS.sub("", _JSON_STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets.encode("ascii"))), default=0) <= depth:
        return
    level = 0                       # where: the slow scan, only for a text refused anyway
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in "[{":
            level += 1
            if level > depth:
                raise _too_deep(_line_of(text, match.start()))
        elif token in "]}":
            level -= 1
    raise _too_deep(None)


class _LongNumber(ValueError):
    pass


def _int(text: str) -> int:
    if len(text) > MAX_DIGITS + (text[0] == "-"):
        raise _LongNumber(text)
    return int(text)


def _long_number(text: str, digits: int, pattern: re.Pattern = _LONG_NUMBER) -> DataRefused:
    found = next((m for m in pattern.finditer(text) if m.group()[0] != '"'), None)
    return DataRefused(reason("a number of {digits} digits, too large for any number",
                              digits=digits),
                       _line_of(text, found.start()) if found else None,
                       reason("write a number a float can hold (at most about 1.8e308)"))


def load_json(text: str):
    """The value of a JSON text, within the limits; DataRefused otherwise (bad syntax too)."""
    import json
    check_json_depth(text)
    try:
        return json.loads(text, parse_int=_int)
    except _LongNumber as exc:
        raise _long_number(text, len(str(exc).lstrip("-")), _JSON_LONG_NUMBER) from None
    except json.JSONDecodeError as exc:
        raise DataRefused(reason("not valid JSON: {error}", error=exc.msg), exc.lineno,
                          reason("check the line it names")) from None
    except (ValueError, RecursionError) as exc:     # e.g. more digits than int() takes
        raise DataRefused(reason("not valid JSON: {error}", error=str(exc)), None,
                          reason("check the line it names")) from None


# ---------------------------------------------------------------------------------- TOML

def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:         # Python 3.10
        import tomli as tomllib
    return tomllib


def load_toml(text: str) -> dict:
    """The tables of a TOML text, within the limits; DataRefused otherwise (bad syntax too)."""
    line = toml_too_deep(text, limits.YAML_DEPTH)
    if line is not None:
        raise _too_deep(line)
    try:
        data = _toml().loads(text)
    except RecursionError:              # nesting the scan did not see: refused all the same
        raise _too_deep(None) from None
    except ValueError as exc:           # TOMLDecodeError, or more digits than int() takes
        raise DataRefused(reason("not valid TOML: {error}", error=str(exc)), None,
                          reason("check the line it names")) from None
    pending = [data]                    # integers too large for a float: as JSON's
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, int) and not isinstance(value, bool) and \
                abs(value) >= 10 ** MAX_DIGITS:
            raise _long_number(text, len(str(abs(value))))
    return data


_TOML_MARKS = re.compile(r"[\n#\"'\[\]{}.=,]")


def toml_too_deep(text: str, depth: int) -> int | None:
    """The line where ``text`` nests deeper than ``depth``, counting each bracket of a
    value and each part of a dotted key or table header; None when it does not. Strings
    and comments are skipped as TOML reads them."""
    i, n, line = 0, len(text), 1
    stack: list[tuple[str, int]] = []  # open [ and { of values: (bracket, depth inside it)
    header = 0                          # parts of the last table header: its keys' base
    parts = 0                           # parts of the key being read
    key, in_header = True, False        # reading a key (else a value); inside [a.b]
    while i < n:
        if not (key and parts == 0):    # only these characters matter until the next key
            found = _TOML_MARKS.search(text, i)
            if found is None:
                break
            i = found.start()
        char = text[i]
        if char == "\n":
            line += 1
            if not stack:
                key, parts, in_header = True, 0, False
        elif char == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif char in "\"'":
            end = _string_end(text, i)
            line += text.count("\n", i, end)
            if key and parts == 0:
                parts = 1                   # a quoted key
            i = end
            continue
        elif key and char == "[" and not stack and parts == 0 and not in_header:
            in_header, header, parts = True, 0, 0
            if text.startswith("[[", i):
                i += 1
        elif in_header and char == "]":
            header, parts, in_header, key = parts, 0, False, False
            if text.startswith("]]", i):
                i += 1
        elif key and char == ".":
            parts += 1
        elif key and char == "=":
            key = False
        elif key and not char.isspace() and parts == 0:
            parts = 1
        elif not key and char in "[{":
            stack.append((char, (stack[-1][1] if stack else header) + parts + 1))
            parts = 0
            key = char == "{"
        elif not key and char in "]}" and stack:
            stack.pop()
        elif char == "," and stack and stack[-1][0] == "{":
            key, parts = True, 0
        if (stack[-1][1] if stack else (0 if in_header else header)) + parts > depth:
            return line
        i += 1
    return None


_TOML_STRINGS = {
    '"""': re.compile(r'"""[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*"{3,5}', re.S),
    "'''": re.compile(r"'''[^']*(?:'(?!'')[^']*)*'{3,5}"),
    '"': re.compile(r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'),
    "'": re.compile(r"'[^'\n]*'"),
}


def _string_end(text: str, start: int) -> int:
    """Just after the TOML string that starts at ``start`` (basic or literal, one line or
    multi-line); at the end of its line (or text) when it never closes: tomllib says why."""
    mark = text[start]
    quote = mark * 3 if text.startswith(mark * 3, start) else mark
    found = _TOML_STRINGS[quote].match(text, start)
    if found:
        return found.end()
    end = text.find("\n", start) if len(quote) == 1 else -1
    return len(text) if end < 0 else end
