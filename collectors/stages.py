"""Stage statuses from metrics, and the facts the stage rules read.

This is the one place that walks the chain: it finds each stage's reference (the
nearest earlier normal stage with a metric), the last normal stage L before the first
abnormal stage A, the unknown stages between them, and later stages that contradict
the drop. Rules then read these facts like the knowledge tables (knowledge.md §5).

Revision 3 (knowledge.md §16): values of one metric on different scales are not
compared (R3.2); a metric whose name gives no direction is read both ways (R3.1); every
later step that loses more than the tolerance is a further drop with its own stage (R3.3).

Revision 4 (knowledge.md §17): a first drop just over the tolerance is not confirmed when a
much larger step follows, which then makes the conclusion (R4.8); a verdict the default
tolerance decided says so; metric names are compared by ``metric_key`` (R4.9), and values
under two names are not compared: the report asks whether they are one metric.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcdoctor.collectors.case_file import Case
from qcdoctor.collectors.metric_direction import (
    UNKNOWN,
    is_fraction_metric,
    metric_direction,
    metric_key,
    same_metric,
)
from qcdoctor.fact_types import STAGES
from qcdoctor.vocabulary import DEPLOY_SHOWN_AT, STAGE_LABELS

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
# R3.2: one value about 100 times another (within 10 %) is a percentage beside a fraction
PERCENT, PERCENT_SLACK = 100.0, 0.10
# R4.8: a first drop under twice the tolerance is not confirmed when a later step loses at
# least five times as much: that step makes the conclusion
SMALL_DROP, LARGER_STEP = 2.0, 5.0
# a verdict the tolerance decides: its loss is within this factor of the tolerance either
# way, so a tolerance that much larger or smaller would turn it (the factor of R4.8)
DECIDING_FACTOR = 2.0

# knowledge.md §5: the stage a drop between two known stages points at, as the stage rules
# (ST010-ST091) conclude it. Used only to name a step no rule concludes: a further drop
# (R3.3) or one reading of a metric whose direction is unknown (R3.1); a test holds this
# table to the rules.
_BCS = ("quantized_bc", "nv12_bc", "qdq_removed_bc")
ADJACENT_STEPS = {
    ("float", "calib"): ("calibration", "calibration_precision"),
    ("float", "qat"): ("qat_training", "qat_precision"),
    ("calib", "qat"): ("qat_training", "qat_precision"),
    ("qat", "qat_export"): ("pre_export", "lut_fixed_point"),
    ("qat_export", "qat_bc"): ("export", "hbir_export"),
    ("qat_bc", "quantized_bc"): ("convert", "convert_requantize"),
    ("quantized_bc", "nv12_bc"): ("nv12_insertion", "nv12_preprocess"),
    ("quantized_bc", "qdq_removed_bc"): ("qdq_removal", "io_quant_types"),
    ("nv12_bc", "qdq_removed_bc"): ("qdq_removal", "io_quant_types"),
    **{(bc, "hbm_x86"): ("compile", "compile_config_or_input_adaptation") for bc in _BCS},
    ("hbm_x86", "board"): ("user_side", "board_integration"),
}
# one unknown stage between them that the knowledge names a stage for anyway
UNSPLIT_STEPS = {
    ("qat", "qat_bc", "qat_export"): ("export", "pre_export_or_export"),
    **{(bc, "board", "hbm_x86"): ("compile", "compile_or_board_not_split") for bc in _BCS},
}
WIDE_GAP = ("undetermined", "wide_gap")


def step_stage(before: str, after: str, gap: int, skipped: str) -> tuple[str, str]:
    """(report stage, suspect) of a drop from ``before`` to ``after``."""
    if gap == 0:
        return ADJACENT_STEPS.get((before, after), WIDE_GAP)
    if gap == 1:
        return UNSPLIT_STEPS.get((before, after, skipped), WIDE_GAP)
    return WIDE_GAP


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
    """Statuses along the chain, each against the nearest earlier normal stage.

    ``unknown_as``: the direction taken where the metric's name gives none (one of the
    two readings of R3.1). ``compare=False`` when the values mix scales (R3.2): nothing
    is compared, and every derived status but the baseline's stays unknown.

    ``doubted``: stages whose drop is not confirmed (R4.8); a drop there reads as normal,
    so the stages after it are compared with it.
    """

    def __init__(self, case: Case, unknown_as: bool = True, compare: bool = True,
                 doubted: frozenset[str] = frozenset()):
        self.given = case.get("stages", {})
        self.tolerance = case.get("tolerance") or DEFAULT_TOLERANCE
        self.higher_given = case.get("higher_is_better")
        self.unknown_as = unknown_as
        self.compare_values = compare
        self.doubted = doubted
        self.case = case
        self.other_names: list[dict] = []     # R4.9: a stage under another metric name

    def direction(self, metric: str) -> tuple[bool, str]:
        higher, why = metric_direction(metric, self.higher_given)
        return (self.unknown_as if higher is None else higher), why

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
                elif not self.compare_values:
                    status, extra = "unknown", {"basis": "scale_mismatch"}
                elif reference is None:
                    status, extra = "unknown", {"basis": "no_reference"}
                elif metric and reference[1] and not same_metric(metric, reference[1]):
                    status, ref_name, extra = "unknown", reference[0], {"basis": "metric_mismatch"}
                    self.note_other_name(stage, metric, value, reference)
                else:
                    ref_name = reference[0]
                    status, extra = self.compare(reference, metric, value)
                    if status == "abnormal" and stage in self.doubted:
                        status, extra["basis"] = "normal", "unconfirmed_drop"
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
        """Where the stage's result is written; "not given" for an entry without one (the
        intake keeps a confirmed metric as ``qat: {metric: mAP}`` before any value)."""
        entry = self.given.get(stage)
        given = isinstance(entry, dict) and ("status" in entry or "value" in entry)
        return self.case.source(f"stages.{stage}") if given else "not given"

    def note_other_name(self, stage: str, metric: str, value: float, reference: tuple) -> None:
        """R4.9: one fact per pair of names, at the first stage under the other name."""
        pair = (metric_key(reference[1]), metric_key(metric))
        if any((metric_key(f["reference_metric"]), metric_key(f["metric"])) == pair
               for f in self.other_names):
            return
        self.other_names.append({
            "type": "metric_names", "stage": stage, "metric": metric, "value": float(value),
            "reference": reference[0], "reference_metric": reference[1],
            "reference_value": float(reference[2]),
            "source": f"{self.source(reference[0])} -> {self.source(stage)}"})


@dataclass
class _Chain:
    """The chain read one way: a fact per stage and what follows from the statuses."""
    stages: list[dict]
    status_of: dict[str, str]       # calib is SIDE when QAT recovered its loss
    side: list[dict]                # calib_recovered
    rises: list[dict]
    further: list[dict]             # R3.3 further drops
    unconfirmed: list[dict]         # R4.8 small first drops a larger step outweighs
    other_names: list[dict]         # R4.9 stages under another metric name

    @property
    def by_stage(self) -> dict[str, dict]:
        return {f["stage"]: f for f in self.stages}

    @property
    def sources(self) -> dict[str, str]:
        return {f["stage"]: f["source"] for f in self.stages}

    def facts(self) -> list[dict]:
        steps = _transitions(self.status_of, self.sources)
        renamed = {f["stage"] for f in self.stages if f.get("basis") == "metric_mismatch"}
        for step in steps:
            if step["type"] == "transition":
                # R4.9: a bisection stage with a result under another metric name is not
                # evaluated again: whether the names are one metric is asked instead
                step["bisect_named_apart"] = step["bisect"] in renamed
        return (self.stages + self.side + self.rises
                + [_summary(self.status_of)]
                + steps + self.further
                + self.unconfirmed + self.other_names)

    def verdict(self) -> tuple[str, str]:
        """The (stage, suspect) the stage rules conclude from this chain alone."""
        steps = _transitions(self.status_of, self.sources)
        if self.rises or any(f["type"] == "non_monotonic" for f in steps):
            return "undetermined", "evaluation_inconsistent"
        drop = next((f for f in steps if f["type"] == "transition"), None)
        if drop:
            return step_stage(drop["from"], drop["to"], drop["gap"], drop["skipped"])
        if any(status == "abnormal" for status in self.status_of.values()):
            return "undetermined", "no_reference_stage"
        if self.status_of["board"] == "normal":
            return "none", "within_tolerance"
        return "undetermined", "abnormal_stage_not_evaluated"


def derive_stage_facts(case: Case, dump_pairs: list[dict] = ()) -> list[dict]:
    mismatches = scale_mismatches(case)
    if mismatches:
        return _unscaled_facts(case, dump_pairs, mismatches)
    metric = _directionless_metric(case)
    if not metric:
        facts = _read_chain(case, dump_pairs).facts()
    else:
        # without a direction a "small drop" may be a rise: R4.8 reads neither way
        facts = _both_readings(_read_chain(case, dump_pairs, True, doubt=False),
                               _read_chain(case, dump_pairs, False, doubt=False), metric)
    return facts + _default_tolerance(case, facts)


def _read_chain(case: Case, dump_pairs, unknown_as: bool = True, doubt: bool = True) -> _Chain:
    """The chain read with one direction; with ``doubt``, a small first drop that a larger
    later step outweighs reads as normal (R4.8), again for the drop that is then first."""
    unconfirmed: list[dict] = []
    for _ in STAGES:        # each pass doubts one more stage: the chain bounds the passes
        walk = _Walk(case, unknown_as, doubted=frozenset(f["to"] for f in unconfirmed))
        facts = walk.facts()
        by_stage = {f["stage"]: f for f in facts}
        _apply_dump_evidence(by_stage, dump_pairs)
        status_of, side = _side_step(by_stage)
        small = _outweighed_drop(by_stage, status_of, walk) if doubt else None
        if small is None:
            break
        unconfirmed.append(small)
    return _Chain(facts, status_of, side, _rises(by_stage, walk),
                  _steps(by_stage, status_of, walk), unconfirmed,
                  _placed_names(walk.other_names, status_of))


def _placed_names(other_names: list[dict], status_of: dict[str, str]) -> list[dict]:
    """R4.9: a stage under another name decides the stage when no stage before it is
    abnormal: the drop may lie at it, hidden by the name."""
    first = next((s for s in STAGES if status_of[s] == "abnormal"), "")
    for fact in other_names:
        fact["decides_stage"] = not first or STAGES.index(fact["stage"]) < STAGES.index(first)
    return other_names


def _side_step(by_stage: dict[str, dict]) -> tuple[dict[str, str], list[dict]]:
    """The chain statuses, calib a side step when QAT recovered its loss (§5 rev 2)."""
    status_of = {s: by_stage[s]["status"] for s in STAGES}
    side = []
    if status_of["calib"] == "abnormal" and status_of["qat"] == "normal":
        status_of["calib"] = SIDE
        side.append({"type": "calib_recovered",
                     "source": f"{by_stage['calib']['source']} -> {by_stage['qat']['source']}"})
    return status_of, side


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


def _comparable(a: dict, b: dict) -> bool:
    return not a["metric"] or not b["metric"] or same_metric(a["metric"], b["metric"])


def _outweighed_drop(by_stage: dict[str, dict], status_of: dict[str, str],
                     walk: _Walk) -> dict | None:
    """R4.8: the first abnormal stage when its drop is under twice the tolerance and a later
    step between evaluated stages loses at least five times as much (None otherwise)."""
    first = next((s for s in STAGES if status_of[s] == "abnormal"), "")
    fact = by_stage.get(first, {})
    if fact.get("basis") != "compared" or \
            fact["basis_drop"] >= SMALL_DROP * fact["basis_limit"] - EPSILON:
        return None
    later = _largest_step_after(by_stage, first, walk)
    if later is None or later["drop"] < LARGER_STEP * fact["basis_drop"] - EPSILON:
        return None
    ref = by_stage[fact["reference"]]
    between = _between(ref["stage"], first)
    stage, suspect = step_stage(ref["stage"], first, len(between),
                                between[0] if between else "")
    return {"type": "unconfirmed_drop", "from": ref["stage"], "to": first,
            "gap": len(between), "from_value": ref["value"], "to_value": fact["value"],
            "drop": fact["basis_drop"], "limit": fact["basis_limit"],
            "stage": stage, "suspect": suspect,
            "later_from": later["from"], "later_to": later["to"], "later_drop": later["drop"],
            # "18 times as much": whole times, never rounded up past what was measured
            "times": int(later["drop"] / fact["basis_drop"] + EPSILON),
            "source": f"{ref['source']} -> {fact['source']}"}


def _largest_step_after(by_stage: dict[str, dict], first: str, walk: _Walk) -> dict | None:
    """The largest loss between consecutive evaluated stages from ``first`` on."""
    start = STAGES.index(first)
    valued = [by_stage[s] for s in STAGES[start:] if by_stage[s]["has_value"]]
    steps = []
    for before, fact in zip(valued, valued[1:], strict=False):
        if _comparable(before, fact):
            loss, _, decimals = _step_loss(before, fact, walk)
            steps.append({"from": before["stage"], "to": fact["stage"],
                          "drop": round(loss, decimals)})
    return max(steps, key=lambda step: step["drop"], default=None)


def _step_loss(before: dict, fact: dict, walk: _Walk) -> tuple[float, float, int]:
    """(loss, tolerance, decimals to print it with) of the step between two evaluated
    stages; the tolerance is taken on the earlier value."""
    higher, _ = walk.direction(fact["metric"] or before["metric"])
    decimals = max(_decimals(before["value"]), _decimals(fact["value"]))
    return (_loss(before["value"], fact["value"], higher),
            _limit(walk.tolerance, before["value"]), decimals)


def _rises(by_stage: dict[str, dict], walk: _Walk) -> list[dict]:
    """From qat on, a stage clearly better than the evaluated stage before it."""
    out, before = [], None
    for stage in STAGES[RISE_FROM:]:
        fact = by_stage[stage]
        if not fact["has_value"]:
            continue
        if before and _comparable(before, fact):
            loss, limit, decimals = _step_loss(before, fact, walk)
            gain = -loss
            if gain > limit + EPSILON:
                out.append({"type": "stage_rise", "before": before["stage"], "after": stage,
                            "gain": round(gain, decimals), "limit": round(limit, 12),
                            "source": f"{before['source']} -> {fact['source']}"})
        before = fact
    return out


def _steps(by_stage: dict[str, dict], status_of: dict[str, str], walk: _Walk) -> list[dict]:
    """R3.3: every evaluated stage after the first abnormal one, against the evaluated stage
    just before it. The stage fact keeps the step for the stage table; a step from the first
    abnormal stage on that loses more than the tolerance is a further drop."""
    first = next((s for s in STAGES if status_of[s] == "abnormal"), "")
    if not first:
        return []
    start = STAGES.index(first)
    valued = [by_stage[s] for s in STAGES if by_stage[s]["has_value"]]
    further = []
    for before, fact in zip(valued, valued[1:], strict=False):
        if STAGES.index(fact["stage"]) <= start or not _comparable(before, fact) \
                or before["stage"] == fact["reference"]:
            continue        # a step against the reference is the stage's own drop
        loss, limit, decimals = _step_loss(before, fact, walk)
        fact.update(step_from=before["stage"], step_drop=round(loss, decimals),
                    step_limit=round(limit, 12), step_decimals=decimals)
        if loss > limit + EPSILON and STAGES.index(before["stage"]) >= start:
            further.append(_further_drop(before, fact, round(loss, decimals), limit))
    return further


def _between(before: str, after: str) -> list[str]:
    """The required stages strictly between two stages of the chain."""
    lo, hi = STAGES.index(before), STAGES.index(after)
    return [s for s in STAGES[lo + 1:hi] if s not in OPTIONAL_STAGES]


def _bisect(between: list[str]) -> str:
    return next((s for s in BISECT_PREFERENCE if s in between), between[0] if between else "")


def _further_drop(before: dict, fact: dict, drop: float, limit: float) -> dict:
    between = _between(before["stage"], fact["stage"])
    skipped = between[0] if between else ""
    stage, suspect = step_stage(before["stage"], fact["stage"], len(between), skipped)
    return {"type": "further_drop", "from": before["stage"], "to": fact["stage"],
            "gap": len(between), "skipped": skipped, "bisect": _bisect(between),
            "drop": drop, "limit": round(limit, 12), "stage": stage, "suspect": suspect,
            "source": f"{before['source']} -> {fact['source']}"}


def _next_unknown(status_of: dict[str, str]) -> str:
    """quantized.bc when unknown, else the first unknown required stage after it."""
    if status_of["quantized_bc"] == "unknown":
        return "quantized_bc"
    later = STAGES[STAGES.index("quantized_bc") + 1:]
    return next((s for s in later if status_of[s] == "unknown" and s not in OPTIONAL_STAGES), "")


def _ends(status_of: dict[str, str]) -> tuple[str, str]:
    """(last normal stage L, first abnormal stage A); "" where there is none."""
    first_abnormal = next((s for s in STAGES if status_of[s] == "abnormal"), "")
    before = STAGES[:STAGES.index(first_abnormal)] if first_abnormal else ()
    return next((s for s in reversed(before) if status_of[s] == "normal"), ""), first_abnormal


def _summary(status_of: dict[str, str]) -> dict:
    last_normal, first_abnormal = _ends(status_of)
    return {"type": "stage_summary",
            "known": sum(status_of[s] != "unknown" for s in STAGES),
            "normal": sum(status_of[s] == "normal" for s in STAGES),
            "abnormal": sum(status_of[s] == "abnormal" for s in STAGES),
            "first_abnormal": first_abnormal, "last_normal": last_normal,
            "reference_missing": bool(first_abnormal and not last_normal),
            "deployment_side": first_abnormal in DEPLOY_SHOWN_AT,
            "board": status_of["board"], "next_unknown": _next_unknown(status_of),
            "source": "derived from the stage table"}


def _transitions(status_of: dict[str, str], sources: dict[str, str]) -> list[dict]:
    last_normal, first_abnormal = _ends(status_of)
    if not (first_abnormal and last_normal):
        return []
    between = _between(last_normal, first_abnormal)
    facts = [{"type": "transition", "from": last_normal, "to": first_abnormal,
              "gap": len(between), "skipped": between[0] if between else "",
              "bisect": _bisect(between),
              "source": f"{sources[last_normal]} -> {sources[first_abnormal]}"}]
    hi = STAGES.index(first_abnormal)
    later_normal = next((s for s in STAGES[hi + 1:] if status_of[s] == "normal"), "")
    if later_normal:
        facts.append({"type": "non_monotonic", "abnormal": first_abnormal,
                      "normal": later_normal,
                      "source": f"{sources[first_abnormal]} -> {sources[later_normal]}"})
    return facts


# --- R3.1: a metric whose name gives no direction -------------------------------------

def _directionless_metric(case: Case) -> str:
    """The first metric of the stage results whose direction neither the case nor the
    name gives ("" when every one is known)."""
    if case.get("higher_is_better") is not None:
        return ""
    derived = (metric for _, metric, _, given in _effective_metrics(case) if not given)
    return next((m for m in derived if m and metric_direction(m, None)[1] == UNKNOWN), "")


def _both_readings(higher: _Chain, lower: _Chain, metric: str) -> list[dict]:
    """Both readings of the chain: when they give the same stage, the higher-is-better one
    stands (the rules conclude from it); otherwise the statuses that depend on the
    direction stay unknown and nothing is concluded from them."""
    (h_stage, h_suspect), (l_stage, l_suspect) = higher.verdict(), lower.verdict()
    names = higher.other_names      # the names do not depend on the direction
    agree = (h_stage, h_suspect) == (l_stage, l_suspect)
    readings = {"type": "direction_readings", "metric": metric, "agree": agree,
                "higher_stage": h_stage, "higher_suspect": h_suspect,
                "lower_stage": l_stage, "lower_suspect": l_suspect,
                "source": "derived from the stage table"}
    # a step or a further drop says which way is worse: neither is read without a direction
    higher.further = []
    for high, low in zip(higher.stages, lower.stages, strict=True):
        for key in _STEP_KEYS:
            high.pop(key, None)
        if high["status"] == low["status"]:
            _read_either_way(high, higher.by_stage)
    if agree:
        for fact in higher.stages:
            _mark_unknown_direction(fact, "unknown_agree")
        return higher.facts() + [readings]
    merged = [_merged_stage(h, lo, higher.by_stage)
              for h, lo in zip(higher.stages, lower.stages, strict=True)]
    status_of = {f["stage"]: f["status"] for f in merged}
    if higher.side and lower.side:
        status_of["calib"] = SIDE
    return merged + (higher.side if lower.side else []) + [_summary(status_of), readings] \
        + names


def _read_either_way(fact: dict, stages: dict[str, dict]) -> None:
    """A status both readings give: its note states the change, not a drop or a rise."""
    if fact.get("basis") != "compared" or fact.get("direction_from") != UNKNOWN:
        return
    ref = stages[fact["reference"]]
    fact.update(basis=f"either_{fact['status']}",
                basis_drop=round(fact["value"] - ref["value"], fact["basis_decimals"]))


def _mark_unknown_direction(fact: dict, why: str) -> None:
    if fact.get("direction_from") == UNKNOWN:
        fact.update(direction="both", direction_from=why)


_STEP_KEYS = ("step_from", "step_drop", "step_limit", "step_decimals")


def _merged_stage(high: dict, low: dict, high_stages: dict[str, dict]) -> dict:
    """A stage fact of the two readings: the same status in both stands; a status that
    depends on the direction is unknown, with the change against the reference."""
    fact = dict(high)
    _mark_unknown_direction(fact, "unknown_differ")
    if high["status"] == low["status"]:
        return fact
    ref = high["reference"] or low["reference"]
    fact.update(status="unknown", reference=ref, basis="direction_unknown",
                basis_limit=high.get("basis_limit", low.get("basis_limit", 0.0)))
    if ref and high_stages[ref]["has_value"] and fact["has_value"]:
        ref_value = high_stages[ref]["value"]
        decimals = max(_decimals(ref_value), _decimals(fact["value"]))
        fact.update(basis_drop=round(fact["value"] - ref_value, decimals),
                    basis_decimals=decimals)
    return fact


# --- R4.8: a verdict the default tolerance decided -------------------------------------

def _default_tolerance(case: Case, facts: list[dict]) -> list[dict]:
    """Without a tolerance in the case, the first status whose loss is close enough to the
    default tolerance that another tolerance could turn it: the report says which default
    decided it and how to set the case's own."""
    if case.get("tolerance"):
        return []
    decided = next((f for f in facts if f["type"] == "stage"
                    and f.get("basis") in ("compared", "unconfirmed_drop")
                    and _decided_by_tolerance(f["basis_drop"], f["basis_limit"])), None)
    if decided is None:
        return []
    (kind, share), = DEFAULT_TOLERANCE.items()
    return [{"type": "default_tolerance", "kind": kind, "share": share,
             "stage": decided["stage"], "reference": decided["reference"],
             "drop": decided["basis_drop"], "limit": decided["basis_limit"],
             "status": decided["status"],
             "source": f"{decided['source']} (no tolerance in case.yaml)"}]


