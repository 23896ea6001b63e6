"""qcdoctor probe on real networks nobody here wrote: pytorchcv architectures with random
weights (fixed seed, no downloads), quantized with torch's FX QAT tooling, with known
faults injected; probe then triage must find them where they were put."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")

from qcdoctor.collectors.case_file import load_case  # noqa: E402
from qcdoctor.engine.diagnosis.triage import triage_case  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    inject,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
    zoo_model,
)
from tests.qa.scenarios import case_yaml  # noqa: E402

SIZE = 32          # small inputs keep the suite fast; the final pool is adaptive
# architecture -> the mid-network layer that gets the faults
NETWORKS = {"resnet18": "features.stage2.unit2.body.conv1.conv",
            "seresnet10": "features.stage2.unit1.body.conv1.conv"}



@pytest.fixture(scope="module", params=sorted(NETWORKS))
def network(request):
    model = zoo_model(request.param, SIZE)
    example = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))
    baseline, qat = quantize(model, example)
    return request.param, baseline, qat, example


def probe_and_triage(tmp_path, baseline, analysis, example, sensitivity=False):
    case = tmp_path / "case"
    case_yaml(case, stages={"float": {"status": "normal"}, "calib": {"status": "abnormal"}})
    result = compare_models(baseline, analysis, example, case / "qa_probe", sensitivity=sensitivity)
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    facts = {}
    for fact in report["facts"]:
        facts.setdefault(fact["type"], []).append(fact)
    return result, facts


def test_no_fault_layers_agree(tmp_path, network):
    _, baseline, qat, example = network
    result, facts = probe_and_triage(tmp_path, baseline, qat, example)
    assert len(result.rows) > 20 and not result.baseline_only
    # every output matched: a fake quant is reported under the node it observes, also
    # one shared by two nodes; function nodes under their module path, the input by name
    assert not result.analysis_only and result.matched_share == 1.0
    names = [r["mod_name"] for r in result.rows]
    assert len(names) == len(set(names)) and "activation_post_process_1" not in names
    assert names[0] == "x" and "features.stage1.unit1.add" in names
    assert {r["match"] for r in result.rows} == {"name"}         # same computations
    assert facts["qa_folder"][0]["origin"] == "probe"
    assert facts["layer_table"][0]["compared"] == len(result.rows)
    assert "layer_origin" not in facts and not facts["layer_table"][0]["abnormal"]


def test_too_small_scale_is_truncation_at_its_layer(tmp_path, network):
    arch, baseline, qat, example = network
    layer = NETWORKS[arch]
    _, facts = probe_and_triage(tmp_path, baseline, inject(qat, layer, scale_factor=0.05), example)
    origin, kind, worst = facts["layer_origin"][0], facts["error_kind"][0], facts["layer_worst"][0]
    assert origin["layer"] == layer and origin["pattern"] == "cliff"
    assert kind["kind"] == "truncation"
    # the worst layer comes later and is kept apart from the origin
    assert not worst["is_origin"] and worst["row"] > origin["row"]
    assert worst["origin_layer"] == layer


def test_four_bits_is_rounding_at_its_layer(tmp_path, network):
    arch, baseline, qat, example = network
    layer = NETWORKS[arch]
    _, facts = probe_and_triage(tmp_path, baseline, inject(qat, layer, bits=4), example)
    origin = facts["layer_origin"][0]
    assert origin["layer"] == layer and origin["dtype"] == "quint4"
    assert facts["error_kind"][0]["kind"] == "rounding"


def test_sensitivity_puts_the_faulty_layer_first(tmp_path, network):
    arch, baseline, qat, example = network
    layer = NETWORKS[arch]
    result, facts = probe_and_triage(tmp_path, baseline, inject(qat, layer, bits=4), example,
                                     sensitivity=True)
    rows = result.sensitivity["0"]
    assert rows[0][:2] == (layer, "activation")
    assert rows[0][3] > 2 * rows[1][3]
    summary = facts["sensitivity_summary"][0]
    assert summary["top_op"] == layer and summary["metric"] == "L1" and summary["dominant"]
    # every quantizer ran once: the activations and the conv / linear weights
    assert {r[1] for r in rows} == {"activation", "weight"}
    assert len({(r[0], r[1]) for r in rows}) == len(rows)
