"""The metric the stage table is evaluated with, kept in case.yaml the moment it is
confirmed: case.yaml names a metric per stage entry (``stages.qat_bc: {metric: mAP,
value: 0.449}``), and has no key for the metric alone.

A confirmed metric goes onto every stage value written without one; while no stage has
a value yet, it waits on the first stage of the table (``qat: {metric: mAP}``), which a
later answer fills in, so a session stopped right after the metric question keeps it
(and a resumed one does not ask it again). That waiting entry is dropped once a stage
value carries the metric: it says nothing of its own.
"""

from __future__ import annotations

from qcdoctor.engine.intake.case_writer import CaseDocument
from qcdoctor.fact_types import STAGES

FIRST_ASKED = "qat"         # the first stage result of the stage table (rules/questions.yaml)


def carry_metric(doc: CaseDocument, old: str | None, metric: str) -> str:
    """Write ``metric`` onto the stage entries that had none or the one it replaces (an
    answer changed after going back); returns it."""
    stages = doc.get("stages") or {}
    for stage, entry in list(stages.items()):
        if not isinstance(entry, dict):
            continue
        named = entry.get("metric")
        if (named is None and "value" in entry) or (named is not None and named == old):
            doc.set(f"stages.{stage}", {"metric": metric, **_without_metric(entry)})
    if not _carried(doc, metric):
        doc.set(f"stages.{FIRST_ASKED}", {"metric": metric})
    _drop_waiting(doc)
    return metric


def stage_entry(doc: CaseDocument, stage: str, value: dict, metric: str | None) -> None:
    """A stage's answer (``{value: 0.449}`` or ``{status: abnormal}``) written with the
    metric: a value always carries it; a status keeps the one its entry already had."""
    old = doc.get(f"stages.{stage}")
    kept = old.get("metric") if isinstance(old, dict) else None
    named = metric if "value" in value else kept
    doc.set(f"stages.{stage}", {"metric": named, **value} if named else dict(value))
    _drop_waiting(doc)


def stage_given(doc: CaseDocument, stage: str) -> bool:
    """The stage has a result (a value or a status), not only the waiting metric."""
    entry = doc.get(f"stages.{stage}")
    return isinstance(entry, dict) and ("value" in entry or "status" in entry)


def _carried(doc: CaseDocument, metric: str) -> bool:
    stages = doc.get("stages") or {}
    return any(isinstance(e, dict) and e.get("metric") == metric for e in stages.values())


def _drop_waiting(doc: CaseDocument) -> None:
    """Remove the entries that hold only the metric once a stage value carries it."""
    stages = doc.get("stages") or {}
    values = {e.get("metric") for e in stages.values() if isinstance(e, dict) and "value" in e}
    for stage in [s for s in STAGES if s in stages]:
        entry = stages[stage]
        if isinstance(entry, dict) and set(entry) == {"metric"} and entry["metric"] in values:
            del stages[stage]


def _without_metric(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if k != "metric"}
