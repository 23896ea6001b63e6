"""layer_own_error.csv (written by qcdoctor probe beside compare_per_layer_out): each
call's own error, measured by running the analysis layer on the baseline's inputs of that
call (knowledge.md §17 R4.2, §18 R5.2), keyed by the row name (``head(1)``: the second
call). docs/probe.md lists the columns. ``own_status`` says whether a row was measured
(``measured``) or why not; a row not measured is unmeasured whatever its cells hold (never
read as propagation or as a source from its numbers). A file without the column, from an
older probe, is measured wherever it has an own Cosine.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from qcdoctor.collectors.limits import TABLE_LINE_BYTES
from qcdoctor.collectors.reading.evidence import OwnError
from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import check_columns, line_too_long

OWN_ERROR_FILE = "layer_own_error.csv"
COLUMNS = ("mod_name", "own_cosine", "own_atol", "own_qsteps", "weight_sqnr_db",
           "weight_scheme", "weight_channel_ratio", "own_status")
MEASURED = "measured"
_NUMBERS = ("own_cosine", "own_atol", "own_qsteps", "weight_sqnr_db", "weight_channel_ratio")


def load_own_error(path: Path) -> tuple[dict[str, dict], list[str]]:
    """({mod_name: its numbers}, problems); a TableRefused past the table caps, a
    ValueError for a file that is no such table."""
    rows: dict[str, dict] = {}
    short: list[int] = []
    with Path(path).open(encoding="utf-8", errors="replace", newline="") as handle:
        header = [h.strip() for h in csv_cells(read_line(handle, path, 1))]
        check_columns(len(header), 1, str(path))
        missing = [c for c in ("mod_name", "own_cosine") if c not in header]
        if missing:
            raise ValueError(reason("no {column} column (columns: {columns})",
                                    column=missing[0], columns=", ".join(header[:20])))
        where = {name: header.index(name) for name in COLUMNS if name in header}
        for number, cells in data_lines(handle, path):
            if len(cells) < len(header):
                short.append(number)
                continue
            name = cells[where["mod_name"]].strip()
            record = {"line": number}
            for column in _NUMBERS:
                record[column] = _number(cells[where[column]]) if column in where else math.nan
            record["per_tensor"] = ("weight_scheme" in where and
                                    cells[where["weight_scheme"]].strip() == "per_tensor")
            status = cells[where["own_status"]].strip() if "own_status" in where else ""
            if "own_status" not in where:   # an older probe: measured where it has numbers
                status = MEASURED if not math.isnan(record["own_cosine"]) else "nonfinite"
            elif status != MEASURED:
                status = status or "unknown"
                record.update({column: math.nan for column in _NUMBERS})
                record["per_tensor"] = False
            record["status"] = status
            if name and name not in rows:
                rows[name] = record
    problems = [reason("{count} line(s) have fewer cells than the header and were not read: "
                       "line(s) {lines}", count=len(short),
                       lines=", ".join(map(str, short[:10])))] if short else []
    return rows, problems


def read_line(handle, path: Path, number: int) -> str:
    """One line, read in a bounded block and refused past the table line cap."""
    line = handle.readline(TABLE_LINE_BYTES + 1)
    if len(line) > TABLE_LINE_BYTES:
        raise line_too_long(number, str(path))
    return line


def data_lines(handle, path: Path):
    """(line number, cells) of each line after the header that holds anything, each line
    read within the table line cap (the probe's CSV files: layer_own_error, layer_calls)."""
    number = 1
    while True:
        number += 1
        line = read_line(handle, path, number)
        if not line:
            return
        cells = csv_cells(line)
        if any(c.strip() for c in cells):
            yield number, cells


def csv_cells(line: str) -> list[str]:
    return next(csv.reader([line]), []) if line.strip() else []


def _number(text: str) -> float:
    try:
        value = float(text.strip()) if text.strip() else math.nan
    except ValueError:
        return math.nan
    return value if math.isfinite(value) else math.nan


def unmeasured(rows: dict[str, dict], names: list[str]) -> dict[str, int]:
    """Per reason the file gives, how many of the compared rows ``names`` the probe left
    unmeasured (rows it does not list are ops it measures no own error of)."""
    counts: dict[str, int] = {}
    for name in names:
        record = rows.get(name)
        status = record["status"] if record else MEASURED
        if status != MEASURED:
            counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def own_error_of(rows: dict[str, dict], names: list[str]) -> OwnError | None:
    """The own error of each compared row (by ``names``), or None when none is known."""
    found = [rows.get(name) for name in names]
    if not any(found):
        return None

    def column(key: str) -> np.ndarray:
        return np.array([r[key] if r else math.nan for r in found], dtype=float)
    return OwnError(cosine=column("own_cosine"), qsteps=column("own_qsteps"),
                    weight_sqnr=column("weight_sqnr_db"),
                    per_tensor=np.array([bool(r and r["per_tensor"]) for r in found]),
                    channel_ratio=column("weight_channel_ratio"))
