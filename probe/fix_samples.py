"""Fixes measured on many samples: the trials run on the K worst samples of the bad-case
search as one batch (where their tensors stack), and the recommended fix is confirmed on
every sample (fix_trials.yaml's ``samples``; docs/probe.md, Measured fixes).

One batch: each tensor of the K samples concatenated along its first dimension, so a
trial is one forward pass whatever K; the figure is the output's metric over the whole
batch. Where the samples do not stack (another structure, other shapes), the trials run on
the sample the layers were read on. The confirmation runs the baseline and the fixed copy
over every sample once more (two forwards a sample) and compares each sample's error
with the one the search measured before any fix."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from qcdoctor.probe.badcase_search import SampleSearch, median_of_numbers, sample_outputs
from qcdoctor.probe.samples import each_sample
from qcdoctor.probe.sensitivity import METRICS
from qcdoctor.probe.stats import pair_stats


def stacked(samples: list):
    """The samples as one call's inputs, each tensor concatenated along dimension 0 with
    its counterparts; None where they differ in structure, dtype or any other dimension."""
    first = samples[0]
    if isinstance(first, torch.Tensor):
        if not all(isinstance(s, torch.Tensor) and s.dim() >= 1 and s.dim() == first.dim()
                   and s.shape[1:] == first.shape[1:] and s.dtype == first.dtype
                   and s.device == first.device for s in samples):
            return None
        return torch.cat(samples)
    if isinstance(first, dict):
        if not all(isinstance(s, dict) and s.keys() == first.keys() for s in samples):
            return None
        parts = {k: stacked([s[k] for s in samples]) for k in first}
        return None if any(v is None for v in parts.values()) else parts
    if isinstance(first, (tuple, list)):
        if not all(isinstance(s, type(first)) and len(s) == len(first) for s in samples):
            return None
        parts = [stacked([s[i] for s in samples]) for i in range(len(first))]
        return None if any(p is None for p in parts) else type(first)(parts)
    return None if not all(s == first for s in samples) else first   # a flag, the same in all


def error_of(value: float, metric: str) -> float:
    """The error a fix metric's value carries: 1 - Cosine, else the value."""
    return 1.0 - value if metric == "Cosine" else value


def confirm(baseline: nn.Module, fixed: nn.Module, inputs, search: SampleSearch,
            output: str, metric: str, max_samples: int | None, to_device: Callable,
            progress: Callable[[str, int, int], None] | None = None) -> dict:
    """The fix confirmed on every sample: each sample's error before (the search's) and
    after (``fixed`` against ``baseline``, both already in eval mode, observers frozen);
    the median share of the error removed and the share of samples improved, over the
    samples that show the error where the clean model's error was measured (``over``: a
    sample within the clean model's error holds no error to remove), else over all; the
    worst sample after the fix, of all."""
    o = search.outputs.index(output)
    key = METRICS[metric]
    focus = {s for s in range(search.count) if search.shows_any(s)} if search.rounding else set()
    removed, improved, worst, over = [], 0, None, 0
    for index, sample in each_sample(inputs, max_samples):
        if index >= search.count:
            break
        moved = to_device(sample)
        with torch.inference_mode():
            base = sample_outputs(baseline, moved, "baseline", index)[o][1]
            after_out = sample_outputs(fixed, moved, "fixed analysis", index)[o][1]
        value = pair_stats(base, after_out, (key,))[key]
        after = math.nan if value is None else float(value)
        before_error = error_of(search.value(index, o, metric), metric)
        after_error = error_of(after, metric)
        counted = not focus or index in focus
        over += counted
        if counted and math.isfinite(after_error) and (not math.isfinite(before_error)
                                                       or after_error < before_error):
            improved += 1
        if counted and before_error > 0 and math.isfinite(before_error) and \
                math.isfinite(after_error):
            removed.append(1.0 - after_error / before_error)
        if worst is None or not after_error <= worst[1]:
            worst = (index, after_error if math.isfinite(after_error) else math.inf, after)
        if progress is not None:
            progress(f"confirming on sample {index}", index + 1, search.count)
    median = median_of_numbers(removed)
    return {"samples": search.count, "forwards": 2 * search.count,
            "median_error_removed": _rounded(median),
            "improved_share": round(improved / max(over, 1), 4), "over": over,
            "worst_after": None if worst is None else
            {"sample": worst[0], metric: _rounded(worst[2])}}


def _rounded(value: float):
    return None if value != value else round(value, 6)

