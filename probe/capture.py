"""Run the two models, report every layer output (layers.py names them), and turn each
analysis output into one compare_per_layer row against the baseline output that
computes the same thing.

How outputs are seen: a GraphModule (FX-prepared QAT, fuse_fx) runs node by node
(``torch.fx.Interpreter``): each node's value is at hand, function nodes included, with
its name from the node's module stack. An eager model runs with forward hooks on its
layers, and function ops its containers call (``x + y`` in a residual block) are seen
through a ``TorchFunctionMode``, named by the module running them.

Which baseline output a row compares with (knowledge.md R3.12): the one of the same name
when both compute the same; a fused analysis module (conv-bn-relu ...) is compared with
the baseline output at the end of the same pattern (its ReLU) instead of the baseline's
conv; an analysis output with no baseline output computing the same is a row flagged
``unaligned`` without metrics; an analysis output inside a pattern the baseline
computes as one module is flagged ``fused_intermediate`` without metrics.

Memory stays bounded: baseline outputs are kept in memory up to a budget (a quarter of
the available memory, 2 GiB at most) and spilled to a temporary file beyond it; each is
dropped once compared.
"""

from __future__ import annotations

import inspect
import math
import os
import tempfile
import threading
import weakref
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn

from qcdoctor.errors import QcdoctorError
from qcdoctor.probe.layers import (
    FOLLOWERS,
    NOT_TENSOR,
    PASS_THROUGH,
    Layer,
    class_path,
    eager_quantizer,
    function_path,
    function_tokens,
    fusion_tokens,
    fx_plan,
    identity_kind,
    is_fused,
    is_inplace_call,
    is_quantizer_slot,
    op_kind,
    output_scale,
    submodule,
)
from qcdoctor.probe.own_error import OwnTap
from qcdoctor.probe.stats import (
    flatten_output,
    flattened,
    pair_stats,
    shape_text,
    side_stats,
)

Key = tuple[str, int]          # (output name, how many times that name ran before)
Sig = tuple                    # (chain head key, fusion tokens BN aside)

# how a row's baseline output was found (the ``match`` column)
SAME, PATTERN_END, UNALIGNED, INTERMEDIATE = "name", "pattern_end", "unaligned", \
    "fused_intermediate"


def _ram_budget() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return min(int(line.split()[1]) * 1024 // 4, 2 << 30)
    except (OSError, ValueError, IndexError):
        pass
    return 512 << 20


class _Held:
    """A model tensor kept by reference until it is measured (no copy of every output):
    copied first when the model is about to change it in place (_Guard, the FX plan), or
    waited for while a worker reads it (``sync``: the worker's condition)."""

    __slots__ = ("tensor", "version", "state", "sync")
    PENDING, READING, FINISHED = 0, 1, 2

    def __init__(self, tensor: torch.Tensor, sync: threading.Condition | None = None):
        # inference tensors keep no version counter: held ones are protected by the graph
        self.tensor, self.state, self.sync = tensor, self.PENDING, sync
        self.version = None if tensor.is_inference() else tensor._version

    def secure(self) -> None:
        """Before an in-place op of the model on it: keep a copy (or let the reader
        finish)."""
        if self.sync is None:
            if self.state == self.PENDING:
                self.tensor, self.state, self.version = self.tensor.clone(), self.FINISHED, None
            return
        with self.sync:
            while self.state == self.READING:
                self.sync.wait()
            if self.state == self.PENDING:
                self.tensor, self.state, self.version = self.tensor.clone(), self.FINISHED, None

    def read(self) -> tuple[torch.Tensor, bool]:
        """(the tensor, whether it is as it was when held); the reader's turn."""
        with self.sync:
            if self.state == self.PENDING:
                self.state = self.READING
            return self.tensor, self.version is None or self.tensor._version == self.version

    def release(self, keep: bool = False) -> None:
        """The reader is done; ``keep``: the tensor stays held for a later reader."""
        with self.sync:
            if keep:
                if self.state == self.READING:
                    self.state = self.PENDING
            else:
                self.state, self.tensor = self.FINISHED, None
            self.sync.notify_all()


class _Guard:
    """The held tensors, found by their own id and their base's (a view shares its
    base's storage); ``protect`` before every in-place op of the model."""

    def __init__(self, sync: threading.Condition | None = None):
        self._held: dict[int, list[_Held]] = {}
        self._sync = sync

    def hold(self, tensor: torch.Tensor) -> _Held:
        held = _Held(tensor, self._sync)
        self._held.setdefault(id(tensor), []).append(held)
        base = tensor._base
        if base is not None:
            self._held.setdefault(id(base), []).append(held)
        return held

    def protect(self, values) -> None:
        if not self._held:
            return
        for value in values:
            if isinstance(value, torch.Tensor):
                for key in (id(value), id(value._base) if value._base is not None else None):
                    for held in self._held.pop(key, ()):
                        held.secure()
            elif isinstance(value, (list, tuple)):
                self.protect(value)

    def release(self, held: _Held) -> None:
        """No longer held (an output dropped unused): the model's memory is its own again
        (reused while it runs, where a held tensor makes it allocate afresh)."""
        tensor = held.tensor
        if tensor is None:
            return
        for key in (id(tensor), id(tensor._base) if tensor._base is not None else None):
            holders = self._held.get(key)
            if holders is not None and held in holders:
                holders.remove(held)
                if not holders:
                    del self._held[key]

    def clear(self) -> None:
        self._held.clear()


class _Store:
    """Baseline outputs: in memory up to a budget (by reference while the baseline runs,
    copied only before the model changes one in place), on disk beyond it."""

    def __init__(self, budget: int | None = None, guard: _Guard | None = None):
        self._budget = _ram_budget() if budget is None else budget
        self._used = 0
        self._guard = guard
        self._ram: dict[Key, _Held | torch.Tensor] = {}
        self._files: dict[Key, tuple[Path, tuple]] = {}
        self._dir: tempfile.TemporaryDirectory | None = None
        self._recent: tuple[Key, torch.Tensor] | None = None

    def put(self, key: Key, tensor: torch.Tensor) -> _Held | None:
        size = tensor.numel() * 4
        if self._used + size <= self._budget:
            self._used += size
            if self._guard is not None and tensor.is_cpu and tensor.dtype == torch.float32:
                held = self._ram[key] = self._guard.hold(tensor)
                return held
            self._ram[key] = tensor.detach().to("cpu", torch.float32, copy=True)
            return None
        copy = tensor.detach().to("cpu", torch.float32, copy=True,
                                  memory_format=torch.contiguous_format)
        if self._dir is None:
            self._dir = tempfile.TemporaryDirectory(prefix="qcdoctor-probe-")
        path = Path(self._dir.name) / str(len(self._files))
        copy.numpy().tofile(path)
        self._files[key] = (path, tuple(copy.shape))
        return None

    def drop(self, key: Key) -> None:
        entry = self._ram.pop(key, None)
        tensor = _value(entry)
        if tensor is not None:
            self._used -= tensor.numel() * 4
        if isinstance(entry, _Held) and self._guard is not None:
            self._guard.release(entry)
        spilled = self._files.pop(key, None)
        if spilled is not None:
            spilled[0].unlink(missing_ok=True)

    def peek(self, key: Key) -> torch.Tensor | None:
        if self._recent is not None and self._recent[0] == key:
            return self._recent[1]
        if key in self._ram:
            return _value(self._ram[key])
        if key in self._files:
            path, shape = self._files[key]
            return torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape))
        return None

    def take(self, key: Key) -> torch.Tensor | None:
        """The output, dropped from the store; the last one taken stays at hand (a
        follower of a fused intermediate compares with it again)."""
        if self._recent is not None and self._recent[0] == key:
            return self._recent[1]
        tensor = _value(self._ram.pop(key, None))
        if tensor is not None:
            self._used -= tensor.numel() * 4
        elif key in self._files:
            path, shape = self._files.pop(key)
            tensor = torch.from_numpy(np.fromfile(path, dtype=np.float32).reshape(shape))
            path.unlink(missing_ok=True)
        else:
            return None
        self._recent = (key, tensor)
        return tensor

    def kept(self, key: Key) -> torch.Tensor | None:
        """The copy kept in memory for ``key`` (None: held by reference, or on disk)."""
        entry = self._ram.get(key)
        return entry if isinstance(entry, torch.Tensor) else None

    def changed(self) -> list[Key]:
        """Outputs the model changed in place after they were held (not seen coming)."""
        return [key for key, held in self._ram.items()
                if isinstance(held, _Held) and held.tensor is not None
                and held.version is not None and held.tensor._version != held.version]

    def close(self) -> None:
        self._ram.clear()
        self._recent = None
        if self._dir is not None:
            self._dir.cleanup()


