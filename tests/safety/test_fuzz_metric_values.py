"""Any numbers in a compare_per_layer table (huge, tiny, signed, infinite, NaN, a Cosine of
1e308 then -1e308) are read into facts every field of which is valid, or the table is
refused with one clear error: never an internal error about a fact that is no finite
number (round 4 closed one path of this class, round 5 found another)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qcdoctor.collectors.reading.compare_layers import read_folder, row_facts
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import normalise
from tests.qa.writers import layer, write_compare
from tests.safety.test_fuzz import fuzz

EXTREMES = st.sampled_from([1e308, -1e308, 1.7e308, -1.7e308, 5e-324, -5e-324, 0.0, -0.0,
                            1.0, -1.0, 0.9999999, 1.0000001, 1e-300, math.inf, -math.inf,
                            math.nan]) | st.floats(allow_nan=True, allow_infinity=True)
COLUMNS = ("cosine", "atol", "qscale", "max_qscale_diff", "l1", "mse", "sqnr",
           "base_model_min", "base_model_max", "analy_model_min", "analy_model_max")


@st.composite
def extreme_rows(draw):
    rows = []
    for i in range(draw(st.integers(1, 8))):
        row = layer(f"m{i}", 0.999)
        for column in draw(st.sets(st.sampled_from(COLUMNS), max_size=len(COLUMNS))):
            row[column] = draw(EXTREMES)
        rows.append(row)
    return rows


def _facts_of(folder: Path) -> list[dict]:
    layers, reading = read_folder(folder / "compare_per_layer_out.txt")
    return row_facts(layers, reading, "qa", "qa/compare_per_layer_out.txt")


@fuzz(ci_examples=120)
@given(rows=extreme_rows())
def test_extreme_numbers_give_valid_facts_or_one_error(tmp_path_factory, rows):
    folder = tmp_path_factory.mktemp("extreme")
    write_compare(folder, rows)
    try:
        facts = _facts_of(folder)
    except QcdoctorError as error:
        assert error.fix
        return
    for fact in facts:
        normalise({k: v for k, v in fact.items() if k not in ("source", "locations")})


def test_a_cosine_of_1e308_then_minus_1e308_is_no_internal_error(tmp_path):
    case = tmp_path / "case"
    rows = [layer("a", 0.9999), layer("b", 0.9998), layer("c", 1e308), layer("d", -1e308),
            layer("e", 0.5)]
    write_compare(case / "qa_convert", rows)
    (case / "case.yaml").write_text("symptom: x\nplatform: {chip: J6E}\n", encoding="utf-8")
    report = triage_path(case, use_env=False, lang="en")
    problems = [f["problem"] for f in report["facts"] if f["type"] == "artifact_problem"]
    assert any("outside [-1, 1]" in p for p in problems), problems
    origin = next(f for f in report["facts"] if f["type"] == "layer_origin")
    assert origin["layer"] == "e"


@pytest.mark.parametrize("value", [1.5, -2.0, 1e308])
def test_no_cosine_outside_minus_one_to_one_is_read(tmp_path, value):
    write_compare(tmp_path, [layer("a", 0.9999), layer("b", value), layer("c", 0.99)])
    layers, _ = read_folder(tmp_path / "compare_per_layer_out.txt")
    assert math.isnan(layers.frame["cosine"].iat[1])
    assert any("outside [-1, 1]" in p for p in layers.table.problems)
