"""Readers for the table formats the Horizon tools write.

- psql box tables (``+---+`` borders, ``|`` cells): compare_per_layer_out.txt,
  abnormal_layer_advisor.txt, statistic.txt, model_check_result.txt sections;
- tabulate "simple" tables (header, dashed underline, space-aligned columns):
  output_*_sensitive_ops.txt, fx_graph.txt, some model_check_result sections;
- the profiler's CSV: comma plus space between fields, ``*`` for commas inside shapes,
  Python reprs (``None``), header from the first row only.

Large tables are read by pandas' C parser; damaged lines never raise, they are
counted and reported as problems next to whatever could be read.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from qcdoctor.collectors.reasons import reason

if TYPE_CHECKING:                      # pandas loads only when a big table is read
    import pandas as pd

NA_VALUES = ["None", "nan", "NaN", ""]


@dataclass
class Table:
    """A parsed table, where it came from, and what could not be read."""
    frame: pd.DataFrame
    source: str
    problems: list[str] = field(default_factory=list)


def normalise_header(name: str) -> str:
    return re.sub(r"\s+", "_", name.strip()).lower()


def split_psql_row(line: str) -> list[str]:
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|"):
        body = body[:-1]
    return [cell.strip() for cell in body.split("|")]


def find_psql_header(lines: list[str], start: int = 0) -> int | None:
    """Index of the header row: a '|' line right after a '+--' border."""
    for i in range(start, len(lines) - 1):
        if lines[i].startswith("+-") and lines[i + 1].lstrip().startswith("|"):
            return i + 1
    return None


def read_psql_file(path, usecols: set[str] | None = None, text_columns=()) -> Table:
    """One big psql table (compare_per_layer_out.txt) through the C parser.

    Cells keep their padding: callers strip only the few text values they show.
    """
    import pandas as pd
    with open(path, encoding="utf-8", errors="replace") as handle:
        head = []
        for _ in range(200):
            line = handle.readline()
            if not line:
                break
            head.append(line.rstrip("\n"))
    header_at = find_psql_header(head)
    if header_at is None:
        raise ValueError(reason("no psql table header (a '|' line under a '+---' border) in "
                                "the first 200 lines"))
    header = [normalise_header(h) for h in split_psql_row(head[header_at])]
    names = ["_lead"] + [h or "_index" for h in header] + ["_trail"]
    if len(set(names)) != len(names):
        names = _dedupe(names)
    wanted = [n for n in names if n not in ("_lead", "_trail") and
              (usecols is None or n in usecols or n == "_index")]
    skip = header_at + 2                     # header and the |---+ line under it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        # chunked parsing may see a damaged column as mixed types: it is coerced below
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)
        frame = pd.read_csv(path, sep="|", header=None, names=names, usecols=wanted,
                            skiprows=skip, skipinitialspace=True, index_col=False,
                            na_values=NA_VALUES, keep_default_na=False,
                            dtype={c: object for c in text_columns if c in wanted},
                            on_bad_lines="skip", encoding_errors="replace")
    table = Table(frame, str(path))
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        table.problems.append(reason("some rows have more cells than the header; the extra "
                                     "cells were cut"))
    # borders and stray lines come through with no index: drop them, keep real rows
    numbers, ok = row_numbers(frame["_index"])
    keep = pd.Series(ok, index=frame.index)
    if not keep.all():
        dropped = int((~keep).sum())
        tail_border = dropped == 1 and not keep.iloc[-1]
        if not tail_border:
            table.problems.append(reason("{count} line(s) without a row number were skipped",
                                         count=dropped))
        table.frame = frame[keep].reset_index(drop=True)
        table.frame["_line"] = (keep[keep].index.to_numpy() + skip + 1)
    else:
        table.frame["_line"] = frame.index.to_numpy() + skip + 1
    table.frame["_index"] = numbers[ok]
    return table


def row_numbers(cells: pd.Series):
    """(numbers, ok) of a row-number column: ok where a cell is a whole, finite number.

    ``1``, ``1.0000000`` and `` 3 `` count; text, NaN, inf and fractions do not.
    """
    import numpy as np
    import pandas as pd
    numbers = pd.to_numeric(cells, errors="coerce").to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        ok = np.isfinite(numbers) & (numbers == np.floor(numbers)) & (np.abs(numbers) < 2 ** 53)
    return np.where(ok, numbers, 0).astype("int64"), ok


def read_qa_csv(path, usecols: set[str] | None = None, text_columns=()) -> Table:
    """The profiler CSV: ', ' separated, header from the first row only."""
    import numpy as np
    import pandas as pd
    with open(path, encoding="utf-8", errors="replace") as handle:
        first = handle.readline()
    if not first.strip():
        raise ValueError(reason("empty file: no header row"))
    header = [normalise_header(h) for h in first.rstrip("\n").split(",")]
    # the profiler writes no index column (the first field is mod_name); older writers
    # put an unnamed row-number column first
    indexed = header[0] == ""
    header = _dedupe([h or ("_index" if i == 0 else f"_unnamed{i}") for i, h in enumerate(header)])
    extra = [f"_extra{i}" for i in range(4)]      # later rows may carry more fields
    names = header + extra
    # no usecols: with more names than fields the C parser rejects usecols, and the
    # extra names are what catches rows longer than the header
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pd.errors.ParserWarning)
        # chunked parsing may see a damaged column as mixed types: it is coerced below
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)
        frame = pd.read_csv(path, sep=",", header=None, names=names, skiprows=1,
                            skipinitialspace=True, index_col=False, na_values=NA_VALUES,
                            keep_default_na=False, dtype={c: object for c in text_columns
                                                          if c in names},
                            on_bad_lines="skip", encoding_errors="replace")
    table = Table(frame, str(path))
    if any(issubclass(w.category, pd.errors.ParserWarning) for w in caught):
        table.problems.append(reason("some rows are far longer than the header; fields past "
                                     "{count} were cut", count=len(names)))
    present = [c for c in extra if c in frame]
    longer = frame[present].notna().any(axis=1) if present else pd.Series(False, index=frame.index)
    if longer.any():
        table.problems.append(reason("{count} row(s) carry more fields than the header; the "
                                     "extra fields were ignored", count=int(longer.sum())))
    unwanted = [c for c in header if usecols is not None and c not in usecols and c != "_index"]
    for column in present + unwanted:       # in place: drop() would copy the whole table
        del frame[column]
    table.frame = frame
    table.frame["_line"] = frame.index.to_numpy() + 2
    position = frame.index.to_numpy()
    if not indexed:                         # the row number is the data line's position
        frame["_index"] = position
        return table
    numbers, ok = row_numbers(frame["_index"])
    if not ok.all():
        table.problems.append(reason("{count} row(s) have no whole row number in the first "
                                     "column; their position in the file was used",
                                     count=int((~ok).sum())))
    frame["_index"] = np.where(ok, numbers, position)
    return table


def _dedupe(names: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for n in names:
        if n in seen:
            seen[n] += 1
            out.append(f"{n}_{seen[n]}")
        else:
            seen[n] = 0
            out.append(n)
    return out


def psql_tables(lines: list[str]) -> list[tuple[int, list[str], list[tuple[int, list[str]]]]]:
    """Every psql table in ``lines``: (header line, header cells, [(line, cells)])."""
    tables, i = [], 0
    while True:
        at = find_psql_header(lines, i)
        if at is None:
            return tables
        header = split_psql_row(lines[at])
        rows, j = [], at + 1
        while j < len(lines) and (lines[j].startswith("|") or lines[j].startswith("+")):
            if lines[j].startswith("|") and not lines[j].startswith("|-"):
                rows.append((j + 1, split_psql_row(lines[j])))
            if lines[j].startswith("+") and j > at + 1:
                j += 1
                break
            j += 1
        tables.append((at + 1, header, rows))
        i = j


_DASHES = re.compile(r"-+")


def simple_table(lines: list[str], start: int = 0, within: int | None = None):
    """A tabulate 'simple' table from ``start``: (header, [(line, cells)]) or None.

    The dashed underline gives the column spans; the last column runs to the line end.
    ``within``: the header must start in that many lines (a table right under its title),
    so that many titles in one file cost no rescans of the rest.
    """
    end = len(lines) - 1 if within is None else min(len(lines) - 1, start + within)
    for i in range(start, end):
        under = lines[i + 1]
        if under.strip() and set(under.strip()) <= {"-", " "} and "-" in under \
                and lines[i].strip() and not set(lines[i].strip()) <= {"-", " "}:
            spans = [(m.start(), m.end()) for m in _DASHES.finditer(under)]
            if len(spans) < 2:
                continue
            cut = [(s, spans[k + 1][0] if k + 1 < len(spans) else None)
                   for k, (s, _) in enumerate(spans)]
            header = [lines[i][a:b].strip() for a, b in cut]
            rows = []
            for j in range(i + 2, len(lines)):
                line = lines[j]
                if not line.strip() or line.startswith("#"):
                    break
                rows.append((j + 1, [line[a:b].strip() if a < len(line) else "" for a, b in cut]))
            return i + 1, header, rows
    return None
