"""The Markdown report, and the filters that keep case text from being read as markup."""

from __future__ import annotations

import re
from functools import lru_cache

from qcdoctor.engine.reports.view import audit_view, view_model
from qcdoctor.safe_text import one_line, visible
from qcdoctor.templating import new_environment
from qcdoctor.text import code_spans

# Case text goes on one line, with what would act on the reader (terminal escapes, bidi
# controls) shown harmlessly: the one policy of every output (safe_text.py). The filters
# below apply it to each value; a whole page goes through ``visible`` once more when
# rendered (the templates' own text holds nothing it changes), so a value shown without
# a filter is covered too.
#
# Every string from a case reaches the reports through the filters below, so that no
# renderer (a Markdown viewer, or Python-Markdown for --format html) ever takes user
# text for markup: & and < become entities (no tag, no entity can start), Markdown
# specials are backslashed (only escapes both CommonMark and Python-Markdown honour:
# "[" is enough to stop links and images), and code stays code.
_ENTITIES = {"&": "&amp;", "<": "&lt;", "~": "&#126;"}
_BACKSLASHED = set("\\`*[")
_LINE_START = re.compile(r"^([#+>-]|\d+[.)])")


def _md_prose(text: str, at_start: bool = True, cell: bool = False) -> str:
    out = []
    for i, ch in enumerate(text):
        if ch in _ENTITIES:
            out.append(_ENTITIES[ch])
        elif ch in _BACKSLASHED or (cell and ch == "|"):
            out.append("\\" + ch)
        elif ch == "_" and not (0 < i < len(text) - 1 and text[i - 1].isalnum()
                                and text[i + 1].isalnum()):
            out.append("\\_")                 # intraword _ is never emphasis
        else:
            out.append(ch)
    escaped = "".join(out)
    if at_start:                               # a list item or heading only at the start
        escaped = _LINE_START.sub(lambda m: m.group(1)[:-1] + "\\" + m.group(1)[-1], escaped)
    return escaped


def md_text(value, cell: bool = False) -> str:
    """User text: every character shown as it is."""
    return _md_prose(one_line(value), cell=cell)


def md_message(value, cell: bool = False) -> str:
    """A rendered rule message: its `code` spans (values in them cannot hold a backtick,
    see common/text.py) stay code; everything else is shown as it is."""
    out = []
    for i, (part, code) in enumerate(code_spans(one_line(value))):
        if code and part.strip() and not (cell and "|" in part):
            out.append(f"`{part}`")            # code span content is literal everywhere
        elif code:
            out.append(_md_prose(f"`{part}`", at_start=False, cell=cell))
        else:
            out.append(_md_prose(part, at_start=i == 0, cell=cell))
    return "".join(out)


def md_code(value) -> str:
    return f"`{one_line(value).replace('`', chr(39))}`"


def md_fenced(code: str, lang: str = "python") -> str:
    """A fenced block no line of ``code`` can close: the fence outruns its backticks."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{code}{fence}"


FILTERS = {"t": md_message, "u": md_text, "c": md_code, "fenced": md_fenced,
           "cell": lambda v: md_message(v, cell=True),
           # user text (layer names) in a table cell
           "ucell": lambda v: md_text(v, cell=True)}


@lru_cache(maxsize=1)
def _markdown_environment():
    return new_environment(filters=FILTERS)


def render_markdown(report: dict) -> str:
    template = _markdown_environment().get_template("report.md.j2")
    return visible(template.render(**view_model(report)))


def render_audit_markdown(report: dict) -> str:
    view = view_model(report)
    view.update(audit_view(report))
    return visible(_markdown_environment().get_template("audit.md.j2").render(**view))
