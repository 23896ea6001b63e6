"""From facts to the Diagnosis: run the rules, resolve the conclusion, assemble the report.

The Diagnosis is a plain dict in the shape of the JSON report (schema
``qcdoctor/report-v1``); the Markdown and HTML reports are rendered from it.
"""

from __future__ import annotations

import fnmatch
from functools import partial

from qcdoctor import __version__

from .derived import STATUS_RANK, conclusion_fact, derived_facts, fill, last_producers, rolled_up
from .rulebook import Rule, checklist_items
from .runner import Hit, RuleRunner, bundled_runner, canonical, engine_fact
from .series import series_section
from .snippets import render_snippet
from .text import render
from .vocabulary import ACTION_RANKS, COST_CLASSES, is_deployment_problem

REPORT_SCHEMA = "qcdoctor/report-v1"
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
_OVERRIDDEN = {"zh": "（已被优先级更高的结论覆盖）", "en": "(overridden by a higher-priority conclusion) "}
_FALLBACK = {"zh": "没有规则能从现有事实得出阶段。", "en": "No rule could place the problem from the facts given."}
# R3.7: a remedy that needs QAT says so; after "retrain: no" it is listed as such
_NEEDS_RETRAINING = {"zh": "【需要重新训练（QAT）】", "en": "[needs retraining (QAT)] "}
_CANNOT_RETRAIN = {"zh": "【需要重新训练：你已说明不能重训】",
                   "en": "[needs retraining: you said you cannot retrain] "}


def run_rules(facts: list[dict], runner: RuleRunner | None = None) -> list[Hit]:
    """Hits of every rule; each derived fact kind is fed back once all its producers ran."""
    runner = runner or bundled_runner()
    return runner.run(facts, partial(derived_facts, last_producers(runner)))



def _text(rule: Rule, key: str, lang: str, bindings: dict) -> str:
    return render(getattr(rule, key)[lang], bindings, lang)


def build_report(facts: list[dict], hits: list[Hit], *, lang: str, case_info: dict,
                 case_context: dict, files: list[str], full_checklist: bool = False,
                 series: list[dict] | None = None) -> dict:
    """``series``: the plot series the collectors kept beside the facts."""
    conclusion = conclusion_fact(hits)
    stage = conclusion["stage"] if conclusion else "undetermined"
    report = {
        "schema": REPORT_SCHEMA,
        "tool": {"name": "qcdoctor", "version": __version__},
        "case": case_info,
        "language": lang,
        "conclusion": {"stage": stage,
                       "suspect": conclusion["suspect"] if conclusion else "",
                       "determined": conclusion["determined"] if conclusion else False,
                       "evidence": []},
        "missing": [], "ask": [], "next_actions": [], "consistency": None, "findings": [],
        "checklist": [], "pitfalls": [], "cautions": [], "artifacts": {"stage": stage, "keep": []},
        "facts": facts, "trace": [],
    }
    if conclusion:
        report["facts"] = facts + [conclusion]
    # bound facts come back from the engine without provenance: look it up (among the
    # facts of the types bound at all: converting every fact costs more than the rest)
    bound_types = {f["type"] for hit in hits for f in hit.facts.values()}
    with_source = {canonical(engine_fact(f)): f for f in report["facts"]
                   if f["type"] in bound_types}
    winner = conclusion["source"].split()[-1] if conclusion else None
    seen: dict[str, set] = {}
    judged: dict[str, list[dict]] = {}

    def first(kind: str, key: str) -> bool:
        bucket = seen.setdefault(kind, set())
        if key in bucket:
            return False
        bucket.add(key)
        return True

    for hit in hits:
        rule, b, then = hit.rule, hit.facts, hit.rule.then
        produced = fill(then, b)
        bound = [with_source.get(canonical(f), f) for f in b.values()]
        report["trace"].append({"rule": rule.id, "facts": bound, "produced": produced})
        message = _text(rule, "message", lang, b)
        if "conclusion" in then and first("evidence", message):
            prefix = "" if rule.id == winner else _OVERRIDDEN[lang]
            report["conclusion"]["evidence"].append({"rule": rule.id, "text": prefix + message,
                                                     "severity": rule.severity,
                                                     "overridden": bool(prefix)})
        if "evidence" in then and stage in then["evidence"]["for_stage"] and \
                first("evidence", message):
            report["conclusion"]["evidence"].append({"rule": rule.id, "text": message,
                                                     "severity": rule.severity,
                                                     "overridden": False})
        if "missing" in then and first("missing", then["missing"]):
            report["missing"].append({"id": then["missing"], "question": message,
                                      "why": _text(rule, "rationale", lang, b), "rule": rule.id})
        if "next_action" in then and first("action", produced["next_action"]["id"]):
            report["next_actions"].append(_action(rule, produced["next_action"], message,
                                                  case_context, lang))
        if "consistency" in then and report["consistency"] is None:
            c = produced["consistency"]
            report["consistency"] = {
                "applicable": c.get("applicable"), "level": c.get("level"),
                "requires_retrain": c.get("requires_retrain"),
                "prerequisites_met": c.get("prerequisites_met"), "text": message,
                "old_level": c.get("old_level"), "rule": rule.id}
        if "finding" in then and first("finding", rule.id + message):
            report["findings"].append({"rule": rule.id, "severity": rule.severity,
                                       "title": rule.title[lang], "text": message,
                                       "evidence": _evidence(b, bound)})
        for kind, listed in (("pitfall", "pitfalls"), ("caution", "cautions")):
            if kind in then and first(kind, then[kind]):
                report[listed].append({"id": then[kind], "text": message,
                                       "correct_practice": (rule.fix or rule.rationale)[lang],
                                       "rule": rule.id, "severity": rule.severity})
        if "ask" in then and first("ask", produced["ask"]):
            report["ask"].append(produced["ask"])
        if "checklist" in then and first("checklist", rule.id + message):
            judged.setdefault(produced["checklist"]["item"], []).append(
                {"rule": rule.id, "status": produced["checklist"]["status"], "text": message,
                 "sources": [f.get("source", "") for f in bound if f.get("source")]})
        if "keep" in then and first("keep", rule.id):
            for item in then["keep"]["items"]:
                name = item["name"]      # one name for both languages, or {zh, en}
                name = name[lang] if isinstance(name, dict) else name
                if any(kept["name"] == name for kept in report["artifacts"]["keep"]):
                    continue             # two lists (both ends of a gap) name it once
                path = _present(item.get("patterns", []), files)
                report["artifacts"]["keep"].append(
                    {"name": name, "present": bool(path), "path": path})
    _order_actions(report["next_actions"], facts, lang)
    committed = {p["id"] for p in report["pitfalls"]}
    report["cautions"] = [c for c in report["cautions"] if c["id"] not in committed]
    if full_checklist or is_deployment_problem(stage, report["conclusion"]["suspect"], facts):
        report["checklist"] = checklist_section(judged, lang)
    if any(f["type"] == "qa_folder" for f in facts):
        from qcdoctor.collectors.thresholds import DEFAULT
        report["thresholds"] = DEFAULT.as_dict()
    if not report["conclusion"]["evidence"]:
        report["conclusion"]["evidence"].append({"rule": "", "text": _FALLBACK[lang],
                                                 "severity": "warning", "overridden": False})
    report["series"] = series_section(facts, series or [])
    return report


