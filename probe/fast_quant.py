"""torch.ao's frozen fake quants computed in place, with the same float32 arithmetic as
torch's kernels, so the same values (tests/probe/test_fast_quant.py checks them).

Why: on CPU the fused kernels behind FakeQuantize and FusedMovingAvgObsFakeQuantize also
write a mask and skip vectorisation; measured here, a frozen activation quantizer costs
about nine times the four in-place passes below, a per-channel weight quantizer up to
twenty-five times. Where probe/fused.py's kernel is built, a contiguous CPU input takes
one pass of it instead of the four (the same arithmetic, in C). (torch's
quantize_per_tensor then dequantize, vectorised too, give the kernel's values for a zero point of 0, but measured in the probe they cost more than the
passes below: a fresh output and an int8 one per call, and a pass to find a NaN first.)
The probe runs the analysis model (and its layers' shadow calls for the own error) with
each such quantizer's ``forward`` replaced for the run (``FastQuantizers``), and puts every
one back on every exit path.

A quantizer is mirrored only while it is frozen (observer off, fake quant on; a fixed-qparams
quantizer's observer may stay on: it only copies back the fixed scale), per tensor or per
channel with integer zero points, on a float32 input, or while it is switched off with
nothing observed (its input given back as torch's forward gives it: the fused kernel's
copy without its mask); anything else goes to its own call. What it holds (scale, zero
point, switches) is read again whenever one of those tensors is replaced or written (their
version counters), so a switch turned during the run (the sensitivity pass) is honoured.
Within ``unclipped(modules)`` those quantizers round to their steps without clamping to
their range (the bad-case search's clean model's error). The fused kernel takes its scale
and zero point from its observer's range at every call, whatever its buffers hold: those
are read after one call of its own (``_settle``).
"""

from __future__ import annotations

import math
import weakref
from contextlib import contextmanager

import torch
from torch import nn
from torch.ao.quantization import FakeQuantize, FusedMovingAvgObsFakeQuantize
from torch.ao.quantization.fake_quantize import FixedQParamsFakeQuantize

from qcdoctor.probe import fused

# FixedQParamsFakeQuantize (sigmoid, hardsigmoid, tanh, softmax outputs) runs
# FakeQuantize's forward on a scale its observer never moves
_PLAIN = (FakeQuantize, FusedMovingAvgObsFakeQuantize, FixedQParamsFakeQuantize)
_PER_CHANNEL = (torch.per_channel_affine, torch.per_channel_symmetric)
_STATE = ("scale", "zero_point", "fake_quant_enabled", "observer_enabled")
_SWITCHES = ("fake_quant_enabled", "observer_enabled")
_RANGE = ("min_val", "max_val", "eps")           # a fused quantizer's observer's

# quantizer -> (stamp of its state tensors, plan or None)
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

# off: every quantizer runs its own kernel (tests compare the two)
ENABLED = True

# the quantizers (by id) rounding to their steps without their range's clamp
# (``unclipped``): the error of the steps alone, no value clipped
_UNCLIPPED: set[int] = set()


