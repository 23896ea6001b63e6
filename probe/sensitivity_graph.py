"""The copies of the sensitivity pass run over an FX graph from where they first differ.

With one quantizer on and every other off, everything upstream of that quantizer is the
model with every quantizer off: the same for every copy. So the graph runs once on the
single input with every value kept (``GraphCopies``), and each batch of copies runs only
the nodes downstream of its quantizers (``run``): a node none of whose inputs differ from
the single run takes its kept value; the first node of a quantizer takes the kept value
repeated for every copy, with that quantizer's copy computed again with it on; every
node after reads the copies. The copies of a batch are the quantizers next to each other
in the graph, so a batch late in the graph costs a fraction of a forward per copy.

The single run's values are kept at most up to ``KEPT_BYTES``. Used only where that
reading of the graph holds, checked and not assumed: positional
inputs matching the graph's placeholders, no value of the single run written in place
afterwards (its version counter: an in-place op would give a later node another value
than the kept one), and every node computed on the copies with a first dimension the
copies times the single run's. Anything else raises NotBatched: the caller runs the
copies through the whole model instead (probe/sensitivity_batched.py).
"""

from __future__ import annotations

import torch
from torch import fx, nn

from qcdoctor.probe.call_inputs import tensors_mapped

KEPT_BYTES = 1 << 30        # the single run's values kept at most (efficientnet_b0 at
                            # 224x224: 166 MiB); a larger model runs the copies whole


class NotBatched(Exception):
    """The pass cannot be batched for this model; the reason is the message."""


