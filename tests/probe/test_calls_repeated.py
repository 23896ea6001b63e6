"""A module called several times gives one row per call (``pool``, ``pool(1)``), each with
its own inputs in layer_calls.csv and its own error measured on the baseline's inputs of
that call (knowledge.md R5.1, R5.2), in traced and eager models alike."""

from __future__ import annotations

import csv
import json
import warnings

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from qcdoctor.probe import compare_models  # noqa: E402
from tests.probe_nets import eager_qat, inject, one_thread, quantize  # noqa: E402,F401

EXAMPLE = torch.randn(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))


class TwoLevels(nn.Module):
    """An encoder whose one MaxPool2d serves two levels, and a head shared by both."""

    def __init__(self):
        super().__init__()
        self.enc1 = nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.enc2 = nn.Conv2d(8, 8, 3, padding=1)
        self.act2 = nn.ReLU()
        self.head = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        level1 = self.pool(self.act1(self.enc1(x)))
        level2 = self.pool(self.act2(self.enc2(level1)))
        return self.head(level1), self.head(level2)


def _probe(tmp_path, baseline, analysis, name="p"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_models(baseline, analysis, EXAMPLE, tmp_path / name, sensitivity=False)
    return result, tmp_path / name


def _lines(folder, file):
    with open(folder / file, encoding="utf-8", newline="") as handle:
        return {line["name" if "name" in line else "mod_name"]: line
                for line in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def traced():
    torch.manual_seed(0)
    return quantize(TwoLevels().eval(), EXAMPLE)


def test_each_call_is_a_row_with_its_own_inputs(tmp_path, traced):
    baseline, qat = traced
    result, out = _probe(tmp_path, baseline, qat)
    names = [r["mod_name"] for r in result.rows]
    assert [n for n in names if n.startswith(("pool", "head"))] == \
        ["pool", "pool(1)", "head", "head(1)"]
    calls = _lines(out, "layer_calls.csv")
    assert list(calls) == names                         # one line per row, table order
    assert (calls["pool(1)"]["module"], calls["pool(1)"]["call"]) == ("pool", "1")
    # (conv and ReLU fused into one module by the traced preparation)
    assert json.loads(calls["pool"]["inputs"]) == ["enc1"]
    assert json.loads(calls["pool(1)"]["inputs"]) == ["enc2"]
    assert json.loads(calls["head"]["inputs"]) == ["pool"]
    assert json.loads(calls["head(1)"]["inputs"]) == ["pool(1)"]
    # each call compared with the baseline's output of the same call
    rows = {r["mod_name"]: r for r in result.rows}
    assert rows["pool(1)"]["base_mod_name"] == "" and rows["pool(1)"]["cosine"] > 0.99
    own = _lines(out, "layer_own_error.csv")
    assert list(own) == names and all(line["own_status"] == "measured" for line in own.values())
    # the fx_graph.txt row names carry the call too
    graph = (out / "fx_graph.txt").read_text(encoding="utf-8").splitlines()
    assert any(line.startswith("call_module") and line.rstrip().endswith(" pool(1)")
               for line in graph)


@pytest.mark.parametrize("faulty_node, repeated", [("enc2", "pool(1)"), ("pool_1", "head(1)")])
def test_a_later_call_is_measured_on_the_baseline_inputs_of_that_call(tmp_path, traced,
                                                                      faulty_node, repeated):
    """A fault planted upstream of the second call: that call's table Cosine is low (it
    reads the damaged values), its own Cosine is ~1 (measured on the baseline's inputs of
    that call), and the first call, upstream of the fault, is clean in both."""
    baseline, qat = traced
    node = next(n for n in qat.graph.nodes if n.name == faulty_node)
    faulty = inject(qat, node, scale_factor=0.05)
    result, out = _probe(tmp_path, baseline, faulty)
    rows = {r["mod_name"]: r for r in result.rows}
    own = _lines(out, "layer_own_error.csv")
    assert rows[repeated]["cosine"] < 0.99
    assert float(own[repeated]["own_cosine"]) > 0.999
    first = repeated.split("(")[0]
    assert rows[first]["cosine"] > 0.999 and float(own[first]["own_cosine"]) > 0.999
    # a different own error for each call: not the first call's line repeated
    assert own[repeated]["own_atol"] != own[first]["own_atol"]


def test_eager_calls_and_their_inputs(tmp_path):
    torch.manual_seed(0)
    model = TwoLevels().eval()
    qat = eager_qat(model)
    example = EXAMPLE
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = compare_models(model, qat, example, tmp_path / "e", sensitivity=False)
    names = [r["mod_name"] for r in result.rows]
    assert [n for n in names if n.startswith(("pool", "head"))] == \
        ["pool", "pool(1)", "head", "head(1)"]
    calls = _lines(tmp_path / "e", "layer_calls.csv")
    assert list(calls) == names
    assert json.loads(calls["pool(1)"]["inputs"]) == ["act2"]
    assert json.loads(calls["head(1)"]["inputs"]) == ["pool(1)"]
    assert calls["head(1)"]["call"] == "1"
    # eager prepare: each layer its own fake quant, shared by the calls of one module
    assert calls["head"]["output_quantizer"] == calls["head(1)"]["output_quantizer"] == \
        "head.activation_post_process"
    assert calls["head"]["weight_quantizer"] == "head.weight_fake_quant"


def test_an_eager_later_call_is_measured_on_the_baseline_inputs_of_that_call(tmp_path):
    """The same in an eager model: a fault in enc2's fake quant; the pool's second call
    reads the damaged values (low table Cosine), its own error is measured on the
    baseline's values of that call (~1), each call its own line."""
    from tests.probe_nets import fixed_quantizer
    torch.manual_seed(0)
    model = TwoLevels().eval()
    qat = eager_qat(model)
    qat.enc2.activation_post_process = fixed_quantizer(qat.enc2.activation_post_process,
                                                       scale_factor=0.05)
    result, out = _probe(tmp_path, model, qat, name="e")
    rows = {r["mod_name"]: r for r in result.rows}
    own = _lines(out, "layer_own_error.csv")
    assert list(own) == [r["mod_name"] for r in result.rows]
    assert rows["pool(1)"]["cosine"] < 0.99 and rows["head(1)"]["cosine"] < 0.99
    for name in ("act2", "pool(1)", "head(1)"):         # downstream of the fault: clean
        assert float(own[name]["own_cosine"]) > 0.999, name
    assert float(own["enc2"]["own_cosine"]) < 0.99      # the fault is its own
    assert float(own["pool"]["own_cosine"]) > 0.999 and rows["pool"]["cosine"] > 0.999