def _decided_by_tolerance(loss: float, limit: float) -> bool:
    return limit / DECIDING_FACTOR < loss < limit * DECIDING_FACTOR


# --- R3.2: values of one metric on different scales ----------------------------------

def _effective_metrics(case: Case) -> list[tuple[str, str, float, bool]]:
    """(stage, metric, value, status given) of every stage with a value, in chain order;
    a stage without a metric name takes the one before it."""
    out, metric = [], ""
    for stage in STAGES:
        entry = case.get("stages", {}).get(stage, {})
        if "value" not in entry:
            continue
        metric = entry.get("metric") or metric
        out.append((stage, metric, float(entry["value"]), "status" in entry))
    return out


def _about_percent_of(high: float, low: float) -> bool:
    """``high`` is about 100 times ``low`` (both positive: a scale has no sign)."""
    return high > 0 and low > 0 and abs(high / low / PERCENT - 1) <= PERCENT_SLACK


def scale_mismatches(case: Case) -> list[dict]:
    """R3.2: one ``metric_scale`` fact per metric whose values mix scales: a fraction
    metric (mAP, NDS, ...) with values above 1 and at most 1, or another metric with one
    value about 100 times another. A fraction metric's values all at most 1 are on one
    scale whatever their ratio (mAP 0.45 -> 0.0045 is a collapse, not a unit). Stages
    whose statuses are all given are not read."""
    by_metric: dict[str, list[tuple[str, float, bool]]] = {}
    shown: dict[str, str] = {}      # each metric under the name it was first given
    for stage, metric, value, given in _effective_metrics(case):
        shown.setdefault(metric_key(metric), metric)
        by_metric.setdefault(shown[metric_key(metric)], []).append((stage, value, given))
    facts = []
    for metric, values in by_metric.items():
        if all(given for _, _, given in values):
            continue
        fraction = is_fraction_metric(metric)
        groups = _fraction_groups(values) if fraction else _ratio_groups(values)
        if groups:
            facts.append(_scale_fact(metric, "fraction" if fraction else "ratio", *groups))
    return facts


