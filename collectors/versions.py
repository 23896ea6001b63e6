"""Version strings: parsing and the strategy prerequisites of knowledge.md §7."""

from __future__ import annotations

import re

# A version as pip prints it. The former ``^\d+(\.\d+)*([.+-]?[0-9A-Za-z][0-9A-Za-z.+-]*)?$``
# let its parts match the same characters, so a failing match took quadratic time; this
# one takes the same strings with one way to match each (a single leading digit).
VERSION_RE = re.compile(r"\d(?:[.+\-]?[0-9A-Za-z][0-9A-Za-z.+\-]*)?\Z")

# package -> (minimum, how binding it is)
REQUIREMENTS = {"hbdk4-compiler": ("4.4.2", "hard"),
                "horizon-plugin-pytorch": ("3.1.2", "recommended"),
                "horizon-plugin-profiler": ("", "none")}


def version_tuple(text: str) -> tuple[int, ...] | None:
    """Leading numeric release of a version (``4.4.2.post1`` -> (4, 4, 2))."""
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def at_least(text: str, minimum: str) -> bool | None:
    have, need = version_tuple(text), version_tuple(minimum)
    if have is None or need is None:
        return None
    width = max(len(have), len(need))
    return have + (0,) * (width - len(have)) >= need + (0,) * (width - len(need))


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
