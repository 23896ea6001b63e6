"""compare_models: layer metrics and sensitivity of two torch models, written in the
profiler's own formats, so a triage reads the folder like a QuantAnalysis run.

compare_per_layer_out.{csv,txt} has the profiler's 23 columns and two more at the end:
``base_mod_name`` (the baseline output a row was compared with, when it is not the
row's own name: the end of the same fused pattern) and ``match`` (``name``,
``pattern_end``, or ``unaligned`` / ``fused_intermediate`` for rows whose two sides
compute different things: their metrics are left empty, as the profiler leaves a fused
intermediate's). Readers that know the 23 columns ignore the two.

With ``try_fixes``, candidate remedies are then measured on a deep copy of the analysis
model and written as fix_trials.yaml (probe/fix_trials.py).
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from qcdoctor.collectors.qa_files import PROBE_MANIFEST, load_probe_manifest
from qcdoctor.collectors.qa_writers import LAYOUTS, ROW_KEYS, write_sensitivity
from qcdoctor.errors import QcdoctorError
from qcdoctor.probe import fix_trials as fixes
from qcdoctor.probe.capture import LayerRows, compare_layers
from qcdoctor.probe.quantizers import (
    QuantizerAdapter,
    TorchAoAdapter,
    freeze_observers,
    restore_observers,
)
from qcdoctor.probe.sensitivity import METRICS, output_names
from qcdoctor.probe.sensitivity import sensitivity as sensitivity_pass
from qcdoctor.probe.stats import release_scratch
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES

EXTRA_COLUMNS = ["base_mod_name", "match"]
# below this share of analysis outputs compared, the table is no layer-by-layer reading
MATCHED_ENOUGH = 0.5
MANIFEST_ITEMS = 500                   # names listed per list of probe_run.yaml


class ProbeWarning(UserWarning):
    """The two models could not be compared layer by layer (most outputs unmatched)."""


@dataclass
class ProbeResult:
    out_dir: Path
    rows: list[dict]                       # compare_per_layer rows, execution order
    baseline_only: list[str]               # layer outputs only the baseline produced
    analysis_only: list[str]
    sensitivity: dict[str, list[tuple]] = field(default_factory=dict)   # output -> rows
    files: list[Path] = field(default_factory=list)
    aligned: dict[str, str] = field(default_factory=dict)   # row -> baseline output compared
    unaligned: list[str] = field(default_factory=list)      # flagged rows: no counterpart
    fused_intermediates: list[str] = field(default_factory=list)   # flagged rows
    absorbed: list[str] = field(default_factory=list)       # baseline outputs inside patterns
    compared: int = 0                      # rows with metrics
    matched_share: float = 1.0             # compared / every analysis output
    warnings: list[str] = field(default_factory=list)
    changed_in_place: list[str] = field(default_factory=list)   # rows that may be wrong
    fix_trials: dict | None = None         # fix_trials.yaml's document (try_fixes)

    @property
    def mostly_unmatched(self) -> bool:
        return self.matched_share < MATCHED_ENOUGH

    def _repr_html_(self) -> str:
        """In a notebook: the summary and the per-layer chart (probe/display.py)."""
        from qcdoctor.probe.display import probe_html
        return probe_html(self)

    def _repr_markdown_(self) -> str:
        from qcdoctor.probe.display import probe_markdown
        return probe_markdown(self)


def compare_models(baseline: nn.Module, analysis: nn.Module, inputs, out_dir, *,
                   sensitivity: bool = True, metric: str = "L1", names: list[str] | None = None,
                   analysis_model_type: str = "fake_quant", device: str | None = None,
                   adapter: QuantizerAdapter | None = None,
                   progress: Callable[[str, int, int], None] | None = None,
                   try_fixes: bool = False, fix_budget: int = fixes.DEFAULT_BUDGET,
                   fix_target=None, fix_metric: str = "Cosine") -> ProbeResult:
    """Compare every layer output of ``analysis`` with ``baseline`` on ``inputs`` and write
    compare_per_layer_out.{csv,txt}, the sensitivity tables and probe_run.yaml to ``out_dir``.

    inputs: a tensor, a tuple/list of positional arguments, or a dict of keyword
    arguments for one forward call. names: names of the model outputs (default: their
    position or key). device: move both models and the inputs there (default: the
    models stay where they are, the inputs follow the analysis model). Both models run
    in eval mode with their observers frozen; modes and switches are restored after.

    try_fixes: then measure candidate remedies on a deep copy of ``analysis`` and write
    fix_trials.yaml (``result.fix_trials``): at most ``fix_budget`` forward passes, the
    figures in ``fix_metric`` (Cosine, L1 or MSE), a fix good enough when it removes
    ``fix_target`` of the output error (a share, default 0.9; or a dict / "key=value"
    text of ``error_removed`` and ``cosine``; Cosine >= 0.999 also counts by default).
    """
    if metric not in METRICS:
        raise QcdoctorError(f"unknown metric {metric!r}", key="metric",
                            fix=f"use one of {', '.join(METRICS)}")
    if analysis_model_type not in ANALYSIS_TYPE_STAGES:
        raise QcdoctorError(f"unknown analysis_model_type {analysis_model_type!r}",
                            key="analysis_model_type",
                            fix=f"use one of {', '.join(ANALYSIS_TYPE_STAGES)}")
    goal = fixes.check_options(fix_budget, fix_target, fix_metric) if try_fixes else None
    adapter = adapter or TorchAoAdapter()
    if try_fixes:
        fixes.enabled_quantizers(analysis, adapter)     # before any work: something to try
    out = Path(out_dir)
    old_files = _check_out_dir(out)
    if device is not None:
        baseline.to(device)
        analysis.to(device)
    target = device or _device_of(analysis)
    args, kwargs = _call_args(_to(inputs, target))

    def run(model):
        return model(*args, **kwargs)

    every = [_modules(model) for model in (baseline, analysis)]
    modes = [(m, m.training) for modules in every for m in modules]
    frozen = freeze_observers(analysis, every[1]) + freeze_observers(baseline, every[0])
    try:
        _eval(baseline)
        _eval(analysis)
        layers = compare_layers(baseline, analysis, args, kwargs)
        with torch.inference_mode():
            reference = [t for _, t in layers.baseline_outputs]
            named = output_names(layers.analysis_outputs, names)
            if len(named) != len(reference):
                raise QcdoctorError(f"{len(named)} output name(s) given, the model returns "
                                    f"{len(reference)} tensor(s)", key="names",
                                    fix="give one name per output tensor, or none")
            tables = {}
            shapes = [(tuple(b.shape), tuple(a.shape))
                      for b, (_, a) in zip(reference, layers.analysis_outputs, strict=False)]
            if (sensitivity or try_fixes) and (len(layers.analysis_outputs) != len(reference)
                                               or any(b != a for b, a in shapes)):
                option = "sensitivity" if sensitivity else "try_fixes"
                raise QcdoctorError("the two models' outputs differ in number or shape, so "
                                    "their errors cannot be measured", key=option,
                                    fix="compare models with the same outputs, or run without "
                                        + ("sensitivity (--no-sensitivity)" if sensitivity
                                           else "--try-fixes"))
            if sensitivity:
                per_output = sensitivity_pass(analysis, adapter, run, reference, metric,
                                              progress)
                tables = dict(zip(named, per_output, strict=True))
    finally:
        restore_observers(frozen)
        for module, training in modes:
            # a plain flag (train() would walk the children again, Module.__setattr__
            # look for parameters first)
            object.__setattr__(module, "training", training)
        release_scratch()
    # the copy after the comparison (its memory released), before any file is written
    trial_copy = _trial_copy(analysis) if try_fixes else None
    for stale in old_files:
        stale.unlink(missing_ok=True)
    result = _result(out, layers, tables)
    result.files.extend(_write_compare(out, layers.rows))
    if layers.graph is not None:
        from qcdoctor.probe.fxgraph import write_fx_graph
        result.files.append(write_fx_graph(out / "fx_graph.txt", layers.graph,
                                           layers.graph_names))
    for name, rows in tables.items():
        for fmt in ("txt", "pt"):
            result.files.append(write_sensitivity(out, rows, output=name, metric=metric,
                                                  flops=False, fmt=fmt))
    try:
        if trial_copy is not None:
            document = fixes.try_fixes(trial_copy, adapter, run, reference, named,
                                       layers.rows, out / "compare_per_layer_out.csv", tables,
                                       budget=fix_budget, target=goal, metric=fix_metric,
                                       progress=progress)
            result.fix_trials = document
            result.files.append(fixes.write_fix_trials(out, document))
    finally:
        trial_copy = None                  # the copy goes before the manifest is written
        release_scratch()
        # whatever happened, the folder lists what was written (a rerun may replace it)
        result.files.append(_write_manifest(result, analysis_model_type, metric))
    for message in result.warnings:
        warnings.warn(message, ProbeWarning, stacklevel=2)
    return result


def _result(out: Path, layers: LayerRows, tables: dict) -> ProbeResult:
    compared = sum(1 for r in layers.rows if r.get("cosine") is not None
                   or r.get("atol") is not None)
    outputs = len(layers.rows) + len(layers.analysis_only)
    share = compared / outputs if outputs else 1.0
    result = ProbeResult(out, layers.rows, layers.baseline_only, layers.analysis_only, tables,
                         aligned=layers.aligned, unaligned=layers.unaligned,
                         fused_intermediates=layers.fused_intermediates,
                         absorbed=layers.absorbed, compared=compared, matched_share=share)
    result.changed_in_place = list(layers.changed)
    if layers.changed:
        result.warnings.append(
            f"{len(layers.changed)} layer output(s) were changed in place by the model before "
            f"the probe read them, by an op it did not see coming "
            f"({', '.join(layers.changed[:5])}): their rows may be wrong")
    if outputs and share < MATCHED_ENOUGH:
        result.warnings.append(
            f"only {compared} of {outputs} analysis layer outputs have a baseline output "
            f"computing the same thing ({len(layers.analysis_only)} only in the analysis "
            f"model, {len(layers.unaligned) + len(layers.fused_intermediates)} computing "
            f"something else, {len(layers.baseline_only)} only in the baseline): the two "
            f"models differ in structure or layer names, so the table is no layer-by-layer "
            f"comparison; give a baseline with the analysis model's layer names (e.g. the "
            f"float model it was prepared from)")
    return result


def _write_compare(folder: Path, rows: list[dict]) -> list[Path]:
    """compare_per_layer_out.{csv,txt}: the 23-column layout plus EXTRA_COLUMNS, in the
    profiler's formats (as qa_writers writes them): a psql box table with an index column
    and a ', '-separated CSV without one, floats with 7 decimals, commas inside a CSV cell
    as ``*``; a missing value is an empty cell in both (the readers' NA values are None,
    nan and empty: no "None" text in the tables)."""
    header = LAYOUTS["23"] + EXTRA_COLUMNS
    keys = [ROW_KEYS.get(c, c) for c in header]
    cells = [[_cell(row.get(k)) for k in keys] for row in rows]
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "compare_per_layer_out.csv"
    lines = [", ".join(header)]
    lines += [", ".join(c.replace(", ", "* ").replace(",", "*") if "," in c else c
                        for c in r) for r in cells]
    csv_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    txt_path = folder / "compare_per_layer_out.txt"
    txt_path.write_text(_psql(header, cells), encoding="utf-8")
    return [csv_path, txt_path]


def _cell(value) -> str:
    kind = type(value)
    if kind is float:                   # most cells: tested first
        if value != value:
            return ""                   # nan
        return f"{value:.7f}" if -1e15 < value < 1e15 else repr(value)
    if value is None:
        return ""
    if kind is str:
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        return f"{value:.7f}" if abs(value) < 1e15 else repr(value)
    return str(value)


_NUMERIC = set(LAYOUTS["23"][5:])      # qscale onwards: numbers, right-aligned


def _psql(header: list[str], cells: list[list[str]]) -> str:
    """qa_writers.psql's box table (numbers right-aligned, text left), column-wise."""
    full = [""] + header
    body = [[str(i)] + r for i, r in enumerate(cells)]
    widths = [max([len(h)] + [len(r[i]) for r in body]) for i, h in enumerate(full)]
    right = [True] + [h in _NUMERIC for h in header]
    border = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    under = "|" + "+".join("-" * (w + 2) for w in widths) + "|"
    # one format per line (str.format pads as rjust/ljust do); braces in cells are
    # arguments, never part of the template
    row_format = "| " + " | ".join(f"{{:{'>' if r else '<'}{w}}}"
                                   for w, r in zip(widths, right, strict=True)) + " |"
    head_format = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
    out = [border, head_format.format(*full), under]
    out += [row_format.format(*r) for r in body]
    out.append(border)
    return "\n".join(out) + "\n"


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
        written = _read_manifest(manifest) if manifest.is_file() else None
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


