"""The shape of a JSON report (schema ``qcdoctor/report-v1``), in the case file's spec
classes: ``qcdoctor schema report`` is generated from it and ``check_report`` reads
reports given back to qcdoctor (``qcdoctor diff``) with it, so the two never drift.

A value may be null where the report says "not known", except the parts a report always
has and ``diff`` reads (``required`` of each mapping), and a list holds no nulls. Each
fact's declared fields (``fact_types.FACT_TYPES``) are checked with their types, so a
report that passes is one ``diff`` can read: a damaged one is refused at load, naming its
file and the key path of the first value that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcdoctor.collectors.yaml_schema import Choice, Flag, ListOf, Mapping, Number, Spec, Text
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import (
    CHECKLIST_ITEMS,
    CHECKLIST_STATUSES,
    CONCLUSION_STAGES,
    FACT_TYPES,
    FIX_KINDS,
    FIX_METRICS,
    FIX_TRIALS_SCHEMA,
)
from qcdoctor.vocabulary import COST_CLASSES

REPORT_SCHEMA_ID = "qcdoctor/report-v1"


@dataclass
class Anything(Spec):
    """A value of any shape (facts, rule outputs): its fields are the fact types'."""
    doc: str = "any value"


@dataclass
class Fact(Spec):
    """A fact: its ``type``, every field that type declares (each of its kind, never null),
    and any other fields (sources, locations) of any value."""
    doc: str = "fact"


_SEVERITY = Choice(("info", "warning", "error"))
_LANG = Choice(("zh", "en"))
_FACT = Fact()
_RULED_TEXT = Mapping({"rule": Text(), "text": Text(), "severity": _SEVERITY})
_PITFALLS = ListOf(Mapping({"id": Text(), "text": Text(), "correct_practice": Text(),
                            "rule": Text(), "severity": _SEVERITY}, required=("id", "text")))

_FIX_TRIAL = Mapping({"fix": Choice(FIX_KINDS), "layers": ListOf(Text()), "after": Number(),
                      "error_removed": Number(), "forwards": Number(integer=True),
                      # whether it meets the file's target (added when read)
                      "reaches": Flag()},
                     required=("fix", "layers", "after", "error_removed"))

REPORT_SPEC = Mapping({
    "schema": Text(const=REPORT_SCHEMA_ID),
    "tool": Mapping({"name": Text(), "version": Text()}),
    "case": Mapping({"path": Text(), "title": Text()}, required=("path",)),
    "language": _LANG,
    "conclusion": Mapping({"stage": Choice(CONCLUSION_STAGES), "suspect": Text(),
                           "determined": Flag(),
                           # overridden: a conclusion a higher-priority one replaced
                           "evidence": ListOf(Mapping({"rule": Text(), "text": Text(),
                                                       "severity": _SEVERITY,
                                                       "overridden": Flag()}))},
                          required=("stage", "suspect", "determined")),
    "missing": ListOf(Mapping({"id": Text(), "question": Text(), "why": Text(),
                               "rule": Text()}, required=("id", "question"))),
    "ask": ListOf(Text()),
    "next_actions": ListOf(Mapping({
        "id": Text(), "kind": Text(), "cost": Choice(COST_CLASSES),
        "analysis_model_type": Text(), "baseline": Text(), "analysis": Text(),
        "stage_to_evaluate": Text(), "text": Text(), "code": Text(), "rule": Text(),
        # a change to the model (its kind stays one of the contract's)
        "remedy": Flag()})),
    "consistency": Mapping({"applicable": Flag(), "level": Number(integer=True),
                            "requires_retrain": Flag(), "prerequisites_met": Flag(),
                            "text": Text(), "old_level": Number(integer=True), "rule": Text()}),
    "findings": ListOf(Mapping({"rule": Text(), "severity": _SEVERITY, "title": Text(),
                                "text": Text(), "evidence": Mapping(values=_FACT)})),
    "checklist": ListOf(Mapping({
        "id": Choice(CHECKLIST_ITEMS), "status": Choice(CHECKLIST_STATUSES),
        "evidence": ListOf(Mapping({"rule": Text(), "status": Choice(CHECKLIST_STATUSES),
                                    "text": Text(), "sources": ListOf(Text()),
                                    # the finer check this evidence comes from
                                    "part": Choice(CHECKLIST_ITEMS)})),
        "title": Text(), "mandatory": Flag(),
        "parts": ListOf(Mapping({"id": Choice(CHECKLIST_ITEMS),
                                 "status": Choice(CHECKLIST_STATUSES), "title": Text()})),
        "provide": Text()}, required=("id", "status"))),
    "pitfalls": _PITFALLS,
    # reports written before cautions were reported apart have none
    "cautions": _PITFALLS,
    "artifacts": Mapping({"stage": Choice(CONCLUSION_STAGES),
                          "keep": ListOf(Mapping({"name": Text(), "present": Flag(),
                                                  "path": Text()}))}),
    "facts": ListOf(_FACT),
    "trace": ListOf(Mapping({"rule": Text(), "facts": ListOf(_FACT),
                             "produced": Mapping(values=Anything())})),
    "thresholds": Mapping(values=Number()),
    "threshold_sources": Mapping(values=Text()),
    # the data behind the HTML report's plots (docs/reports.md lists the fields and their units)
    "series": Mapping({"stages": ListOf(Mapping(values=Anything())),
                       "first_abnormal": Anything(),
                       "layers": ListOf(Mapping(values=Anything())),
                       "sensitivity": ListOf(Mapping(values=Anything())),
                       "dumps": ListOf(Mapping(values=Anything())),
                       # a probe's bad-case search: per-sample Cosine (reports before it: none)
                       "samples": ListOf(Mapping(values=Anything()))}),
    # remedies qcdoctor probe --try-fixes measured, one entry per fix_trials.yaml read
    # (docs/reports.md); a case without one has no such key
    "fix_trials": ListOf(Mapping({
        "analysis": Text(), "source": Text(), "schema": Text(const=FIX_TRIALS_SCHEMA),
        "metric": Choice(FIX_METRICS), "output": Text(), "before": Number(),
        "target": Mapping({"error_removed": Number(), "cosine": Number()},
                          required=("error_removed",)),
        "budget": Number(integer=True), "forwards": Number(integer=True),
        "candidates": ListOf(Text()), "trials": ListOf(_FIX_TRIAL),
        "greedy": Mapping({**_FIX_TRIAL.fields, "reached": Flag()}),
        "notes": ListOf(Text()), "caveats": ListOf(Text())},
        required=("analysis", "metric", "target", "trials"))),
}, required=("schema", "case", "language", "conclusion", "missing", "checklist", "pitfalls",
             "facts"))