def _fraction_groups(values) -> tuple[list, list] | None:
    high = [(s, v) for s, v, _ in values if v > 1]
    low = [(s, v) for s, v, _ in values if v <= 1]
    return (high, low) if high and low else None


def _ratio_groups(values) -> tuple[list, list] | None:
    pairs = [((s, v), (t, w)) for s, v, _ in values for t, w, _ in values
             if _about_percent_of(v, w)]
    if not pairs:
        return None
    high = list(dict.fromkeys(a for a, _ in pairs))
    low = list(dict.fromkeys(b for _, b in pairs))
    return high, low


def _scale_fact(metric: str, kind: str, high: list, low: list) -> dict:
    def names(group):       # file names: the same in both report languages
        return ", ".join(f"{STAGE_LABELS[s]} {v:g}" for s, v in group)
    return {"type": "metric_scale", "metric": metric, "kind": kind,
            "high": high[0][0], "low": low[0][0], "high_value": high[0][1],
            "low_value": low[0][1], "high_stages": names(high), "low_stages": names(low),
            "source": "derived from the stage table"}


def _unscaled_facts(case: Case, dump_pairs, mismatches: list[dict]) -> list[dict]:
    """The chain when its values mix scales: no status is derived from a comparison and no
    drop is computed; the rules read the mismatch instead."""
    walk = _Walk(case, compare=False)
    facts = walk.facts()
    by_stage = {f["stage"]: f for f in facts}
    _apply_dump_evidence(by_stage, dump_pairs)
    status_of = {s: by_stage[s]["status"] for s in STAGES}
    return facts + [_summary(status_of)] + mismatches
