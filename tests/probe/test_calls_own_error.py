"""Each call's own error is measured on the baseline's inputs of that call, or left
unmeasured with its reason (past the memory budget: never on the analysis model's
values); the weight error is the analysis model's own weight quantization, on the
layer's own output-channel axis; the files do not depend on the thread count."""

from __future__ import annotations

import copy
import csv
import os
import subprocess
import sys
import warnings

import pytest
import yaml

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from qcdoctor.probe import capture, compare_models  # noqa: E402
from qcdoctor.probe.own_error import weight_error  # noqa: E402
from tests.probe_nets import inject, one_thread, quantize  # noqa: E402,F401

EXAMPLE = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(7))


class Chain(nn.Module):
    def __init__(self, depth: int = 6):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 8, 8, 3, padding=1)
                                   for i in range(depth))
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return self.pool(x)


def _probe(folder, baseline, analysis, example=EXAMPLE):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_models(baseline, analysis, example, folder, sensitivity=False)
    with open(folder / "layer_own_error.csv", encoding="utf-8", newline="") as handle:
        own = {line["mod_name"]: line for line in csv.DictReader(handle)}
    return result, own


@pytest.fixture(scope="module")
def chain():
    torch.manual_seed(0)
    baseline, qat = quantize(Chain().eval(), EXAMPLE)
    # a fault early on: every row after it reads damaged values in the analysis model
    return baseline, inject(qat, "convs.1", scale_factor=0.1)


def _eager_chain():
    from tests.probe_nets import eager_qat, fixed_quantizer
    torch.manual_seed(0)
    model = Chain().eval()
    qat = eager_qat(model)
    qat.convs[1].activation_post_process = fixed_quantizer(
        qat.convs[1].activation_post_process, scale_factor=0.1)
    return model, qat


