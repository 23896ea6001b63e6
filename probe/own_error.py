"""Each layer's own error (knowledge.md §17 R4.2): the analysis layer run on the
baseline's inputs of that layer, with its output quantizer, against the baseline's output.
Free of everything upstream, it tells a source (a large own error) from propagation (a
small one) and accumulation (many small ones).

It is measured while the analysis model runs (``capture.compare_layers``), one more call
of each layer: a traced analysis model's node is called again with its inputs replaced by
the baseline's values of the rows it reads (values that are no row of their own, shapes
and constants, are the analysis model's). Weighted layers also get their weight
quantization error: the worst output channel's SQNR of the fake-quantized weight (a
folded BN included), whether one scale serves every channel, and how far apart the
channels' ranges are.

``layer_own_error.csv`` holds one line a row: ``mod_name``, ``own_cosine``, ``own_atol``,
``own_qsteps`` (own Atol in the output's quantization steps), ``weight_sqnr_db``,
``weight_scheme`` (per_tensor | per_channel), ``weight_channel_ratio``.
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
from qcdoctor.probe.fast_quant import fake_quant, plan_of  # the output quantizer, in place
from qcdoctor.probe.layers import output_scale
from qcdoctor.probe.stats import cosine_of_energies, flattened, pair_stats

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
        channels = folded.reshape(folded.shape[0], -1)
        noise = (quantized.reshape(channels.shape) - channels).pow(2).sum(1)
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


def own_error_text(records: list[dict]) -> str:
    """The CSV text of ``records`` (one dict a row, keys from COLUMNS)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for record in records:
        writer.writerow([_cell(record.get(column)) for column in COLUMNS])
    return out.getvalue()


def write_own_error(folder: Path, records: list[dict]) -> Path:
    path = Path(folder) / OWN_ERROR_FILE
    path.write_text(own_error_text(records), encoding="utf-8")
    return path


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.7g}"
    return str(value)


class _WeightMemo:
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
    (``capture._FxTap``): every node is also run in a *shadow* world where each compared
    row reads the baseline's value of the rows it reads. A row's own output is its node
    run there (then its output quantizer), compared with the baseline's output of its row.

    ``base``: baseline outputs by key, kept from the baseline's run; ``counterpart``: an
    analysis row key -> the baseline key it is compared with (filled as rows are made);
    ``node_keys``: the tap's node -> row key; ``sides``: a baseline key -> the side numbers
    its row measured (None while not measured).
    """

    def __init__(self, plan, base: dict, counterpart: dict, node_keys: dict, sides=None):
        self.plan, self.base, self.counterpart = plan, base, counterpart
        self.node_keys = node_keys
        self.sides = sides                  # baseline key -> its side numbers, or None
        self.quantizer_of = {source: q for q, source in plan.observer.items()}
        self.shadow: dict = {}              # node -> its value in the shadow world
        self.pending: dict = {}             # row node -> its own output before quantization
        self.records: list[dict] = []
        self.seen: set = set()
        self.weights = _WeightMemo(plan.modules.values())

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
            self.shadow[node] = value
            if node.op == "placeholder" and node in plan.observed:
                self.pending[node] = value  # a model input: its quantizer's own error
            return
        source = plan.observer.get(node)
        if source is not None:              # a quantizer: its row's own output goes through it
            own = self.pending.pop(source, None)
            due = self._due(source) if isinstance(own, torch.Tensor) else None
            if due is not None and not self._measure_quantized(source, due, module, own):
                quantized = fake_quant(module, own)
                if quantized is None:
                    quantized = _call(node, module, (own,), {})
                self._measure(source, quantized if quantized is not None else own, due)
            reported = self.base_of(node)
            self.shadow[node] = reported if reported is not None else value
            return
        args = torch.fx.node.map_arg(node.args, self._read)
        kwargs = torch.fx.node.map_arg(node.kwargs, self._read) if node.kwargs else {}
        if node in plan.inplace:            # never written into a baseline value
            args = _cloned(args)
        own = self.weights.replay(module, lambda: _call(node, module, args, kwargs)) \
            if module is not None else _call(node, module, args, kwargs)
        is_row = node in plan.layers
        if is_row and own is not None:
            if node in plan.observed:
                self.pending[node] = own    # measured after its quantizer
            else:
                self._measure(node, own)
        reported = self.base_of(node) if is_row and node not in plan.observed else None
        self.shadow[node] = reported if reported is not None else \
            (own if own is not None else value)

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
        measured already, no baseline output kept)."""
        key = self.node_keys.get(node)
        if key is None or key[1] != 0 or key in self.seen or key not in self.counterpart:
            return None
        base = self.base.get(self.counterpart[key])
        if not isinstance(base, torch.Tensor):
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
            return
        record = {"mod_name": key[0], **numbers}
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
