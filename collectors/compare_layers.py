"""compare_per_layer_out.{txt,csv}: read any layout, then find where the error starts.

Reading (knowledge.md §8): the error origin is the first row where Cosine drops sharply
or Atol jumps; a slow decay over many rows is accumulation with its origin earlier; the
worst row is not the root cause. Ranges tell truncation (analysis range clearly narrower
than the baseline's, or qscale x qmax below the baseline's |max|) from rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from qcdoctor.engine.source_locations import at

from .reasons import reason
from .tables import Table, read_psql_file, read_qa_csv
from .thresholds import DEFAULT, Thresholds

TEXT = ("mod_name", "base_op_type", "analy_op_type", "shape", "quant_dtype", "dtype", "advice")
NUMERIC = ("qscale", "cosine", "l1", "atol", "mse", "kl", "sqnr", "rtol", "max_qscale_diff",
           "max_atol_diff", "base_model_min", "analy_model_min", "base_model_max",
           "analy_model_max", "base_model_mean", "analy_model_mean")
QMAX = {"qint8": 127, "qint16": 32767, "qint4": 7, "quint8": 255}
ALIASES = {"dtype": "quant_dtype", "cos": "cosine", "cosine_similarity": "cosine"}


@dataclass
class LayerTable:
    table: Table
    layout: str                 # "16", "23", "upper" or "other"

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.frame


def load_compare(path: Path) -> LayerTable:
    path = Path(path)
    reader = read_qa_csv if path.suffix.lower() == ".csv" else read_psql_file
    wanted = set(TEXT) | set(NUMERIC) | set(ALIASES)
    table = reader(path, usecols=wanted, text_columns=TEXT)
    frame = table.frame
    renames = {k: v for k, v in ALIASES.items() if k in frame and v not in frame}
    if renames:
        frame.columns = [renames.get(c, c) for c in frame.columns]
    if "cosine" not in frame and "atol" not in frame:
        raise ValueError(reason("no Cosine or Atol column: not a compare_per_layer table"))
    for column in NUMERIC:
        if column in frame and not pd.api.types.is_numeric_dtype(frame[column]):
            numbers = pd.to_numeric(frame[column], errors="coerce")
            bad = numbers.isna() & frame[column].notna()
            if bad.any():
                table.problems.append(reason("{count} non-numeric value(s) in {column} were "
                                             "treated as missing", count=int(bad.sum()),
                                             column=column))
            frame[column] = numbers
    for column in NUMERIC:
        if column in frame:
            values = frame[column].to_numpy(dtype=float)
            infinite = np.isinf(values)
            if infinite.any():
                table.problems.append(reason("inf in {column} was treated as missing",
                                             column=column))
                frame[column] = np.where(infinite, np.nan, values)
    table.frame = frame
    columns = set(frame.columns)
    layout = ("23" if {"mse", "kl", "sqnr"} <= columns else
              "upper" if "advice" in columns else "16" if "max_qscale_diff" in columns else "other")
    return LayerTable(table, layout)


def _text(frame: pd.DataFrame, column: str, position: int) -> str:
    if column not in frame:
        return ""
    value = frame[column].iat[position]
    return value.strip() if isinstance(value, str) else ""


@dataclass
class LayerReading:
    """What the table says: origin, worst row, pattern, error kind (positions into frame)."""
    compared: int
    mismatch_rows: int
    origin: int | None
    pattern: str                # cliff | gradual | none
    drop: float
    worst: int | None
    kind: str                   # truncation | rounding | unclear
    kind_detail: dict


def numeric_column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A metric column as floats, all NaN where the table has no such column."""
    return frame[column].to_numpy(dtype=float) if column in frame else np.full(len(frame), np.nan)


def read_layers(layers: LayerTable, limits: Thresholds = DEFAULT) -> LayerReading:
    frame = layers.frame
    cos, atol = numeric_column(frame, "cosine"), numeric_column(frame, "atol")
    has_metric = ~np.isnan(cos) | ~np.isnan(atol)
    mismatch = 0
    if "shape" in frame and not has_metric.all():
        # 'mismatch shape' rows carry no metrics: only those need the text test
        shapes = frame["shape"].to_numpy()[~has_metric]
        mismatch = sum(isinstance(v, str) and "mismatch" in v for v in shapes)
    rows = np.flatnonzero(has_metric)
    if rows.size == 0:
        return LayerReading(0, mismatch, None, "none", 0.0, None, "unclear", {})

    c = cos[rows]
    prev = np.concatenate(([1.0], c[:-1]))
    prev = np.where(np.isnan(prev), 1.0, prev)
    drop = np.where(np.isnan(c), 0.0, prev - c)
    below = (c < limits.cosine_good) & ~np.isnan(c)
    cliff = below & (drop >= limits.cliff_drop)

    # Atol relative to the row's baseline range: consecutive rows of a real network span
    # very different ranges (a sigmoid in [0, 1] then a ReLU up to 15), so raw Atol values
    # are not comparable; rows without ranges keep their raw Atol
    a = atol[rows] / _spans(frame, rows)
    a_prev = np.concatenate(([np.nan], a[:-1]))
    steps = (frame["max_qscale_diff"].to_numpy(dtype=float)[rows]
             if "max_qscale_diff" in frame else np.full(rows.size, np.inf))
    jump = (a >= limits.atol_jump * np.where(np.isnan(a_prev) | (a_prev <= 0), np.inf, a_prev)) \
        & (steps >= limits.atol_jump_steps)
    sharp = cliff | jump

    valid_cos = np.where(np.isnan(c), np.inf, c)
    worst_k = int(np.argmin(valid_cos)) if np.isfinite(valid_cos).any() else int(np.nanargmax(a))
    total_loss = float(1.0 - np.nanmin(c)) if (~np.isnan(c)).any() else 0.0

    if sharp.any():
        k = int(np.flatnonzero(sharp)[0])
        share = drop[k] / total_loss if total_loss > 0 else 1.0
        pattern = "cliff" if share >= limits.cliff_share or jump[k] else "gradual"
        if pattern == "gradual" and below.any():
            k = int(np.flatnonzero(below)[0])
    elif below.any():
        k, pattern = int(np.flatnonzero(below)[0]), "gradual"
    else:
        return LayerReading(int(rows.size), mismatch, None, "none", 0.0, int(rows[worst_k]),
                            "unclear", {})
    origin = int(rows[k])
    kind, detail = error_kind(frame, origin, limits)
    return LayerReading(int(rows.size), mismatch, origin, pattern, float(drop[k]),
                        int(rows[worst_k]), kind, detail)


