"""Which outputs of a model are its layers, what each one is named, what it computes, and
which quantizer (fake quant / observer) holds its output scale.

Names (the ``mod_name`` of compare_per_layer):
- a module: its qualified name. A layer is a module FX keeps as one call (torch.nn and
  torch.ao.nn modules but containers), a fused module (conv-bn-relu and the like: its
  parts are internals) or a childless one, ignoring quantizers;
- a function op (``x + y``, ``torch.cat``, ``F.relu`` in a module's forward): the module
  path it runs in and the op, ``features.stage3.unit1.add`` (``_1``, ``_2`` ... for the
  next ones of the same op in the same module), from the FX node's ``nn_module_stack``
  in a traced model and from the module running it in an eager one, so both name it the
  same. A childless module FX traced through (a Swish written as ``x * sigmoid(x)``) is
  named by the module at its output node, as an eager model reports it;
- a model input: the forward's argument name.

In an FX-prepared model the fake quantization of a node's output is a separate module
(``activation_post_process_N``); its output is reported under the node it observes, as
the profiler compares outputs after fake quantization. A quantizer slot is recognised by
its class (``FakeQuantizeBase``/``ObserverBase``) or by its place (an
``activation_post_process`` name), so a quantizer replaced by another class (a custom
quantizer, an Identity) still reports its node. In an eager-prepared model the layer's
own forward hook already sees the fake-quantized output (prepare's hook runs first).

What an output computes, for aligning a fused analysis module with an unfused baseline
(knowledge.md R3.12): each layer has fusion tokens (``Conv``, ``Linear``, ``Bn``,
``ReLU`` ...; a ConvBnReLU2d is all three) and a chain of follower ops (BN, ReLU ...)
extends the op it consumes directly. Two outputs compute the same thing when their
chains start at the same layer and cover the same tokens, BN aside (a BN folded into
its conv computes what conv-then-BN computes).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.ao.nn.intrinsic import _FusedModule
from torch.ao.quantization import FakeQuantizeBase, ObserverBase
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd

_SLOT = re.compile(r"(?:^|\.)(?:activation_post_process(?:_\d+)?|weight_fake_quant|"
                   r"bias_fake_quant)$")
# fusion tokens: the ops torch (and Horizon) fuse into one module
_FUSED_PART = re.compile(r"Conv|Linear|BN|Bn|LeakyReLU|ReLU6|ReLU|Tanh|Add")
FOLLOWERS = frozenset({"Bn", "ReLU", "ReLU6", "LeakyReLU", "Tanh"})

# function ops named alike in eager and FX models: the op's own name, in-place and
# reflected forms folded (``x += y`` is an add)
_KIND_ALIASES = {"iadd": "add", "radd": "add", "isub": "sub", "rsub": "sub", "imul": "mul",
                 "rmul": "mul", "truediv": "div", "itruediv": "div", "rtruediv": "div",
                 "idiv": "div", "floordiv": "floor_divide", "ifloordiv": "floor_divide",
                 "imatmul": "matmul", "rmatmul": "matmul", "concat": "cat",
                 "concatenate": "cat", "multiply": "mul", "subtract": "sub", "divide": "div",
                 "ipow": "pow", "rpow": "pow", "ior": "or", "iand": "and", "getitem": "getitem"}
# ops that only ask about a tensor (no activation)
NOT_TENSOR = frozenset({"size", "dim", "numel", "shape", "dtype", "device", "getattr",
                        "get", "is_contiguous", "len", "item", "tolist", "stride",
                        "data_ptr", "element_size", "is_floating_point", "set_grad_enabled"})
# ops that move or view values without computing: compared only where the analysis
# model quantizes their output (they repeat their input's error otherwise)
PASS_THROUGH = frozenset({"view", "reshape", "flatten", "permute", "transpose", "contiguous",
                          "getitem", "to", "float", "detach", "clone", "squeeze", "unsqueeze",
                          "expand", "expand_as", "type", "type_as", "t", "split", "chunk",
                          "unbind", "narrow", "select", "repeat", "view_as", "reshape_as",
                          "unflatten", "movedim", "cpu", "cuda", "requires_grad",
                          "dropout", "identity"})
# ops that write into their first argument (or ``out``)
_INPLACE_OPS = frozenset({"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                          "iand", "ior", "ixor", "ilshift", "irshift", "imatmul", "setitem"})
_FUNCTION_TOKENS = {"relu": "ReLU", "relu6": "ReLU6", "leaky_relu": "LeakyReLU",
                    "tanh": "Tanh"}


def is_inplace_call(target, kwargs: dict | None = None) -> bool:
    """Whether a function call or FX node target writes into its first argument (``x +=
    y``, ``relu_``, ``x[i] = v``, ``inplace=True``) or into ``out``."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "") or ""
    if name.startswith("__") and name.endswith("__"):
        return name[2:-2] in _INPLACE_OPS
    return (name.endswith("_") or name in _INPLACE_OPS or
            bool(kwargs and (kwargs.get("inplace") is True or kwargs.get("out") is not None)))


