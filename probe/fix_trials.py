"""Measured fixes: candidate remedies tried on a copy of the analysis model, each measured by
how much of the model-output error it takes away (``compare_models(..., try_fixes=True)``,
``qcdoctor probe --try-fixes``); written as fix_trials.yaml (``SCHEMA``, docs/probe.md).

Everything runs on ONE deep copy of the analysis model, made by the caller: the user's
model is never changed. A trial swaps a quantizer of our own (``TrialFakeQuantize``) into
the copy or switches fake quants off, runs the probe's input, measures, and puts back
what was there, so the peak memory is the model twice whatever the number of trials.

The figures: the model-output metric (``Cosine``, ``L1`` or ``MSE``) of the output that
is worst before any fix (``output``), against the baseline's output of the comparison.
Where the model contains post-processing (knowledge.md R5.4: a topk, argmax, sort or nms
and what reads its indices), the "outputs" are the tensors entering it instead
(probe/postprocess_entries.py; ``before_postprocess`` in the file).
Its error is 1 - Cosine for Cosine, the value itself for L1 and MSE; ``error_removed`` =
1 - error after / error before, clamped to [0, 1]. The target: ``error_removed`` at least
a share (0.9 by default) or, for Cosine, the output at least ``cosine_good`` (0.999).

Every forward pass of the copy counts against the budget (``forwards``); a setting
measured once is never run again (a candidate's int16 trial is reused by the search):

1. before: the copy as it is, one pass (every later figure is measured the same way);
2. candidates, at most ``MAX_CANDIDATES``: the sources the layer reading of
   compare_per_layer_out names (the collectors' ``read_layers``: the origin, a second
   source, the row of the largest Cosine step), then the most sensitive ops of the
   output's sensitivity table, then the rows that add the most error (their Cosine
   step), each layer once and only layers with a fake quant switched on;
3. trials, per candidate, one pass each, in the order of ``FIXES``: ``int16_activation``
   (its output quantizer over 16-bit integers, the same covered range: a finer step),
   ``int16_weight`` (its weight quantizer likewise), ``fixed_scale`` (its output
   quantizer's range widened to cover the baseline's range at that layer, read from the
   comparison's row), ``per_channel`` (its per-tensor weight quantizer per output channel,
   the qparams from the weight itself), ``float`` (its fake quants off: the most a fix of
   that layer can give). A trial that does not apply is not run: no such quantizer,
   already 16 bits, weights already per channel, a range that already covers the
   baseline's, qparams the adapter cannot read;
   Where the reading locates one source (``SINGLE_SOURCE``: a cliff, an outlier, or the
   one step of an accumulation, no
   second source), its remedies go first, those its error kind points to
   (``REMEDY_ORDER``) before the others, the float trial last, and the trials stop at the
   first remedy reaching the target: no other candidate, no step 4 (the note
   ``located_first``); where none reaches it, the other candidates and step 4 follow;
4. the search for the smallest set of layers whose 16-bit setting (activation and
   weight quantizers) brings the output within the target, with the passes left:
   a. every quantized layer at 16 bits, one pass: when even that misses the target the
      search stops (``reached: false``), and one pass with every fake quant off tells
      the fake quants' ranges (clipping: off reaches the target) from what is no fake
      quant's doing (a note; where the comparison found the two models differ beyond
      quantization, R5.3, the note says so). That pass is the comparison's own where it
      measured the same tensors (not run again);
   b. the layers ranked by the reading (its sources first), then by the sensitivity
      table (else by their Cosine steps), then in execution order; no pass;
   c. bisection over that ranking (``_Search._search``), every set measured whole
      (the layers' errors interact): the shortest prefix reaching the target, then the
      layers it holds that can go, found from the back in runs (doubling, then
      bisection). With k needed layers among N ranked first, a, b and c cost at most
      1 + ⌈log2 N⌉ + k passes, within k·⌈log2(N/k)⌉ + k + 2 (``ranked`` and
      ``forwards`` in the file).
   Every set reported was measured. When the budget ends in c the set reaches the
   target but may not be the smallest (a note says so); when it ends before a, there is
   no search (``greedy: null``, a note says why).

What a trial cannot tell (``caveats``): one input is not the dataset (confirm a fix by
evaluation), and a 16-bit fake quant is not what the compiled model computes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from qcdoctor.collectors.reading.compare_layers import read_folder
from qcdoctor.collectors.reading.thresholds import DEFAULT
from qcdoctor.errors import QcdoctorError
from qcdoctor.probe.badcase_search import ROUNDING_FACTOR
from qcdoctor.probe.quantizers import QParams, Quantizer, QuantizerAdapter
from qcdoctor.probe.sensitivity import METRICS
from qcdoctor.probe.stats import flatten_output, pair_stats
from qcdoctor.probe.trial_quantizers import TrialFakeQuantize, at_bits, widened

SCHEMA = "qcdoctor/fix-trials-v1"
FILE = "fix_trials.yaml"
FIXES = ("int16_activation", "int16_weight", "fixed_scale", "per_channel", "float")
FIX_METRICS = ("Cosine", "L1", "MSE")
CAVEATS = ("one_input", "fake_quant_only")
MAX_CANDIDATES = 8            # layers tried one by one (five trials each at most)
DEFAULT_BUDGET = 200          # forward passes of the copy, the first (before) included
DEFAULT_SHARE = 0.9           # of the output error a fix must remove
TRIAL_BITS = 16
# among trials equally good: the fixes that keep 8 bits first, the upper bound last
_TIE_ORDER = {"fixed_scale": 0, "per_channel": 1, "int16_activation": 2, "int16_weight": 3,
              "float": 4}


@dataclass(frozen=True)
class Target:
    """Where a fix is good enough: ``error_removed`` at least this share, or (Cosine only)
    the output's Cosine at least ``cosine``."""
    error_removed: float
    cosine: float | None

    def as_dict(self) -> dict:
        out = {"error_removed": self.error_removed}
        if self.cosine is not None:
            out["cosine"] = self.cosine
        return out


