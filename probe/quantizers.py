"""The quantizing modules of an analysis model, the switch of each one's fake quant, and
what a fix trial needs of them: their qparams and a way to put another quantizer in
their place.

``QuantizerAdapter`` is the interface a QAT toolkit implements to take part in the
sensitivity pass (``quantizers``, ``is_enabled``, ``set_enabled``) and in the fix trials
(``qparams`` and ``swap`` as well; without them only the trials that switch a fake quant
off can run). ``TorchAoAdapter`` covers ``torch.ao.quantization`` (eager and FX prepared
models, any ``FakeQuantizeBase`` including custom ones).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import nn

from qcdoctor.probe.layers import class_path, dtype_label, fx_plan


@dataclass
class Quantizer:
    op_name: str              # the layer whose output or weight it quantizes
    sensitive_type: str       # activation | weight
    op_type: str              # class path of that layer
    quant_dtype: str
    module: nn.Module
    name: str = ""            # its own qualified module name in the model (for swap)


@dataclass
class QParams:
    """What a fake quant applies: ``scale`` and ``zero_point`` (one element per tensor, or
    one per channel along ``ch_axis``) over the integers ``quant_min`` .. ``quant_max``."""
    scale: torch.Tensor                 # float32, 1-D
    zero_point: torch.Tensor            # int32, the shape of scale
    quant_min: int
    quant_max: int
    ch_axis: int | None = None          # None: per tensor
    symmetric: bool = False             # a symmetric scheme (zero at the middle code)

    @property
    def bits(self) -> int:
        return (self.quant_max - self.quant_min).bit_length()

    @property
    def signed(self) -> bool:
        return self.quant_min < 0

    def covered(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The real range the integers cover: (low, high), per channel where per channel."""
        zero = self.zero_point.to(torch.float32)
        return (self.quant_min - zero) * self.scale, (self.quant_max - zero) * self.scale


class QuantizerAdapter(Protocol):
    def quantizers(self, model: nn.Module) -> list[Quantizer]: ...

    def is_enabled(self, quantizer: Quantizer) -> bool: ...

    def set_enabled(self, quantizer: Quantizer, enabled: bool) -> None: ...

    # the fix trials' part (optional: without it only the ``float`` trials run)
    def qparams(self, quantizer: Quantizer) -> QParams | None: ...

    def swap(self, model: nn.Module, name: str, module: nn.Module) -> nn.Module: ...


class TorchAoAdapter:
    """torch.ao fake quantization: ``FakeQuantizeBase.enable_fake_quant(bool)``; qparams
    from the ``scale``/``zero_point`` a fake quant applies, else ``calculate_qparams()``;
    swaps by ``setattr`` on the parent module (FX graphs and eager forwards look their
    quantizers up by attribute at every call)."""

    def quantizers(self, model: nn.Module) -> list[Quantizer]:
        from torch.ao.quantization import FakeQuantizeBase
        modules = dict(model.named_modules())
        observes = _fx_observed(model)
        found = []
        for name, module in modules.items():
            if not isinstance(module, FakeQuantizeBase) or _inside_quantizer(name, modules):
                continue
            parent_name, _, attr = name.rpartition(".")
            if id(module) in observes:                   # FX: the node it observes
                op_name, op_type = observes[id(module)]
                kind = "activation"
            else:
                parent = modules.get(parent_name, model)
                kind = "weight" if "weight" in attr else "activation"
                op_name, op_type = parent_name or name, class_path(parent)
            found.append(Quantizer(op_name, kind, op_type, dtype_label(module) or "", module,
                                   name))
        return found

    def is_enabled(self, quantizer: Quantizer) -> bool:
        return bool(quantizer.module.fake_quant_enabled[0])

    def set_enabled(self, quantizer: Quantizer, enabled: bool) -> None:
        quantizer.module.enable_fake_quant(enabled)

    def qparams(self, quantizer: Quantizer) -> QParams | None:
        """The qparams the fake quant applies; None where they cannot be read (no integer
        range, a scale that is not positive and finite, float zero points)."""
        return read_qparams(quantizer.module)

    def swap(self, model: nn.Module, name: str, module: nn.Module) -> nn.Module:
        """Put ``module`` at the qualified ``name`` of ``model`` and at every other name
        the module there is reached by (an FX-prepared pooling, view or flatten reuses its
        input's fake quant under a name of its own); returns what was there."""
        previous = model.get_submodule(name)
        for alias in aliases(model, name, previous):
            parent_name, _, attr = alias.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, attr, module)
        return previous


