"""layer_calls.csv's data flow and quantizers (knowledge.md R5.1, R5.5): which earlier rows
each call reads, by the values themselves (keyword arguments, 70 inputs, an eager
residual block), and which quantizer object its output passes through."""

from __future__ import annotations

import csv
import json
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import eager_qat, one_thread, quantize  # noqa: E402,F401

EXAMPLE = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(5))


def _calls(tmp_path, baseline, analysis, name="p", example=EXAMPLE):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_models(baseline, analysis, example, tmp_path / name, sensitivity=False)
    with open(tmp_path / name / "layer_calls.csv", encoding="utf-8", newline="") as handle:
        lines = list(csv.DictReader(handle))
    assert [line["name"] for line in lines] == [r["mod_name"] for r in result.rows]
    return {line["name"]: line for line in lines}


def _inputs(line) -> list[str]:
    return json.loads(line["inputs"])


class SharedQuantizers(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.act = nn.ReLU6()
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        a = self.act(self.conv(x))
        return self.fc(torch.flatten(self.pool(self.conv2(a)), 1))


def test_rows_sharing_a_quantizer_object_carry_its_name(tmp_path):
    torch.manual_seed(0)
    model = SharedQuantizers().eval()
    baseline, qat = quantize(model, EXAMPLE)
    calls = _calls(tmp_path, baseline, qat)
    # torch.ao: one fake quant for the conv and the ReLU6 reading it, one for the pool
    # and flatten and their input
    shared = calls["conv"]["output_quantizer"]
    assert shared and calls["act"]["output_quantizer"] == shared
    after_conv2 = calls["conv2"]["output_quantizer"]
    assert after_conv2 and after_conv2 != shared
    assert calls["pool"]["output_quantizer"] == calls["flatten"]["output_quantizer"] == \
        after_conv2
    assert calls["fc"]["output_quantizer"] not in ("", shared, after_conv2)
    # named by the object: its first name in named_modules(), whatever node uses it
    first = {}
    for name, module in qat.named_modules():
        first.setdefault(id(module), name)
    observers = {n.args[0].name: getattr(qat, n.target) for n in qat.graph.nodes
                 if n.op == "call_module" and n.target.startswith("activation_post_process")
                 and n.args[0].op != "placeholder"}
    for node, quantizer in observers.items():
        assert calls[node]["output_quantizer"] == first[id(quantizer)], node
    assert calls["conv"]["weight_quantizer"] == "conv.weight_fake_quant"
    assert calls["act"]["weight_quantizer"] == ""
    assert _inputs(calls["act"]) == ["conv"] and _inputs(calls["fc"]) == ["flatten"]
    # eager prepare: every module its own quantizer
    eager = _calls(tmp_path, model, eager_qat(model), name="eager")
    assert eager["conv"]["output_quantizer"] == "conv.activation_post_process"
    assert eager["act"]["output_quantizer"] == "act.activation_post_process"


class KeywordsAndBranches(nn.Module):
    def __init__(self, branches: int = 70):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 1)
        self.b = nn.Conv2d(3, 4, 1)
        self.branches = nn.ModuleList(nn.Conv2d(4, 1, 1) for _ in range(branches))

    def forward(self, x):
        s = torch.add(input=self.a(x), other=self.b(x))
        return torch.cat([branch(s) for branch in self.branches], dim=1)


@pytest.mark.parametrize("traced", [True, False], ids=["fx", "eager"])
def test_keyword_arguments_and_seventy_inputs_are_all_read(tmp_path, traced):
    torch.manual_seed(0)
    model = KeywordsAndBranches().eval()
    analysis = quantize(model, EXAMPLE)[1] if traced else eager_qat(model)
    baseline = quantize(model, EXAMPLE)[0] if traced else model
    calls = _calls(tmp_path, baseline, analysis)
    assert _inputs(calls["add"]) == ["a", "b"]              # torch.add(input=a, other=b)
    branches = [f"branches.{i}" for i in range(70)]
    assert _inputs(calls["cat"]) == branches                # every input, argument order
    assert all(_inputs(calls[name]) == ["add"] for name in branches)


