"""compare_models: layer metrics and sensitivity of two torch models, written in the
profiler's own formats, so a triage reads the folder like a QuantAnalysis run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from qcdoctor.collectors.qa_files import PROBE_MANIFEST, load_probe_manifest
from qcdoctor.collectors.qa_writers import write_compare, write_sensitivity
from qcdoctor.engine.errors import QcdoctorError
from qcdoctor.engine.vocabulary import ANALYSIS_TYPE_STAGES

from .capture import compare_layers
from .quantizers import QuantizerAdapter, TorchAoAdapter, freeze_observers, restore_observers
from .sensitivity import METRICS, output_names
from .sensitivity import sensitivity as sensitivity_pass


@dataclass
class ProbeResult:
    out_dir: Path
    rows: list[dict]                       # compare_per_layer rows, execution order
    baseline_only: list[str]               # layer outputs only the baseline produced
    analysis_only: list[str]
    sensitivity: dict[str, list[tuple]] = field(default_factory=dict)   # output -> rows
    files: list[Path] = field(default_factory=list)


def compare_models(baseline: nn.Module, analysis: nn.Module, inputs, out_dir, *,
                   sensitivity: bool = True, metric: str = "L1", names: list[str] | None = None,
                   analysis_model_type: str = "fake_quant", device: str | None = None,
                   adapter: QuantizerAdapter | None = None,
                   progress: Callable[[str, int, int], None] | None = None) -> ProbeResult:
    """Compare every layer output of ``analysis`` with ``baseline`` on ``inputs`` and write
    compare_per_layer_out.{csv,txt}, the sensitivity tables and probe_run.yaml to ``out_dir``.

    inputs: a tensor, a tuple/list of positional arguments, or a dict of keyword
    arguments for one forward call. names: names of the model outputs (default: their
    position or key). device: move both models and the inputs there (default: the
    models stay where they are, the inputs follow the analysis model). Both models run
    in eval mode with their observers frozen; modes and switches are restored after.
    """
    if metric not in METRICS:
        raise QcdoctorError(f"unknown metric {metric!r}", key="metric",
                            fix=f"use one of {', '.join(METRICS)}")
    if analysis_model_type not in ANALYSIS_TYPE_STAGES:
        raise QcdoctorError(f"unknown analysis_model_type {analysis_model_type!r}",
                            key="analysis_model_type",
                            fix=f"use one of {', '.join(ANALYSIS_TYPE_STAGES)}")
    out = Path(out_dir)
    old_files = _check_out_dir(out)
    if device is not None:
        baseline.to(device)
        analysis.to(device)
    target = device or _device_of(analysis)
    args, kwargs = _call_args(_to(inputs, target))

    def run(model):
        return model(*args, **kwargs)

    modes = [(m, m.training) for model in (baseline, analysis) for m in model.modules()]
    frozen = freeze_observers(analysis) + freeze_observers(baseline)
    try:
        baseline.eval()
        analysis.eval()
        with torch.inference_mode():
            layers = compare_layers(baseline, analysis, run)
            reference = [t for _, t in layers.baseline_outputs]
            named = output_names(layers.analysis_outputs, names)
            if len(named) != len(reference):
                raise QcdoctorError(f"{len(named)} output name(s) given, the model returns "
                                    f"{len(reference)} tensor(s)", key="names",
                                    fix="give one name per output tensor, or none")
            tables = {}
            shapes = [(tuple(b.shape), tuple(a.shape))
                      for b, (_, a) in zip(reference, layers.analysis_outputs, strict=False)]
            if sensitivity and (len(layers.analysis_outputs) != len(reference)
                                or any(b != a for b, a in shapes)):
                raise QcdoctorError("the two models' outputs differ in number or shape, so "
                                    "their errors cannot be measured", key="sensitivity",
                                    fix="compare models with the same outputs, or run without "
                                        "sensitivity (--no-sensitivity)")
            if sensitivity:
                per_output = sensitivity_pass(analysis, adapter or TorchAoAdapter(), run,
                                              reference, metric, progress)
                tables = dict(zip(named, per_output, strict=True))
    finally:
        restore_observers(frozen)
        for module, training in modes:
            module.train(training)
    for stale in old_files:
        stale.unlink(missing_ok=True)
    result = ProbeResult(out, layers.rows, layers.baseline_only, layers.analysis_only, tables)
    for fmt in ("csv", "txt"):
        result.files.append(write_compare(out, layers.rows, "23", fmt))
    for name, rows in tables.items():
        for fmt in ("txt", "pt"):
            result.files.append(write_sensitivity(out, rows, output=name, metric=metric,
                                                  flops=False, fmt=fmt))
    result.files.append(_write_manifest(result, analysis_model_type, metric))
    return result


def _check_out_dir(out: Path) -> list[Path]:
    """The files an earlier probe run left there (replaced now); refuses a folder that
    holds anything else, so nothing of the user's is overwritten."""
    if not out.exists():
        return []
    if not out.is_dir():
        raise QcdoctorError("is not a folder", file=str(out), fix="give a new or empty folder")
    present = [p for p in out.iterdir()]
    if not present:
        return []
    manifest = out / PROBE_MANIFEST
    try:
        written = load_probe_manifest(manifest) if manifest.is_file() else None
    except (OSError, UnicodeDecodeError, QcdoctorError):    # unreadable: nothing is ours
        written = None
    listed = written.get("files") if isinstance(written, dict) else None
    ours = {out / str(name) for name in listed} | {manifest} if isinstance(listed, list) else set()
    foreign = [p.name for p in present if p not in ours]
    if foreign:
        raise QcdoctorError(f"the output folder holds files qcdoctor probe did not write "
                            f"({', '.join(sorted(foreign)[:3])})", file=str(out),
                            fix="give a new or empty folder (an earlier probe output is replaced)")
    return [p for p in ours if p.exists()]


def _write_manifest(result: ProbeResult, kind: str, metric: str) -> Path:
    import yaml

    from qcdoctor.engine.atomic import write_text_atomic
    baseline, analysis = ANALYSIS_TYPE_STAGES[kind]
    path = result.out_dir / PROBE_MANIFEST
    document = {"origin": "probe", "type": kind, "baseline": baseline, "analysis": analysis,
                "metric": metric, "sensitivity": bool(result.sensitivity),
                "layers": len(result.rows),
                "unmatched": {"baseline_only": result.baseline_only,
                              "analysis_only": result.analysis_only},
                "files": sorted(p.name for p in result.files)}
    write_text_atomic(path, yaml.safe_dump(document, sort_keys=False, allow_unicode=True))
    return path


def _device_of(model: nn.Module):
    tensor = next(iter(model.parameters()), None)
    if tensor is None:
        tensor = next(iter(model.buffers()), None)
    return tensor.device if tensor is not None else torch.device("cpu")


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: _to(v, device) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device) for v in value)
    return value


def _call_args(inputs) -> tuple[tuple, dict]:
    if isinstance(inputs, dict):
        return (), inputs
    if isinstance(inputs, (tuple, list)):
        return tuple(inputs), {}
    return (inputs,), {}
