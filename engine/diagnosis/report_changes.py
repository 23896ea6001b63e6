"""What changed between two reports of one case (before and after a fix), and a one-line
verdict: fixed, moved, worse, better, changed or unchanged.

Only what differs is kept; ``regressions`` lists what got worse (a stage turned abnormal,
a stage's metric moved the wrong way beyond the tolerance, a checklist item turned
failed, a new pitfall), which ``--fail-on regression`` acts on. A stage's metric is
compared only under one metric name, in the direction and with the tolerance the
reports used for it (its stage facts).
"""

from __future__ import annotations

from qcdoctor.collectors.metric_direction import metric_key
from qcdoctor.engine.diagnosis.plot_series import stage_series
from qcdoctor.engine.reports.view import facts_of

DIFF_SCHEMA = "qcdoctor/diff-v1"
_LAYER_FIELDS = {"layer_origin": ("layer", "row", "pattern", "op_type", "cosine"),
                 "error_kind": ("layer", "kind"),
                 "sensitivity_summary": ("top_ops", "lut_ops", "dominant")}


def _side(report: dict) -> dict:
    c = report["conclusion"]
    return {"case": report["case"]["path"], "language": report["language"],
            "conclusion": {"stage": c["stage"], "determined": c["determined"],
                           "suspect": c["suspect"] or ""},
            "abnormal": [f["stage"] for f in facts_of(report, "stage") if f["status"] == "abnormal"]}


def stage_changes(old: dict, new: dict) -> list[dict]:
    """Every chain stage whose status or value differs, in chain order, with the delta
    and its trend: worse or better beyond the tolerance, within it, or None when the
    values cannot be compared (one missing, another metric name, no direction known)."""
    before, after = stage_series(old["facts"]), stage_series(new["facts"])
    out = []
    for a, b in zip(before, after, strict=True):
        if (a["status"], a["value"]) == (b["status"], b["value"]):
            continue
        delta = b["value"] - a["value"] if a["value"] is not None and b["value"] is not None \
            else None
        metric = b["metric"] or a["metric"] or ""
        direction, tolerance = _metric_reading(metric, before + after, (b, a))
        out.append({"stage": a["stage"], "metric": metric,
                    "old_status": a["status"], "new_status": b["status"],
                    "old_value": a["value"], "new_value": b["value"], "delta": delta,
                    "direction": direction, "tolerance": tolerance,
                    "trend": _trend(delta if _same_metric(a, b) else None, direction,
                                    tolerance)})
    return out


def _same_metric(a: dict, b: dict) -> bool:
    return bool(a["metric"] and b["metric"]) and metric_key(a["metric"]) == metric_key(b["metric"])


def _metric_reading(metric: str, stages: list[dict], own: tuple) -> tuple[str | None, float | None]:
    """The direction (higher / lower is better) and tolerance the reports compared
    ``metric`` with: the stage's own (after, else before), else those of another stage
    of that metric (a baseline stage is compared with nothing itself)."""
    if not metric:
        return None, None
    same = [s for s in (*own, *stages) if s["metric"] and metric_key(s["metric"]) == metric_key(metric)]
    direction = next((s["direction"] for s in same if s["direction"]), None)
    tolerance = next((s["tolerance"] for s in same if s["tolerance"] is not None), None)
    return direction, tolerance


def _trend(delta: float | None, direction: str | None, tolerance: float | None) -> str | None:
    """worse / better when ``delta`` is beyond ``tolerance`` in ``direction``'s terms,
    within when it is not; None when it cannot be read."""
    if delta is None or direction not in ("higher", "lower") or tolerance is None:
        return None
    gain = delta if direction == "higher" else -delta
    # the tolerance is the drop a stage may show: a change just at it is still within it
    if abs(gain) <= tolerance * (1 + 1e-9):
        return "within"
    return "better" if gain > 0 else "worse"


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
    """Items (by id, with the rule that reported them and their ``text`` in the report's
    words) only before, only after."""
    before = {i["id"]: {"rule": i.get("rule", ""), "text": i[text]} for i in old}
    after = {i["id"]: {"rule": i.get("rule", ""), "text": i[text]} for i in new}
    return {"gone": [{"id": k, **v} for k, v in before.items() if k not in after],
            "new": [{"id": k, **v} for k, v in after.items() if k not in before]}


