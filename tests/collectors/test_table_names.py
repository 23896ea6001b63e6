"""Module names holding the tables' own separators: the probe writes a table its reader
reads back with every row and every name, and the reader never drops a row silently: a
row it cannot split into the header's columns is reported with its line."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")                    # qcdoctor.probe imports it

from qcdoctor.collectors.case_file import load_case  # noqa: E402
from qcdoctor.collectors.qa_writers import cell, compare_rows, psql  # noqa: E402
from qcdoctor.collectors.reading.compare_layers import load_compare  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402
from qcdoctor.probe.compare import _write_compare  # noqa: E402
from tests.qa.scenarios import case_yaml  # noqa: E402
from tests.qa.writers import layer, write_compare  # noqa: E402

NAMES = ["backbone|conv", "neck.a, b", "head with spaces", "中文|层.卷积", "x|y|z", "naïve‖📈",
         "|edge|", "plain"]


def probe_rows(names: list[str], drop_at: int | None = None) -> list[dict]:
    """compare rows as the probe keeps them, a few comparing against a named baseline
    output (base_mod_name, itself holding a '|'); a Cosine cliff at ``drop_at``."""
    rows = []
    for i, name in enumerate(names):
        cosine = 0.99995 - i * 1e-6 if drop_at is None or i < drop_at else 0.80 - i * 1e-3
        row = layer(name, cosine)
        if i % 3 == 1:
            row.update(base_mod_name=f"base|{name}", match="pattern_end")
        rows.append(row)
    return rows


def names_read(path) -> tuple[list[str], list[str]]:
    table = load_compare(path)
    return [n.strip() for n in table.frame["mod_name"]], table.table.problems


@pytest.mark.parametrize("name", ["compare_per_layer_out.txt", "compare_per_layer_out.csv"])
def test_probe_tables_read_back_every_row_with_its_name(tmp_path, name):
    _write_compare(tmp_path, probe_rows(NAMES))
    names, problems = names_read(tmp_path / name)
    # the CSV writes a comma inside a cell as '*', as the profiler does
    expected = NAMES if name.endswith(".txt") else [n.replace(",", "*") for n in NAMES]
    assert names == expected and not problems


def test_line_breaks_and_tabs_in_names_are_written_as_escapes(tmp_path):
    odd = ["a\nb", "c\rd", "e\tf", "g\u2028h", "i\x00j", "k\x85l", "bad\ud800surrogate"]
    _write_compare(tmp_path, probe_rows(odd))
    shown = ["a\\nb", "c\\rd", "e\\tf", "g\\u2028h", "i\\x00j", "k\\x85l", "bad\\ud800surrogate"]
    for name in ("compare_per_layer_out.txt", "compare_per_layer_out.csv"):
        names, problems = names_read(tmp_path / name)
        assert names == shown and not problems, name


def test_triage_of_a_probe_folder_keeps_every_row_and_names_the_origin_exactly(tmp_path):
    case = tmp_path / "case"
    case_yaml(case)
    names = [f"stage{i}|block.conv" for i in range(6)] + ["neck|fuse, relu"] + \
        [f"head.cls|{i}" for i in range(4)]
    _write_compare(case / "qa_probe", probe_rows(names, drop_at=6))
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    table = next(f for f in report["facts"] if f["type"] == "layer_table")
    assert table["rows"] == len(names) and not table["partial"]
    assert not [f for f in report["facts"] if f["type"] == "artifact_problem"]
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert origin["layer"] == "neck|fuse, relu" and origin["row"] == 6


def test_a_profiler_row_whose_name_holds_a_bar_is_joined_back_when_misaligned(tmp_path):
    """The profiler's tabulate pads by display width, so a row with wide characters has its
    bars elsewhere than the header's: with one name column the extra cells are the name's."""
    header, values = compare_rows([layer("a.conv", 0.9999), layer("宽|字.conv", 0.99),
                                   layer("c.conv", 0.98)], "16")
    text = psql(header, [[cell(v, False) for v in r] for r in values])
    lines = text.splitlines()
    lines[4] = lines[4].replace("宽|字.conv", "宽|字.conv" + "  ", 1)   # two columns wider
    path = tmp_path / "compare_per_layer_out.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    names, problems = names_read(path)
    assert names == ["a.conv", "宽|字.conv", "c.conv"] and not problems


def test_a_row_that_cannot_be_split_is_reported_with_its_line(tmp_path):
    _write_compare(tmp_path, probe_rows(NAMES))
    path = tmp_path / "compare_per_layer_out.txt"
    lines = path.read_text(encoding="utf-8").splitlines()
    # two name columns (mod_name, base_mod_name) and bars off the header's places
    lines[3] = lines[3].replace("backbone|conv ", "backbone|conv", 1)    # row 0, line 4
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    names, problems = names_read(path)
    assert names == NAMES[1:]
    assert problems == ["1 line(s) have more cells than the header and could not be split "
                        "into its columns; not read: line(s) 4"]


@pytest.mark.parametrize("fmt", ["txt", "csv"])
def test_rows_with_fewer_cells_are_reported_with_their_lines(tmp_path, fmt):
    path = write_compare(tmp_path, [layer(f"l{i}", 0.99 - i * 0.01) for i in range(6)], "23",
                         fmt)
    lines = path.read_text(encoding="utf-8").splitlines()
    cut = 3 if fmt == "txt" else 1                  # the first data line
    lines[cut] = lines[cut][:len(lines[cut]) // 2]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    names, problems = names_read(path)
    assert names == ["l1", "l2", "l3", "l4", "l5"]
    assert problems == [f"1 line(s) have fewer cells than the header and were not read: "
                        f"line(s) {cut + 1}"]
