"""output_<name>[_case_<n>]_<metric>_sensitive_ops.{txt,pt}: who contributes how much.

Each value is the output error with only that op's fake quant on (knowledge.md §8):
one value far above the rest is the main contributor, many close values mean
accumulation, and a sound run ends in a tail near zero.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .pt_files import load_pt
from .qa_files import SENSITIVITY_RE
from .reasons import reason
from .tables import simple_table
from .thresholds import DEFAULT, Thresholds

ASCENDING = {"cosine", "sqnr"}          # smaller is worse
LUT_WORDS = ("sin", "cos", "exp", "rsqrt", "reciprocal", "sigmoid", "tanh", "log", "pow")
_LUT_NAME = re.compile(r"(?:^|[._])(?:_generated_)?(" + "|".join(LUT_WORDS) + r")(?:$|[._\d])",
                       re.IGNORECASE)
_LUT_TYPE = re.compile(r"segment_?lut|\.(" + "|".join(LUT_WORDS) + r")'?>?$", re.IGNORECASE)


@dataclass
class SensitivityRow:
    op_name: str
    sensitive_type: str
    op_type: str
    value: float
    dtype: str
    line: int


@dataclass
class SensitivityFile:
    path: Path
    output: str
    case: str
    metric: str
    rows: list[SensitivityRow]
    problems: list[str]


def parse_name(path: Path):
    m = SENSITIVITY_RE.match(path.name)
    return (m.group("output"), m.group("case") or "", m.group("metric")) if m else None


def is_lut(row: SensitivityRow) -> bool:
    last = row.op_name.rsplit(".", 1)[-1]
    return bool(_LUT_NAME.search(last) or _LUT_NAME.search(row.op_name) or
                _LUT_TYPE.search(row.op_type.strip()))


def load_sensitivity(path: Path, trust_pickles: bool = False) -> SensitivityFile:
    path = Path(path)
    named = parse_name(path)
    if named is None:
        raise ValueError(reason("file name is not output_<name>[_case_<n>]_<metric>"
                                "_sensitive_ops"))
    output, case, metric = named
    problems: list[str] = []
    if path.suffix == ".pt":
        rows = _rows_from_pt(load_pt(path, trust_pickles), problems)
    else:
        rows = _rows_from_txt(path.read_text(encoding="utf-8", errors="replace"), metric, problems)
    return SensitivityFile(path, output, case, metric, rows, problems)


def _rows_from_txt(text: str, metric: str, problems: list[str]) -> list[SensitivityRow]:
    parsed = simple_table(text.splitlines())
    if parsed is None:
        raise ValueError(reason("no table (header line with a dashed underline) found"))
    _, header, rows = parsed
    lower = [h.lower() for h in header]
    try:
        name_at = lower.index("op_name")
    except ValueError:
        raise ValueError(reason("no {column} column (columns: {columns})", column="op_name",
                                columns=", ".join(header))) from None
    value_at = next((i for i, h in enumerate(lower) if h == metric.lower()), None)
    if value_at is None:
        value_at = next((i for i, h in enumerate(lower)
                         if h in ("l1", "atol", "cosine", "mse", "kl", "sqnr")), None)
    if value_at is None:
        raise ValueError(reason("no {column} column (columns: {columns})", column=metric,
                                columns=", ".join(header)))

    def col(name):
        return lower.index(name) if name in lower else None
    type_at, op_at, dtype_at = col("sensitive_type"), col("op_type"), col("quant_dtype")
    out = []
    for line, cells in rows:
        try:
            value = float(cells[value_at])
        except (ValueError, IndexError):
            problems.append(reason("line {line}: value {value!r} is not a number; row skipped",
                                   line=line,
                                   value=cells[value_at] if value_at < len(cells) else ""))
            continue
        if not np.isfinite(value):
            problems.append(reason("line {line}: value is {value}; row skipped", line=line,
                                   value=value))
            continue
        out.append(SensitivityRow(cells[name_at], _pick(cells, type_at), _pick(cells, op_at),
                                  value, _pick(cells, dtype_at), line))
    return out


def _pick(cells: list[str], index: int | None) -> str:
    return cells[index] if index is not None and index < len(cells) else ""


def _rows_from_pt(data, problems: list[str]) -> list[SensitivityRow]:
    if isinstance(data, dict):
        data = data.get("rows") or data.get("table") or list(data.values())
    if not isinstance(data, (list, tuple)):
        raise ValueError(reason("expected a list of rows, found {kind}",
                                kind=type(data).__name__))
    out = []
    for i, row in enumerate(data, 1):
        if not isinstance(row, (list, tuple)) or len(row) < 4:
            problems.append(reason("entry {entry}: not a row of op_name, type, op_type, value; "
                                   "skipped", entry=i))
            continue
        try:
            value = float(row[3])
        except (TypeError, ValueError):
            problems.append(reason("entry {entry}: value {value!r} is not a number; skipped",
                                   entry=i, value=row[3]))
            continue
        if not np.isfinite(value):
            problems.append(reason("entry {entry}: value is {value}; skipped", entry=i,
                                   value=value))
            continue
        out.append(SensitivityRow(str(row[0]), str(row[1]), str(row[2]), value,
                                  str(row[4]) if len(row) > 4 else "", i))
    return out


def badness(metric: str, values: np.ndarray) -> np.ndarray:
    """Larger = more sensitive, comparable as ratios across metrics."""
    m = metric.lower()
    if m == "cosine":
        return 1.0 - values
    if m == "sqnr":
        return np.power(10.0, -values / 10.0)
    return values


def ranked(sens: SensitivityFile) -> tuple[list, np.ndarray]:
    """The rows whose values compare, most sensitive first (ties in file order), and their
    badness in that order; rows too extreme to compare (an SQNR of -5000 dB: 10**500
    overflows) are left out."""
    with np.errstate(over="ignore"):
        values = badness(sens.metric, np.array([r.value for r in sens.rows], dtype=float))
    finite = np.isfinite(values)
    rows = [r for r, ok in zip(sens.rows, finite, strict=True) if ok]
    values = values[finite]
    order = np.argsort(-values, kind="stable")
    return [rows[i] for i in order], values[order]


def summarise(sens: SensitivityFile, analysis: str, source: str,
              limits: Thresholds = DEFAULT) -> dict | None:
    if not sens.rows:
        return None
    rows, b = ranked(sens)
    if len(rows) < len(sens.rows):
        sens.problems.append(reason("{count} value(s) too extreme to compare; rows skipped",
                                    count=len(sens.rows) - len(rows)))
    if not rows:
        return None
    top = float(b[0])
    second = float(b[1]) if len(b) > 1 else 0.0
    fifth = float(b[min(4, len(b) - 1)])
    tail_n = max(1, int(round(len(b) * limits.tail_share)))
    tail = float(np.mean(b[-tail_n:])) if len(b) > 1 else 0.0
    luts = [r.op_name for r in rows[:limits.top_n] if is_lut(r)]
    return {"type": "sensitivity_summary", "analysis": analysis, "output": sens.output,
            "metric": sens.metric, "rows": len(b), "top_op": rows[0].op_name,
            "top_kind": rows[0].sensitive_type or "activation",
            "top_op_type": rows[0].op_type.strip("<>'").replace("class '", ""),
            "top_value": float(rows[0].value),
            "dominance": round(min(top / second, 1e6), 6) if second > 0 else (1e6 if top > 0 else 1.0),
            "dominant": len(b) > 1 and (second <= 0 < top or (second > 0 and top / second >= limits.dominance)),
            "flat": len(b) >= 5 and fifth > 0 and top / fifth <= limits.flat_spread,
            "tail_near_zero": len(b) < 5 or top <= 0 or tail <= limits.tail_near_zero * top,
            "lut_in_top": bool(luts), "lut_ops": ",".join(luts[:8]),
            "top_ops": ",".join(r.op_name for r in rows[:5]),
            "source": f"{source} line {rows[0].line}"}
