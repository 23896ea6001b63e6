"""The quantizing modules of an analysis model and the switch of each one's fake quant.

``QuantizerAdapter`` is the interface a QAT toolkit implements to take part in the
sensitivity pass; ``TorchAoAdapter`` covers ``torch.ao.quantization`` (eager and FX
prepared models, any ``FakeQuantizeBase`` including custom ones).
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


class QuantizerAdapter(Protocol):
    def quantizers(self, model: nn.Module) -> list[Quantizer]: ...

    def is_enabled(self, quantizer: Quantizer) -> bool: ...

    def set_enabled(self, quantizer: Quantizer, enabled: bool) -> None: ...


class TorchAoAdapter:
    """torch.ao fake quantization: ``FakeQuantizeBase.enable_fake_quant(bool)``."""

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
            found.append(Quantizer(op_name, kind, op_type, dtype_label(module) or "", module))
        return found

    def is_enabled(self, quantizer: Quantizer) -> bool:
        return bool(quantizer.module.fake_quant_enabled[0])

    def set_enabled(self, quantizer: Quantizer, enabled: bool) -> None:
        quantizer.module.enable_fake_quant(enabled)


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