def check_options(budget, target, metric) -> Target:
    """The fix options, checked before any work: QcdoctorError naming the bad one."""
    if metric not in FIX_METRICS:
        raise QcdoctorError(f"unknown fix metric {metric!r}", key="fix_metric",
                            fix=f"use one of {', '.join(FIX_METRICS)}")
    if isinstance(budget, bool) or not isinstance(budget, int):
        raise QcdoctorError(f"the fix budget {budget!r} is not a whole number", key="fix_budget",
                            fix=f"give a number of forward passes, e.g. {DEFAULT_BUDGET}")
    if budget < 2:
        raise QcdoctorError(f"a fix budget of {budget} forward pass(es) is too small for one "
                            f"trial", key="fix_budget",
                            fix=f"give at least 2 (one pass measures the model as it is, one a "
                                f"trial); the default is {DEFAULT_BUDGET}")
    return parse_target(target, metric)


def parse_target(value, metric: str) -> Target:
    """None (the defaults), a share of the error (0.95, "0.95"), or the keys to change
    (``{"error_removed": 0.95, "cosine": 0.9995}``, "error_removed=0.95,cosine=0.9995");
    a key not given keeps its default."""
    given: dict = {}
    if value is None:
        pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        given = {"error_removed": value}
    elif isinstance(value, str):
        given = _target_text(value)
    elif isinstance(value, dict):
        given = dict(value)
    else:
        raise QcdoctorError(f"the fix target {value!r} is neither a number nor key=value pairs",
                            key="fix_target", fix=_TARGET_FIX)
    unknown = set(given) - {"error_removed", "cosine"}
    if unknown:
        raise QcdoctorError(f"unknown fix target key(s) {', '.join(sorted(map(str, unknown)))}",
                            key="fix_target", fix=_TARGET_FIX)
    share = _number(given.get("error_removed", DEFAULT_SHARE), "error_removed")
    if not 0 < share <= 1:
        raise QcdoctorError(f"a fix target share of {share:g} is outside (0, 1]",
                            key="fix_target", fix="give the share of the output error a fix "
                                                  "must remove, e.g. 0.9")
    cosine = DEFAULT.cosine_good if metric == "Cosine" else None
    if "cosine" in given:
        if metric != "Cosine":
            raise QcdoctorError(f"a Cosine fix target with the {metric} fix metric",
                                key="fix_target", fix="use --fix-metric Cosine, or give only "
                                                      "error_removed")
        cosine = _number(given["cosine"], "cosine")
        if not -1 < cosine <= 1:
            raise QcdoctorError(f"a fix target Cosine of {cosine:g} is outside (-1, 1]",
                                key="fix_target", fix="give a Cosine such as 0.999")
    return Target(share, cosine)


_TARGET_FIX = ("give a share of the output error to remove (0.9), or "
               "error_removed=0.9,cosine=0.999")


def _target_text(text: str) -> dict:
    if "=" not in text:
        return {"error_removed": text}
    given = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise QcdoctorError(f"the fix target {text!r} is not key=value pairs",
                                key="fix_target", fix=_TARGET_FIX)
        given[key.strip()] = value.strip()
    return given


def _number(value, name: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number):
        raise QcdoctorError(f"the fix target's {name} {value!r} is not a number",
                            key="fix_target", fix=_TARGET_FIX)
    return number


class _OutOfBudget(Exception):
    """The forward passes allowed are spent."""


@dataclass
class _Slot:
    """One quantizer of the copy and the qparams it applies (None: unreadable)."""
    quantizer: Quantizer
    qparams: QParams | None
    int16: TrialFakeQuantize | None = None

    @property
    def name(self) -> str:
        return self.quantizer.name

    def can_int16(self) -> bool:
        return self.qparams is not None and self.qparams.bits < TRIAL_BITS


@dataclass(frozen=True)
class _Change:
    slot: int                       # index into the slots
    setting: str                    # int16 | fixed_scale | per_channel | off
    module: nn.Module | None = field(default=None, compare=False, hash=False)


