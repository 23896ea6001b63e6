"""A traced model (GraphModule) run node by node, each planned node's value
reported to a recorder, the own error measured beside it."""

from __future__ import annotations

import operator
from dataclasses import replace

import torch

from qcdoctor.probe.calls import merged
from qcdoctor.probe.held import Guard
from qcdoctor.probe.layers import (
    NOT_TENSOR,
    Layer,
    op_kind,
    submodule,
)
from qcdoctor.probe.own_error import OwnTap
from qcdoctor.probe.recorder import Recorder


class FxTap:
    """A GraphModule run node by node, each planned node's value reported. A lean loop
    over the graph (a third of torch.fx.Interpreter's cost per node): values are freed
    after their last use, as the generated forward frees them."""

    def __init__(self, gm, plan, recorder: Recorder, keep, guard: Guard | None,
                 own: dict | None = None):
        self.gm, self.plan, self.recorder, self.keep, self.guard = gm, plan, recorder, keep, \
            guard
        self.node_keys: dict = {}
        self.node_rows: dict = {}           # node -> the keys of the outputs it reported
        self.flow: dict = {}                # node -> the keys its value stands for
        self.held: dict = {}                # node -> its value, held for a worker
        # each layer's own error, measured beside the run (own_error.OwnTap)
        self.own = None if own is None else \
            OwnTap(plan, own["base"], own["counterpart"], self.node_keys, own.get("sides"),
                   self.node_rows)

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
            found = self.node_rows.get(source)
            # a quantizer stands for its row, or for what its input stands for
            if found is not None:
                self.flow[n] = self.flow[source] = found
            else:
                self.flow[n] = self.flow.get(source, ())
            return
        # a shape query's value is no data: what reads it reads nothing through it
        self.flow[n] = () if n.op in _CALLS and _is_query(n) else self._reads(n)
        if n in plan.layers and n not in plan.observed:
            layer = plan.layers[n]
            if self.keep(layer):
                self._report(n, layer, value, n)
                found = self.node_rows.get(n)
                if found is not None:
                    self.flow[n] = found

    def _reads(self, node) -> tuple:
        """The keys of the reported outputs ``node`` reads (through nodes reporting none),
        positional then keyword arguments; an item taken from a node of several outputs
        (``topk(...)[1]``) reads that output alone."""
        flow = self.flow
        inputs = node._input_nodes
        if len(inputs) == 1:
            (only,) = inputs
            found = flow.get(only, ())
            if len(found) > 1 and node.op == "call_function" and \
                    node.target is operator.getitem and len(node.args) > 1 and \
                    type(node.args[1]) is int:
                index = node.args[1]
                keys = self.node_rows.get(only)
                if keys is not None and 0 <= index < len(keys) and \
                        keys[index][0].endswith(f"[{index}]"):
                    return (keys[index],)
            return found
        return merged(flow.get(used, ()) for used in inputs)

    def _report(self, node, layer: Layer, value, value_node) -> None:
        producer = self.plan.producer.get(node)
        keys = self.recorder.report(layer, value, self.node_keys.get(producer),
                                    self._reads(node))
        if len(keys) == 1:
            self.node_keys[node] = keys[0]
        if keys:
            self.node_rows[node] = tuple(keys)
        for held in self.recorder.held:
            if held is not None:
                self.held[value_node] = held


_CALLS = ("call_function", "call_method")


def _is_query(node) -> bool:
    """A node asking about a tensor (``x.shape``, ``x.size(0)``), whatever it returns."""
    return node.target in (getattr, len) or op_kind(node.target) in NOT_TENSOR


class _InterpreterTap(torch.fx.Interpreter):
    """torch's interpreter with the tap's reports (graphs with their own codegen)."""

    def __init__(self, tap: FxTap):
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


def placeholder_args(gm, args: tuple, kwargs: dict) -> list | None:
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
