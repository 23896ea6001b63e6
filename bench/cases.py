"""Varied synthetic case files for benchmarks: random stage chains, chips and versions."""

from __future__ import annotations

import random

import yaml

STAGES = ["float", "calib", "qat", "qat_export", "qat_bc", "quantized_bc", "hbm_x86", "board"]


def varied_cases(n: int, seed: int = 1) -> list[str]:
    """``n`` case.yaml texts, the same for the same seed."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        chosen = sorted(rng.sample(range(len(STAGES)), rng.randint(0, 5)))
        value, stages = 0.45, {}
        for i in chosen:
            value -= rng.choice([0.0, 0.001, 0.03])
            stages[STAGES[i]] = {"metric": "mAP", "value": round(value, 4)}
        texts.append(yaml.safe_dump({
            "schema": "qcdoctor/case-v1", "symptom": "drop",
            "evidence": [rng.choice(["dataset_eval", "single_frame", "reproducible_badcase"])],
            "badcase": rng.choice(["available", "dataset_only", "none"]),
            "platform": {"chip": rng.choice(["J6E", "J6M", "J6P", "J6B"])},
            "versions": {"hbdk4-compiler": rng.choice(["4.4.1", "4.4.2", "4.9.0"])},
            "retrain": rng.choice(["yes", "no", "unknown"]),
            "consistency_levels_tried": rng.sample([0, 1, 2], rng.randint(0, 2)),
            "tolerance": {"abs": rng.choice([0.005, 1e-5, 0.01])},
            "stages": stages}))
    return texts
