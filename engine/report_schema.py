"""The shape of a JSON report (schema ``qcdoctor/report-v1``), in the case file's spec
classes: ``qcdoctor schema report`` is generated from it and ``check_report`` reads
reports given back to qcdoctor (``qcdoctor diff``) with it, so the two never drift."""

from __future__ import annotations

from dataclasses import dataclass

from qcdoctor.collectors.yaml_schema import Choice, Flag, ListOf, Mapping, Number, Spec, Text

from .errors import QcdoctorError
from .fact_types import CHECKLIST_ITEMS, CHECKLIST_STATUSES, CONCLUSION_STAGES
from .vocabulary import COST_CLASSES

REPORT_SCHEMA_ID = "qcdoctor/report-v1"


@dataclass
class Anything(Spec):
    """A value of any shape (facts, rule outputs): its fields are the fact types'."""
    doc: str = "any value"


_SEVERITY = Choice(("info", "warning", "error"))
_LANG = Choice(("zh", "en"))
_FACT = Mapping({"type": Text()}, values=Anything())
_RULED_TEXT = Mapping({"rule": Text(), "text": Text(), "severity": _SEVERITY})

REPORT_SPEC = Mapping({
    "schema": Text(const=REPORT_SCHEMA_ID),
    "tool": Mapping({"name": Text(), "version": Text()}),
    "case": Mapping({"path": Text(), "title": Text()}),
    "language": _LANG,
    "conclusion": Mapping({"stage": Choice(CONCLUSION_STAGES), "suspect": Text(),
                           "determined": Flag(),
                           # overridden: a conclusion a higher-priority one replaced
                           "evidence": ListOf(Mapping({"rule": Text(), "text": Text(),
                                                       "severity": _SEVERITY,
                                                       "overridden": Flag()}))}),
    "missing": ListOf(Mapping({"id": Text(), "question": Text(), "why": Text(),
                               "rule": Text()})),
    "ask": ListOf(Text()),
    "next_actions": ListOf(Mapping({
        "id": Text(), "kind": Text(), "cost": Choice(COST_CLASSES),
        "analysis_model_type": Text(), "baseline": Text(), "analysis": Text(),
        "stage_to_evaluate": Text(), "text": Text(), "code": Text(), "rule": Text()})),
    "consistency": Mapping({"applicable": Flag(), "level": Number(integer=True),
                            "requires_retrain": Flag(), "prerequisites_met": Flag(),
                            "text": Text(), "old_level": Number(integer=True), "rule": Text()}),
    "findings": ListOf(Mapping({"rule": Text(), "severity": _SEVERITY, "title": Text(),
                                "text": Text(), "evidence": Mapping(values=_FACT)})),
    "checklist": ListOf(Mapping({
        "id": Choice(CHECKLIST_ITEMS), "status": Choice(CHECKLIST_STATUSES),
        "evidence": ListOf(Mapping({"rule": Text(), "status": Choice(CHECKLIST_STATUSES),
                                    "text": Text(), "sources": ListOf(Text())})),
        "title": Text(), "mandatory": Flag(),
        "parts": ListOf(Mapping({"id": Choice(CHECKLIST_ITEMS),
                                 "status": Choice(CHECKLIST_STATUSES), "title": Text()})),
        "provide": Text()})),
    "pitfalls": ListOf(Mapping({"id": Text(), "text": Text(), "correct_practice": Text(),
                                "rule": Text(), "severity": _SEVERITY})),
    "artifacts": Mapping({"stage": Choice(CONCLUSION_STAGES),
                          "keep": ListOf(Mapping({"name": Text(), "present": Flag(),
                                                  "path": Text()}))}),
    "facts": ListOf(_FACT),
    "trace": ListOf(Mapping({"rule": Text(), "facts": ListOf(_FACT),
                             "produced": Mapping(values=Anything())})),
    "thresholds": Mapping(values=Number()),
    "threshold_sources": Mapping(values=Text()),
    # the data behind the HTML report's plots (the README lists the fields and their units)
    "series": Mapping({"stages": ListOf(Mapping(values=Anything())),
                       "first_abnormal": Anything(),
                       "layers": ListOf(Mapping(values=Anything())),
                       "sensitivity": ListOf(Mapping(values=Anything())),
                       "dumps": ListOf(Mapping(values=Anything()))}),
})
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
    if isinstance(spec, Mapping):
        if not isinstance(value, dict):
            return key, "expected a mapping"
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
            return key, "expected a list"
        return next(filter(None, (_mismatch(spec.item, v, f"{key}[{i}]")
                                  for i, v in enumerate(value))), None)
    if isinstance(spec, Choice):
        return None if value in spec.choices else (key, f"{value!r} is not one of {spec.doc}")
    if isinstance(spec, Flag):
        return None if isinstance(value, bool) else (key, "expected true or false")
    if isinstance(spec, Number):
        ok = isinstance(value, int if spec.integer else (int, float)) and \
            not isinstance(value, bool)
        return None if ok else (key, f"expected a {spec.doc}")
    if isinstance(spec, Text):
        if not isinstance(value, str):
            return key, "expected text"
        return None if spec.const in (None, value) else (key, f"expected {spec.const!r}")
    return None
