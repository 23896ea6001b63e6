"""Sensitivity of many quantizers in one forward: the probe's input repeated along the batch
dimension, each copy with one quantizer on.

The sensitivity pass (probe/sensitivity.py) runs the model once per quantizer with only
that one on: on CPU, a forward of one small input uses a fraction of what a batch of them
costs per sample (measured at 64x64: a batch of 48 costs 4 to 12 times less per sample).
Here every fake quant stays off, and a forward hook puts the quantized value back for one
copy only:

- an activation quantizer: its output rows of copy ``i`` replaced by the quantizer applied
  to its input rows of that copy;
- a weight quantizer: the rows of copy ``i`` of the module that owns the weight
  (``conv.weight_fake_quant`` -> ``conv``) computed again on that copy's inputs with the
  weight quantizer on.

A quantizer called at several places is on at each of them, as in the pass one at a
time. Copy 0 has no quantizer on: the control.

Used only where the model treats the copies apart, which is checked, never assumed:

- first one forward of the single input with every quantizer off, recording at each
  hooked call the size of the batch dimension; in every batched forward, every hooked
  call must see that size times the copies (a layout whose first dimension is no batch,
  such as a sequence-first attention, fails it);
- then one forward of the input beside itself flipped along every other dimension: the
  first copy's outputs must be the single forward's (a model that mixes the samples of a
  batch, a batch mean, fails it);
- every model output is the single forward's, repeated: its first dimension times the
  copies, and the control copy equal to the single forward's outputs (``CLOSE``);
- the quantizer found most sensitive is run again on its own (one forward) and must give
  the same value (``AGREE``).

Anything else (a model that fails on the batch, a quantizer the adapter does not hold as
a module, a call with another size) raises ``NotBatched``, and the caller runs the pass
one quantizer at a time. The copies per forward are bounded by the input's size
(``COPY_ELEMENTS``), not by the machine: the figures do not depend on where they ran.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from qcdoctor.collectors.sensitivity import ASCENDING
from qcdoctor.probe.call_inputs import tensors_mapped
from qcdoctor.probe.quantizers import Quantizer, QuantizerAdapter
from qcdoctor.probe.sensitivity_graph import (
    GraphCopies,
    NotBatched,
    repeated,
    rows_turned,
    sites_of,
)
from qcdoctor.probe.stats import flatten_output, pair_stats

MAX_COPIES = 32                 # copies of the input in one forward, the control included
COPY_ELEMENTS = 1 << 21         # input elements of one forward, all copies together
CLOSE = 1e-4                    # the control copy against the single forward: max |diff| /
                                # max |output| (float sums in another order differ ~1e-6)
AGREE = 0.05                    # the most sensitive quantizer's value, batched / alone - 1


def copies_per_forward(args: tuple, kwargs: dict) -> int:
    """How many copies of the input one forward takes (the control included)."""
    elements = 0

    def count(tensor):
        nonlocal elements
        elements += tensor.numel()
        return tensor
    tensors_mapped((args, kwargs), count)
    return max(2, min(MAX_COPIES, COPY_ELEMENTS // max(1, elements)))


def beside_flipped(value):
    """The call's inputs, each tensor followed along dimension 0 by itself flipped along
    every other dimension (values of the same kind, mostly at other places)."""
    def pair(tensor):
        if tensor.dim() == 0:
            raise NotBatched("an input tensor has no batch dimension")
        return torch.cat([tensor, tensor.flip(tuple(range(1, tensor.dim())))])
    return tensors_mapped(value, pair)


def batched_values(model: nn.Module, adapter: QuantizerAdapter, quantizers: list[Quantizer],
                   args: tuple, kwargs: dict, reference: list[torch.Tensor], key: str,
                   progress: Callable[[str, int, int], None] | None = None
                   ) -> list[list[float | None]]:
    """The sensitivity value (``pair_stats`` ``key``) of every output for each quantizer
    alone, in the order of ``quantizers``; every quantizer off on entry and on return."""
    owners = [_owner(model, q) for q in quantizers]
    if isinstance(model, torch.fx.GraphModule):
        try:
            values = _over_graph(model, adapter, quantizers, owners, args, kwargs, reference,
                                 key, progress)
        except NotBatched:
            values = None                      # the copies through the whole model
        finally:
            for quantizer in quantizers:
                adapter.set_enabled(quantizer, False)
        if values is not None:
            _check_one_alone(model, adapter, quantizers, values, args, kwargs, reference, key)
            return values
    hooks = _Hooks(model, quantizers, owners, adapter)
    try:
        with torch.inference_mode():
            single = hooks.recorded(lambda: model(*args, **kwargs))
            # the copies kept apart: beside a different input (flipped), the first copy's
            # outputs are still the single input's
            outputs = hooks.batched([], 2, lambda: model(*beside_flipped(args),
                                                         **beside_flipped(kwargs)))
            _check_control(_per_copy(outputs, single, 2)[0], single)

            def forward(chunk):
                count = len(chunk) + 1
                return hooks.batched(chunk, count, lambda: model(*repeated(args, count),
                                                                 **repeated(kwargs, count)))
            values = _in_chunks(list(range(len(quantizers))), forward, single, reference, key,
                                copies_per_forward(args, kwargs), quantizers, progress)
    finally:
        hooks.remove()
    for index in sorted(hooks.alone):
        values[index] = _alone(model, adapter, quantizers[index], args, kwargs, reference, key)
    _check_one_alone(model, adapter, quantizers, values, args, kwargs, reference, key)
    return values


def output_values(reference: list[torch.Tensor], outputs: list[torch.Tensor],
                  key: str) -> list[float | None]:
    """Each output's sensitivity value (``pair_stats`` ``key``) against the reference."""
    return [pair_stats(base, out, (key,))[key]
            for base, out in zip(reference, outputs, strict=True)]


