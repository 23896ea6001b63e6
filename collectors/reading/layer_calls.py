"""layer_calls.csv (written by qcdoctor probe beside compare_per_layer_out): one line per
row of the table, the call it is, the earlier rows it reads and the quantizers its output
and weight pass through (knowledge.md §18 R5.1, R5.5). docs/probe.md lists the columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from qcdoctor.collectors.reading.own_error import csv_cells, data_lines, read_line
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import check_columns

LAYER_CALLS_FILE = "layer_calls.csv"
COLUMNS = ("name", "module", "call", "op_type", "inputs", "output_quantizer",
           "weight_quantizer")
_NEEDED = ("name", "inputs")


@dataclass(frozen=True)
class Call:
    name: str                       # the row's name, ``head(1)`` for a second call
    op_type: str
    inputs: tuple[str, ...]         # names of the earlier rows it reads, in argument order
    output_quantizer: str           # "" where none
    weight_quantizer: str
    line: int


def load_layer_calls(path: Path) -> tuple[dict[str, Call], list[str]]:
    """({row name: its call}, problems); a ValueError naming the file and the missing
    column for a file that is no such table, a TableRefused past the table caps."""
    calls: dict[str, Call] = {}
    bad: list[int] = []
    with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
        header = [h.strip() for h in csv_cells(read_line(handle, path, 1))]
        check_columns(len(header), 1, str(path))
        missing = [c for c in _NEEDED if c not in header]
        if missing:
            raise ValueError(reason("{file}: no {column} column (columns: {columns}); "
                                    "qcdoctor probe writes it with the columns {wanted}",
                                    file=Path(path).name, column=missing[0],
                                    columns=", ".join(header[:20]),
                                    wanted=", ".join(COLUMNS)))
        where = {name: header.index(name) for name in COLUMNS if name in header}
        for number, cells in data_lines(handle, path):
            call = _call(cells, where, number)
            if call is None:
                bad.append(number)
            elif call.name not in calls:
                calls[call.name] = call
    problems = [reason("{file}: {count} line(s) whose inputs are no JSON array of row names "
                       "(or that lack cells) were not read: line(s) {lines}",
                       file=Path(path).name, count=len(bad),
                       lines=", ".join(map(str, bad[:10])))] if bad else []
    return calls, problems


def _call(cells: list[str], where: dict[str, int], line: int) -> Call | None:
    def cell(column: str) -> str:
        at = where.get(column)
        return cells[at].strip() if at is not None and at < len(cells) else ""
    if where["inputs"] >= len(cells) or not cell("name"):
        return None
    try:
        inputs = json.loads(cell("inputs") or "[]")
    except ValueError:
        return None
    if not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        return None
    return Call(cell("name"), cell("op_type"), tuple(inputs), cell("output_quantizer"),
                cell("weight_quantizer"), line)
