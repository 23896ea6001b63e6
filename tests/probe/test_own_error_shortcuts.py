"""The own error's two shortcuts (probe/own_error.py) change its cost, never its numbers:
the shadow call of a layer replays the fake-quantized weight its analysis call made, and
a plain torch.ao fake quant is applied in place by the same float32 arithmetic."""

from __future__ import annotations

import csv
import itertools

import pytest

torch = pytest.importorskip("torch")

from torch.ao.quantization import (  # noqa: E402
    FakeQuantize,
    FusedMovingAvgObsFakeQuantize,
    MovingAverageMinMaxObserver,
)

from qcdoctor.probe import compare_models, own_error  # noqa: E402
from qcdoctor.probe.own_error import fake_quant  # noqa: E402
from tests.probe.test_probe_real_networks import built, example  # noqa: E402
from tests.probe_nets import inject, one_thread  # noqa: E402,F401 - one_thread: autouse

SCHEMES = [(torch.per_tensor_symmetric, -128, 127, torch.qint8),
           (torch.per_tensor_affine, 0, 255, torch.quint8),
           (torch.per_tensor_affine, 0, 15, torch.quint8),         # 4 bits, a zero point
           (torch.per_tensor_symmetric, -32768, 32767, torch.qint32)]


@pytest.mark.parametrize("kind, scheme", itertools.product(
    (FakeQuantize, FusedMovingAvgObsFakeQuantize), SCHEMES))
def test_the_in_place_fake_quant_gives_the_modules_values(kind, scheme):
    qscheme, low, high, dtype = scheme
    quantizer = kind(observer=MovingAverageMinMaxObserver, quant_min=low, quant_max=high,
                     dtype=dtype, qscheme=qscheme)
    generator = torch.Generator().manual_seed(0)
    for shift in (0.0, 1.0, -2.5):
        quantizer.enable_observer()
        quantizer(torch.randn(4000, generator=generator) * 3 + shift)
        quantizer.disable_observer()
        quantizer.eval()
        # values on the rounding ties and past both ends of the range included
        x = torch.cat([torch.randn(5000, generator=generator) * 6,
                       (torch.arange(-40, 40) + 0.5) * quantizer.scale])
        with torch.inference_mode():
            assert torch.equal(fake_quant(quantizer, x), quantizer(x))


def test_a_quantizer_it_cannot_mirror_is_left_to_its_own_call():
    quantizer = FakeQuantize(observer=MovingAverageMinMaxObserver, quant_min=0, quant_max=255)
    quantizer(torch.randn(100))
    assert fake_quant(quantizer, torch.randn(10)) is None        # its observer still on
    quantizer.disable_observer()
    assert fake_quant(quantizer, torch.randn(10).double()) is None
    quantizer.disable_fake_quant()
    assert fake_quant(quantizer, torch.randn(10)) is None
    assert fake_quant(torch.nn.Identity(), torch.randn(10)) is None


def _own_rows(folder):
    with open(folder / "layer_own_error.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_the_shortcuts_leave_the_own_error_as_it_was_and_the_model_untouched(
        tmp_path, monkeypatch):
    """On a resnet with one faulty scale: the own-error file with the shortcuts equals the
    one with every weight quantized again and every fake quant called, and no weight
    quantizer keeps the wrapper afterwards."""
    float_model, _, qat = built("resnet18")
    faulty = inject(qat, "features.stage2.unit1.body.conv1.conv", scale_factor=0.05)
    compare_models(float_model, faulty, example(), tmp_path / "fast", sensitivity=False)
    wrapped = [name for name, module in faulty.named_modules()
               if "forward" in module.__dict__]
    assert wrapped == []
    monkeypatch.setattr(own_error, "fake_quant", lambda quantizer, x: None)
    monkeypatch.setattr(own_error._WeightMemo, "replay", lambda self, module, call: call())
    compare_models(float_model, faulty, example(), tmp_path / "plain", sensitivity=False)
    fast, plain = _own_rows(tmp_path / "fast"), _own_rows(tmp_path / "plain")
    assert len(fast) > 30 and fast == plain


class _Shared(torch.nn.Module):
    """One conv called twice: its weight quantizer runs twice in each forward."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.conv(self.relu(self.conv(x)))


def test_a_module_called_twice_replays_the_weight_of_each_call(tmp_path, monkeypatch):
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_qat_fx
    torch.manual_seed(0)
    base = _Shared().eval()
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    qat = prepare_qat_fx(_Shared().train(), get_default_qat_qconfig_mapping("qnnpack"), (x,))
    qat.load_state_dict(base.state_dict(), strict=False)
    qat(x)
    compare_models(base, qat, x, tmp_path / "fast", sensitivity=False)
    monkeypatch.setattr(own_error, "fake_quant", lambda quantizer, x: None)
    monkeypatch.setattr(own_error._WeightMemo, "replay", lambda self, module, call: call())
    compare_models(base, qat, x, tmp_path / "plain", sensitivity=False)
    fast, plain = _own_rows(tmp_path / "fast"), _own_rows(tmp_path / "plain")
    assert len(fast) >= 2 and fast == plain
