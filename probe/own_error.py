"""Each layer's own error (knowledge.md §17 R4.2): the analysis layer run on the
baseline's inputs of that layer, with its output quantizer, against the baseline's output.
Free of everything upstream, it tells a source (a large own error) from propagation (a
small one) and accumulation (many small ones).

It is measured while the analysis model runs (``capture.compare_layers``), one more call
of each layer: a traced analysis model's node is called again with its inputs replaced by
the baseline's values of the rows it reads (OwnTap, below: values that are no row of
their own are computed again from them, shapes and constants are the analysis model's);
an eager model's calls likewise (eager_own.py). Weighted layers also get their weight
quantization error: the worst output channel's SQNR of the fake-quantized weight (a
folded BN included), whether one scale serves every channel, and how far apart the
channels' ranges are.

A row is a call (``head``, ``head(1)`` ...): each call is measured on the baseline's
inputs of that call. A call whose baseline inputs are not at hand (past the memory
budget, a value upstream that could not be computed again) is left unmeasured, never
measured on the analysis model's values, and ``own_status`` says why.

``layer_own_error.csv`` holds one line a row: ``mod_name``, ``own_cosine``, ``own_atol``,
``own_qsteps`` (own Atol in the output's quantization steps), ``weight_sqnr_db``,
``weight_scheme`` (per_tensor | per_channel), ``weight_channel_ratio``, ``own_status``
(``measured`` or the reason, below); a row not measured has empty number cells.
"""

from __future__ import annotations

import csv
import io
import math
import weakref
from pathlib import Path

import torch
from torch import nn

from qcdoctor.collectors.reading.own_error import COLUMNS, OWN_ERROR_FILE  # as triage reads them
from qcdoctor.probe import fused
from qcdoctor.probe.calls import call_name
from qcdoctor.probe.fast_quant import fake_quant, plan_of  # the output quantizer, in place
from qcdoctor.probe.layers import output_scale
from qcdoctor.probe.stats import cosine_of_energies, flatten_output, flattened, pair_stats

OWN_STATUS = "own_status"
FILE_COLUMNS = COLUMNS if OWN_STATUS in COLUMNS else (*COLUMNS, OWN_STATUS)
# own_status: measured, or why not
MEASURED = "measured"
NO_BASELINE_INPUTS = "no_baseline_inputs"   # the baseline's values it needs are not at hand
NOT_RERUNNABLE = "not_rerunnable"           # the call cannot be run again alone
NONFINITE = "nonfinite"                     # its own output or the baseline's is not finite
NO_BASELINE_OUTPUT = "no_baseline_output"   # the row is compared with nothing (flagged)
NOT_FLOAT = "not_float"                     # integer or boolean output: no error to measure

_WEIGHTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def weight_error(module: nn.Module) -> dict:
    """The weight quantization error of a layer with a weight fake quant (empty dict: none
    to measure). A fused conv-bn's weight is measured as it is quantized: BN folded in.
    Kept per module while its weight, BN and quantizer are the same (a probe run again)."""
    quantizer = getattr(module, "weight_fake_quant", None)
    weight = getattr(module, "weight", None)
    if not isinstance(quantizer, nn.Module) or not isinstance(weight, torch.Tensor) \
            or weight.dim() < 1 or weight.numel() == 0:
        return {}
    bn = getattr(module, "bn", None)
    stamp = (id(quantizer), weight._version, id(weight),
             bn.running_var._version if isinstance(getattr(bn, "running_var", None),
                                                   torch.Tensor) else None)
    known = _WEIGHTS.get(module)
    if known is not None and known[0] == stamp:
        return dict(known[1])
    found = _weight_error(module, quantizer, weight)
    _WEIGHTS[module] = (stamp, found)
    return dict(found)


