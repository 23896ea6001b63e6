"""From facts to the Diagnosis: run the rules, resolve the conclusion, assemble the report.

The Diagnosis is a plain dict in the shape of the JSON report (schema
``qcdoctor/report-v1``); the Markdown and HTML reports are rendered from it.
"""

from __future__ import annotations

from fnmatch import fnmatch
from functools import lru_cache
from pathlib import Path

from qcdoctor import __version__

from .rulebook import Rule, checklist_items, load_rules
from .runner import Hit, RuleRunner, canonical, engine_fact
from .series import series_section
from .snippets import render_snippet
from .text import render
from .vocabulary import COST_CLASSES, is_deployment_problem

REPORT_SCHEMA = "qcdoctor/report-v1"
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
_OVERRIDDEN = {"zh": "（已被优先级更高的结论覆盖）", "en": "(overridden by a higher-priority conclusion) "}
_FALLBACK = {"zh": "没有规则能从现有事实得出阶段。", "en": "No rule could place the problem from the facts given."}


@lru_cache(maxsize=1)
def bundled_runner() -> RuleRunner:
    return RuleRunner(load_rules())


def conclusion_fact(hits: list[Hit]) -> dict | None:
    """The winning conclusion among hits: highest priority, then lowest rule id."""
    for hit in hits:
        if "conclusion" in hit.rule.then:
            c = hit.rule.then["conclusion"]
            return {"type": "conclusion", "stage": c["stage"], "determined": c["determined"],
                    "suspect": c.get("suspect", ""), "source": f"rule {hit.rule.id}"}
    return None


STATUS_RANK = {"fail": 3, "unknown": 2, "pass": 1, "not_applicable": 0}


def checklist_statuses(hits: list[Hit]) -> dict[str, str]:
    """item -> worst status over every rule that judged it (fail > unknown > pass > n/a)."""
    worst: dict[str, str] = {}
    for hit in hits:
        if "checklist" not in hit.rule.then:
            continue
        c = _fill(hit.rule.then["checklist"], hit.facts)
        worst[c["item"]] = _worse(worst.get(c["item"]), c["status"])
    return worst


def _worse(a: str | None, b: str) -> str:
    return b if a is None or STATUS_RANK[b] > STATUS_RANK[a] else a


def rolled_up(own: dict[str, str]) -> dict[str, tuple[str, list[str]]]:
    """Mandatory item -> (status, finer items that made it worse than its own judgement).

    knowledge.md §10 rev 2: a finer check rolls up into its mandatory item, worst wins;
    only judged finer checks count (an unjudged one says nothing), n/a never does.
    """
    items = checklist_items()
    out = {}
    for item, spec in items.items():
        if not spec["mandatory"]:
            continue
        parts = [p for p, s in items.items() if s.get("part_of") == item
                 and own.get(p) not in (None, "not_applicable")]
        statuses = [own[p] for p in parts] + ([own[item]] if item in own else [])
        if not statuses:
            continue
        status = max(statuses, key=STATUS_RANK.__getitem__)
        worse = status != own.get(item)
        out[item] = (status, [p for p in parts if own[p] == status] if worse else [])
    return out


def _checklist_facts(hits: list[Hit]) -> list[dict]:
    own = checklist_statuses(hits)
    rolled = rolled_up(own)
    facts = []
    for item in sorted(set(own) | set(rolled)):
        status, parts = rolled.get(item, (own.get(item), []))
        facts.append({"type": "checklist", "item": item, "status": status,
                      "rolled_up": bool(parts), "source": "deploy rules"})
    return facts


def _conclusion_facts(hits: list[Hit]) -> list[dict]:
    found = conclusion_fact(sorted(hits, key=lambda h: h.sort_key))
    return [found] if found else []


# derived fact kind -> how it is built from the hits of its producers
DERIVED = {"conclusion": _conclusion_facts, "checklist": _checklist_facts}


def run_rules(facts: list[dict], runner: RuleRunner | None = None) -> list[Hit]:
    """Hits of every rule; each derived fact kind is fed back once all its producers ran."""
    runner = runner or bundled_runner()
    last = {kind: max((r.stratum for r in runner.rules if kind in r.then), default=-1)
            for kind in DERIVED}

    def derive(stratum: int, hits_so_far: list[Hit]) -> list[dict]:
        return [fact for kind, build in DERIVED.items() if last[kind] == stratum
                for fact in build(hits_so_far)]
    return runner.run(facts, derive)


def _text(rule: Rule, key: str, lang: str, bindings: dict) -> str:
    return render(getattr(rule, key)[lang], bindings, lang)


def _fill(value, bindings):
    """The rule's structured outputs (action ids, op lists, layers) with facts filled in."""
    if isinstance(value, str) and "{" in value:
        return render(value, bindings, for_display=False)
    if isinstance(value, dict):
        return {k: _fill(v, bindings) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, bindings) for v in value]
    return value




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
        "checklist": [], "pitfalls": [], "artifacts": {"stage": stage, "keep": []},
        "facts": facts, "trace": [],
    }
    if conclusion:
        report["facts"] = facts + [conclusion]
    # bound facts come back from the engine without provenance: look it up
    with_source = {canonical(engine_fact(f)): f for f in report["facts"]}
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
        produced = _fill(then, b)
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
                                                  case_context))
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
        if "pitfall" in then and first("pitfall", then["pitfall"]):
            report["pitfalls"].append({"id": then["pitfall"], "text": message,
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
                path = _present(item.get("patterns", []), files)
                name = item["name"]      # one name for both languages, or {zh, en}
                report["artifacts"]["keep"].append(
                    {"name": name[lang] if isinstance(name, dict) else name,
                     "present": bool(path), "path": path})
    # the smallest verifiable action first: by cost class, then (stable) by rule priority
    report["next_actions"].sort(key=lambda a: COST_CLASSES.index(a["cost"]))
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


def _action(rule: Rule, action: dict, message: str, case_context: dict) -> dict:
    out = {"id": action["id"], "kind": action["kind"], "cost": action["cost"]}
    for key in ("analysis_model_type", "baseline", "analysis", "stage_to_evaluate"):
        if action.get(key):
            out[key] = action[key]
    out["text"] = message
    if action.get("snippet"):
        out["code"] = render_snippet(action["snippet"], action, case_context)
    out["rule"] = rule.id
    return out


def _present(patterns: list[str], files: list[str]) -> str | None:
    """The first case-folder file matching one of the patterns (fnmatch on the name)."""
    for pattern in patterns:
        for rel in files:
            if fnmatch(Path(rel).name.lower(), pattern.lower()) or fnmatch(rel.lower(), pattern.lower()):
                return rel
    return None


def max_severity(report: dict) -> int:
    """Severity of the most serious reported item, -1 when nothing was reported."""
    items = report["conclusion"]["evidence"][:1] + report["findings"] + report["pitfalls"]
    ranks = [SEVERITY_RANK[i["severity"]] for i in items if i.get("severity")]
    ranks += [SEVERITY_RANK["error"] for c in report["checklist"] if c["status"] == "fail"]
    return max(ranks, default=-1)