class Block(nn.Module):
    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.shortcut = nn.Conv2d(cin, cout, 1)
        self.skip = torch.ao.nn.quantized.FloatFunctional()
        self.relu2 = nn.ReLU()

    def forward(self, x):
        body = self.conv2(self.relu1(self.conv1(x)))
        # the shortcut runs after the body: printed between conv2 and the add
        return self.relu2(self.skip.add(body, self.shortcut(x)))


class EagerResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.block = Block(8, 16)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x):
        return self.dequant(self.block(self.stem(self.quant(x))))


def test_an_eager_residual_block_reads_its_branches_not_the_row_before(tmp_path):
    torch.manual_seed(0)
    model = EagerResNet().eval()
    qat = eager_qat(model)
    calls = _calls(tmp_path, model, qat)
    assert _inputs(calls["block.shortcut"]) == ["stem"]     # the block's input
    assert _inputs(calls["block.conv1"]) == ["stem"]
    assert _inputs(calls["stem"]) == ["quant"]
    add = next(name for name in calls if name.startswith("block.") and
               calls[name]["op_type"].endswith("add"))
    assert _inputs(calls[add]) == ["block.conv2", "block.shortcut"]
    # FloatFunctional's fake quant observes the add's output
    assert calls[add]["output_quantizer"] == "block.skip.activation_post_process"
    assert _inputs(calls["block.relu2"]) == [add]
    assert calls["quant"]["output_quantizer"] == "quant.activation_post_process"
    # each call's own error, the add's included, measured on the baseline's values
    with open(tmp_path / "p" / "layer_own_error.csv", encoding="utf-8") as handle:
        own = {line["mod_name"]: line for line in csv.DictReader(handle)}
    assert list(own) == list(calls)
    for name in ("stem", "block.conv1", "block.shortcut", add):
        assert own[name]["own_status"] == "measured" and float(own[name]["own_cosine"]) > 0.99


class Detector(nn.Module):
    """Scores, then post-processing inside the model: argmax, topk and a gather of the
    scores at the top indices, a view in between that has no row of its own."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.fc = nn.Linear(4 * 8 * 8, 10)

    def forward(self, x):
        scores = self.fc(self.conv(x).view(x.shape[0], -1))
        best = scores.argmax(1)
        _, top = scores.topk(3, dim=1)
        return best, torch.gather(scores, 1, top)


@pytest.mark.parametrize("traced", [True, False], ids=["fx", "eager"])
def test_selection_ops_are_rows_and_what_reads_their_indices(tmp_path, traced):
    torch.manual_seed(0)
    model = Detector().eval()
    baseline, analysis = quantize(model, EXAMPLE) if traced else (model, eager_qat(model))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_models(baseline, analysis, EXAMPLE, tmp_path / "d", sensitivity=False)
    rows = {r["mod_name"]: r for r in result.rows}
    calls = _calls(tmp_path, baseline, analysis, name="d2")
    assert calls["argmax"]["op_type"].endswith("argmax") and \
        calls["topk[1]"]["op_type"].endswith("topk")
    assert calls["gather"]["op_type"].endswith("gather")
    assert _inputs(calls["argmax"]) == ["fc"]
    assert _inputs(calls["gather"]) == ["fc", "topk[1]"]   # the indices: topk's second output
    if "view" in calls:                     # a row where the analysis model quantizes it
        assert _inputs(calls["view"]) == ["conv"] and _inputs(calls["fc"]) == ["view"]
    else:                                   # else looked through
        assert _inputs(calls["fc"]) == ["conv"]
    assert "view" in calls if traced else "view" not in calls
    # integer outputs: rows without metrics
    assert rows["argmax"].get("cosine") is None and rows["topk[1]"].get("cosine") is None
    assert rows["gather"]["cosine"] is not None