def _weight_error(module: nn.Module, quantizer: nn.Module, weight: torch.Tensor) -> dict:
    with torch.no_grad():
        folded = _folded(module, weight.detach().float())
        try:
            quantized = quantizer(folded).float()
        except Exception:  # noqa: BLE001 - a quantizer that cannot run alone: not measured
            return {}
        if quantized.shape != folded.shape:
            return {}
        # the layer's own output channels: axis 1 of a transposed conv's weight
        axis = 1 if getattr(module, "transposed", False) and folded.dim() > 1 else 0
        channels = folded.movedim(axis, 0).reshape(folded.shape[axis], -1)
        noise = (quantized.movedim(axis, 0).reshape(channels.shape) - channels).pow(2).sum(1)
        signal = channels.pow(2).sum(1)
        live = signal > 0
        if not bool(live.any()):
            return {}
        ratio = signal[live] / noise[live].clamp_min(1e-30)
        sqnr = float(10.0 * torch.log10(ratio.min()))
        extent = channels.abs().amax(1)[live]
        spread = float(extent.max() / extent.min()) if float(extent.min()) > 0 else math.inf
    scale = getattr(quantizer, "scale", None)
    per_tensor = not (isinstance(scale, torch.Tensor) and scale.numel() > 1)
    scheme = getattr(quantizer, "qscheme", None)
    if scheme in (torch.per_channel_affine, torch.per_channel_symmetric,
                  torch.per_channel_affine_float_qparams):
        per_tensor = False
    return {"weight_sqnr_db": min(sqnr, 200.0), "weight_scheme":
            "per_tensor" if per_tensor else "per_channel",
            "weight_channel_ratio": spread if math.isfinite(spread) else None}


