"""What a rule can output: every ``then:`` kind, its check when a rule file is loaded and
how one hit of it goes into the report, in one table (``OUTPUT_KINDS``).

A new output kind is one entry here, plus its words in templates/labels.yaml when the
reports show it. The checks raise RuleError naming the rule file and the key; the
collectors only add to the report being assembled (``Assembly``), in the table's order,
which is the order the report lists them in.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass, field

from qcdoctor.catalogues import question_topics
from qcdoctor.errors import RuleError
from qcdoctor.fact_types import CHECKLIST_ITEMS, CHECKLIST_STATUSES, CONCLUSION_STAGES, STAGES
from qcdoctor.vocabulary import ACTION_KINDS, ACTION_RANKS, COST_CLASSES, MISSING_IDS, PITFALL_IDS

_OVERRIDDEN = {"zh": "（已被优先级更高的结论覆盖）", "en": "(overridden by a higher-priority conclusion) "}


@dataclass
class Fired:
    """One rule's hit as the report sees it: the rule, its outputs with facts filled in,
    the facts it bound (with where each was read) and its message in the report language."""
    rule: object
    produced: dict
    bindings: dict
    bound: list[dict]
    message: str
    rationale: Callable[[], str]      # rendered only by the outputs that show it


@dataclass
class Assembly:
    """The report being assembled, and what the collectors need beside the hit."""
    report: dict
    lang: str
    stage: str
    winner: str | None
    files: list[str]
    next_action: Callable[[Fired], dict]   # builds an action with its code
    judged: dict[str, list[dict]] = field(default_factory=dict)
    seen: dict[str, set] = field(default_factory=dict)

    def first(self, kind: str, key: str) -> bool:
        """Whether ``key`` is new for ``kind`` (each message, id or action is listed once)."""
        bucket = self.seen.setdefault(kind, set())
        if key in bucket:
            return False
        bucket.add(key)
        return True


@dataclass(frozen=True)
class OutputKind:
    name: str
    check: Callable[[object, str], None]
    collect: Callable[[Assembly, Fired], None]
    fact: str | None = None          # the fact type later rules read this output back as


def _fail(text: str, where: str, key: str, fix: str | None = None) -> None:
    raise RuleError(text, file=where, key=key, fix=fix)


# --- checks ----------------------------------------------------------------------------

def bilingual(raw, key: str, where: str) -> dict:
    """A text given in both report languages: titles, messages, a kept item's name."""
    if not isinstance(raw, dict) or set(raw) != {"zh", "en"} or not all(
            isinstance(v, str) and v.strip() for v in raw.values()):
        _fail(f"'{key}' must have non-empty 'zh' and 'en' texts", where, key)
    return raw


def _check_conclusion(c, where: str) -> None:
    if not isinstance(c, dict) or c.get("stage") not in CONCLUSION_STAGES or \
            not isinstance(c.get("determined"), bool):
        _fail("conclusion needs stage (report stage id) and determined (bool)", where,
              "then.conclusion")


def _check_missing(value, where: str) -> None:
    if value not in MISSING_IDS:
        _fail(f"missing must be one of {', '.join(MISSING_IDS)}", where, "then.missing")


def _check_pitfall_id(key: str):
    def check(value, where: str) -> None:
        if value not in PITFALL_IDS:
            _fail(f"{key} must be one of {', '.join(PITFALL_IDS)}", where, f"then.{key}")
    return check


def _check_next_action(a, where: str) -> None:
    if not isinstance(a, dict) or a.get("kind") not in ACTION_KINDS or not a.get("id"):
        _fail(f"next_action needs id and kind ({', '.join(ACTION_KINDS)})", where,
              "then.next_action")
    if a.get("cost") not in COST_CLASSES:
        _fail(f"next_action needs a cost class ({', '.join(COST_CLASSES)})", where,
              "then.next_action.cost",
              "verify: evaluate / confirm / check; analyse: no retraining; recalibrate: "
              "prepare and calibrate again; retrain: needs QAT again")
    # knowledge.md §17 R4.6: what a qconfig change costs while QAT has not run yet
    if a.get("cost_before_qat") is not None and a["cost_before_qat"] not in COST_CLASSES:
        _fail(f"next_action cost_before_qat must be a cost class ({', '.join(COST_CLASSES)})",
              where, "then.next_action.cost_before_qat",
              "recalibrate: a qconfig change takes effect by calibrating again before QAT")
    # a remedy: a change to the model (a fixed scale, qint16, per-channel weights, the
    # measured fix), shown as a fix to make, never as information the report waits for
    if a.get("remedy") is not None and not isinstance(a["remedy"], bool):
        _fail("next_action remedy must be true or false", where, "then.next_action.remedy")
    if a.get("remedy") and a.get("cost") == "verify":
        _fail("a remedy next_action changes the model: its cost is analyse, recalibrate or "
              "retrain, never verify", where, "then.next_action.cost")
    if a.get("rank") is not None and a["rank"] not in ACTION_RANKS:
        _fail(f"next_action rank must be one of {', '.join(ACTION_RANKS)}", where,
              "then.next_action.rank",
              "fix_failed: fixes a failed checklist item; redo_invalid: redoes an invalid "
              "analysis run; measured: a remedy whose effect was measured on the model "
              "(give its effect, the error it removed); located: the remedy of the op the "
              "analysis located")
    if a.get("rank") == "measured" and a.get("effect") is None:
        _fail("a measured next_action needs its effect (the error it removed, 0..1)", where,
              "then.next_action.effect", "e.g. effect: \"{fix_trials.single_removed}\"")
    for key in ("baseline", "analysis", "stage_to_evaluate"):
        value = a.get(key)
        if value is not None and value not in STAGES and "{" not in str(value):
            _fail(f"{key} must be a stage id or a field reference", where,
                  f"then.next_action.{key}")