def is_quantizer(module: nn.Module) -> bool:
    return isinstance(module, (FakeQuantizeBase, ObserverBase))


def is_quantizer_slot(name: str, module: nn.Module) -> bool:
    """A quantizer, or whatever module sits where one goes (a replaced fake quant)."""
    return is_quantizer(module) or bool(_SLOT.search(name))


def is_fused(module: nn.Module) -> bool:
    return isinstance(module, _FusedModule)


def class_path(obj) -> str:
    """``torch.nn.modules.conv.Conv2d``: the dotted path of a class (or an object's)."""
    kind = obj if isinstance(obj, type) else type(obj)
    module = getattr(kind, "__module__", None) or "builtins"
    return f"{module}.{kind.__qualname__}"


def function_path(target) -> str:
    """A function op as a dotted name: ``operator.add``, ``torch.cat``,
    ``torch.Tensor.add``, ``torch.nn.functional.relu``."""
    if isinstance(target, str):
        return f"torch.Tensor.{target}"
    name = getattr(target, "__name__", None) or type(target).__name__
    module = getattr(target, "__module__", None)
    if module is None:
        owner = getattr(target, "__objclass__", None)
        module = "torch" if owner is not None and owner.__name__ == "TensorBase" else None
        if module == "torch":
            return f"torch.Tensor.{name}"
        module = getattr(owner, "__module__", None) if owner is not None else None
    module = {"_operator": "operator", "torch._C._VariableFunctions": "torch",
              "torch._C": "torch"}.get(module, module)
    return f"{module}.{name}" if module else name


def op_kind(target) -> str:
    """The op a function call or FX function node performs, normalised: ``add`` for
    ``operator.add``, ``Tensor.__iadd__``, ``torch.add``, ``x.add_``."""
    name = target if isinstance(target, str) else getattr(target, "__name__", "") or ""
    dunder = name.startswith("__") and name.endswith("__") and len(name) > 4
    if dunder:
        name = name[2:-2]
    if name.endswith("_") and not name.endswith("__") and len(name) > 1:
        name = name[:-1]
    if dunder and len(name) > 3 and name[0] in "ir" and name[1:] in _BINARY:
        name = name[1:]
    return _KIND_ALIASES.get(name, name)


_BINARY = frozenset({"add", "sub", "mul", "truediv", "floordiv", "matmul", "pow", "and",
                     "or", "xor", "mod", "lshift", "rshift", "div"})


def fusion_tokens(module: nn.Module) -> tuple[str, ...] | None:
    """The fusable ops a module computes, in order: ('Conv', 'Bn', 'ReLU') for a
    ConvBnReLU2d (float, QAT or Horizon), ('Conv',) for a conv; None for anything else
    (and for fusions of two inputs, conv-add: their alignment is by name alone)."""
    if is_fused(module) or _looks_fused(type(module).__name__):
        parts = tuple("Bn" if p == "BN" else p for p in _FUSED_PART.findall(type(module).__name__))
        return None if not parts or "Add" in parts else parts
    return _plain_tokens(module)