def _as_they_were(entries: dict) -> dict:
    """The baseline outputs as the baseline made them, once it has run: a held one is
    its copy where the model was about to write it; one changed unseen is left out."""
    values = {}
    for key, entry in entries.items():
        if isinstance(entry, _Held):
            if entry.tensor is None or (entry.version is not None
                                        and entry.tensor._version != entry.version):
                continue
            values[key] = entry.tensor
        else:
            values[key] = entry
    return values


def _value(entry) -> torch.Tensor | None:
    return entry.tensor if isinstance(entry, _Held) else entry


class _Recorder:
    """Keys and fusion chains of one model's outputs, in execution order."""

    def __init__(self, on_output):
        self.seen: dict[str, int] = {}
        self.chains: dict[Key, tuple[Key, tuple]] = {}
        self.on_output = on_output          # (key, layer, tensor, sig, producer key)
        self.held: list = []                # what on_output returned for the last report

    def report(self, layer: Layer, value, producer: Key | None) -> list[Key]:
        if type(value) is torch.Tensor and not value.is_quantized and value.is_floating_point():
            # the common case, without a copy of it
            name = layer.name
            seen = self.seen.get(name, 0)
            self.seen[name] = seen + 1
            key = (name, seen)
            self.held = [self.on_output(key, layer, value, self._sig(key, layer, producer),
                                        producer)]
            return [key]
        outputs = flatten_output(value, layer.name)
        keys, self.held = [], []
        # (the eager tap reports with torch functions disabled: its own ops are no model's)
        for suffix, tensor in outputs:
            seen = self.seen.get(suffix, 0)
            self.seen[suffix] = seen + 1
            key = (suffix, seen)
            sig = self._sig(key, layer, producer) if len(outputs) == 1 else None
            self.held.append(self.on_output(key, layer, tensor, sig, producer))
            keys.append(key)
        return keys

    def _sig(self, key: Key, layer: Layer, producer: Key | None) -> Sig | None:
        tokens = layer.tokens
        if not tokens:
            return None
        before = self.chains.get(producer) if producer is not None else None
        if tokens[0] in FOLLOWERS and before is not None:
            chain = (before[0], before[1] + tokens)
        else:
            chain = (key, tokens)
        self.chains[key] = chain
        return chain[0], _without_bn(chain[1])


_NO_BN: dict[tuple, tuple] = {}     # fusion tokens -> the same without "Bn" (a few kinds)


