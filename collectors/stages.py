"""Stage statuses from metrics, and the transition the stage rules read.

This is the one place that walks the chain: it finds each stage's reference (the
nearest earlier normal stage with a metric), the last normal stage L before the first
abnormal stage A, the unknown stages between them, and later stages that contradict
the drop. Rules then read these facts like the knowledge tables (knowledge.md §5).
"""

from __future__ import annotations

from qcdoctor.engine.fact_types import STAGES
from qcdoctor.engine.vocabulary import DEPLOY_SHOWN_AT

from .case_file import Case
from .metric_direction import metric_direction

# Steps a user may not have (an unknown one is simply not part of their chain).
OPTIONAL_STAGES = ("calib", "nv12_bc", "qdq_removed_bc")
# Which unknown stage to evaluate first when the gap is too wide to name a stage.
BISECT_PREFERENCE = ("quantized_bc", "qat_bc", "qat_export")
DEFAULT_TOLERANCE = {"rel": 0.01}
# 0.45 - 0.4455 is not exactly 0.0045 in binary: a loss equal to the tolerance is normal
EPSILON = 1e-9
# Rises between stages are read from qat on (calib -> qat is QAT recovering calibration)
RISE_FROM = STAGES.index("qat")
# the chain status of a calib loss that QAT recovered: a side finding, not a stage
SIDE = "side"


def _loss(ref: float, value: float, higher_is_better: bool) -> float:
    return ref - value if higher_is_better else value - ref


def _limit(tolerance: dict, ref: float) -> float:
    return tolerance["abs"] if "abs" in tolerance else tolerance["rel"] * abs(ref)


def _decimals(value: float) -> int:
    """Decimals the metric was written with (0.4455 -> 4), for printing its losses."""
    text = repr(float(value))
    if "e" in text or "E" in text:
        mantissa, exponent = text.lower().split("e")
        shown = len(mantissa.split(".")[1]) if "." in mantissa else 0
        return max(0, shown - int(exponent))
    return len(text.split(".")[1].rstrip("0"))


class _Walk:
    """Statuses along the chain, each against the nearest earlier normal stage."""

    def __init__(self, case: Case):
        self.given = case.get("stages", {})
        self.tolerance = case.get("tolerance") or DEFAULT_TOLERANCE
        self.higher_given = case.get("higher_is_better")
        self.case = case

    def direction(self, metric: str) -> tuple[bool, str]:
        return metric_direction(metric, self.higher_given)

    def facts(self) -> list[dict]:
        facts, reference, seen_metric = [], None, False
        for stage in STAGES:
            entry = self.given.get(stage, {})
            status, value, metric = entry.get("status"), entry.get("value"), entry.get("metric", "")
            derived, ref_name, extra = False, "", {}
            if status is None and value is not None:
                derived = True
                if reference is None and not seen_metric:
                    status, extra = "normal", {"basis": "baseline"}
                elif reference is None:
                    status, extra = "unknown", {"basis": "no_reference"}
                elif metric and reference[1] and metric != reference[1]:
                    status, ref_name, extra = "unknown", reference[0], {"basis": "metric_mismatch"}
                else:
                    ref_name = reference[0]
                    status, extra = self.compare(reference, metric, value)
            status = status or "unknown"
            if value is not None:
                seen_metric = True
                if status == "normal":
                    reference = (stage, metric or (reference[1] if reference else ""), value)
            facts.append({"type": "stage", "stage": stage, "status": status,
                          "metric": metric or "",
                          "value": float(value) if value is not None else 0.0,
                          "has_value": value is not None, "reference": ref_name,
                          "derived": derived, "source": self.source(stage), **extra})
        return facts

    def compare(self, reference: tuple, metric: str, value: float) -> tuple[str, dict]:
        name = metric or reference[1]
        higher, why = self.direction(name)
        loss = _loss(reference[2], value, higher)
        limit = _limit(self.tolerance, reference[2])
        decimals = max(_decimals(reference[2]), _decimals(value))
        status = "abnormal" if loss > limit + EPSILON else "normal"
        return status, {"basis": "compared", "basis_drop": round(loss, decimals),
                        "basis_limit": round(limit, 12), "basis_decimals": decimals,
                        "direction": "higher" if higher else "lower", "direction_from": why}

    def source(self, stage: str) -> str:
        return self.case.source(f"stages.{stage}") if stage in self.given else "not given"


def derive_stage_facts(case: Case, dump_pairs: list[dict] = ()) -> list[dict]:
    walk = _Walk(case)
    facts = walk.facts()
    by_stage = {f["stage"]: f for f in facts}
    _apply_dump_evidence(by_stage, dump_pairs)
    status_of = {s: by_stage[s]["status"] for s in STAGES}
    sources = {s: by_stage[s]["source"] for s in STAGES}
    extra = []
    if status_of["calib"] == "abnormal" and status_of["qat"] == "normal":
        status_of["calib"] = SIDE
        extra.append({"type": "calib_recovered", "source": f"{sources['calib']} -> {sources['qat']}"})
    extra += _rises(by_stage, walk)
    return facts + extra + _transition_facts(status_of, sources)


def _apply_dump_evidence(by_stage: dict[str, dict], dump_pairs) -> None:
    """x86 and board bit-identical on the same input: the unknown side shares the other's status."""
    for pair in dump_pairs:
        if (pair["left"], pair["right"]) != ("hbm_x86", "board") or pair["identical"] != "yes":
            continue
        x86, board = by_stage["hbm_x86"], by_stage["board"]
        for unknown, known in ((x86, board), (board, x86)):
            if unknown["status"] == "unknown" and known["status"] != "unknown":
                unknown.update(status=known["status"], derived=True, reference=known["stage"],
                               basis="dump_identical",
                               source=f"{pair.get('source', 'dumps')} (identical)")


def _rises(by_stage: dict[str, dict], walk: _Walk) -> list[dict]:
    """From qat on, a stage clearly better than the evaluated stage before it."""
    out, before = [], None
    for stage in STAGES[RISE_FROM:]:
        fact = by_stage[stage]
        if not fact["has_value"]:
            continue
        if before and (not fact["metric"] or not before["metric"]
                       or fact["metric"] == before["metric"]):
            higher, _ = walk.direction(fact["metric"] or before["metric"])
            gain = -_loss(before["value"], fact["value"], higher)
            limit = _limit(walk.tolerance, before["value"])
            if gain > limit + EPSILON:
                decimals = max(_decimals(before["value"]), _decimals(fact["value"]))
                out.append({"type": "stage_rise", "before": before["stage"], "after": stage,
                            "gain": round(gain, decimals), "limit": round(limit, 12),
                            "source": f"{before['source']} -> {fact['source']}"})
        before = fact
    return out


def _next_unknown(status_of: dict[str, str]) -> str:
    """quantized.bc when unknown, else the first unknown required stage after it."""
    if status_of["quantized_bc"] == "unknown":
        return "quantized_bc"
    later = STAGES[STAGES.index("quantized_bc") + 1:]
    return next((s for s in later if status_of[s] == "unknown" and s not in OPTIONAL_STAGES), "")


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
              "reference_missing": bool(first_abnormal and not last_normal),
              "deployment_side": first_abnormal in DEPLOY_SHOWN_AT,
              "board": status_of["board"], "next_unknown": _next_unknown(status_of),
              "source": source}]
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
