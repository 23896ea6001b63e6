"""Which modules of a model are its layers, what each one's output is named, and which
quantizer (fake quant / observer) holds its output scale.

A layer is a leaf module, or a fused module (conv-bn-relu and the like: its parts are
internals), ignoring quantizers. In an FX-prepared model the fake quantization of a node's
output is a separate top-level module (``activation_post_process_N``); its output is
attributed to the node it observes, as the profiler compares outputs after fake
quantization. In an eager-prepared model the layer's own forward hook already sees the
fake-quantized output (prepare's hook runs first).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


def quantizer_types() -> tuple[type, ...]:
    from torch.ao.quantization import FakeQuantizeBase, ObserverBase
    return FakeQuantizeBase, ObserverBase


def is_quantizer(module: nn.Module) -> bool:
    return isinstance(module, quantizer_types())


def is_fused(module: nn.Module) -> bool:
    from torch.ao.nn.intrinsic import _FusedModule
    return isinstance(module, _FusedModule)


def class_path(obj) -> str:
    kind = obj if isinstance(obj, type) else type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


@dataclass
class Layer:
    name: str
    op_type: str
    quantizer: nn.Module | None = None     # holds the output scale, when there is one


@dataclass
class LayerMap:
    """The hooks to install: module -> the layer each of its calls reports as."""
    own: dict[str, Layer] = field(default_factory=dict)            # module name -> layer
    # FX: quantizer module name -> the layers it observes, one per call in graph order
    attributed: dict[str, list[Layer]] = field(default_factory=dict)


def layer_map(model: nn.Module) -> LayerMap:
    modules = dict(model.named_modules())
    found = LayerMap()
    observed = _fx_attribution(model, modules, found) if isinstance(model, torch.fx.GraphModule) else set()
    for name, module in _layers(model):
        if name in observed:
            continue                         # reported at its fake quantization instead
        child_q = getattr(module, "activation_post_process", None)
        found.own[name] = Layer(name, class_path(module),
                                child_q if child_q is not None and is_quantizer(child_q) else None)
    return found


def _layers(model: nn.Module, prefix: str = ""):
    children = [(n, c) for n, c in model.named_children() if not is_quantizer(c)]
    if not prefix and not children:
        yield "", model
        return
    for name, child in children:
        full = f"{prefix}.{name}" if prefix else name
        if is_fused(child) or not any(not is_quantizer(c) for c in child.children()):
            yield full, child
        else:
            yield from _layers(child, full)


def _fx_attribution(model, modules: dict, found: LayerMap) -> set[str]:
    # a quantizer shared by several nodes (pooling shares its input's) is one module
    # under several names: its calls are attributed in graph order, under its first name
    every = dict(model.named_modules(remove_duplicate=False))
    first = {id(m): name for name, m in modules.items()}
    observed: set[str] = set()
    for node in model.graph.nodes:
        quantizer = every.get(node.target) if node.op == "call_module" else None
        if quantizer is None or not is_quantizer(quantizer):
            continue
        source = node.args[0] if node.args else None
        if not isinstance(source, torch.fx.Node):
            continue
        if source.op == "call_module" and source.target in every:
            target = every[source.target]
            if is_quantizer(target):
                continue                     # a fake quant of a fake quant: same values
            layer = Layer(source.target, class_path(target), quantizer)
            observed.add(source.target)
        else:
            what = source.target if source.op != "placeholder" else "input"
            op_type = getattr(what, "__name__", str(what))
            layer = Layer(source.name, f"{source.op}.{op_type}", quantizer)
        found.attributed.setdefault(first[id(quantizer)], []).append(layer)
    return observed


def output_scale(quantizer: nn.Module | None) -> tuple[float | None, str | None]:
    """(per-tensor scale, dtype label) of a quantizer; (None, None) when it has neither."""
    if quantizer is None:
        return None, None
    scale = getattr(quantizer, "scale", None)
    if not isinstance(scale, torch.Tensor) and hasattr(quantizer, "calculate_qparams"):
        try:
            scale = quantizer.calculate_qparams()[0]
        except Exception:  # noqa: BLE001 - an observer that saw no data has no scale
            scale = None
    value = float(scale.reshape(-1)[0]) if isinstance(scale, torch.Tensor) and scale.numel() == 1 \
        else None
    return value, dtype_label(quantizer)


def dtype_label(quantizer: nn.Module) -> str | None:
    """``qint8``, ``quint8``, ``qint16``, ``quint4`` ... from the quantizer's integer range:
    a 4-bit range in a quint8 container is quint4, x86's reduced 0..127 range quint7."""
    qmin, qmax = getattr(quantizer, "quant_min", None), getattr(quantizer, "quant_max", None)
    dtype = getattr(quantizer, "dtype", None)
    if not isinstance(qmin, int) or not isinstance(qmax, int) or qmax <= qmin:
        return str(dtype).replace("torch.", "") if dtype is not None else None
    return f"{'qint' if qmin < 0 else 'quint'}{(qmax - qmin).bit_length()}"