def _without_bn(tokens: tuple) -> tuple:
    found = _NO_BN.get(tokens)
    if found is None:
        found = tuple(t for t in tokens if t != "Bn")
        if len(_NO_BN) < 4096:
            _NO_BN[tokens] = found
    return found


# -- running a model ---------------------------------------------------------------------

class _FxTap:
    """A GraphModule run node by node, each planned node's value reported. A lean loop
    over the graph (a third of torch.fx.Interpreter's cost per node): values are freed
    after their last use, as the generated forward frees them."""

    def __init__(self, gm, plan, recorder: _Recorder, keep, guard: _Guard | None,
                 own: dict | None = None):
        self.gm, self.plan, self.recorder, self.keep, self.guard = gm, plan, recorder, keep, \
            guard
        self.node_keys: dict = {}
        self.held: dict = {}                # node -> its value, held for a worker
        # each layer's own error, measured beside the run (own_error.OwnTap)
        self.own = None if own is None else \
            OwnTap(plan, own["base"], own["counterpart"], self.node_keys, own.get("sides"))

    def run(self, *values):
        if type(self.gm.graph._codegen) is not torch.fx.graph.CodeGen:
            # inputs and outputs rearranged by the codegen: torch's own interpreter
            return _InterpreterTap(self).run(*values)
        env: dict = {}
        inputs = iter(values)
        plan = self.plan
        last_uses, modules, inplace = plan.last_uses, plan.modules, plan.inplace
        gm, node_type = self.gm, torch.fx.Node
        fetch = env.__getitem__
        nested = (tuple, list, dict, slice)
        after = self.after
        own = self.own
        module = None
        for node in self.gm.graph.nodes:
            op = node.op
            if op == "placeholder":
                value = next(inputs)
            elif op == "output":
                return torch.fx.node.map_arg(node.args[0], fetch)
            elif op == "get_attr":
                value = _attr(gm, node.target)
            else:
                args = node.args
                if len(args) == 1 and type(args[0]) is node_type:
                    args = (env[args[0]],)                  # the common case
                elif not any(isinstance(a, nested) for a in args):
                    args = tuple(env[a] if type(a) is node_type else a for a in args)
                else:
                    args = torch.fx.node.map_arg(args, fetch)
                kwargs = torch.fx.node.map_arg(node.kwargs, fetch) if node.kwargs else {}
                if node in inplace:
                    self.before_inplace(node, args, kwargs)
                if op == "call_module":
                    module = modules.get(node.target)
                    if module is None:
                        module = _attr(gm, node.target)
                    value = module(*args, **kwargs)
                elif op == "call_function":
                    value = node.target(*args, **kwargs)
                else:
                    value = getattr(args[0], node.target)(*args[1:], **kwargs)
            env[node] = value
            after(node, value)
            if own is not None:
                own.after(node, value, module if op == "call_module" else None)
            for dead in last_uses.get(node, ()):
                del env[dead]
                if own is not None:
                    own.forget(dead)
        return None

    def before_inplace(self, node, args, kwargs) -> None:
        # the graph says which values this op may write: copy those still held first
        for written in self.plan.writes.get(node, ()):
            held = self.held.pop(written, None)
            if held is not None:
                held.secure()
        if self.guard is not None:
            self.guard.protect(args)
            self.guard.protect(kwargs.values())

    def after(self, n, value) -> None:
        plan = self.plan
        source = plan.observer.get(n)
        if source is not None:
            if source in plan.layers:
                # kept with the plan: its quantizer is the plan's module (same graph, same
                # modules, or another plan)
                layer = plan.observed_layers.get(n)
                if layer is None:
                    layer = plan.observed_layers[n] = replace(
                        plan.layers[source], quantizer=_attr(self.gm, n.target))
                self._report(source, layer, value, n)
        elif n in plan.layers and n not in plan.observed:
            layer = plan.layers[n]
            if self.keep(layer):
                self._report(n, layer, value, n)

    def _report(self, node, layer: Layer, value, value_node) -> None:
        producer = self.plan.producer.get(node)
        keys = self.recorder.report(layer, value, self.node_keys.get(producer))
        if len(keys) == 1:
            self.node_keys[node] = keys[0]
        for held in self.recorder.held:
            if held is not None:
                self.held[value_node] = held


class _InterpreterTap(torch.fx.Interpreter):
    """torch's interpreter with the tap's reports (graphs with their own codegen)."""

    def __init__(self, tap: _FxTap):
        super().__init__(tap.gm)
        self.tap = tap

    def run_node(self, n):
        if n in self.tap.plan.inplace:
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            self.tap.before_inplace(n, args, kwargs)
        value = super().run_node(n)
        self.tap.after(n, value)
        return value


def _attr(gm, target: str):
    return submodule(gm, target)


def _placeholder_args(gm, args: tuple, kwargs: dict) -> list | None:
    """The forward's arguments in placeholder order; None when they do not map."""
    values = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        name = str(node.target)
        if name.startswith("*"):
            return None
        if i < len(args):
            values.append(args[i])
        elif name in kwargs:
            values.append(kwargs[name])
        elif node.args:
            values.append(node.args[0])
        else:
            return None
    if len(args) > len(placeholders) or set(kwargs) - {str(n.target) for n in placeholders}:
        return None
    return values


def _is_fx_leaf(module: nn.Module) -> bool:
    """A module FX keeps as one call (torch.nn and torch.ao.nn modules but containers)."""
    path = type(module).__module__ or ""
    return path.startswith(("torch.nn", "torch.ao.nn")) and \
        not isinstance(module, (nn.Sequential, nn.ModuleList, nn.ModuleDict))


