"""Case folders whose probe folder holds a fix_trials.yaml (qcdoctor probe --try-fixes), in
the contract's shape (schema qcdoctor/fix-trials-v1), for the three readings the rules make:
one layer's fix reaches the target, only the greedy set does, nothing does."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from tests.qa.writers import layer, write_compare

PROBE = "qa_probe"
SINGLE_LAYER = "backbone.stage3.conv"
GREEDY_SET = ["decoder.layer1.linear", "decoder.layer3.linear", "decoder.layer5.linear"]

_BASE = {
    "schema": "qcdoctor/fix-trials-v1", "metric": "Cosine", "output": "logits",
    "before": 0.937, "target": {"error_removed": 0.9, "cosine": 0.999}, "budget": 200,
    "notes": [], "caveats": ["one_input", "fake_quant_only"],
}

DOCS = {
    # one layer's qint16 removes 99.4%: a single-source fault, measured
    "single": {**_BASE, "forwards": 9,
               "candidates": [SINGLE_LAYER, "neck.fuse.conv", "head.cls"],
               "trials": [
                   {"fix": "fixed_scale", "layers": ["neck.fuse.conv"], "after": 0.95,
                    "error_removed": 0.206, "forwards": 1},
                   {"fix": "int16_activation", "layers": [SINGLE_LAYER], "after": 0.9996,
                    "error_removed": 0.994, "forwards": 1},
                   {"fix": "float", "layers": [SINGLE_LAYER], "after": 0.9998,
                    "error_removed": 0.997, "forwards": 1},
                   {"fix": "int16_weight", "layers": [SINGLE_LAYER], "after": 0.94,
                    "error_removed": 0.048, "forwards": 1}],
               "greedy": None},
    # no layer alone, the greedy set of three together: accumulation, measured
    "accumulation": {**_BASE, "before": 0.94, "forwards": 143,
                     "candidates": [f"decoder.layer{i}.linear" for i in range(6)],
                     "trials": [
                         {"fix": "int16_activation", "layers": [f"decoder.layer{i}.linear"],
                          "after": 0.94 + 0.002 * i, "error_removed": round(0.033 * i, 3),
                          "forwards": 1} for i in range(6)],
                     "greedy": {"fix": "int16_activation", "layers": GREEDY_SET,
                                "after": 0.995, "error_removed": 0.917, "forwards": 57,
                                "reached": True}},
    # nothing reaches the target within the budget; float bounds it
    "not_reached": {**_BASE, "before": 0.91, "forwards": 200,
                    "candidates": ["neck.fuse.conv", "head.cls"],
                    "trials": [
                        {"fix": "int16_activation", "layers": ["neck.fuse.conv"],
                         "after": 0.95, "error_removed": 0.444, "forwards": 1},
                        {"fix": "float", "layers": ["neck.fuse.conv"], "after": 0.96,
                         "error_removed": 0.556, "forwards": 1}],
                    "greedy": {"fix": "int16_activation", "layers": ["neck.fuse.conv", "head.cls"],
                               "after": 0.955, "error_removed": 0.5, "forwards": 150,
                               "reached": False},
                    "notes": ["the budget ran out before the greedy set reached the target"]},
}


def fix_doc(kind: str) -> dict:
    """A fresh copy of one reading's fix_trials.yaml content."""
    return copy.deepcopy(DOCS[kind])


def _rows(kind: str) -> list[dict]:
    if kind == "accumulation":
        return [layer(f"decoder.layer{i}.linear", 0.9999 - i * 0.0025) for i in range(12)]
    rows = [layer(f"backbone.stage{i}.conv", 0.99995) for i in range(3)]
    rows.append(layer(SINGLE_LAYER, 0.94, atol=0.0095))
    return rows + [layer(f"head.cls.{i}", 0.937 - i * 0.001) for i in range(3)]


def build_fix_case(root: Path, kind: str, *, doc: dict | None = None,
                   text: str | None = None, **case) -> Path:
    """A calibration case (float normal, calib abnormal) with a probe folder holding
    compare_per_layer_out, probe_run.yaml and fix_trials.yaml: ``doc`` (default: the
    reading ``kind``'s) written as YAML, or ``text`` as it is. Returns the case folder."""
    folder = root / kind
    probe = folder / PROBE
    probe.mkdir(parents=True, exist_ok=True)
    data = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
            "platform": {"chip": "J6E"}, "retrain": "yes",
            "stages": {"float": {"metric": "mAP", "value": 0.452},
                       "calib": {"metric": "mAP", "value": 0.401}}, **case}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    write_compare(probe, _rows(kind), fmt="csv", layout="23")
    manifest = {"origin": "probe", "type": "fake_quant", "baseline": "float",
                "analysis": "calib", "files": ["compare_per_layer_out.csv", "fix_trials.yaml"]}
    (probe / "probe_run.yaml").write_text(yaml.safe_dump(manifest), encoding="utf-8")
    if text is None:
        text = yaml.safe_dump(fix_doc(kind) if doc is None else doc, sort_keys=False,
                              allow_unicode=True)
    (probe / "fix_trials.yaml").write_text(text, encoding="utf-8")
    return folder