def checklist_section(judged: dict[str, list[dict]], lang: str) -> list[dict]:
    """Every checklist item, judged or not: status, evidence, and what to provide.

    A mandatory item also names the finer checks rolled up into it (``parts``).
    """
    own = {item: max((e["status"] for e in evidence), key=STATUS_RANK.__getitem__)
           for item, evidence in judged.items() if evidence}
    rolled = rolled_up(own)
    items = []
    for item, spec in checklist_items().items():
        evidence = sorted(judged.get(item, []), key=lambda e: (-STATUS_RANK[e["status"]], e["rule"]))
        status, parts = rolled.get(item, (own.get(item, "unknown"), []))
        # the finer checks that decided the item's status speak first: a FAIL row shows
        # what failed, not the item's own "unknown"
        deciding = [{**e, "part": p} for p in parts for e in judged.get(p, [])
                    if e["status"] == status]
        evidence = deciding + evidence
        entry = {"id": item, "status": status, "evidence": evidence, "title": spec["title"][lang],
                 "mandatory": spec["mandatory"]}
        if spec["mandatory"]:
            entry["parts"] = [{"id": p, "status": own[p],
                               "title": checklist_items()[p]["title"][lang]} for p in parts]
        if status == "unknown":
            entry["provide"] = spec["provide"][lang]
        items.append(entry)
    return items


def _evidence(bindings: dict, bound: list[dict]) -> dict:
    """The facts behind a finding, by pattern name, each with where it was read."""
    return dict(zip(bindings, bound, strict=True))


def _order_actions(actions: list[dict], facts: list[dict], lang: str) -> None:
    """The smallest verifiable action first: a ranked action (R3.6) ahead of the rest, then
    by cost class, then (the sort is stable) by rule priority. A remedy that needs QAT says
    so, and keeps its cost class (the last) when the user said they cannot retrain (R3.7)."""
    cannot_retrain = any(f["type"] == "case" and f.get("retrain") == "no" for f in facts)
    label = (_CANNOT_RETRAIN if cannot_retrain else _NEEDS_RETRAINING)[lang]
    keys = {}
    for action in actions:
        rank = action.pop("rank", None)          # ordering only: not part of the report
        if action["cost"] == "retrain":
            action["text"] = label + action["text"]
            if cannot_retrain:
                rank = None
        keys[id(action)] = (ACTION_RANKS.index(rank) if rank else len(ACTION_RANKS),
                            COST_CLASSES.index(action["cost"]))
    actions.sort(key=lambda action: keys[id(action)])


def _action(rule: Rule, action: dict, message: str, case_context: dict, lang: str) -> dict:
    out = {"id": action["id"], "kind": action["kind"], "cost": action["cost"]}
    for key in ("analysis_model_type", "baseline", "analysis", "stage_to_evaluate", "rank"):
        if action.get(key):
            out[key] = action[key]
    out["text"] = message
    if action.get("snippet"):
        out["code"] = render_snippet(action["snippet"], action, case_context, lang=lang)
    out["rule"] = rule.id
    return out


def _present(patterns: list[str], files: list[str]) -> str | None:
    """The first case-folder file matching one of the patterns (fnmatch on the name)."""
    for pattern in (p.lower() for p in patterns):
        for rel in files:
            lowered = rel.lower()
            if (fnmatch.fnmatchcase(lowered.rsplit("/", 1)[-1], pattern)
                    or fnmatch.fnmatchcase(lowered, pattern)):
                return rel
    return None


def max_severity(report: dict) -> int:
    """Severity of the most serious reported item, -1 when nothing was reported."""
    items = (report["conclusion"]["evidence"][:1] + report["findings"] + report["pitfalls"]
             + report.get("cautions", []))
    ranks = [SEVERITY_RANK[i["severity"]] for i in items if i.get("severity")]
    ranks += [SEVERITY_RANK["error"] for c in report["checklist"] if c["status"] == "fail"]
    return max(ranks, default=-1)


def fails_on(report: dict, fail_on: str) -> bool:
    """Whether the report holds an item at or above ``fail_on`` (``never``: no)."""
    return fail_on != "never" and max_severity(report) >= SEVERITY_RANK[fail_on]
