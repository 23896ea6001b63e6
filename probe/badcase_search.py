"""The bad-case search (the profiler's ``auto_find_bad_case``): both models over every
sample, no hooks, in inference mode; every output's error in every metric kept per
sample (numbers only: O(samples x outputs x metrics), never the outputs); the worst
sample chosen for the layer reading, and how widespread the error is.

A sample shows the error where an output's Cosine falls below the clean band's
``cosine_good`` (collectors/reading/thresholds.py; ``tolerance`` another one): the band
every layer of a healthy comparison stays in; and, where the clean model's error on that
sample was measured, beyond it: more than ``ROUNDING_FACTOR`` times the error of the
analysis model with every value rounded to its quantizer's steps and none clipped to its
range (probe/fast_quant.unclipped, a third forward per sample). A healthy 8-bit model's
outputs fall below the clean band on small inputs (resnet10 at 32x32: Cosine 0.987 to
0.999) through its steps alone; a range that clips the inputs it should cover (a clamp,
data outside the calibration's) takes a sample tens to hundreds of times past its steps'
error, a healthy model's clipping about three times at most. The worst sample is the worst by
``metric`` on the output whose worst is largest; the K worst of that output are kept
(their inputs copied) for the fix trials."""

from __future__ import annotations

import heapq
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from qcdoctor.collectors.reading.thresholds import DEFAULT as THRESHOLDS
from qcdoctor.collectors.sensitivity import ASCENDING
from qcdoctor.errors import QcdoctorError
from qcdoctor.probe.call_inputs import called, copied
from qcdoctor.probe.samples import check_samples, each_sample, replayable, sample_count
from qcdoctor.probe.sensitivity import METRICS, output_names
from qcdoctor.probe.stats import flatten_output, pair_stats

METRIC_NAMES = tuple(METRICS)                       # the tables' order: L1 ... SQNR
ROUNDING_FACTOR = 10.0          # an error this many times its steps' own is no clean one
_KEYS = tuple(METRICS[name] for name in METRIC_NAMES)
_COSINE = METRIC_NAMES.index("Cosine")


