"""Readers for the table formats the Horizon tools write.

- psql box tables (``+---+`` borders, ``|`` cells): compare_per_layer_out.txt,
  abnormal_layer_advisor.txt, statistic.txt, model_check_result.txt sections;
- tabulate "simple" tables (header, dashed underline, space-aligned columns):
  output_*_sensitive_ops.txt, fx_graph.txt, some model_check_result sections;
- the profiler's CSV: comma plus space between fields, ``*`` for commas inside shapes,
  Python reprs (``None``), header from the first row only.

Large tables are read by pandas' C parser; damaged lines never raise, they are
reported as problems, with their line numbers, next to whatever could be read. A table
wider than ``limits.TABLE_COLUMNS`` or with a line longer than ``limits.TABLE_LINE_BYTES``
is refused before it is parsed: its header is read a bounded line at a time, and the
big tables' lines are measured in chunks, so neither a wide header nor one endless line
costs more than the cap's worth of time and memory.
"""

from __future__ import annotations

import csv
import os
import re
import warnings
from contextlib import nullcontext
from dataclasses import dataclass, field
from itertools import pairwise
from typing import TYPE_CHECKING

from qcdoctor.collectors import limits
from qcdoctor.collectors.reasons import reason
from qcdoctor.errors import QcdoctorError

if TYPE_CHECKING:                      # pandas loads only when a big table is read
    import numpy as np
    import pandas as pd

NA_VALUES = ["None", "nan", "NaN", ""]
HEAD_LINES = 200                # a psql table's header is looked for in these lines
SCAN_BYTES = 8 << 20            # a big table's lines are measured this many bytes at a time
# psql rows with more cells than the header (a '|' inside a module name) split one by one
# in Python: past this many, the rest are reported instead
SPLIT_ROWS = 100_000
LINES_SHOWN = 5                 # line numbers a problem lists


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


# --------------------------------------------------------------------------- the caps

class TableRefused(QcdoctorError):
    """A table that is not read: past a cap (the line it stops at in ``line``), or with no
    header or rows to tell apart."""


def _wide_fix():
    return reason("send the table as the tool wrote it; no real one is this wide")


def check_columns(count: int, line: int, file: str | None = None) -> None:
    """Refuses a header of more than ``limits.TABLE_COLUMNS`` columns."""
    if count > limits.TABLE_COLUMNS:
        raise TableRefused(reason("the header has {count} columns, more than the {cap} "
                                  "a table may have", count=f"{count:,}",
                                  cap=f"{limits.TABLE_COLUMNS:,}"),
                           file=file, line=line, fix=_wide_fix())


def unreadable(problem: str, path) -> TableRefused:
    """A big table that cannot be read at all."""
    return TableRefused(problem, file=str(path), fix=reason("send the table as the tool wrote it"))


def line_too_long(line: int, file: str | None = None) -> TableRefused:
    """The refusal of a table at ``line``, longer than the line cap."""
    return TableRefused(reason("the line is longer than {cap} bytes, the most a table "
                               "line may have", cap=f"{limits.TABLE_LINE_BYTES:,}"),
                        file=file, line=line, fix=_wide_fix())


def check_length(lines: list[str], at: int) -> str:
    """``lines[at]``, refused past the line cap (its characters: the text is read already)."""
    if len(lines[at]) > limits.TABLE_LINE_BYTES:
        raise line_too_long(at + 1)
    return lines[at]


_TERMINATOR = re.compile(rb"\r\n?|\n")


def head_lines(path, count: int) -> list[str]:
    """The first ``count`` lines of a file (a leading BOM dropped), read a block at a time:
    a line past the cap is refused before more of it is read."""
    cap, lines = limits.TABLE_LINE_BYTES, []
    buffer, start, ended = b"", 0, False
    with open(path, "rb") as handle:
        while len(lines) < count:
            found = _TERMINATOR.search(buffer, start)
            # a '\r' last in the buffer may be the first half of '\r\n'
            if found and (ended or found.end() < len(buffer) or buffer[-1:] != b"\r"):
                if found.start() - start > cap:
                    raise line_too_long(len(lines) + 1, str(path))
                lines.append(buffer[start:found.start()])
                start = found.end()
                continue
            if len(buffer) - start > cap + 1:
                raise line_too_long(len(lines) + 1, str(path))
            if ended:
                if start < len(buffer):
                    lines.append(buffer[start:])
                break
            more = handle.read(64 << 10)
            ended = not more
            buffer, start = buffer[start:] + more, 0
    text = [line.decode("utf-8", "replace") for line in lines]
    if text and text[0].startswith("\ufeff"):
        text[0] = text[0][1:]
    return text


