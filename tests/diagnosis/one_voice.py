"""knowledge.md §16 R3.14, one voice in a report, as checks any test can run on a report:
no word written twice in a row ("training training"), no two actions doing the same thing
(one LUT bisection, not three), no action listed again as information still needed, and
no rule's output shown while a later rule overrides it without saying so."""

from __future__ import annotations

import re

# a word doubled by filling a template ("training training post-processing"); Chinese
# has no spaces to find one by, so its reports are read through their English twins
_DOUBLED = re.compile(r"(?<![\w`])([A-Za-z]{3,})\s+\1\b(?![\w`])", re.I)


def _texts(report: dict) -> list[str]:
    texts = [e["text"] for e in report["conclusion"]["evidence"]]
    for section in ("findings", "pitfalls", "cautions", "next_actions", "missing", "ask"):
        texts += [item.get("text", "") for item in report.get(section, [])
                  if isinstance(item, dict)]
    return texts


def problems(report: dict) -> list[str]:
    found = []
    for text in _texts(report):
        doubled = _DOUBLED.search(text)
        if doubled:
            found.append(f"a word written twice: {doubled.group(0)!r} in {text[:80]!r}")
    seen: dict[tuple, str] = {}
    for action in report["next_actions"]:
        # one LUT bisection; one QuantAnalysis run of a comparison (the probe's fix trials,
        # which measure remedies, are another action)
        if action["kind"] == "lut_bisect":
            what = ("lut_bisect",)
        elif action["kind"] == "quant_analysis" and not action["id"].startswith("probe_"):
            what = (action.get("analysis_model_type"), action.get("baseline"),
                    action.get("analysis"))
        else:
            continue
        if what in seen:
            found.append(f"two actions do the same: {seen[what]} and {action['id']}")
        seen.setdefault(what, action["id"])
    asked = {item.get("id") for item in report.get("missing", []) if isinstance(item, dict)}
    again = asked & {a["id"] for a in report["next_actions"]}
    if again:
        found.append(f"actions listed again as information still needed: {sorted(again)}")
    return found