_EAGER_LAYERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_SIGNATURES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _signature(forward) -> inspect.Signature:
    """inspect.signature(forward), kept per function (it costs a tenth of a millisecond)."""
    function = getattr(forward, "__func__", None)
    if function is None or getattr(forward, "__self__", None) is None:
        return inspect.signature(forward)
    try:
        found = _SIGNATURES.get(function)
    except TypeError:                       # not weakly referenceable
        return inspect.signature(forward)
    if found is None:
        found = _SIGNATURES[function] = inspect.signature(forward)
    return found


def _module_tree(model: nn.Module) -> list:
    """What an eager model's layers depend on, depth first: each module's identity, class,
    whether it carries forward hooks, and its children's names (cheaper than naming the
    layers)."""
    tree, todo = [], [model]
    while todo:
        module = todo.pop()
        children = module._modules
        tree += (id(module), type(module), not module._forward_hooks, len(children))
        tree += children
        todo += [child for child in reversed(children.values()) if child is not None]
    return tree


class _EagerTap:
    """Forward hooks on an eager model's layers, and its containers' function ops."""

    def __init__(self, model: nn.Module, recorder: _Recorder, keep, *, quantized: bool,
                 guard: _Guard | None = None):
        self.model, self.recorder, self.keep, self.guard = model, recorder, keep, guard
        self.quantized = quantized
        self.stack: list[str] = []
        self.last: tuple[object, Key] | None = None      # the last output reported
        self.fn_counts: dict[str, int] = {}
        self.containers: set[str] = set()   # modules whose function ops are reported

    def _walk(self, module: nn.Module, prefix: str, found: list):
        for name, child in module.named_children():
            full = f"{prefix}.{name}" if prefix else name
            if is_quantizer_slot(full, child):
                continue
            if is_fused(child) or _is_fx_leaf(child) or \
                    not any(not is_quantizer_slot(f"{full}.{n}", c)
                            for n, c in child.named_children()):
                found.append((full, child, True))
            else:
                found.append((full, child, False))
                self._walk(child, full, found)

    def _entries(self) -> tuple[dict, set]:
        """id(module) -> (name, its Layer or None for a container, whether it reports at
        a hook of its own), and the containers' names. Kept while the model's module
        tree stays the same (a probe run again on the same model)."""
        tree = _module_tree(self.model)
        cached = _EAGER_LAYERS.get(self.model)
        if cached is not None and cached[0] == tree and cached[1] == self.quantized:
            return cached[2], cached[3]
        found: list = []
        self._walk(self.model, "", found)
        if found:
            found.insert(0, ("", self.model, False))
        else:
            found = [("", self.model, True)]
        entries: dict[int, tuple[str, Layer | None, bool]] = {}
        containers: set[str] = set()
        for name, module, is_layer in found:
            if id(module) in entries:
                continue                       # a shared module: its first name
            if not is_layer:
                containers.add(name)
                entries[id(module)] = (name, None, False)
                continue
            q = eager_quantizer(module) if self.quantized else None
            layer = Layer(name, class_path(module), q, tokens=fusion_tokens(module),
                          kind=identity_kind(module))
            entries[id(module)] = (name, layer, bool(module._forward_hooks))
        # by id, not by module: the cache holds no reference to the model it is keyed by
        _EAGER_LAYERS[self.model] = (tree, self.quantized, entries, containers)
        return entries, containers

    @contextmanager
    def active(self):
        """Two global module hooks keep the stack of running modules (every module call,
        so the ops inside a quantizer or a layer are never taken for a container's);
        layers report at the global forward hook, or at a hook of their own when they
        carry hooks already (eager prepare's observer hook: the output after it counts).
        While a quiet torch.nn layer runs (_QUIET: a conv, a BN ...) the function tap is
        taken off the mode stack: it would only pass the layer's own ops through."""
        from torch.nn.modules.module import (
            register_module_forward_hook,
            register_module_forward_pre_hook,
        )
        entries, self.containers = self._entries()
        handles = []
        if any(entry[2] for entry in entries.values()):
            for module in self.model.modules():
                entry = entries.get(id(module))
                if entry is not None and entry[2]:
                    handles.append(module.register_forward_hook(
                        self._layer_out(entry[0], entry[1]), always_call=True))
        stack, guard, keep, get = self.stack, self.guard, self.keep, entries.get
        disabled = torch._C.DisableTorchFunction
        mode = _FunctionTap(self)
        quiet: list = []            # the running quiet layer, the mode taken off for it
        depth, top = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
        take_off, put_back = torch._C._pop_torch_function_stack, \
            torch._C._push_on_torch_function_stack

        def pre(module, args):
            entry = get(id(module))
            stack.append(entry[0] if entry is not None else None)
            if guard is not None and module.__dict__.get("inplace") is True:
                guard.protect(args)
            if type(module) in _QUIET and alone[0] and not module._modules and \
                    not module._forward_pre_hooks and not quiet and \
                    "forward" not in module.__dict__:
                count = depth()
                if count and top(count - 1) is mode:
                    take_off()
                    quiet.append(module)

        def post(module, args, out):
            if quiet and quiet[-1] is module:
                quiet.pop()
                put_back(mode)
            entry = get(id(module))
            if entry is None:
                if stack:
                    stack.pop()
                return
            if entry[2]:
                return                         # its own hook pops and reports
            if stack:
                stack.pop()
            layer = entry[1]
            if layer is not None and keep(layer):
                with disabled():               # our own ops are no model ops
                    self._report(layer, out, self._producer(args))

        pre_handle = register_module_forward_pre_hook(pre)
        post_handle = register_module_forward_hook(post, always_call=True)
        handles += [pre_handle, post_handle]
        # a quiet layer runs without the mode only where no other global hook runs
        # between its pre-hook and its forward hook (it would see the mode off)
        from torch.nn.modules.module import _global_forward_hooks, _global_forward_pre_hooks
        alone = [next(reversed(_global_forward_pre_hooks)) == pre_handle.id and
                 next(iter(_global_forward_hooks)) == post_handle.id]
        try:
            with mode:
                try:
                    yield
                finally:
                    if quiet:                  # left by an interrupt: the mode goes back
                        quiet.clear()
                        put_back(mode)
        finally:
            for handle in handles:
                handle.remove()

    def inputs(self, args: tuple, kwargs: dict) -> None:
        """The model inputs as outputs named by the forward's arguments."""
        try:
            bound = _signature(self.model.forward).bind(*args, **kwargs)
        except (TypeError, ValueError):
            return
        for name, value in bound.arguments.items():
            if flatten_output(value):
                self._report(Layer(name, "torch.Tensor", is_input=True), value, None)

    def attributes(self, names) -> None:
        """Tensors the model holds (a position embedding) that a traced model reads as
        nodes of their own (get_attr), reported before the forward."""
        for name in names:
            try:
                value = _attr(self.model, name)
            except AttributeError:
                continue
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                self._report(Layer(name, "torch.Tensor"), value.detach(), None)

    def _layer_out(self, name: str, layer: Layer):
        def hook(_module, args, out):
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            if self.keep(layer):
                with torch._C.DisableTorchFunction():
                    self._report(layer, out, self._producer(args))
        return hook

    def _producer(self, args) -> Key | None:
        first = args[0] if args else None
        if self.last is not None and first is not None and first is self.last[0]:
            return self.last[1]
        return None

    def _report(self, layer: Layer, value, producer: Key | None) -> None:
        keys = self.recorder.report(layer, value, producer)
        if len(keys) == 1:
            self.last = (value, keys[0])

    def function_out(self, where: str, func, args, result) -> None:
        known = _FUNCTIONS.get(func)
        if known is None:
            kind = op_kind(func)
            known = _FUNCTIONS[func] = (kind, function_path(func), function_tokens(kind))
        kind = known[0]
        if kind in NOT_TENSOR:
            return
        if type(result) is torch.Tensor and not result.is_quantized:
            if not result.is_floating_point():
                return                         # (complex included, as flatten_output has it)
        else:
            tensors = flatten_output(result)
            if not tensors or not all(t.is_floating_point() for _, t in tensors):
                return
        base = f"{where}.{kind}" if where else kind
        seen = self.fn_counts.get(base, 0)
        self.fn_counts[base] = seen + 1
        name = base if seen == 0 else f"{base}_{seen}"
        layer = Layer(name, known[1], tokens=known[2], kind=kind)
        if not self.keep(layer):
            return
        keys = self.recorder.report(layer, result, self._producer(args))
        if len(keys) == 1:
            self.last = (result, keys[0])


