"""Damaged QuantAnalysis files never crash a triage: clean errors or marked partial results."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from tests.paths import TESTS
from tests.qa.scenarios import build, case_yaml
from tests.qa.writers import COMPARE_FORMATS, layer, write_compare, write_sensitivity

BASE = TESTS / "qa"


def _triage(folder: Path, html: bool = True) -> dict:
    report = triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)
    render(report, "md")                  # the report renders whatever was read
    if html:                              # with its plots
        render(report, "html")
    return report


def _problems(report: dict) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == "artifact_problem"]


damage = st.sampled_from(["truncate", "drop_cells", "add_cells", "garbage", "nan_inf", "empty",
                          "binary", "header_only", "shuffle_border"])


def _damage(text: str, how: str, rnd) -> str:
    lines = text.splitlines()
    if how == "truncate":
        cut = rnd.randint(0, len(text))
        return text[:cut]
    if how == "empty":
        return ""
    if how == "binary":
        return "\x00\xff\xfe garbage \x01"
    if how == "header_only":
        return "\n".join(lines[:3])
    i = rnd.randrange(len(lines))
    if how == "drop_cells":
        lines[i] = lines[i].rsplit("|", 3)[0] if "|" in lines[i] else lines[i].rsplit(",", 3)[0]
    elif how == "add_cells":
        lines[i] = lines[i] + (" extra | 1.0 |" if "|" in lines[i] else ", 1.0, x")
    elif how == "garbage":
        lines[i] = lines[i].replace("0.", "zz", 2)
    elif how == "nan_inf":
        lines[i] = lines[i].replace("0.9", "nan", 1).replace("0.8", "inf", 1)
    elif how == "shuffle_border":
        lines.insert(i, "+----+----+")
    return "\n".join(lines) + "\n"


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(how=damage, fmt=st.sampled_from(COMPARE_FORMATS), target=st.sampled_from(["compare", "sens"]),
       rnd=st.randoms(use_true_random=False),
       html=st.sampled_from([True, False, False]))   # plots cost: HTML for about a third
def test_damaged_tables_never_crash(tmp_path_factory, how, fmt, target, rnd, html):
    case = build("cliff", tmp_path_factory.mktemp("damaged"), fmt=fmt)
    qa = case / "qa_convert"
    path = next(qa.glob("compare_per_layer_out.*")) if target == "compare" \
        else next(qa.glob("output_*_sensitive_ops.txt"))
    path.write_bytes(_damage(path.read_text(encoding="utf-8"), how, rnd).encode("utf-8", "surrogateescape")
                     if how != "binary" else b"\x00\xff\xfe garbage \x01")
    report = _triage(case, html)
    assert report["conclusion"]["stage"] == "convert"        # the case itself is unaffected
    for problem in _problems(report):
        assert problem["file"].startswith("qa_convert/") and problem["problem"]


def test_empty_compare_file_is_reported(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    (case / "qa").mkdir()
    (case / "qa" / "compare_per_layer_out.txt").write_text("")
    problems = _problems(_triage(case))
    assert problems and problems[0]["file"] == "qa/compare_per_layer_out.txt"
    assert "LY095" in {f["rule"] for f in _triage(case)["findings"]}


def test_partial_rows_are_marked(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    path = write_compare(case / "qa", [layer(f"l{i}", 0.99999 - i * 0.01) for i in range(6)],
                         fmt="csv")
    text = path.read_text().splitlines()
    text[3] = text[3].replace("0.0082740", "abc", 1)
    text.append(text[2] + ", 1.0, 2.0")                        # a longer row
    path.write_text("\n".join(text) + "\n")
    report = _triage(case)
    partial = [p for p in _problems(report) if p["partial"]]
    assert partial and "non-numeric" in partial[0]["problem"] and "more fields" in partial[0]["problem"]
    assert "LY096" in {f["rule"] for f in report["findings"]}
    table = next(f for f in report["facts"] if f["type"] == "layer_table")
    assert table["partial"] and table["rows"] == 7


def test_nan_and_inf_metrics_are_treated_as_missing(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    rows = [layer("a", 0.99999), layer("b", float("nan")), layer("c", 0.7), layer("d", 0.69)]
    path = write_compare(case / "qa", rows, fmt="csv")
    path.write_text(path.read_text().replace("0.6900000", "inf"))
    report = _triage(case)
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert origin["layer"] == "c"


def test_sensitivity_with_bad_values_keeps_the_good_rows(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    path = write_sensitivity(case / "qa", [("a", "activation", "x.Conv", 0.5, "qint8"),
                                           ("b", "activation", "x.Conv", 0.1, "qint8")])
    path.write_text(path.read_text() + "c           activation      <class 'x'>   nan  qint8\n"
                    "d           activation      <class 'x'>   zz   qint8\n")
    report = _triage(case)
    summary = next(f for f in report["facts"] if f["type"] == "sensitivity_summary")
    assert summary["rows"] == 2 and summary["top_op"] == "a"
    assert any(p["partial"] for p in _problems(report))


@pytest.mark.parametrize("cell,partial", [("1.0000000", False), ("None", True), ("conv", True),
                                          ("nan", True), ("1.5", True), ("inf", True)])
def test_csv_row_numbers_that_are_not_whole_numbers(tmp_path, cell, partial):
    case = tmp_path / "c"
    case_yaml(case)
    rows = [layer("a", 0.99999), layer("b", 0.7), layer("c", 0.69)]
    path = write_compare(case / "qa", rows, fmt="csv_index")
    lines = path.read_text().splitlines()
    assert lines[2].startswith("1, b, ")
    lines[2] = cell + lines[2][1:]
    path.write_text("\n".join(lines) + "\n")
    report = _triage(case)
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert (origin["layer"], origin["row"]) == ("b", 1)       # the position stands in
    table = next(f for f in report["facts"] if f["type"] == "layer_table")
    assert table["partial"] == partial and table["rows"] == 3
    if partial:
        assert any("position in the file" in p["problem"] for p in _problems(report))


def test_profiler_csv_without_index_column_cites_data_positions(tmp_path):
    case = tmp_path / "c"
    case_yaml(case)
    rows = [layer("a", 0.99999), layer("b", 0.99998), layer("c", 0.7)]
    path = write_compare(case / "qa", rows, fmt="csv")
    assert path.read_text().startswith("mod_name, base_op_type")
    report = _triage(case)
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert (origin["layer"], origin["row"]) == ("c", 2)
    assert origin["source"] == "qa/compare_per_layer_out.csv row 2 (line 4)"
    assert not _problems(report)
