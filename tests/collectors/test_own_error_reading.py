"""layer_own_error.csv as triage reads it: its rows by name, a damaged file one named
problem (knowledge.md §17 R4.2)."""

from __future__ import annotations

import math

import pytest

from qcdoctor.collectors.limits import TABLE_COLUMNS, TABLE_LINE_BYTES
from qcdoctor.collectors.reading.own_error import load_own_error, own_error_of
from qcdoctor.collectors.tables import TableRefused

HEADER = "mod_name,own_cosine,own_atol,own_qsteps,weight_sqnr_db,weight_scheme,weight_channel_ratio\n"


def write(tmp_path, text):
    path = tmp_path / "layer_own_error.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_rows_are_read_by_name_with_their_weight_error(tmp_path):
    path = write(tmp_path, HEADER + "conv,0.97,1.5,30,6.5,per_tensor,55\n"
                                    "add,1,0,,,,\n" "\"a,b\",nan,,,,,\n")
    rows, problems = load_own_error(path)
    assert problems == []
    assert rows["conv"]["own_cosine"] == 0.97 and rows["conv"]["per_tensor"]
    assert rows["conv"]["weight_channel_ratio"] == 55
    assert math.isnan(rows["add"]["own_qsteps"]) and not rows["add"]["per_tensor"]
    assert math.isnan(rows["a,b"]["own_cosine"])             # not finite: unknown
    own = own_error_of(rows, ["x", "conv", "add"])
    assert math.isnan(own.cosine[0]) and own.cosine[1] == 0.97 and own.per_tensor[1]


def test_short_lines_are_named_and_the_rest_read(tmp_path):
    rows, problems = load_own_error(write(tmp_path, HEADER + "conv,0.9\nrelu,1,0,0,,,\n"))
    assert list(rows) == ["relu"] and "line(s) 2" in problems[0]


def test_a_file_without_its_columns_is_no_such_table(tmp_path):
    with pytest.raises(ValueError, match="no own_cosine column"):
        load_own_error(write(tmp_path, "mod_name,cosine\nconv,1\n"))


def test_the_table_caps_hold(tmp_path):
    wide = ",".join(f"c{i}" for i in range(TABLE_COLUMNS + 1)) + "\n"
    with pytest.raises(TableRefused) as refused:
        load_own_error(write(tmp_path, wide))
    assert refused.value.line == 1
    long_line = HEADER + "x" * (TABLE_LINE_BYTES + 10) + ",1,0,0,,,\n"
    with pytest.raises(TableRefused) as refused:
        load_own_error(write(tmp_path, long_line))
    assert refused.value.line == 2
