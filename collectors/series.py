"""The data behind the report's plots, kept apart from the facts the rules see.

A per-layer table can hold 50,000 rows: it reaches the report decimated (the lowest and
highest value of each bucket, in execution order) so a plot and the JSON stay small, and
the error origin and the worst row are always kept. Rows without metrics (fused
intermediates, ``mismatch shape``) stay as gaps, never as zeros.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:       # numpy and pandas load only for cases with tables (see split_series)
    import numpy as np

    from qcdoctor.collectors.reading.compare_layers import LayerReading, LayerTable
    from qcdoctor.collectors.sensitivity import SensitivityFile

# fix_trials_series: a whole fix_trials.yaml (collectors/fix_trials.py), for the report's
# fix_trials section and its chart; sample_series: the chosen output's per-sample Cosine of
# a probe's bad-case search (collectors/sample_search.py), for its plot
SERIES_TYPES = ("layer_series", "sensitivity_series", "dump_series", "fix_trials_series",
                "sample_series")
KEEP_ALL = 1500          # tables up to this many rows are kept whole
BUCKETS = 400            # above it: per bucket the min and max of each metric
SENSITIVITY_TOP = 15     # ops shown per sensitivity table

# JSON name -> compare_per_layer column
LAYER_VALUES = {"cosine": "cosine", "atol": "atol", "qscale_diff": "max_qscale_diff",
                "base_min": "base_model_min", "base_max": "base_model_max",
                "analy_min": "analy_model_min", "analy_max": "analy_model_max"}


def split_series(facts: list[dict]) -> tuple[list[dict], list[dict]]:
    """(facts for the rules, plot series)."""
    keep, series = [], []
    for fact in facts:
        (series if fact["type"] in SERIES_TYPES else keep).append(fact)
    return keep, series


def _number(value) -> float | None:
    """JSON has no NaN or Infinity: a missing value is null."""
    value = float(value)
    return value if math.isfinite(value) else None


def kept_positions(metrics: list[np.ndarray], gaps: np.ndarray, always: list[int | None],
                   keep_all: int = KEEP_ALL, buckets: int = BUCKETS) -> np.ndarray:
    """Row positions to show: all of a small table; else per bucket the min and max of each
    metric and the first gap row, plus ``always`` (origin, worst)."""
    import numpy as np
    n = len(gaps)
    if n <= keep_all:
        return np.arange(n)
    kept = {p for p in always if p is not None}
    for bucket in np.array_split(np.arange(n), buckets):
        for values in metrics:
            part = values[bucket]
            if not np.isnan(part).all():
                kept.update((int(bucket[np.nanargmin(part)]), int(bucket[np.nanargmax(part)])))
        gap = np.flatnonzero(gaps[bucket])
        if gap.size:
            kept.add(int(bucket[gap[0]]))
    return np.array(sorted(kept), dtype=int)


def layer_series(layers: LayerTable, reading: LayerReading, analysis: str, source: str) -> dict:
    import numpy as np

    from qcdoctor.collectors.reading.compare_layers import numeric_column, texts
    frame = layers.frame
    values = {name: numeric_column(frame, column) for name, column in LAYER_VALUES.items()}
    no_metric = np.isnan(values["cosine"]) & np.isnan(values["atol"])
    positions = kept_positions([values["cosine"], values["atol"]], no_metric,
                               [reading.origin, reading.worst])
    rows = frame["_index"].to_numpy()[positions]
    shapes, names, dtypes = (texts(frame, c, positions)
                             for c in ("shape", "mod_name", "quant_dtype"))
    op_types = [a or b for a, b in zip(texts(frame, "analy_op_type", positions),
                                       texts(frame, "base_op_type", positions), strict=True)]
    kept = {name: v[positions] for name, v in values.items()}
    points = []
    for i, p in enumerate(positions):
        gap = None
        if no_metric[p]:
            gap = "mismatch_shape" if "mismatch" in shapes[i] else "no_metric"
        point = {"row": int(rows[i]), "name": names[i], "op_type": op_types[i],
                 "dtype": dtypes[i]}
        point.update({name: _number(v[i]) for name, v in kept.items()})
        point["gap"] = gap
        points.append(point)

    def row(position):
        return int(frame["_index"].iat[position]) if position is not None else None
    return {"type": "layer_series", "analysis": analysis, "source": source,
            "rows": int(len(frame)), "decimated": len(points) < len(frame),
            "pattern": reading.pattern, "origin_row": row(reading.origin),
            "worst_row": row(reading.worst), "points": points}


def sensitivity_series(sens: SensitivityFile, summary: dict, source: str,
                       top: int = SENSITIVITY_TOP) -> dict:
    """The most sensitive ops of one table, most sensitive first, with the judgements."""
    from qcdoctor.collectors.sensitivity import is_lut, ranked
    ops = [{"op": r.op_name, "kind": r.sensitive_type or "activation", "op_type": r.op_type,
            "value": _number(r.value), "lut": is_lut(r)} for r in ranked(sens)[0][:top]]
    return {"type": "sensitivity_series", "analysis": summary["analysis"],
            "output": sens.output, "metric": sens.metric, "source": source,
            "rows": summary["rows"], "flat": summary["flat"],
            "tail_near_zero": summary["tail_near_zero"], "dominant": summary["dominant"],
            "ops": ops}


def dump_series(results: list[dict], left: str, right: str, source: str) -> dict:
    """Per output of one compared pair of dumps: cosine and max-abs error, or why not."""
    outputs = []
    for r in results:
        status = ("missing" if "missing" in r else
                  "shape_mismatch" if r.get("shape_mismatch") and r.get("cosine") is None else
                  "compared")
        compared = status == "compared"
        outputs.append({"output": str(r["output"]), "status": status,
                        "cosine": _number(r["cosine"]) if compared and r["cosine"] is not None
                        else None,
                        "max_abs": _number(r["max_abs"]) if compared and r["max_abs"] is not None
                        else None})
    return {"type": "dump_series", "left": left, "right": right, "source": source,
            "outputs": outputs}