def _quiet_types() -> frozenset:
    """torch.nn layers whose ops the function tap never needs to see: none of them is
    reported (they run inside a layer) and they write into their input only when their
    ``inplace`` flag says so (protected at the module's pre-hook). Exact classes only (a
    subclass has a forward of its own); childless, without pre-hooks or a forward of
    their own."""
    names = ("Conv1d Conv2d Conv3d ConvTranspose1d ConvTranspose2d ConvTranspose3d Linear "
             "Bilinear BatchNorm1d BatchNorm2d BatchNorm3d LayerNorm GroupNorm InstanceNorm1d "
             "InstanceNorm2d InstanceNorm3d LocalResponseNorm RMSNorm ReLU ReLU6 LeakyReLU "
             "PReLU ELU SELU CELU GELU SiLU Mish Sigmoid Tanh Hardtanh Hardswish Hardsigmoid "
             "LogSigmoid Softplus Softsign Tanhshrink Threshold GLU Hardshrink Softshrink "
             "Softmax LogSoftmax Softmin Softmax2d MaxPool1d MaxPool2d MaxPool3d AvgPool1d "
             "AvgPool2d AvgPool3d AdaptiveAvgPool1d AdaptiveAvgPool2d AdaptiveAvgPool3d "
             "AdaptiveMaxPool1d AdaptiveMaxPool2d AdaptiveMaxPool3d LPPool1d LPPool2d Dropout "
             "Dropout1d Dropout2d Dropout3d AlphaDropout FeatureAlphaDropout Identity Flatten "
             "Unflatten Upsample UpsamplingNearest2d UpsamplingBilinear2d PixelShuffle "
             "PixelUnshuffle ChannelShuffle ZeroPad1d ZeroPad2d ZeroPad3d ConstantPad1d "
             "ConstantPad2d ConstantPad3d ReflectionPad1d ReflectionPad2d ReflectionPad3d "
             "ReplicationPad1d ReplicationPad2d ReplicationPad3d").split()
    return frozenset(getattr(nn, name) for name in names if hasattr(nn, name))


_QUIET = _quiet_types()
_WRITES: dict = {}          # function -> whether it writes into its first argument
_FUNCTIONS: dict = {}       # function -> (op_kind, function_path, function_tokens)


class _FunctionTap(torch.overrides.TorchFunctionMode):
    def __init__(self, tap: _EagerTap):
        super().__init__()
        self.tap = tap

    def __torch_function__(self, func, types, args=(), kwargs=None):
        tap = self.tap
        if tap.guard is not None:
            writes = _WRITES.get(func)
            if writes is None:
                writes = _WRITES[func] = is_inplace_call(func)
            if writes or (kwargs and is_inplace_call("", kwargs)):
                tap.guard.protect(args[:1])
                if kwargs and kwargs.get("out") is not None:
                    tap.guard.protect((kwargs["out"],))
        result = func(*args, **kwargs) if kwargs else func(*args)
        stack = tap.stack
        if stack:
            where = stack[-1]
            if where is not None and where in tap.containers:
                tap.function_out(where, func, args, result)
        return result


