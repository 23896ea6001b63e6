"""Run the two models with forward hooks and turn each matched layer output into one
compare_per_layer row.

Memory stays bounded: the baseline pass keeps only each output's statistics and spills
the tensor to a temporary file; the analysis pass reads each one back when the same
layer runs, compares, and deletes it. No pass holds more than one layer's activations
beyond what the model itself holds.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from .layers import Layer, layer_map, output_scale
from .stats import flatten_output, pair_stats, shape_text, side_stats

Key = tuple[str, int]          # (output name, how many times that name ran before)


class _Spill:
    """Baseline outputs on disk, each read back once."""

    def __init__(self):
        self._dir = tempfile.TemporaryDirectory(prefix="qcdoctor-probe-")
        self._files: dict[Key, tuple[Path, tuple]] = {}
        self._written = 0

    def put(self, key: Key, tensor: torch.Tensor) -> None:
        array = tensor.detach().to("cpu", torch.float32).contiguous().numpy()
        path = Path(self._dir.name) / str(self._written)
        self._written += 1
        array.tofile(path)
        self._files[key] = (path, array.shape)

    def take(self, key: Key) -> torch.Tensor:
        path, shape = self._files.pop(key)
        array = np.fromfile(path, dtype=np.float32).reshape(shape)
        path.unlink()
        return torch.from_numpy(array)

    def close(self) -> None:
        self._dir.cleanup()


@dataclass
class _BaseOutput:
    layer: Layer
    stats: dict


@dataclass
class LayerRows:
    rows: list[dict] = field(default_factory=list)
    baseline_only: list[str] = field(default_factory=list)
    analysis_only: list[str] = field(default_factory=list)
    baseline_outputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)
    analysis_outputs: list[tuple[str, torch.Tensor]] = field(default_factory=list)


@contextmanager
def _hooks(model: nn.Module, on_output):
    """Forward hooks on every layer (and FX fake quant) of ``model``; on_output(layer, out)."""
    found = layer_map(model)
    modules = dict(model.named_modules())
    handles = []
    for name, layer in found.own.items():
        handles.append(modules[name].register_forward_hook(
            lambda _m, _a, out, layer=layer: on_output(layer, out)))
    for name, layers in found.attributed.items():
        calls = Counter()

        def hook(_m, _a, out, layers=layers, calls=calls, name=name):
            layer = layers[calls[name] % len(layers)]
            calls[name] += 1
            on_output(layer, out)
        handles.append(modules[name].register_forward_hook(hook))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def compare_layers(baseline: nn.Module, analysis: nn.Module, run) -> LayerRows:
    """Rows in the analysis model's execution order, and both models' outputs;
    ``run(model)`` does one forward."""
    spill = _Spill()
    seen: Counter = Counter()
    base: dict[Key, _BaseOutput] = {}

    def on_base(layer: Layer, out) -> None:
        for suffix, tensor in flatten_output(out, layer.name):
            key = (suffix, seen[suffix])
            seen[suffix] += 1
            base[key] = _BaseOutput(layer, side_stats(tensor))
            spill.put(key, tensor)

    result = LayerRows()
    ran: Counter = Counter()

    def on_analysis(layer: Layer, out) -> None:
        for suffix, tensor in flatten_output(out, layer.name):
            key = (suffix, ran[suffix])
            ran[suffix] += 1
            matched = base.pop(key, None)
            if matched is None:
                result.analysis_only.append(suffix)
                continue
            reference = spill.take(key).to(tensor.device)
            result.rows.append(_row(suffix, matched, layer, reference, tensor))
            del reference

    try:
        with _hooks(baseline, on_base):
            result.baseline_outputs = flatten_output(run(baseline))
        with _hooks(analysis, on_analysis):
            result.analysis_outputs = flatten_output(run(analysis))
    finally:
        spill.close()
    result.baseline_only = [key[0] for key in base]
    return result


def _row(name: str, base: _BaseOutput, layer: Layer, reference: torch.Tensor,
         tensor: torch.Tensor) -> dict:
    qscale, dtype = output_scale(layer.quantizer)
    side = side_stats(tensor)
    row = {"mod_name": name, "base_op_type": base.layer.op_type, "analy_op_type": layer.op_type,
           "shape": shape_text(tensor), "quant_dtype": dtype, "qscale": qscale,
           "base_model_min": base.stats["min"], "analy_model_min": side["min"],
           "base_model_max": base.stats["max"], "analy_model_max": side["max"],
           "base_model_mean": base.stats["mean"], "analy_model_mean": side["mean"],
           "base_model_var": base.stats["var"], "analy_model_var": side["var"]}
    if reference.shape != tensor.shape:
        row["shape"] = "mismatch shape"
        return row
    metrics = pair_stats(reference, tensor)
    row.update(metrics)
    row["max_atol_diff"] = metrics["atol"]
    row["max_qscale_diff"] = metrics["atol"] / qscale if qscale and metrics["atol"] is not None \
        else None
    return row
