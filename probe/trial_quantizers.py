"""The quantizers a fix trial puts in a layer's place: fake quants of our own with fixed
qparams, derived from the qparams the layer's own fake quant applies (``QParams``).

- ``at_bits(q, 16)``: the same covered range over 16-bit integers (a finer step, no
  other change: what a qint16 qconfig on that layer would give after the same
  calibration);
- ``widened(q, low, high)``: the same integers over a range widened to cover
  ``[low, high]`` (a fixed scale set from the baseline's range);
- ``TrialFakeQuantize.of_input(...)``: per-channel qparams taken from the first tensor it
  quantizes, then fixed: put where a weight is quantized, that tensor is the weight as the
  layer quantizes it (a QAT conv-bn's BN-folded weight), the same at every forward.
"""

from __future__ import annotations

import torch
from torch.ao.quantization import FakeQuantizeBase

from qcdoctor.probe.quantizers import QParams

_TINY = torch.finfo(torch.float32).eps        # the smallest scale a trial gives a channel


def integer_range(bits: int, signed: bool) -> tuple[int, int]:
    """(quant_min, quant_max) of ``bits``-bit integers."""
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def at_bits(q: QParams, bits: int) -> QParams:
    """``q``'s covered range (per channel where ``q`` is) over ``bits``-bit integers of the
    same signedness: the step shrinks by the ratio of the two integer ranges."""
    qmin, qmax = integer_range(bits, q.signed)
    low, high = q.covered()
    scale = ((high - low) / (qmax - qmin)).clamp(min=_TINY)
    zero = torch.round(qmin - low / scale).clamp(qmin, qmax).to(torch.int32)
    return QParams(scale, zero, qmin, qmax, q.ch_axis, symmetric=False)


def widened(q: QParams, low: float, high: float) -> QParams:
    """A per-tensor ``q`` over the same integers, its range widened to take in ``[low,
    high]`` (and zero). A symmetric signed scheme stays symmetric (zero point 0, the scale
    from the larger side), as a fixed-scale qconfig sets it (scale = threshold / -qmin)."""
    old_low, old_high = (float(v) for v in q.covered())
    new_low, new_high = min(old_low, low, 0.0), max(old_high, high, 0.0)
    if q.symmetric and q.signed:
        scale = max(new_low / q.quant_min, new_high / q.quant_max)
        zero = 0
    else:
        first = (new_high - new_low) / (q.quant_max - q.quant_min)
        zero = int(min(max(round(q.quant_min - new_low / first), q.quant_min), q.quant_max))
        # the rounded zero point moves the range by up to half a step: the scale that
        # keeps both ends with that zero point
        needed = []
        if zero > q.quant_min:
            needed.append(-new_low / (zero - q.quant_min))
        if zero < q.quant_max:
            needed.append(new_high / (q.quant_max - zero))
        scale = max(needed, default=first)
    device = q.scale.device
    return QParams(torch.tensor([max(scale, _TINY)], device=device),
                   torch.tensor([zero], dtype=torch.int32, device=device),
                   q.quant_min, q.quant_max, None, q.symmetric)


class TrialFakeQuantize(FakeQuantizeBase):
    """Fake quantization with fixed qparams, per tensor or per channel; no observer. The
    switch ``enable_fake_quant`` works as on any torch.ao fake quant."""

    def __init__(self, qparams: QParams | None = None, *, quant_min: int = 0,
                 quant_max: int = 255, ch_axis: int | None = None, symmetric: bool = False):
        super().__init__()
        self.disable_observer()                # fixed qparams: nothing to observe
        if qparams is not None:
            quant_min, quant_max = qparams.quant_min, qparams.quant_max
            ch_axis, symmetric = qparams.ch_axis, qparams.symmetric
        self.quant_min, self.quant_max = quant_min, quant_max
        self.ch_axis, self.symmetric = ch_axis, symmetric
        signed = quant_min < 0
        self.dtype = (torch.qint8 if signed else torch.quint8) if quant_max - quant_min < 256 \
            else (torch.int16 if signed else torch.uint16)
        self.register_buffer("scale", None if qparams is None else qparams.scale.clone())
        self.register_buffer("zero_point",
                             None if qparams is None else qparams.zero_point.clone())

    @classmethod
    def of_input(cls, quant_min: int, quant_max: int, ch_axis: int,
                 symmetric: bool) -> TrialFakeQuantize:
        """Per-channel qparams along ``ch_axis`` from the first tensor quantized (its
        min/max per channel; symmetric: zero point 0 where the integers are signed), then
        fixed."""
        return cls(None, quant_min=quant_min, quant_max=quant_max, ch_axis=ch_axis,
                   symmetric=symmetric)

    def forward(self, x):
        if not self.fake_quant_enabled[0]:
            return x
        if self.scale is None:
            self.scale, self.zero_point = self._per_channel_of(x.detach())
        if self.ch_axis is None:
            return torch.fake_quantize_per_tensor_affine(x, self.scale, self.zero_point,
                                                         self.quant_min, self.quant_max)
        return torch.fake_quantize_per_channel_affine(x, self.scale, self.zero_point,
                                                      self.ch_axis, self.quant_min,
                                                      self.quant_max)

    def _per_channel_of(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dims = [d for d in range(x.dim()) if d != self.ch_axis % x.dim()]
        x = x.float()
        low = torch.amin(x, dim=dims).clamp(max=0.0)
        high = torch.amax(x, dim=dims).clamp(min=0.0)
        qmin, qmax = self.quant_min, self.quant_max
        if self.symmetric and qmin < 0:
            # zero at code 0, the tightest scale that keeps both ends (as torch's fused
            # per-channel fake quant and a fixed-scale qconfig, threshold / -qmin, set it)
            scale = torch.maximum(low / qmin, high / qmax).clamp(min=_TINY)
            zero = torch.zeros_like(scale, dtype=torch.int32)
        else:
            scale = ((high - low) / (qmax - qmin)).clamp(min=_TINY)
            zero = torch.round(qmin - low / scale).clamp(qmin, qmax).to(torch.int32)
        return scale, zero

    def calculate_qparams(self):
        return self.scale, self.zero_point

    def extra_repr(self) -> str:
        kind = "per tensor" if self.ch_axis is None else f"per channel (axis {self.ch_axis})"
        return f"quant_min={self.quant_min}, quant_max={self.quant_max}, {kind}"
