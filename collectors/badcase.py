"""badcase.txt and all_badcase_info.pt: do the worst inputs differ between outputs?"""

from __future__ import annotations

import re
from pathlib import Path

from qcdoctor.collectors.pt_files import load_pt
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import psql_tables, simple_table

_INT = re.compile(r"^-?\d+$")


def worst_indices_from_txt(path: Path) -> dict[str, set[int]]:
    """metric/row label -> the set of worst dataloader indices across outputs.

    The first table holds, per output and metric, the index of the worst sample;
    the indices are the integer cells of each row (its first cell names it).
    """
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    tables = psql_tables(lines)
    if tables:
        _, header, rows = tables[0]
    else:
        parsed = simple_table(lines)
        if parsed is None:
            raise ValueError(reason("no table found"))
        _, header, rows = parsed
    out: dict[str, set[int]] = {}
    for _, cells in rows:
        if not cells:
            continue
        ints = {int(c) for c in cells[1:] if _INT.match(c)}
        if ints:
            out[cells[0] or f"row {len(out) + 1}"] = ints
    if not out:
        raise ValueError(reason("the first table has no integer sample indices"))
    return out


def worst_indices_from_pt(path: Path, trust_pickles: bool = False) -> dict[str, set[int]]:
    data = load_pt(path, trust_pickles)
    worst = None
    if isinstance(data, dict):
        named = [k for k, v in data.items() if isinstance(v, dict) and
                 ("worst" in str(k).lower() or "index" in str(k).lower())]
        named.sort(key=lambda k: (0 if "worst" in str(k).lower() else 1, str(k)))
        worst = data[named[0]] if named else None
    elif isinstance(data, (list, tuple)) and len(data) >= 2:
        worst = data[1]              # older: (index table, worst-index dict, input dict)
    if not isinstance(worst, dict):
        raise ValueError(reason("no worst-index table found in this bad-case report"))
    out: dict[str, set[int]] = {}
    for per_metric in worst.values():
        items = per_metric.items() if isinstance(per_metric, dict) else [("value", per_metric)]
        for metric, index in items:
            try:
                out.setdefault(str(metric), set()).add(int(index))
            except (TypeError, ValueError):
                continue
    return out


def spread_fact(indices: dict[str, set[int]], analysis: str, source: str) -> dict:
    distinct = set().union(*indices.values()) if indices else set()
    return {"type": "badcase_spread", "analysis": analysis, "metrics": len(indices),
            "distinct_indices": len(distinct),
            "spread": any(len(v) > 1 for v in indices.values()), "source": source}
