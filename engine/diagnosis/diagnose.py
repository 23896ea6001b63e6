"""From facts to the Diagnosis: run the rules, resolve the conclusion, assemble the report.

The Diagnosis is a plain dict in the shape of the JSON report (schema
``qcdoctor/report-v1``); the Markdown and HTML reports are rendered from it.
"""

from __future__ import annotations

import math
from functools import partial

from qcdoctor import __version__
from qcdoctor.catalogues import checklist_items
from qcdoctor.engine.diagnosis.plot_series import series_section
from qcdoctor.engine.diagnosis.snippets import render_snippet
from qcdoctor.engine.matching.derived import (
    STATUS_RANK,
    conclusion_fact,
    derived_facts,
    fill,
    last_producers,
    rolled_up,
)
from qcdoctor.engine.matching.rulebook import Rule
from qcdoctor.engine.matching.runner import Hit, RuleRunner, bundled_runner, canonical, engine_fact
from qcdoctor.rule_outputs import Assembly, Fired, collect
from qcdoctor.text import render
from qcdoctor.vocabulary import ACTION_RANKS, COST_CLASSES, is_deployment_problem

REPORT_SCHEMA = "qcdoctor/report-v1"
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
_FALLBACK = {"zh": "没有规则能从现有事实得出阶段。", "en": "No rule could place the problem from the facts given."}
# R3.7: a remedy that needs QAT says so; after "retrain: no" it is listed as such
_NEEDS_RETRAINING = {"zh": "【需要重新训练（QAT）】", "en": "[needs retraining (QAT)] "}
_CANNOT_RETRAIN = {"zh": "【需要重新训练：你已说明不能重训】",
                   "en": "[needs retraining: you said you cannot retrain] "}
_LIST = {"zh": "；", "en": "; "}      # what several finer checks need, one after the other
# a remedy read from the tables, beside one the probe measured (knowledge.md R4.4)
_NOT_MEASURED = {"zh": "【未实测】", "en": "[not measured] "}


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
    assembly = Assembly(report=report, lang=lang, stage=stage, files=files,
                        winner=conclusion["source"].split()[-1] if conclusion else None,
                        next_action=lambda fired: _action(fired, case_context, lang))
    for hit in hits:
        rule, b = hit.rule, hit.facts
        produced = fill(rule.then, b)
        bound = [with_source.get(canonical(f), f) for f in b.values()]
        report["trace"].append({"rule": rule.id, "facts": bound, "produced": produced})
        collect(assembly, Fired(rule=rule, produced=produced, bindings=b, bound=bound,
                                message=_text(rule, "message", lang, b),
                                rationale=partial(_text, rule, "rationale", lang, b)))
    _order_actions(report["next_actions"], facts, lang)
    committed = {p["id"] for p in report["pitfalls"]}
    report["cautions"] = [c for c in report["cautions"] if c["id"] not in committed]
    if full_checklist or is_deployment_problem(stage, report["conclusion"]["suspect"], facts):
        report["checklist"] = checklist_section(assembly.judged, lang)
    if any(f["type"] == "qa_folder" for f in facts):
        from qcdoctor.collectors.thresholds import DEFAULT
        report["thresholds"] = DEFAULT.as_dict()
    if not report["conclusion"]["evidence"]:
        report["conclusion"]["evidence"].append({"rule": "", "text": _FALLBACK[lang],
                                                 "severity": "warning", "overridden": False})
    report["series"] = series_section(facts, series or [])
    measured = fix_trials_section(series or [])
    if measured:                        # only cases with fix_trials.yaml have the section
        report["fix_trials"] = measured
    return report


def fix_trials_section(series: list[dict]) -> list[dict]:
    """The report's ``fix_trials``: per fix_trials.yaml read, the whole search (trials best
    first, the greedy set, notes and caveats) as collectors/fix_trials.py checked it."""
    return [{k: v for k, v in s.items() if k != "type"} for s in series
            if s["type"] == "fix_trials_series"]


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
        if status == "unknown" and parts and own.get(item) not in (None, "unknown"):
            # its own evidence is settled (deploy.postprocess_same given) and only finer
            # checks leave it unknown: it waits on what they need, not on keys it has
            entry["provide"] = _LIST[lang].join(checklist_items()[p]["provide"][lang]
                                                for p in parts)
        elif status == "unknown":
            entry["provide"] = spec["provide"][lang]
        items.append(entry)
    return items


def _order_actions(actions: list[dict], facts: list[dict], lang: str) -> None:
    """The smallest verifiable action first: a ranked action (R3.6) ahead of the rest, then
    by cost class, then by measured effect (the remedy that removed more of the output error
    first; unmeasured actions have none), then (the sort is stable) by rule priority. A
    remedy that needs QAT says so, and keeps its cost class (the last) when the user said
    they cannot retrain (R3.7); beside a measured remedy, one read from the tables is
    labelled as not measured (R4.4)."""
    cannot_retrain = any(f["type"] == "case" and f.get("retrain") == "no" for f in facts)
    label = (_CANNOT_RETRAIN if cannot_retrain else _NEEDS_RETRAINING)[lang]
    measured = any(action.get("rank") == "measured" for action in actions)
    keys = {}
    for action in actions:
        rank = action.pop("rank", None)          # ordering only: not part of the report
        if measured and rank == "located":       # the measured remedy leads; this one follows
            action["text"] = _NOT_MEASURED[lang] + action["text"]
        # a measured remedy's share of the output error removed: the larger first
        effect = _effect(action.pop("effect", None))
        if action["cost"] == "retrain":
            action["text"] = label + action["text"]
            if cannot_retrain:
                rank = None
        keys[id(action)] = (ACTION_RANKS.index(rank) if rank else len(ACTION_RANKS),
                            COST_CLASSES.index(action["cost"]), -effect)
    actions.sort(key=lambda action: keys[id(action)])


def _effect(value) -> float:
    """A filled ``effect`` as a number (0 when absent or not one: it only orders)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _action(fired: Fired, case_context: dict, lang: str) -> dict:
    action = fired.produced["next_action"]
    if "layers" in action:
        # the layers the code sets, filled from the facts as collected: the engine's copy
        # of a long text is cut, and the code must name every layer
        collected = dict(zip(fired.bindings, fired.bound, strict=True))
        action = {**action, "layers": fill(fired.rule.then["next_action"]["layers"], collected)}
    out = {"id": action["id"], "kind": action["kind"], "cost": action["cost"]}
    for key in ("analysis_model_type", "baseline", "analysis", "stage_to_evaluate", "rank",
                "effect"):
        if action.get(key):
            out[key] = action[key]
    out["text"] = fired.message
    if action.get("snippet"):
        out["code"] = render_snippet(action["snippet"], action, case_context, lang=lang)
    out["rule"] = fired.rule.id
    return out


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
