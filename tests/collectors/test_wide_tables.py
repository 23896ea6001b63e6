"""Wide headers and endless lines: a table past the column or line cap is refused before it
is parsed, naming the file, the line, the cap and the fix; one within them is read whatever
its width, its columns chosen as it is read. No wall-clock figures here (bench/
bench_wide_tables.py measures them): a deadline far above the work only turns a hang into
a failure."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path

import pytest

from qcdoctor.collectors import limits, tables
from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.qa_writers import cell, compare_rows, psql
from qcdoctor.collectors.reading.compare_layers import TEXT, load_compare
from qcdoctor.collectors.sensitivity import load_sensitivity
from qcdoctor.collectors.tables import psql_tables, read_psql_file, read_qa_csv, simple_table
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.errors import QcdoctorError
from tests.qa.scenarios import case_yaml
from tests.qa.writers import layer, write_compare, write_sensitivity

DEADLINE = 20                   # seconds: hundreds of times the work a capped table needs
CAP_TEXT = f"{limits.TABLE_COLUMNS:,}"
LINE_CAP_TEXT = f"{limits.TABLE_LINE_BYTES:,}"


@contextmanager
def deadline(seconds: int = DEADLINE):
    """Fails the test instead of letting it run on (the old column-by-column selection took
    49 s for 2,000 columns and hours for 10,000)."""
    def stop(signum, frame):
        raise TimeoutError(f"still reading after {seconds} s")
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def wide_compare(folder: Path, fmt: str, columns: int, rows: int = 5) -> Path:
    """compare_per_layer_out.{csv,txt} in the profiler's layout, its header widened with
    unused columns to ``columns`` header cells (the psql index column counted), each row
    as wide with those cells empty."""
    header, values = compare_rows([layer(f"m.block.l{i}", 0.9999 - i * 1e-4)
                                   for i in range(rows)], "23")
    unused = [f"unused_{i}" for i in range(columns - len(header) - (fmt == "txt"))]
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        path = folder / "compare_per_layer_out.csv"
        lines = [", ".join(header + unused)]
        lines += [", ".join([cell(v, True) for v in r] + [""] * len(unused)) for r in values]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    else:
        path = folder / "compare_per_layer_out.txt"
        path.write_text(psql(header + unused, [[cell(v, False) for v in r] + [""] * len(unused)
                                               for r in values]), encoding="utf-8")
    return path


def read(path: Path):
    reader = read_qa_csv if path.suffix == ".csv" else read_psql_file
    with deadline():
        return reader(path, usecols=set(TEXT) | {"cosine", "atol"}, text_columns=TEXT)


def refused_line(path: Path) -> tuple[int, bool]:
    """(number, too long) of the line a wide header is refused at: the header (the first
    line of a CSV, the second of a psql table) for its columns, or the first line past
    the line cap (a psql table's border is as long as its header)."""
    header = 1 if path.suffix == ".csv" else 2
    with open(path, "rb") as handle:
        for number in range(1, header + 1):
            if len(handle.readline().rstrip(b"\n")) > limits.TABLE_LINE_BYTES:
                return number, True
    return header, False


# --- refused past the caps ----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "txt"])
@pytest.mark.parametrize("columns", [2_000, 10_000, 100_000])
def test_a_header_past_the_caps_is_refused_naming_file_line_cap_and_fix(tmp_path, fmt, columns):
    path = wide_compare(tmp_path, fmt, columns, rows=3)
    number, too_long = refused_line(path)
    with pytest.raises(QcdoctorError) as caught:
        read(path)
    error = caught.value
    assert error.file == str(path) and error.line == number
    assert "no real one is this wide" in error.fix
    if too_long:                                    # refused before its columns are counted
        assert f"longer than {LINE_CAP_TEXT} bytes" in error.problem
    else:
        assert f"{columns:,} columns, more than the {CAP_TEXT}" in error.problem


@pytest.mark.parametrize("fmt", ["csv", "txt"])
def test_a_table_as_wide_as_the_cap_is_read_with_only_the_columns_asked_for(tmp_path, fmt):
    path = wide_compare(tmp_path, fmt, limits.TABLE_COLUMNS, rows=2_000)
    table = read(path)
    frame = table.frame
    assert len(frame) == 2_000 and not table.problems
    assert not [c for c in frame.columns if c.startswith("unused_")]
    assert frame["mod_name"].iat[1999].strip() == "m.block.l1999"
    assert frame["cosine"].iat[1] == pytest.approx(0.9998)
    assert frame["_line"].iat[0] == (2 if fmt == "csv" else 4)


@pytest.mark.parametrize("fmt", ["csv", "txt"])
def test_a_row_line_past_the_cap_is_refused_naming_its_line(tmp_path, fmt):
    path = write_compare(tmp_path, [layer(f"l{i}", 0.99) for i in range(6)], "23", fmt)
    lines = path.read_text(encoding="utf-8").splitlines()
    long_at = 4                                     # a data line in both formats
    lines[long_at] = lines[long_at].replace("l", "l" * (limits.TABLE_LINE_BYTES + 1), 1)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(QcdoctorError) as caught:
        read(path)
    assert caught.value.line == long_at + 1 and caught.value.file == str(path)
    assert f"longer than {LINE_CAP_TEXT} bytes" in caught.value.problem


# a fresh interpreter reads the table: its peak resident size before and after the read
PEAK = textwrap.dedent("""
    import json, resource, sys
    import pandas, numpy
    from qcdoctor.collectors.reading.compare_layers import load_compare
    from qcdoctor.errors import QcdoctorError
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        load_compare(sys.argv[1])
        outcome = {"read": True}
    except QcdoctorError as exc:
        outcome = {"read": False, "problem": str(exc.problem), "line": exc.line}
    outcome["growth_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps(outcome))
""")


def _sixty_mb_line(path: Path, head: str, tail: str) -> None:
    """``head``, then 60 MB of one line of cells, then ``tail``: written in pieces."""
    piece = "unused, " * (1 << 17)                  # 1 MiB
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(head)
        for _ in range(60):
            handle.write(piece)
        handle.write(tail)


@pytest.mark.parametrize("where", ["csv header", "psql header", "csv row"])
def test_a_60_mb_line_is_refused_in_bounded_memory(tmp_path, where):
    if where == "csv header":
        path = tmp_path / "compare_per_layer_out.csv"
        _sixty_mb_line(path, "mod_name, cosine, ", "atol\nm, 0.9, 0.1\n")
        line = 1
    elif where == "psql header":
        path = tmp_path / "compare_per_layer_out.txt"
        _sixty_mb_line(path, "+---+---+\n|   | mod_name | cosine | ",
                       "atol |\n|---+---|\n| 0 | m | 0.9 | 0.1 |\n+---+---+\n")
        line = 2                                    # its border above is short
    else:
        path = tmp_path / "compare_per_layer_out.csv"
        _sixty_mb_line(path, "mod_name, cosine, atol\nm, 0.9, 0.1\n", "\n")
        line = 3
    done = subprocess.run([sys.executable, "-c", PEAK, str(path)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert not outcome["read"] and outcome["line"] == line
    assert f"longer than {LINE_CAP_TEXT} bytes" in outcome["problem"]
    # the read holds a chunk of the file, never the line: far below its 60 MB
    assert outcome["growth_mb"] < 40, outcome


# --- through a triage ------------------------------------------------------------------

def test_a_refused_table_is_an_artifact_problem_naming_file_line_and_fix(tmp_path):
    case = tmp_path / "case"
    case_yaml(case)
    wide_compare(case / "qa", "csv", 2_000)
    with deadline():
        report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    problems = [f for f in report["facts"] if f["type"] == "artifact_problem"]
    problem = next(p for p in problems if p["file"] == "qa/compare_per_layer_out.csv")
    assert problem["problem"].startswith(f"line 1: the header has 2,000 columns, more than "
                                         f"the {CAP_TEXT}")
    assert "no real one is this wide" in problem["problem"]
    assert problem["locations"] == [{"file": "qa/compare_per_layer_out.csv", "line": 1}]
    assert "第 1 行" in problem["problem_zh"]


# --- the other table readers -------------------------------------------------------------

def test_psql_and_simple_tables_refuse_wide_headers_and_long_lines():
    wide = "|   | " + " | ".join(f"c{i}" for i in range(limits.TABLE_COLUMNS + 1)) + " |"
    with pytest.raises(QcdoctorError, match=f"more than the {CAP_TEXT}") as caught:
        psql_tables(["title", "+---+", wide, "|---|", "| 0 | x |"])
    assert caught.value.line == 3
    header = "  ".join(f"c{i}" for i in range(limits.TABLE_COLUMNS + 1))
    under = "  ".join("-" * len(f"c{i}") for i in range(limits.TABLE_COLUMNS + 1))
    with pytest.raises(QcdoctorError, match=f"more than the {CAP_TEXT}") as caught:
        simple_table([header, under, "a"])
    assert caught.value.line == 1
    long_row = "| 1 | " + "x" * (limits.TABLE_LINE_BYTES + 1) + " |"
    with pytest.raises(QcdoctorError, match="longer than") as caught:
        psql_tables(["+---+---+", "| a | b |", "|---+---|", "| 0 | y |", long_row])
    assert caught.value.line == 5


def test_short_rows_under_a_wide_simple_header_cost_their_own_length():
    names = [f"c{i}" for i in range(limits.TABLE_COLUMNS)]
    lines = ["  ".join(names), "  ".join("-" * len(n) for n in names)] + ["x"] * 1_000
    _, header, rows = simple_table(lines)
    assert len(header) == limits.TABLE_COLUMNS
    assert all(cells == ["x"] for _, cells in rows)


def test_a_sensitivity_table_with_a_long_line_is_reported_not_read(tmp_path):
    path = write_sensitivity(tmp_path, [("conv", "activation", "x.Conv", 0.5, "qint8")])
    path.write_text(path.read_text(encoding="utf-8") +
                    "y" * (limits.TABLE_LINE_BYTES + 1) + "  activation  x  0.1  qint8\n",
                    encoding="utf-8")
    with pytest.raises(QcdoctorError, match="longer than") as caught:
        load_sensitivity(path)
    assert caught.value.line == 4


# --- lines pandas and the scan must agree on ------------------------------------------

@pytest.mark.parametrize("end", ["\r", "\r\n"])
def test_carriage_return_line_ends_keep_every_row(tmp_path, end):
    path = write_compare(tmp_path, [layer(f"l{i}", 0.99 - i * 0.01) for i in range(8)], "23",
                         "txt")
    text = path.read_text(encoding="utf-8").replace("\n", end)
    path.write_bytes(("title" + end + end + text).encode("utf-8"))
    table = load_compare(path)
    assert [n.strip() for n in table.frame["mod_name"]] == [f"l{i}" for i in range(8)]
    assert list(table.frame["_line"]) == list(range(6, 14)) and not table.table.problems


def test_many_damaged_lines_skip_without_a_set_of_them(tmp_path, monkeypatch):
    monkeypatch.setattr(tables, "SPLIT_ROWS", 2)    # past it, one byte a line tells pandas
    path = write_compare(tmp_path, [layer(f"l{i}", 0.99 - i * 0.01) for i in range(9)], "23",
                         "csv")
    lines = path.read_text(encoding="utf-8").splitlines()
    for at in (2, 4, 6):                            # three short lines among the rows
        lines[at] = "damaged"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = load_compare(path)
    assert [n.strip() for n in table.frame["mod_name"]] == ["l0", "l2", "l4", "l6", "l7", "l8"]
    assert list(table.frame["_line"]) == [2, 4, 6, 8, 9, 10]
    assert "3 line(s) have fewer cells than the header and were not read: line(s) 3, 5, 7" \
        in table.table.problems
