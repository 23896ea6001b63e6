"""output_<name>[_case_<n>]_<metric>_sensitive_ops.{txt,pt}: who contributes how much.

Each value is the output error with only that op's fake quant on (knowledge.md §8):
one value far above the rest is the main contributor, many close values mean
accumulation, and a sound run ends in a tail near zero. What it cannot see (§16 R3.10):
a fault that is no fake quantizer (a LUT, a clamp, a replaced op), and anything at all
when the baseline is itself quantized.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from qcdoctor.collectors.pt_files import load_pt
from qcdoctor.collectors.qa_files import SENSITIVITY_RE
from qcdoctor.collectors.reading.lut_ops import lut_op
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import simple_table

if TYPE_CHECKING:       # numpy loads only to rank a table's values: not for a case without one
    import numpy as np

ASCENDING = {"cosine", "sqnr"}          # smaller is worse
# Stages that compute in fixed point: convert replaced every fake quant by integer
# arithmetic (knowledge.md §2), and the deployment steps after it keep that.
FIXED_POINT_STAGES = ("quantized_bc", "nv12_bc", "qdq_removed_bc", "hbm_x86", "board")
MAX_RATIO = 1e6                         # ratios over a zero denominator are stated as this


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
    """A row whose op J6 evaluates by look-up table (knowledge.md §16 R3.11): its op type
    decides; its name, by whole tokens, only when the type is unknown or generic."""
    return lut_op(row.op_type, row.op_name) is not None


def quantized_baseline(stage: str) -> bool:
    """Whether a sensitivity measured against ``stage`` says nothing (knowledge.md §16 R3.10).

    Sensitivity switches the analysis model's fake quantizers one at a time and measures
    the output error against the baseline: that error is one op's quantization only when
    the baseline computes without quantization error of its own. By knowledge.md §6 every
    QuantAnalysis baseline is the float model or a fake-quant model (calib / qat,
    qat.export.pt, qat.bc: float arithmetic, so the convert sensitivity run may take
    qat.export.pt); from quantized.bc on (§2) the model computes in fixed point, every row
    would carry the baseline's own quantization error, and the readings mean nothing.
    An unknown baseline ("") is not taken as quantized.
    """
    return stage in FIXED_POINT_STAGES


def same_layer(origin: str, op: str) -> bool:
    """Whether a sensitivity op is the origin layer of compare_per_layer: the same name,
    or one inside the other (a fused pattern's module, a block and its op)."""
    origin, op = origin.strip(), op.strip()
    if not origin or not op:
        return False
    return origin == op or op.startswith(origin + ".") or origin.startswith(op + ".")


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
        if not math.isfinite(value):
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
        if not math.isfinite(value):
            problems.append(reason("entry {entry}: value is {value}; skipped", entry=i,
                                   value=value))
            continue
        out.append(SensitivityRow(str(row[0]), str(row[1]), str(row[2]), value,
                                  str(row[4]) if len(row) > 4 else "", i))
    return out


def badness(metric: str, values: np.ndarray) -> np.ndarray:
    """Larger = more sensitive, comparable as ratios across metrics."""
    import numpy as np
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
    import numpy as np
    with np.errstate(over="ignore"):
        values = badness(sens.metric, np.array([r.value for r in sens.rows], dtype=float))
    finite = np.isfinite(values)
    rows = [r for r, ok in zip(sens.rows, finite, strict=True) if ok]
    values = values[finite]
    order = np.argsort(-values, kind="stable")
    return [rows[i] for i in order], values[order]


def tail_size(count: int, share: float) -> int:
    """How many of ``count`` values are "the lowest ``share``" (knowledge.md §16 R3.10):
    ``count × share`` rounded down, at least one (the epsilon keeps 15 × 0.2, which is
    3.0000000000000004 in floating point, at 3)."""
    return max(1, int(count * share + 1e-9))


def _ratio(top: float, other: float) -> float:
    """top / other, capped; MAX_RATIO over a zero ``other``, 1 when both are zero."""
    if other > 0:
        return round(min(top / other, MAX_RATIO), 6)
    return MAX_RATIO if top > 0 else 1.0


def readings(badness: np.ndarray, limits: Thresholds = DEFAULT) -> dict:
    """Dominance, flatness and the tail of badness values sorted most sensitive first.

    The tail is the lowest ``tail_share`` of the values; it is near zero when its mean is
    at most ``tail_near_zero`` of the top value. Fewer than five values, or a top value
    of zero, are too few to call flat or to warn about.
    """
    import numpy as np
    count, top = len(badness), float(badness[0])
    second = float(badness[1]) if count > 1 else 0.0
    fifth = float(badness[min(4, count - 1)])
    tail_count = tail_size(count, limits.tail_share)
    tail = float(np.mean(badness[-tail_count:])) if count > 1 else 0.0
    return {"dominance": _ratio(top, second),
            "dominant": count > 1 and (second <= 0 < top or
                                       (second > 0 and top / second >= limits.dominance)),
            "spread": _ratio(top, fifth),
            "flat": count >= 5 and fifth > 0 and top / fifth <= limits.flat_spread,
            "tail_count": tail_count,
            "tail_ratio": round(tail / top, 6) if top > 0 else 0.0,
            "tail_near_zero": count < 5 or top <= 0 or tail <= limits.tail_near_zero * top}


def against_origins(summary: dict, origins: list[str]) -> dict:
    """A sensitivity read against the clear origins (cliffs) compare_per_layer found for
    the same model (knowledge.md §16 R3.10): the origin wins. Flat, dominated by another
    op, or with a tail that never reaches zero (every row carries an error no single fake
    quantizer adds), the sensitivity does not cover the fault (``misses_origin``)."""
    if not origins:
        return {"origin_layer": "", "top_is_origin": False, "against_origin": False,
                "misses_origin": False}
    top_is_origin = any(same_layer(o, summary["top_op"]) for o in origins)
    against = summary["dominant"] and not top_is_origin
    floor = not summary["tail_near_zero"] and not top_is_origin
    return {"origin_layer": origins[0], "top_is_origin": top_is_origin,
            "against_origin": against, "misses_origin": summary["flat"] or against or floor}


def summarise(sens: SensitivityFile, analysis: str, source: str,
              limits: Thresholds = DEFAULT, baseline: str = "") -> dict | None:
    """The sensitivity_summary fact of one table (without the origin reading, which
    ``against_origins`` adds once every folder's compare table is read); ``baseline`` is
    the stage the table was measured against, "" when unknown."""
    if not sens.rows:
        return None
    rows, b = ranked(sens)
    if len(rows) < len(sens.rows):
        sens.problems.append(reason("{count} value(s) too extreme to compare; rows skipped",
                                    count=len(sens.rows) - len(rows)))
    if not rows:
        return None
    luts = [r.op_name for r in rows[:limits.top_n] if is_lut(r)]
    quantized = quantized_baseline(baseline)
    return {"type": "sensitivity_summary", "analysis": analysis, "output": sens.output,
            "metric": sens.metric, "rows": len(b), "top_op": rows[0].op_name,
            "top_kind": rows[0].sensitive_type or "activation",
            "top_op_type": rows[0].op_type.strip("<>'").replace("class '", ""),
            "top_value": float(rows[0].value), **readings(b, limits),
            "lut_in_top": bool(luts), "lut_ops": ",".join(luts[:8]),
            "top_ops": ",".join(r.op_name for r in rows[:5]),
            "baseline": baseline, "baseline_quantized": quantized, "usable": not quantized,
            # set by collectors/model_match.py where probe_run.yaml says so (R5.3)
            "models_differ": False, "postprocess_declared": False,
            "source": f"{source} line {rows[0].line}"}