def aliases(model: nn.Module, name: str, module: nn.Module) -> list[str]:
    """Every qualified name of ``model`` at which ``module`` sits, ``name`` first."""
    found = [name]
    for other, child in model.named_modules(remove_duplicate=False):
        if child is module and other != name and other not in found:
            found.append(other)
    return found


# integer range of a dtype, for a quantizer that states only its dtype
_DTYPE_RANGE = {torch.quint8: (0, 255), torch.qint8: (-128, 127), torch.uint8: (0, 255),
                torch.int8: (-128, 127), torch.int16: (-(1 << 15), (1 << 15) - 1),
                torch.qint32: (-(1 << 31), (1 << 31) - 1)}


def read_qparams(module: nn.Module) -> QParams | None:
    """What a FakeQuantizeBase applies. torch's fake quants apply their ``scale`` and
    ``zero_point`` buffers once the observer is off, and these can differ from what
    ``calculate_qparams()`` derives from the observer (the fused observer clamps the scale
    from below): the buffers come first, ``calculate_qparams()`` where there are none."""
    scale = getattr(module, "scale", None)
    zero_point = getattr(module, "zero_point", None)
    if not (isinstance(scale, torch.Tensor) and isinstance(zero_point, torch.Tensor)):
        try:
            scale, zero_point = module.calculate_qparams()
        except Exception:  # noqa: BLE001 - a quantizer that saw no data, or has no qparams
            return None
    if not (isinstance(scale, torch.Tensor) and isinstance(zero_point, torch.Tensor)) \
            or zero_point.is_floating_point() or scale.numel() == 0 \
            or scale.numel() != zero_point.numel():
        return None
    scale = scale.detach().reshape(-1).to(torch.float32).clone()
    zero_point = zero_point.detach().reshape(-1).to(torch.int32).clone()
    if not (torch.isfinite(scale).all() and (scale > 0).all()):
        return None
    qmin, qmax = getattr(module, "quant_min", None), getattr(module, "quant_max", None)
    if not isinstance(qmin, int) or not isinstance(qmax, int):
        qmin, qmax = _DTYPE_RANGE.get(getattr(module, "dtype", None), (None, None))
    if qmin is None or qmax <= qmin:
        return None
    qscheme = getattr(module, "qscheme", None)
    per_channel = scale.numel() > 1 or qscheme in (torch.per_channel_affine,
                                                   torch.per_channel_symmetric)
    axis = getattr(module, "ch_axis", 0) if per_channel else None
    symmetric = qscheme in (torch.per_tensor_symmetric, torch.per_channel_symmetric) or \
        (qscheme is None and qmin < 0 and bool((zero_point == 0).all()))
    return QParams(scale, zero_point, qmin, qmax, axis if isinstance(axis, int) and axis >= 0
                   else (0 if per_channel else None), symmetric)


def _fx_observed(model: nn.Module) -> dict[int, tuple[str, str]]:
    """id of an FX quantizer module -> (row name, op type) of the first node it observes,
    as the layer rows name it (a quantizer shared by several nodes is one module)."""
    if not isinstance(model, torch.fx.GraphModule):
        return {}
    plan = fx_plan(model)
    found: dict[int, tuple[str, str]] = {}
    for node, source in plan.observer.items():
        layer = plan.layers.get(source)
        found.setdefault(id(model.get_submodule(str(node.target))), (layer.name, layer.op_type) if layer is not None
                         else (source.name, str(source.target)))
    return found


def _inside_quantizer(name: str, modules: dict) -> bool:
    from torch.ao.quantization import FakeQuantizeBase
    parts = name.split(".")
    return any(isinstance(modules.get(".".join(parts[:i])), FakeQuantizeBase)
               for i in range(1, len(parts)))


def freeze_observers(model: nn.Module, modules=None) -> list[tuple[nn.Module, bool]]:
    """Stop fake-quant observers from updating their ranges while probing; returns
    what to restore. ``modules``: model.modules(), when at hand."""
    from torch.ao.quantization import FakeQuantizeBase
    saved = []
    for module in model.modules() if modules is None else modules:
        if not isinstance(module, FakeQuantizeBase):
            continue
        flag = getattr(module, "observer_enabled", None)
        if isinstance(flag, torch.Tensor) and flag.numel() and \
                bool(flag if flag.numel() == 1 else flag.reshape(-1)[0]):
            saved.append((module, True))       # only the enabled ones change
            module.disable_observer()
    return saved


def restore_observers(saved: list[tuple[nn.Module, bool]]) -> None:
    for module, enabled in saved:
        module.enable_observer(enabled)