class _Plan:
    """The numbers of one frozen quantizer, read once: 1/scale as torch's kernel computes
    it (float32), the scale, and the range of the rounded value less the zero point
    (``low`` = quant_min - zero point, ``high`` = quant_max - zero point); per channel,
    as tensors along ``axis``. Per tensor, 1/scale and the scale are float32 tensors of no
    dimension: a Python number is wrapped as a float64 tensor and converted by every
    multiplication (measured: 6 us against 2.5 us for one of 200 elements)."""

    __slots__ = ("inverse", "scale", "low", "high", "axis", "numbers")

    def __init__(self, inverse, scale, low, high, axis: int | None):
        self.inverse, self.scale, self.low, self.high, self.axis = \
            inverse, scale, low, high, axis
        # per tensor, the four as Python numbers for the fused kernel (each float32 exactly)
        self.numbers = None if axis is not None else \
            (float(inverse), float(scale), float(low), float(high))

    def __call__(self, x: torch.Tensor) -> torch.Tensor | None:
        if x.dtype != torch.float32:
            return None
        if fused.fits(x) and self.inverse.is_cpu:
            return self._fused(x)
        if self.axis is None and fused.readable(x) and self.inverse.is_cpu:
            out = self._in_memory_order(x)
            if out is not None:
                return out
        found = self._laid_out(x, (self.inverse, self.scale, self.low, self.high))
        if found is None:
            return None
        inverse, scale, low, high = found
        # torch's kernel: (clamp(round(x * (1/scale)) + zero, qmin, qmax) - zero) * scale,
        # rounding half to even. The bounds are whole numbers, so clamping before rounding
        # gives the same values, and the zero point leaves the sum. The kernel makes a NaN
        # the range's low end: per tensor, so does nan_to_num where the sum of the clamped
        # values (which cannot overflow) says there is one; per channel (weights) a NaN
        # is left to the kernel
        out = torch.mul(x, inverse).clamp_(low, high)
        if math.isnan(float(out.sum())):
            if self.axis is not None:
                return None
            out.nan_to_num_(nan=low)
        return out.round_().mul_(scale)

    def _in_memory_order(self, x: torch.Tensor) -> torch.Tensor | None:
        """A transposed or permuted input quantized in one pass over its memory, where it
        is one block, into an output laid out alike (the same values: each element is
        quantized alone); None otherwise."""
        flat = fused.in_memory_order(x)
        if flat is None:
            return None
        out = torch.empty_like(x)               # a block's strides kept
        if out.stride() != x.stride():
            return None
        fused.fake_quant(flat, fused.in_memory_order(out), *self.numbers)
        return out

    def unclipped(self, x: torch.Tensor) -> torch.Tensor | None:
        """``x`` rounded to the steps, no value clamped to the range (the zero point, a
        whole number, leaves the rounding as it is); None where the plan does not fit."""
        found = self._laid_out(x, (self.inverse, self.scale))
        if x.dtype != torch.float32 or found is None:
            return None
        inverse, scale = found
        return torch.mul(x, inverse).round_().mul_(scale)

    def _laid_out(self, x: torch.Tensor, numbers: tuple) -> tuple | None:
        """The plan's ``numbers`` as they are per tensor; per channel, viewed along ``x``'s
        channel axis (None where ``x`` has none)."""
        if self.axis is None:
            return numbers
        axis = self._channel_axis(x)
        if axis is None:
            return None
        shape = [1] * x.dim()
        shape[axis] = -1
        return tuple(n.view(shape) for n in numbers)

    def _channel_axis(self, x: torch.Tensor) -> int | None:
        """The per-channel axis in ``x``, counted from 0; None where ``x`` has no such axis
        or another number of channels than the plan's scales."""
        axis = self.axis if self.axis >= 0 else self.axis + x.dim()
        return axis if 0 <= axis < x.dim() and x.shape[axis] == self.inverse.numel() else None

    def _fused(self, x: torch.Tensor) -> torch.Tensor | None:
        """The same values in one pass of the fused kernel (probe/fused.py)."""
        out = torch.empty_like(x)
        if self.axis is None:
            fused.fake_quant(x, out, *self.numbers)
            return out
        axis = self._channel_axis(x)
        if axis is None:
            return None
        # a NaN in a weight: left to torch's kernel, as below
        return out if fused.fake_quant_channels(x, out, axis, self.inverse, self.scale,
                                                self.low, self.high) else None


def _stamp(quantizer: nn.Module):
    """Identity and version of each state tensor the plan is read from: equal while none
    was replaced or written. None: a state tensor missing, or one without a version (made
    in inference mode). The fused kernel writes its scale and zero point at every call
    (from its observer's range): its plan is read from that range, so the model's own
    forwards between two probes leave its plan standing."""
    if type(quantizer) is FusedMovingAvgObsFakeQuantize:
        observer = getattr(quantizer, "activation_post_process", None)
        if not isinstance(observer, nn.Module):
            return None
        held = ((quantizer._buffers, _SWITCHES), (observer._buffers, _RANGE))
        parts = [getattr(observer, "quant_min", None), getattr(observer, "quant_max", None)]
    else:
        held = ((quantizer._buffers, _STATE),)
        parts = []
    for buffers, names in held:
        for name in names:
            tensor = buffers.get(name)
            if tensor is None:
                return None
            try:
                parts.append((id(tensor), tensor._version))
            except RuntimeError:                # an inference tensor keeps no version
                return None
    return tuple(parts)


def _frozen(quantizer: nn.Module) -> bool:
    """Fake quant on, observer off (or one that only copies back a fixed scale): what the
    quantizer applies no longer moves."""
    return bool(quantizer.fake_quant_enabled[0]) and (
        type(quantizer) is FixedQParamsFakeQuantize or not bool(quantizer.observer_enabled[0]))


class _PassThrough:
    """A quantizer switched off whose observer learns nothing: torch's forward gives its
    input back (FakeQuantize: the input itself; the fused kernel: a copy, after writing a
    mask it does not need, about three copies' time)."""

    __slots__ = ("copy",)
    numbers = None                      # no step to quantize with (own_error reads it)

    def __init__(self, copy: bool):
        self.copy = copy

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x.clone() if self.copy else x


def _switched_off(quantizer: nn.Module) -> bool:
    """Fake quant off and nothing observed (a fixed-qparams observer only copies back its
    fixed scale)."""
    return not bool(quantizer.fake_quant_enabled[0]) and (
        type(quantizer) is FixedQParamsFakeQuantize or not bool(quantizer.observer_enabled[0]))