# ------------------------------------------------------------------- a big table's lines

SHORT, FITS, LONG, BORDER = -1, 0, 1, 2     # a row's cells against the header's


@dataclass
class Lines:
    """The lines of a big table that pandas reads as rows (all after the header but blank
    ones), in order: their numbers, their kind, and where each LONG one lies in the file."""
    numbers: np.ndarray
    kinds: np.ndarray
    long_at: np.ndarray                     # (offset, length) of each LONG line
    lone_returns: bool = False              # some line ends in a '\r' alone


def scan_lines(path, first: int, separator: bytes, separators: int, border: bool) -> Lines:
    """Every line from number ``first`` on, measured in chunks of ``SCAN_BYTES``: refused
    past the line cap; blank ones (spaces and tabs only) left out, as pandas skips them;
    the rest classed by their count of ``separator`` against the ``separators`` a row has
    (a psql border line apart when ``border``). Lines end as pandas ends them: at
    '\\n', '\\r\\n' or a lone '\\r'."""
    import numpy as np
    parts: list[tuple] = []
    number, offset, kept, lone = 1, 0, 0, False
    with open(path, "rb") as handle:
        chunk = min(SCAN_BYTES, os.fstat(handle.fileno()).st_size + 1)
        buffer = bytearray(chunk + limits.TABLE_LINE_BYTES + 2)
        while True:
            read = handle.readinto(memoryview(buffer)[kept:kept + chunk])
            size = kept + read
            if not size:
                break
            # the lines whose end is known: up to the last '\n', or a '\r' with a byte after
            # it (looked for in what was just read, and the '\r' that may have ended before)
            low = max(kept - 1, 0)
            cut = size if not read else \
                max(buffer.rfind(b"\n", low, size), buffer.rfind(b"\r", low, size - 1)) + 1
            if cut:
                found = _classify(buffer, cut, number, first, separator[0], separators,
                                  border, str(path))
                parts.append((found[0], found[1], found[2] + offset, found[3]))
                number, lone = found[4], lone or found[5]
            kept, offset = size - cut, offset + cut
            if kept > limits.TABLE_LINE_BYTES + 1:              # '\r' may still follow
                raise line_too_long(number, str(path))
            buffer[:kept] = buffer[cut:size]    # the unfinished line, to the front
            if not read:
                break
    if not parts:
        return Lines(np.zeros(0, np.int64), np.zeros(0, np.int8), np.zeros((0, 2), np.int64),
                     lone)
    numbers, kinds, starts, lengths = (np.concatenate(p) for p in zip(*parts, strict=True))
    return Lines(numbers, kinds, np.column_stack((starts, lengths)), lone)