class GraphCopies:
    """One FX graph module, its single run kept node by node."""

    def __init__(self, model: fx.GraphModule, args: tuple, kwargs: dict):
        if kwargs:
            raise NotBatched("keyword inputs")
        self.model = model
        self.nodes = list(model.graph.nodes)
        self.position = {node: place for place, node in enumerate(self.nodes)}
        placeholders = [n for n in self.nodes if n.op == "placeholder"]
        if len(placeholders) != len(args):
            raise NotBatched("the inputs do not match the graph's placeholders")
        self.inputs = dict(zip(placeholders, args, strict=True))
        self.modules = {node: model.get_submodule(str(node.target)) for node in self.nodes
                        if node.op == "call_module"}
        # a node's value carries the batch when it reads an input (parameters do not)
        self.dependent: dict[fx.Node, bool] = {}
        self.kept: dict[fx.Node, object] = {}
        # node -> its value has the copies along its first dimension (None: no tensor),
        # learnt from the run beside a flipped input (``learn``)
        self.major: dict[fx.Node, bool | None] = {}
        self.last_use = {node: max((self.position[u] for u in node.users),
                                   default=self.position[node]) for node in self.nodes}

    def single(self) -> object:
        """The graph's output on the single input, every node's value kept (without
        inference mode: its tensors keep no version counter)."""
        with torch.no_grad():
            return self._single()

    def _single(self) -> object:
        versions = {}
        storages: dict[int, int] = {}
        for node in self.nodes:
            if node.op == "output":
                if any(_version(v) != versions[n] for n, v in self.kept.items()):
                    raise NotBatched("a value of the graph is written in place after it is "
                                     "made")
                return fx.node.map_arg(node.args[0], self.kept.__getitem__)
            self.dependent[node] = node.op == "placeholder" or \
                any(self.dependent[m] for m in node.all_input_nodes)
            value = self.inputs[node] if node.op == "placeholder" else \
                self._execute(node, *self._read(node, self._reader(node, self.kept.__getitem__)))
            self.kept[node] = value
            versions[node] = _version(value)
            tensors_mapped(value, lambda t: storages.setdefault(
                t.untyped_storage().data_ptr(), t.untyped_storage().nbytes()))
            if sum(storages.values()) > KEPT_BYTES:
                raise NotBatched("the single run's values would take more memory than "
                                 "KEPT_BYTES")
        raise NotBatched("the graph has no output")

    def run(self, count: int, grown_inputs: dict | None = None,
            sites: dict[fx.Node, list] | None = None, turn=None,
            learn: bool = False) -> tuple[object, list]:
        """(the graph's output on ``count`` copies, the (copy, quantizer) pairs left
        unmeasured: on a value the copies share, such as a parameter). ``grown_inputs``:
        placeholder -> its value for every copy (else the single input's everywhere).
        ``sites``: node -> the (copy, quantizer) pairs turned on there for their copy by
        ``turn(quantizer, on)``. ``learn``: every node runs on the copies (the inputs
        grown), and which values have the copies along their first dimension is kept."""
        sites = sites or {}
        grown_inputs = grown_inputs or {}
        starts = [self.position[n] for n in (*sites, *grown_inputs)]
        if not starts:
            raise NotBatched("nothing differs between the copies")
        start = min(starts)
        env: dict[fx.Node, object] = {}
        grown: set[fx.Node] = set()
        shared: list = []
        for node in self.nodes[start:]:
            place = self.position[node]
            if node.op == "output":
                return fx.node.map_arg(node.args[0], lambda m: self._copies(
                    m, env, grown, count)), shared
            here = sites.get(node, [])
            if node in grown_inputs:
                value = grown_inputs[node]
                self._check_size(node, value, count, learn)
            elif any(m in grown for m in node.all_input_nodes):
                value = self._execute(node, *self._read(node, self._reader(
                    node, lambda m: self._copies(m, env, grown, count))))
                self._check_size(node, value, count, learn)
            elif here and any(self.dependent[m] for m in node.all_input_nodes):
                value = repeated(self.kept[node], count)
            else:
                # unchanged; a quantizer on a constant (a parameter) is left to the caller
                shared.extend(here)
                continue
            if here and not self._rows_apart(node, grown):
                shared.extend(here)            # no copy's rows to turn: one at a time
                here = []
            if here:
                value = self._turned(node, value, here, env, grown, turn)
            env[node] = value
            grown.add(node)
            for done in [m for m in node.all_input_nodes if m in env
                         and self.last_use[m] <= place]:
                del env[done]
        raise NotBatched("the graph has no output")

    # -- helpers ------------------------------------------------------------------------

    def _copies(self, node, env, grown, count):
        """``node``'s value for every copy: its own, else the kept one repeated (an input
        of the batch) or shared (a constant)."""
        if node in grown:
            return env[node]
        kept = self.kept[node]
        if not self.dependent[node]:
            return kept
        if self.major.get(node) is False:
            raise NotBatched(f"node {node.name}: its first dimension is not the batch")
        return repeated(kept, count)

    def _rows_apart(self, node, grown) -> bool:
        """Whether one copy's rows of ``node`` and of its inputs on the copies can be
        told apart: each has the copies along its first dimension."""
        return bool(self.major.get(node)) and all(self.major.get(m) is not False
                                                  for m in node.all_input_nodes if m in grown)

    def _reader(self, node, value_of):
        """``value_of``, the kept values copied where ``node`` may write into its inputs
        (an in-place op: the kept values stay those of the single run)."""
        if not _in_place(self.modules.get(node), node):
            return value_of

        def copied(m):
            value = value_of(m)
            return tensors_mapped(value, torch.Tensor.clone) if value is self.kept.get(m) \
                else value
        return copied

    def _check_size(self, node, value, count: int, learn: bool) -> None:
        """A value computed on the copies has them along its first dimension where the
        single run's value has the batch there (learnt beside the flipped input)."""
        found = []
        tensors_mapped(value, found.append)
        if not found:
            return      # a number (a size read off the batch): the ops reading it tell
        major = _first_size(value, 0) == _first_size(self.kept[node], 0) * count
        if learn:
            self.major[node] = major
        elif self.major.get(node) and not major:
            raise NotBatched(f"node {node.name}: the copies are not its first dimension")

    def _turned(self, node, value, here, env, grown, turn):
        """``value`` with each pair's copy computed again with its quantizer on."""
        rows = _first_size(self.kept[node])

        def one_copy(copy):
            def read(m):
                if m not in grown:
                    kept = self.kept[m]
                    return tensors_mapped(kept, torch.Tensor.clone) if self.dependent[m] \
                        else kept
                size = _first_size(self.kept[m])
                return tensors_mapped(env[m], lambda t: t[copy * size:(copy + 1) * size].clone())
            return read
        calls = [(slice(copy * rows, (copy + 1) * rows), *self._read(node, one_copy(copy)),
                  lambda on, q=quantizer: turn(q, on)) for copy, quantizer in here]
        return rows_turned(value, calls, self.modules[node], f"node {node.name}")

    @staticmethod
    def _read(node, value_of):
        return (fx.node.map_arg(node.args, value_of), fx.node.map_arg(node.kwargs, value_of))

    def _execute(self, node, args, kwargs):
        if node.op == "call_module":
            return self.modules[node](*args, **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        if node.op == "call_method":
            return getattr(args[0], node.target)(*args[1:], **kwargs)
        if node.op == "get_attr":
            value = self.model
            for part in str(node.target).split("."):
                value = getattr(value, part)
            return value
        raise NotBatched(f"node {node.name}: {node.op}")


def sites_of(model: fx.GraphModule, owners: list[nn.Module]) -> list[list[fx.Node]]:
    """Per owner (a quantizer, or the module whose weight it quantizes), the graph's nodes
    calling it."""
    found: dict[int, list[fx.Node]] = {id(o): [] for o in owners}
    for node in model.graph.nodes:
        if node.op == "call_module":
            module = model.get_submodule(str(node.target))
            if id(module) in found:
                found[id(module)].append(node)
    return [found[id(o)] for o in owners]


def repeated(value, count: int):
    """``value`` with each tensor repeated ``count`` times along dimension 0 (one copy of
    the batch each)."""
    def repeat(tensor):
        if tensor.dim() == 0:
            raise NotBatched("a value of the batch has no batch dimension")
        return tensor.repeat(count, *([1] * (tensor.dim() - 1)))
    return tensors_mapped(value, repeat)


def rows_turned(value, calls: list, module: nn.Module, name: str) -> torch.Tensor:
    """A copy of ``value`` (the output of ``module`` on every copy, all quantizers off)
    whose rows are computed again, each call ``(rows, args, kwargs, switch)`` with one
    quantizer switched on by ``switch(True)`` and off again after: that copy's values.
    (A copy: the output may be an input itself, a fake quant switched off gives it back.)"""
    if not isinstance(value, torch.Tensor):
        raise NotBatched(f"{name} gives no single tensor")
    value = value.clone()
    for rows, args, kwargs, switch in calls:
        switch(True)
        try:
            again = module.forward(*args, **kwargs)
        finally:
            switch(False)
        if not isinstance(again, torch.Tensor) or again.shape != value[rows].shape:
            raise NotBatched(f"{name} gives another shape on one copy")
        value[rows] = again
    return value


def _first_size(value, default: int | None = None) -> int:
    found = []
    tensors_mapped(value, found.append)
    for tensor in found:
        if tensor.dim() > 0:
            return tensor.shape[0]
    if default is not None:
        return default
    raise NotBatched("a value of the batch has no batch dimension")


# operator's in-place forms (``x += y`` traced)
_IN_PLACE_OPERATORS = {"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow",
                       "iand", "ior", "ixor", "ilshift", "irshift", "imatmul"}


def _in_place(module: nn.Module | None, node: fx.Node) -> bool:
    """Whether ``node`` may write into its inputs: a module built ``inplace``, a method
    or function named with a trailing underscore, ``inplace=True``, ``+=`` and its kin.
    (What this misses, the single run's version counters catch.)"""
    if node.op == "call_module":
        return bool(getattr(module, "inplace", False))
    if node.kwargs.get("inplace") is True:
        return True
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    if not isinstance(name, str) or name.startswith("__"):
        return False
    return name.endswith("_") or name in _IN_PLACE_OPERATORS


def _version(value) -> tuple:
    """The version counters of a value's tensors; an inference tensor (the caller's input
    made in inference mode) has none, and cannot be written outside that mode: None."""
    found = []
    tensors_mapped(value, found.append)
    return tuple(None if t.is_inference() else t._version for t in found)