def _check_nothing(_value, _where: str) -> None:
    """consistency and finding: any mapping; what they hold is the rule's own business."""


def _check_keep(k, where: str) -> None:
    if not isinstance(k, dict) or not isinstance(k.get("items"), list):
        _fail("keep needs stage and items [{name, patterns}]", where, "then.keep")
    for i, item in enumerate(k["items"]):
        name = item.get("name") if isinstance(item, dict) else None
        if isinstance(name, dict):
            bilingual(name, f"then.keep.items[{i}].name", where)
        elif not (isinstance(name, str) and name):
            _fail("a kept item needs a name", where, f"then.keep.items[{i}]")


def _check_evidence(e, where: str) -> None:
    if not isinstance(e, dict) or not set(e.get("for_stage", [])) <= set(CONCLUSION_STAGES):
        _fail("evidence needs for_stage: [report stage ids]", where, "then.evidence")


def _check_checklist(c, where: str) -> None:
    item = str(c.get("item", "")) if isinstance(c, dict) else ""
    # the item may name a fact field, e.g. "{deploy_compare.check}" (typed by its fact)
    if not isinstance(c, dict) or (item not in CHECKLIST_ITEMS and not item.startswith("{")) or \
            c.get("status") not in CHECKLIST_STATUSES:
        _fail(f"checklist needs item ({', '.join(CHECKLIST_ITEMS)}) and status "
              f"({', '.join(CHECKLIST_STATUSES)})", where, "then.checklist")


def _check_ask(value, where: str) -> None:
    topic = str(value).split(":")[0]
    if topic not in question_topics():
        _fail(f"ask names no question topic of rules/questions.yaml: {topic!r}", where,
              "then.ask")


# --- collectors ------------------------------------------------------------------------

def _collect_conclusion(a: Assembly, hit: Fired) -> None:
    if a.first("evidence", hit.message):
        prefix = "" if hit.rule.id == a.winner else _OVERRIDDEN[a.lang]
        a.report["conclusion"]["evidence"].append({"rule": hit.rule.id, "text": prefix + hit.message,
                                                   "severity": hit.rule.severity,
                                                   "overridden": bool(prefix)})


def _collect_evidence(a: Assembly, hit: Fired) -> None:
    if a.stage in hit.rule.then["evidence"]["for_stage"] and a.first("evidence", hit.message):
        a.report["conclusion"]["evidence"].append({"rule": hit.rule.id, "text": hit.message,
                                                   "severity": hit.rule.severity,
                                                   "overridden": False})


def _collect_missing(a: Assembly, hit: Fired) -> None:
    if "conclusion" in hit.rule.then and hit.rule.id != a.winner:
        return          # an overridden conclusion speaks as evidence only, asks nothing
    missing = hit.rule.then["missing"]
    if a.first("missing", missing):
        a.report["missing"].append({"id": missing, "question": hit.message,
                                    "why": hit.rationale(), "rule": hit.rule.id})


def _collect_next_action(a: Assembly, hit: Fired) -> None:
    if a.first("action", hit.produced["next_action"]["id"]):
        a.report["next_actions"].append(a.next_action(hit))


def _collect_consistency(a: Assembly, hit: Fired) -> None:
    if a.report["consistency"] is None:
        c = hit.produced["consistency"]
        a.report["consistency"] = {
            "applicable": c.get("applicable"), "level": c.get("level"),
            "requires_retrain": c.get("requires_retrain"),
            "prerequisites_met": c.get("prerequisites_met"), "text": hit.message,
            "old_level": c.get("old_level"), "rule": hit.rule.id}