def _classify(raw: bytearray, size: int, number: int, first: int, separator: int,
              separators: int, border: bool, file: str):
    """(numbers, kinds, starts and lengths of the LONG ones, next number, any lone '\\r')
    of the rows in ``raw[:size]``, whole lines the first of which is numbered ``number``."""
    import numpy as np
    data = np.frombuffer(raw, np.uint8, size)
    ends = np.flatnonzero(data == 10)
    paired_ends, lone = None, False
    if raw.find(b"\r", 0, size) >= 0:     # rare: only then is '\r\n' told from a lone '\r'
        returns = np.flatnonzero(data == 13)
        follows = returns + 1
        paired = np.zeros(returns.size, bool)
        inside = follows < size
        paired[inside] = data[follows[inside]] == 10
        paired_ends, lone = follows[paired], not paired.all()
        ends = np.sort(np.concatenate((ends, returns[~paired])))
    starts = np.concatenate(([0], ends + 1))
    if starts[-1] < size:                   # the file's last line, without an end
        ends = np.concatenate((ends, [size]))
    else:
        starts = starts[:-1]
    stops = ends.copy()                     # where each line's content stops
    if paired_ends is not None:
        stops[np.isin(ends, paired_ends)] -= 1
    lengths = stops - starts
    longest = int(np.argmax(lengths))
    if lengths[longest] > limits.TABLE_LINE_BYTES:
        raise line_too_long(number + longest, file)
    # separators before each line's end; the lines tile the data, so a line holds the
    # difference from the line before
    counts = np.diff(np.searchsorted(np.flatnonzero(data == separator), ends), prepend=0)
    numbers = number + np.arange(starts.size)
    data_lines = numbers >= first
    blank = lengths == 0
    # a line without separators may hold only spaces and tabs: blank too
    maybe = np.flatnonzero((counts == 0) & ~blank & data_lines)
    blank[maybe] = _only(raw, data, starts, maybe, b" \t")
    kinds = np.sign(counts - separators).astype(np.int8)
    if border:                              # '+---+---+' and '|---+---|' lines
        maybe = np.flatnonzero((kinds == SHORT) & ~blank & data_lines &
                               np.isin(data[np.minimum(starts, size - 1)], (ord("+"), ord("|"))))
        kinds[maybe[_only(raw, data, starts, maybe, b"+-|:= \t")]] = BORDER
    keep = data_lines & ~blank
    long = keep & (kinds == LONG)
    return numbers[keep], kinds[keep], starts[long], lengths[long], number + starts.size, lone


def _only(raw: bytearray, data: np.ndarray, starts: np.ndarray, rows: np.ndarray,
          allowed: bytes) -> np.ndarray:
    """Whether each of the lines ``rows`` holds ``allowed`` bytes alone: one by one when
    they are few, as in a real table (its borders), else in one pass over the data."""
    import numpy as np
    if rows.size <= 256:
        ends = np.append(starts[1:], data.size)[rows] if rows.size else rows
        return np.array([not raw[a:b].strip(allowed + b"\r\n")
                         for a, b in zip(starts[rows].tolist(), ends.tolist(), strict=True)],
                        bool)
    other = ~np.isin(data, np.frombuffer(allowed + b"\r\n", np.uint8))
    return np.add.reduceat(other, starts, dtype=np.int64)[rows] == 0


def _read_frame(path, lines: Lines, sep: str, names: list[str], wanted: list[str],
                skip: int, text_columns) -> pd.DataFrame:
    """The FITS rows of ``lines`` as pandas reads them: only those lines (every other one
    is skipped by number, so each line pandas sees has the header's cells), only the
    ``wanted`` columns, chosen as the file is read (a wide header costs no column-by-column
    work), every line one row (no quoting)."""
    import pandas as pd
    fits = lines.kinds == FITS
    if not wanted:                          # none of the columns asked for: rows alone
        frame = pd.DataFrame(index=pd.RangeIndex(int(fits.sum())))
        frame["_line"] = lines.numbers[fits]
        return frame
    # after a skipped line that ends in a lone '\r', pandas drops the next line's first
    # character when it is the separator: such a file is read with its line ends made '\n'
    source = open(path, encoding="utf-8", errors="replace", newline=None) \
        if lines.lone_returns else nullcontext(path)
    with source as read, warnings.catch_warnings():
        # chunked parsing may see a damaged column as mixed types: it is coerced later
        warnings.simplefilter("ignore", pd.errors.DtypeWarning)
        # usecols costs pandas about a third more per cell read: a few columns more are
        # cheaper read and dropped together, many are left out as the file is read
        select = len(names) > 2 * len(wanted)
        frame = pd.read_csv(read, sep=sep, header=None, names=names,
                            usecols=wanted if select else None,
                            skiprows=_skipped(lines.numbers[~fits], skip),
                            skipinitialspace=True, index_col=False, na_values=NA_VALUES,
                            keep_default_na=False, engine="c", quoting=csv.QUOTE_NONE,
                            dtype={c: object for c in text_columns if c in wanted},
                            encoding_errors="replace")
    if len(frame) != int(fits.sum()):       # never guess which row is which line
        raise unreadable(reason("the table's rows could not be matched to its lines"), path)
    if not select and len(wanted) < len(names):
        frame = frame.drop(columns=[n for n in names if n not in wanted])
    frame["_line"] = lines.numbers[fits]
    return frame


