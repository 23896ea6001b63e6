"""Case folders whose probe folder holds a bad-case search (qcdoctor probe over many
samples): probe_run.yaml with ``samples`` and sample_errors.csv in the probe's formats
(tests/qa/writers.py), beside the per-layer table read on the chosen sample."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.qa.writers import layer, write_compare, write_probe_search

PROBE = "qa_probe"

# output "0"'s Cosine on each of 16 samples: every one below 0.999, the worst (by L1 as by
# Cosine) sample 5
EVERY = {"0": [0.938, 0.940, 0.904, 0.912, 0.925, 0.671, 0.894, 0.722, 0.740, 0.905, 0.929,
               0.951, 0.894, 0.863, 0.851, 0.838]}
# 64 samples, three of them (7, 21, 40) below 0.999 on output "logits"; "boxes" clean
SOME = {"logits": [0.99990 - 0.00001 * (i % 5) for i in range(64)],
        "boxes": [0.99995] * 64}
for index, value in ((7, 0.991), (21, 0.62), (40, 0.985)):
    SOME["logits"][index] = value
# every sample inside the clean band
CLEAN = {"0": [0.99990 + 0.000001 * i for i in range(16)]}
# every sample below the band through the model's steps alone: the clean model's Cosine
# (every value rounded, none clipped) at most ten times closer to 1
WITHIN = {"0": [0.9965 - 0.0002 * i for i in range(16)]}
WITHIN_ROUNDING = {"0": [0.9975 - 0.0002 * i for i in range(16)]}


def build_search_case(root: Path, name: str, cosines: dict[str, list[float]], *,
                      case: dict | None = None, **search) -> Path:
    """A calibration case (float normal, calib abnormal) whose probe folder holds the
    per-layer table and a bad-case search over ``cosines`` (``search``: write_probe_search's
    options: samples, errors_text, badcase, metric, ...). Returns the case folder."""
    folder = root / name
    probe = folder / PROBE
    probe.mkdir(parents=True, exist_ok=True)
    data = {"schema": "qcdoctor/case-v1", "symptom": "mAP drops after calibration",
            "platform": {"chip": "J6E"}, "retrain": "yes",
            "stages": {"float": {"metric": "mAP", "value": 0.452},
                       "calib": {"metric": "mAP", "value": 0.401}}, **(case or {})}
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    rows = [layer(f"backbone.stage{i}.conv", 0.99995) for i in range(3)]
    rows += [layer("backbone.stage3.conv", 0.94, atol=0.0095)]
    rows += [layer(f"head.cls.{i}", 0.937 - i * 0.001) for i in range(3)]
    write_compare(probe, rows, fmt="csv", layout="23")
    write_probe_search(probe, cosines, **search)
    return folder
