"""Measured fixes before post-processing (knowledge.md R5.4): where the analysis model holds
post-processing (a selection op such as topk, argmax, sort or nms, and what reads its
indices), a fix's figures are taken on the tensors entering that region, not on the model's
final outputs: a small change before a topk swaps which boxes it picks, and the boxes after
the gather then read as a large error that no quantization setting removes.

``entry_rows`` finds the region on the comparison's files as triage reads them
(collectors/reading/postprocess.py along layer_calls.csv, else fx_graph.txt, else row
order). ``EntryTaps`` captures the entering
tensors, each as the comparison's row of that name holds it (a layer's output after its
output fake quant): FX graphs are run node by node (``torch.fx.Interpreter``, the modules
looked up at every call, so a quantizer swapped into the model is the one run), eager
models with forward hooks on the producing modules (``name(n)``: its call n). Nothing is
changed in the model.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import torch
from torch import nn

from qcdoctor.probe.stats import flatten_output

_ELEMENT = re.compile(r"^(?P<layer>.+?)(?P<element>(?:\[[^\[\]]*\])+)$")
_CALL = re.compile(r"^(?P<module>.+)\((?P<call>\d+)\)$")


def entry_rows(table: Path) -> tuple[list[str], int]:
    """(the names of the rows entering the post-processing region, in row order; the rows
    in the region) of the comparison written at ``table``, as triage reads that folder;
    ([], 0) where the model holds no post-processing."""
    from qcdoctor.collectors.reading.compare_layers import read_folder
    layers, reading = read_folder(table)
    if not reading.entries:
        return [], 0
    frame = layers.frame
    names = [str(n).strip() for n in frame["mod_name"]] if "mod_name" in frame else []
    entries = [names[i] for i in reading.entries if i < len(names) and names[i]]
    return list(dict.fromkeys(entries)), len(reading.postprocess)


class EntryTaps:
    """The tensors of named rows, captured during one forward of a model."""

    def __init__(self, model: nn.Module, names: list[str]):
        self.names = list(names)
        self.graph = isinstance(model, torch.fx.GraphModule)
        found = _fx_nodes(model, names) if self.graph else _eager_calls(model, names)
        missing = [n for n in names if n not in found]
        if missing:
            raise LookupError(f"no layer output of the model is named {missing[0]!r}")
        self.where = found

    def run(self, model: nn.Module, args: tuple, kwargs: dict) -> list[torch.Tensor]:
        """The named tensors, in the order of ``names``, from one forward of ``model``."""
        captured: dict[str, object] = {}
        if self.graph:
            _Tap(model, {node: name for name, (node, _) in self.where.items()},
                 captured).run(*_placeholders(model, args, kwargs))
        else:
            handles = [module.register_forward_hook(_hook(captured, name, call))
                       for name, (module, call) in self.where.items()]
            try:
                model(*args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
        out = []
        for name in self.names:
            if name not in captured:
                raise LookupError(f"the layer output {name!r} was not computed")
            element = self.where[name][1] if self.graph else ""
            value = _element(captured[name], element)
            if value is None:
                raise LookupError(f"the layer output {name!r} holds no tensor")
            out.append(value.detach())
        return out


class _Tap(torch.fx.Interpreter):
    def __init__(self, model, wanted: dict[str, str], captured: dict):
        super().__init__(model, garbage_collect_values=True)
        self.wanted, self.captured = wanted, captured

    def run_node(self, node):
        result = super().run_node(node)
        name = self.wanted.get(node.name)
        if name is not None:
            self.captured[name] = result
        return result


def _hook(captured: dict, name: str, call: int):
    seen = [0]

    def hook(module, inputs, output):
        if seen[0] == call:
            captured[name] = output
        seen[0] += 1
    return hook


def _fx_nodes(model: torch.fx.GraphModule, names: list[str]) -> dict[str, tuple[str, str]]:
    """Row name -> (the node holding its value as the comparison saw it: the output fake
    quant's node where there is one, the element of a tuple output it names)."""
    from qcdoctor.probe.layers import fx_plan
    plan = fx_plan(model)
    observed = {source: quantizer for quantizer, source in plan.observer.items()}
    by_name = {}
    for node, layer in plan.layers.items():
        by_name.setdefault(layer.name, observed.get(node, node))
    found = {}
    for name in names:
        node, element = by_name.get(name), ""
        if node is None and (match := _ELEMENT.match(name)):
            node, element = by_name.get(match["layer"]), match["element"]
        if node is not None:
            found[name] = (node.name, element)
    return found


def _eager_calls(model: nn.Module, names: list[str]) -> dict[str, tuple[nn.Module, int]]:
    """Row name -> (its module, which call of it): ``head(1)`` is the second call."""
    modules = dict(model.named_modules())
    found = {}
    for name in names:
        match = _CALL.match(name)
        target, call = (match["module"], int(match["call"])) if match else (name, 0)
        if target in modules:
            found[name] = (modules[target], call)
    return found


def _element(value, element: str) -> torch.Tensor | None:
    """The tensor ``element`` (``[0]``, ``[boxes]``, "" for the value itself) of an output."""
    for suffix, tensor in flatten_output(value):
        if suffix == element:
            return tensor
    return None


def _placeholders(model: torch.fx.GraphModule, args: tuple, kwargs: dict) -> list:
    """The forward's arguments in the order of the graph's placeholders."""
    if not kwargs:
        return list(args)
    bound = inspect.signature(model.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return list(bound.arguments.values())