def _read_plan(quantizer: nn.Module) -> _Plan | _PassThrough | None:
    if _switched_off(quantizer):
        return _PassThrough(copy=type(quantizer) is FusedMovingAvgObsFakeQuantize)
    if not _frozen(quantizer):
        return None
    scale, zero = quantizer.scale, quantizer.zero_point
    if not scale.is_floating_point() or zero.is_floating_point() or \
            scale.numel() != zero.numel() or scale.numel() == 0:
        return None
    # the range the kernels are given: the observer's where the quantizer has one
    bounds = getattr(quantizer, "activation_post_process", quantizer)
    low, high = int(bounds.quant_min), int(bounds.quant_max)
    if quantizer.is_per_channel:
        if quantizer.qscheme not in _PER_CHANNEL or (
                type(quantizer) is FusedMovingAvgObsFakeQuantize and quantizer.ch_axis != 0):
            return None                 # the fused kernel takes axis 0 only: its error
        scales = scale.detach().to(torch.float32).clone()
        zeros = zero.detach().to(torch.float32)
        return _Plan(1.0 / scales, scales, low - zeros, high - zeros, int(quantizer.ch_axis))
    if scale.numel() != 1:
        return None
    zero_point = int(zero)
    with torch.inference_mode(False):         # usable in and out of inference mode
        step = scale.detach().to(torch.float32).reshape(()).clone()
        inverse = 1.0 / step                   # the kernel's 1.0f / scale
    return _Plan(inverse, step, low - zero_point, high - zero_point, None)


def plan_of(quantizer) -> _Plan | _PassThrough | None:
    """The plan of a plain torch.ao fake quant as it is now (None: not one to mirror)."""
    if not ENABLED or type(quantizer) not in _PLAIN:
        return None
    stamp = _stamp(quantizer)
    if stamp is None:
        return None
    known = _PLANS.get(quantizer)
    if known is not None and known[0] == stamp:
        return known[1]
    if type(quantizer) is FusedMovingAvgObsFakeQuantize:
        _settle(quantizer)
        stamp = _stamp(quantizer)
    plan = _read_plan(quantizer)
    _PLANS[quantizer] = (stamp, plan)
    return plan


def _settle(quantizer: nn.Module) -> None:
    """The fused kernel derives scale and zero point from its observer's range on every
    call, observer off or not, and writes them to its buffers: one call of its own on a
    zero input makes the buffers what it would use (a scale written by hand is undone, as
    the module's next call would undo it)."""
    try:
        if not _frozen(quantizer):          # a live observer would learn the zeros
            return
        shape = [1]
        if quantizer.is_per_channel:
            axis = int(quantizer.ch_axis)
            if axis < 0:
                return
            shape = [1] * (axis + 1)
            shape[axis] = quantizer.scale.numel()
        with torch.no_grad():
            type(quantizer).forward(quantizer, torch.zeros(shape, device=quantizer.scale.device))
    except Exception:  # noqa: BLE001 - a state the kernel refuses: _read_plan decides
        return


def unclippable(modules) -> list[nn.Module]:
    """The frozen quantizers among ``modules`` that a ``FastQuantizers`` mirrors now."""
    return [m for m in modules if type(m) in _PLAIN
            and getattr(m.__dict__.get("forward"), "mirrored", False)
            and isinstance(plan_of(m), _Plan)]


@contextmanager
def unclipped(modules):
    """Within: each frozen quantizer among ``modules`` that a ``FastQuantizers`` mirrors
    rounds its input to its steps without clamping it to its range (a quantizer left to
    its own call still clamps). Yields how many quantizers round so."""
    chosen = {id(m) for m in unclippable(modules)}
    _UNCLIPPED.update(chosen)
    try:
        yield len(chosen)
    finally:
        _UNCLIPPED.difference_update(chosen)


def fake_quant(quantizer, x):
    """``quantizer(x)`` computed in place for a frozen plain torch.ao fake quant; None for
    another kind of quantizer, a float zero point, fake quant off or a live observer, or
    an input that is not a float32 tensor (its own call decides)."""
    if not isinstance(x, torch.Tensor):
        return None
    plan = plan_of(quantizer)
    return plan(x) if plan is not None else None


class FastQuantizers:
    """Each plain torch.ao fake quant among ``modules`` runs ``fake_quant`` while this is
    open (its own ``forward`` where that gives None); ``close`` puts every one back. One
    whose instance already has a ``forward`` of its own is left alone."""

    def __init__(self, modules):
        self.installed: list[nn.Module] = []
        if not ENABLED:
            return
        for module in modules:
            if type(module) in _PLAIN and "forward" not in module.__dict__:
                module.forward = _mirrored(module)
                self.installed.append(module)

    def close(self) -> None:
        while self.installed:
            self.installed.pop().__dict__.pop("forward", None)


def _mirrored(quantizer: nn.Module):
    ref = weakref.ref(quantizer)            # no cycle through the instance's own dict

    def forward(x, *rest, **kwargs):
        target = ref()
        # under autograd the kernel's straight-through gradient is needed: its own call
        if not rest and not kwargs and isinstance(x, torch.Tensor) and \
                not torch.is_grad_enabled():
            plan = plan_of(target)
            if plan is not None:
                out = plan.unclipped(x) if id(target) in _UNCLIPPED and \
                    isinstance(plan, _Plan) else plan(x)
                if out is not None:
                    return out
        return type(target).forward(target, x, *rest, **kwargs)
    forward.mirrored = True
    return forward
