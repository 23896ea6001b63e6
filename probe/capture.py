"""Run the two models, report every layer output (layers.py names them), and turn each
analysis output into one compare_per_layer row against the baseline output that
computes the same thing. The jobs it orchestrates live beside it: fx_tap.py and
eager_tap.py see the outputs, recorder.py keys them by name and call, held.py keeps the
baseline's, rows.py measures the rows, calls.py says what each call reads
(layer_calls.csv) and own_error.py each call's own error.

How outputs are seen: a GraphModule (FX-prepared QAT, fuse_fx) runs node by node: each
node's value is at hand, function nodes included, with its name from the node's module
stack. An eager model runs with forward hooks on its layers, and function ops its
containers call (``x + y`` in a residual block) are seen through a
``TorchFunctionMode``, named by the module running them. A module called several times
gives one row per call (``head``, ``head(1)`` ...), compared with the baseline's output
of the same name and call index.

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

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from qcdoctor.errors import QcdoctorError
from qcdoctor.probe import fused
from qcdoctor.probe.calls import call_lines, call_name, quantizer_names
from qcdoctor.probe.eager_own import EagerOwnTap
from qcdoctor.probe.eager_tap import EagerTap
from qcdoctor.probe.fx_tap import FxTap, placeholder_args
from qcdoctor.probe.held import Guard, Store, as_they_were, ram_budget
from qcdoctor.probe.layers import (
    PASS_THROUGH,
    Layer,
    fx_plan,
)
from qcdoctor.probe.own_error import NOT_FLOAT, own_error_lines
from qcdoctor.probe.recorder import Key, Recorder, Sig
from qcdoctor.probe.rows import (
    INTERMEDIATE,
    PATTERN_END,
    SAME,
    UNALIGNED,
    BaseOutput,
    RowMaker,
    make_row,
    make_unaligned_row,
)
from qcdoctor.probe.stats import flatten_output

# -- the two passes ----------------------------------------------------------------------


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
    own_errors: list[dict] = field(default_factory=list)    # layer_own_error.csv's lines
    own_error_partial: bool = False     # baseline outputs past the memory budget: not all
    calls: list[dict] = field(default_factory=list)     # layer_calls.csv's lines
    row_statistics: str = "torch"       # what computed the rows: c_kernel | torch


def _run(model: nn.Module, args: tuple, kwargs: dict, recorder: Recorder, keep, *,
         quantized: bool, inputs: bool, plan=None, guard: Guard | None = None,
         attributes: tuple = (), own: dict | None = None, node_keys: dict | None = None):
    """One forward of ``model`` with its outputs reported; returns the model's output.
    ``node_keys``: filled with a traced model's node -> the key it reported."""
    if plan is not None:
        values = placeholder_args(model, args, kwargs)
        if values is not None:
            plan = replace(plan)
            if not inputs:
                # an input is compared only where the analysis model quantizes it
                plan.layers = {n: layer for n, layer in plan.layers.items()
                               if not layer.is_input or n in plan.observed}
            tap = FxTap(model, plan, recorder, keep, guard, own)
            try:
                return tap.run(*values)
            finally:
                if node_keys is not None:
                    node_keys.update(tap.node_keys)
                if tap.own is not None:
                    tap.own.close()
                    own["records"] = tap.own.records
                    own["reasons"] = tap.own.statuses()
    own_tap = None if own is None else \
        EagerOwnTap(own["base"], own["counterpart"], own.get("sides"), model.modules())
    tap = EagerTap(model, recorder, keep, quantized=quantized, guard=guard, own=own_tap)
    if inputs:
        tap.inputs(args, kwargs)
    tap.attributes(attributes)
    try:
        with tap.active():
            return model(*args, **kwargs)
    finally:
        if own_tap is not None:
            own_tap.close()
            own["records"], own["reasons"] = own_tap.records, own_tap.reasons


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


# each call's own error is measured, traced and eager models alike (bench/bench_probe.py
# switches it off to price it)
MEASURE_OWN_ERROR = True