# given in every report; all but these may be null too
REQUIRED = ("schema", "case", "language", "conclusion", "missing", "next_actions",
            "consistency", "findings", "checklist", "pitfalls", "artifacts", "facts")


def check_report(value, file: str) -> dict:
    """``value`` (decoded JSON) if it has the report's shape; a QcdoctorError naming the
    first key that does not."""
    fix = "write it again with this qcdoctor: qcdoctor triage CASE --format json -o report.json"
    if not isinstance(value, dict) or value.get("schema") != REPORT_SCHEMA_ID:
        raise QcdoctorError(f"not a qcdoctor report (schema {REPORT_SCHEMA_ID} expected)",
                            file=file, fix=fix)
    missing = [k for k in REQUIRED if k not in value]
    if missing:
        raise QcdoctorError(f"the report lacks {', '.join(missing)}", file=file, fix=fix)
    problem = _mismatch(REPORT_SPEC, value, "")
    if problem:
        key, text = problem
        raise QcdoctorError(text, file=file, key=key, fix=fix)
    return value


def _mismatch(spec: Spec, value, key: str) -> tuple[str, str] | None:
    """(key, problem) of the first value that does not fit ``spec``; None when all fit."""
    if value is None or isinstance(spec, Anything):
        return None                 # null stands for "not known", as in case.yaml
    if isinstance(spec, Fact):
        return _fact_mismatch(value, key)
    if isinstance(spec, Mapping):
        if not isinstance(value, dict):
            return key, f"expected a mapping, found {_kind(value)}"
        for name in spec.required:
            if value.get(name) is None:
                path = f"{key}.{name}" if key else name
                return path, "missing" if name not in value else "must not be null"
        for name, item in value.items():
            inner = spec.fields.get(name, spec.values)
            path = f"{key}.{name}" if key else name
            if inner is None:
                return path, "unknown key"
            found = _mismatch(inner, item, path)
            if found:
                return found
        return None
    if isinstance(spec, ListOf):
        if not isinstance(value, list):
            return key, f"expected a list, found {_kind(value)}"
        for i, item in enumerate(value):
            if item is None:
                return f"{key}[{i}]", "a list item must not be null"
            found = _mismatch(spec.item, item, f"{key}[{i}]")
            if found:
                return found
        return None
    if isinstance(spec, Choice):
        if isinstance(value, (dict, list)):
            return key, f"expected one of {spec.doc}, found {_kind(value)}"
        return None if value in spec.choices else (key, f"{value!r} is not one of {spec.doc}")
    if isinstance(spec, Flag):
        return None if isinstance(value, bool) else (key, f"expected true or false, found "
                                                          f"{_kind(value)}")
    if isinstance(spec, Number):
        ok = isinstance(value, int if spec.integer else (int, float)) and \
            not isinstance(value, bool)
        return None if ok else (key, f"expected a {spec.doc}, found {_kind(value)}")
    if isinstance(spec, Text):
        if not isinstance(value, str):
            return key, f"expected text, found {_kind(value)}"
        return None if spec.const in (None, value) else (key, f"expected {spec.const!r}")
    return None


def _fact_mismatch(value, key: str) -> tuple[str, str] | None:
    if not isinstance(value, dict):
        return key, f"expected a fact (a mapping), found {_kind(value)}"
    kind = value.get("type")
    if not isinstance(kind, str):
        return f"{key}.type", "missing" if kind is None else f"expected text, found {_kind(kind)}"
    for name, declared in FACT_TYPES.get(kind, {}).items():
        if name not in value:               # a report's facts carry every field of their type
            return f"{key}.{name}", "missing"
        problem = declared.check(value[name]) if _finite_or_other(value[name]) else \
            "must be a number a float can hold"
        if problem:
            return f"{key}.{name}", problem
    return None


def _finite_or_other(value) -> bool:
    """False for an integer too large for a float (a field check would overflow on it)."""
    return not isinstance(value, int) or isinstance(value, bool) or abs(value) < 10 ** 308


def _kind(value) -> str:
    """What a JSON value is, for a message."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the text {value[:40]!r}"
    return "a list" if isinstance(value, list) else "a mapping"
