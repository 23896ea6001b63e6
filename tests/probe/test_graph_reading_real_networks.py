"""The layer reading as triage does it (collectors/: along the probe's fx_graph.txt, with
each layer's own error from layer_own_error.csv) on the tables qcdoctor probe writes for
real architectures with one injected fault each (knowledge.md §17 R4.1-R4.3).

pytorchcv networks (residual ResNet, squeeze-excitation SE-ResNet and EfficientNet with
SiLU, depthwise MobileNetV2), a ViT-style transformer and a two-head detector, quantized
with torch.ao FX QAT (calibrated, observers frozen). Each fault must read as one origin
at the faulty layer with the kind that fits it; two honest calibrations of one model as
noise with no origin; every activation coarse as accumulation. Against the clean QAT
model every row before the fault is the very same computation.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorchcv")

from torch import nn  # noqa: E402

from qcdoctor.collectors.reading.compare_layers import (  # noqa: E402  # noqa: E402
    numeric_column,
    quantization_steps,
    read_folder,
    row_facts,
)
from qcdoctor.collectors.reading.fx_graph import load_graph  # noqa: E402
from qcdoctor.collectors.reading.layer_graph import graph_edges, read_graph  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe.test_probe_real_networks import built, example  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    LutSiLU,
    coarsen_all,
    inject,
    network,
    observer_of,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    per_tensor_weights,
    quantize,
    swap_module,
)


class Clamp(nn.Module):
    """A quantizer slot replaced by a clamp at a share of the calibrated range."""

    def __init__(self, high: float):
        super().__init__()
        self.high = high

    def forward(self, x):
        return x.clamp(max=self.high)


def clamped(qat, layer: str, share: float):
    faulty = copy.deepcopy(qat)
    name = observer_of(faulty, layer)
    scale, zero_point = (float(v) for v in getattr(faulty, name).calculate_qparams())
    high = (getattr(faulty, name).quant_max - zero_point) * scale
    setattr(faulty, name, Clamp(share * high))
    return faulty


def input_node(qat):
    return next(n for n in qat.graph.nodes if n.op == "placeholder")


class TwoHeads(nn.Module):
    """A detector's shape: one backbone, a box head and a class head, two outputs."""

    def __init__(self, backbone: nn.Module, channels: int):
        super().__init__()
        self.backbone = backbone
        self.box_head = nn.Sequential(nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, 4, 1))
        self.cls_head = nn.Sequential(nn.Conv2d(channels, 32, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(32, 10, 1))

    def forward(self, x):
        features = self.backbone(x)
        return self.box_head(features), self.cls_head(features)


_DETECTOR = {}


def detector():
    """(fused float, calibrated QAT) of a two-head detector on resnet10's stages 1-3."""
    if not _DETECTOR:
        torch.manual_seed(5)
        net = network("resnet10", 64)
        backbone = nn.Sequential(net.features.init_block, net.features.stage1,
                                 net.features.stage2, net.features.stage3)
        model = TwoHeads(backbone, 256).eval()
        _DETECTOR["built"] = quantize(model, example())
    return _DETECTOR["built"]


# name -> (architecture args, fault, the faulty row, the kinds it may read as)
SCENARIOS = {
    # the example notebook's fault: the fake quant after one conv of a residual's
    # shortcut, its scale a hundred times too small
    "residual_shortcut_truncated": (
        ("resnet10",), lambda q: inject(q, "features.stage2.unit1.identity_conv.conv",
                                        scale_factor=0.01),
        "features.stage2.unit1.identity_conv.conv", {"truncation"}),
    # one SiLU of an SE block by a 16-entry table: the SE branch's rows interleave
    "se_silu_table": (
        ("efficientnet_b0", "qnnpack", False, True),
        lambda q: swap_module(q, "features.stage4.unit2.conv2.activ", LutSiLU()),
        "features.stage4.unit2.conv2.activ", {"lut"}),
    # the residual sum of an SE-ResNet unit clamped (its fake quant range a quarter)
    "se_residual_clamped": (
        ("seresnet10",), lambda q: inject(q, "features.stage3.unit1.activ", scale_factor=0.25),
        "features.stage3.unit1.activ", {"truncation"}),
    # a quantizer replaced by a clamp at 30 % of its range
    "clamping_quantizer": (
        ("resnet10",), lambda q: clamped(q, "features.stage2.unit1.body.conv1.conv", 0.3),
        "features.stage2.unit1.body.conv1.conv", {"truncation"}),
    # one layer that needs more than 8 bits: its output at 4 bits
    "layer_needs_int16": (
        ("resnet10",), lambda q: inject(q, "features.stage3.unit1.body.conv1.conv", bits=4),
        "features.stage3.unit1.body.conv1.conv", {"rounding"}),
    # one conv's activation 16 times too coarse in an SE network
    "coarse_scale_se": (
        ("seresnet10",), lambda q: inject(q, "features.stage2.unit1.body.conv1.conv",
                                          coarse=16),
        "features.stage2.unit1.body.conv1.conv", {"rounding"}),
    # the same in an attention block's MLP
    "coarse_scale_attention": (
        ("tinyvit",), lambda q: inject(q, "blocks.0.mlp.0", coarse=16),
        "blocks.0.mlp.0", {"rounding"}),
    # per-tensor weights on a depthwise conv whose channels differ by two decades
    "depthwise_per_tensor": (
        ("mobilenetv2_w1", "x86", True),
        lambda q: per_tensor_weights(q, "features.stage2.unit1.conv2.conv", example()),
        "features.stage2.unit1.conv2.conv", {"weight"}),
    # the model input's quantizer too narrow
    "input_too_narrow": (
        ("resnet10",), lambda q: inject(q, input_node(q), scale_factor=0.25), "x",
        {"truncation"}),
}


def probed(tmp_path, baseline, analysis, name: str):
    folder = tmp_path / name
    compare_models(baseline, analysis, example(), folder, sensitivity=False)
    layers, reading = read_folder(folder / "compare_per_layer_out.csv")
    facts = {}
    for fact in row_facts(layers, reading, name, f"{name}/compare_per_layer_out.csv"):
        facts.setdefault(fact["type"], []).append(fact)
    return folder, reading, facts


def faulty_model(name: str):
    args, fault, _, _ = SCENARIOS[name]
    qat = built(*args)[2]
    return qat, fault(qat)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_fault_reads_as_one_origin_of_its_kind(tmp_path, name):
    _, _, layer, kinds = SCENARIOS[name]
    qat, faulty = faulty_model(name)
    folder, reading, facts = probed(tmp_path, qat, faulty, "against_qat")
    assert (folder / "layer_own_error.csv").is_file()
    origin = facts["layer_origin"][0]
    assert (origin["layer"], origin["pattern"]) == (layer, "cliff"), \
        (origin["layer"], origin["pattern"], origin["fired"], origin["sources"])
    assert origin["reading"] == "graph" and origin["sources"] == 1
    kind = facts["error_kind"][0]
    assert kind["layer"] == layer and kind["kind"] in kinds, \
        (kind["kind"], kind["steps"], kind["covered"], kind["weight_sqnr"], kind["narrower"])


def test_the_notebook_fault_against_the_float_model(tmp_path):
    """The example notebook's run: the fused float model as baseline."""
    args, fault, layer, _ = SCENARIOS["residual_shortcut_truncated"]
    _, fused, qat = built(*args)
    _, reading, facts = probed(tmp_path, fused, fault(qat), "against_float")
    origin, kind = facts["layer_origin"][0], facts["error_kind"][0]
    assert (origin["layer"], origin["pattern"], kind["kind"]) == (layer, "cliff", "truncation")
    assert origin["fired"] == "own_error" and origin["own_cosine"] < 0.9


def test_a_two_head_detector_with_one_faulty_head_is_one_origin(tmp_path):
    fused, qat = detector()
    faulty = inject(qat, "cls_head.0", scale_factor=0.25)
    _, reading, facts = probed(tmp_path, qat, faulty, "detector")
    origin = facts["layer_origin"][0]
    assert (origin["layer"], origin["pattern"], origin["sources"]) == ("cls_head.0", "cliff", 1)
    assert facts["error_kind"][0]["kind"] == "truncation"


def test_two_honest_calibrations_are_noise_with_no_origin(tmp_path):
    float_model = network("resnet10", 64)
    _, first = quantize(float_model, example())
    _, second = quantize(float_model, example(), batches=3, batch_size=12)
    folder, reading, facts = probed(tmp_path, first, second, "control")
    # R5.6: the rows fall below the cited threshold (their numbers alone are no noise),
    # but the probe found the two models equal without their quantization: the baseline
    # quantizes too, so the folder is a control, read as noise with no remedy
    import yaml

    from qcdoctor.engine.diagnosis.triage import triage_path
    manifest = yaml.safe_load((folder / "probe_run.yaml").read_text(encoding="utf-8"))
    assert manifest["models_match"]["match"] and manifest["models_match"]["baseline_quantized"]
    (tmp_path / "case.yaml").write_text("symptom: mAP drops after calibration\n"
                                        "platform: {chip: J6E}\n", encoding="utf-8")
    report = triage_path(tmp_path, use_env=False, lang="en")
    (qa,) = [f for f in report["facts"] if f["type"] == "qa_folder"]
    assert qa["scope"] == "control" and not qa["drives"]
    fired = {t["rule"] for t in report["trace"]}
    assert "LY086" in fired and "LY110" not in fired
    assert not [a for a in report["next_actions"]
                if a["kind"] == "lut_bisect" or a["id"].startswith(("qint16:", "fixed_scale:"))]


def test_every_activation_coarse_in_a_deep_chain_is_accumulation(tmp_path):
    qat = built("resnet10")[2]
    _, reading, facts = probed(tmp_path, qat, coarsen_all(qat, 4), "coarse")
    origin = facts["layer_origin"][0]
    assert reading.pattern == "gradual" and not origin["located"], \
        (origin["pattern"], origin["layer"], origin["fired"])
    assert "error_kind" not in facts
    assert origin["region"] not in ("", "x") and origin["region_rows"] >= 5


@pytest.mark.parametrize("name", ["coarse_scale_se", "se_silu_table", "layer_needs_int16"])
def test_the_verdict_holds_when_the_last_digits_change(tmp_path, name):
    """Cosine +-1e-4 and Atol +-1 % on the written table, and a probe run with two torch
    threads: the same verdict, or one said to be borderline."""
    qat, faulty = faulty_model(name)
    folder, first, _ = probed(tmp_path, qat, faulty, "one_thread")
    layers, _ = read_folder(folder / "compare_per_layer_out.csv")
    graph, _ = load_graph(folder / "fx_graph.txt")
    frame = layers.frame
    metric = ~np.isnan(numeric_column(frame, "cosine"))
    names = [n.strip() for n in frame["mod_name"][metric]]
    edges = graph_edges(graph, names)
    cos, steps = numeric_column(frame, "cosine")[metric], quantization_steps(frame)[metric]
    verdict = (first.pattern, first.origin)
    rng = np.random.default_rng(0)
    for _ in range(20):
        other = read_graph(np.clip(cos + rng.uniform(-1e-4, 1e-4, cos.size), -1, 1),
                           steps * rng.uniform(0.99, 1.01, steps.size), edges)
        position = int(np.flatnonzero(metric)[other.origin]) if other.origin is not None \
            else None
        assert (other.pattern, position) == verdict or other.borderline or \
            first.curve["borderline"]
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        _, second, _ = probed(tmp_path, qat, faulty, "two_threads")
    finally:
        torch.set_num_threads(threads)
    assert (second.pattern, second.origin) == verdict or second.curve["borderline"] or \
        first.curve["borderline"]


def test_truncation_is_read_from_the_range_the_dtype_can_hold(tmp_path):
    """A saturating residual add: quint8 without a zero point in the table, judged by the
    width qscale x 255, which falls short of the baseline's span."""
    from tests.probe.test_probe_real_networks import CASES
    case = CASES["residual_add_saturates"]
    _, _, qat = built(case.arch, case.backend, case.spread, case.silu)
    _, _, facts = probed(tmp_path, qat, case.fault(qat, example()), "add")
    origin, kind = facts["layer_origin"][0], facts["error_kind"][0]
    assert (origin["layer"], origin["pattern"]) == (case.layer, "cliff")
    assert (kind["dtype"], kind["range_placed"], kind["clipped"]) == ("quint8", False, True)
    assert kind["range_width"] == pytest.approx(kind["qscale"] * 255)
    assert kind["range_width"] < kind["base_max"] - kind["base_min"]
    assert kind["kind"] == "truncation"


@pytest.mark.parametrize("name", ["se_residual_clamped", "layer_needs_int16",
                                  "coarse_scale_attention", "coarse_scale_se"])
def test_the_fault_is_the_source_against_the_fused_float_model(tmp_path, name):
    """Against the float model every row carries the clean QAT model's own rounding (a
    pooled vector's quantization among it): the fault is the first source, by its own
    error."""
    args, fault, layer, kinds = SCENARIOS[name]
    _, fused, qat = built(*args)
    _, _, facts = probed(tmp_path, fused, fault(qat), "against_float")
    origin = facts["layer_origin"][0]
    assert origin["layer"] == layer, (origin["layer"], origin["pattern"], origin["fired"])
    assert origin["fired"] == "own_error"
    assert facts["error_kind"][0]["kind"] in kinds
