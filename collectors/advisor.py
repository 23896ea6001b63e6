"""abnormal_layer_advisor.{txt,csv}: the profiler's own per-layer warnings, classified."""

from __future__ import annotations

import re
from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import psql_tables

# (kind, pattern on abnormal_info + advice); first match wins, most specific first
KINDS = (
    ("inf_nan", re.compile(r"\b(inf|nan)\b", re.I)),
    ("scale_not_cover", re.compile(r"scale does not cover|not cover the data range", re.I)),
    ("range_too_large_any", re.compile(r"too large for (any )?quantization|maybe too large", re.I)),
    ("range_too_large_int8", re.compile(r"too large for (q?int8)|try (q)?int16", re.I)),
    ("output_not_high_precision", re.compile(r"high precision|activation\s*=\s*None", re.I)),
    ("large_input_range", re.compile(r"(input|data) range .*large|large (input|data) range|use (q)?int16", re.I)),
    ("asymmetric_input", re.compile(r"asymmetr|about 0|around 0|symmetric", re.I)),
)


def classify(text: str) -> str:
    return next((kind for kind, pattern in KINDS if pattern.search(text)), "other")


def _cells_reader(cells: list[str]):
    return lambda i: cells[i] if i is not None and i < len(cells) else ""


def load_advisor(path: Path) -> tuple[list[dict], list[str]]:
    """Rows as {layer, op_type, info, advice, kind, line}, plus problems."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.splitlines()
    problems: list[str] = []
    if Path(path).suffix.lower() == ".csv":
        header = [h.strip().lower() for h in lines[0].split(",")] if lines else []
        rows = [(i + 1, [c.strip() for c in line.split(",", len(header) - 1)])
                for i, line in enumerate(lines[1:], 1) if line.strip()]
    else:
        tables = psql_tables(lines)
        if not tables:
            raise ValueError(reason("no psql table found"))
        _, header, rows = tables[0]
        header = [h.lower() for h in header]

    def at(name):
        return header.index(name) if name in header else None
    name_at, type_at, info_at, advice_at = at("mod_name"), at("op_type"), at("abnormal_info"), at("advice")
    if info_at is None and advice_at is None:
        raise ValueError(reason("no abnormal_info or advice column (columns: {columns})",
                                columns=", ".join(header)))
    out = []
    for line, cells in rows:
        cell = _cells_reader(cells)
        if len(cells) < len(header):
            problems.append(reason("line {line}: {cells} cells where the header has {header}",
                                   line=line, cells=len(cells), header=len(header)))
        info, advice = cell(info_at), cell(advice_at)
        out.append({"layer": cell(name_at), "op_type": cell(type_at), "info": info,
                    "advice": advice, "kind": classify(f"{info} {advice}"), "line": line})
    return out, problems
