"""knowledge.md §16 R3.14, one voice in a report, as checks any test can run on a report:
no word written twice in a row ("training training"), no two actions doing the same thing
(one LUT bisection, not three), no action listed again as information still needed (nor,
in the report's "Information still needed", any action that is work to do rather than an
input to give), no rule's output shown while a later rule overrides it, and no request
for a fact the case gives."""

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


def problems(report: dict, case: dict | None = None) -> list[str]:
    """``case``: the case file's mapping, when the report came from one (its facts are
    never asked for)."""
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
    return found + _overridden_outputs(report) + _needed_problems(report, case) + \
        _comments_against_findings(report)


# the error kinds a code comment may name, and a sentence denying one ("not rounding",
# "no truncation", "rather than by conversion")
_KINDS = {"rounding": "rounding", "truncation": "truncat", "conversion": "conversion|requantiz",
          "accumulation": "accumulat"}
_DENIED = r"\b(?:not|no|never|rather than)\s+(?:\w+\s+){{0,2}}?(?:{kind})"


def _comments_against_findings(report: dict) -> list[str]:
    """An action's code comments never name the error kind its sentence, or its rule's
    finding, denies (English; a Chinese report is read through its English twin)."""
    if report.get("language") != "en":
        return []
    found = []
    for action in report["next_actions"]:
        comments = " ".join(line for line in (action.get("code") or "").splitlines()
                            if line.lstrip().startswith("#")).lower()
        said = " ".join([action.get("text", "")] + [f["text"] for f in report["findings"]
                                              if f["rule"] == action["rule"]]).lower()
        for kind, words in _KINDS.items():
            if re.search(_DENIED.format(kind=words), said) and \
                    re.search(words, re.sub(_DENIED.format(kind=words), "", comments)):
                found.append(f"{action['id']}: its code comments say {kind}, which its "
                             f"finding denies")
    return found


def _overridden_outputs(report: dict) -> list[str]:
    """A conclusion another one replaced speaks only as overridden evidence: what it asks
    for (its missing items) is not asked."""
    lost = {e["rule"] for e in report["conclusion"]["evidence"] if e.get("overridden")}
    return [f"{m['rule']} is overridden but still asks for {m['id']}"
            for m in report.get("missing", []) if m.get("rule") in lost]


# a case key named in a request: deploy.train.layout, `postprocess_in_model: yes`
_CASE_PATH = re.compile(r"\b(deploy(?:\.[a-z_]+)+)\b|`([a-z_]+):")


def _needed_problems(report: dict, case: dict | None) -> list[str]:
    from qcdoctor.engine.reports.view import view_model, waits_for_input
    needed = view_model(report)["needed"]
    work = {a["id"] for a in report["next_actions"] if not waits_for_input(a)}
    found = [f"work to do listed as information still needed: {item['id']}"
             for item in needed if item["id"] in work]
    if case is None:
        return found
    for item in needed:
        for match in _CASE_PATH.finditer(item["text"]):
            path = match.group(1) or match.group(2)
            if _given(case, path.split(".")):
                found.append(f"asks for {path}, which the case gives: {item['text'][:80]!r}")
        if item["id"] in case and case[item["id"]] not in (None, "unknown"):
            found.append(f"asks for {item['id']}, which the case gives")
    return found


def _given(case: dict, path: list[str]) -> bool:
    """A value (not a mapping still to fill) at ``path`` of the case."""
    value = case
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return False
        value = value[key]
    return not isinstance(value, dict)