# -- the two passes ----------------------------------------------------------------------

@dataclass
class _BaseOutput:
    layer: Layer
    stats: dict
    sig: Sig | None
    chain: tuple | None = None          # (head key, fusion tokens, BN included)


@dataclass
class LayerRows:
    rows: list[dict] = field(default_factory=list)
    baseline_only: list[str] = field(default_factory=list)
    analysis_only: list[str] = field(default_factory=list)
    aligned: dict[str, str] = field(default_factory=dict)      # row -> baseline output
    unaligned: list[str] = field(default_factory=list)
    fused_intermediates: list[str] = field(default_factory=list)   # flagged analysis rows
    absorbed: list[str] = field(default_factory=list)      # baseline outputs inside a pattern
    baseline_outputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    analysis_outputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    graph: object = None                 # the analysis (else baseline) GraphModule, if any
    graph_names: dict = field(default_factory=dict)     # its node -> row name
    changed: list[str] = field(default_factory=list)    # outputs changed in place unseen
    own_errors: list[dict] = field(default_factory=list)    # layer_own_error.csv's rows
    own_error_partial: bool = False     # baseline outputs past the memory budget: not all


def _run(model: nn.Module, args: tuple, kwargs: dict, recorder: _Recorder, keep, *,
         quantized: bool, inputs: bool, plan=None, guard: _Guard | None = None,
         attributes: tuple = (), own: dict | None = None):
    """One forward of ``model`` with its outputs reported; returns the model's output."""
    if plan is not None:
        values = _placeholder_args(model, args, kwargs)
        if values is not None:
            plan = replace(plan)
            if not inputs:
                # an input is compared only where the analysis model quantizes it
                plan.layers = {n: layer for n, layer in plan.layers.items()
                               if not layer.is_input or n in plan.observed}
            tap = _FxTap(model, plan, recorder, keep, guard, own)
            try:
                return tap.run(*values)
            finally:
                if tap.own is not None:
                    tap.own.close()
                    own["records"] = tap.own.records
    tap = _EagerTap(model, recorder, keep, quantized=quantized, guard=guard)
    if inputs:
        tap.inputs(args, kwargs)
    tap.attributes(attributes)
    with tap.active():
        return model(*args, **kwargs)


def _attributes(plan) -> tuple:
    """The tensors a traced analysis model reads with get_attr, by qualified name."""
    if plan is None:
        return ()
    return tuple(layer.name for node, layer in plan.layers.items() if node.op == "get_attr")


def _wanted_pass_through(plan) -> set[str]:
    """Pass-through ops the analysis model quantizes (so the baseline keeps them)."""
    if plan is None:
        return set()
    return {plan.layers[n].name for n in plan.observed
            if n in plan.layers and plan.layers[n].kind in PASS_THROUGH}


# the own error is measured wherever the analysis model is traced (bench/bench_probe.py
# switches it off to price it)
MEASURE_OWN_ERROR = True


