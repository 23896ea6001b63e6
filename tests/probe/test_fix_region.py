"""Fix trials measured before post-processing (knowledge.md §18 R5.4): where the analysed
model holds a selection op (topk, argmax) and what reads its indices (gather), the trials
and the 16-bit search measure the tensors entering that region, not the model's final
outputs (boxes picked by a topk move with any change before it). torch.ao FX QAT models
built here, one planted fault each; each case triaged from its files and rendered in every
format and both languages."""

from __future__ import annotations

import copy
import warnings

import pytest

torch = pytest.importorskip("torch")
yaml = pytest.importorskip("yaml")

from torch import nn  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from qcdoctor.probe.postprocess_entries import EntryTaps  # noqa: E402
from qcdoctor.probe.quantizers import TorchAoAdapter  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    eager_qat,
    fixed_quantizer,
    inject,
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    settle_batchnorm,
)

SIZE = 16


def example() -> torch.Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(2))


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU())


class Detector(nn.Module):
    """A stem, a neck conv, a score head and a box head; inside the model the 10 best
    scores by topk and their boxes by gather."""

    def __init__(self):
        super().__init__()
        self.stem, self.neck = _block(3, 8), _block(8, 8)
        self.score, self.box = nn.Conv2d(8, 1, 1), nn.Conv2d(8, 4, 1)

    def forward(self, x):
        f = self.neck(self.stem(x))
        scores, boxes = self.score(f).flatten(1), self.box(f).flatten(2)
        top = torch.topk(scores, 10, dim=1)
        return torch.gather(boxes, 2, top.indices.unsqueeze(1).repeat(1, 4, 1)), top.values


class Classifier(nn.Module):
    """conv-bn-relu, pooling, fc, then the class picked by argmax inside the model."""

    def __init__(self):
        super().__init__()
        self.body = _block(3, 8)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return torch.argmax(self.fc(self.pool(self.body(x)).flatten(1)), dim=1)


