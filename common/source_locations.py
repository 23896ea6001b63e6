"""Where a fact was read, as data: its ``locations``, a list of ``{"file", "line"}``.

``file`` is the path relative to the case folder, in posix form (``case.yaml``,
``deploy/compile_model.py``, ``qa_convert/compare_per_layer_out.txt``); ``line`` the
1-based line in that file, or None when the fact stands for the whole file. The
collectors carry them beside the provenance text (``source``, which is for people and is
never read back: a name may hold ``;``, spaces or `` line 3``). A file outside the case
folder (allowed with --allow-outside) or named by an absolute path has no location: a
location never leads out of the case folder. Facts from this machine, from rules or
derived from other facts have none either.
"""

from __future__ import annotations

import posixpath


def case_relative(file) -> str | None:
    """``file`` (a path relative to the case folder, as given) in posix form, normalised;
    None when it is absolute, empty or leads out of the case folder."""
    text = "" if file is None else str(file)
    if not text or "\x00" in text or text.startswith("/"):
        return None
    normal = posixpath.normpath(text)
    if normal == "." or normal == ".." or normal.startswith("../"):
        return None
    return normal


def at(file, line: int | None = None) -> list[dict]:
    """The location of ``file`` (relative to the case folder) at ``line``, as a list of
    one; empty when the file has no location (see ``case_relative``)."""
    rel = case_relative(file)
    if rel is None:
        return []
    valid = isinstance(line, int) and not isinstance(line, bool) and line > 0
    return [{"file": rel, "line": line if valid else None}]


def case_key(case, key: str | None = None) -> list[dict]:
    """Where ``key`` (a key path such as ``deploy.train.mean``) stands in the case file;
    the file alone when the key is not written there (its default applies) or not given."""
    if getattr(case, "source_name", "case.yaml") == "":
        return []                   # a case built in Python: no file to point at
    name = case.file.name if getattr(case, "file", None) else "case.yaml"
    return at(name, case.lines.get(key) if key else None)


def joined(*groups) -> list[dict]:
    """The locations of ``groups`` (lists of locations, or facts carrying them), in
    order, each once."""
    seen: dict[tuple, dict] = {}
    for group in groups:
        if isinstance(group, dict):
            group = group.get("locations") or []
        for place in group or ():
            seen.setdefault((place["file"], place["line"]), place)
    return list(seen.values())


def fact_locations(facts) -> list[tuple[str, int | None]]:
    """(file, line or None) of every location the facts carry, in order, each once; a
    location that is not a case-relative path (a report edited by hand) is left out."""
    found: dict[tuple[str, int | None], None] = {}
    for fact in facts:
        if not isinstance(fact, dict):
            continue
        for place in fact.get("locations") or ():
            if not isinstance(place, dict):
                continue
            for loc in at(place.get("file"), place.get("line")):
                found.setdefault((loc["file"], loc["line"]), None)
    return list(found)