def _skipped(damaged, skip: int):
    """pandas' skiprows: the first ``skip`` lines and the ``damaged`` ones (numbers from 1),
    as a set pandas looks up in C; past SPLIT_ROWS of them, a callable over one byte a line
    (slower, but a file of damaged lines cannot fill memory with a set)."""
    if not len(damaged):
        return skip
    if len(damaged) <= SPLIT_ROWS:
        return set(range(skip)) | set((damaged - 1).tolist())
    import numpy as np
    mask = np.ones(int(damaged[-1]) + 1, bool)
    mask[damaged - 1] = False
    mask[:skip] = False
    kept = mask.tobytes()
    return lambda i: i < len(kept) and not kept[i]


def _lines_text(numbers) -> str:
    shown = ", ".join(str(int(n)) for n in numbers[:LINES_SHOWN])
    return shown + (", ..." if len(numbers) > LINES_SHOWN else "")


def _short_lines(problems: list[str], numbers) -> None:
    if len(numbers):
        problems.append(reason("{count} line(s) have fewer cells than the header and were "
                               "not read: line(s) {lines}", count=len(numbers),
                               lines=_lines_text(numbers)))


def _unsplit_lines(problems: list[str], numbers) -> None:
    if len(numbers):
        problems.append(reason("{count} line(s) have more cells than the header and could "
                               "not be split into its columns; not read: line(s) {lines}",
                               count=len(numbers), lines=_lines_text(numbers)))


@dataclass
class _Split:
    rows: list[dict] = field(default_factory=list)      # wanted column -> cell, and _line
    unread: list[int] = field(default_factory=list)     # line numbers


def _split_rows(path, lines: Lines, split, header: list[str], wanted: list[str]) -> _Split:
    """The LONG rows (more cells than the header), each cut into the header's cells by
    ``split`` (text -> cells, or None), read one by one from where they lie; past
    SPLIT_ROWS of them, or where ``split`` gives None, listed unread."""
    found = _Split()
    numbers = lines.numbers[lines.kinds == LONG]
    picked = [(header.index(c), c) for c in wanted]
    with open(path, "rb") as handle:
        for number, (offset, length) in zip(numbers.tolist(), lines.long_at.tolist(),
                                            strict=True):
            cells = None
            if len(found.rows) < SPLIT_ROWS:
                handle.seek(offset)
                cells = split(handle.read(length).decode("utf-8", "replace"))
            if cells is None or len(cells) != len(header):
                found.unread.append(number)
                continue
            row = {column: _cell_value(cells[at]) for at, column in picked}
            row["_line"] = number
            found.rows.append(row)
    return found


def _cell_value(cell: str):
    """A cell as pandas reads it here: leading spaces skipped, the NA words missing."""
    cell = cell.lstrip(" ")
    return None if cell in NA_VALUES else cell


def _with_rows(frame: pd.DataFrame, rows: list[dict], wanted: list[str]) -> pd.DataFrame:
    """``frame`` with ``rows`` put in at their lines (their numbers stay text: the
    caller's coercion counts what is not a number)."""
    import pandas as pd
    if not rows:
        return frame
    added = pd.DataFrame(rows, columns=[*wanted, "_line"]).astype({c: object for c in wanted})
    merged = pd.concat([frame, added], ignore_index=True)
    return merged.sort_values("_line", kind="stable", ignore_index=True)


# ---------------------------------------------------------------------------- psql