# manifest path -> (the text this process wrote there, its file list): a rerun into the
# same folder finds the same text and skips parsing it again
_WRITTEN: dict[str, tuple[str, list]] = {}


def _read_manifest(manifest: Path):
    known = _WRITTEN.get(str(manifest))
    if known is not None and manifest.read_text(encoding="utf-8") == known[0]:
        return {"files": list(known[1])}
    return load_probe_manifest(manifest)


def _write_manifest(result: ProbeResult, kind: str, metric: str) -> Path:
    import yaml

    from qcdoctor.atomic import write_text_atomic
    baseline, analysis = ANALYSIS_TYPE_STAGES[kind]
    path = result.out_dir / PROBE_MANIFEST
    names = {p.name for p in result.files}
    counts = {}

    def listed(key: str, values):
        """At most MANIFEST_ITEMS names (the case-file reader's list limit is 1,000);
        ``counts`` has the full number."""
        counts[key] = len(values)
        if isinstance(values, dict):
            return dict(list(values.items())[:MANIFEST_ITEMS])
        return list(values[:MANIFEST_ITEMS])
    alignment = {
        # row -> the baseline output it was compared with: the end of the same fused
        # pattern (a conv-bn-relu row against the baseline's relu)
        "pattern_end": listed("pattern_end", result.aligned),
        # rows without metrics: no baseline output computes the same thing
        "unaligned": listed("unaligned", result.unaligned),
        # rows without metrics: inside a pattern the baseline computes as one op
        "fused_intermediates": listed("fused_intermediates", result.fused_intermediates),
        # baseline outputs inside a fused pattern the analysis computes as one module
        "absorbed": listed("absorbed", result.absorbed)}
    unmatched = {"baseline_only": listed("baseline_only", result.baseline_only),
                 "analysis_only": listed("analysis_only", result.analysis_only)}
    document = {"origin": "probe", "type": kind, "baseline": baseline, "analysis": analysis,
                "metric": metric, "sensitivity": bool(result.sensitivity),
                "layers": len(result.rows), "compared": result.compared,
                # rows compared / every analysis output; below 0.5 the table is no
                # layer-by-layer comparison (the warnings say why)
                "matched_share": round(result.matched_share, 4),
                "mostly_unmatched": result.mostly_unmatched,
                "graph": "fx_graph.txt" if "fx_graph.txt" in names else None,
                "alignment": alignment,
                "unmatched": unmatched,
                "changed_in_place": listed("changed_in_place", result.changed_in_place),
                "counts": counts,
                "warnings": list(result.warnings),
                "files": sorted(names)}
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    text = yaml.dump(document, Dumper=dumper, sort_keys=False, allow_unicode=True)
    # atomic (a reader never sees half of it), not synced: a rerun rewrites it
    write_text_atomic(path, text, durable=False)
    if len(_WRITTEN) >= 64:
        _WRITTEN.clear()
    _WRITTEN[str(path)] = (text, document["files"])
    return path


