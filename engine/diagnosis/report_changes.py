"""What changed between two reports of one case (before and after a fix), and a one-line
verdict: fixed, moved, worse, better, changed or unchanged.

Only what differs is kept; ``regressions`` lists what got worse (a stage turned abnormal,
a checklist item turned failed, a new pitfall), which ``--fail-on regression`` acts on.
"""

from __future__ import annotations

from qcdoctor.engine.diagnosis.plot_series import stage_series
from qcdoctor.engine.reports.view import facts_of

DIFF_SCHEMA = "qcdoctor/diff-v1"
_LAYER_FIELDS = {"layer_origin": ("layer", "row", "pattern", "op_type", "cosine"),
                 "error_kind": ("layer", "kind"),
                 "sensitivity_summary": ("top_ops", "lut_ops", "dominant")}


def _side(report: dict) -> dict:
    c = report["conclusion"]
    return {"case": report["case"]["path"],
            "conclusion": {"stage": c["stage"], "determined": c["determined"],
                           "suspect": c["suspect"] or ""},
            "abnormal": [f["stage"] for f in facts_of(report, "stage") if f["status"] == "abnormal"]}


def stage_changes(old: dict, new: dict) -> list[dict]:
    """Every chain stage whose status or value differs, in chain order, with the delta."""
    out = []
    for a, b in zip(stage_series(old["facts"]), stage_series(new["facts"]), strict=True):
        if (a["status"], a["value"]) == (b["status"], b["value"]):
            continue
        delta = b["value"] - a["value"] if a["value"] is not None and b["value"] is not None \
            else None
        out.append({"stage": a["stage"], "metric": b["metric"] or a["metric"] or "",
                    "old_status": a["status"], "new_status": b["status"],
                    "old_value": a["value"], "new_value": b["value"], "delta": delta})
    return out


def layer_changes(old: dict, new: dict) -> list[dict]:
    """Origin layer, error kind and worst sensitivity ops per QuantAnalysis folder/output."""
    out = []
    for ftype, fields in _LAYER_FIELDS.items():
        def keyed(report, fields=fields, ftype=ftype):
            found = {}              # the first per folder: a second source's kind comes after
            for f in facts_of(report, ftype):
                found.setdefault((f["analysis"], f.get("output", ""), f.get("metric", "")),
                                 {k: f.get(k) for k in fields})
            return found
        before, after = keyed(old), keyed(new)
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                out.append({"kind": ftype, "analysis": key[0], "output": key[1],
                            "old": before.get(key), "new": after.get(key)})
    return out


def checklist_changes(old: dict, new: dict) -> list[dict]:
    before = {c["id"]: c["status"] for c in old["checklist"]}
    after = {c["id"]: c["status"] for c in new["checklist"]}
    # an item only now (or no longer) on the list, unjudged either way, says nothing
    silent = {None, "unknown", "not_applicable"}
    return [{"item": item, "old": before.get(item), "new": after.get(item)}
            for item in sorted(set(before) | set(after)) if before.get(item) != after.get(item)
            and not {before.get(item), after.get(item)} <= silent]


def _gone_and_new(old: list[dict], new: list[dict], text: str) -> dict:
    """Items (by id, with their ``text`` in the report's words) only before, only after."""
    before, after = {i["id"]: i[text] for i in old}, {i["id"]: i[text] for i in new}
    return {"gone": [{"id": k, "text": v} for k, v in before.items() if k not in after],
            "new": [{"id": k, "text": v} for k, v in after.items() if k not in before]}


def _consistency(report: dict) -> dict | None:
    c = report["consistency"]
    return c and {k: c.get(k) for k in ("applicable", "level", "requires_retrain",
                                        "prerequisites_met")}


def diff_reports(old: dict, new: dict) -> dict:
    stages = stage_changes(old, new)
    checklist = checklist_changes(old, new)
    pitfalls = _gone_and_new(old["pitfalls"], new["pitfalls"], "text")
    regressions = ([{"kind": "stage", "id": s["stage"], "old": s["old_status"],
                     "new": s["new_status"]} for s in stages
                    if s["new_status"] == "abnormal" and s["old_status"] != "abnormal"]
                   + [{"kind": "checklist", "id": c["item"], "old": c["old"], "new": c["new"]}
                      for c in checklist if c["new"] == "fail" and c["old"] != "fail"]
                   + [{"kind": "pitfall", "id": p["id"], "old": None, "new": "reported"}
                      for p in pitfalls["new"]])
    diff = {
        "schema": DIFF_SCHEMA,
        "old": _side(old),
        "new": _side(new),
        "stages": stages,
        "layers": layer_changes(old, new),
        "checklist": checklist,
        "pitfalls": pitfalls,
        "consistency": ({"old": _consistency(old), "new": _consistency(new)}
                        if _consistency(old) != _consistency(new) else None),
        "missing": _gone_and_new(old["missing"], new["missing"], "question"),
        "regressions": regressions,
    }
    diff["verdict"] = verdict(diff)
    return diff


def _changed(diff: dict) -> bool:
    return bool(diff["old"]["conclusion"] != diff["new"]["conclusion"] or diff["stages"]
                or diff["layers"] or diff["checklist"] or diff["consistency"]
                or any(diff[k]["gone"] or diff[k]["new"] for k in ("pitfalls", "missing")))


def verdict(diff: dict) -> dict:
    """The one-line conclusion as data: kind and what it is about (rendered per language)."""
    old_stage = diff["old"]["conclusion"]["stage"]
    new_stage = diff["new"]["conclusion"]["stage"]
    back = [s["stage"] for s in diff["stages"]
            if s["old_status"] == "abnormal" and s["new_status"] == "normal"]
    if not _changed(diff):
        return {"kind": "unchanged"}
    if new_stage != old_stage and new_stage not in ("none", "undetermined") \
            and old_stage != "undetermined":
        return {"kind": "moved", "stage": new_stage}
    if back and not diff["new"]["abnormal"] and not diff["regressions"]:
        return {"kind": "fixed", "stages": back}
    if new_stage == "none" and old_stage != "none":
        return {"kind": "fixed", "stages": []}
    if diff["regressions"]:
        return {"kind": "worse", "items": diff["regressions"]}
    if back or diff["pitfalls"]["gone"] or any(
            c["old"] == "fail" for c in diff["checklist"]):
        return {"kind": "better", "stages": back}
    return {"kind": "changed"}