def _in_chunks(order: list[int], forward, single, reference, key, copies: int,
               quantizers: list[Quantizer], progress) -> list:
    """The values of the quantizers in ``order`` (None for the others), ``copies - 1`` a
    forward: ``forward(chunk)`` gives the flat outputs of the copies (the control first,
    then one a quantizer of the chunk); the control must be the single run's ``single``."""
    values: list = [None] * len(quantizers)
    for start in range(0, len(order), copies - 1):
        chunk = order[start:start + copies - 1]
        parts = _per_copy(forward(chunk), single, len(chunk) + 1)
        _check_control(parts[0], single)
        for place, index in enumerate(chunk, 1):
            values[index] = output_values(reference, parts[place], key)
        if progress is not None:
            progress(quantizers[chunk[-1]].op_name, start + len(chunk), len(quantizers))
    return values


def _over_graph(model, adapter, quantizers, owners, args, kwargs, reference, key, progress):
    """The values of ``batched_values`` with the copies run over the FX graph from their
    quantizers on (probe/sensitivity_graph.py); the copies of a forward are quantizers
    next to each other in the graph."""
    graph = GraphCopies(model, args, kwargs)
    single = _flat(graph.single())
    with torch.inference_mode():
        output, _ = graph.run(2, grown_inputs=dict(zip(graph.inputs, beside_flipped(args),
                                                       strict=True)), learn=True)
        _check_control(_per_copy(_flat(output), single, 2)[0], single)
        sites = sites_of(model, owners)
        order = [i for _, i in sorted((graph.position[s[0]], i)
                                      for i, s in enumerate(sites) if s)]
        alone = [i for i, s in enumerate(sites) if not s]

        def turn(index, on):
            adapter.set_enabled(quantizers[index], on)

        def forward(chunk):
            at: dict = {}
            for place, index in enumerate(chunk, 1):
                for node in sites[index]:
                    at.setdefault(node, []).append((place, index))
            output, shared = graph.run(len(chunk) + 1, sites=at, turn=turn)
            alone.extend(index for _, index in shared)
            return _flat(output)
        values = _in_chunks(order, forward, single, reference, key,
                            copies_per_forward(args, kwargs), quantizers, progress)
    for index in sorted(set(alone)):
        values[index] = _alone(model, adapter, quantizers[index], args, kwargs, reference, key)
    return values


def _flat(output) -> list[torch.Tensor]:
    return [t for _, t in flatten_output(output)]


class _Hooks:
    """The forward hooks of one batched pass: per hooked module, the quantizers it turns
    on for one copy each."""

    def __init__(self, model, quantizers, owners, adapter):
        self.adapter, self.quantizers = adapter, quantizers
        self.by_module: dict[int, list[int]] = {}
        self.modules: dict[int, nn.Module] = {}
        for index, owner in enumerate(owners):
            self.by_module.setdefault(id(owner), []).append(index)
            self.modules[id(owner)] = owner
        self.sizes: dict[int, list[int]] = {}       # module -> batch size at each call
        self.calls: dict[int, int] = {}
        self.copy_of: dict[int, int] = {}           # quantizer index -> its copy
        self.alone: set[int] = set()                # quantizers on a constant: one at a time
        self.count = 1
        self.recording = False
        self.inside = False                         # a copy being computed again
        self.handles = [m.register_forward_hook(self._hook, with_kwargs=True)
                        for m in self.modules.values()]

    def recorded(self, forward):
        """The single forward, every quantizer off; the batch size at each hooked call."""
        self.recording = True
        try:
            outputs = _flat(forward())
        finally:
            self.recording = False
        return outputs

    def batched(self, chunk: list[int], count: int, forward) -> list[torch.Tensor]:
        self.copy_of = {index: place + 1 for place, index in enumerate(chunk)}
        self.count, self.calls = count, {}
        return _flat(forward())

    def _hook(self, module, args, kwargs, output):
        if self.inside:
            return None
        ident = id(module)
        if self.recording:
            self.sizes.setdefault(ident, []).append(_batch_size(args, kwargs, output))
            return None
        call = self.calls.get(ident, 0)
        self.calls[ident] = call + 1
        known = self.sizes.get(ident, [])
        if call >= len(known):
            raise NotBatched(f"{type(module).__name__} is called more often on the batch")
        size = _batch_size(args, kwargs, output)
        mine = [i for i in self.by_module[ident] if i in self.copy_of]
        if size == known[call]:
            # a constant (a parameter, a buffer) the batch does not reach: broadcast to
            # every copy, so its quantizers are measured one at a time
            self.alone.update(mine)
            return None
        if size != known[call] * self.count:
            raise NotBatched(f"{type(module).__name__} sees a batch of {size}, not "
                             f"{known[call]} x {self.count} copies")
        if not mine:
            return None
        rows = known[call]
        calls = []
        for index in mine:
            place = self.copy_of[index]
            part = slice(place * rows, (place + 1) * rows)
            calls.append((part, tensors_mapped(args, lambda t, p=part: t[p].clone()),
                          tensors_mapped(kwargs, lambda t, p=part: t[p].clone()),
                          lambda on, q=self.quantizers[index]: self._switch(q, on)))
        return rows_turned(output, calls, module, type(module).__name__)

    def _switch(self, quantizer, on: bool) -> None:
        """The quantizer on for one copy's call again (no hook of this pass inside it)."""
        self.adapter.set_enabled(quantizer, on)
        self.inside = on

    def remove(self):
        for handle in self.handles:
            handle.remove()


