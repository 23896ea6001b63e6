"""probe_run.yaml's ``models_match`` (knowledge.md R5.3): the analysis model with every
fake quant off against the baseline, measured by qcdoctor probe before any layer is read.

Where the two differ beyond quantization (a trained QAT model against its float one, a
calibration run in train mode), every row of the folder's table and every value of its
sensitivity carries that difference: one ``models_differ`` fact says so, and the folder's
sensitivity summaries are marked unusable (their "every fake quant off" floor is already
far from the baseline, so no ranking of theirs is sound). One ``models_match`` fact per
manifest that measured it, ``self_baseline`` where the baseline is the analysis model
itself with fake quant off (``--baseline self``): its readings are quantization alone.
"""

from __future__ import annotations

import math
from pathlib import Path

from qcdoctor.collectors.qa_files import load_probe_manifest
from qcdoctor.collectors.reasons import artifact_problem, reason
from qcdoctor.source_locations import at

KEY = "models_match"
_NUMBERS = ("fake_quant_off_cosine", "fake_quant_off_max_abs", "fake_quant_off_relative",
            "tolerance")


def model_match_facts(facts: list[dict], path: Path, analysis: str, source: str) -> list[dict]:
    """The models_match facts of the probe_run.yaml at ``path`` (the folder ``analysis``,
    ``source`` its path in the case); the folder's sensitivity summaries already in
    ``facts`` are marked when the models differ. A manifest without the key (an earlier
    probe) gives none; a malformed one an artifact_problem naming the key."""
    try:
        data = load_probe_manifest(path)
    except Exception:  # noqa: BLE001 - the manifest's own reader has said what is wrong
        return []
    value = data.get(KEY) if isinstance(data, dict) else None
    if value is None:
        return []
    checked = _checked(value)
    if isinstance(checked, str):
        return [{**artifact_problem(source, checked, True, source), "locations": at(source)}]
    self_baseline = data.get("baseline_model") == "self"
    folder = next((f for f in facts if f["type"] == "qa_folder" and f["analysis"] == analysis),
                  {})
    relative = checked["fake_quant_off_relative"]
    numbers = {"cosine": checked["fake_quant_off_cosine"],
               "max_abs": checked["fake_quant_off_max_abs"] or 0.0,
               "relative": relative if relative is not None else 0.0,
               "relative_known": relative is not None, "tolerance": checked["tolerance"]}
    where = {"analysis": analysis, "source": source, "locations": at(source)}
    out = [{"type": "models_match", "match": checked["match"], "self_baseline": self_baseline,
            **numbers, **where}]
    if checked["match"] and value.get("baseline_quantized") is True and folder:
        # two quantized versions of one model (R5.6): a control, read as noise
        folder["control"] = True
    if checked["match"] or self_baseline:
        return out
    out.append({"type": "models_differ", **numbers, **where,
                "baseline": folder.get("baseline", ""),
                "analysis_stage": folder.get("analysis_stage", "")})
    for fact in facts:
        if fact["type"] == "sensitivity_summary" and fact["analysis"] == analysis:
            fact.update(models_differ=True, usable=False)
    return out


def _checked(value) -> dict | str:
    """models_match's content, or why it cannot be read (naming the key)."""
    if not isinstance(value, dict):
        return reason("{key}: expected a mapping, found {found}", key=KEY,
                      found=type(value).__name__)
    out = {}
    for name in _NUMBERS:
        number = value.get(name)
        if number is None and name in ("fake_quant_off_max_abs", "fake_quant_off_relative"):
            out[name] = None                    # a difference that was no number
            continue
        if isinstance(number, bool) or not isinstance(number, (int, float)) or \
                not math.isfinite(number):
            return reason("{key}: expected a finite number, found {found}",
                          key=f"{KEY}.{name}", found=repr(number)[:40])
        out[name] = float(number)
    if not isinstance(value.get("match"), bool):
        return reason("{key}: expected true or false, found {found}", key=f"{KEY}.match",
                      found=repr(value.get("match"))[:40])
    out["match"] = value["match"]
    out["fake_quant_off_cosine"] = max(-1.0, min(1.0, out["fake_quant_off_cosine"]))
    return out
