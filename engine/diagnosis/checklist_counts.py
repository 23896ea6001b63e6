"""The deployment checklist of a report, counted once per check: how many items failed,
are unknown, passed or do not apply. The audit's summary line, the intake's closing summary
and the batch summary all count with it, so they never disagree on one case.

A finer check rolls up into its mandatory item, worst status wins (knowledge.md §10 rev 2):
an odd NV12 size fails "NV12 input height and width are even" and, through it, "Padding /
alignment". That is one mistake shown on two rows, and it is counted once, where it was
judged: a mandatory item whose status its finer checks decided (the report lists them as
its ``parts``) is counted through those checks, not again. Every other item counts under
its own status, a mandatory item that failed on its own evidence included.
"""

from __future__ import annotations

# in the order the reports name them
COUNTED_STATUSES = ("fail", "unknown", "pass", "not_applicable")


def counted_items(report: dict) -> list[dict]:
    """The checklist items that count, in report order: all but a mandatory item whose
    status its finer checks decided (those checks count in its place)."""
    return [item for item in report.get("checklist") or [] if not item.get("parts")]


def checklist_counts(report: dict) -> dict[str, int]:
    """{status: how many checks have it} for fail, unknown, pass and not_applicable, and
    ``rolled_up``: the mandatory items shown with a finer check's status (counted through
    it); all zero when the report has no checklist."""
    items = counted_items(report)
    counts = {status: sum(item["status"] == status for item in items)
              for status in COUNTED_STATUSES}
    counts["rolled_up"] = len(report.get("checklist") or []) - len(items)
    return counts


def failed_items(report: dict) -> list[dict]:
    """The failed checks, as counted: the ones to fix, each once."""
    return [item for item in counted_items(report) if item["status"] == "fail"]


def failure_texts(item: dict) -> list[str]:
    """What failed in a counted item: the texts of its own failing evidence (a finer
    check's, shown on its mandatory item, belongs to that check's row)."""
    return [evidence["text"] for evidence in item.get("evidence", [])
            if evidence["status"] == "fail" and not evidence.get("part")]
