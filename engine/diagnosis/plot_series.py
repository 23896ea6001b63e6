"""The ``series`` section of the JSON report: the values behind every plot.

Stage values come from the stage facts; per-layer, sensitivity, dump and per-sample
series from the collectors (``qcdoctor.collectors.series``, ``.sample_search``), already
decimated. The checklist plot draws the report's ``checklist`` section itself.
"""

from __future__ import annotations

from qcdoctor.fact_types import STAGES


def stage_series(facts: list[dict]) -> list[dict]:
    """Every chain stage in order; one not evaluated has no value (a gap, never a zero)."""
    stages = {f["stage"]: f for f in facts if f["type"] == "stage"}
    out = []
    for stage in STAGES:
        f = stages.get(stage, {})
        reference = stages.get(f.get("reference") or "", {})
        compared = f.get("basis") == "compared"
        out.append({"stage": stage, "status": f.get("status", "unknown"),
                    "metric": f.get("metric") or None,
                    "value": f["value"] if f.get("has_value") else None,
                    "reference": f.get("reference") or None,
                    "reference_value": reference["value"]
                    if compared and reference.get("has_value") else None,
                    "tolerance": f.get("basis_limit") if compared else None,
                    "direction": f.get("direction")})
    return out


def series_section(facts: list[dict], series: list[dict]) -> dict:
    def of(kind: str) -> list[dict]:
        return [{k: v for k, v in s.items() if k != "type"} for s in series if s["type"] == kind]
    stages = stage_series(facts)
    return {"stages": stages,
            "first_abnormal": next((s["stage"] for s in stages if s["status"] == "abnormal"),
                                   None),
            "layers": of("layer_series"), "sensitivity": of("sensitivity_series"),
            "dumps": of("dump_series"),
            # a probe's bad-case search: the chosen output's Cosine per sample
            "samples": of("sample_series")}