def compare_layers(baseline: nn.Module, analysis: nn.Module, args: tuple,
                   kwargs: dict, beside_baseline=None) -> LayerRows:
    """Rows in the analysis model's execution order, and both models' outputs.
    ``beside_baseline``: a job (probe/beside.py) done while the baseline runs, before the
    analysis model does."""
    # an analysis GraphModule says which held values an in-place op may change; an eager
    # model's tensors are copied for the worker
    plans = [fx_plan(m) if isinstance(m, torch.fx.GraphModule) else None
             for m in (baseline, analysis)]
    traced = plans[1] is not None and placeholder_args(analysis, args, kwargs) is not None
    maker = RowMaker(copy=not traced)
    result = LayerRows(row_statistics=_row_statistics(analysis))
    # each call's own error needs the baseline's outputs while the analysis model runs
    # (what each call reads: a traced model's nodes, an eager model's tensors)
    own = {"base": {}, "counterpart": {}, "bytes": 0, "budget": ram_budget(),
           "partial": False, "records": [],
           # a baseline output's side numbers, once its row measured them (its sum of
           # squares serves the own error too)
           "sides": lambda key: base[key].stats if key in base else None} \
        if MEASURE_OWN_ERROR else None
    # baseline outputs are measured in their rows, once the baseline is done: no reader
    # while the baseline runs (nor for outputs no row compares)
    base_guard = Guard()
    store = Store(guard=base_guard)
    base: dict[Key, BaseOutput] = {}
    by_sig: dict[Sig, Key] = {}
    wanted = _wanted_pass_through(plans[1])
    # baseline outputs the analysis looks up by name alone (ops without fusion tokens);
    # None: any (an eager analysis model, its names unknown before it runs)
    by_name = None if plans[1] is None else \
        {layer.name for layer in plans[1].layers.values() if layer.tokens is None}

    def keep_base(layer: Layer) -> bool:
        return layer.kind not in PASS_THROUGH or layer.name in wanted

    def on_base(key, layer, tensor, sig, _producer) -> None:
        base[key] = BaseOutput(layer, None, sig, base_recorder.chains.get(key))
        held = store.put(key, tensor)
        if own is not None:
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

    used: set[Key] = set()
    row_of: dict[Key, tuple[int, Key]] = {}     # analysis key -> (row index, baseline key)
    names: list[str] = []
    row_keys: list[tuple[str, Key]] = []        # (row name, analysis key), table order
    not_float: set[str] = set()                 # rows of integer or boolean values

    def keep_analysis(layer: Layer) -> bool:
        return layer.kind not in PASS_THROUGH

    def on_analysis(key, layer, tensor, sig, producer) -> None:
        name = call_name(*key)
        target, how = _counterpart(key, sig, analysis_recorder.chains.get(key), base, by_sig)
        if target is None:
            result.analysis_only.append(name)
            return
        if not tensor.is_floating_point():
            not_float.add(name)
        if how == UNALIGNED:
            seen = store.peek(target)
            held = maker.add(make_unaligned_row, (name, call_name(*target), base[target], layer,
                                              seen, tensor), 5)
            names.append(name)
            row_keys.append((name, key))
            result.unaligned.append(name)
            return held
        before = row_of.get(producer) if producer is not None else None
        if before is not None and before[1] == target:
            # the producer's row compared an op inside the pattern with its end: flagged
            maker.blank[before[0]] = INTERMEDIATE
            result.fused_intermediates.append(names[before[0]])
            result.aligned.pop(names[before[0]], None)
        reference = store.take(target)
        if reference is None:                # spilled and lost: nothing to compare with
            result.analysis_only.append(name)
            return
        used.add(target)
        row_of[key] = (len(names), target)
        if own is not None and how != INTERMEDIATE and tensor.is_floating_point():
            own["counterpart"][key] = target
        base_name = call_name(*target)
        held = maker.add(make_row, (name, base_name, base[target], layer,
                                reference.to(tensor.device), tensor, how), 5)
        names.append(name)
        row_keys.append((name, key))
        if target != key:
            result.aligned[name] = base_name
        return held

    base_recorder = Recorder(on_base)
    calls: dict = {}                            # analysis key -> its Call
    analysis_recorder = Recorder(on_analysis, calls)
    node_keys: list[dict] = [{}, {}]            # each traced model's node -> key
    try:
        # not inference mode: views and versions tell in-place writes
        with (nullcontext() if beside_baseline is None else beside_baseline.around()), \
                torch.no_grad(), _running("baseline"):
            result.baseline_outputs = flatten_output(
                _run(baseline, args, kwargs, base_recorder, keep_base, quantized=False,
                     inputs=True, plan=plans[0], guard=base_guard,
                     attributes=_attributes(plans[1]), node_keys=node_keys[0]))
        base_guard.clear()
        result.changed = [call_name(*key) for key in store.changed()]
        if own is not None:
            own["base"] = as_they_were(own["base"])
        with torch.inference_mode(), _running("analysis"):
            result.analysis_outputs = flatten_output(
                _run(analysis, args, kwargs, analysis_recorder, keep_analysis, quantized=True,
                     inputs=False, plan=plans[1], own=own, node_keys=node_keys[1]))
        result.rows = maker.rows()
        result.changed += maker.changed
    finally:
        maker.close()
        store.close()
    _leftovers(result, base, used)
    result.calls = call_lines(row_keys, calls, quantizer_names(analysis))
    if own is not None:
        reasons = {call_name(*key): why for key, why in own.get("reasons", {}).items()}
        for name in not_float:
            reasons.setdefault(name, NOT_FLOAT)
        result.own_errors = own_error_lines(result.rows, own["records"], reasons)
        result.own_error_partial = own["partial"]
        own["base"].clear()
    for model, plan, keys in ((analysis, plans[1], node_keys[1]),
                              (baseline, plans[0], node_keys[0])):
        if plan is not None:
            result.graph = model
            # a node's row name with its call's suffix (``pool(1)``: the second call)
            result.graph_names = {n: call_name(*keys[n]) if n in keys else layer.name
                                  for n, layer in plan.layers.items()}
            break
    return result


def _row_statistics(model: nn.Module) -> str:
    """What computes this run's row numbers: the C kernel (built, enabled, CPU float32
    values) or torch's reductions."""
    tensor = next(iter(model.parameters()), None)
    on_cpu = tensor is None or tensor.is_cpu
    return "c_kernel" if fused.ENABLED and fused.available() and on_cpu else "torch"


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
            result.absorbed.append(call_name(*key))
        else:
            result.baseline_only.append(call_name(*key))