@dataclass
class SampleSearch:
    """What the search found; ``errors[s][o]`` holds sample s's metrics (METRIC_NAMES
    order) on output o."""
    outputs: list[str]
    metric: str
    tolerance: float                                 # a Cosine: below it, shown
    errors: list[list[tuple[float, ...]]] = field(default_factory=list)
    # rounding[s][o]: the Cosine of output o on sample s with every value rounded to its
    # steps, none clipped (the clean model's error); empty where not measured
    rounding: list[list[float]] = field(default_factory=list)
    chosen: int = 0                                  # the sample the layers are read on
    chosen_output: str = ""
    how: str = "worst"                               # worst | given (--badcase)
    kept: dict[int, object] = field(default_factory=dict)   # sample -> its inputs (copies)
    worst_first: list[int] = field(default_factory=list)    # the kept worst, worst first
    replayable: bool = True                          # a second pass gives the same samples

    @property
    def count(self) -> int:
        return len(self.errors)

    def value(self, sample: int, output: int, metric: str) -> float:
        return self.errors[sample][output][METRIC_NAMES.index(metric)]

    def worst_index(self, output: int, metric: str) -> int:
        """The worst sample on ``output`` by ``metric`` (the first of equals; NaN worst)."""
        at = METRIC_NAMES.index(metric)
        return min(range(self.count), key=lambda s: (badness(self.errors[s][output][at],
                                                              metric), s))

    def rank(self, sample: int) -> int:
        """1 + how many samples are worse than ``sample`` on the chosen output."""
        output = self.outputs.index(self.chosen_output)
        at = METRIC_NAMES.index(self.metric)
        mine = badness(self.errors[sample][output][at], self.metric)
        return 1 + sum(badness(row[output][at], self.metric) < mine for row in self.errors)

    def below_tolerance(self, sample: int, output: int) -> bool:
        """The output's Cosine below the tolerance (NaN too)."""
        return not self.errors[sample][output][_COSINE] >= self.tolerance

    def shows(self, sample: int, output: int) -> bool:
        """The error shows: below the tolerance, and (where measured) beyond
        ROUNDING_FACTOR times the error of the steps alone."""
        if not self.below_tolerance(sample, output):
            return False
        if not self.rounding:
            return True
        error = 1.0 - self.errors[sample][output][_COSINE]
        steps = 1.0 - self.rounding[sample][output]
        return not error <= ROUNDING_FACTOR * max(steps, 0.0)

    def shows_any(self, sample: int) -> bool:
        """The error shows on some output of ``sample``."""
        return any(self.shows(sample, o) for o in range(len(self.outputs)))

    def shown_on(self, output: int | None = None) -> int:
        """On how many samples the error shows (``shows``; NaN shows), on ``output`` or
        on any output."""
        outputs = range(len(self.outputs)) if output is None else (output,)
        return sum(any(self.shows(s, o) for o in outputs) for s in range(self.count))

    def fix_samples(self, count: int) -> list[int]:
        """The samples fix trials measure: the ``count`` worst kept that show the error
        (all ``count`` worst where none does: a sample within the clean model's error
        carries no error a fix can take away, and would hold the batch's figure back),
        with the sample read."""
        worst = list(self.worst_first[:count])
        chosen = [s for s in worst if self.shows_any(s)] or worst
        if self.chosen not in chosen:
            chosen.append(self.chosen)
        return chosen

    def count_below_tolerance(self, output: int | None = None) -> int:
        """On how many samples an output's Cosine is below the tolerance."""
        outputs = range(len(self.outputs)) if output is None else (output,)
        return sum(any(self.below_tolerance(s, o) for o in outputs) for s in range(self.count))

    def summary(self) -> dict:
        """probe_run.yaml's ``samples``."""
        per_output = {}
        for o, name in enumerate(self.outputs):
            worst = self.worst_index(o, self.metric)
            cosines = [row[o][_COSINE] for row in self.errors]
            per_output[name] = {"worst": worst,
                                "worst_value": _plain(self.value(worst, o, self.metric)),
                                "median_cosine": _plain(median_of_numbers(cosines)),
                                "shown_on": self.shown_on(o),
                                "below_tolerance": self.count_below_tolerance(o)}
        worst_indices = {entry["worst"] for entry in per_output.values()}
        return {"count": self.count, "metric": self.metric,
                "tolerance_cosine": self.tolerance,
                "chosen": self.chosen, "chosen_by": self.how, "output": self.chosen_output,
                "rank": self.rank(self.chosen),
                "shown_on": self.shown_on(),
                "below_tolerance": self.count_below_tolerance(),
                # the clean model's error measured: a sample shows the error only past
                # this many times its steps' own
                "rounding_factor": ROUNDING_FACTOR if self.rounding else None,
                # knowledge.md §8: different worst samples across outputs: the error
                # spreads over several inputs
                "spread": len(worst_indices) > 1,
                "outputs": per_output,
                "kept_worst": list(self.worst_first),
                "replayable": self.replayable}


def search_samples(baseline, analysis, inputs, to_device: Callable, *, metric: str,
                   names: list[str] | None, max_samples: int | None, badcase: int | None,
                   keep: int, tolerance: float | None,
                   progress: Callable[[str, int, int], None] | None = None,
                   rounded: Callable | None = None) -> SampleSearch:
    """Both models over every sample (at most ``max_samples``), each sample's errors kept;
    the ``keep`` worst samples' inputs copied (at least the chosen one's). ``rounded``:
    the analysis model's call with every value rounded to its steps and none clipped (the
    clean model's error per sample), or None."""
    check_samples(inputs)
    total = sample_count(inputs, max_samples)
    search: SampleSearch | None = None
    heaps: list[list] = []                  # per output: (badness negated, -index, index)
    given = None
    keep = max(1, keep)
    at = METRIC_NAMES.index(metric)
    for index, sample in each_sample(inputs, max_samples):
        _check_sample(sample, index)
        moved = to_device(sample)
        with torch.inference_mode():
            reference = sample_outputs(baseline, copied(moved), "baseline", index)
            steps = None if rounded is None else \
                sample_outputs(rounded, copied(moved), "analysis", index)
            outputs = sample_outputs(analysis, moved, "analysis", index)
        if search is None:
            named = output_names(outputs, names)
            search = SampleSearch(outputs=named, metric=metric,
                                  tolerance=THRESHOLDS.cosine_good if tolerance is None
                                  else tolerance)
            heaps = [[] for _ in named]
        _check_same_outputs(reference, outputs, len(search.outputs), index)
        row = []
        for o, ((_, base), (_, out)) in enumerate(zip(reference, outputs, strict=True)):
            stats = pair_stats(base, out, _KEYS)
            values = tuple(_number(stats[key]) for key in _KEYS)
            row.append(values)
            entry = (-badness(values[at], metric), -index, index)
            heap = heaps[o]
            if len(heap) < keep:
                heapq.heappush(heap, entry + (copied(sample),))
            elif entry > heap[0][:3]:
                heapq.heapreplace(heap, entry + (copied(sample),))
        search.errors.append(row)
        if steps is not None:
            search.rounding.append([_number(pair_stats(base, out, ("cosine",))["cosine"])
                                    for (_, base), (_, out) in zip(reference, steps,
                                                                   strict=True)])
        if index == badcase:
            given = copied(sample)
        if progress is not None:
            progress(f"sample {index}", index + 1, total or 0)
    finish = getattr(progress, "finish", None)
    if not total and finish is not None:
        finish()                        # a count without a total: its line ends here
    if search is None:
        raise QcdoctorError("the samples are empty", key="inputs",
                            fix="give at least one sample (a DataLoader with batches, or "
                                "Samples of a non-empty list)")
    search.replayable = replayable(inputs)
    # the chosen output: the one whose worst sample is worst
    worst = [search.worst_index(o, metric) for o in range(len(search.outputs))]
    chosen_o = min(range(len(search.outputs)),
                   key=lambda o: (badness(search.errors[worst[o]][o][at], metric), o))
    search.chosen_output = search.outputs[chosen_o]
    ranked = sorted(heaps[chosen_o], reverse=True)      # worst first
    search.worst_first = [entry[2] for entry in ranked]
    search.kept = {entry[2]: entry[3] for entry in ranked}
    if badcase is not None:
        if badcase >= search.count:
            raise QcdoctorError(f"badcase {badcase} is past the last sample "
                                f"({search.count} samples, 0 to {search.count - 1})",
                                key="badcase", fix="give an index sample_errors.csv lists")
        search.chosen, search.how = badcase, "given"
        search.kept.setdefault(badcase, given)
    else:
        search.chosen = search.worst_first[0]
    return search