def _looks_fused(name: str) -> bool:
    return len(_FUSED_PART.findall(name)) > 1 and not name.startswith(("BatchNorm", "Lazy"))


def _plain_tokens(module: nn.Module) -> tuple[str, ...] | None:
    if isinstance(module, _ConvNd):
        return ("ConvT",) if getattr(module, "transposed", False) else ("Conv",)
    if isinstance(module, nn.Linear):
        return ("Linear",)
    if isinstance(module, _BatchNorm):
        return ("Bn",)
    for kind, token in ((nn.ReLU6, "ReLU6"), (nn.ReLU, "ReLU"), (nn.LeakyReLU, "LeakyReLU"),
                        (nn.Tanh, "Tanh")):
        if isinstance(module, kind):
            return (token,)
    return None


def identity_kind(module: nn.Module) -> str:
    """``identity`` for a module that returns its input (nn.Identity, the placeholders
    eager fusion leaves where bn and relu were): it repeats its input's row."""
    return "identity" if isinstance(module, nn.Identity) or type(module).__name__ == "Identity" \
        else ""


def function_tokens(kind: str) -> tuple[str, ...] | None:
    token = _FUNCTION_TOKENS.get(kind)
    return (token,) if token else None


@dataclass
class Layer:
    name: str
    op_type: str
    quantizer: nn.Module | None = None     # holds the output scale, when there is one
    tokens: tuple[str, ...] | None = None  # fusion tokens (see fusion_tokens)
    kind: str = ""                         # function ops: the op (add, cat ...); "" else
    is_input: bool = False
    weight_quantizer: nn.Module | None = None   # the layer's weight fake quant, if any


def weight_quantizer(module: nn.Module) -> nn.Module | None:
    """A layer's weight fake quant (``weight_fake_quant``, whatever class it is)."""
    child = getattr(module, "weight_fake_quant", None)
    return child if isinstance(child, nn.Module) else None


def eager_quantizer(module: nn.Module) -> nn.Module | None:
    """The module holding an eager layer's output scale: its ``activation_post_process``
    (whatever class it is)."""
    child = getattr(module, "activation_post_process", None)
    return child if isinstance(child, nn.Module) else None


# -- FX models -------------------------------------------------------------------------

@dataclass
class FxPlan:
    """What each node of a GraphModule reports (see the module docstring)."""
    layers: dict = field(default_factory=dict)       # node -> Layer (its row, if any)
    observer: dict = field(default_factory=dict)     # quantizer node -> the node it reports
    observed: set = field(default_factory=set)       # nodes reported at their quantizer
    producer: dict = field(default_factory=dict)     # node -> node whose output it consumes
    inplace: set = field(default_factory=set)        # nodes that may write into an input
    writes: dict = field(default_factory=dict)       # such a node -> nodes whose values
    #                                                  it may change (through views)
    modules: dict = field(default_factory=dict)      # call_module target -> its module
    last_uses: dict = field(default_factory=dict)    # node -> values last used by it
    observed_layers: dict = field(default_factory=dict)   # quantizer node -> the Layer it
    #                                   reports (with that quantizer), filled as it runs


_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def fx_plan(gm: torch.fx.GraphModule) -> FxPlan:
    """The plan of a GraphModule; the last one made is kept while the graph and the
    modules it calls are the same objects (a probe run again on the same model)."""
    modules = {}
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target not in modules:
            try:
                modules[node.target] = submodule(gm, node.target)
            except AttributeError:
                continue
    fingerprint = (id(gm.graph), len(gm.graph.nodes),
                   tuple((t, id(m), type(m)) for t, m in modules.items()))
    cached = _PLANS.get(gm)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    plan = _make_plan(gm, modules)
    _PLANS[gm] = (fingerprint, plan)
    return plan


