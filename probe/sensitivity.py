"""Sensitivity: how much each quantizer alone moves the model outputs.

As the profiler defines the values of output_*_sensitive_ops (knowledge.md §8): all
fake quantization off, then one quantizer at a time on; each row is the error of every
model output against the baseline's with only that quantizer on. Rows are sorted most
sensitive first. Every switch is restored afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from qcdoctor.collectors.sensitivity import ASCENDING
from qcdoctor.probe.quantizers import QuantizerAdapter
from qcdoctor.probe.stats import flatten_output, pair_stats

# file-name metric -> pair_stats key (also the collector's name of the metric)
METRICS = {"L1": "l1", "MSE": "mse", "KL": "kl", "ATOL": "atol", "Cosine": "cosine",
           "SQNR": "sqnr"}


def output_names(outputs: list[tuple[str, torch.Tensor]], names: list[str] | None) -> list[str]:
    """Names for the model outputs: the given ones, else their place (``0``, ``boxes``,
    ``heads_1``)."""
    if names is not None:
        return list(names)
    derived = [suffix.strip("[]").replace("][", "_") for suffix, _ in outputs]
    return [d or "0" for d in derived]


def sensitivity(analysis, adapter: QuantizerAdapter, run, reference: list[torch.Tensor],
                metric: str, progress: Callable[[str, int, int], None] | None = None):
    """rows per output: [(op_name, sensitive_type, op_type, value, quant_dtype), ...]."""
    key = METRICS[metric]
    quantizers = adapter.quantizers(analysis)
    saved = [(q, adapter.is_enabled(q)) for q in quantizers]
    per_output: list[list[tuple]] = [[] for _ in reference]
    try:
        for q in quantizers:
            adapter.set_enabled(q, False)
        for done, q in enumerate(quantizers):
            adapter.set_enabled(q, True)
            outputs = flatten_output(run(analysis))
            adapter.set_enabled(q, False)
            for rows, base, (_, out) in zip(per_output, reference, outputs, strict=True):
                value = pair_stats(base, out, (key,))[key]
                rows.append((q.op_name, q.sensitive_type, q.op_type,
                             float("inf") if value is None else value, q.quant_dtype))
            if progress is not None:
                progress(q.op_name, done + 1, len(quantizers))
    finally:
        for q, enabled in saved:
            adapter.set_enabled(q, enabled)
    reverse = key not in ASCENDING          # the collector's order: worst first
    return [sorted(rows, key=lambda r: r[3], reverse=reverse) for rows in per_output]