def quantized(model: nn.Module):
    """(fused float model, calibrated FX QAT model): the default QAT qconfig, the index ops
    left unquantized (a fake quant cannot take integer indices), observers frozen."""
    from torch.ao.quantization import (
        disable_observer,
        enable_observer,
        get_default_qat_qconfig_mapping,
    )
    from torch.ao.quantization.quantize_fx import fuse_fx, prepare_qat_fx
    torch.manual_seed(0)
    settle_batchnorm(model, SIZE)
    mapping = get_default_qat_qconfig_mapping("qnnpack")
    for op in (torch.topk, torch.gather, torch.argmax, "unsqueeze", "repeat"):
        mapping.set_object_type(op, None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        qat = prepare_qat_fx(copy.deepcopy(model).train(), mapping, (example(),))
        baseline = fuse_fx(copy.deepcopy(model).eval())
    qat.eval()
    qat.apply(enable_observer)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(2):
            qat(torch.randn(16, 3, SIZE, SIZE, generator=generator))
    qat.apply(disable_observer)
    return baseline, qat


def probed(tmp_path, baseline, analysis) -> tuple[object, dict, dict]:
    """(the probe's result, the English report, facts by type) with try_fixes, the case
    rendered in every format and both languages."""
    case = tmp_path / "case"
    result = compare_models(baseline, analysis, example(), case / "qa_probe",
                            sensitivity=False, try_fixes=True, fix_budget=80)
    report, facts = triaged_case(case, "accuracy drops after calibration")
    return result, report, facts


def single(document: dict, layer: str) -> dict:
    """The best deployable one-layer trial at ``layer``."""
    return next(t for t in document["trials"]
                if t["layers"] == [layer] and t["fix"] != "float")


def test_a_detector_is_measured_on_what_enters_its_topk_and_gather(tmp_path):
    baseline, qat = quantized(Detector())
    faulty = inject(qat, "neck.0", scale_factor=0.01)   # the neck conv's range 100x too small
    result, report, facts = probed(tmp_path, baseline, faulty)
    document = result.fix_trials
    before = document["before_postprocess"]
    assert before is not None and before["region_rows"] >= 2, before
    assert document["output"] in before["entries"] and "neck.0" not in before["entries"]
    assert set(before["entries"]) <= {"score", "box"}
    best = single(document, "neck.0")
    assert best["error_removed"] >= 0.99, document["trials"][:3]
    assert document["trials"][0]["layers"] == ["neck.0"]
    assert any(n.startswith("before_postprocess:") for n in document["notes"])
    written = yaml.safe_load((result.out_dir / "fix_trials.yaml").read_text("utf-8"))
    assert written["before_postprocess"] == before
    # triage reads it back: the summary fact, the finding, the measured remedy
    summary = facts["fix_trials"][0]
    assert summary["before_postprocess"] and summary["single_reaches"], summary
    assert summary["single_layer"] == "neck.0"
    finding = next(f for f in report["findings"] if f["rule"] == "FX040")
    assert "before it" in finding["text"] and document["output"] in finding["text"]


def test_a_classifier_is_measured_on_the_logits_entering_its_argmax(tmp_path):
    baseline, qat = quantized(Classifier())
    faulty = inject(qat, "fc", scale_factor=0.05)
    result, report, facts = probed(tmp_path, baseline, faulty)
    document = result.fix_trials
    assert document["before_postprocess"]["entries"] == ["fc"], document["before_postprocess"]
    assert document["output"] == "fc"
    assert single(document, "fc")["error_removed"] >= 0.9, document["trials"][:3]
    assert "FX040" in [f["rule"] for f in report["findings"]]


def test_a_model_without_post_processing_is_measured_on_its_outputs(tmp_path):
    class Plain(nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.fc = _block(3, 8), nn.Linear(8, 10)

        def forward(self, x):
            return self.fc(self.body(x).mean((2, 3)))
    baseline, qat = quantized(Plain())
    result, report, facts = probed(tmp_path, baseline, inject(qat, "fc", scale_factor=0.05))
    assert "before_postprocess" not in result.fix_trials
    assert not facts["fix_trials"][0]["before_postprocess"]
    assert "FX040" not in [f["rule"] for f in report["findings"]]


def test_the_taps_change_nothing_and_follow_a_swapped_quantizer():
    """The entering tensor as the comparison's row holds it (after its output fake quant),
    and, once another quantizer is put in its place, the new one's output."""
    _, qat = quantized(Classifier())
    x = example()
    taps = EntryTaps(qat, ["fc"])
    observer = next(n.target for n in qat.graph.nodes if n.op == "call_module"
                    and n.args and getattr(n.args[0], "target", None) == "fc")
    seen = []
    hook = qat.get_submodule(observer).register_forward_hook(
        lambda module, inputs, output: seen.append(output))
    with torch.inference_mode():
        value = taps.run(qat, (x,), {})[0]
        qat(x)
    hook.remove()
    expected = seen[-1]
    assert len(seen) == 2 and torch.equal(value, expected) and torch.equal(seen[0], seen[1])
    # the same taps, once a quantizer of half the scale is swapped in (as a fix trial does)
    adapter = TorchAoAdapter()
    previous = adapter.swap(qat, observer,
                            fixed_quantizer(qat.get_submodule(observer), scale_factor=0.5))
    try:
        with torch.inference_mode():
            swapped = taps.run(qat, (x,), {})[0]
    finally:
        adapter.swap(qat, observer, previous)
    assert not torch.equal(swapped, value)
    with torch.inference_mode():
        assert torch.equal(taps.run(qat, (x,), {})[0], value)
    with pytest.raises(LookupError, match="no_such_layer"):
        EntryTaps(qat, ["no_such_layer"])


def test_an_eager_detector_is_measured_through_hooks_on_its_heads(tmp_path):
    """An eager-mode QAT detector (no graph): the entering tensors come from forward hooks
    on the score and box heads, each after its output fake quant."""
    torch.manual_seed(0)
    model = Detector()
    settle_batchnorm(model, SIZE)
    qat = eager_qat(model.eval())
    faulty = copy.deepcopy(qat)
    neck = faulty.get_submodule("neck.0")
    neck.activation_post_process = fixed_quantizer(neck.activation_post_process,
                                                   scale_factor=0.01)
    result, report, facts = probed(tmp_path, model, faulty)
    document = result.fix_trials
    assert document["before_postprocess"]["entries"] == ["score", "box"]
    assert single(document, "neck.0")["error_removed"] >= 0.99, document["trials"][:3]
    assert "FX040" in [f["rule"] for f in report["findings"]]


@pytest.mark.parametrize("value, key", [
    ({"entries": [], "region_rows": 2}, "before_postprocess.entries"),
    ({"entries": ["score"], "region_rows": -1}, "before_postprocess.region_rows"),
    ({"entries": ["score"]}, "before_postprocess.region_rows"),
    ("score", "before_postprocess"),
])
def test_a_malformed_before_postprocess_is_refused_naming_its_key(value, key):
    from qcdoctor.collectors.fix_trials import read_fix_trials
    document = {"schema": "qcdoctor/fix-trials-v1", "metric": "Cosine", "output": "score",
                "before": 0.5, "target": {"error_removed": 0.9}, "budget": 10, "forwards": 2,
                "candidates": [], "trials": [], "greedy": None, "notes": [], "caveats": [],
                "before_postprocess": value}
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        read_fix_trials(document)
    document["before_postprocess"] = {"entries": ["score", "box"], "region_rows": 3}
    assert read_fix_trials(document)["before_postprocess"]["entries"] == ["score", "box"]
