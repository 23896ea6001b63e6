"""Our per-layer reading (collectors/) on the tables qcdoctor probe writes for real
architectures with one injected fault each (the networks, faults and probe runs of
test_probe_real_networks): the faulty layer must come out as the source, with the right
kind, and a model coarse everywhere as accumulation (knowledge.md §16 R3.8, R3.9, R3.11).

Against the clean QAT model every row before the fault is the same computation, so the
reading must be one origin (``cliff``). Against the fused float model the clean QAT
model's own error comes first: where its own rows before the fault already leave the
clean band (read from its own table), the reading is accumulation plus the fault as the
dominant source (``accumulation_with_step``); where they stay in the band, ``cliff``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")

from qcdoctor.collectors.compare_layers import load_compare, read_layers, row_facts  # noqa: E402
from qcdoctor.collectors.thresholds import DEFAULT  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe.test_probe_real_networks import CASES, built, example  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    coarsen_all,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
)

# the fault -> the kinds its source may read as: per-tensor weights on a depthwise conv
# err by a few steps (rounding) or by tens with the range covered (the op's conversion)
KINDS = {"depthwise_per_tensor": {"rounding", "conversion"}, "silu_lut": {"lut"},
         "residual_add_saturates": {"truncation"}, "coarse_scale_se": {"rounding"},
         "coarse_scale_transformer": {"rounding"}}
FLOAT_BASELINE = ("depthwise_per_tensor", "silu_lut", "residual_add_saturates")


def reading_of(tmp_path, baseline, analysis, name):
    """(reading, facts by type, row names) of the probe's written table, read by us."""
    compare_models(baseline, analysis, example(), tmp_path / name, sensitivity=False)
    table = load_compare(tmp_path / name / "compare_per_layer_out.txt")
    reading = read_layers(table)
    facts = {}
    for fact in row_facts(table, reading, name, f"{name}/compare_per_layer_out.txt"):
        facts.setdefault(fact["type"], []).append(fact)
    names = [n.strip() for n in table.frame["mod_name"]]
    return reading, facts, names, table.frame["cosine"].tolist()


def assert_source(facts, layer, kinds, pattern):
    origin, kind = facts["layer_origin"][0], facts["error_kind"][0]
    assert (origin["layer"], origin["pattern"]) == (layer, pattern), \
        (origin["layer"], origin["pattern"], origin["fired"])
    assert origin["located"] and kind["layer"] == layer and kind["order"] == 1
    assert kind["kind"] in kinds, (kind["kind"], kind["steps"], kind["covered"])
    return origin, kind


@pytest.mark.parametrize("name", sorted(KINDS))
def test_the_fault_is_one_origin_against_the_clean_qat_model(tmp_path, name):
    case = CASES[name]
    _, _, qat = built(case.arch, case.backend, case.spread, case.silu)
    faulty = case.fault(qat, example())
    _, facts, _, _ = reading_of(tmp_path, qat, faulty, "against_qat")
    origin, kind = assert_source(facts, case.layer, KINDS[name], "cliff")
    assert origin["sources"] == 1 and origin["drop"] > 0
    if kind["kind"] == "lut":
        assert kind["lut_op"] == "silu" and origin["fired"] == "atol_jump"
        assert origin["qdiff"] >= DEFAULT.atol_jump_steps


@pytest.mark.parametrize("name", FLOAT_BASELINE)
def test_the_fault_is_the_source_against_the_fused_float_model(tmp_path, name):
    case = CASES[name]
    _, fused, qat = built(case.arch, case.backend, case.spread, case.silu)
    faulty = case.fault(qat, example())
    _, _, clean_names, clean_cosines = reading_of(tmp_path, fused, qat, "clean")
    fault_row = clean_names.index(case.layer)
    own_error_first = min(clean_cosines[:fault_row]) < DEFAULT.cosine_good
    expected = "accumulation_with_step" if own_error_first else "cliff"
    _, facts, _, _ = reading_of(tmp_path, fused, faulty, "faulty")
    origin, _ = assert_source(facts, case.layer, KINDS[name], expected)
    if expected == "accumulation_with_step":
        assert origin["start_row"] < origin["row"] and origin["loss_before"] > 0
        assert origin["drop"] >= DEFAULT.source_growth * origin["loss_before"]


def test_truncation_is_read_from_the_range_the_dtype_can_hold(tmp_path):
    """The saturating add: quint8 without a zero point in the table, judged by the width
    qscale x 255, which falls short of the baseline's span."""
    case = CASES["residual_add_saturates"]
    _, _, qat = built(case.arch, case.backend, case.spread, case.silu)
    _, facts, _, _ = reading_of(tmp_path, qat, case.fault(qat, example()), "add")
    kind = facts["error_kind"][0]
    assert (kind["dtype"], kind["range_placed"], kind["clipped"]) == ("quint8", False, True)
    assert kind["range_width"] == pytest.approx(kind["qscale"] * 255)
    assert kind["range_width"] < kind["base_max"] - kind["base_min"]


@pytest.mark.parametrize("baseline", ["qat", "fused"])
def test_everywhere_slightly_coarse_reads_as_accumulation(tmp_path, baseline):
    _, fused, qat = built("resnet10")
    faulty = coarsen_all(qat, 4)
    reading, facts, _, _ = reading_of(tmp_path, {"qat": qat, "fused": fused}[baseline],
                                      faulty, baseline)
    origin = facts["layer_origin"][0]
    assert reading.pattern == "gradual" and not origin["located"], \
        (origin["pattern"], origin["layer"], origin["fired"])
    assert "error_kind" not in facts                    # no single source has a kind
    assert origin["declining"] >= 5 and origin["typical_step"] > 0
    assert origin["region"] and origin["layer"].startswith(origin["region"])