def _collect_finding(a: Assembly, hit: Fired) -> None:
    if a.first("finding", hit.rule.id + hit.message):
        a.report["findings"].append({"rule": hit.rule.id, "severity": hit.rule.severity,
                                     "title": hit.rule.title[a.lang], "text": hit.message,
                                     "evidence": dict(zip(hit.bindings, hit.bound, strict=True))})


def _collect_pitfall_like(kind: str, listed: str):
    """A pitfall the case shows, or a caution it comes close to: one entry per id."""
    def collect(a: Assembly, hit: Fired) -> None:
        if a.first(kind, hit.rule.then[kind]):
            a.report[listed].append({"id": hit.rule.then[kind], "text": hit.message,
                                     "correct_practice": (hit.rule.fix or hit.rule.rationale)[a.lang],
                                     "rule": hit.rule.id, "severity": hit.rule.severity})
    return collect


def _collect_ask(a: Assembly, hit: Fired) -> None:
    if a.first("ask", hit.produced["ask"]):
        a.report["ask"].append(hit.produced["ask"])


def _collect_checklist(a: Assembly, hit: Fired) -> None:
    if a.first("checklist", hit.rule.id + hit.message):
        a.judged.setdefault(hit.produced["checklist"]["item"], []).append(
            {"rule": hit.rule.id, "status": hit.produced["checklist"]["status"],
             "text": hit.message, "sources": [f.get("source", "") for f in hit.bound
                                              if f.get("source")]})


def _collect_keep(a: Assembly, hit: Fired) -> None:
    if not a.first("keep", hit.rule.id):
        return
    kept = a.report["artifacts"]["keep"]
    for item in hit.rule.then["keep"]["items"]:
        name = item["name"]          # one name for both languages, or {zh, en}
        name = name[a.lang] if isinstance(name, dict) else name
        if any(k["name"] == name for k in kept):
            continue                 # two lists (both ends of a gap) name it once
        path = present(item.get("patterns", []), a.files)
        kept.append({"name": name, "present": bool(path), "path": path})


def present(patterns: list[str], files: list[str]) -> str | None:
    """The first case-folder file matching one of the patterns (fnmatch on the name)."""
    for pattern in (p.lower() for p in patterns):
        for rel in files:
            lowered = rel.lower()
            if (fnmatch.fnmatchcase(lowered.rsplit("/", 1)[-1], pattern)
                    or fnmatch.fnmatchcase(lowered, pattern)):
                return rel
    return None


# in the order a hit's outputs are collected (the report's order within each list)
OUTPUT_KINDS = (
    OutputKind("conclusion", _check_conclusion, _collect_conclusion, fact="conclusion"),
    OutputKind("evidence", _check_evidence, _collect_evidence),
    OutputKind("missing", _check_missing, _collect_missing),
    OutputKind("next_action", _check_next_action, _collect_next_action),
    OutputKind("consistency", _check_nothing, _collect_consistency),
    OutputKind("finding", _check_nothing, _collect_finding),
    # a mistake the case shows the user made; a caution: one it only comes close to
    # (reported apart: R3.14)
    OutputKind("pitfall", _check_pitfall_id("pitfall"), _collect_pitfall_like("pitfall", "pitfalls")),
    OutputKind("caution", _check_pitfall_id("caution"), _collect_pitfall_like("caution", "cautions")),
    OutputKind("ask", _check_ask, _collect_ask),
    OutputKind("checklist", _check_checklist, _collect_checklist, fact="checklist"),
    OutputKind("keep", _check_keep, _collect_keep),
)
BY_NAME = {kind.name: kind for kind in OUTPUT_KINDS}
THEN_KEYS = tuple(BY_NAME)
# a ``then`` output that later rules read back as a fact of this type
PRODUCES_FACT = {kind.name: kind.fact for kind in OUTPUT_KINDS if kind.fact}


def check_then(then, where: str) -> dict:
    """A rule's ``then``, checked kind by kind; RuleError on the first problem."""
    if not isinstance(then, dict) or not then:
        _fail("'then' must be a non-empty mapping", where, "then")
    unknown = set(then) - set(THEN_KEYS)
    if unknown:
        _fail(f"unknown output {sorted(unknown)}", where, "then", f"outputs: {', '.join(THEN_KEYS)}")
    for name, value in then.items():
        BY_NAME[name].check(value, where)
    return then


def collect(assembly: Assembly, hit: Fired) -> None:
    """One hit's outputs into the report, kind by kind in the table's order."""
    for kind in OUTPUT_KINDS:
        if kind.name in hit.rule.then:
            kind.collect(assembly, hit)