def badness(value: float, metric: str) -> float:
    """Smaller is worse (a sort key): NaN the worst of all."""
    if value != value:
        return -math.inf
    return value if METRICS[metric] in ASCENDING else -value


def _number(value) -> float:
    return math.nan if value is None else float(value)


def _plain(value: float):
    return None if value != value else round(value, 7)


def median_of_numbers(values) -> float:
    """The median of the values that are numbers (NaN where none is)."""
    finite = [v for v in values if v == v]
    return statistics.median(finite) if finite else math.nan


def sample_outputs(model, sample, side: str, index: int) -> list[tuple[str, torch.Tensor]]:
    try:
        return flatten_output(called(model, sample))
    except QcdoctorError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
        lines = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise QcdoctorError(
            f"the {side} model fails on sample {index} ({what})", key="inputs",
            fix="each sample is one forward call's inputs (a tensor, a tuple of positional "
                "arguments or a dict of keyword arguments); a loader yielding (input, "
                "label) pairs: pass Samples(x for x, _ in loader)") from exc


def _check_sample(sample, index: int) -> None:
    from qcdoctor.probe.stats import nonfinite_counts
    if not isinstance(sample, (torch.Tensor, tuple, list, dict)):
        raise QcdoctorError(f"sample {index} is a {type(sample).__name__}", key="inputs",
                            fix="each sample is a tensor, a tuple/list of positional "
                                "arguments or a dict of keyword arguments")
    found = nonfinite_counts(sample)
    if found:
        name, nan, inf, total = found[0]
        raise QcdoctorError(f"sample {index} holds {nan} NaN and {inf} infinite value(s) "
                            f"of {total} (in {name}): every metric would be NaN",
                            key="inputs", fix="give finite samples (torch.nan_to_num), or "
                                              "leave that sample out")


def _check_same_outputs(reference: list, outputs: list, expected: int, index: int) -> None:
    if len(reference) != len(outputs) or len(outputs) != expected:
        raise QcdoctorError(f"on sample {index} the baseline gives {len(reference)} output "
                            f"tensor(s), the analysis model {len(outputs)}"
                            + ("" if len(outputs) == expected else
                               f" (sample 0 gave {expected})"),
                            key="inputs", fix="compare models that give the same outputs on "
                                              "every sample")
    for (name, base), (_, out) in zip(reference, outputs, strict=True):
        if base.shape != out.shape:
            raise QcdoctorError(f"on sample {index} output {name or 0} has shape "
                                f"{tuple(base.shape)} in the baseline and {tuple(out.shape)} "
                                f"in the analysis model", key="inputs",
                                fix="compare models that give the same outputs on every "
                                    "sample")