@pytest.mark.parametrize("traced", [True, False], ids=["fx", "eager"])
def test_past_the_memory_budget_rows_are_left_unmeasured_and_said(tmp_path, chain,
                                                                  monkeypatch, traced):
    baseline, faulty = chain if traced else _eager_chain()
    result, full = _probe(tmp_path / "full", baseline, faulty)
    assert all(line["own_status"] == "measured" for line in full.values())
    # room for the baseline's first outputs only (the input, two convs)
    one = EXAMPLE.numel() * 4
    monkeypatch.setattr(capture, "ram_budget", lambda: one + 2 * (one // 3 * 8) + 16)
    result, own = _probe(tmp_path / "small", baseline, faulty)
    assert list(own) == [r["mod_name"] for r in result.rows]       # one line per row
    measured = [name for name, line in own.items() if line["own_status"] == "measured"]
    skipped = [name for name, line in own.items() if line["own_status"] == "no_baseline_inputs"]
    assert measured and skipped and len(measured) + len(skipped) == len(own)
    rows = list(own)
    assert rows.index(skipped[0]) > rows.index(measured[-1])       # the later rows
    for name in skipped:                                           # no numbers at all
        assert all(own[name][c] == "" for c in ("own_cosine", "own_atol", "own_qsteps",
                                                "weight_sqnr_db"))
    for name in measured:                  # the same numbers as with every input at hand
        assert own[name]["own_cosine"] == full[name]["own_cosine"]
    # rows downstream of the fault are clean on the baseline's inputs (never measured on
    # the analysis model's, which would repeat their table Cosine)
    table = {r["mod_name"]: r for r in result.rows}
    later = [n for n in full if n.startswith("convs.") and n not in ("convs.0", "convs.1")]
    assert table["convs.2"]["cosine"] < 0.99
    assert later and all(table[n]["cosine"] < float(full[n]["own_cosine"]) and
                         float(full[n]["own_cosine"]) > 0.999 for n in later)
    manifest = yaml.safe_load((tmp_path / "small" / "probe_run.yaml").read_text("utf-8"))
    assert manifest["own_error"] == {"measured": len(measured),
                                     "not_measured": {"no_baseline_inputs": len(skipped)}}
    said = [w for w in result.warnings if "no_baseline_inputs" in w]
    assert len(said) == 1 and said[0].startswith(f"{len(skipped)} row(s)")
    assert skipped[0] in said[0] and "memory budget" in said[0]


def test_a_transposed_conv_weight_is_measured_on_its_output_channels():
    """Output channels are axis 1 of a ConvTranspose weight: one output channel 1000x
    smaller than the others under a per-tensor scale is the worst channel (its values
    round to zero); measured along axis 0 every row would hold the large channels."""
    from torch.ao.quantization import FakeQuantize, MovingAverageMinMaxObserver
    layer = nn.ConvTranspose2d(6, 4, 3)
    with torch.no_grad():
        layer.weight[:, 1] *= 1e-3
    layer.weight_fake_quant = FakeQuantize(observer=MovingAverageMinMaxObserver,
                                           quant_min=-128, quant_max=127, dtype=torch.qint8,
                                           qscheme=torch.per_tensor_symmetric)
    layer.weight_fake_quant(layer.weight.detach())        # calibrated on the weight
    layer.weight_fake_quant.disable_observer()
    found = weight_error(layer)
    assert found["weight_scheme"] == "per_tensor"
    assert found["weight_sqnr_db"] < 5                      # the tiny channel, rounded away
    assert found["weight_channel_ratio"] > 300              # the spread of output channels


def test_float_against_trained_qat_reads_the_analysis_models_own_weight_error(tmp_path):
    """After training, the QAT model's weights differ from the float model's: the weight
    error is still its own weight's quantization (per channel: high), not the distance
    between the two models' weights."""
    torch.manual_seed(0)
    model = Chain(depth=3).eval()
    baseline, qat = quantize(model, EXAMPLE, backend="fbgemm")     # per-channel weights
    trained = copy.deepcopy(qat)
    with torch.no_grad():
        for name, parameter in trained.named_parameters():
            if name.endswith("weight"):
                parameter.add_(0.2 * parameter.abs().mean() * torch.randn_like(parameter))
    _, own = _probe(tmp_path / "p", baseline, trained)
    convs = [name for name in own if name.startswith("convs.") and own[name]["weight_sqnr_db"]]
    assert convs
    for name in convs:
        module = trained.get_submodule(name)
        assert float(own[name]["weight_sqnr_db"]) == pytest.approx(
            weight_error(module)["weight_sqnr_db"], abs=1e-3)
        assert own[name]["weight_scheme"] == "per_channel"
        # the two models' weights are some 15 dB apart (the worst channel): not that
        moved = module.weight.detach().flatten(1)
        before = qat.get_submodule(name).weight.detach().flatten(1)
        apart = 10 * torch.log10(before.pow(2).sum(1) / (moved - before).pow(2).sum(1)).min()
        assert float(apart) < 18 < float(own[name]["weight_sqnr_db"])


_THREADS = """
import sys, warnings, torch
sys.path.insert(0, {root!r})
torch.set_num_threads(int(sys.argv[1]))
from tests.probe.test_calls_own_error import EXAMPLE, Chain
from tests.probe_nets import inject, quantize
from qcdoctor.probe import compare_models
torch.manual_seed(0)
baseline, qat = quantize(Chain().eval(), EXAMPLE)
faulty = inject(qat, "convs.1", scale_factor=0.1)
from tests.probe.test_calls_own_error import _eager_chain
model, eager = _eager_chain()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    compare_models(baseline, faulty, EXAMPLE, sys.argv[2] + "/fx", sensitivity=False)
    compare_models(model, eager, EXAMPLE, sys.argv[2] + "/eager", sensitivity=False)
"""


def test_the_files_are_the_same_with_one_and_two_threads(tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    script = tmp_path / "run.py"
    script.write_text(_THREADS.format(root=root), encoding="utf-8")
    texts, kernel = [], []
    for threads in (1, 2):
        out = tmp_path / f"t{threads}"
        subprocess.run([sys.executable, str(script), str(threads), str(out)], check=True,
                       timeout=300)
        texts.append([(out / kind / name).read_text(encoding="utf-8") for kind in ("fx", "eager")
                      for name in ("layer_calls.csv", "layer_own_error.csv")])
        manifest = yaml.safe_load((out / "fx" / "probe_run.yaml").read_text("utf-8"))
        kernel.append(manifest["row_statistics"] == "c_kernel")
    calls = [[text for i, text in enumerate(run) if i % 2 == 0] for run in texts]
    assert calls[0] == calls[1]                 # the data flow: the same text
    if all(kernel):                             # the C kernel's sums: the same digits
        assert texts[0] == texts[1]
        return
    # torch's float32 reductions: equal to their rounding, the same statuses
    for one, two in zip(texts[0][1::2], texts[1][1::2], strict=True):
        rows = [list(csv.reader(text.splitlines())) for text in (one, two)]
        assert len(rows[0]) == len(rows[1])
        for a, b in zip(*rows, strict=True):
            assert a[0] == b[0] and a[-1] == b[-1]
            for x, y in zip(a[1:4], b[1:4], strict=True):
                assert (x == y == "") or float(x) == pytest.approx(float(y), rel=1e-5,
                                                                  abs=1e-6)
