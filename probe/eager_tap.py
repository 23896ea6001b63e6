"""An eager model run with forward hooks on its layers, and its containers'
function ops seen through a TorchFunctionMode."""

from __future__ import annotations

import inspect
import threading
import weakref
from contextlib import contextmanager

import torch
from torch import nn

from qcdoctor.probe.calls import merged
from qcdoctor.probe.held import Guard
from qcdoctor.probe.layers import (
    NOT_TENSOR,
    Layer,
    class_path,
    eager_quantizer,
    function_path,
    function_tokens,
    fusion_tokens,
    identity_kind,
    is_fused,
    is_inplace_call,
    is_quantizer,
    is_quantizer_slot,
    op_kind,
    submodule,
    weight_quantizer,
)
from qcdoctor.probe.recorder import Key, Recorder
from qcdoctor.probe.stats import (
    flatten_output,
)


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


class EagerTap:
    """Forward hooks on an eager model's layers, and its containers' function ops."""

    def __init__(self, model: nn.Module, recorder: Recorder, keep, *, quantized: bool,
                 guard: Guard | None = None, own=None):
        self.model, self.recorder, self.keep, self.guard = model, recorder, keep, guard
        self.own = own                      # eager_own.EagerOwnTap, measuring own errors
        self.replay = [False]               # on while a call runs again: not the model's
        self.quantized = quantized
        self.stack: list[str] = []
        self.last: tuple[object, Key] | None = None      # the last output reported
        self.fn_counts: dict[str, int] = {}
        self.containers: set[str] = set()   # modules whose function ops are reported
        # what each tensor stands for (layer_calls.csv), where the recorder keeps calls
        self.flow = _TensorFlow() if recorder.calls is not None else None

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
                          kind=identity_kind(module),
                          weight_quantizer=weight_quantizer(module) if self.quantized else None)
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
                        self._layer_out(entry[0], entry[1]), always_call=True,
                        with_kwargs=True))
        stack, guard, keep, get = self.stack, self.guard, self.keep, entries.get
        disabled = torch._C.DisableTorchFunction
        mode = _FunctionTap(self)
        quiet: list = []            # the running quiet layer, the mode taken off for it
        depth, top = torch._C._len_torch_function_stack, torch._C._get_function_stack_at
        take_off, put_back = torch._C._pop_torch_function_stack, \
            torch._C._push_on_torch_function_stack

        replay = self.replay
        # the hooks are global: a forward run beside this one on another thread (probe/
        # beside.py) is none of this model's
        owner, ident = threading.get_ident(), threading.get_ident

        def pre(module, args):
            if replay[0] or ident() != owner:
                return
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

        def post(module, args, kwargs, out):
            if replay[0] or ident() != owner:
                return
            if quiet and quiet[-1] is module:
                quiet.pop()
                put_back(mode)
            entry = get(id(module))
            if entry is None:
                if stack:
                    stack.pop()
                if flow is not None:           # a quantizer, or a layer's own part
                    flow.passed(module, args, kwargs, out, self.recorder.calls)
                    self._passed_module(module, args, kwargs, out, is_quantizer(module))
                return
            if entry[2]:
                return                         # its own hook pops and reports
            if stack:
                stack.pop()
            layer = entry[1]
            if layer is not None and keep(layer):
                with disabled():               # our own ops are no model ops
                    self._report(layer, out, self._producer(args), args, kwargs, module)
            elif layer is not None and flow is not None:
                flow.passed(None, args, kwargs, out, None)
                self._passed_module(module, args, kwargs, out, False)

        flow = self.flow
        pre_handle = register_module_forward_pre_hook(pre)
        post_handle = register_module_forward_hook(post, always_call=True, with_kwargs=True)
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
                value = submodule(self.model, name)
            except AttributeError:
                continue
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                self._report(Layer(name, "torch.Tensor"), value.detach(), None)

    def _layer_out(self, name: str, layer: Layer):
        def hook(module, args, kwargs, out):
            if self.replay[0]:
                return
            if self.stack and self.stack[-1] == name:
                self.stack.pop()
            if self.keep(layer):
                with torch._C.DisableTorchFunction():
                    self._report(layer, out, self._producer(args), args, kwargs, module)
            elif self.flow is not None:
                self.flow.passed(None, args, kwargs, out, None)
                self._passed_module(module, args, kwargs, out, False)
        return hook

    @contextmanager
    def _replaying(self):
        """A call the own error runs again: none of the model's (no hook reports it)."""
        self.replay[0] = True
        try:
            yield
        finally:
            self.replay[0] = False

    def _passed_module(self, module, args, kwargs, out, quantizer: bool) -> None:
        if self.own is None:
            return
        with self._replaying():
            self.own.passed(lambda a, k: module(*a, **k), args, kwargs, out,
                            quantizer=quantizer, inplace=_module_inplace(module, args, out))

    def _producer(self, args) -> Key | None:
        first = args[0] if args else None
        if self.last is not None and first is not None and first is self.last[0]:
            return self.last[1]
        return None

    def _report(self, layer: Layer, value, producer: Key | None, args: tuple = (),
                kwargs: dict | None = None, module: nn.Module | None = None,
                func=None) -> None:
        """A row's output; ``module`` or ``func``: what computed it from ``args`` and
        ``kwargs`` (its own error runs it again)."""
        flow = self.flow
        reads = flow.reads(args, kwargs) if flow is not None else ()
        keys = self.recorder.report(layer, value, producer, reads)
        if len(keys) == 1:
            self.last = (value, keys[0])
        if flow is not None:
            flow.reported(value, keys)
        if self.own is not None and (module is not None or func is not None):
            if module is not None:
                call, inplace = (lambda a, k: module(*a, **k)), \
                    _module_inplace(module, args, value)
            else:
                call, inplace = (lambda a, k: func(*a, **k)), \
                    _function_inplace(func, args, kwargs, value)
            with self._replaying():
                self.own.row(keys, layer, call, module, args, kwargs, value, inplace)

    def function_out(self, where: str, func, args, kwargs, result) -> None:
        """A function op a container ran: a row, or (views, shape queries, ops not
        compared) passed through to what its inputs stand for."""
        if self._function_row(where, func, args, kwargs, result):
            return
        if self.flow is not None:
            self.flow.passed(None, args, kwargs, result, None)
        if self.own is not None:
            with self._replaying():
                self.own.passed(lambda a, k: func(*a, **k), args, kwargs, result,
                                quantizer=False,
                                inplace=_function_inplace(func, args, kwargs, result))

    def _function_row(self, where: str, func, args, kwargs, result) -> bool:
        known = _FUNCTIONS.get(func)
        if known is None:
            kind = op_kind(func)
            known = _FUNCTIONS[func] = (kind, function_path(func), function_tokens(kind))
        kind = known[0]
        if kind in NOT_TENSOR:
            return False
        if type(result) is torch.Tensor and not result.is_quantized:
            if not result.is_floating_point() and not _selection(result, args):
                return False                   # (complex included, as flatten_output has it)
        else:
            tensors = flatten_output(result)
            if not tensors or not all(t.is_floating_point() or _selection(t, args)
                                      for _, t in tensors):
                return False
        base = f"{where}.{kind}" if where else kind
        seen = self.fn_counts.get(base, 0)
        self.fn_counts[base] = seen + 1
        name = base if seen == 0 else f"{base}_{seen}"
        layer = Layer(name, known[1], tokens=known[2], kind=kind)
        if not self.keep(layer):
            return False
        self._report(layer, result, self._producer(args), args, kwargs, func=func)
        return True


