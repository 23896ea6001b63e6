"""A kind judged at a source needs its numbers (knowledge.md §17 R4.3): a clamp read from
clean inputs with no dtype or qscale in the table says the quantizer's range is unknown,
never a range of 0."""

from __future__ import annotations

from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers, row_facts
from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.fact_types import normalise
from tests.qa.writers import layer, write_compare


def test_a_clamp_without_its_quantizer_numbers_is_truncation_of_unknown_range(tmp_path):
    rows = [layer("stem", 1.0), layer("conv1", 1.0),
            layer("add", 0.93, dtype="", qscale=None, base=(-4.0, 6.0), analy=(0.0, 0.2)),
            layer("tail", 0.92)]
    table = load_compare(write_compare(tmp_path / "qa", rows, "16", "csv"))
    facts = row_facts(table, read_layers(table), "qa", "qa/compare_per_layer_out.csv")
    kind = next(f for f in facts if f["type"] == "error_kind")
    assert (kind["layer"], kind["kind"]) == ("add", "truncation")
    assert not kind["range_known"] and kind["narrower"] and kind["inputs_clean"]
    facts = [normalise(f) for f in facts]
    fired = {r.id for r in load_rules() if r.id in ("LY030", "LY034", "LY039")
             and oracle_bindings(r.when, facts)}
    assert fired == {"LY039"}           # no "qscale 0 spans only 0"