def submodule(root: nn.Module, target: str):
    """getattr(root, "a.b.c") part by part; a child module straight from ``_modules``
    (what Module.__getattr__ would find, without its lookups) unless the class has an
    attribute of that name."""
    value = root
    for part in target.split("."):
        children = value.__dict__.get("_modules") if isinstance(value, nn.Module) else None
        child = children.get(part) if children is not None else None
        if child is not None and part not in value.__dict__ and \
                getattr(type(value), part, None) is None:
            value = child
        else:
            value = getattr(value, part)
    return value


def _last_uses(graph) -> dict:
    """node -> the values whose last use it is (freed after it runs)."""
    seen: set = set()
    last: dict = {}
    for node in reversed(graph.nodes):
        for used in node._input_nodes:
            if used not in seen:
                seen.add(used)
                last.setdefault(node, []).append(used)
    return last


def _make_plan(gm: torch.fx.GraphModule, modules: dict) -> FxPlan:
    _PATHS.clear()
    plan = FxPlan(modules=modules, last_uses=_last_uses(gm.graph))
    quantizer_nodes = set()
    for node in gm.graph.nodes:
        if node.op == "call_module" and node.target in modules and \
                is_quantizer_slot(node.target, modules[node.target]):
            quantizer_nodes.add(node)
    tensorish: dict = {}
    counts: dict[str, int] = {}
    childless = _childless_paths(gm)
    for node in gm.graph.nodes:
        tensorish[node] = _is_tensorish(node, tensorish)
        if _writes_input(node, modules):
            plan.inplace.add(node)
            plan.writes[node] = _aliased(node, modules)
        if node in quantizer_nodes:
            source = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) \
                else None
            if source is not None and source not in quantizer_nodes \
                    and source not in plan.observed:
                plan.observer[node] = source
                plan.observed.add(source)
            continue
        first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        while first is not None and first in quantizer_nodes:
            first = first.args[0] if first.args and isinstance(first.args[0], torch.fx.Node) \
                else None
        if first is not None:
            plan.producer[node] = first
        layer = _node_layer(node, modules, tensorish, counts, childless)
        if layer is not None:
            plan.layers[node] = layer
    _PATHS.clear()
    return plan


def _is_tensorish(node, known: dict) -> bool:
    if node.op in ("placeholder", "call_module", "get_attr"):
        return True
    if node.op not in ("call_function", "call_method"):
        return False
    if op_kind(node.target) in NOT_TENSOR or node.target in (getattr, len):
        return False
    inputs = [a for a in node.all_input_nodes]
    return any(known.get(a, False) for a in inputs)


_PATHS: dict = {}          # node -> its module paths, while one plan is made


def _stack_paths(node) -> list[str]:
    paths = _PATHS.get(node)
    if paths is not None:
        return paths
    stack = node.meta.get("nn_module_stack") if hasattr(node, "meta") else None
    paths = []
    for value in (stack or {}).values():
        path = value[0] if isinstance(value, tuple) and value else value
        if isinstance(path, str):
            paths.append(path)
    _PATHS[node] = paths
    return paths


def _writes_input(node, modules: dict) -> bool:
    if node.op == "call_module":
        module = modules.get(node.target)
        return module is not None and module.__dict__.get("inplace") is True
    if node.op in ("call_function", "call_method"):
        return is_inplace_call(node.target, node.kwargs)
    return False


# ops whose output may share its input's storage
_VIEWS = frozenset({"view", "reshape", "flatten", "permute", "transpose", "getitem",
                    "squeeze", "unsqueeze", "expand", "expand_as", "contiguous", "t",
                    "narrow", "select", "chunk", "split", "unbind", "detach", "view_as",
                    "reshape_as", "unflatten", "movedim", "to", "float", "type", "type_as",
                    "as_strided", "diagonal", "swapaxes", "swapdims", "real", "imag"})


