"""Each call's own error in an eager analysis model (knowledge.md R5.2, R5.5), as the
traced model's OwnTap measures it: every row's call is run once more on the baseline's
values of the rows it reads, through its own output quantizer, and compared with the
baseline's output of that call.

The values are found by identity, as layer_calls.csv's data flow is (eager_tap.py): a
tensor a row reported stands for the baseline's output of that row; a tensor an op
without a row made from them (a view, a reshape) is that op run again on their
baseline values; a quantizer passes its input's baseline value on (the baseline has no
quantizer there); a tensor read from nowhere (a model input, a constant) is the same in
both models. A call reading a value whose baseline counterpart is not at hand (past the
memory budget, an op that cannot be run again) is left unmeasured, never measured on
the analysis model's values.
"""

from __future__ import annotations

import weakref

import torch

from qcdoctor.probe.calls import call_name
from qcdoctor.probe.layers import output_scale
from qcdoctor.probe.own_error import (
    MEASURED,
    NO_BASELINE_INPUTS,
    NONFINITE,
    NOT_RERUNNABLE,
    OWN_STATUS,
    WeightMemo,
    own_numbers,
    weight_error,
)

_FOREIGN = object()         # a value whose baseline counterpart is not at hand


class EagerOwnTap:
    """``base``: the baseline's outputs by baseline key; ``counterpart``: an analysis row
    key -> the baseline key it is compared with; ``sides``: a baseline key -> its side
    numbers (or None); ``modules``: the analysis model's modules (their weight fake
    quants replay the analysis call's weight)."""

    def __init__(self, base: dict, counterpart: dict, sides, modules):
        self.base, self.counterpart, self.sides = base, counterpart, sides
        self.values: dict[int, tuple] = {}      # id(tensor) -> (weak reference, baseline value)
        self.records: list[dict] = []
        self.reasons: dict = {}                 # row key -> why it was not measured
        self.weights = WeightMemo(modules)

    # -- the baseline's value of an analysis tensor ---------------------------------------

    def _value(self, tensor):
        """The baseline's value of ``tensor``: itself when it comes from nowhere (an input,
        a constant), _FOREIGN when not at hand."""
        entry = self.values.get(id(tensor))
        if entry is None or entry[0]() is not tensor:
            return tensor
        return entry[1]

    def _set(self, tensor, value) -> None:
        key = id(tensor)
        values = self.values

        def gone(reference, key=key):
            entry = values.get(key)
            if entry is not None and entry[0] is reference:
                del values[key]
        try:
            values[key] = (weakref.ref(tensor, gone), value)
        except TypeError:                       # not weakly referenceable: not followed
            pass

    def _replaced(self, value, found: list):
        """``value`` with each tensor replaced by its baseline value (tuples, lists and
        dicts walked); ``found`` gets whether any is not at hand."""
        if isinstance(value, torch.Tensor):
            replaced = self._value(value)
            if replaced is _FOREIGN:
                found.append(True)
                return value
            return replaced
        if isinstance(value, (tuple, list)):
            return type(value)(self._replaced(v, found) for v in value)
        if isinstance(value, dict):
            return {k: self._replaced(v, found) for k, v in value.items()}
        return value

    def _known(self, args, kwargs) -> bool:
        """Whether any tensor among the arguments has a baseline value of its own."""
        for value in (*args, *(kwargs or {}).values()):
            if isinstance(value, torch.Tensor):
                entry = self.values.get(id(value))
                if entry is not None and entry[0]() is value:
                    return True
            elif isinstance(value, (tuple, list, dict)):
                items = value.values() if isinstance(value, dict) else value
                if self._known(tuple(items), None):
                    return True
        return False

    # -- what the eager tap tells ---------------------------------------------------------

    def passed(self, call, args, kwargs, out, *, quantizer: bool, inplace: bool) -> None:
        """``out`` made by an op without a row (``call(args, kwargs)`` runs it again;
        ``inplace``: it writes into its first argument): its baseline value is the op run
        again on the baseline's values (a quantizer: its input's baseline value)."""
        tensors = _tensor_list(out)
        if not tensors or not self._known(args, kwargs):
            return                              # from nowhere: the same in both models
        if quantizer:
            value = self._value(args[0]) if args else _FOREIGN
            for tensor in tensors:
                self._set(tensor, value)
            return
        found: list = []
        shadow_args, shadow_kwargs = self._replaced(args, found), \
            self._replaced(kwargs or {}, found)
        result = None if found else _rerun(call, shadow_args, shadow_kwargs, inplace)
        shadows = _tensor_list(result) if result is not None else []
        if len(shadows) != len(tensors):
            shadows = [_FOREIGN] * len(tensors)
        for tensor, shadow in zip(tensors, shadows, strict=True):
            self._set(tensor, shadow)

    def row(self, keys: list, layer, call, module, args, kwargs, out, inplace: bool) -> None:
        """A row's call reported (``keys``: its output keys; ``module``: the module it
        calls, None for a function op): measured, and its outputs' baseline values set
        for the calls reading them."""
        tensors = _tensor_list(out)
        if len(tensors) != len(keys) or not keys:
            return
        compared = [key in self.counterpart for key in keys]
        if not any(compared) and not self._known(args, kwargs):
            return                              # compared with nothing, read from nowhere
        found: list = []
        shadow_args, shadow_kwargs = self._replaced(args, found), \
            self._replaced(kwargs or {}, found)
        own = None if found else self._own(module, call, shadow_args, shadow_kwargs, inplace)
        owns = _tensor_list(own) if own is not None else []
        if len(owns) != len(tensors):
            owns = [None] * len(tensors)
        for key, tensor, mine, is_compared in zip(keys, tensors, owns, compared, strict=True):
            base = self._base(key)
            if is_compared:
                if found or base is _FOREIGN:
                    self.reasons.setdefault(key, NO_BASELINE_INPUTS)
                elif mine is None:
                    self.reasons.setdefault(key, NOT_RERUNNABLE)
                elif tensor.is_floating_point():
                    # (a row of several outputs: no weight error of its own)
                    self._measure(key, layer, module if len(keys) == 1 else None, base, mine)
            if base is not _FOREIGN:
                self._set(tensor, base)
            elif is_compared or mine is None:   # compared, its baseline output not kept
                self._set(tensor, _FOREIGN)
            else:                   # compared with nothing: its own output stands in
                self._set(tensor, mine)

    def close(self) -> None:
        self.weights.close()
        self.values.clear()

    # -- measuring ------------------------------------------------------------------------

    def _base(self, key):
        found = self.counterpart.get(key)
        value = self.base.get(found) if found is not None else None
        return value if isinstance(value, torch.Tensor) else _FOREIGN

    def _own(self, module, call, args, kwargs, inplace: bool):
        if module is not None:
            return self.weights.replay(module, lambda: _rerun(call, args, kwargs, inplace))
        return _rerun(call, args, kwargs, inplace)

    def _measure(self, key, layer, module, base, own) -> None:
        if not isinstance(own, torch.Tensor) or own.is_nested:
            self.reasons.setdefault(key, NOT_RERUNNABLE)
            return
        if own.layout is not torch.strided:     # sparse: compared densely, as its row is
            own = own.to_dense()
        qscale, _ = output_scale(layer.quantizer)
        side = self.sides(self.counterpart[key]) if self.sides is not None else None
        numbers = own_numbers(base, own.detach(), qscale,
                              side if side and side.get("sumsq") is not None else None)
        if not numbers:
            self.reasons[key] = NONFINITE
            return
        record = {"mod_name": call_name(*key), OWN_STATUS: MEASURED, **numbers}
        if module is not None:
            self.weights.recording = False      # its quantizer called by us: not replayed
            try:
                record.update(weight_error(module))
            finally:
                self.weights.recording = True
        self.records.append(record)


def _rerun(call, args, kwargs, inplace: bool):
    """``call(args, kwargs)``, a first argument it writes into copied first (never a
    baseline value written); None when it rejects them."""
    try:
        if inplace and args and isinstance(args[0], torch.Tensor):
            args = (args[0].clone(), *args[1:])
        return call(args, kwargs)
    except Exception:  # noqa: BLE001 - a value the op cannot take: not measured
        return None


def _tensor_list(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    found: list = []
    if isinstance(value, (tuple, list)):
        for item in value:
            found += _tensor_list(item)
    elif isinstance(value, dict):
        for item in value.values():
            found += _tensor_list(item)
    return found
