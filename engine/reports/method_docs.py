"""The project's documentation pages that rules cite, shipped with the package.

A rule's reference ``docs/method.md#reading-the-chain`` names a page and one of its
sections (the anchor is the heading as GitHub and most Markdown viewers write it); this
module finds the installed page and the section's title so ``rules explain`` can print
where to read.
"""

from __future__ import annotations

import re
from functools import lru_cache

_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")


def anchor_of(heading: str) -> str:
    """The anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"\s", "-", text)


@lru_cache(maxsize=None)
def sections(page: str) -> dict[str, str]:
    """anchor -> heading text of a shipped page (``method.md``); empty when it is missing."""
    from qcdoctor.package_data import package_files
    try:
        text = (package_files("qcdoctor.docs") / page).read_text(encoding="utf-8")
    except (OSError, TypeError, ImportError):
        return {}
    found, fenced = {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else _HEADING.match(line)
        if heading:
            found.setdefault(anchor_of(heading.group(1)), heading.group(1))
    return found


def page_location(page: str) -> str:
    from qcdoctor.package_data import package_files
    return str(package_files("qcdoctor.docs") / page)


def describe(reference: str, *, linked: bool = False) -> str:
    """``reference`` with the section's title and where the page is installed; a web page
    as it is. ``linked``: a Markdown link from a page beside it in docs/ instead (the
    rules reference is committed there, so it names no machine's path)."""
    if not reference.startswith("docs/"):
        return f"<{reference}>" if linked else reference
    page, _, anchor = reference[len("docs/"):].partition("#")
    title = sections(page).get(anchor)
    if linked:
        return f"[{title or reference}]({page}#{anchor})" if anchor else f"[{page}]({page})"
    where = page_location(page)
    return f"{reference} (“{title}”, {where})" if title else f"{reference} ({where})"