def _aliased(node, modules: dict) -> tuple:
    """The nodes whose values an in-place node may write: its target argument (or
    ``out``) and, through view ops, the nodes that one views."""
    found, todo = [], [a for a in (node.args[:1] + (node.kwargs.get("out"),))
                       if isinstance(a, torch.fx.Node)]
    while todo:
        current = todo.pop()
        if current in found:
            continue
        found.append(current)
        source = current.args[0] if current.args and isinstance(current.args[0], torch.fx.Node) \
            else None
        if source is None:
            continue
        if current.op in ("call_function", "call_method") and op_kind(current.target) in _VIEWS:
            todo.append(source)
        elif current.op == "call_module" and identity_kind(modules.get(current.target)):
            todo.append(source)
    return tuple(found)


def _childless_paths(gm) -> dict[str, type]:
    """Module paths in the node stacks with no module below them -> their class: the
    childless modules FX traced through (gone from the GraphModule itself)."""
    kinds: dict[str, type] = {}
    every: set[str] = set()
    for node in gm.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        for value in stack.values():
            if isinstance(value, tuple) and len(value) > 1 and isinstance(value[0], str):
                kinds.setdefault(value[0], value[1])
                every.add(value[0])
        if node.op in ("call_module", "get_attr"):
            every.add(str(node.target))
    parents = set()
    for path in every:
        parts = path.split(".")
        parents.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return {p: k for p, k in kinds.items() if p and p not in parents and isinstance(k, type)}


def _node_layer(node, modules: dict, tensorish: dict, counts: dict,
                childless: dict) -> Layer | None:
    if node.op == "placeholder":
        name = str(node.target).lstrip("*")
        return Layer(name, "torch.Tensor", is_input=True)
    if node.op == "call_module":
        module = modules.get(node.target)
        if module is None:
            return None
        return Layer(str(node.target), class_path(module), tokens=fusion_tokens(module),
                     kind=identity_kind(module), weight_quantizer=weight_quantizer(module))
    if node.op == "get_attr":
        return Layer(str(node.target), "torch.Tensor")
    if node.op not in ("call_function", "call_method") or not tensorish.get(node):
        return None
    kind = op_kind(node.target)
    paths = _stack_paths(node)
    inner = paths[-1] if paths else ""
    if inner in childless and inner not in modules:
        # a childless module traced through: one layer, as an eager model sees it, named
        # at its output node; the ops inside are its internals
        if not _is_output_of(node, inner, _stack_paths):
            return None
        return Layer(inner, class_path(childless[inner]))
    base = f"{inner}.{kind}" if inner else kind
    seen = counts.get(base, 0)
    counts[base] = seen + 1
    name = base if seen == 0 else f"{base}_{seen}"
    return Layer(name, function_path(node.target), tokens=function_tokens(kind), kind=kind)


def _is_output_of(node, path: str, paths_of) -> bool:
    users = list(node.users)
    if not users:
        return True
    for user in users:
        if user.op == "output":
            return True
        if path not in paths_of(user):
            # a quantizer of this node has no stack: look at what uses the quantizer
            if user.op == "call_module" and _SLOT.search(str(user.target)):
                if _is_output_of(user, path, paths_of):
                    return True
                continue
            return True
    return False


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
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        value = float(scale)
    else:
        value = float(scale) if isinstance(scale, torch.Tensor) and scale.numel() == 1 \
            else None
    return value, dtype_label(quantizer)


def dtype_label(quantizer: nn.Module) -> str | None:
    """``qint8``, ``quint8``, ``qint16``, ``quint4`` ... from the quantizer's integer range:
    a 4-bit range in a quint8 container is quint4, x86's reduced 0..127 range quint7."""
    qmin, qmax = getattr(quantizer, "quant_min", None), getattr(quantizer, "quant_max", None)
    dtype = getattr(quantizer, "dtype", None)
    if not isinstance(qmin, int) or not isinstance(qmax, int) or qmax <= qmin:
        return str(dtype).replace("torch.", "") if isinstance(dtype, torch.dtype) else None
    return f"{'qint' if qmin < 0 else 'quint'}{(qmax - qmin).bit_length()}"