def _consistency(report: dict) -> dict | None:
    c = report["consistency"]
    return c and {k: c.get(k) for k in ("applicable", "level", "requires_retrain",
                                        "prerequisites_met")}


def diff_reports(old: dict, new: dict) -> dict:
    stages = stage_changes(old, new)
    checklist = checklist_changes(old, new)
    pitfalls = _gone_and_new(old["pitfalls"], new["pitfalls"], "text")
    regressions = ([_stage_regression(s) for s in stages if _got_worse(s)]
                   + [{"kind": "checklist", "id": c["item"], "old": c["old"], "new": c["new"]}
                      for c in checklist if c["new"] == "fail" and c["old"] != "fail"]
                   + [{"kind": "pitfall", "id": p["id"], "rule": p["rule"], "old": None,
                       "new": "reported"} for p in pitfalls["new"]])
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
    diff["improvements"] = [_stage_regression(s) for s in stages
                            if s["trend"] == "better" and not _got_worse(s)]
    diff["verdict"] = verdict(diff)
    return diff


def _got_worse(stage: dict) -> bool:
    """A stage turned abnormal, or its metric moved the wrong way beyond the tolerance."""
    turned = stage["new_status"] == "abnormal" and stage["old_status"] != "abnormal"
    return turned or stage["trend"] == "worse"


def _stage_regression(stage: dict) -> dict:
    """A stage that got worse (or better) as a regression (improvement) entry: kind
    ``stage`` when its status changed, ``metric`` when only its value tells; its values
    when they were compared."""
    entry = {"kind": "stage", "id": stage["stage"], "old": stage["old_status"],
             "new": stage["new_status"]}
    if stage["trend"] in ("worse", "better"):
        entry.update(metric=stage["metric"], old_value=stage["old_value"],
                     new_value=stage["new_value"])
        if stage["old_status"] == stage["new_status"]:
            entry["kind"] = "metric"
    return entry


def _changed(diff: dict) -> bool:
    return bool(diff["old"]["conclusion"] != diff["new"]["conclusion"] or diff["stages"]
                or diff["layers"] or diff["checklist"] or diff["consistency"]
                or any(diff[k]["gone"] or diff[k]["new"] for k in ("pitfalls", "missing")))


def verdict(diff: dict) -> dict:
    """The one-line conclusion as data: kind and what it is about (rendered per language).
    A moved conclusion keeps what got worse beside it."""
    old_stage = diff["old"]["conclusion"]["stage"]
    new_stage = diff["new"]["conclusion"]["stage"]
    back = [s["stage"] for s in diff["stages"]
            if s["old_status"] == "abnormal" and s["new_status"] == "normal"]
    improved = diff.get("improvements", [])
    if not _changed(diff):
        return {"kind": "unchanged"}
    if new_stage != old_stage and new_stage not in ("none", "undetermined") \
            and old_stage != "undetermined":
        return {"kind": "moved", "stage": new_stage, "items": diff["regressions"]}
    if back and not diff["new"]["abnormal"] and not diff["regressions"]:
        return {"kind": "fixed", "stages": back}
    if new_stage == "none" and old_stage != "none" and not diff["regressions"]:
        return {"kind": "fixed", "stages": []}
    if diff["regressions"]:
        return {"kind": "worse", "items": diff["regressions"]}
    if back or improved or diff["pitfalls"]["gone"] or any(
            c["old"] == "fail" for c in diff["checklist"]):
        return {"kind": "better", "stages": back,
                "items": [i for i in improved if i["id"] not in back]}
    return {"kind": "changed"}