def read_psql_file(path, usecols: set[str] | None = None, text_columns=(),
                   name_columns=()) -> Table:
    """One big psql table (compare_per_layer_out.txt) through the C parser.

    Cells keep their padding: callers strip only the few text values they show. A row
    with more cells than the header has a '|' inside a cell: it is cut where the header's
    bars are (the writers pad every cell to its column's width), else, when the header
    has one of ``name_columns`` (the only cells that may hold a '|'), the extra cells are
    joined back into that one; a row neither can split is reported, never shifted.
    """
    import numpy as np
    head = head_lines(path, HEAD_LINES)
    header_at = find_psql_header(head)
    if header_at is None:
        raise unreadable(reason("no psql table header (a '|' line under a '+---' border) "
                                "in the first 200 lines"), path)
    header_line = head[header_at]
    header = [normalise_header(h) for h in split_psql_row(header_line)]
    check_columns(len(header), header_at + 1, str(path))
    # the cells before the first bar and after the last (none when no bar ends the line)
    trail = ["_trail"] if _closed(header_line) else []
    names = _dedupe(["_lead"] + [h or "_index" for h in header] + trail)
    cells = names[1:1 + len(header)]
    wanted = [n for n in cells if usecols is None or n in usecols or n == "_index"]
    under = header_at + 1 < len(head) and head[header_at + 1].startswith("|-")
    skip = header_at + 1 + under            # lines before the first row
    lines = scan_lines(path, skip + 1, b"|", len(names) - 1, border=True)
    frame = _read_frame(path, lines, "|", names, wanted, skip, text_columns)
    table = Table(frame, str(path))
    _short_lines(table.problems, lines.numbers[lines.kinds == SHORT])
    split = _split_rows(path, lines, _psql_splitter(header_line, cells, name_columns), cells,
                        wanted)
    _unsplit_lines(table.problems, split.unread)
    frame = _with_rows(frame, split.rows, wanted)
    if "_index" not in frame:               # no index column: a row's place stands in
        frame["_index"] = np.searchsorted(lines.numbers, frame["_line"].to_numpy())
    # rows whose first cell is no row number (a stray header, text between tables) go
    numbers, ok = row_numbers(frame["_index"])
    if not ok.all():
        table.problems.append(reason("{count} line(s) without a row number were skipped: "
                                     "line(s) {lines}", count=int((~ok).sum()),
                                     lines=_lines_text(frame["_line"].to_numpy()[~ok])))
        frame = frame[ok].reset_index(drop=True)
    frame["_index"] = numbers[ok]
    table.frame = frame
    return table


def _psql_splitter(header_line: str, header: list[str], name_columns):
    """text -> the header's cells of a row with more bars, or None (``_split_wide_row``)."""
    line = header_line.rstrip()
    bars = [i for i, char in enumerate(line) if char == "|"]
    names = [n for n in name_columns if n in header]
    name_at = header.index(names[0]) if len(names) == 1 else None
    return lambda text: _split_wide_row(text, bars, _closed(line), name_at, len(header))


def _closed(line: str) -> bool:
    """Whether a bar ends a psql line, besides the one that starts it."""
    return line.strip()[1:].endswith("|")


def _split_wide_row(text: str, bars: list[int], closed: bool, name_at: int | None,
                   count: int):
    """The ``count`` cells of a psql row holding more '|' than its header: as they stand
    between the header's ``bars`` (``closed``: a bar ends the header, else its last cell
    runs to the line's end), else, with one name column (``name_at``), around it, the
    extra bars taken as the name's; None when the row can be split neither way."""
    line = text.rstrip()
    if all(i < len(line) and line[i] == "|" for i in bars) and \
            (not closed or len(line) == bars[-1] + 1):
        edges = bars if closed else [*bars, len(line)]
        return [line[a + 1:b] for a, b in pairwise(edges)]
    body = line.lstrip()
    if name_at is None or not body.startswith("|"):
        return None
    parts = (body[1:-1] if closed and len(body) > 1 and body.endswith("|")
             else body[1:]).split("|")
    extra = len(parts) - count
    if extra <= 0:
        return None
    return parts[:name_at] + ["|".join(parts[name_at:name_at + extra + 1])] + \
        parts[name_at + extra + 1:]


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


