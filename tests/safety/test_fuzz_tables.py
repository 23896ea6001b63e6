"""Fuzzing the big-table readers (compare_per_layer's psql .txt and the profiler's CSV) with
wide and odd headers, odd cells, damaged rows and every line end: each table is read, or
refused with one QcdoctorError; never another exception, and never a line lost in
silence (every data line is a row read or counted in a problem). And any module name the
probe writes comes back from both of its tables.

Same settings as tests/safety/test_fuzz.py: a fixed seed and a bounded number of examples
in CI (each table a few hundred kilobytes at most); ``QCDOCTOR_FUZZ_EXAMPLES=N`` runs a
longer campaign with fresh randomness.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from qcdoctor.collectors import limits, tables
from qcdoctor.collectors.tables import read_psql_file, read_qa_csv
from qcdoctor.errors import QcdoctorError
from tests.safety.test_fuzz import fuzz

NAMES = ["mod_name", "cosine", "atol", "Cosine", "", "x", "qscale", "mod_name", "a b", "中文",
         "|", ","]
CELLS = ["", " ", "x", "0.5", " 1 ", "None", "nan", "-1e999", "1", "7.0000000", "中文", "a|b",
         "a, b", ",", "|", '"', "'", "#", "+", "-", "\t", "\x00", "\ufeff", "x" * 300, "€", "\\",
         "\x0c", "\u2028", "\x85", "+---+"]
ENDS = ["\n", "\n", "\n", "\r\n", "\r"]
UNREAD = re.compile(r"(\d+) line\(s\)")        # the problems that count lines not read
BORDER = re.compile(r"[+|][-+|:= \t]*")


def _widths(draw) -> int:
    """Header cells: few, or about the cap."""
    return draw(st.integers(1, 30) | st.integers(limits.TABLE_COLUMNS - 2,
                                                 limits.TABLE_COLUMNS + 2))


def _cycled(draw, pool: list[str], count: int) -> list[str]:
    """``count`` items: a short drawn pattern from ``pool``, repeated (a wide row costs few
    draws)."""
    pattern = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=6))
    return [pattern[i % len(pattern)] for i in range(count)]


@st.composite
def odd_tables(draw):
    """(format, lines of the file without their ends, the line ends, the first data line's
    index): a header of odd names, rows of odd cells, some with cells missing or extra,
    blank lines and borders among them."""
    fmt = draw(st.sampled_from(["csv", "txt"]))
    close = draw(st.sampled_from([" |", " |", ""]))     # psql lines may lack their last bar
    columns = _widths(draw)
    header = _cycled(draw, NAMES, columns)
    if fmt == "txt" and draw(st.booleans()):
        header[0] = ""                              # the psql index column
    rows = []
    for index in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["row", "row", "row", "short", "long", "blank", "border"]))
        if kind == "blank":
            rows.append(draw(st.sampled_from(["", " ", "\t ", "   "])))
            continue
        if kind == "border" and fmt == "txt":
            rows.append("+---+---+")
            continue
        count = columns + {"short": -draw(st.integers(1, 3)),
                           "long": draw(st.integers(1, 3))}.get(kind, 0)
        cells = _cycled(draw, CELLS, max(count, 1))
        if fmt == "txt" and header[0] == "" and draw(st.booleans()):
            cells[0] = str(index)
        rows.append(", ".join(cells) if fmt == "csv" else "| " + " | ".join(cells) + close)
    if fmt == "csv":
        lines, first = [", ".join(header)] + rows, 1
    else:
        lines = ["+---+", "| " + " | ".join(header) + close, "|---+---|"] + rows + ["+---+"]
        first = 3
    ends = [draw(st.sampled_from(ENDS)) for _ in lines]
    if draw(st.booleans()):
        ends[-1] = ""                               # the last line without its end
    for i in range(len(lines) - 1):                 # '\r' then an empty line's '\n': one end
        if ends[i] == "\r" and not lines[i + 1] and ends[i + 1].startswith("\n"):
            ends[i] = "\n"
    return fmt, lines, ends, first


def _border(line: str, bars: int) -> bool:
    """A psql border line ('+---+', '|---+---|'): border characters alone, fewer bars than
    the header; no data, so no row."""
    return bool(BORDER.fullmatch(line)) and line.count("|") < bars


def _read(path):
    if path.suffix == ".csv":
        return read_qa_csv(path, usecols={"mod_name", "cosine", "atol", "x"},
                           text_columns=("mod_name",))
    return read_psql_file(path, usecols={"mod_name", "cosine", "atol", "x"},
                          text_columns=("mod_name",), name_columns=("mod_name",))


@fuzz(ci_examples=150)
@given(table=odd_tables(), chunk=st.sampled_from([1, 2, 7, 64, tables.SCAN_BYTES]))
def test_odd_tables_are_read_or_refused_with_one_error(tmp_path_factory, table, chunk):
    fmt, lines, ends, first = table
    path = tmp_path_factory.mktemp("table") / f"compare_per_layer_out.{fmt}"
    path.write_bytes("".join(line + end for line, end in zip(lines, ends, strict=True))
                     .encode("utf-8"))
    scan, tables.SCAN_BYTES = tables.SCAN_BYTES, chunk     # lines cut across the chunks
    try:
        read = _read(path)
    except QcdoctorError as error:
        assert error.file == str(path) and error.fix
        return
    finally:
        tables.SCAN_BYTES = scan
    frame = read.frame
    bars = lines[1].count("|") if fmt == "txt" else 0
    data = [(n, line) for n, line in enumerate(lines[first:], first + 1)
            if line.strip(" \t") and not (fmt == "txt" and _border(line, bars))]
    read_lines = frame["_line"].tolist()
    assert read_lines == sorted(set(read_lines))
    assert set(read_lines) <= {n for n, _ in data}
    unread = sum(int(m.group(1)) for p in read.problems for m in UNREAD.finditer(p))
    assert len(read_lines) + unread == len(data), (read.problems, read_lines)


# any name a module can have but the characters the writer escapes (control characters,
# line and paragraph separators), and the words the readers take for a missing value
MODULE_NAMES = st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),
                       min_size=1, max_size=40) | \
    st.sampled_from(["a|b", "|", "||", "a, b", ",", " x ", "中文|层", "+---+", "#1", '"q"'])


@fuzz(ci_examples=60)
@given(names=st.lists(MODULE_NAMES, min_size=1, max_size=25))
def test_probe_tables_keep_any_module_name(tmp_path_factory, names):
    torch = pytest.importorskip("torch")       # qcdoctor.probe imports it
    assert torch
    from qcdoctor.collectors.reading.compare_layers import load_compare
    from qcdoctor.probe.compare import _write_compare
    from tests.qa.writers import layer
    expected = [n.strip() for n in names]
    assume(all(n and n not in ("None", "nan", "NaN") for n in expected))
    folder = tmp_path_factory.mktemp("probe")
    rows = [layer(n, 0.999 - i * 1e-3) for i, n in enumerate(names)]
    for i, row in enumerate(rows):
        if i % 2:
            row.update(base_mod_name=names[-1 - i], match="pattern_end")
    _write_compare(folder, rows)
    for name, shown in (("compare_per_layer_out.txt", expected),
                        ("compare_per_layer_out.csv", [n.replace(",", "*") for n in expected])):
        table = load_compare(folder / name)
        assert [n.strip() for n in table.frame["mod_name"]] == shown, name
        assert not table.table.problems, (name, table.table.problems)
