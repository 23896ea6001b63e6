"""compare_per_layer_out.{txt,csv}: read any layout, then find where the error starts.

The rows are read as the calls they are (``layer_graph.read_graph``, whose docstring
names the detectors: knowledge.md §17 R4.1, R4.2, §18 R5.1-R5.5): each row against the
rows it reads, along layer_calls.csv or fx_graph.txt where they carry the rows
(``calls``), else in row order, with each call's own error where the probe measured it
(``own_error``), the post-processing region out of the search (``postprocess``). The error kind at a source row is
``error_kind`` (R4.3): truncation needs range evidence (what the dtype and qscale can
represent, ``quant_range``) or a range narrowed from clean inputs, a LUT op at the origin
is ``lut``, weights that lose precision are ``weight``, tens of quantization steps with
the range covered is the op's ``conversion``, about one step is ``rounding``. The worst
row is not the root cause.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from qcdoctor.collectors.reading.calls import graph_edges, layer_calls_edges, row_order_edges
from qcdoctor.collectors.reading.evidence import consumers_of, downstream
from qcdoctor.collectors.reading.fx_graph import split_call
from qcdoctor.collectors.reading.layer_graph import read_graph
from qcdoctor.collectors.reading.lut_ops import lut_op
from qcdoctor.collectors.reading.own_error import own_error_of, unmeasured
from qcdoctor.collectors.reading.postprocess import (
    graph_region,
    index_output_rows,
    postprocess_region,
    reaching,
    region_entries,
)
from qcdoctor.collectors.reading.quant_range import (
    QRANGE,
    dtype_name,
    range_evidence,
    representable,
)
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import Table, read_psql_file, read_qa_csv
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
    if "cosine" in frame:
        # a Cosine is within [-1, 1] (a little past it by rounding); 1e308 is no Cosine, and
        # a step between two such values is no finite number
        values = frame["cosine"].to_numpy(dtype=float)
        outside = np.abs(values) > COSINE_LIMIT
        if outside.any():
            table.problems.append(reason("{count} value(s) in {column} outside [-1, 1] were "
                                         "treated as missing", count=int(outside.sum()),
                                         column="cosine"))
            frame["cosine"] = np.where(outside, np.nan, values)
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
                                # | outlier | noise | none
    drop: float                 # the Cosine step at the origin
    worst: int | None
    kind: str                   # truncation | weight | rounding | conversion | lut | unclear
    kind_detail: dict
    second: int | None = None   # the second source
    second_kind: str = "unclear"
    second_detail: dict = field(default_factory=dict)
    curve: dict = field(default_factory=dict)      # the numbers the reading rests on
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))   # per frame row
    by_graph: bool = False      # read along a graph (else in row order)
    graph: str = "row_order"    # layer_calls | fx_graph | row_order: where the edges came from
    mapped: int = 0             # compared rows the graph carries
    unmapped: list = field(default_factory=list)        # frame positions it does not
    # frame positions of the post-processing region (without one: the rows left out)
    postprocess: list = field(default_factory=list)
    entries: list = field(default_factory=list)         # frame positions entering it
    same_quantizer: list = field(default_factory=list)  # rows sharing the origin's quantizer
    own_unmeasured: dict = field(default_factory=dict)  # why -> rows not measured

    @property
    def located(self) -> bool:
        return self.pattern in LOCATED


COSINE_LIMIT = 1.001        # |Cosine| past this is no Cosine (float32 rounding stays well within)


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


def texts(frame: pd.DataFrame, column: str, rows: np.ndarray, repeated: bool = False
          ) -> list[str]:
    """The stripped text of ``column`` at each row ("" for none), read in one go: a look-up
    per row costs a tenth of a second on a 50,000-row table. ``repeated``: a column of few
    distinct values (op types, dtypes), each stripped once."""
    if column not in frame:
        return [""] * len(rows)
    values = frame[column].to_numpy(dtype=object)[rows]
    if not repeated:
        return [v.strip() if isinstance(v, str) else "" for v in values]
    codes, distinct = pd.factorize(values)
    stripped = np.array([v.strip() if isinstance(v, str) else "" for v in distinct] + [""],
                        dtype=object)
    return stripped[codes].tolist()             # code -1 (no value): the last, ""


def read_layers(layers: LayerTable, limits: Thresholds = DEFAULT, graph=None,
                own_rows: dict | None = None, calls: dict | None = None) -> LayerReading:
    """The reading of one table: along ``calls`` (layer_calls.csv's, by row name) or else
    ``graph`` (collectors.reading.fx_graph.Graph) where they carry the rows, else in row
    order; ``own_rows``: layer_own_error.csv's rows by row name, where the probe measured
    them (knowledge.md §17 R4.1-R4.3, §18 R5.1-R5.5)."""
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
        return LayerReading(0, mismatch, None, "none", 0.0, None, "unclear", {},
                            steps=np.zeros(len(frame)))
    names = texts(frame, "mod_name", rows)
    qsteps = quantization_steps(frame)[rows]
    edges = layer_calls_edges(calls, names) if calls else None
    if edges is None and graph is not None:
        edges = graph_edges(graph, names)
    edges = edges or row_order_edges(int(rows.size))
    ops = [a or b for a, b in zip(texts(frame, "analy_op_type", rows, repeated=True),
                                  texts(frame, "base_op_type", rows, repeated=True),
                                  strict=True)]
    # the post-processing region over every row of the table: an argmax row has no metrics
    inputs = _table_inputs(frame, rows, edges, calls)
    everything = np.arange(len(frame))
    region = postprocess_region(
        [op or split_call(n)[0].rpartition(".")[2] for op, n in zip(
            [a or b for a, b in zip(texts(frame, "analy_op_type", everything, repeated=True),
                                    texts(frame, "base_op_type", everything, repeated=True),
                                    strict=True)],
            texts(frame, "mod_name", everything), strict=True)], inputs)
    if graph is not None:               # selection ops without a row of their own
        inside = graph_region(graph)
        if inside:
            region = reaching(region | {i for i, name in enumerate(
                texts(frame, "mod_name", everything)) if graph.node_of_row(name) in inside},
                inputs)
    in_region = np.isin(rows, np.fromiter(region, dtype=np.intp, count=len(region)))
    left_out = in_region | index_output_rows(names, ops,
                                            texts(frame, "quant_dtype", rows, repeated=True))
    own = own_error_of(own_rows, names) if own_rows else None
    graph_reading = read_graph(cos[rows], qsteps, edges, own, limits, left_out)
    steps = np.zeros(len(frame))
    steps[rows] = graph_reading.step
    worst = int(rows[_worst(np.where(left_out, np.nan, cos[rows]), qsteps, atol[rows])])
    numbers = _reading_numbers(frame, rows, names, graph_reading, worst, edges, own, left_out,
                               limits)
    origin_at = graph_reading.origin
    said = {"by_graph": edges.by_graph, "graph": edges.source, "mapped": edges.mapped,
            "unmapped": rows[edges.unmapped_rows].tolist()
            if edges.unmapped_rows is not None else [],
            "postprocess": sorted(region) or rows[left_out].tolist(),
            "entries": region_entries(region, inputs),
            "own_unmeasured": unmeasured(own_rows, names) if own_rows else {}}
    if origin_at is None or graph_reading.pattern in ("none", "noise"):
        return LayerReading(int(rows.size), mismatch, None, graph_reading.pattern, 0.0, worst,
                            "unclear", {}, curve=numbers, steps=steps, **said)
    origin = int(rows[origin_at])
    second_at = graph_reading.second
    second = int(rows[second_at]) if second_at is not None else None
    groups = edges.groups if len(edges.quantizers) == rows.size else np.arange(rows.size)
    sharing = np.flatnonzero((groups == groups[origin_at]) & (np.arange(rows.size) != origin_at))
    reading = LayerReading(int(rows.size), mismatch, origin, graph_reading.pattern,
                           float(graph_reading.step[origin_at]), worst, "unclear", {}, second,
                           curve=numbers, steps=steps, same_quantizer=rows[sharing].tolist(),
                           **said)
    if reading.located:         # accumulation has no single source to give a kind
        reading.kind, reading.kind_detail = error_kind(
            frame, origin, limits, _source_context(graph_reading, origin_at, own, limits))
        if second is not None:
            reading.second_kind, reading.second_detail = error_kind(
                frame, second, limits, _source_context(graph_reading, second_at, own, limits))
    return reading


def _table_inputs(frame: pd.DataFrame, rows: np.ndarray, edges, calls: dict | None
                  ) -> list[list[int]]:
    """Per row of the whole table (frame positions), the rows it reads: from layer_calls.csv
    where it names the row, else the compared rows' edges; a row neither places reads the
    row printed before it."""
    inputs = [[] if i == 0 else [i - 1] for i in range(len(frame))]
    if calls:
        names = texts(frame, "mod_name", np.arange(len(frame)))
        position: dict[str, int] = {}
        for i, name in enumerate(names):
            position.setdefault(name, i)
        for i, name in enumerate(names):
            call = calls.get(name)
            if call is not None:
                inputs[i] = [position[n] for n in call.inputs if n in position]
        return inputs
    for k, read in enumerate(edges.inputs):
        inputs[int(rows[k])] = [int(rows[j]) for j in read]
    return inputs


def read_folder(table_path: Path, limits: Thresholds = DEFAULT) -> tuple[LayerTable,
                                                                          LayerReading]:
    """A probe folder's table read as triage reads it: along the layer_calls.csv or else
    the fx_graph.txt beside it, with the layer_own_error.csv beside it (each only where
    present)."""
    from qcdoctor.collectors.reading.fx_graph import load_graph
    from qcdoctor.collectors.reading.layer_calls import LAYER_CALLS_FILE, load_layer_calls
    from qcdoctor.collectors.reading.own_error import OWN_ERROR_FILE, load_own_error
    table_path = Path(table_path)
    layers = load_compare(table_path)
    graph_path, own_path, calls_path = (table_path.with_name(n) for n in (
        "fx_graph.txt", OWN_ERROR_FILE, LAYER_CALLS_FILE))
    calls = load_layer_calls(calls_path)[0] if calls_path.is_file() else None
    graph = load_graph(graph_path)[0] if graph_path.is_file() else None
    own = load_own_error(own_path)[0] if own_path.is_file() else None
    return layers, read_layers(layers, limits, graph, own, calls)


def _source_context(reading, at: int, own, limits: Thresholds) -> dict:
    """What the graph and the own error say of one source row, for its kind."""
    context = {"inputs_clean": bool(reading.c_in[at] >= limits.cosine_good)}
    if own is not None and not np.isnan(own.weight_sqnr[at]):
        context.update(weight_known=True, weight_sqnr=float(own.weight_sqnr[at]),
                       per_tensor=bool(own.per_tensor[at]),
                       channel_ratio=float(own.channel_ratio[at]))
    if own is not None and not np.isnan(own.cosine[at]):
        context.update(own_known=True, own_cosine=float(own.cosine[at]),
                       own_qsteps=float(own.qsteps[at]))
    return context


def _worst(cos: np.ndarray, qsteps: np.ndarray, atol: np.ndarray) -> int:
    """The lowest Cosine; without any, the largest Atol (in steps where known)."""
    if (~np.isnan(cos)).any():
        return int(np.nanargmin(cos))
    known = qsteps if (~np.isnan(qsteps)).any() else atol
    return int(np.nanargmax(known)) if (~np.isnan(known)).any() else 0


def _reading_numbers(frame: pd.DataFrame, rows: np.ndarray, names: list[str], reading,
                     worst: int, edges, own, left_out: np.ndarray, limits: Thresholds
                     ) -> dict:
    """The numbers behind a reading, rows as frame positions (None: no such row)."""
    def row(k):
        return int(rows[k]) if k is not None else None
    cos = numeric_column(frame, "cosine")[rows]
    qsteps = quantization_steps(frame)[rows]
    known = cos[~np.isnan(cos) & ~left_out]
    step = reading.step
    largest = int(np.argmax(step)) if (step > 0).any() else None
    origin = reading.origin
    accumulating = reading.pattern in ("gradual", "accumulation_with_step")
    start = reading.start if accumulating or reading.pattern == "noise" else origin
    read = edges.inputs_of(origin) if origin is not None else []
    inputs = [names[i] for i in read]
    own_at = origin
    region_rows = _region_rows(reading, cos, left_out, edges, limits) if accumulating else []
    known_q = qsteps[~np.isnan(qsteps) & ~left_out]
    tests = reading.tests + ["", ""]
    return {"fired": reading.fired[0] if reading.fired else "none",
            "test": tests[0], "second_test": tests[1] if reading.second is not None else "",
            "sources": len(reading.sources), "start": row(start),
            "typical_step": reading.typical,
            "largest_step": float(step[largest]) if largest is not None else 0.0,
            "largest": row(largest), "declining": int((step > 0).sum()),
            "loss": float(1.0 - known.min()) if known.size else 0.0,
            "loss_before": float(1.0 - reading.c_in[origin]) if origin is not None else 0.0,
            "input_cosine": float(reading.c_in[origin]) if origin is not None else 1.0,
            "inputs": ", ".join(inputs[:4]) + (" ..." if len(inputs) > 4 else ""),
            "steps_before": _number(np.nanmax(qsteps[read]))
            if read and (~np.isnan(qsteps[read])).any() else 0.0,
            "second_drop": float(step[reading.second]) if reading.second is not None else 0.0,
            "region": _region([names[i] for i in region_rows]) if region_rows else "",
            "region_rows": len(region_rows),
            "region_lut": any(lut_op(_text(frame, "analy_op_type", int(rows[i])), names[i])
                              or lut_op(_text(frame, "base_op_type", int(rows[i])), names[i])
                              for i in region_rows),
            "max_qsteps": float(known_q.max()) if known_q.size else 0.0,
            "reading": "graph" if edges.by_graph else "row_order",
            "borderline": reading.borderline, "flips": ", ".join(reading.flips),
            "settled_by": _settled_by(reading, own),
            "own_known": own is not None and own_at is not None
            and not np.isnan(own.cosine[own_at]),
            "own_cosine": _number(own.cosine[own_at]) if own is not None and own_at is not None
            else 0.0,
            "own_qsteps": _number(own.qsteps[own_at]) if own is not None and own_at is not None
            else 0.0,
            "left_out": int(left_out.sum()),
            "worst_left_out": bool(left_out.any() and (~np.isnan(cos[left_out])).any()
                                   and float(np.nanmin(cos[left_out])) < float(known.min()
                                                                               if known.size
                                                                               else 1.0))}


def _settled_by(reading, own) -> str:
    """The measurement that settles a borderline reading: the layers' own error where the
    probe has not measured it, else a fix trial."""
    if not reading.borderline:
        return ""
    return "fix_trial" if own is not None else "own_error"


def _region_rows(reading, cos: np.ndarray, left_out: np.ndarray, edges,
                 limits: Thresholds) -> list[int]:
    """The rows an accumulation spans: those below the clean band's Cosine, without the
    model's inputs (rows that read no row), post-processing and, where a step lands on
    the accumulation, the rows that read the step (its propagation)."""
    after = np.zeros(cos.size, dtype=bool)
    if reading.pattern == "accumulation_with_step" and reading.origin is not None:
        after = downstream(consumers_of(edges), [reading.origin])
    with np.errstate(invalid="ignore"):
        spans = (cos < limits.cosine_good) & ~left_out & edges.has_inputs & ~after
    return np.flatnonzero(spans).tolist()


def _region(names: list[str]) -> str:
    """The module path holding ``names``: their longest common dotted prefix (that of the
    first and last name in sorted order); where they share none, the top-level module
    holding most of them."""
    names = [n for n in names if n]
    if not names:
        return ""
    low, high = min(names).split("."), max(names).split(".")
    common = []
    for a, b in zip(low, high, strict=False):
        if a != b:
            break
        common.append(a)
    if common:
        return ".".join(common)
    tops: dict[str, int] = {}
    for name in names:                  # in row order: a tie goes to the first
        top = name.split(".")[0]
        tops[top] = tops.get(top, 0) + 1
    return max(tops, key=tops.__getitem__)


def _number(value) -> float:
    return float(value) if value is not None and np.isfinite(value) else 0.0


def error_kind(frame: pd.DataFrame, position: int, limits: Thresholds = DEFAULT,
               context: dict | None = None):
    """(kind, detail) of the error at one source row (knowledge.md §17 R4.3): truncation
    (range evidence, or a range narrower than the baseline's where every row it reads is
    clean: a clamp), lut (a LUT op), weight (the layer's own error comes from its weights:
    a low weight SQNR, or one scale over channels tens of times apart), conversion (tens
    of quantization steps with the range covered and the weights fine), rounding (a few
    steps), else unclear. ``context``: what the graph and the own error say of the row."""
    context = context or {}

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
              "steps": steps, "steps_known": bool(np.isfinite(steps)), "lut_op": lut or "",
              "inputs_clean": bool(context.get("inputs_clean", False)),
              "weight_known": bool(context.get("weight_known", False)),
              "weight_sqnr": context.get("weight_sqnr", float("nan")),
              "per_tensor": bool(context.get("per_tensor", False)),
              "channel_ratio": context.get("channel_ratio", float("nan")),
              "own_known": bool(context.get("own_known", False)),
              "own_cosine": context.get("own_cosine", float("nan")),
              "own_qsteps": context.get("own_qsteps", float("nan"))}
    detail["weight_poor"] = _weight_poor(detail, limits)
    return _kind(detail, limits), detail


def _weight_poor(d: dict, limits: Thresholds) -> bool:
    if not d["weight_known"]:
        return False
    spread = d["channel_ratio"]
    return bool(d["weight_sqnr"] < limits.weight_sqnr_low or
                (d["per_tensor"] and np.isfinite(spread) and spread >= limits.channel_spread))


def _kind(d: dict, limits: Thresholds) -> str:
    if d["covered"] == "no":
        return "truncation"
    if d["lut_op"]:                 # a table's own range ends are its approximation
        return "lut"
    if d["narrower"] and d["inputs_clean"]:
        return "truncation"         # a clamp: the range cannot have come from upstream
    if d["weight_poor"]:
        return "weight"
    if not d["steps_known"]:
        return "unclear"
    if d["steps"] >= limits.conversion_steps:
        return "conversion" if d["covered"] == "yes" else "unclear"
    return "rounding"


def row_facts(layers: LayerTable, reading: LayerReading, analysis: str,
              source_prefix: str) -> list[dict]:
    """Facts for the origin, the worst row and the error kind, each citing file and row."""
    frame, table = layers.frame, layers.table
    def names_of(positions, most=5):
        shown = [_text(frame, "mod_name", p) or f"row {int(frame['_index'].iat[p])}"
                 for p in positions[:most]]
        return ", ".join(shown) + (" ..." if len(positions) > most else "")

    facts = [{"type": "layer_table", "analysis": analysis, "rows": int(len(frame)),
              "compared": reading.compared, "mismatch_rows": reading.mismatch_rows,
              "layout": layers.layout, "partial": bool(table.problems),
              "abnormal": reading.origin is not None, "graph": reading.graph,
              "graph_rows": reading.mapped, "unmapped": len(reading.unmapped),
              "unmapped_layers": names_of(reading.unmapped),
              "own_unmeasured": sum(reading.own_unmeasured.values()),
              "own_unmeasured_why": ", ".join(f"{why} {count}" for why, count
                                              in reading.own_unmeasured.items()),
              "source": source_prefix, "locations": at(source_prefix)}]

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
    c = reading.curve
    if reading.origin is None and reading.pattern == "noise" and c.get("start") is not None:
        p = c["start"]
        facts.append({"type": "layer_noise", "analysis": analysis, "rows": reading.compared,
                      "min_cosine": round(1.0 - c.get("loss", 0.0), 9),
                      "max_qsteps": round(c.get("max_qsteps", 0.0), 6),
                      "start_layer": layer(p), "start_row": row_number(p),
                      "reading": c.get("reading", "row_order"), "test": c.get("test", ""),
                      "borderline": bool(c.get("borderline")), "flips": c.get("flips", ""),
                      "source": where(p), "locations": place(p)})
    if reading.origin is not None:
        p, second = reading.origin, reading.second
        start = c.get("start")
        facts.append({
            "type": "layer_origin", "analysis": analysis, "layer": layer(p),
            "row": row_number(p), "pattern": reading.pattern, "located": reading.located,
            "fired": c.get("fired", "none"), "test": c.get("test", ""),
            "second_test": c.get("second_test", ""),
            "op_type": _text(frame, "analy_op_type", p) or _text(frame, "base_op_type", p),
            "dtype": _text(frame, "quant_dtype", p), "qscale": value("qscale", p),
            "cosine": value("cosine", p), "atol": value("atol", p),
            "drop": round(reading.drop, 9), "qdiff": _number(steps[p]),
            "qdiff_known": bool(np.isfinite(steps[p])),
            "steps_before": c.get("steps_before", 0.0),
            "loss_before": round(c.get("loss_before", 0.0), 9),
            "input_cosine": round(c.get("input_cosine", 1.0), 9),
            "inputs": c.get("inputs", ""),
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
            "region": c.get("region", ""), "region_rows": c.get("region_rows", 0),
            "region_lut": bool(c.get("region_lut")),
            "lut_involved": bool(reading.kind_detail.get("lut_op")
                                 or reading.second_detail.get("lut_op") or c.get("region_lut")),
            "reading": c.get("reading", "row_order"),
            "borderline": bool(c.get("borderline")), "flips": c.get("flips", ""),
            "settled_by": c.get("settled_by", ""),
            "own_known": bool(c.get("own_known")),
            "own_cosine": round(c.get("own_cosine", 0.0), 9),
            "own_qsteps": round(c.get("own_qsteps", 0.0), 6),
            "same_quantizer": names_of(reading.same_quantizer),
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
    if c.get("left_out") or reading.postprocess:
        first = (reading.postprocess or [None])[0]
        facts.append({"type": "layer_postprocess", "analysis": analysis,
                      "rows": max(int(c.get("left_out", 0)), len(reading.postprocess)), "worst": bool(c.get("worst_left_out")),
                      "region_rows": len(reading.postprocess),
                      "first_layer": layer(first) if first is not None else "",
                      "entries": names_of(reading.entries),
                      "source": where(first) if first is not None else source_prefix,
                      "locations": place(first) if first is not None else at(source_prefix)})
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
                 "analy_min", "analy_max", "room", "steps", "weight_sqnr", "channel_ratio",
                 "own_cosine", "own_qsteps")
_KIND_FLAGS = ("dtype_known", "range_known", "zero_point_given", "range_placed", "narrower",
               "clipped", "at_edge", "steps_known", "inputs_clean", "weight_known",
               "per_tensor", "weight_poor", "own_known")


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
