"""Version strings: parsing and the strategy prerequisites of knowledge.md §7.

Versions compare as PEP 440 (``packaging.version``): ``4.4.2rc1`` is below ``4.4.2``,
``4.4.2.post1`` above it (knowledge.md §7 rev 2).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packaging.version import Version

# A version as pip prints it. The former ``^\d+(\.\d+)*([.+-]?[0-9A-Za-z][0-9A-Za-z.+-]*)?$``
# let its parts match the same characters, so a failing match took quadratic time; this
# one takes the same strings with one way to match each (a single leading digit).
VERSION_RE = re.compile(r"\d(?:[.+\-]?[0-9A-Za-z][0-9A-Za-z.+\-]*)?\Z")

# package -> (minimum, how binding it is)
REQUIREMENTS = {"hbdk4-compiler": ("4.4.2", "hard"),
                "horizon-plugin-pytorch": ("3.1.2", "recommended"),
                "horizon-plugin-profiler": ("", "none")}


def parse_version(text: str) -> Version | None:
    # imported here: reading a case file checks a version's form, not its order
    from packaging.version import InvalidVersion, Version
    try:
        return Version((text or "").strip())
    except InvalidVersion:
        return None


def at_least(text: str, minimum: str) -> bool | None:
    have, need = parse_version(text), parse_version(minimum)
    if have is None or need is None:
        return None
    return have >= need


def version_fact(package: str, version: str | None, source: str) -> dict:
    minimum, requirement = REQUIREMENTS[package]
    meets = "unknown"
    if version and minimum:
        ok = at_least(version, minimum)
        meets = "unknown" if ok is None else ("yes" if ok else "no")
    elif version:
        meets = "yes"
    return {"type": "version", "package": package, "version": version or "",
            "known": bool(version), "requirement": requirement, "minimum": minimum,
            "meets": meets, "source": source}
