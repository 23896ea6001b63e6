"""The parsers against real tool output (the format samples beside the checkout).

The samples are not part of the project; these tests read them where they are and are
skipped when they are not there.
"""

from __future__ import annotations

import pytest

from qcdoctor.collectors.model_check import check_model
from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers
from qcdoctor.collectors.reading.fx_graph import load_graph
from qcdoctor.collectors.sensitivity import _rows_from_txt
from qcdoctor.collectors.statistic import load_statistic
from tests.paths import SHARED, TESTS

SAMPLES = SHARED / "samples"
pytestmark = pytest.mark.skipif(not SAMPLES.is_dir(), reason="format samples not present")


def test_compare_16_column_sample():
    table = load_compare(SAMPLES / "compare_per_layer_out.v16col_psql.sample.txt")
    frame = table.frame
    assert table.layout == "16" and len(frame) == 11
    assert frame["cosine"].isna().sum() == 1                      # the fused 'conv' row
    assert frame["mod_name"].iat[1].strip() == "conv"
    assert frame["qscale"].iat[0] == pytest.approx(0.0078425)
    reading = read_layers(table)
    assert reading.compared == 10 and reading.origin is None       # all above 0.999


def test_compare_23_column_sample_with_elisions():
    table = load_compare(SAMPLES / "compare_per_layer_out.v23col_psql.sample.txt")
    assert table.layout == "23"
    assert {"mse", "kl", "sqnr", "rtol"} <= set(table.frame.columns)
    assert table.frame["_index"].iat[0] == 791


def test_sensitivity_samples_with_and_without_flops():
    text = (SAMPLES / "sensitive_ops.samples.txt").read_text(encoding="utf-8")
    blocks = text.split("# ---- Sample ")[1:]
    problems: list[str] = []
    first = _rows_from_txt(blocks[0].split("\n", 1)[1], "L1", problems)
    second = _rows_from_txt(blocks[1].split("\n", 1)[1], "L1", problems)
    assert [r.op_name for r in first][:2] == ["add2", "conv"] and first[5].value == pytest.approx(3.56923e-05)
    assert second[5].op_name.endswith("sparse_head.sigmoid") and "SegmentLUT" in second[5].op_type
    assert not problems


def test_fx_graph_sample():
    text = (SAMPLES / "fx_graph.sample.txt").read_text(encoding="utf-8")
    part_a = text.split("# ---- Part B")[0]
    path = TESTS / "_fx_sample.tmp"
    path.write_text(part_a, encoding="utf-8")
    try:
        graph, _ = load_graph(path)
    finally:
        path.unlink()
    assert graph.producers["warp"] == ["bn", "quant_grid"]
    assert graph.node_for_layer("add2") == "add"                  # FloatFunctional via get_attr


def test_model_check_and_statistic_samples():
    found = check_model(SAMPLES / "model_check_result.fragments_large_model.sample.txt")
    kinds = {f["kind"] for f in found}
    assert {"unfused", "shared"} <= kinds
    rows = load_statistic(SAMPLES / "statistic.sample.txt")
    weight = next(r for r in rows if r["attr"] == "weight")
    assert (weight["module"], weight["min"]) == ("conv", pytest.approx(-0.4921377))
