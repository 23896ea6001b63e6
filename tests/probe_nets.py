"""Real architectures from the pytorchcv model zoo (random weights, fixed seed, no
downloads), quantized with torch's own FX QAT tooling, and the faults the probe tests
inject into them."""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn
from torch.ao.quantization import FakeQuantizeBase


class FixedFakeQuantize(FakeQuantizeBase):
    """Fake quantization with fixed qparams (a far too small scale, or a 4-bit range).

    Overwriting the scale buffer of the default FusedMovingAvgObsFakeQuantize has no
    effect on its output (it recomputes qparams), hence a module of its own; being a
    FakeQuantizeBase, the sensitivity pass switches it like any torch.ao fake quant."""

    def __init__(self, scale: float, zero_point: int, quant_min: int, quant_max: int):
        super().__init__()
        self.register_buffer("scale", torch.tensor([scale]))
        self.register_buffer("zero_point", torch.tensor([zero_point], dtype=torch.int32))
        self.quant_min, self.quant_max = quant_min, quant_max
        self.dtype = torch.quint8

    def forward(self, x):
        if not self.fake_quant_enabled[0]:
            return x
        return torch.fake_quantize_per_tensor_affine(x, float(self.scale), int(self.zero_point),
                                                     self.quant_min, self.quant_max)

    def calculate_qparams(self):
        return self.scale, self.zero_point


def zoo_model(arch: str, size: int) -> nn.Module:
    from pytorchcv.model_provider import get_model
    torch.manual_seed(0)
    model = get_model(arch, pretrained=False, in_size=(size, size)).eval()
    # the zoo's final pool is a fixed 7x7 (224 inputs); adaptive pooling is the same there
    if isinstance(getattr(model.features, "final_pool", None), nn.AvgPool2d):
        model.features.final_pool = nn.AdaptiveAvgPool2d(1)
    return model


def quantize(model: nn.Module, example: torch.Tensor, batches: int = 2, batch_size: int = 16):
    """(fused float baseline, calibrated FX QAT model): the default QAT qconfig mapping,
    observers calibrated on random data in eval mode (BN statistics stay as they are),
    then frozen. The moving-average observers keep close to the first batch's range, so
    a batch far larger than the probed input makes the calibrated range cover it."""
    from torch.ao.quantization import (
        disable_observer,
        enable_observer,
        get_default_qat_qconfig_mapping,
    )
    from torch.ao.quantization.quantize_fx import fuse_fx, prepare_qat_fx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # FX quantization is deprecated for torchao
        qat = prepare_qat_fx(copy.deepcopy(model).train(),
                             get_default_qat_qconfig_mapping("qnnpack"), (example,))
        baseline = fuse_fx(copy.deepcopy(model).eval())
    qat.eval()
    qat.apply(enable_observer)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(batches):
            qat(torch.randn((batch_size, *example.shape[1:]), generator=generator))
    qat.apply(disable_observer)
    return baseline, qat


def observer_of(qat: nn.Module, layer: str) -> str:
    """The name of the fake quant observing ``layer``'s output in an FX QAT model."""
    for node in qat.graph.nodes:
        if node.op == "call_module" and node.target.startswith("activation_post_process") \
                and node.args and getattr(node.args[0], "target", None) == layer:
            return node.target
    raise KeyError(layer)


def inject(qat: nn.Module, layer: str, *, scale_factor: float | None = None,
           bits: int | None = None) -> nn.Module:
    """A copy of ``qat`` whose fake quant after ``layer`` is replaced: the calibrated scale
    times ``scale_factor`` (truncation), or ``bits``-bit over the calibrated range
    (rounding)."""
    faulty = copy.deepcopy(qat)
    name = observer_of(faulty, layer)
    calibrated = getattr(faulty, name)
    scale, zero_point = (float(v) for v in calibrated.calculate_qparams())
    qmin, qmax = calibrated.quant_min, calibrated.quant_max
    if bits is not None:
        low = (qmin - zero_point) * scale
        high = (qmax - zero_point) * scale
        qmax = 2 ** bits - 1
        scale = (high - low) / qmax
        zero_point = int(round(-low / scale))
    if scale_factor is not None:
        scale *= scale_factor
    setattr(faulty, name, FixedFakeQuantize(scale, int(zero_point), 0, qmax))
    return faulty