def _owner(model: nn.Module, quantizer: Quantizer) -> nn.Module:
    """The module whose call the quantizer's value goes into: an activation quantizer
    itself, a weight quantizer's parent (it runs inside the parent's forward)."""
    if not isinstance(quantizer.module, nn.Module):
        raise NotBatched("the adapter's quantizer is no module")
    if quantizer.sensitive_type != "weight":
        return quantizer.module
    parent = quantizer.name.rpartition(".")[0]
    if not quantizer.name or not parent:
        raise NotBatched(f"no module owns the weight quantizer of {quantizer.op_name}")
    try:
        return model.get_submodule(parent)
    except AttributeError as exc:
        raise NotBatched(f"no module {parent!r} owns a weight quantizer") from exc


def _batch_size(args, kwargs, output) -> int:
    """The first dimension of a call's first tensor input (else its output)."""
    for value in (*args, *kwargs.values(), output):
        found = []
        tensors_mapped(value, found.append)
        for tensor in found:
            if tensor.dim() > 0:
                return tensor.shape[0]
    raise NotBatched("a hooked call has no tensor with a batch dimension")


def _per_copy(outputs: list[torch.Tensor], single: list[torch.Tensor],
              count: int) -> list[list[torch.Tensor]]:
    if len(outputs) != len(single):
        raise NotBatched("the batch gives another number of outputs")
    for batched, one in zip(outputs, single, strict=True):
        if one.dim() == 0 or batched.shape[1:] != one.shape[1:] or \
                batched.shape[0] != one.shape[0] * count:
            raise NotBatched("an output does not grow with the batch")
    return [[batched[c * one.shape[0]:(c + 1) * one.shape[0]]
             for batched, one in zip(outputs, single, strict=True)] for c in range(count)]


def _check_control(control: list[torch.Tensor], single: list[torch.Tensor]) -> None:
    for got, want in zip(control, single, strict=True):
        scale = float(want.abs().max()) if want.numel() else 0.0
        diff = float((got.float() - want.float()).abs().max()) if want.numel() else 0.0
        if not math.isfinite(diff) and got.isnan().equal(want.isnan()):
            continue
        if not diff <= CLOSE * max(scale, 1e-12):
            raise NotBatched("the copy with no quantizer on differs from the single input's "
                             "outputs: the model mixes the copies")


def _alone(model, adapter, quantizer, args, kwargs, reference, key) -> list[float | None]:
    """One quantizer's values measured on its own (one forward of the single input)."""
    adapter.set_enabled(quantizer, True)
    try:
        with torch.inference_mode():
            outputs = _flat(model(*args, **kwargs))
    finally:
        adapter.set_enabled(quantizer, False)
    return output_values(reference, outputs, key)


def _check_one_alone(model, adapter, quantizers, values, args, kwargs, reference, key) -> None:
    """The most sensitive quantizer (first output) run on its own must agree."""
    scored = [(i, v[0]) for i, v in enumerate(values) if v and v[0] is not None
              and math.isfinite(v[0])]
    if not scored:
        return
    index, value = min(scored, key=lambda p: p[1]) if key in ASCENDING else \
        max(scored, key=lambda p: p[1])
    quantizer = quantizers[index]
    again = _alone(model, adapter, quantizer, args, kwargs, reference, key)[0]
    if again is None or not math.isclose(value, again, rel_tol=AGREE, abs_tol=1e-9):
        raise NotBatched(f"the quantizer of {quantizer.op_name} measured alone gives "
                         f"{again}, batched {value}")