def _trial_copy(analysis: nn.Module) -> nn.Module:
    """A deep copy of the analysis model for the fix trials, in eval mode with its
    observers frozen (the user's model keeps its own modes and switches)."""
    try:
        trial = copy.deepcopy(analysis)
    except Exception as exc:  # noqa: BLE001 - whatever the user's modules hold
        lines = str(exc).strip().splitlines()
        raise QcdoctorError(f"the analysis model cannot be deep-copied for the fix trials "
                            f"({type(exc).__name__}: {lines[0][:200] if lines else ''})",
                            key="try_fixes",
                            fix="keep no uncopyable state (open files, locks, generators) "
                                "in the modules, or run without --try-fixes") from exc
    _eval(trial)
    freeze_observers(trial)
    return trial


def _modules(model: nn.Module) -> list[nn.Module]:
    """model.modules() (each module once, in no particular order) without building every
    module's qualified name."""
    found, seen, todo = [], set(), [model]
    while todo:
        module = todo.pop()
        if id(module) in seen:
            continue
        seen.add(id(module))
        found.append(module)
        todo.extend(child for child in module._modules.values() if child is not None)
    return found


_TRAIN, _EVAL, _SETATTR = nn.Module.train, nn.Module.eval, nn.Module.__setattr__


def _eval(model: nn.Module) -> None:
    """model.eval(): the flag set directly where a module keeps torch's own train() (what
    train() does, without Module.__setattr__'s lookups), its own train(False) called where
    it has one (a QAT ConvBn with frozen BN keeps its mode)."""
    if type(model).eval is not _EVAL:
        model.eval()
        return
    todo = [model]
    while todo:
        module = todo.pop()
        kind = type(module)
        if kind.train is not _TRAIN:
            module.train(False)                 # its own rule, for its children too
            continue
        if kind.__setattr__ is _SETATTR:
            object.__setattr__(module, "training", False)
        else:
            module.training = False
        todo.extend(child for child in reversed(module._modules.values()) if child is not None)


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
