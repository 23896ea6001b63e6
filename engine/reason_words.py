"""A reader's reason (``collectors/reasons.py``) in words of the report language.

Reasons are written in English from the templates of ``templates/reasons.yaml``; for a
Chinese report each is matched against those templates and written again from the
Chinese one with the same values. Readers join several reasons with "; " and follow a
reason with its fix in parentheses, so a text is read as a run of reasons, each perhaps
with a fix; what no template matches (a library's own message, a value cut short) is
kept as it was written.
"""

from __future__ import annotations

import re
import string
from functools import lru_cache

_JOIN = {"en": "; ", "zh": "；"}
_WITH_FIX = re.compile(r"(?P<problem>.+) \((?P<fix>[^()]+)\)")
_WHERE = re.compile(r"(?P<where>[^\s:]+): (?P<rest>.+)")


def in_words(text: str, lang: str) -> str:
    """``text`` as the report in ``lang`` says it."""
    if lang == "en" or not isinstance(text, str) or not text:
        return text
    parts = text.split("; ")
    out, start = [], 0
    while start < len(parts):
        # the longest run of parts one reason covers: some reasons hold "; " themselves
        for end in range(len(parts), start, -1):
            said = _reason("; ".join(parts[start:end]))
            if said is not None:
                out.append(said)
                start = end
                break
        else:
            out.append(parts[start])
            start += 1
    return _JOIN["zh"].join(out)


def _reason(text: str) -> str | None:
    """One reason, perhaps with its fix or after the file it is about, in Chinese."""
    said = _template(text)
    if said is not None:
        return said
    found = _WITH_FIX.fullmatch(text)
    if found:
        problem = _reason(found["problem"])
        if problem is not None:
            fix = _template(found["fix"])
            return f"{problem}（{fix if fix is not None else found['fix']}）"
    found = _WHERE.fullmatch(text)
    if found:
        rest = _reason(found["rest"])
        if rest is not None:
            return f"{found['where']}：{rest}"
    return None


def _template(text: str) -> str | None:
    for pattern, chinese in _templates():
        found = pattern.fullmatch(text)
        if found:
            return chinese.format(**found.groupdict())
    return None


@lru_cache(maxsize=1)
def _templates() -> list[tuple[re.Pattern, str]]:
    """(pattern of an English template, its Chinese template), the most literal first, so
    that a template whose field could swallow another's words never wins over it."""
    from .bundled import load_yaml
    compiled = [(pattern(entry["en"]), entry["zh"], literal_length(entry["en"]))
                for entry in load_yaml("qcdoctor.templates", "reasons.yaml")]
    return [(p, zh) for p, zh, _ in sorted(compiled, key=lambda c: -c[2])]


def pattern(template: str) -> re.Pattern:
    """A regular expression matching what ``template.format(...)`` writes; each field a
    named group (a field named twice must hold the same text)."""
    out, seen = [], set()
    for literal, field, _, _ in string.Formatter().parse(template):
        out.append(re.escape(literal))
        if field is None:
            continue
        if field in seen:
            out.append(f"(?P={field})")
        else:
            seen.add(field)
            out.append(f"(?P<{field}>.*?)")
    return re.compile("".join(out), re.DOTALL)


def literal_length(template: str) -> int:
    return sum(len(literal) for literal, *_ in string.Formatter().parse(template))
