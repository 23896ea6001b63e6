"""From facts to the Diagnosis: run the rules, resolve the conclusion, assemble the report.

The Diagnosis is a plain dict in the shape of the JSON report (schema
``qcdoctor/report-v1``); the Markdown and HTML reports are rendered from it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

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
from qcdoctor.fact_types import STAGES
from qcdoctor.rule_outputs import Assembly, Fired, collect
from qcdoctor.text import render
from qcdoctor.vocabulary import ACTION_RANKS, COST_CLASSES, analysis_type, is_deployment_problem
from qcdoctor.wording import item_words, labels

REPORT_SCHEMA = "qcdoctor/report-v1"
SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}
_FALLBACK = {"zh": "没有规则能从现有事实得出阶段。", "en": "No rule could place the problem from the facts given."}
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
    before_qat = stage == "calibration" and _qat_not_run(facts)
    folders = _folder_comparisons(facts)
    flows = {f["analysis"]: f.get("flow", "horizon") for f in facts if f["type"] == "qa_folder"}
    assembly = Assembly(report=report, lang=lang, stage=stage, files=files,
                        winner=conclusion["source"].split()[-1] if conclusion else None,
                        next_action=lambda fired: _action(fired, case_context, lang,
                                                          before_qat=before_qat,
                                                          folders=folders, flows=flows))
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
        given = {key for f in facts if f["type"] == "case"
                 for key in f.get("deploy_keys", "").split(", ") if key}
        report["checklist"] = checklist_section(assembly.judged, lang, given)
    if any(f["type"] == "qa_folder" for f in facts):
        from qcdoctor.collectors.reading.thresholds import DEFAULT
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


def checklist_section(judged: dict[str, list[dict]], lang: str,
                      given: set[str] = frozenset()) -> list[dict]:
    """Every checklist item, judged or not: status, evidence, and what to provide (never a
    case key in ``given``, the deploy keys the case fills).

    A mandatory item also names the finer checks rolled up into it (``parts``).
    """
    own = {item: max((e["status"] for e in evidence), key=STATUS_RANK.__getitem__)
           for item, evidence in judged.items() if evidence}
    rolled = rolled_up(own)
    read = _kinds_read(judged)
    items = []
    for item, spec in checklist_items().items():
        evidence = sorted(judged.get(item, []), key=lambda e: (-STATUS_RANK[e["status"]], e["rule"]))
        status, parts = rolled.get(item, (own.get(item, "unknown"), []))
        # the finer checks that decided the item's status speak first: a FAIL row shows
        # what failed, not the item's own "unknown"
        deciding = [{**e, "part": p} for p in parts for e in judged.get(p, [])
                    if e["status"] == status]
        evidence = deciding + evidence
        entry = {"id": item, "status": status, "evidence": evidence,
                 "title": item_words(item, status, lang), "mandatory": spec["mandatory"]}
        if spec["mandatory"]:
            entry["parts"] = [{"id": p, "status": own[p], "title": item_words(p, own[p], lang)}
                              for p in parts]
        if status == "unknown" and parts and own.get(item) not in (None, "unknown"):
            # its own evidence is settled (deploy.postprocess_same given) and only finer
            # checks leave it unknown: it waits on what they need, not on keys it has
            entry["provide"] = _LIST[lang].join(checklist_request(p, read, lang, given) for p in parts)
        elif status == "unknown":
            entry["provide"] = checklist_request(item, read, lang, given)
        items.append(entry)
    return items


def _kinds_read(judged: dict[str, list[dict]]) -> set[str]:
    """Which deployment inputs the rules read ("script": the compile script, "config": the
    hb_compile config), from where their evidence was read."""
    files = {piece.split(":")[0].split(" line ")[0].strip()
             for evidence in judged.values() for e in evidence for source in e.get("sources", [])
             for piece in (source or "").split(";")}
    files = {f for f in files if f and not f.startswith("case.yaml")}
    return ({"script"} if any(f.endswith(".py") for f in files) else set()) | (
        {"config"} if any(f.endswith((".yaml", ".yml", ".json")) for f in files) else set())


def checklist_request(item: str, read: set[str], lang: str, given: set[str]) -> str:
    """What decides an unknown item: once its input was read, the facts it lacks by name,
    never the file again; of the case keys it is decided from (``needs``), only those the
    case does not give (``given``: its deploy keys that hold a value)."""
    spec = checklist_items()[item]
    after_reading = spec.get("provide_read")
    froms = after_reading and after_reading["from"]
    text = after_reading if froms and set([froms] if isinstance(froms, str) else froms) & read \
        else spec["provide"]
    needs = spec.get("needs")
    if not needs:
        return text[lang]
    unmet = [need[lang] for need in needs
             if not (any if need.get("any") else all)(key in given for key in need["keys"])]
    if not unmet:
        return (text.get("given") or spec["provide_given"])[lang]
    return text[lang].replace("{needs}", _listed(unmet, lang))


def _listed(parts: list[str], lang: str) -> str:
    """"a, b and c" ("a、b与c")."""
    if len(parts) == 1:
        return parts[0]
    comma, last = ("、", "与") if lang == "zh" else (", ", " and ")
    return comma.join(parts[:-1]) + last + parts[-1]


def _order_actions(actions: list[dict], facts: list[dict], lang: str) -> None:
    """The smallest verifiable action first (knowledge.md §6 rev 2, R3.6, R4.7): a ranked
    action (a failed check's fix, an invalid run's redo, a measured remedy, the located op's
    remedy) ahead of the rest, then by cost class; inside a class the ranked ones lead, then
    the evaluation of a stage (it splits the gap: before collecting unknown checklist items),
    then by measured effect (the remedy that removed more of the output error first), then
    (the sort is stable) by rule priority.

    A remedy that needs QAT says so. It loses its lead, keeping its class (the last), when
    the user cannot retrain (R3.7); while a cheaper step that confirms or refutes it on the
    same comparison is pending, it moves to just after that step (R4.7), unless the probe
    measured it: a fix trial on the bad case has confirmed it already. Beside a measured
    remedy, one read from the tables is labelled as not measured (R4.4)."""
    cannot_retrain = any(f["type"] == "case" and f.get("retrain") == "no" for f in facts)
    words = labels()[lang]["cost_label"]
    keys = {id(action): _OrderKeys.pop_from(action) for action in actions}
    measured = any(key.rank == "measured" for key in keys.values())
    order, waiting = {}, []
    for action in actions:
        rank, _, reads, effect = keys[id(action)]
        if measured and rank == "located":       # the measured remedy leads; this one follows
            action["text"] = _NOT_MEASURED[lang] + action["text"]
        lead = rank
        if action["cost"] == "retrain":
            action["text"] = words["cannot_retrain" if cannot_retrain else "retrain"] + action["text"]
            if cannot_retrain:
                lead = None
            elif rank and rank != "measured" and _confirmations(reads, actions, keys):
                # a measured remedy was confirmed on the bad case already (R4.4)
                waiting.append(action)
        elif action["cost"] == "recalibrate":
            action["text"] = words["recalibrate"] + action["text"]
        order[id(action)] = (_rank_index(lead), COST_CLASSES.index(action["cost"]),
                             _rank_index(rank) if rank else _class_order(action), -effect)
    actions.sort(key=lambda action: order[id(action)])
    # the last one first: remedies that wait for the same step keep their order after it
    for remedy in sorted(waiting, key=actions.index, reverse=True):
        _move_after(remedy, _confirmations(keys[id(remedy)].reads, actions, keys), actions)


class _OrderKeys(NamedTuple):
    """What orders an action and is no part of the report: its rank, the comparison it runs
    (a QuantAnalysis or probe run, level 0) and the one it reads (a remedy's folder), and
    the share of the output error a measured remedy removed."""
    rank: str | None
    runs: tuple | None
    reads: tuple | None
    effect: float

    @classmethod
    def pop_from(cls, action: dict) -> _OrderKeys:
        return cls(action.pop("rank", None), action.pop("runs", None), action.pop("reads", None),
                   _effect(action.pop("effect", None)))


def _rank_index(rank: str | None) -> int:
    return ACTION_RANKS.index(rank) if rank else len(ACTION_RANKS)


def _class_order(action: dict) -> int:
    """Inside a cost class, after the ranked actions: a stage to evaluate splits the gap,
    so it comes before the rest (collecting unknown checklist items among them, R3.6)."""
    return len(ACTION_RANKS) + (action["kind"] != "evaluate_stage")


def _confirmations(comparison: tuple | None, actions: list[dict], keys: dict) -> list[dict]:
    """R4.7: the cheaper steps listed that run the comparison a remedy needing QAT was read
    from: they confirm or refute it on the same bad case. A step is listed only while it
    is pending, as its rule reads the facts: the comparison's sensitivity not run (the
    QuantAnalysis of that stage), no fix trial where qcdoctor probe could run one, level 0
    not tried where retraining is not allowed or not known to be."""
    retrain = COST_CLASSES.index("retrain")
    return [other for other in actions if COST_CLASSES.index(other["cost"]) < retrain
            and _same_comparison(comparison, keys[id(other)].runs)]


def _move_after(action: dict, steps: list[dict], actions: list[dict]) -> None:
    """Put ``action`` just after the last of ``steps`` when it stands before it."""
    here, last = actions.index(action), max(actions.index(step) for step in steps)
    if here < last:
        actions.insert(last, actions.pop(here))


def _same_comparison(one: tuple | None, other: tuple | None) -> bool:
    """One analysis type, and the same analysed stage where both are known (fake_quant
    compares calib, or the QAT model, with float)."""
    return one is not None and other is not None and one[0] == other[0] and \
        (not one[1] or not other[1] or one[1] == other[1])


def _effect(value) -> float:
    """A filled ``effect`` as a number (0 when absent or not one: it only orders)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def _action(fired: Fired, case_context: dict, lang: str, *, before_qat: bool = False,
            folders: dict | None = None, flows: dict | None = None) -> dict:
    action = fired.produced["next_action"]
    if "layers" in action:
        # the layers the code sets, filled from the facts as collected: the engine's copy
        # of a long text is cut, and the code must name every layer
        collected = dict(zip(fired.bindings, fired.bound, strict=True))
        action = {**action, "layers": fill(fired.rule.then["next_action"]["layers"], collected)}
    if before_qat and action.get("cost_before_qat"):
        # R4.6: before QAT a qconfig change takes effect by preparing and calibrating again
        action = {**action, "cost": action["cost_before_qat"]}
    folder = _folder(fired.bound)
    if folder is not None and action.get("snippet"):
        # the code is written in the flow the folder's models come from (a probe of a
        # torch.ao model: torch.ao's API), and may read the folder (a measured fix)
        action = {**action, "folder": folder, "flow": (flows or {}).get(folder, "horizon")}
    out = {"id": action["id"], "kind": action["kind"], "cost": action["cost"]}
    for key in ("analysis_model_type", "baseline", "analysis", "stage_to_evaluate", "rank",
                "effect", "remedy"):
        if action.get(key):
            out[key] = action[key]
    # ordering only, like rank and effect: the comparison the action runs, or reads
    out["runs"] = _comparison_run(action)
    out["reads"] = (folders or {}).get(_folder(fired.bound))
    out["text"] = fired.message
    if action.get("snippet"):
        out["code"] = render_snippet(action["snippet"], action, case_context, lang=lang)
    out["rule"] = fired.rule.id
    return out


