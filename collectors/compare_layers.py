"""compare_per_layer_out.{txt,csv}: read any layout, then find where the error starts.

The curve (Cosine steps, Atol in quantization steps, the clean band) is read by
``layer_curve.read_curve``, whose docstring states the algorithm (knowledge.md §16 R3.8);
the error kind at a source row by ``error_kind``: truncation needs range evidence (what
the dtype and qscale can represent, ``quant_range``), a LUT op at the origin is ``lut``,
tens of quantization steps with the range covered is the op's ``conversion``, about one
step is ``rounding`` (R3.9, R3.11). The worst row is not the root cause.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from qcdoctor.collectors.layer_curve import Curve, read_curve
from qcdoctor.collectors.lut_ops import lut_op
from qcdoctor.collectors.quant_range import QRANGE, dtype_name, range_evidence, representable
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import Table, read_psql_file, read_qa_csv
from qcdoctor.collectors.thresholds import DEFAULT, Thresholds
from qcdoctor.source_locations import at

TEXT = ("mod_name", "base_op_type", "analy_op_type", "shape", "quant_dtype", "dtype", "advice")
NUMERIC = ("qscale", "zero_point", "cosine", "l1", "atol", "mse", "kl", "sqnr", "rtol",
           "max_qscale_diff", "max_atol_diff", "base_model_min", "analy_model_min",
           "base_model_max", "analy_model_max", "base_model_mean", "analy_model_mean")
QMAX = {name: high for name, (_, high) in QRANGE.items()}
ALIASES = {"dtype": "quant_dtype", "cos": "cosine", "cosine_similarity": "cosine",
           "zp": "zero_point", "qzero_point": "zero_point"}
# module names: the only cells that may hold a '|' (the probe's table adds base_mod_name)
NAME_COLUMNS = ("mod_name", "base_mod_name")
# patterns that name a source op (every one but accumulation without a step)
LOCATED = ("cliff", "two_sources", "accumulation_with_step", "outlier")


@dataclass
class LayerTable:
    table: Table
    layout: str                 # "16", "23", "upper" or "other"

    @property
    def frame(self) -> pd.DataFrame:
        return self.table.frame


def load_compare(path: Path) -> LayerTable:
    path = Path(path)
    wanted = set(TEXT) | set(NUMERIC) | set(ALIASES)
    if path.suffix.lower() == ".csv":
        table = read_qa_csv(path, usecols=wanted, text_columns=TEXT)
    else:
        table = read_psql_file(path, usecols=wanted, text_columns=TEXT,
                               name_columns=NAME_COLUMNS)
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
    origin: int | None          # the (first) source; where accumulation starts (gradual)
    pattern: str                # cliff | gradual | accumulation_with_step | two_sources
                                # | outlier | none
    drop: float                 # the Cosine step at the origin
    worst: int | None
    kind: str                   # truncation | rounding | conversion | lut | unclear
    kind_detail: dict
    second: int | None = None   # the second source
    second_kind: str = "unclear"
    second_detail: dict = field(default_factory=dict)
    curve: dict = field(default_factory=dict)      # the numbers the reading rests on

    @property
    def located(self) -> bool:
        return self.pattern in LOCATED


def numeric_column(frame: pd.DataFrame, column: str) -> np.ndarray:
    """A metric column as floats, all NaN where the table has no such column."""
    return frame[column].to_numpy(dtype=float) if column in frame else np.full(len(frame), np.nan)


def quantization_steps(frame: pd.DataFrame) -> np.ndarray:
    """Atol in quantization steps per row: max_qscale_diff where given, else Atol /
    qscale; NaN where neither tells."""
    given = numeric_column(frame, "max_qscale_diff")
    qscale = numeric_column(frame, "qscale")
    with np.errstate(divide="ignore", invalid="ignore"):
        derived = np.where(qscale > 0, numeric_column(frame, "atol") / qscale, np.nan)
    return np.where(np.isfinite(given), given, derived)


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
    qsteps = quantization_steps(frame)[rows]
    curve = read_curve(cos[rows], qsteps, limits)
    worst = int(rows[_worst(cos[rows], qsteps, atol[rows])])
    if curve.origin is None:
        return LayerReading(int(rows.size), mismatch, None, "none", 0.0, worst, "unclear", {},
                            curve=_curve_numbers(frame, rows, curve, None))
    origin = int(rows[curve.origin])
    second = int(rows[curve.second]) if curve.second is not None else None
    reading = LayerReading(int(rows.size), mismatch, origin, curve.pattern,
                           float(curve.steps[curve.origin]), worst, "unclear", {}, second,
                           curve=_curve_numbers(frame, rows, curve, worst))
    if reading.located:         # accumulation has no single source to give a kind
        reading.kind, reading.kind_detail = error_kind(frame, origin, limits)
        if second is not None:
            reading.second_kind, reading.second_detail = error_kind(frame, second, limits)
    return reading


def _worst(cos: np.ndarray, qsteps: np.ndarray, atol: np.ndarray) -> int:
    """The lowest Cosine; without any, the largest Atol (in steps where known)."""
    if (~np.isnan(cos)).any():
        return int(np.nanargmin(cos))
    return int(np.nanargmax(qsteps if (~np.isnan(qsteps)).any() else atol))


def _curve_numbers(frame: pd.DataFrame, rows: np.ndarray, curve: Curve,
                   worst: int | None) -> dict:
    """The numbers behind a reading, rows as frame positions (None: no such row)."""
    def row(k):
        return int(rows[k]) if k is not None else None
    cos = numeric_column(frame, "cosine")[rows]
    known = cos[~np.isnan(cos)]
    origin, second = curve.origin, curve.second
    start = curve.start if curve.pattern in ("gradual", "accumulation_with_step") else origin
    return {"fired": curve.fired, "sources": curve.sources, "start": row(start),
            "typical_step": curve.typical,
            "largest_step": float(curve.steps[curve.largest]) if curve.largest is not None
            else 0.0, "largest": row(curve.largest),
            "declining": int((curve.steps > 0).sum()),
            "loss": float(1.0 - known.min()) if known.size else 0.0,
            "loss_before": float(curve.loss_before[origin]) if origin is not None else 0.0,
            "steps_before": _number(curve.qbefore[origin]) if origin is not None else 0.0,
            "second_drop": float(curve.steps[second]) if second is not None else 0.0,
            "region": _region(frame, row(start), worst)
            if curve.pattern in ("gradual", "accumulation_with_step") else ""}


def _region(frame: pd.DataFrame, first: int, last: int | None) -> str:
    """The module path holding the rows from ``first`` to ``last``: their longest common
    dotted prefix (that of the first and last name in sorted order); where they share
    none, the top-level module ``first`` lies in."""
    if "mod_name" not in frame:
        return ""
    end = (last if last is not None and last >= first else first) + 1
    names = [n.strip() for n in frame["mod_name"].to_numpy(dtype=object)[first:end]
             if isinstance(n, str) and n.strip()]
    if not names:
        return ""
    low, high = min(names).split("."), max(names).split(".")
    common = []
    for a, b in zip(low, high, strict=False):
        if a != b:
            break
        common.append(a)
    start = frame["mod_name"].iat[first]
    return ".".join(common) or (start.strip().split(".")[0] if isinstance(start, str)
                                else low[0])


def _number(value) -> float:
    return float(value) if value is not None and np.isfinite(value) else 0.0


def error_kind(frame: pd.DataFrame, position: int, limits: Thresholds = DEFAULT):
    """(kind, detail) of the error at one row: truncation (range evidence), lut (a LUT op),
    conversion (tens of quantization steps with the range covered), rounding (a few
    steps), else unclear (knowledge.md §16 R3.9, R3.11)."""
    def num(column):
        return float(frame[column].iat[position]) if column in frame else float("nan")

    bmin, bmax, amin, amax = (num("base_model_min"), num("base_model_max"),
                              num("analy_model_min"), num("analy_model_max"))
    qscale, dtype_text = num("qscale"), _text(frame, "quant_dtype", position)
    rep = representable(dtype_text, qscale, num("zero_point"))
    evidence = range_evidence(rep, (bmin, bmax), (amin, amax))
    steps = float(quantization_steps(frame.iloc[[position]])[0])
    lut = lut_op(_text(frame, "analy_op_type", position), _text(frame, "mod_name", position)) \
        or lut_op(_text(frame, "base_op_type", position), _text(frame, "mod_name", position))
    base_abs = max(abs(bmin), abs(bmax)) if not np.isnan(bmin + bmax) else float("nan")
    base_range, analysis_range = bmax - bmin, amax - amin
    ratio = analysis_range / base_range if base_range > 0 else float("nan")
    detail = {"dtype": dtype_text, "dtype_known": dtype_name(dtype_text) is not None,
              "range_known": rep is not None, "qscale": qscale,
              "qmin": rep.qmin if rep else 0, "qmax": rep.qmax if rep else 0,
              "zero_point": rep.zero_point if rep else 0.0,
              "zero_point_given": bool(rep and rep.zero_point_given),
              "range_placed": bool(rep and rep.placed),
              "range_low": rep.low if rep else float("nan"),
              "range_high": rep.high if rep else float("nan"),
              "range_width": rep.width if rep else float("nan"),
              "base_min": bmin, "base_max": bmax, "analy_min": amin, "analy_max": amax,
              "base_absmax": base_abs, "base_range": base_range,
              "analysis_range": analysis_range, "range_ratio": ratio,
              "narrower": bool(not np.isnan(ratio) and ratio < limits.range_narrow),
              "clipped": evidence.clipped, "at_edge": evidence.at_edge,
              "covered": evidence.covered, "room": evidence.room,
              "scale_limit": rep.high if rep and rep.placed else float("nan"),
              "steps": steps, "steps_known": bool(np.isfinite(steps)), "lut_op": lut or ""}
    return _kind(detail, limits), detail


def _kind(d: dict, limits: Thresholds) -> str:
    if d["covered"] == "no":
        return "truncation"
    if d["lut_op"]:
        return "lut"
    if not d["steps_known"]:
        return "unclear"
    if d["steps"] >= limits.conversion_steps:
        return "conversion" if d["covered"] == "yes" else "unclear"
    return "rounding"


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

    def row_number(position):
        return int(frame["_index"].iat[position]) if position is not None else 0

    steps = quantization_steps(frame)
    if reading.origin is not None:
        p, c, second = reading.origin, reading.curve, reading.second
        start = c.get("start")
        facts.append({
            "type": "layer_origin", "analysis": analysis, "layer": layer(p),
            "row": row_number(p), "pattern": reading.pattern, "located": reading.located,
            "fired": c.get("fired", "none"),
            "op_type": _text(frame, "analy_op_type", p) or _text(frame, "base_op_type", p),
            "dtype": _text(frame, "quant_dtype", p), "qscale": value("qscale", p),
            "cosine": value("cosine", p), "atol": value("atol", p),
            "drop": round(reading.drop, 9), "qdiff": _number(steps[p]),
            "qdiff_known": bool(np.isfinite(steps[p])),
            "steps_before": c.get("steps_before", 0.0),
            "loss_before": round(c.get("loss_before", 0.0), 9),
            "typical_step": round(c.get("typical_step", 0.0), 9),
            "largest_step": round(c.get("largest_step", 0.0), 9),
            "largest_row": row_number(c.get("largest")),
            "declining": c.get("declining", 0), "loss": round(c.get("loss", 0.0), 9),
            "sources": c.get("sources", 0),
            "start_layer": layer(start) if start is not None else "",
            "start_row": row_number(start),
            "second_layer": layer(second) if second is not None else "",
            "second_row": row_number(second),
            "second_drop": round(c.get("second_drop", 0.0), 9),
            "second_cosine": value("cosine", second) if second is not None else 0.0,
            "region": c.get("region", ""),
            "base_min": value("base_model_min", p), "base_max": value("base_model_max", p),
            "analy_min": value("analy_model_min", p),
            "analy_max": value("analy_model_max", p), "source": where(p),
            "locations": place(p)})
        if reading.located:
            facts.append(_kind_fact(analysis, layer(p), 1, reading.kind, reading.kind_detail,
                                    where(p), place(p)))
        if second is not None:
            facts.append(_kind_fact(analysis, layer(second), 2, reading.second_kind,
                                    reading.second_detail, where(second), place(second)))
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


# error_kind fields copied from the detail as numbers (NaN, i.e. unknown, becomes 0: the
# booleans beside them say whether the number is known)
_KIND_NUMBERS = ("range_ratio", "base_absmax", "scale_limit", "qscale", "zero_point",
                 "range_low", "range_high", "range_width", "base_min", "base_max",
                 "analy_min", "analy_max", "room", "steps")
_KIND_FLAGS = ("dtype_known", "range_known", "zero_point_given", "range_placed", "narrower",
               "clipped", "at_edge", "steps_known")


def _kind_fact(analysis: str, layer: str, order: int, kind: str, detail: dict, source: str,
               locations) -> dict:
    fact = {"type": "error_kind", "analysis": analysis, "layer": layer, "order": order,
            "kind": kind, "dtype": detail.get("dtype", ""),
            "qmin": int(detail.get("qmin", 0)), "qmax": int(detail.get("qmax", 0)),
            "covered": detail.get("covered", "unknown"), "lut_op": detail.get("lut_op", ""),
            "source": source, "locations": locations}
    fact.update({name: _finite(detail.get(name)) for name in _KIND_NUMBERS})
    fact.update({name: bool(detail.get(name, False)) for name in _KIND_FLAGS})
    return fact


def stub_scales(layers: LayerTable) -> list[tuple[float, int, str]]:
    """(qscale, line, mod_name) of every input QuantStub row with a scale, in order."""
    frame = layers.frame
    if "qscale" not in frame:
        return []
    out = []
    for position in range(len(frame)):
        op = _text(frame, "analy_op_type", position) or _text(frame, "base_op_type", position)
        scale = frame["qscale"].iat[position]
        if "QuantStub" in op and "DeQuantStub" not in op and pd.notna(scale) \
                and math.isfinite(float(scale)) and float(scale) > 0:
            out.append((float(scale), int(frame["_line"].iat[position]),
                        _text(frame, "mod_name", position)))
    return out


def _finite(value) -> float:
    return float(value) if value is not None and np.isfinite(value) else 0.0
