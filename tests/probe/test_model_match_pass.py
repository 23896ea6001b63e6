"""The models-match pass (probe/model_match.py, knowledge.md R5.3) runs the analysis model
with every fake quant off without writing a quantizer's switch: a switch written moves
its version, and the next probe of the same model would read every quantizer's numbers
again (probe/fast_quant.py's plans) and call torch's kernel for each. Its result is the
same whichever way the quantizers are found (torch.ao's FakeQuantizeBase modules, or an
adapter's own list)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402
from torch.ao.quantization import FakeQuantizeBase  # noqa: E402

from qcdoctor.probe import compare_models, fast_quant  # noqa: E402
from qcdoctor.probe.quantizers import TorchAoAdapter  # noqa: E402
from tests.probe_nets import (  # noqa: E402
    one_thread,  # noqa: F401 - an autouse fixture: one torch thread here
    quantize,
    settle_batchnorm,
)

SIZE = 16


def example() -> torch.Tensor:
    return torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(3))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.Conv2d(8, 8, 3, padding=1), nn.Sigmoid())
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(self.body(x).mean((2, 3)))


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    model = Net()
    settle_batchnorm(model, SIZE)
    return quantize(model.eval(), example())


class ListingAdapter(TorchAoAdapter):
    """torch.ao's switches, its own list of quantizers: the pass switches them through it."""

    def quantizers(self, model):
        return super().quantizers(model)


def switch_versions(model: nn.Module) -> list[int]:
    return [module._buffers[name]._version for module in model.modules()
            if isinstance(module, FakeQuantizeBase)
            for name in ("fake_quant_enabled", "observer_enabled")]


def test_a_rerun_reads_no_quantizer_again(tmp_path, models, monkeypatch):
    baseline, qat = models
    compare_models(baseline, qat, example(), tmp_path / "p", sensitivity=False)
    before = switch_versions(qat)
    read = []
    original = fast_quant._read_plan
    monkeypatch.setattr(fast_quant, "_read_plan", lambda q: read.append(q) or original(q))
    result = compare_models(baseline, qat, example(), tmp_path / "p", sensitivity=False)
    assert result.models_match is not None and result.models_match["match"]
    assert switch_versions(qat) == before       # no switch written, not even put back
    assert read == []                           # every plan still the one read before
    assert all("forward" not in m.__dict__ for m in qat.modules()
               if isinstance(m, FakeQuantizeBase))


def test_the_same_result_through_an_adapters_own_list(tmp_path, models):
    baseline, qat = models
    # the baseline's weights moved for the pass: a difference beyond quantization to compare
    shifted = baseline
    with torch.no_grad():
        saved = [p.clone() for p in shifted.parameters()]
        for p in shifted.parameters():
            p.mul_(1.01)
    try:
        plain = compare_models(shifted, qat, example(), tmp_path / "a", sensitivity=False)
        listed = compare_models(shifted, qat, example(), tmp_path / "b", sensitivity=False,
                                adapter=ListingAdapter())
    finally:
        with torch.no_grad():
            for p, value in zip(shifted.parameters(), saved, strict=True):
                p.copy_(value)
    assert plain.models_match == listed.models_match
    assert plain.models_match["fake_quant_off_max_abs"] > 0
    assert not plain.models_match["match"]
    assert [m for m in qat.modules() if isinstance(m, FakeQuantizeBase)
            and not bool(m.fake_quant_enabled[0])] == []    # every switch put back on


def test_a_quantizer_switched_off_by_the_user_stays_off(tmp_path, models):
    baseline, qat = models
    off = next(m for m in qat.modules() if isinstance(m, FakeQuantizeBase))
    off.disable_fake_quant()
    try:
        for adapter in (None, ListingAdapter()):
            result = compare_models(baseline, qat, example(), tmp_path / str(adapter),
                                    sensitivity=False, adapter=adapter)
            assert result.models_match is not None
            assert not bool(off.fake_quant_enabled[0])
    finally:
        off.enable_fake_quant()


class WritesItsInput(nn.Module):
    """A forward that writes into its input (x += 1) before its layers."""

    def __init__(self, body: nn.Module):
        super().__init__()
        self.body = body

    def forward(self, x):
        x.add_(1.0)
        return self.body(x)


def test_the_pass_runs_on_copies_of_the_inputs(tmp_path, models):
    """The pass runs before the layer runs: a model that writes into its inputs writes
    into copies there, so the layer runs get the inputs they were given and the caller's
    inputs are written by the analysis run alone, as without the pass. The write is
    itself a difference beyond quantization (the analysis model computes qat(x + 1)):
    read from the given inputs, not from ones the pass had written."""
    baseline, qat = models
    given = example()
    inputs = given.clone()
    result = compare_models(baseline, WritesItsInput(qat), inputs, tmp_path / "w",
                            sensitivity=False)
    assert torch.equal(inputs, given + 1.0)             # one write: the analysis run's
    assert not result.models_match["match"]