class _Copy:
    """The copy of the analysis model, measured under changes that are always undone;
    every pass is counted, every setting measured once."""

    def __init__(self, model: nn.Module, adapter: QuantizerAdapter, slots: list[_Slot], run,
                 reference: list[torch.Tensor], key: str, budget: int, progress,
                 outputs_of: Callable[[nn.Module], list[torch.Tensor]] | None = None):
        self.model, self.adapter, self.slots, self.run = model, adapter, slots, run
        # the tensors measured: the model's outputs, or those entering its post-processing
        self.outputs_of = outputs_of or (lambda m: [t for _, t in flatten_output(run(m))])
        self.reference, self.key, self.budget, self.progress = reference, key, budget, progress
        self.spent = 0
        self.index = 0                      # the output measured
        self._known: dict[frozenset, float] = {}
        self._seeded: dict[frozenset, list[torch.Tensor]] = {}

    def outputs(self, changes: tuple[_Change, ...], label: str) -> list[torch.Tensor]:
        if self.spent >= self.budget:
            raise _OutOfBudget
        undo = []
        try:
            for change in changes:
                undo.append(self._apply(change))
            self.spent += 1
            with torch.inference_mode():
                outputs = self.outputs_of(self.model)
        finally:
            for step in reversed(undo):
                step()
        if self.progress is not None:
            self.progress(label, self.spent, self.budget)
        if len(outputs) != len(self.reference):
            raise ValueError(f"the model returned {len(outputs)} tensor(s), "
                             f"{len(self.reference)} before")
        return outputs

    def seed(self, changes: frozenset, outputs: list[torch.Tensor]) -> None:
        """Outputs of a setting measured outside the copy (the same model), kept as if
        measured here; the output measured is chosen before."""
        self._seeded[changes] = outputs

    def known(self, changes: tuple[_Change, ...]) -> bool:
        return frozenset(changes) in self._known

    def measure(self, changes: tuple[_Change, ...], label: str) -> float:
        """The output's metric with ``changes`` applied (nan: not measurable)."""
        known = frozenset(changes)
        value = self._known.get(known)
        if value is None:
            seeded = self._seeded.get(known)
            out = seeded[self.index] if seeded is not None else \
                self.outputs(changes, label)[self.index]
            value = self.metric(self.reference[self.index], out)
            self._known[known] = value
        return value

    def metric(self, base: torch.Tensor, out: torch.Tensor) -> float:
        if base.shape != out.shape:
            return math.nan
        value = pair_stats(base, out, (self.key,))[self.key]
        return math.nan if value is None else float(value)

    def _apply(self, change: _Change):
        quantizer = self.slots[change.slot].quantizer
        if change.setting == "off":
            before = self.adapter.is_enabled(quantizer)
            self.adapter.set_enabled(quantizer, False)
            return lambda: self.adapter.set_enabled(quantizer, before)
        previous = self.adapter.swap(self.model, quantizer.name, change.module)
        return lambda: self.adapter.swap(self.model, quantizer.name, previous)


@dataclass
class _Layer:
    name: str
    slots: list[int]                                   # its quantizers
    order: int                                         # first row in execution order