# facts whose ``analysis`` field is a QuantAnalysis (or probe) output folder
_FOLDER_FACTS = ("qa_folder", "layer_origin", "error_kind", "sensitivity_summary", "fix_trials")


def _folder_comparisons(facts: list[dict]) -> dict[str, tuple[str, str]]:
    """Each output folder's comparison: (analysis type, analysed stage; "" when unknown)."""
    return {f["analysis"]: (f["comparison"], f.get("analysis_stage", "")) for f in facts
            if f["type"] == "qa_folder" and f.get("comparison", "unknown") != "unknown"}


def _comparison_run(action: dict) -> tuple[str, str] | None:
    """The comparison a QuantAnalysis or probe run makes; level 0 exports and converts the
    existing checkpoint again: the convert comparison. None for the other actions."""
    if action.get("analysis_model_type"):
        analysed = action.get("analysis") or ""
        return analysis_type(action["analysis_model_type"], analysed), analysed
    if action["kind"] == "consistency_strategy" and action.get("level") == 0:
        return "convert", "quantized_bc"
    return None


def _folder(bound: list[dict]) -> str | None:
    """The output folder whose tables a rule read, if it read one."""
    return next((f["analysis"] for f in bound if f["type"] in _FOLDER_FACTS), None)


def _qat_not_run(facts: list[dict]) -> bool:
    """No stage from qat on has a result: there is no trained QAT model yet (R4.6)."""
    trained = STAGES[STAGES.index("qat"):]
    return not any(f["type"] == "stage" and f["stage"] in trained
                   and (f["status"] != "unknown" or f.get("has_value")) for f in facts)


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
