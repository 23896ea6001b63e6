"""A case made by the probe alone: its report leads with what the probe found (the layer, its
error kind, the measured fix and how much of the error it removes), before the stage it
cannot place without stage results; in every format and both languages."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from qcdoctor.engine.diagnosis.triage import triage_path  # noqa: E402
from qcdoctor.engine.reports.formats import render_output  # noqa: E402
from qcdoctor.engine.reports.terminal import render_terminal  # noqa: E402
from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_cases import triaged_case  # noqa: E402
from tests.probe_nets import eager_qat  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.pool(self.block2(self.block1(x))).flatten(1))


def models(clip: bool):
    """The float model and its QAT copy; ``clip``: block2's output range calibrated on a
    tenth of the data's range (truncation)."""
    torch.manual_seed(0)
    base = Net().eval()
    qat = eager_qat(base, size=16)
    if clip:
        observer = qat.block2[0].activation_post_process.activation_post_process
        observer.min_val.mul_(0.1)
        observer.max_val.mul_(0.1)
    return base, qat


INPUTS = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))


def test_a_probe_case_leads_with_the_layer_and_the_measured_fix(tmp_path):
    base, qat = models(clip=True)
    compare_models(base, qat, INPUTS, tmp_path / "qa_probe", try_fixes=True)
    report, facts = triaged_case(tmp_path, "accuracy drops after calibration")
    assert report["conclusion"]["stage"] == "undetermined"        # no stage results
    trials = facts["fix_trials"][0]
    assert trials["single_reaches"] and trials["single_layer"] == "block2.0"
    removed = f"{100 * trials['single_removed']:.1f}%"
    summary = render_output(report, "md").split("## Summary")[1]
    first = summary.strip().splitlines()[0]
    assert first.startswith("- **Layer located: `block2.0` (truncation), in qa_probe "
                            "(fake_quant: float.pt vs calib.pt); measured fix: a fixed scale "
                            f"on block2.0 removes {removed} of the output error")
    assert summary.index("Layer located") < summary.index("Most likely stage")
    html = render_output(report, "html")
    assert html.index("Layer located") < html.index("Most likely stage")
    terminal = render_terminal(report, color=False)
    assert terminal.index("Layer located") < terminal.index("Most likely stage")
    # the flow the fix code is written in, named with the folder
    assert "quantized by torch.ao in eager mode: the fix code uses torch.ao's API" in \
        render_output(report, "md")
    zh = triage_path(tmp_path, use_env=False, lang="zh")
    assert "已定位层：`block2.0`（截断）" in render_output(zh, "md")


def test_without_trials_the_summary_says_no_fix_was_measured(tmp_path):
    base, qat = models(clip=True)
    compare_models(base, qat, INPUTS, tmp_path / "qa_probe", sensitivity=False)
    report, _ = triaged_case(tmp_path, "accuracy drops after calibration")
    summary = render_output(report, "md").split("## Summary")[1]
    assert "Layer located: `block2.0`" in summary
    assert "no fix measured yet: qcdoctor probe --try-fixes" in summary


def test_a_clean_probe_locates_nothing(tmp_path):
    base, qat = models(clip=False)
    compare_models(base, qat, INPUTS, tmp_path / "qa_probe", sensitivity=False)
    report, _ = triaged_case(tmp_path, "accuracy drops after calibration")
    assert "Layer located" not in render_output(report, "md")


def test_a_classifier_probe_is_not_asked_about_post_processing(tmp_path):
    """The probe's table holds every op of the model: a classifier's has no selection op,
    and the report does not ask whether post-processing was inside the model."""
    from qcdoctor.engine.reports.view import view_model
    base, qat = models(clip=True)
    compare_models(base, qat, INPUTS, tmp_path / "qa_probe", sensitivity=False)
    report, facts = triaged_case(tmp_path, "accuracy drops after calibration")
    assert "layer_postprocess" not in facts and facts["layer_table"]
    assert "postprocess_in_model" not in [item["id"] for item in view_model(report)["needed"]]