def _spans(frame: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    if "base_model_min" not in frame or "base_model_max" not in frame:
        return np.ones(rows.size)
    span = (frame["base_model_max"].to_numpy(dtype=float) -
            frame["base_model_min"].to_numpy(dtype=float))[rows]
    return np.where(np.isfinite(span) & (span > 0), span, 1.0)


def error_kind(frame: pd.DataFrame, position: int, limits: Thresholds = DEFAULT):
    """truncation / rounding at one row, from ranges and qscale x qmax."""
    def num(column):
        if column not in frame:
            return float("nan")
        return float(frame[column].iat[position])

    bmin, bmax, amin, amax = (num("base_model_min"), num("base_model_max"),
                              num("analy_model_min"), num("analy_model_max"))
    qscale = num("qscale")
    qmax = QMAX.get(_text(frame, "quant_dtype", position))
    base_abs = max(abs(bmin), abs(bmax)) if not np.isnan(bmin + bmax) else float("nan")
    detail = {"base_range": bmax - bmin, "analysis_range": amax - amin,
              "base_absmax": base_abs,
              "scale_limit": qscale * qmax if qmax and not np.isnan(qscale) else float("nan")}
    ratio = detail["analysis_range"] / detail["base_range"] if detail["base_range"] > 0 else float("nan")
    detail["range_ratio"] = ratio
    narrow = not np.isnan(ratio) and ratio < limits.range_narrow
    clipped = not np.isnan(detail["scale_limit"]) and not np.isnan(base_abs) and \
        detail["scale_limit"] < base_abs * 0.999
    if narrow or clipped:
        return "truncation", detail
    if not np.isnan(ratio):
        return "rounding", detail
    return "unclear", detail


def row_facts(layers: LayerTable, reading: LayerReading, analysis: str,
              source_prefix: str) -> list[dict]:
    """Facts for the origin, the worst row and the error kind, each citing file and row."""
    frame, table = layers.frame, layers.table
    facts = [{"type": "layer_table", "analysis": analysis, "rows": int(len(frame)),
              "compared": reading.compared, "mismatch_rows": reading.mismatch_rows,
              "layout": layers.layout, "partial": bool(table.problems),
              "abnormal": reading.origin is not None, "source": source_prefix,
              "locations": at(source_prefix)}]

    def where(position):
        return (f"{source_prefix} row {int(frame['_index'].iat[position])} "
                f"(line {int(frame['_line'].iat[position])})")

    def place(position):
        return at(source_prefix, int(frame["_line"].iat[position]))

    def value(column, position):
        if column not in frame:
            return 0.0
        v = frame[column].iat[position]
        return float(v) if pd.notna(v) else 0.0

    def layer(position):
        return _text(frame, "mod_name", position) or f"row {int(frame['_index'].iat[position])}"

    if reading.origin is not None:
        p = reading.origin
        facts.append({"type": "layer_origin", "analysis": analysis, "layer": layer(p),
                      "row": int(frame["_index"].iat[p]), "pattern": reading.pattern,
                      "op_type": _text(frame, "analy_op_type", p) or _text(frame, "base_op_type", p),
                      "dtype": _text(frame, "quant_dtype", p), "qscale": value("qscale", p),
                      "cosine": value("cosine", p), "atol": value("atol", p),
                      "drop": round(reading.drop, 9), "qdiff": value("max_qscale_diff", p),
                      "base_min": value("base_model_min", p), "base_max": value("base_model_max", p),
                      "analy_min": value("analy_model_min", p),
                      "analy_max": value("analy_model_max", p), "source": where(p),
                      "locations": place(p)})
        d = reading.kind_detail
        facts.append({"type": "error_kind", "analysis": analysis, "layer": layer(p),
                      "kind": reading.kind,
                      "range_ratio": _finite(d.get("range_ratio")),
                      "base_absmax": _finite(d.get("base_absmax")),
                      "scale_limit": _finite(d.get("scale_limit")), "source": where(p),
                      "locations": place(p)})
    if reading.worst is not None:
        w = reading.worst
        facts.append({"type": "layer_worst", "analysis": analysis, "layer": layer(w),
                      "row": int(frame["_index"].iat[w]), "cosine": value("cosine", w),
                      "atol": value("atol", w), "is_origin": w == reading.origin,
                      "has_origin": reading.origin is not None,
                      "origin_layer": layer(reading.origin) if reading.origin is not None else "",
                      "origin_row": int(frame["_index"].iat[reading.origin])
                      if reading.origin is not None else 0, "source": where(w),
                      "locations": place(w)})
    return facts


def _finite(value) -> float:
    return float(value) if value is not None and np.isfinite(value) else 0.0