def compare_layers(baseline: nn.Module, analysis: nn.Module, args: tuple,
                   kwargs: dict) -> LayerRows:
    """Rows in the analysis model's execution order, and both models' outputs."""
    # an analysis GraphModule says which held values an in-place op may change; an eager
    # model's tensors are copied for the worker
    plans = [fx_plan(m) if isinstance(m, torch.fx.GraphModule) else None
             for m in (baseline, analysis)]
    traced = plans[1] is not None and _placeholder_args(analysis, args, kwargs) is not None
    maker = _RowMaker(copy=not traced)
    # each layer's own error needs the baseline's outputs while the analysis model runs
    # (a traced analysis model: its nodes say what each layer reads)
    own = {"base": {}, "counterpart": {}, "bytes": 0, "budget": _ram_budget(),
           "partial": False, "records": [],
           # a baseline output's side numbers, once its row measured them (its sum of
           # squares serves the own error too)
           "sides": lambda key: base[key].stats if key in base else None} \
        if traced and MEASURE_OWN_ERROR else None
    # baseline outputs are measured in their rows, once the baseline is done: no reader
    # while the baseline runs (nor for outputs no row compares)
    base_guard = _Guard()
    store = _Store(guard=base_guard)
    base: dict[Key, _BaseOutput] = {}
    by_sig: dict[Sig, Key] = {}
    wanted = _wanted_pass_through(plans[1])
    # baseline outputs the analysis looks up by name alone (ops without fusion tokens);
    # None: any (an eager analysis model, its names unknown before it runs)
    by_name = None if plans[1] is None else \
        {layer.name for layer in plans[1].layers.values() if layer.tokens is None}

    def keep_base(layer: Layer) -> bool:
        return layer.kind not in PASS_THROUGH or layer.name in wanted

    def on_base(key, layer, tensor, sig, _producer) -> None:
        base[key] = _BaseOutput(layer, None, sig, base_recorder.chains.get(key))
        held = store.put(key, tensor)
        if own is not None and key[1] == 0:
            # the store's own entry: copied before the baseline writes it in place
            entry = held if held is not None else store.kept(key)
            size = tensor.numel() * tensor.element_size()
            if entry is not None and own["bytes"] + size <= own["budget"]:
                own["base"][key] = entry
                own["bytes"] += size
            else:
                own["partial"] = True
        if sig is not None:
            before = by_sig.get(sig)
            by_sig[sig] = key
            if before is not None and by_name is not None and before[0] not in by_name:
                store.drop(before)       # inside a pattern (a conv before its BN): unused

    result = LayerRows()
    used: set[Key] = set()
    row_of: dict[Key, tuple[int, Key]] = {}     # analysis key -> (row index, baseline key)
    names: list[str] = []

    def keep_analysis(layer: Layer) -> bool:
        return layer.kind not in PASS_THROUGH

    def on_analysis(key, layer, tensor, sig, producer) -> None:
        target, how = _counterpart(key, sig, analysis_recorder.chains.get(key), base, by_sig)
        if target is None:
            result.analysis_only.append(key[0])
            return
        if how == UNALIGNED:
            seen = store.peek(target)
            held = maker.add(_unaligned_row, (key[0], target[0], base[target], layer, seen,
                                              tensor), 5)
            names.append(key[0])
            result.unaligned.append(key[0])
            return held
        before = row_of.get(producer) if producer is not None else None
        if before is not None and before[1] == target:
            # the producer's row compared an op inside the pattern with its end: flagged
            maker.blank[before[0]] = INTERMEDIATE
            result.fused_intermediates.append(names[before[0]])
            result.aligned.pop(names[before[0]], None)
        reference = store.take(target)
        if reference is None:                # spilled and lost: nothing to compare with
            result.analysis_only.append(key[0])
            return
        used.add(target)
        row_of[key] = (len(names), target)
        if own is not None and how != INTERMEDIATE:
            own["counterpart"][key] = target
        held = maker.add(_row, (key[0], target[0], base[target], layer,
                                reference.to(tensor.device), tensor, how), 5)
        names.append(key[0])
        if target[0] != key[0]:
            result.aligned[key[0]] = target[0]
        return held

    base_recorder = _Recorder(on_base)
    analysis_recorder = _Recorder(on_analysis)
    try:
        # not inference mode: views and versions tell in-place writes
        with torch.no_grad(), _running("baseline"):
            result.baseline_outputs = flatten_output(
                _run(baseline, args, kwargs, base_recorder, keep_base, quantized=False,
                     inputs=True, plan=plans[0], guard=base_guard,
                     attributes=_attributes(plans[1])))
        base_guard.clear()
        result.changed = [key[0] for key in store.changed()]
        if own is not None:
            own["base"] = _as_they_were(own["base"])
        with torch.inference_mode(), _running("analysis"):
            result.analysis_outputs = flatten_output(
                _run(analysis, args, kwargs, analysis_recorder, keep_analysis, quantized=True,
                     inputs=False, plan=plans[1], own=own))
        result.rows = maker.rows()
        result.changed += maker.changed
    finally:
        maker.close()
        store.close()
    _leftovers(result, base, used)
    if own is not None:
        result.own_errors = own["records"]
        result.own_error_partial = own["partial"]
        own["base"].clear()
    for model, plan in ((analysis, plans[1]), (baseline, plans[0])):
        if plan is not None:
            result.graph = model
            result.graph_names = {n: layer.name for n, layer in plan.layers.items()}
            break
    return result


@contextmanager
def _running(side: str):
    """A model that fails on the inputs (a shape it does not take, a missing argument) is
    one clear error naming the model, its own exception kept as the cause."""
    try:
        yield
    except QcdoctorError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
        lines = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise QcdoctorError(f"the {side} model fails on the inputs ({what})", key="inputs",
                            fix="give one forward call's arguments that both models take: a "
                                "tensor, a tuple/list of positional arguments or a dict of "
                                "keyword arguments") from exc


def _counterpart(key: Key, sig: Sig | None, chain, base: dict,
                 by_sig: dict) -> tuple[Key | None, str]:
    """The baseline output an analysis output is compared with, and how it was found:
    the same name computing the same chain; else the baseline output ending the same
    chain, BN aside (a fused or folded pattern); else flagged, or nothing."""
    named = base.get(key)
    if named is not None and chain is not None and named.chain == chain:
        return key, SAME
    if sig is not None:
        target = by_sig.get(sig)
        if target is not None:
            return target, SAME if target == key else PATTERN_END
        if named is not None and named.sig is not None:
            return key, UNALIGNED
    return (key, SAME) if named is not None else (None, "")


def _leftovers(result: LayerRows, base: dict, used: set) -> None:
    """Baseline outputs no row compared: inside a pattern whose end a row compared
    (absorbed), else baseline-only; inputs and pass-through ops are not listed."""
    heads = {base[k].sig[0] for k in used if base[k].sig is not None}
    for key, out in base.items():
        if key in used or out.layer.is_input or out.layer.kind in PASS_THROUGH:
            continue
        if out.sig is not None and out.sig[0] in heads:
            result.absorbed.append(key[0])
        else:
            result.baseline_only.append(key[0])


_METRICS = ("cosine", "mse", "l1", "kl", "sqnr", "atol", "rtol", "max_atol_diff",
            "max_qscale_diff")


def _blank(row: dict, how: str) -> None:
    for name in _METRICS:
        row.pop(name, None)
    row["match"] = how


_NO_STATS = {"min": None, "max": None, "mean": None, "var": None, "sumsq": None}


