"""statistic.{txt,csv} under <out_dir>/{baseline,analysis}_model/: per-op tensor statistics."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import psql_tables


def load_statistic(path: Path) -> list[dict]:
    """Rows as {module, op, attr, dtype, scale, min, max, line}."""
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    tables = psql_tables(lines)
    if not tables:
        raise ValueError(reason("no psql table found"))
    _, header, rows = tables[0]
    lower = [h.lower() for h in header]
    need = ("mod name", "attr", "min", "max")
    if not all(n in lower for n in need):
        raise ValueError(reason("missing columns {columns}",
                                columns=[n for n in need if n not in lower]))
    at = {name: lower.index(name) for name in lower}
    out = []
    for line, cells in rows:
        if len(cells) < len(header):
            continue
        out.append({"module": cells[at["mod name"]], "op": cells[at.get("op name", 0)],
                    "attr": cells[at["attr"]], "dtype": cells[at["dtype"]] if "dtype" in at else "",
                    "scale": _number(cells, at.get("scale")), "min": _number(cells, at["min"]),
                    "max": _number(cells, at["max"]), "line": line})
    return out


def _number(cells: list[str], index: int | None) -> float:
    try:
        return float(cells[index])
    except (TypeError, ValueError, IndexError):
        return float("nan")


def weight_fact(rows: list[dict], module: str, analysis: str, source: str) -> dict | None:
    row = next((r for r in rows if r["module"] == module and r["attr"] == "weight"), None)
    if row is None:
        return None
    return {"type": "weight_stat", "analysis": analysis, "module": module,
            "min": row["min"], "max": row["max"], "dtype": row["dtype"],
            "source": f"{source} line {row['line']}"}