def _module_inplace(module: nn.Module, args: tuple, out) -> bool:
    return module.__dict__.get("inplace") is True or (bool(args) and out is args[0])


def _function_inplace(func, args: tuple, kwargs: dict | None, out) -> bool:
    return (bool(args) and out is args[0]) or is_inplace_call(func, kwargs)


def _selection(tensor: torch.Tensor, args: tuple) -> bool:
    """An integer or boolean output computed from a tensor (argmax, topk's indices, a
    comparison): a row, as a traced model has it, so the post-processing is found; its
    metric cells stay empty. Complex outputs are none."""
    return not tensor.is_complex() and any(isinstance(a, torch.Tensor) for a in args)


class _TensorFlow:
    """What each tensor of an eager run stands for: the keys of the reported outputs it
    is, or (a view, a quantizer's output, a value no row compares) that its inputs
    were. Tensors are found by identity, held by weak reference (an id is reused once
    its tensor is gone)."""

    def __init__(self):
        self.known: dict[int, tuple] = {}   # id -> (weak reference, keys, reported)

    def keys_of(self, tensor) -> tuple:
        entry = self.known.get(id(tensor))
        return entry[1] if entry is not None and entry[0]() is tensor else ()

    def reads(self, args, kwargs) -> tuple:
        """The keys the tensors in ``args`` and ``kwargs`` stand for, argument order."""
        found: list = []
        _tensors(args, found)
        if kwargs:
            _tensors(tuple(kwargs.values()), found)
        return merged(self.keys_of(t) for t in found)

    def reported(self, value, keys: list) -> None:
        tensors: list = []
        _tensors((value,), tensors)
        if len(tensors) == len(keys):
            for tensor, key in zip(tensors, keys, strict=True):
                self._set(tensor, (key,), True)
        elif keys:
            for tensor in tensors:
                self._set(tensor, tuple(keys), True)

    def passed(self, module, args, kwargs, out, calls: dict | None) -> None:
        """``out`` computed from ``args`` and ``kwargs`` by an op without a row: it stands
        for what they stand for. A quantizer ``module`` given the very output of a row
        is that row's output quantizer (eager prepare: FloatFunctional's)."""
        tensors: list = []
        _tensors((out,), tensors)
        if not tensors:
            return
        reads = self.reads(args, kwargs)
        if calls is not None and module is not None and args and reads and \
                is_quantizer(module):
            entry = self.known.get(id(args[0]))
            if entry is not None and entry[2] and entry[0]() is args[0]:
                for key in entry[1]:
                    call = calls.get(key)
                    if call is not None and call.output_quantizer is None:
                        call.output_quantizer = module
        for tensor in tensors:
            self._set(tensor, reads, False)

    def _set(self, tensor, keys: tuple, reported: bool) -> None:
        try:
            self.known[id(tensor)] = (weakref.ref(tensor), keys, reported)
        except TypeError:                   # not weakly referenceable: not followed
            pass


def _tensors(value, found: list) -> None:
    """The tensors in ``value`` (tuples, lists and dicts walked), in order."""
    for item in value:
        if isinstance(item, torch.Tensor):
            found.append(item)
        elif isinstance(item, (tuple, list)):
            _tensors(item, found)
        elif isinstance(item, dict):
            _tensors(tuple(item.values()), found)


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
    def __init__(self, tap: EagerTap):
        super().__init__()
        self.tap = tap

    def __torch_function__(self, func, types, args=(), kwargs=None):
        tap = self.tap
        if tap.replay[0]:                   # a call run again: none of the model's ops
            return func(*args, **kwargs) if kwargs else func(*args)
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
                tap.function_out(where, func, args, kwargs, result)
        return result
