"""The probe's shortcuts change its cost, never its numbers: the shadow call of a layer
replays the fake-quantized weight its analysis call made (probe/own_error.py), a frozen
plain torch.ao fake quant is computed in place by the same float32 arithmetic
(probe/fast_quant.py, whose values tests/probe/test_fast_quant.py checks one by one), and
a layer's own quantized output is measured by the fused kernel without being stored."""

from __future__ import annotations

import csv

import pytest

torch = pytest.importorskip("torch")

from qcdoctor.probe import compare_models, fast_quant, fused, own_error  # noqa: E402
from tests.probe.test_probe_real_networks import built, example  # noqa: E402
from tests.probe_nets import inject, one_thread  # noqa: E402,F401 - one_thread: autouse


def _own_rows(folder):
    with open(folder / "layer_own_error.csv", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def _without_shortcuts(monkeypatch):
    monkeypatch.setattr(own_error, "fake_quant", lambda quantizer, x: None)
    monkeypatch.setattr(own_error.WeightMemo, "replay", lambda self, module, call: call())
    monkeypatch.setattr(fast_quant, "ENABLED", False)


def test_the_shortcuts_leave_the_tables_as_they_were_and_the_model_untouched(
        tmp_path, monkeypatch):
    """On a resnet with one faulty scale: the own-error file and the per-layer tables with
    the shortcuts equal the ones with every weight quantized again and every fake quant
    run by torch's kernel, and no quantizer keeps a forward of the probe's afterwards."""
    float_model, _, qat = built("resnet18")
    faulty = inject(qat, "features.stage2.unit1.body.conv1.conv", scale_factor=0.05)
    compare_models(float_model, faulty, example(), tmp_path / "fast", sensitivity=False)
    wrapped = [name for name, module in faulty.named_modules()
               if "forward" in module.__dict__]
    assert wrapped == []
    _without_shortcuts(monkeypatch)
    compare_models(float_model, faulty, example(), tmp_path / "plain", sensitivity=False)
    fast, plain = _own_rows(tmp_path / "fast"), _own_rows(tmp_path / "plain")
    assert len(fast) > 30 and fast == plain
    table = "compare_per_layer_out.csv"
    assert (tmp_path / "fast" / table).read_text(encoding="utf-8") == \
        (tmp_path / "plain" / table).read_text(encoding="utf-8")


class _Shared(torch.nn.Module):
    """One conv called twice: its weight quantizer runs twice in each forward."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        return self.conv(self.relu(self.conv(x)))


def _shared_models():
    """(float model, its FX QAT copy with the same weights, an input) of _Shared."""
    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_qat_fx
    torch.manual_seed(0)
    base = _Shared().eval()
    x = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    qat = prepare_qat_fx(_Shared().train(), get_default_qat_qconfig_mapping("qnnpack"), (x,))
    qat.load_state_dict(base.state_dict(), strict=False)
    qat(x)
    return base, qat, x


def test_a_module_called_twice_replays_the_weight_of_each_call(tmp_path, monkeypatch):
    base, qat, x = _shared_models()
    compare_models(base, qat, x, tmp_path / "fast", sensitivity=False)
    _without_shortcuts(monkeypatch)
    compare_models(base, qat, x, tmp_path / "plain", sensitivity=False)
    fast, plain = _own_rows(tmp_path / "fast"), _own_rows(tmp_path / "plain")
    assert len(fast) >= 2 and fast == plain


def test_a_weight_quantizers_own_instance_forward_is_replayed_and_put_back(tmp_path,
                                                                           monkeypatch):
    """A forward the user set on a weight quantizer is the one the replay wraps: the
    own error is as without shortcuts, and that very forward is there afterwards."""
    base, qat, x = _shared_models()
    quantizer = qat.conv.weight_fake_quant
    calls = []

    def users(weight):
        calls.append(weight.shape)
        return type(quantizer).forward(quantizer, weight)
    quantizer.forward = users
    compare_models(base, qat, x, tmp_path / "fast", sensitivity=False)
    assert quantizer.__dict__["forward"] is users and calls
    _without_shortcuts(monkeypatch)
    compare_models(base, qat, x, tmp_path / "plain", sensitivity=False)
    fast, plain = _own_rows(tmp_path / "fast"), _own_rows(tmp_path / "plain")
    assert len(fast) >= 2 and fast == plain


def test_own_quantized_outputs_are_measured_unstored_and_read_the_same(tmp_path,
                                                                        monkeypatch):
    """On the faulty resnet every per-tensor output quantizer's own error comes from the
    fused kernel's measure (no quantized tensor made); with the kernel off, torch makes
    and measures each one: the same numbers to float32 rounding, the same rows."""
    float_model, _, qat = built("resnet18")
    faulty = inject(qat, "features.stage2.unit1.body.conv1.conv", scale_factor=0.05)
    measured = []
    real = fused.fake_quant_pair

    def counted(*args):
        measured.append(args[1].shape)
        return real(*args)
    monkeypatch.setattr(fused, "fake_quant_pair", counted)
    compare_models(float_model, faulty, example(), tmp_path / "fused", sensitivity=False)
    monkeypatch.setattr(fused, "ENABLED", False)
    compare_models(float_model, faulty, example(), tmp_path / "torch", sensitivity=False)
    with_kernel, without = _own_rows(tmp_path / "fused"), _own_rows(tmp_path / "torch")
    assert len(measured) > 30
    assert [r["mod_name"] for r in with_kernel] == [r["mod_name"] for r in without]
    for got, want in zip(with_kernel, without, strict=True):
        assert 1 - float(got["own_cosine"]) == pytest.approx(1 - float(want["own_cosine"]),
                                                             rel=1e-3, abs=1e-9)
        assert float(got["own_atol"]) == pytest.approx(float(want["own_atol"]), rel=1e-6)