def _folded(module: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """The weight a torch.ao ConvBn module quantizes: scaled by BN's gamma / std."""
    bn = getattr(module, "bn", None)
    if not isinstance(bn, nn.modules.batchnorm._BatchNorm) or bn.running_var is None:
        return weight
    std = torch.sqrt(bn.running_var.float() + bn.eps)
    gamma = bn.weight.detach().float() if bn.weight is not None else torch.ones_like(std)
    factor = gamma / std
    if factor.numel() != weight.shape[0]:
        return weight
    shape = [-1] + [1] * (weight.dim() - 1)
    if getattr(module, "transposed", False) and weight.dim() > 1:
        return weight
    return weight * factor.reshape(shape)


def own_numbers(base: torch.Tensor, own: torch.Tensor, qscale: float | None,
                base_side: dict | None = None) -> dict:
    """own_cosine, own_atol and own_qsteps of one layer's own output against the baseline's
    (none where either side is not finite: the sums say so, without a pass of their own).
    ``base_side``: the baseline side's numbers when its row has them (its sum of squares
    is reused)."""
    if base.shape != own.shape or base.numel() == 0:
        return {}
    stats = pair_stats(base, own, ("cosine", "atol"), base_side=base_side)
    cosine, atol = stats["cosine"], stats["atol"]
    return _own_values(cosine, atol, qscale)


def _own_values(cosine: float | None, atol: float | None, qscale: float | None) -> dict:
    if cosine is None or atol is None or not (math.isfinite(cosine) and math.isfinite(atol)):
        return {}
    steps = atol / qscale if qscale and qscale > 0 else None
    return {"own_cosine": cosine, "own_atol": atol, "own_qsteps": steps}


def own_error_lines(rows: list[dict], records: list[dict], reasons: dict[str, str]) -> list[dict]:
    """One line per table row, in its order: the row's measured numbers, or its name and
    why it was not measured (``reasons``: row name -> the reason found; a row compared
    with nothing says so)."""
    measured = {record["mod_name"]: record for record in records}
    lines = []
    for row in rows:
        name = row["mod_name"]
        record = measured.get(name)
        if record is not None:
            lines.append(record)
            continue
        reason = reasons.get(name)
        if reason is None:
            reason = NO_BASELINE_OUTPUT if row.get("match") not in ("name", "pattern_end") \
                else NOT_RERUNNABLE
        lines.append({"mod_name": name, OWN_STATUS: reason})
    return lines


def unmeasured_counts(lines: list[dict]) -> dict[str, int]:
    """reason -> how many rows were not measured for it."""
    counts: dict[str, int] = {}
    for line in lines:
        status = line.get(OWN_STATUS, MEASURED)
        if status != MEASURED:
            counts[status] = counts.get(status, 0) + 1
    return dict(sorted(counts.items()))


def own_error_summary(lines: list[dict]) -> dict:
    """probe_run.yaml's ``own_error``: rows measured, and those not measured by reason."""
    missing = unmeasured_counts(lines)
    return {"measured": len(lines) - sum(missing.values()), "not_measured": missing}


# reasons a warning names: the others are rows that have no error of their own to measure
_SAID = {NO_BASELINE_INPUTS: "their baseline inputs are not at hand",
         NOT_RERUNNABLE: "the call cannot be run again alone",
         NONFINITE: "their own output or the baseline's holds NaN or infinite values"}


def own_error_warnings(lines: list[dict], past_budget: bool) -> list[str]:
    """One warning per reason rows went unmeasured, naming how many and the first ones."""
    warnings = []
    for reason, why in _SAID.items():
        names = [line["mod_name"] for line in lines if line.get(OWN_STATUS) == reason]
        if not names:
            continue
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        text = f"{len(names)} row(s) have no own error in layer_own_error.csv ({shown}): {why}"
        if reason == NO_BASELINE_INPUTS and past_budget:
            text += (" (the baseline's layer outputs passed the memory budget kept for the own "
                     "error; they are never measured on the analysis model's values): probe a "
                     "smaller input to measure them all")
        warnings.append(text + f" (own_status {reason})")
    return warnings


def own_error_text(records: list[dict]) -> str:
    """The CSV text of ``records`` (one dict a row, keys from FILE_COLUMNS)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(FILE_COLUMNS)
    for record in records:
        writer.writerow([_cell(record.get(column)) for column in FILE_COLUMNS])
    return out.getvalue()


def write_own_error(folder: Path, records: list[dict]) -> Path:
    path = Path(folder) / OWN_ERROR_FILE
    path.write_text(own_error_text(records), encoding="utf-8")
    return path


def _cell(value) -> str:
    if type(value) is float and value - value == 0:      # most cells: a finite float
        return f"{value:.7g}"
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.7g}"
    return str(value)


class WeightMemo:
    """A layer's shadow call replays the fake-quantized weight its analysis call made a
    moment before: the own error may cost one more forward, no more, and a weight's fake
    quant (a fused BN folded in first) is a good part of a layer's call. Between the two
    calls nothing runs, and the model is in eval mode with its observers frozen, so the
    weight is quantized to the same values. Each weight quantizer's current ``forward``
    (its class's, the probe's in-place one, or one set on the instance) is wrapped for the
    run, and ``close`` puts that one back on every exit path; a call whose input differs
    in shape from the recorded one is computed."""

    def __init__(self, modules):
        self.wrapped: list[tuple[nn.Module, object]] = []  # (quantizer, its instance forward)
        self.replaying = False
        self.recording = True               # off: a call of our own (weight_error), kept out
        self.made: dict[int, list] = {}     # quantizer id -> [(input shape, output), ...]
        seen: set[int] = set()
        for module in modules:
            quantizer = getattr(module, "weight_fake_quant", None)
            if isinstance(quantizer, nn.Module) and id(quantizer) not in seen:
                seen.add(id(quantizer))
                before = quantizer.__dict__.get("forward")
                quantizer.forward = self._memoized(id(quantizer), quantizer.forward)
                self.wrapped.append((quantizer, before))

    def _memoized(self, key: int, forward):
        def memoized(x, *rest, **kwargs):
            made = self.made.get(key)
            if self.replaying and made and not rest and not kwargs and \
                    isinstance(x, torch.Tensor) and made[0][0] == x.shape:
                return made.pop(0)[1]
            out = forward(x, *rest, **kwargs)
            if self.recording and not self.replaying and isinstance(x, torch.Tensor):
                self.made.setdefault(key, []).append((x.shape, out))
            return out
        return memoized

    def replay(self, module, call):
        """``call()`` (the shadow call of ``module``) with its weight quantizer replaying;
        what the analysis call made is dropped after it."""
        quantizer = getattr(module, "weight_fake_quant", None)
        if quantizer is None or id(quantizer) not in self.made:
            return call()
        self.replaying = True
        try:
            return call()
        finally:
            self.replaying = False
            self.made.pop(id(quantizer), None)

    def close(self) -> None:
        self.made.clear()
        while self.wrapped:
            quantizer, before = self.wrapped.pop()
            if before is None:
                quantizer.__dict__.pop("forward", None)
            else:
                quantizer.forward = before


class OwnTap:
    """The own error of each layer of a traced analysis model, measured as it runs
    (``fx_tap.FxTap``): every node is also run in a *shadow* world where each compared
    row reads the baseline's value of the rows it reads. A row's own output is its node
    run there (then its output quantizer), compared with the baseline's output of its row.

    ``base``: baseline outputs by key, kept from the baseline's run; ``counterpart``: an
    analysis row key -> the baseline key it is compared with (filled as rows are made);
    ``node_keys``: the tap's node -> row key; ``sides``: a baseline key -> the side numbers
    its row measured (None while not measured).
    """

    def __init__(self, plan, base: dict, counterpart: dict, node_keys: dict, sides=None,
                 node_rows: dict | None = None):
        self.plan, self.base, self.counterpart = plan, base, counterpart
        self.node_keys = node_keys
        self.node_rows = {} if node_rows is None else node_rows    # node -> its output keys
        self.sides = sides                  # baseline key -> its side numbers, or None
        self.quantizer_of = {source: q for q, source in plan.observer.items()}
        self.shadow: dict = {}              # node -> its value in the shadow world
        self.pending: dict = {}             # row node -> its own output before quantization
        self.records: list[dict] = []
        self.seen: set = set()              # row keys measured
        self.foreign: set = set()           # nodes whose shadow value is not the baseline's
        self.unmeasured: dict = {}          # row node -> why its own error is not measured
        self.output_reasons: dict = {}      # an output key of a row of several -> why not
        self.weights = WeightMemo(plan.modules.values())

    def base_of(self, node):
        """The baseline's value of the row ``node`` reports (through its quantizer)."""
        key = self.node_keys.get(self.plan.observer.get(node, node))
        found = self.counterpart.get(key) if key is not None else None
        return self.base.get(found) if found is not None else None

    def after(self, node, value, module) -> None:
        """Called once ``node`` ran on the analysis values (``value``) and was reported;
        ``module``: the module a call_module node called."""
        plan = self.plan
        if node.op in ("placeholder", "get_attr", "output"):
            self.shadow[node] = value       # the same inputs in both models; constants
            if node in plan.observed:       # an input or a constant: its quantizer's error
                self.pending[node] = value
            elif node.op == "get_attr" and node in plan.layers:
                self._measure(node, value)  # a constant reads nothing: its error is its own
            return
        source = plan.observer.get(node)
        if source is not None:              # a quantizer: its row's own output goes through it
            self._quantizer_after(node, source, value, module)
            return
        is_row = node in plan.layers
        if self._reads_foreign(node):
            # a value it reads is not the baseline's (past the memory budget, a call that
            # could not run again): never measured on the analysis model's values
            self._unmeasured(node, NO_BASELINE_INPUTS, is_row)
            self._foreign(node, value)
            return
        args = torch.fx.node.map_arg(node.args, self._read)
        kwargs = torch.fx.node.map_arg(node.kwargs, self._read) if node.kwargs else {}
        if node in plan.inplace:            # never written into a baseline value
            args = _cloned(args)
        own = self.weights.replay(module, lambda: _call(node, module, args, kwargs)) \
            if module is not None else _call(node, module, args, kwargs)
        if own is None:
            self._unmeasured(node, NOT_RERUNNABLE, is_row)
            self._foreign(node, value)
            return
        if is_row:
            if node in plan.observed:
                self.pending[node] = own    # measured after its quantizer
            elif node in self.node_keys:
                self._measure(node, own)
            else:
                self._measure_outputs(node, own)
        reported = self.base_of(node) if is_row and node not in plan.observed else None
        if reported is not None:
            self.shadow[node] = reported
        elif is_row and node not in plan.observed and self._compared(node):
            self._foreign(node, own)        # compared, its baseline output not kept
        else:
            self.shadow[node] = own

    def _quantizer_after(self, node, source, value, module) -> None:
        own = self.pending.pop(source, None)
        quantized = None
        due = self._due(source) if isinstance(own, torch.Tensor) else None
        if due is not None and not self._measure_quantized(source, due, module, own):
            quantized = self._quantized(node, module, own)
            self._measure(source, quantized if quantized is not None else own, due)
        reported = self.base_of(node)
        if reported is not None:
            self.shadow[node] = reported
        elif isinstance(own, torch.Tensor) and not self._compared(source):
            # a row compared with nothing (a fused pattern's inside): its own output,
            # computed from the baseline's values, stands in
            if quantized is None:
                quantized = self._quantized(node, module, own)
            self.shadow[node] = quantized if quantized is not None else own
        else:
            self._foreign(node, value)

    def _quantized(self, node, module, own):
        quantized = fake_quant(module, own)
        return quantized if quantized is not None else _call(node, module, (own,), {})

    def _compared(self, node) -> bool:
        key = self.node_keys.get(node)
        return key is not None and key in self.counterpart

    def _reads_foreign(self, node) -> bool:
        foreign = self.foreign
        if not foreign:
            return False
        return any(arg in foreign and self.base_of(arg) is None
                   for arg in node._input_nodes)

    def _foreign(self, node, value) -> None:
        self.shadow[node] = value
        self.foreign.add(node)

    def _unmeasured(self, node, reason: str, is_row: bool) -> None:
        if is_row:
            self.unmeasured.setdefault(node, reason)

    def statuses(self) -> dict:
        """Row key -> why its own error was not measured, for the rows this tap knows."""
        found = dict(self.output_reasons)
        for node, reason in self.unmeasured.items():
            for key in self.node_rows.get(node, ()):
                if key not in self.seen:
                    found.setdefault(key, reason)
        return found

    def _measure_outputs(self, node, own) -> None:
        """A row of several outputs (``topk``: values and indices): each float output
        compared with the baseline's output of its key."""
        keys = self.node_rows.get(node, ())
        outputs = flatten_output(own)
        if len(keys) < 2 or len(outputs) != len(keys):
            return
        for key, (_, tensor) in zip(keys, outputs, strict=True):
            if key not in self.counterpart or not tensor.is_floating_point():
                continue
            base = self.base.get(self.counterpart[key])
            if not isinstance(base, torch.Tensor):
                self.output_reasons.setdefault(key, NO_BASELINE_INPUTS)
                continue
            numbers = own_numbers(base, tensor, None)
            self.seen.add(key)
            if numbers:
                self.records.append({"mod_name": call_name(*key), OWN_STATUS: MEASURED,
                                     **numbers})
            else:
                self.output_reasons[key] = NONFINITE

    def close(self) -> None:
        self.weights.close()

    def forget(self, node) -> None:
        self.shadow.pop(node, None)

    def _read(self, arg):
        value = self.base_of(arg)
        return value if value is not None else self.shadow.get(arg)

    def _due(self, node):
        """(row key, baseline output, output scale, baseline side numbers) of the row whose
        own error ``node``'s output measures; None where there is none to measure (no row,
        measured already, no baseline output kept: then said)."""
        key = self.node_keys.get(node)
        if key is None or key in self.seen or key not in self.counterpart:
            return None
        base = self.base.get(self.counterpart[key])
        if not isinstance(base, torch.Tensor):
            self.unmeasured.setdefault(node, NO_BASELINE_INPUTS)
            return None
        layer = self.plan.observed_layers.get(self.quantizer_of.get(node)) or \
            self.plan.layers[node]
        qscale, _ = output_scale(layer.quantizer)
        side = self.sides(self.counterpart[key]) if self.sides is not None else None
        return key, base, qscale, side if side and side.get("sumsq") is not None else None

    def _measure(self, node, own, due=None) -> None:
        """``due``: what ``_due(node)`` gave, when the caller asked already."""
        due = due or self._due(node)
        if due is None or not isinstance(own, torch.Tensor):
            return
        key, base, qscale, side = due
        self._record(node, key, own_numbers(base, own.detach(), qscale, side))

    def _measure_quantized(self, node, due, quantizer, own: torch.Tensor) -> bool:
        """The own error of ``node``'s row (``due``: ``_due(node)``) from its output
        quantizer's input ``own``, the quantized values never stored (the fused kernel,
        for a per-tensor quantizer fast_quant mirrors); False where it cannot (the caller
        quantizes, then measures)."""
        key, base, qscale, side = due
        plan = plan_of(quantizer)
        if plan is None or plan.numbers is None or own.shape != base.shape:
            return False
        # element by element: both sides flattened alike (a transposed one copied)
        base_flat, own_flat = flattened(base), flattened(own.detach())
        if not (fused.fits(own_flat) and fused.fits(base_flat)):
            return False
        noise, atol, power = fused.fake_quant_pair(base_flat, own_flat, *plan.numbers)
        signal = side["sumsq"] if side else fused.side(base_flat)[3]
        self._record(node, key, _own_values(cosine_of_energies(signal, power, noise), atol,
                                            qscale))
        return True

    def _record(self, node, key, numbers: dict) -> None:
        self.seen.add(key)
        if not numbers:
            self.unmeasured[node] = NONFINITE
            self.seen.discard(key)
            return
        record = {"mod_name": call_name(*key), OWN_STATUS: MEASURED, **numbers}
        if node.op == "call_module":
            module = self.plan.modules.get(node.target)
            if module is not None:
                # its quantizer called by us, not by the model: nothing to replay later
                self.weights.recording = False
                try:
                    record.update(weight_error(module))
                finally:
                    self.weights.recording = True
        self.records.append(record)


def _call(node, module, args, kwargs):
    """The node's op on ``args`` (None when it rejects them: that layer is not measured)."""
    try:
        if node.op == "call_module":
            return module(*args, **kwargs)
        if node.op == "call_function":
            return node.target(*args, **kwargs)
        return getattr(args[0], node.target)(*args[1:], **kwargs)
    except Exception:  # noqa: BLE001 - a shadow value the op cannot take: not measured
        return None


def _cloned(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (tuple, list)):
        return type(value)(_cloned(v) for v in value)
    return value
