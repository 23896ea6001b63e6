"""Stage statuses from metrics, and the transition the stage rules read.

This is the one place that walks the chain: it finds each stage's reference (the
nearest earlier normal stage with a metric), the last normal stage L before the first
abnormal stage A, the unknown stages between them, and later normal stages that
contradict the drop. Rules then read these facts like the knowledge tables.
"""

from __future__ import annotations

from qcdoctor.engine.fact_types import STAGES

from .case_file import Case

# Steps a user may not have (an unknown one is simply not part of their chain).
OPTIONAL_STAGES = ("calib", "nv12_bc", "qdq_removed_bc")
# Which unknown stage to evaluate first when the gap is too wide to name a stage.
BISECT_PREFERENCE = ("quantized_bc", "qat_bc", "qat_export")
DEFAULT_TOLERANCE = {"rel": 0.01}


def _drop(ref: float, value: float, higher_is_better: bool) -> float:
    return ref - value if higher_is_better else value - ref


def derive_stage_facts(case: Case) -> list[dict]:
    given = case.get("stages", {})
    tolerance = case.get("tolerance") or DEFAULT_TOLERANCE
    higher = case.get("higher_is_better", True)
    facts, status_of, sources = [], {}, {}
    reference = None        # (stage, metric, value) of the nearest earlier normal stage
    seen_metric = False
    for stage in STAGES:
        entry = given.get(stage, {})
        status, value, metric = entry.get("status"), entry.get("value"), entry.get("metric", "")
        derived, ref_name, basis, extra = False, "", "", {}
        if status is None and value is not None:
            derived = True
            if reference is None and not seen_metric:
                status, basis = "normal", "baseline"
            elif reference is None:
                status, basis = "unknown", "no_reference"
            elif metric and reference[1] and metric != reference[1]:
                status, ref_name, basis = "unknown", reference[0], "metric_mismatch"
            else:
                ref_name, basis = reference[0], "compared"
                limit = tolerance["abs"] if "abs" in tolerance else \
                    tolerance["rel"] * abs(reference[2])
                drop = _drop(reference[2], value, higher)
                status = "abnormal" if drop > limit else "normal"
                extra = {"basis_drop": round(drop, 12), "basis_limit": round(limit, 12)}
        status = status or "unknown"
        if value is not None:
            seen_metric = True
            if status == "normal":
                reference = (stage, metric or (reference[1] if reference else ""), value)
        status_of[stage] = status
        sources[stage] = case.source(f"stages.{stage}") if stage in given else "not given"
        fact = {"type": "stage", "stage": stage, "status": status, "metric": metric or "",
                "value": float(value) if value is not None else 0.0,
                "has_value": value is not None, "reference": ref_name, "derived": derived,
                "source": sources[stage]}
        if basis:
            fact.update(basis=basis, **extra)
        facts.append(fact)
    return facts + _transition_facts(status_of, sources)


def _transition_facts(status_of: dict[str, str], sources: dict[str, str]) -> list[dict]:
    known = [s for s in STAGES if status_of[s] != "unknown"]
    first_abnormal = next((s for s in STAGES if status_of[s] == "abnormal"), "")
    before = STAGES[:STAGES.index(first_abnormal)] if first_abnormal else ()
    last_normal = next((s for s in reversed(before) if status_of[s] == "normal"), "")
    source = "derived from the stage table"
    facts = [{"type": "stage_summary", "known": len(known),
              "normal": sum(status_of[s] == "normal" for s in STAGES),
              "abnormal": sum(status_of[s] == "abnormal" for s in STAGES),
              "first_abnormal": first_abnormal, "last_normal": last_normal,
              "reference_missing": bool(first_abnormal and not last_normal), "source": source}]
    if first_abnormal and last_normal:
        lo, hi = STAGES.index(last_normal), STAGES.index(first_abnormal)
        between = [s for s in STAGES[lo + 1:hi] if s not in OPTIONAL_STAGES]
        bisect = next((s for s in BISECT_PREFERENCE if s in between), between[0] if between else "")
        facts.append({"type": "transition", "from": last_normal, "to": first_abnormal,
                      "gap": len(between), "skipped": between[0] if between else "",
                      "bisect": bisect,
                      "source": f"{sources[last_normal]} -> {sources[first_abnormal]}"})
        later_normal = next((s for s in STAGES[hi + 1:] if status_of[s] == "normal"), "")
        if later_normal:
            facts.append({"type": "non_monotonic", "abnormal": first_abnormal,
                          "normal": later_normal,
                          "source": f"{sources[first_abnormal]} -> {sources[later_normal]}"})
    return facts