# ----------------------------------------------------------------------------- CSV

def read_qa_csv(path, usecols: set[str] | None = None, text_columns=()) -> Table:
    """The profiler CSV: ', ' separated, header from the first row only. A row with more
    fields than the header keeps the header's; one with fewer is reported, not read."""
    import numpy as np
    first = head_lines(path, 1)
    if not first or not first[0].strip():
        raise unreadable(reason("empty file: no header row"), path)
    header = [normalise_header(h) for h in first[0].split(",")]
    check_columns(len(header), 1, str(path))
    # the profiler writes no index column (the first field is mod_name); older writers
    # put an unnamed row-number column first
    indexed = header[0] == ""
    names = _dedupe([h or ("_index" if i == 0 else f"_unnamed{i}") for i, h in enumerate(header)])
    wanted = [n for n in names if usecols is None or n in usecols or n == "_index"]
    lines = scan_lines(path, 2, b",", len(names) - 1, border=False)
    frame = _read_frame(path, lines, ",", names, wanted, 1, text_columns)
    table = Table(frame, str(path))
    split = _split_rows(path, lines, lambda text: text.split(",", len(names))[:len(names)],
                        names, wanted)
    if split.rows:
        table.problems.append(reason("{count} row(s) carry more fields than the header; the "
                                     "extra fields were ignored", count=len(split.rows)))
    _short_lines(table.problems, lines.numbers[lines.kinds == SHORT])
    _unsplit_lines(table.problems, split.unread)
    frame = _with_rows(frame, split.rows, wanted)
    # a row's number: its position among the data lines, a damaged line's too
    position = np.searchsorted(lines.numbers, frame["_line"].to_numpy())
    table.frame = frame
    if not indexed:
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
    """Every psql table in ``lines``: (header line, header cells, [(line, cells)]);
    refused past the column and line caps."""
    tables, i = [], 0
    while True:
        at = find_psql_header(lines, i)
        if at is None:
            return tables
        header = split_psql_row(check_length(lines, at))
        check_columns(len(header), at + 1)
        rows, j = [], at + 1
        while j < len(lines) and (lines[j].startswith("|") or lines[j].startswith("+")):
            if lines[j].startswith("|") and not lines[j].startswith("|-"):
                rows.append((j + 1, split_psql_row(check_length(lines, j))))
            if lines[j].startswith("+") and j > at + 1:
                j += 1
                break
            j += 1
        tables.append((at + 1, header, rows))
        i = j


_DASHES = re.compile(r"-+")


def simple_table(lines: list[str], start: int = 0, within: int | None = None):
    """A tabulate 'simple' table from ``start``: (header, [(line, cells)]) or None.

    The dashed underline gives the column spans; the last column runs to the line end. A
    row has the cells its line reaches (at least one): a short row under a wide header
    costs its own length, not the header's. ``within``: the header must start in that many
    lines (a table right under its title), so that many titles in one file cost no
    rescans of the rest. Refused past the column and line caps.
    """
    end = len(lines) - 1 if within is None else min(len(lines) - 1, start + within)
    for i in range(start, end):
        under = lines[i + 1]
        if under.strip() and set(under.strip()) <= {"-", " "} and "-" in under \
                and lines[i].strip() and not set(lines[i].strip()) <= {"-", " "}:
            check_length(lines, i)
            check_length(lines, i + 1)
            spans = [(m.start(), m.end()) for m in _DASHES.finditer(under)]
            if len(spans) < 2:
                continue
            check_columns(len(spans), i + 1)
            cut = [(s, spans[k + 1][0] if k + 1 < len(spans) else None)
                   for k, (s, _) in enumerate(spans)]
            header = [lines[i][a:b].strip() for a, b in cut]
            rows = []
            for j in range(i + 2, len(lines)):
                line = lines[j]
                if not line.strip() or line.startswith("#"):
                    break
                check_length(lines, j)
                rows.append((j + 1, [line[a:b].strip() for a, b in cut if a < len(line)]
                             or [""]))
            return i + 1, header, rows
    return None