class _RowMaker:
    """Rows computed on a worker thread while the analysis model runs on (torch releases
    the GIL inside its ops, so the statistics overlap the forward); once the model is
    done, the calling thread takes the jobs still waiting as well. In the calling thread
    alone on a single-CPU machine. The analysis tensor is held by reference (``add``
    returns it held: the FX tap copies it before an op writes into it) or, for an eager
    model, copied; no more than a budget of tensors waits at a time.

    Only rows of large tensors go to the worker (started with the first of them). A
    row is some forty torch calls: below a few milliseconds of work it is mostly Python,
    and the two threads hand the GIL to each other at every call, each hand-over a
    thread switch the forward waits for (measured on a two-CPU machine: with the rows
    from 2^15, or from 2^17, elements up on the worker, the probe was slower than with
    every row in this thread)."""

    INLINE = 1 << 19                            # elements: smaller rows in this thread

    def __init__(self, copy: bool, budget: int = 256 << 20):
        self.threaded = (os.cpu_count() or 1) > 1
        self.copy = copy
        self.sync = threading.Condition()       # held tensors' states, the job queue
        self.items: list = []                   # row dicts (or None until measured)
        self.blank: dict[int, str] = {}         # row index -> flag (metrics left empty)
        self.changed: list[str] = []            # rows whose tensor changed before read
        self.budget, self.queued = budget, 0
        self.jobs: deque = deque()
        self.running = 0
        self.error: BaseException | None = None
        self.closing = False
        self.worker = None

    def add(self, make, args: tuple, model_tensor: int) -> _Held | None:
        """make(*args), args[model_tensor] being the model's own tensor."""
        index = len(self.items)
        self.items.append(None)
        tensor = args[model_tensor]
        if not self.threaded or tensor.numel() < self.INLINE:
            self.items[index] = make(*args)
            return None
        held = _Held(tensor.clone() if self.copy else tensor, self.sync)
        size = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        if self.worker is None:
            self.worker = threading.Thread(target=self._work, name="qcdoctor-probe",
                                           daemon=True)
            self.worker.start()
        with self.sync:
            self.jobs.append((index, held, make, args, model_tensor, size))
            self.queued += size
            self.sync.notify_all()
            while self.queued > self.budget and self.error is None:
                self.sync.wait()
        return None if self.copy else held

    def _next(self, wait: bool):
        with self.sync:
            while not self.jobs:
                if not wait or self.closing:
                    return None
                self.sync.wait()
            self.running += 1
            return self.jobs.popleft()

    def _work(self) -> None:
        # torch sizes a thread's OpenMP/MKL pool on its first parallel op or this call; a
        # row may start with a BLAS dot, which would then run on the default pool here and
        # round otherwise than in the calling thread
        torch.get_num_threads()
        while True:
            job = self._next(wait=True)
            if job is None:
                return
            self._run(job)

    def _run(self, job) -> None:
        index, held, make, args, model_tensor, size = job
        try:
            tensor, intact = held.read()
            if tensor is None:
                return                          # copied for an in-place op and let go
            if not intact:
                self.changed.append(args[0])
            with torch.inference_mode():
                self.items[index] = make(*args[:model_tensor], tensor,
                                         *args[model_tensor + 1:])
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            self.error = self.error or exc
        finally:
            held.release()
            with self.sync:
                self.running -= 1
                self.queued -= size
                self.sync.notify_all()

    def rows(self) -> list[dict]:
        if self.worker is not None:
            while (job := self._next(wait=False)) is not None:
                self._run(job)                  # the model is done: help the worker
            with self.sync:
                while self.running:
                    self.sync.wait()
        if self.error is not None:
            raise self.error
        rows = list(self.items)
        for index, how in self.blank.items():
            _blank(rows[index], how)
        return rows

    def close(self) -> None:
        if self.worker is not None:
            with self.sync:
                self.closing = True
                self.jobs.clear()
                self.sync.notify_all()
            self.worker.join()


def _unaligned_row(name: str, base_name: str, base: _BaseOutput, layer: Layer,
                   seen: torch.Tensor | None, tensor: torch.Tensor) -> dict:
    if base.stats is None and seen is not None:
        base.stats = side_stats(seen)
    return _row(name, base_name, base, layer, None, tensor, UNALIGNED)


def _row(name: str, base_name: str, base: _BaseOutput, layer: Layer,
         reference: torch.Tensor | None, tensor: torch.Tensor, how: str) -> dict:
    # each side flattened once (a non-contiguous one is copied by reshape: once)
    flat_ref = flattened(reference) if reference is not None else None
    flat = tensor.reshape(-1)
    if base.stats is None:
        base.stats = side_stats(flat_ref) if flat_ref is not None else _NO_STATS
    qscale, dtype = output_scale(layer.quantizer)
    side = side_stats(flat)
    row = {"mod_name": name, "base_op_type": base.layer.op_type, "analy_op_type": layer.op_type,
           "shape": shape_text(tensor), "quant_dtype": dtype, "qscale": qscale,
           "base_model_min": base.stats["min"], "analy_model_min": side["min"],
           "base_model_max": base.stats["max"], "analy_model_max": side["max"],
           "base_model_mean": base.stats["mean"], "analy_model_mean": side["mean"],
           "base_model_var": base.stats["var"], "analy_model_var": side["var"],
           "base_mod_name": base_name if base_name != name else "",
           "match": how}
    if reference is None:
        return row
    if reference.shape != tensor.shape:
        row["shape"] = "mismatch shape"
        return row
    if not (_finite(base.stats) and _finite(side)):
        # a NaN or inf on either side makes every metric NaN or meaningless (KL, Rtol):
        # the cells are left empty, and compare_models warns about the row
        return row
    metrics = pair_stats(flat_ref, flat, base_side=base.stats, analy_side=side)
    row.update(metrics)
    row["max_atol_diff"] = metrics["atol"]
    row["max_qscale_diff"] = metrics["atol"] / qscale if qscale and metrics["atol"] is not None \
        else None
    return row


def _finite(stats: dict) -> bool:
    """Whether a side's values are all finite: min and max are NaN when any value is
    (torch's reductions propagate NaN), infinite when one is."""
    low, high = stats["min"], stats["max"]
    return low is None or (math.isfinite(low) and math.isfinite(high))