class _Search:
    """The trials and the greedy search over one copy (the module docstring's steps)."""

    def __init__(self, copy: _Copy, layers: dict[str, _Layer], target: Target, metric: str,
                 ranges: dict[str, tuple[float, float]], swaps: bool):
        self.copy, self.layers, self.target, self.metric = copy, layers, target, metric
        self.ranges, self.swaps = ranges, swaps
        self.before = math.nan
        self.before_error = math.nan
        # the clean model's error (every value rounded to its steps, none clipped), where
        # measured: no fix of a range or a granularity goes below it
        self.clean_error = 0.0
        self.notes: list[str] = []
        self.models_differ = False             # every fake quant off is not the baseline

    # -- figures ------------------------------------------------------------------------

    def error(self, value: float) -> float:
        return 1.0 - value if self.metric == "Cosine" else value

    def removed(self, value: float) -> float:
        """Share of the error before that ``value`` takes away (unclamped); of the error
        beyond the clean model's where that was measured."""
        return 1.0 - (self.error(value) - self.clean_error) / \
            (self.before_error - self.clean_error)

    def meets(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        cosine = self.target.cosine
        return self.removed(value) >= self.target.error_removed or \
            (cosine is not None and value >= cosine)

    def figure(self, value: float) -> dict:
        return {"after": value, "error_removed": round(min(1.0, max(0.0, self.removed(value))), 4)}

    # -- changes ------------------------------------------------------------------------

    def slot(self, index: int) -> _Slot:
        return self.copy.slots[index]

    def int16(self, layer: str) -> tuple[_Change, ...]:
        """Every quantizer of the layer that can go to 16 bits, at 16 bits."""
        changes = []
        for index in self.layers[layer].slots:
            slot = self.slot(index)
            if self.swaps and slot.can_int16():
                if slot.int16 is None:
                    slot.int16 = TrialFakeQuantize(at_bits(slot.qparams, TRIAL_BITS))
                changes.append(_Change(index, "int16", slot.int16))
        return tuple(changes)

    def changes(self, fix: str, layer: str) -> tuple[_Change, ...]:
        """The changes of one trial on one layer; () where the trial does not apply."""
        indices = self.layers[layer].slots
        kind = {"int16_activation": "activation", "int16_weight": "weight",
                "fixed_scale": "activation", "per_channel": "weight"}.get(fix)
        if fix == "float":
            return tuple(_Change(i, "off") for i in indices)
        if not self.swaps:
            return ()
        chosen = [i for i in indices if self.slot(i).quantizer.sensitive_type == kind
                  and self.slot(i).qparams is not None]
        if fix.startswith("int16"):
            return tuple(c for c in self.int16(layer) if c.slot in chosen)
        if fix == "fixed_scale":
            found = []
            base = self.ranges.get(layer)
            for i in chosen:
                q = self.slot(i).qparams
                if base is None or q.ch_axis is not None:
                    continue
                low, high = (float(v) for v in q.covered())
                step = float(q.scale[0]) / 2           # rounding reaches half a step out
                if base[0] < low - step or base[1] > high + step:
                    found.append(_Change(i, "fixed_scale",
                                         TrialFakeQuantize(widened(q, base[0], base[1]))))
            return tuple(found)
        # per_channel: a per-tensor weight quantizer, per output channel
        found = []
        for i in chosen:
            slot = self.slot(i)
            q = slot.qparams
            axis = _output_channel_axis(self.copy.model, slot.name)
            if q.ch_axis is None and axis is not None:
                found.append(_Change(i, "per_channel", TrialFakeQuantize.of_input(
                    q.quant_min, q.quant_max, axis, q.symmetric)))
        return tuple(found)

    # -- the steps ----------------------------------------------------------------------

    def trials(self, candidates: list[str], done: list[dict] = ()) -> tuple[list[dict], list[str]]:
        """(the trials measured, the candidates tried) within the budget; ``done``: trials
        measured before (the located source's), kept and not run again."""
        trials = list(done)
        tried = list(dict.fromkeys(t["layers"][0] for t in done))
        measured = {(t["fix"], t["layers"][0]) for t in done}
        for layer in candidates:
            for fix in FIXES:
                if (fix, layer) in measured:
                    continue
                try:
                    ran, trial = self.trial(fix, layer)
                except _OutOfBudget:
                    self.notes.append(f"budget_spent: the budget ended during the trials, at "
                                      f"{fix} on {layer}; no search for a set of layers")
                    return _ranked(trials), tried
                if ran and layer not in tried:
                    tried.append(layer)
                if trial is not None:
                    trials.append(trial)
        return _ranked(trials), tried

    def located(self, layer: str, kind: str) -> tuple[list[dict], bool]:
        """The trials at the reading's single source, the remedy its error kind points to
        first (``REMEDY_ORDER``), one pass each, until a remedy reaches the target (then
        True), the float trial last; (the trials measured, whether one reached it)."""
        trials = []
        for fix in remedy_order(kind):
            try:
                _, trial = self.trial(fix, layer)
            except _OutOfBudget:
                break
            if trial is None:
                continue
            trials.append(trial)
            if fix != "float" and self.meets(trial["after"]):
                return _ranked(trials), True
        return _ranked(trials), False

    def trial(self, fix: str, layer: str) -> tuple[bool, dict | None]:
        """(whether the trial ran, its record): one pass of ``fix`` on ``layer``; no record
        where it does not apply, raised (a note) or gave no number (a note).
        _OutOfBudget passes up."""
        changes = self.changes(fix, layer)
        if not changes:
            return False, None
        spent = self.copy.spent
        try:
            value = self.copy.measure(changes, f"{fix} {layer}")
        except _OutOfBudget:
            raise
        except Exception as exc:  # noqa: BLE001 - one trial failing is a note, not the end
            self.notes.append(f"trial_failed: {fix} on {layer}: {_first_line(exc)}")
            return False, None
        if not math.isfinite(value):
            self.notes.append(f"trial_failed: {fix} on {layer} gives a model output "
                              f"whose {self.metric} is not a number")
            return True, None
        return True, {"fix": fix, "layers": [layer], **self.figure(value),
                      "forwards": self.copy.spent - spent,
                      "settings": self.settings(changes)}

    def greedy(self, ranking: list[str]) -> dict | None:
        """The smallest 16-bit set found (module docstring, step 4), or None. ``ranking``:
        every quantized layer, the likeliest to be needed first."""
        if self.meets(self.before):
            self.notes.append("within_target: the output meets the target before any fix; "
                              "no search for a set of layers")
            return None
        if not self.swaps:
            return None                        # the adapter_limited note says why
        eligible = [name for name in ranking if self.int16(name)]
        if not eligible:
            self.notes.append("no_16_bit_layer: no quantized layer has qparams to set at 16 "
                              "bits; no search for a set of layers")
            return None
        start = self.copy.spent
        everything = tuple(c for name in eligible for c in self.int16(name))
        try:
            ceiling = self.copy.measure(everything, "int16 every layer")
        except _OutOfBudget:
            self.notes.append("budget_spent: no forward pass left for the search for a set "
                              "of layers")
            return None
        if not self.meets(ceiling):
            self._why_not(ceiling)
            return self._greedy(eligible, ceiling, start, reached=False, ranked=len(eligible))
        chosen, value = self._search(eligible, ceiling)
        return self._greedy(chosen, value, start, reached=True, ranked=len(eligible))

    def _search(self, ranked: list[str], ceiling: float) -> tuple[list[str], float]:
        """The smallest set of ``ranked`` (every layer at 16 bits reaches the target:
        ``ceiling``) found by bisection, every set measured whole (sensitivities interact):

        1. the shortest prefix of the ranking that reaches the target, by bisection
           (the empty prefix is the copy before, which misses it): its last layer is
           needed, the layers after it are not;
        2. the set of that needed layer alone, one pass: it reaches the target where one
           layer is needed (the located single source);
        3. otherwise, from the back of the rest of the prefix, the longest run of layers
           that can be dropped with the set still reaching the target, sought by doubling
           its length (1, 2, 4, ...) then by bisection: the layer before the run is needed;
           repeated until no layer is left.

        Each layer kept is needed by the set it ends in (without it, a measured set missed
        the target), so no layer can be dropped again. With the k needed layers first in
        the ranking of N, the search costs ⌈log2 N⌉ + k passes at most; a needed layer
        ranked p places behind the next one costs about 2·⌈log2 p⌉ more."""
        best = (ranked, ceiling)                # the smallest set measured to reach it

        def meets(names: list[str], label: str) -> bool:
            nonlocal best
            found = self.copy.measure(tuple(c for n in names for c in self.int16(n)), label)
            if self.meets(found):
                best = (names, found)
                return True
            return False

        low, high = 0, len(ranked)             # prefix ``high`` reaches, ``low`` does not
        try:
            while high - low > 1:
                middle = (low + high) // 2
                if meets(ranked[:middle], f"int16 first {middle}"):
                    high = middle
                else:
                    low = middle
            kept, rest = [ranked[high - 1]], ranked[:high - 1]
            if rest and meets(kept, f"int16 {kept[0]} alone"):
                rest = []
            first = True                       # kept alone is known to miss the target
            while rest:
                count = len(rest)
                # the longest run at the back of ``rest`` whose dropping still reaches the
                # target: ``dropped`` can go, ``missed`` cannot (count + 1: not known)
                dropped, missed, size = 0, count if first else count + 1, 1
                first = False
                while size < missed:
                    length = min(size, count)
                    if not meets(kept + rest[:count - length],
                                 f"int16 without the last {length} of {count}"):
                        missed = length
                        break
                    dropped, size = length, size * 2
                    if length == count:
                        break
                while missed - dropped > 1 and dropped < count:
                    middle = (dropped + missed) // 2
                    if meets(kept + rest[:count - middle],
                             f"int16 without the last {middle} of {count}"):
                        dropped = middle
                    else:
                        missed = middle
                needed = count - dropped - 1       # the layer just before the run
                if needed < 0:
                    break
                kept.insert(0, rest[needed])
                rest = rest[:needed]
        except _OutOfBudget:
            self.notes.append(f"budget_spent: the search ended at {len(best[0])} layers; a "
                              f"smaller set may reach the target")
        return _in_order(best[0], self.layers), best[1]

    def _why_not(self, ceiling: float) -> None:
        """The note of a search that cannot reach the target: what every fake quant off
        gives tells the steps from the ranges (clipping) and from what is no fake quant's."""
        text = (f"int16_short: with every quantized layer at 16 bits the output's "
                f"{self.metric} is {ceiling:.6g}, short of the target")
        try:
            floor = self.copy.measure(tuple(_Change(i, "off")
                                            for i in range(len(self.copy.slots))),
                                      "every fake quant off")
        except _OutOfBudget:
            self.notes.append(text)
            return
        if self.meets(floor):
            why = ("within it: the error comes from the fake quants' ranges (values clipped), "
                   "not from their steps")
        elif self.models_differ:
            why = ("still short: the two models differ beyond quantization (weights or BN "
                   "statistics; probe_run.yaml's models_match), so no quantization setting "
                   "reaches the baseline; compare the analysis model with itself, fake quant "
                   "off against on (--baseline self), to measure the quantization error alone")
        else:
            why = ("still short: the rest is no fake quant's doing (a look-up table, an op "
                   "computed otherwise), or the baseline is quantized itself")
        self.notes.append(f"{text}; with every fake quant off it is {floor:.6g}, {why}")

    def _greedy(self, layers: list[str], value: float, start: int, reached: bool,
                ranked: int) -> dict:
        return {"fix": "int16", "layers": layers, **self.figure(value),
                "forwards": self.copy.spent - start, "ranked": ranked, "reached": reached,
                "settings": self.settings(tuple(c for n in layers for c in self.int16(n)))}

    def settings(self, changes: tuple[_Change, ...]) -> list[dict]:
        """What a measured trial set, quantizer by quantizer (fix_trials.yaml's
        ``settings``): enough to set it again exactly (``apply_fix``)."""
        return [setting_of(self.slot(c.slot).name, c.setting, c.module) for c in changes]


# the remedies an error kind of the reading points to (knowledge.md §17 R4.3), tried first at
# a single located source: a clamp wants its range, weights their granularity or bits, a
# step too coarse its bits
REMEDY_ORDER = {"truncation": ("fixed_scale",), "weight": ("per_channel", "int16_weight"),
                "rounding": ("int16_activation", "int16_weight"),
                "conversion": ("int16_activation", "int16_weight")}


def remedy_order(kind: str) -> tuple[str, ...]:
    """Every fix, those of the error kind first, the float trial (no remedy: the most a fix
    of the layer can give) last."""
    first = REMEDY_ORDER.get(kind, ())
    rest = tuple(f for f in FIXES if f not in first and f != "float")
    return (*first, *rest, "float")


def setting_of(quantizer: str, setting: str, module: TrialFakeQuantize | None) -> dict:
    """One quantizer's setting in a trial: switched off, or fixed qparams (the scale and
    zero point per tensor or per channel, over quant_min .. quant_max); a fixed scale also
    says the threshold it covers (the larger end of its range: scale = threshold /
    -quant_min for a symmetric one)."""
    out = {"quantizer": quantizer, "setting": setting}
    if setting == "off" or module is None or module.scale is None:
        return out
    out.update({"scale": [float(v) for v in module.scale.flatten()],
                "zero_point": [int(v) for v in module.zero_point.flatten()],
                "quant_min": int(module.quant_min), "quant_max": int(module.quant_max),
                "ch_axis": module.ch_axis})
    if setting == "fixed_scale":
        scale, zero = out["scale"][0], out["zero_point"][0]
        out["threshold"] = max(abs((module.quant_min - zero) * scale),
                               abs((module.quant_max - zero) * scale))
    return out


def _ranked(trials: list[dict]) -> list[dict]:
    """Best first: error removed, then fewer layers, then the fixes that keep 8 bits."""
    return sorted(trials, key=lambda t: (-t["error_removed"], len(t["layers"]),
                                         _TIE_ORDER[t["fix"]]))


def _in_order(names: list[str], layers: dict[str, _Layer]) -> list[str]:
    return sorted(names, key=lambda n: (layers[n].order, n))


def _output_channel_axis(model: nn.Module, quantizer_name: str) -> int | None:
    """The output-channel axis of the weight a quantizer named ``<layer>.<attr>``
    quantizes: 1 for a transposed conv, 0 for other convs and linears; None for anything
    else (no weight of a known layout)."""
    from torch.nn.modules.conv import _ConvNd
    parent_name = quantizer_name.rpartition(".")[0]
    try:
        parent = model.get_submodule(parent_name) if parent_name else model
    except AttributeError:
        return None
    weight = getattr(parent, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() < 2:
        return None
    if isinstance(parent, _ConvNd):
        return 1 if parent.transposed else 0
    return 0 if isinstance(parent, nn.Linear) else None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def enabled_quantizers(model: nn.Module, adapter: QuantizerAdapter) -> list[Quantizer]:
    """The model's quantizers whose fake quant is on; QcdoctorError when there is none."""
    found = [q for q in adapter.quantizers(model) if adapter.is_enabled(q)]
    if not found:
        raise QcdoctorError("no fake quant switched on in the analysis model: there is "
                            "nothing a fix trial can change", key="try_fixes",
                            fix="give the fake-quantized model (torch.ao FakeQuantizeBase "
                                "modules, eager or FX prepared) or an adapter for your "
                                "toolkit's quantizers, or run without --try-fixes")
    return found


def try_fixes(copy: nn.Module, adapter: QuantizerAdapter, run: Callable[[nn.Module], object],
              reference: list[torch.Tensor], names: list[str], rows: list[dict],
              compare_table: Path, tables: dict[str, list[tuple]], *, budget: int,
              target: Target, metric: str,
              progress: Callable[[str, int, int], None] | None = None,
              outputs_of: Callable[[nn.Module], list[torch.Tensor]] | None = None,
              before_postprocess: dict | None = None,
              all_off: list[torch.Tensor] | None = None,
              models_differ: bool | None = None,
              clean: list[torch.Tensor] | None = None) -> dict:
    """The fix_trials.yaml document of the trials on ``copy`` (a deep copy of the analysis
    model in eval mode, observers frozen: changed and restored here, never the user's).

    run: one forward call of a model on the probe's input. reference: the baseline's
    output tensors; names: their names. rows: the comparison's rows; compare_table: the
    compare_per_layer_out file written from them (read back by the collectors' reader).
    tables: the sensitivity tables by output name (may be empty).

    outputs_of: the tensors measured in place of the model's outputs (``reference`` and
    ``names`` are then the baseline's of those): the tensors entering the model's
    post-processing, ``before_postprocess`` ({entries, region_rows}) says so in the file.
    all_off: the measured tensors of the analysis model with every fake quant off, when the
    comparison ran that pass already (the floor of step 4a is not run again);
    models_differ: what the comparison found of that pass (probe/model_match.py).
    clean: the measured tensors of the clean model (the copy with every value rounded to
    its quantizers' steps, none clipped; the bad-case search's clean model's error): the
    share removed is then of the error beyond it (``clean`` in the file)."""
    quantizers = enabled_quantizers(copy, adapter)
    read = getattr(adapter, "qparams", None)
    swaps = callable(read) and callable(getattr(adapter, "swap", None))
    slots = [_Slot(q, _qparams(read, q) if swaps and q.name else None) for q in quantizers]
    order = {}
    for position, row in enumerate(rows):
        order.setdefault(row.get("mod_name"), position)
    layers: dict[str, _Layer] = {}
    for index, slot in enumerate(slots):
        name = slot.quantizer.op_name
        layer = layers.setdefault(name, _Layer(name, [], order.get(name, len(rows))))
        layer.slots.append(index)
    key = METRICS[metric]
    copy_run = _Copy(copy, adapter, slots, run, reference, key, budget, progress, outputs_of)
    search = _Search(copy_run, layers, target, metric, _base_ranges(rows), swaps)
    search.models_differ = bool(models_differ)
    if not swaps:
        search.notes.append("adapter_limited: the quantizer adapter has no qparams() and "
                            "swap(): only the float trials ran, no 16-bit search")
    try:
        outputs = copy_run.outputs((), "before")
    except Exception as exc:  # noqa: BLE001 - the user's model: one clear message
        raise QcdoctorError(f"the copy of the analysis model fails on the inputs "
                            f"({_first_line(exc)})", key="try_fixes",
                            fix="the model must run again on a deep copy of itself (no "
                                "state outside the module); or run without --try-fixes") \
            from exc
    values = [copy_run.metric(b, a) for b, a in zip(reference, outputs, strict=True)]
    errors = [search.error(v) if math.isfinite(v) else math.inf for v in values]
    copy_run.index = max(range(len(errors)), key=lambda i: errors[i]) if errors else 0
    document = {"schema": SCHEMA, "metric": metric,
                "output": names[copy_run.index] if names else "0",
                "before": values[copy_run.index] if values else math.nan,
                "target": target.as_dict(), "budget": budget, "forwards": 0,
                "candidates": [], "trials": [], "greedy": None, "notes": search.notes,
                "caveats": list(CAVEATS)}
    if search.models_differ:
        search.notes.append("models_differ: the analysis model with every fake quant off does "
                            "not compute the baseline's outputs (probe_run.yaml's models_match): "
                            "every figure here carries that difference besides quantization")
    if before_postprocess is not None:
        document["before_postprocess"] = before_postprocess      # only where it applies
        search.notes.append(f"before_postprocess: the model contains post-processing "
                            f"({before_postprocess['region_rows']} row(s) from its first "
                            f"selection op); every figure is taken on the tensors entering it "
                            f"({', '.join(before_postprocess['entries'])}), not on the model's "
                            f"final outputs")
    if all_off is not None and len(all_off) == len(reference):
        # the comparison's pass with every fake quant off, measured the same way: the
        # floor of the search's step a costs no pass of its own
        every_off = frozenset(_Change(i, "off") for i in range(len(slots)))
        copy_run.seed(every_off, all_off)
    search.before = document["before"]
    search.before_error = search.error(search.before) if values else math.nan
    if not math.isfinite(search.before_error):
        search.notes.append(f"no_figure: the analysis model's output {metric} is not a number "
                            f"before any fix; nothing can be measured against it")
        document["before"] = None
    elif search.before_error <= 0:
        search.notes.append("no_error: the analysis model's output equals the baseline's; "
                            "there is no error to remove")
    else:
        _clean_floor(search, document, copy_run, reference, clean)
        read = _reading(compare_table)
        table = tables.get(document["output"]) or []
        prior = _prior(layers, table, read.steps)
        candidates = _candidates(read.sources, table, prior, layers)
        done, reached = search.located(read.single, read.kind) \
            if read.single in layers else ([], False)
        if reached:
            best = done[0]
            search.notes.append(
                f"located_first: the reading locates one source, {read.single} "
                f"({read.kind}): its remedies were tried first and {best['fix']} reaches the "
                f"target after {copy_run.spent} forward passes; no other layer and no set of "
                f"layers was searched")
            document["trials"], document["candidates"] = done, [read.single]
        else:
            document["trials"], document["candidates"] = search.trials(candidates, done)
        if not reached and not any(n.startswith("budget_spent") for n in search.notes):
            try:
                document["greedy"] = search.greedy(_ranking(read.sources, prior, layers))
            except Exception as exc:  # noqa: BLE001 - the trials stand; the search is a note
                search.notes.append(f"search_failed: the search for a set of layers stopped "
                                    f"({_first_line(exc)})")
    document["forwards"] = copy_run.spent
    if progress is not None:
        progress("fix trials", copy_run.spent, copy_run.spent)
    return document


def _clean_floor(search: _Search, document: dict, copy_run: _Copy,
                 reference: list[torch.Tensor], clean: list[torch.Tensor] | None) -> None:
    """The clean model's figure (``document["clean"]``) and, where the error before goes
    past it as a sample showing the error does (ROUNDING_FACTOR times), the floor the share
    removed is counted from; within it, the whole error (a fix would otherwise be asked to
    remove the little the clean model's rounding leaves)."""
    if clean is None or len(clean) != len(reference):
        return
    value = copy_run.metric(reference[copy_run.index], clean[copy_run.index])
    error = search.error(value)
    if not math.isfinite(error):
        return
    document["clean"] = value
    if error * ROUNDING_FACTOR < search.before_error:
        search.clean_error = max(error, 0.0)
        search.notes.append(f"clean_floor: the clean model's output {search.metric} is "
                            f"{value:.6g} (every value rounded to its steps, none clipped): "
                            f"each share removed is of the error beyond it")
    else:
        search.notes.append(f"within_clean_model: the output's error is within the clean "
                            f"model's ({search.metric} {value:.6g}, as the bad-case search "
                            f"counts it): each share removed is of the whole error")


def _qparams(read, quantizer: Quantizer) -> QParams | None:
    """The adapter's qparams of one quantizer; None (its 16-bit and range trials do not
    apply) where the adapter cannot give them."""
    try:
        found = read(quantizer)
    except Exception:  # noqa: BLE001 - another toolkit's adapter: that quantizer is skipped
        return None
    return found if isinstance(found, QParams) else None


def _base_ranges(rows: list[dict]) -> dict[str, tuple[float, float]]:
    """Layer -> the baseline's (min, max) over its rows (a module called twice has two)."""
    ranges: dict[str, tuple[float, float]] = {}
    for row in rows:
        low, high = row.get("base_model_min"), row.get("base_model_max")
        if not isinstance(low, float) or not isinstance(high, float) or \
                not (math.isfinite(low) and math.isfinite(high)):
            continue
        name = row.get("mod_name")
        known = ranges.get(name)
        ranges[name] = (low, high) if known is None else (min(known[0], low),
                                                          max(known[1], high))
    return ranges


@dataclass
class _Read:
    sources: list[str]                  # the origin, a second source, the largest step
    steps: dict[str, float]             # each layer's Cosine step below the rows it reads
    single: str | None = None           # the one source a located single-source reading names
    kind: str = "unclear"               # its error kind


def _reading(path: Path) -> _Read:
    """What the collectors' reading of the comparison says, for the trials."""
    layers, reading = read_folder(path)
    frame = layers.frame
    names = [str(n).strip() for n in frame["mod_name"]] if "mod_name" in frame else []
    sources = []
    for position in (reading.origin, reading.second, reading.curve.get("largest")):
        if position is not None and names and names[position] not in sources:
            sources.append(names[position])
    steps: dict[str, float] = {}
    for name, step in zip(names, reading.steps, strict=True):
        steps[name] = max(steps.get(name, 0.0), float(step))
    single = names[reading.origin] if reading.pattern in SINGLE_SOURCE and \
        reading.origin is not None and reading.second is None and names else None
    return _Read(sources, steps, single, reading.kind if single else "unclear")


# the reading's patterns that name one source (no second): a cliff, an outlier, and the one
# step standing out of an accumulation (the rest there may be the clean model's rounding,
# which no fix removes: over many samples the trials count from it)
SINGLE_SOURCE = ("cliff", "outlier", "accumulation_with_step")


def _prior(layers: dict[str, _Layer], table: list[tuple],
           steps: dict[str, float]) -> list[str]:
    """Every quantized layer, the likeliest to matter first: by the sensitivity table
    (sorted most sensitive first; a layer at its most sensitive quantizer), the rest by
    their Cosine step, then in execution order."""
    ranked = []
    for row in table:
        name = row[0]
        if name in layers and name not in ranked:
            ranked.append(name)
    rest = sorted((n for n in layers if n not in ranked),
                  key=lambda n: (-steps.get(n, 0.0), layers[n].order, n))
    return ranked + rest


def _ranking(sources: list[str], prior: list[str], layers: dict[str, _Layer]) -> list[str]:
    """Every quantized layer for the set search: the reading's sources, then the prior."""
    return list(dict.fromkeys(n for n in [*sources, *prior] if n in layers))


def _candidates(sources: list[str], table: list[tuple], prior: list[str],
                layers: dict[str, _Layer]) -> list[str]:
    """At most MAX_CANDIDATES quantized layers: the reading's sources, then the
    sensitivity table's most sensitive ops, then the largest Cosine steps."""
    found: list[str] = []
    for name in [*sources, *(row[0] for row in table), *prior]:
        if name in layers and name not in found:
            found.append(name)
        if len(found) == MAX_CANDIDATES:
            break
    return found


def write_fix_trials(folder: Path, document: dict) -> Path:
    """fix_trials.yaml in ``folder``, written atomically (a reader never sees half)."""
    import yaml

    from qcdoctor.atomic import write_text_atomic
    path = Path(folder) / FILE
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(document, Dumper=dumper, sort_keys=False, allow_unicode=True)
    write_text_atomic(path, text, durable=False)
    return path


