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

import math
import os
import re
import shutil
import stat
import tempfile
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch
from torch import nn

from qcdoctor.atomic import existing_mode, put_in_place
from qcdoctor.background_free import remove_freeing_later
from qcdoctor.collector import collector_paused
from qcdoctor.collectors.qa_files import FIX_TRIALS, PROBE_MANIFEST, load_probe_manifest
from qcdoctor.collectors.qa_writers import LAYOUTS, ROW_KEYS, write_sensitivity
from qcdoctor.collectors.reading.own_error import OWN_ERROR_FILE
from qcdoctor.engine.api.interrupts import HeldInterrupts
from qcdoctor.errors import QcdoctorError
from qcdoctor.probe import fix_trials as fixes
from qcdoctor.probe.badcase_files import (
    BADCASE_FILE,
    SAMPLE_ERRORS_FILE,
    write_badcase,
    write_sample_errors,
)
from qcdoctor.probe.badcase_search import search_samples
from qcdoctor.probe.beside import Beside, spare_core
from qcdoctor.probe.call_inputs import call_args, moved_to, tensors_mapped
from qcdoctor.probe.calls import CALLS_FILE, write_calls
from qcdoctor.probe.capture import PATTERN_END, SAME, LayerRows, compare_layers
from qcdoctor.probe.fast_quant import FastQuantizers, unclippable, unclipped
from qcdoctor.probe.fix_apply import FixTrials
from qcdoctor.probe.model_match import (
    all_off_outputs,
    deep_copy,
    fake_quant_off_copy,
    identical,
    is_self_baseline,
    models_match,
    quantizes,
)
from qcdoctor.probe.own_error import own_error_summary, own_error_warnings
from qcdoctor.probe.quantizers import (
    QuantizerAdapter,
    TorchAoAdapter,
    freeze_observers,
)
from qcdoctor.probe.samples import check_samples, checked_badcase, checked_max_samples, is_many
from qcdoctor.probe.sensitivity import (
    METRICS,
    check_output_names,
    name_problem,
    output_names,
    undo_all,
)
from qcdoctor.probe.sensitivity import sensitivity as sensitivity_pass
from qcdoctor.probe.stats import flatten_output, nonfinite_counts, release_scratch
from qcdoctor.vocabulary import ANALYSIS_TYPE_STAGES

EXTRA_COLUMNS = ["base_mod_name", "match"]
# below this share of analysis outputs compared, the table is no layer-by-layer reading
MATCHED_ENOUGH = 0.5
MANIFEST_ITEMS = 500                   # names listed per list of probe_run.yaml
# the files the probe writes directly in its folder (the layer tables among them),
# besides the sensitivity tables (_SENSITIVITY_FILE): only files of these names are ever
# replaced or removed there; a new file of the probe gets its name here
PROBE_FILES = frozenset({"compare_per_layer_out.csv", "compare_per_layer_out.txt",
                         "fx_graph.txt", CALLS_FILE, OWN_ERROR_FILE, FIX_TRIALS,
                         PROBE_MANIFEST, BADCASE_FILE, SAMPLE_ERRORS_FILE})
_SENSITIVITY_FILE = re.compile(r"output_(?P<output>.+)_(?P<metric>" + "|".join(METRICS)
                               + r")_sensitive_ops\.(?:txt|pt)", re.DOTALL)
_TEMPORARY = ".qcdoctor-"              # a temporary file's or folder's name starts so


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
    # layer_own_error.csv's rows: {measured: N, not_measured: {reason: count}} (None: none)
    own_error: dict | None = None
    row_statistics: str = "torch"          # what computed the rows: c_kernel | torch
    # fix_trials.yaml's document (try_fixes); .apply(model) sets the measured fix on a copy
    fix_trials: FixTrials | None = None
    stages: tuple[str, str] = ("float", "calib")    # what the two models are (probe_run.yaml)
    # how the analysis model was quantized, for fix code in its own flow: torch_ao_fx (an
    # FX GraphModule), torch_ao_eager, or other (a quantizer adapter of its own)
    flow: str = "torch_ao_eager"
    # the baseline: "given", or "self" (the analysis model with every fake quant off)
    baseline_model: str = "given"
    # the analysis model with every fake quant off against the baseline (probe/model_match.py);
    # None where their outputs could not be compared
    models_match: dict | None = None
    lang: str | None = None                # its display's language (None: the locale's)
    # the bad-case search over many samples (probe_run.yaml's ``samples``; None: one input)
    samples: dict | None = None
    sample_search: object = field(default=None, repr=False)

    @property
    def mostly_unmatched(self) -> bool:
        return self.matched_share < MATCHED_ENOUGH

    def __repr__(self) -> str:
        """A line a console shows whole (the rows are in ``rows``, the files on disk)."""
        chosen = self.fix_trials.recommended() if self.fix_trials is not None else None
        fix = "none" if self.fix_trials is None else \
            "no fix reaches the target" if chosen is None else \
            f"{chosen['fix']} on {', '.join(chosen['layers'])}"
        return (f"ProbeResult(out_dir={str(self.out_dir)!r}, stages={self.stages[0]} vs "
                f"{self.stages[1]}, rows={len(self.rows)}, compared={self.compared}, "
                f"sensitivity={sorted(self.sensitivity)}, fix_trials={fix}, "
                f"warnings={len(self.warnings)})")

    def _repr_html_(self) -> str:
        """In a notebook: the summary and the per-layer chart (probe/display.py)."""
        from qcdoctor.probe.display import probe_html
        return probe_html(self, self.lang)

    def _repr_markdown_(self) -> str:
        from qcdoctor.probe.display import probe_markdown
        return probe_markdown(self, self.lang)


# rows, records and node values are many objects: no full collection over the user's
# models in between (common/collector.py)
@collector_paused()
def compare_models(baseline: nn.Module | str, analysis: nn.Module, inputs, out_dir, *,
                   sensitivity: bool = True, metric: str = "L1", names: list[str] | None = None,
                   analysis_model_type: str = "fake_quant", device: str | None = None,
                   adapter: QuantizerAdapter | None = None,
                   progress: Callable[[str, int, int], None] | None = None,
                   try_fixes: bool = False, fix_budget: int = fixes.DEFAULT_BUDGET,
                   fix_target=None, fix_metric: str = "Cosine",
                   stages: tuple[str, str] | None = None,
                   lang: str | None = None, max_samples: int | None = None,
                   badcase: int | None = None,
                   sample_tolerance: float | None = None, fix_samples: int = 8) -> ProbeResult:
    """Compare every layer output of ``analysis`` with ``baseline`` on ``inputs`` and write
    compare_per_layer_out.{csv,txt}, the sensitivity tables and probe_run.yaml to ``out_dir``.

    baseline: the reference model, or "self": the analysis model itself with every fake
    quant off (run on a deep copy), so the table reads the quantization error alone even
    where the two models differ beyond quantization (a trained QAT model against its float
    one). Either way the analysis model with every fake quant off is compared with the
    baseline first (``result.models_match``, probe_run.yaml's ``models_match``).

    inputs: a tensor, a tuple/list of positional arguments, or a dict of keyword
    arguments for one forward call; every value finite. Or many samples: a
    ``torch.utils.data.DataLoader`` (each batch one call, shuffle off) or
    ``qcdoctor.probe.Samples(iterable)`` (each item one call's inputs): both models run
    over every sample first (at most ``max_samples``), writing badcase.txt and
    sample_errors.csv, and the layers are read on the worst sample (by ``metric``, on the
    output whose worst is largest) or on sample ``badcase``. A sample shows the error
    where an output's Cosine is below ``sample_tolerance`` (default: the clean band's
    0.999). The fix trials then run on the ``fix_samples`` worst samples as one batch
    (where their tensors stack; else on the sample read) and the recommended fix is
    confirmed on every sample (fix_trials.yaml's ``samples``). names: names of the model
    outputs (default: their position or key), each usable in a file name. device: move
    both models and the inputs there (default: the models stay where they are, the
    inputs follow the analysis model). Both models run in eval mode with their
    observers frozen; modes and switches are restored after, an interrupt included.

    out_dir: a new or empty folder, or an earlier probe output, whose files (the ones its
    probe_run.yaml lists, each a name the probe writes) are replaced; anything else there
    is refused before any work.

    try_fixes: then measure candidate remedies on a deep copy of ``analysis`` and write
    fix_trials.yaml (``result.fix_trials``): at most ``fix_budget`` forward passes, the
    figures in ``fix_metric`` (Cosine, L1 or MSE), a fix good enough when it removes
    ``fix_target`` of the output error (a share, default 0.9; or a dict / "key=value"
    text of ``error_removed`` and ``cosine``; Cosine >= 0.999 also counts by default).

    stages: what the two models are, e.g. ("float", "qat") for a trained QAT model against
    its float one (default: the type's pair, float and calib for fake_quant). Triage
    reads the comparison under these names.

    lang: "zh" or "en", the language the result shows itself in (its summary and chart in
    a notebook); default: the locale's (docs/reports.md, Language).
    """
    if metric not in METRICS:
        raise QcdoctorError(f"unknown metric {metric!r}", key="metric",
                            fix=f"use one of {', '.join(METRICS)}")
    if analysis_model_type not in ANALYSIS_TYPE_STAGES:
        raise QcdoctorError(f"unknown analysis_model_type {analysis_model_type!r}",
                            key="analysis_model_type",
                            fix=f"use one of {', '.join(ANALYSIS_TYPE_STAGES)}")
    stages = checked_stages(stages, analysis_model_type)
    from qcdoctor.engine.api.report import checked_language
    checked_language(lang)
    if names is not None:
        if isinstance(names, (str, bytes)):
            raise QcdoctorError(f"names is one text ({names!r}), not a list of names",
                                key="names", fix=f"give a list, e.g. names=[{names!r}]")
        names = list(names)
        check_output_names(names, metric)
    checked_device(device)
    self_baseline = is_self_baseline(baseline)
    many = is_many(inputs)
    max_samples = checked_max_samples(max_samples)
    fix_samples = checked_max_samples(fix_samples, key="fix_samples")
    badcase = checked_badcase(badcase)
    if not many and (max_samples is not None or badcase is not None):
        raise QcdoctorError("max_samples and badcase choose among many samples, and the "
                            "inputs are one call's", key="max_samples" if badcase is None
                            else "badcase",
                            fix="give the samples as a DataLoader or qcdoctor.probe.Samples("
                                "...), or leave max_samples and badcase out")
    if many:
        check_samples(inputs)
    else:
        check_finite_inputs(inputs)
    goal = fixes.check_options(fix_budget, fix_target, fix_metric) if try_fixes else None
    adapter = adapter or TorchAoAdapter()
    if try_fixes:
        fixes.enabled_quantizers(analysis, adapter)     # before any work: something to try
    out = Path(out_dir)
    earlier = check_out_dir(out)
    if device is not None:
        if not self_baseline:
            baseline.to(device)
        analysis.to(device)
    if self_baseline:
        baseline = fake_quant_off_copy(analysis, adapter)
    target = device or _device_of(analysis)
    search = None
    args, kwargs = ((), {}) if many else call_args(moved_to(inputs, target))

    def run(model):
        return model(*args, **kwargs)

    every = [_modules(model) for model in (baseline, analysis)]
    saved = _Saved(every[0] + every[1])     # before any change: all of it can be undone
    fast = None
    try:
        freeze_observers(analysis, every[1])
        freeze_observers(baseline, every[0])
        _eval(baseline)
        _eval(analysis)
        # frozen torch.ao fake quants computed in place, same values (probe/fast_quant.py)
        fast = FastQuantizers(every[0] + every[1])
        if many:
            # the bad-case search: both models over every sample, the layers then read
            # on the worst one
            search = search_samples(baseline, analysis, inputs, partial(moved_to, device=target),
                                    metric=metric, names=names, max_samples=max_samples,
                                    badcase=badcase, keep=fix_samples if try_fixes else 1,
                                    tolerance=sample_tolerance, progress=progress,
                                    rounded=_rounded_call(analysis, adapter))
            args, kwargs = call_args(moved_to(search.kept[search.chosen], target))
        # R5.3: the two models without quantization, one forward (none where the baseline
        # is the analysis model with every fake quant off), before the layers are read;
        # on copies of the inputs, so the layer runs get the inputs as they were given
        # (the analysis model's beside the baseline's recorded run where a core is spare:
        # distinct modules; a quantized baseline's own after its run)
        copies = None if self_baseline else _on_copies(args, kwargs)
        off_job = None if self_baseline else Beside(
            partial(_fake_quant_off, analysis, adapter, copies, every[1]),
            concurrent=_may_run_beside(every, target))
        layers = compare_layers(baseline, analysis, args, kwargs, beside_baseline=off_job)
        off_pass = None if off_job is None else \
            _with_baseline_off(off_job.result(), baseline, adapter, copies, every[0])
        with torch.inference_mode():
            reference = [t for _, t in layers.baseline_outputs]
            all_off, matched, failed = (reference, identical(), None) if self_baseline \
                else _models_match(off_pass, reference)
            named = _output_names(reference, layers.analysis_outputs, names, metric,
                                  sensitivity, try_fixes)
            tables = {}
            if sensitivity:
                per_output = sensitivity_pass(analysis, adapter, run, reference, metric,
                                              progress, call=(args, kwargs))
                tables = dict(zip(named, per_output, strict=True))
    finally:
        try:
            if fast is not None:
                fast.close()
            saved.restore()
        finally:
            release_scratch()
    # the copy after the comparison (its memory released), before any file is written
    trial_copy = _trial_copy(analysis) if try_fixes else None
    result = _result(out, layers, tables)
    result.stages = stages
    result.lang = lang
    result.flow = _flow(analysis, adapter)
    result.baseline_model = "self" if self_baseline else "given"
    result.models_match = matched
    result.sample_search = search
    result.samples = None if search is None else search.summary()
    result.warnings += _match_warnings(matched, failed)
    _write_comparison(out, earlier, result, layers, tables, analysis_model_type, metric)
    # the copy's frozen fake quants computed in place as the comparison's were (the same
    # values, a fraction of torch's kernel)
    fast_copy = None if trial_copy is None else FastQuantizers(_modules(trial_copy))
    try:
        if trial_copy is not None:
            before = _before_postprocess(out / "compare_per_layer_out.csv", layers.rows,
                                         baseline, trial_copy, args, kwargs, result)
            # before post-processing: the tensors entering it; else the model's outputs,
            # whose pass with every fake quant off the comparison has run already
            measured = before if before is not None else \
                {"reference": reference, "names": named, "all_off": all_off}
            fix_run, on = run, None
            if search is not None and before is None:
                # many samples: the trials on the worst ones, as one batch
                on = _on_worst_samples(baseline, search, fix_samples, target)
                if on is not None:
                    fix_run, measured["reference"] = on["run"], on["reference"]
                    measured["all_off"] = None          # the comparison's pass was one sample's
                    if search.rounding:
                        measured["clean"] = _clean_outputs(trial_copy, adapter, fix_run)
            document = fixes.try_fixes(trial_copy, adapter, fix_run, measured.pop("reference"),
                                       measured.pop("names"), layers.rows,
                                       out / "compare_per_layer_out.csv", tables,
                                       budget=fix_budget, target=goal, metric=fix_metric,
                                       progress=progress,
                                       models_differ=matched is not None and not matched["match"],
                                       **measured)
            if search is not None and before is None:
                found = _fix_samples(baseline, trial_copy, inputs, search, on, document,
                                     adapter, max_samples, partial(moved_to, device=target),
                                     progress)
                document["samples"] = found
                if found["confirmed"] is not None or len(found["measured_on"]) > 1:
                    # not one input: the samples' figures say on how many it was measured
                    document["caveats"] = [c for c in document["caveats"] if c != "one_input"]
            result.fix_trials = FixTrials(document)
            result.files.append(out / FIX_TRIALS)
            with _writing(out):
                # listed before it is written: a run stopped in between leaves a folder
                # its rerun replaces
                _write_manifest(result, analysis_model_type, metric)
                fixes.write_fix_trials(out, document)
    finally:
        if fast_copy is not None:
            fast_copy.close()
        trial_copy = None                  # the copy goes before the result is returned
        release_scratch()
    result.files.append(out / PROBE_MANIFEST)
    for message in result.warnings:
        warnings.warn(message, ProbeWarning, stacklevel=2)
    return result


def _on_worst_samples(baseline: nn.Module, search, count: int, device) -> dict | None:
    """The fix trials' run and reference on the ``count`` worst samples that show the
    error (``SampleSearch.fix_samples``; the one read included) as one batch; None where
    their tensors do not stack."""
    from qcdoctor.probe.fix_samples import stacked
    chosen = search.fix_samples(count)
    batch = stacked([search.kept[i] for i in chosen]) if len(chosen) > 1 else None
    if batch is None:
        return None
    args, kwargs = call_args(moved_to(batch, device))
    with _frozen_eval(baseline), torch.inference_mode():
        reference = [t for _, t in flatten_output(baseline(*args, **kwargs))]
    return {"run": lambda model: model(*args, **kwargs), "reference": reference,
            "samples": sorted(chosen)}


def _fix_samples(baseline: nn.Module, trial: nn.Module, inputs, search, on: dict | None,
                 document: dict, adapter, max_samples, to_device, progress) -> dict:
    """fix_trials.yaml's ``samples``: which samples the trials measured, and the
    recommended fix confirmed on every sample (None, and why, where it cannot be)."""
    from qcdoctor.probe.fix_apply import recommended, set_fix
    from qcdoctor.probe.fix_samples import confirm
    measured_on = on["samples"] if on is not None else [search.chosen]
    found = {"count": search.count, "measured_on": measured_on, "confirmed": None,
             "not_confirmed": None}
    chosen = recommended(document)
    if chosen is None:
        found["not_confirmed"] = "no_fix"
        return found
    if not search.replayable:
        found["not_confirmed"] = "one_pass"
        return found
    set_fix(trial, chosen, adapter)             # the copy is let go after this
    with _frozen_eval(baseline):
        found["confirmed"] = confirm(baseline, trial, inputs, search, document["output"],
                                     document["metric"], max_samples, to_device, progress)
    return found


@contextmanager
def _frozen_eval(model: nn.Module):
    """``model`` in eval mode with its observers frozen; its modes and switches as they
    were after."""
    saved = _Saved(_modules(model))
    try:
        freeze_observers(model)
        _eval(model)
        yield model
    finally:
        saved.restore()


def _on_copies(args: tuple, kwargs: dict):
    """A run of a model on copies of the inputs: a forward that writes into its inputs
    leaves the layer runs the inputs they were given. The first run's copies are made now
    (a layer run beside it may write into the inputs), each later run's when it starts."""
    def copied():
        return tensors_mapped(args, torch.Tensor.clone), tensors_mapped(kwargs, torch.Tensor.clone)
    first = [copied()]

    def run(model):
        positional, keywords = first.pop() if first else copied()
        return model(*positional, **keywords)
    return run


def _may_run_beside(every: list[list[nn.Module]], device) -> bool:
    """Whether the fake-quant-off pass may run on a thread of its own beside the
    baseline's run: on CPU, with a core to spare, the two models sharing no module (the
    pass switches the analysis model's quantizers off)."""
    if torch.device(device).type != "cpu" or not spare_core():
        return False
    baseline_ids = {id(module) for module in every[0]}
    return not any(id(module) in baseline_ids for module in every[1])


def _fake_quant_off(analysis: nn.Module, adapter: QuantizerAdapter, run,
                    modules: list[nn.Module]) -> tuple[list | None, str | None]:
    """(the analysis model's outputs with every fake quant off, why there are none): a
    model that cannot run so is said, not an end."""
    try:
        return all_off_outputs(analysis, adapter, run, modules), None
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
        return None, _first_line(exc)


def _with_baseline_off(analysis_off: tuple, baseline: nn.Module, adapter: QuantizerAdapter,
                       run, baseline_modules: list) -> tuple:
    """(the analysis model's outputs with every fake quant off, the quantized baseline's
    likewise (None: the baseline does not quantize), whether it quantizes, why there are
    none). A quantized baseline (two calibrations, a model against its copy) is compared
    without its quantization too: what R5.3 asks is whether the models differ beyond it."""
    off, failed = analysis_off
    if failed is not None:
        return None, None, False, failed
    try:
        quantized = quantizes(baseline, adapter, baseline_modules)
        against = all_off_outputs(baseline, adapter, run, baseline_modules) if quantized \
            else None
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
        return None, None, False, _first_line(exc)
    return off, against, quantized, None


def _models_match(off_pass: tuple, reference: list) -> tuple[list | None, dict | None,
                                                            str | None]:
    """(the analysis model's outputs with every fake quant off, their models_match against
    the baseline's (``reference``, or its own with fake quant off where it quantizes),
    why there is none); where they match, a quantized baseline makes the comparison a
    control (``baseline_quantized`` and ``match``)."""
    off, against, quantized, failed = off_pass
    if failed is not None:
        return None, None, failed
    matched = models_match(reference if against is None else against, off)
    if matched is not None:
        matched["baseline_quantized"] = quantized
    return off, matched, None if matched is not None else "the outputs differ in shape"


def _match_warnings(matched: dict | None, failed: str | None) -> list[str]:
    if failed is not None:
        return [f"the analysis model with every fake quant off could not be compared with the "
                f"baseline ({failed}): whether the two models differ beyond quantization is "
                f"unknown"]
    if matched is None or matched["match"]:
        return []
    return [f"the analysis model with every fake quant off is not the baseline (output Cosine "
            f"{matched['fake_quant_off_cosine']:.6g}, largest difference "
            f"{matched['fake_quant_off_max_abs']}): the two models differ beyond quantization "
            f"(weights or BN statistics), so every row of the table carries that difference; "
            f"the quantization error alone is read by comparing the analysis model with itself, "
            f"fake quant off against on: qcdoctor probe --baseline self, or "
            f"compare_models(\"self\", analysis, inputs, out_dir)"]


def _before_postprocess(table: Path, rows: list[dict], baseline: nn.Module, trial: nn.Module,
                        args: tuple, kwargs: dict, result: ProbeResult) -> dict | None:
    """The fix trials' measured tensors (try_fixes' outputs_of, reference, names and
    before_postprocess) where the analysis model holds post-processing (R5.4): the
    tensors entering it. None where it holds none, or they cannot be captured (a
    warning)."""
    from qcdoctor.probe.postprocess_entries import EntryTaps, entry_rows
    entries, region = entry_rows(table)
    if not entries:
        return None
    base_name = {r.get("mod_name"): r.get("base_mod_name") or r.get("mod_name") for r in rows}
    try:
        taps = EntryTaps(trial, entries)
        base_taps = EntryTaps(baseline, [base_name.get(n) or n for n in entries])
        with _frozen_eval(baseline), torch.inference_mode():
            reference = [t.clone() for t in base_taps.run(baseline, args, kwargs)]
    except Exception as exc:  # noqa: BLE001 - a model the taps cannot follow: said
        result.warnings.append(f"the model contains post-processing, but the tensors entering "
                               f"it ({', '.join(entries[:5])}) could not be captured "
                               f"({_first_line(exc)}): the fix trials are measured on the "
                               f"model's final outputs")
        return None
    return {"outputs_of": lambda model: taps.run(model, args, kwargs),
            "reference": reference, "names": entries,
            "before_postprocess": {"entries": entries, "region_rows": region}}


def checked_device(device, key: str = "device") -> None:
    """One clear error for a device torch cannot run on here (an unknown name, CUDA in a
    CPU-only build, a GPU index past the last one), before anything moves."""
    if device is None:
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise QcdoctorError(f"{device!r} is not a torch device ({_first_line(exc)})", key=key,
                            fix="give cpu, cuda or cuda:N (the GPU's index)") from None
    if parsed.type == "meta":
        raise QcdoctorError("the meta device holds no values to compare", key=key,
                            fix="give cpu, cuda or cuda:N (the GPU's index)")
    try:
        torch.empty(1, device=parsed)
    except Exception as exc:  # noqa: BLE001 - torch says why in many kinds of exceptions
        raise QcdoctorError(f"device {device!r} cannot be used here ({_first_line(exc)})",
                            key=key,
                            fix="run on cpu (leave the device out, or give cpu), or install "
                                "the torch build for that device") from None


def check_finite_inputs(inputs, file: str | None = None) -> None:
    """One clear error for inputs holding NaN or inf: every layer's metrics would be NaN."""
    found = nonfinite_counts(inputs)
    if not found:
        return
    name, nan, inf, total = found[0]
    what = " and ".join(part for part in (f"{nan} NaN" if nan else "",
                                          f"{inf} infinite" if inf else "") if part)
    more = f" (and {len(found) - 1} more tensor(s) like it)" if len(found) > 1 else ""
    which = "the input tensor" + ("" if name == "inputs" else f" {name}")
    raise QcdoctorError(f"{which} holds {what} value(s) of {total}{more}: "
                        f"every layer's metrics would be NaN", file=file,
                        key=None if file else "inputs",
                        fix="give finite inputs: replace those values (torch.nan_to_num) or "
                            "take another sample")


def _output_names(reference: list, outputs: list, names: list[str] | None, metric: str,
                  sensitivity: bool, try_fixes: bool) -> list[str]:
    """The model outputs' names; one clear error where the two models' outputs cannot be
    measured as asked, or a name cannot name its tables."""
    if sensitivity or try_fixes:
        _same_outputs(reference, outputs, "sensitivity" if sensitivity else "try_fixes")
    if names is not None and len(names) != len(outputs):
        raise QcdoctorError(f"{len(names)} output name(s) given, the analysis model returns "
                            f"{len(outputs)} tensor(s)", key="names",
                            fix="give one name per output tensor, or none")
    named = output_names(outputs, names)
    if names is None and sensitivity:
        check_output_names(named, metric, derived=True)
    return named


def _same_outputs(reference: list, outputs: list, option: str) -> None:
    fix = "compare models with the same outputs, or run without " + (
        "sensitivity (--no-sensitivity)" if option == "sensitivity" else "--try-fixes")
    if len(reference) != len(outputs):
        raise QcdoctorError(f"the two models return different numbers of outputs: "
                            f"{len(reference)} from the baseline, {len(outputs)} from the "
                            f"analysis model, so their errors cannot be measured", key=option,
                            fix=fix)
    for index, (base, (_, analysis)) in enumerate(zip(reference, outputs, strict=True)):
        if base.shape != analysis.shape:
            raise QcdoctorError(f"the two models' outputs differ in number or shape: output "
                                f"{index} is {tuple(base.shape)} from the baseline, "
                                f"{tuple(analysis.shape)} from the analysis model, so their "
                                f"errors cannot be measured", key=option, fix=fix)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else type(exc).__name__


class _Saved:
    """The caller's modules as they were: each one's training flag, each fake quant's
    observer and fake-quant switches. Recorded whole before the probe changes any of it,
    so an interrupt anywhere (freezing included) is undone."""

    def __init__(self, modules: list[nn.Module]):
        from torch.ao.quantization import FakeQuantizeBase
        self.modes = [(m, m.training) for m in modules]
        quantizers = [m for m in modules if isinstance(m, FakeQuantizeBase)]
        self.switches = list(zip(quantizers, _switches(quantizers, "observer_enabled"),
                                 _switches(quantizers, "fake_quant_enabled"), strict=True))

    def restore(self) -> None:
        undo_all((lambda: _restore_switches(self.switches),
                  lambda: _restore_modes(self.modes)))


def _switches(modules: list[nn.Module], name: str) -> list[bool | None]:
    """Each module's switch ``name``: its flag tensor's first value (None: no flag). A
    model holds hundreds: the buffer straight from ``_buffers`` where it is one, and a
    one-element flag read by ``item()``."""
    found = []
    for module in modules:
        flag = module._buffers.get(name)
        if flag is None:
            flag = getattr(module, name, None)
        if not isinstance(flag, torch.Tensor) or not flag.numel():
            found.append(None)
        else:
            found.append(bool(flag.item() if flag.numel() == 1 else flag.reshape(-1)[0]))
    return found


def _restore_switches(switches: list) -> None:
    if not switches:
        return
    quantizers = [module for module, _, _ in switches]
    now = zip(_switches(quantizers, "observer_enabled"),
              _switches(quantizers, "fake_quant_enabled"), strict=True)
    for (module, observing, quantizing), (observing_now, quantizing_now) in zip(
            switches, now, strict=True):
        if observing is not None and observing_now != observing:
            module.enable_observer(observing)
        if quantizing is not None and quantizing_now != quantizing:
            module.enable_fake_quant(quantizing)


def _restore_modes(modes: list) -> None:
    for module, training in modes:
        # a plain flag (train() would walk the children again, Module.__setattr__ look
        # for parameters first)
        object.__setattr__(module, "training", training)


def _result(out: Path, layers: LayerRows, tables: dict) -> ProbeResult:
    compared = sum(1 for r in layers.rows if r.get("cosine") is not None
                   or r.get("atol") is not None)
    broken = [r["mod_name"] for r in layers.rows if _holds_nonfinite(r)]
    outputs = len(layers.rows) + len(layers.analysis_only)
    matched = compared + len(broken)        # a NaN row has its counterpart, no metrics
    share = matched / outputs if outputs else 1.0
    result = ProbeResult(out, layers.rows, layers.baseline_only, layers.analysis_only, tables,
                         aligned=layers.aligned, unaligned=layers.unaligned,
                         fused_intermediates=layers.fused_intermediates,
                         absorbed=layers.absorbed, compared=compared, matched_share=share)
    result.changed_in_place = list(layers.changed)
    result.row_statistics = layers.row_statistics
    if layers.own_errors:
        result.own_error = own_error_summary(layers.own_errors)
        result.warnings += own_error_warnings(layers.own_errors, layers.own_error_partial)
    if layers.changed:
        result.warnings.append(
            f"{len(layers.changed)} layer output(s) were changed in place by the model before "
            f"the probe read them, by an op it did not see coming "
            f"({', '.join(layers.changed[:5])}): their rows may be wrong")
    if broken:
        result.warnings.append(
            f"{len(broken)} layer output(s) hold NaN or infinite values on finite inputs "
            f"({', '.join(broken[:5])}, in execution order): their metric cells are left "
            f"empty; the first of them is where the model's numbers break")
    if outputs and share < MATCHED_ENOUGH:
        result.warnings.append(
            f"only {matched} of {outputs} analysis layer outputs have a baseline output "
            f"computing the same thing ({len(layers.analysis_only)} only in the analysis "
            f"model, {len(layers.unaligned) + len(layers.fused_intermediates)} computing "
            f"something else, {len(layers.baseline_only)} only in the baseline): the two "
            f"models differ in structure or layer names, so the table is no layer-by-layer "
            f"comparison; give a baseline with the analysis model's layer names (e.g. the "
            f"float model it was prepared from)")
    return result


_SIDES = ("base_model_min", "base_model_max", "analy_model_min", "analy_model_max")


def _holds_nonfinite(row: dict) -> bool:
    """A row compared with its counterpart whose sides hold NaN or inf (capture leaves
    its metrics empty)."""
    if row.get("match") not in (SAME, PATTERN_END) or row.get("shape") == "mismatch shape":
        return False
    return any(isinstance(row.get(k), float) and not math.isfinite(row[k]) for k in _SIDES)


def _write_compare(folder: Path, rows: list[dict]) -> list[Path]:
    """compare_per_layer_out.{csv,txt}: the 23-column layout plus EXTRA_COLUMNS, in the
    profiler's formats (as qa_writers writes them): a psql box table with an index column
    and a ', '-separated CSV without one, floats with 7 decimals, commas inside a CSV cell
    as ``*``; a missing value is an empty cell in both (the readers' NA values are None,
    nan and empty: no "None" text in the tables).

    A name keeps every character but control characters (line breaks and tabs among
    them), line and paragraph separators and lone surrogates, each written as its Python
    escape (a line break as ``\\n``): written as they are, they would end a row early
    or could not be encoded. A '|' in a name stays: the psql table's cells are padded to
    their column's width, so the reader cuts a row where the header's bars are. The
    readers strip a name's leading and trailing spaces."""
    import re
    header = LAYOUTS["23"] + EXTRA_COLUMNS
    keys = [ROW_KEYS.get(c, c) for c in header]
    # most cells are finite floats: formatted here, the rest by _cell (NaN fails the
    # range test)
    cells = [[f"{v:.7f}" if type(v) is float and -1e15 < v < 1e15 else _cell(v)
              for v in map(row.get, keys)] for row in rows]
    unwritable = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
    named = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}

    def escape(found: re.Match) -> str:
        char = found.group()
        return named.get(char) or (f"\\x{ord(char):02x}" if ord(char) < 0x100
                                   else f"\\u{ord(char):04x}")
    text_at = [i for i, name in enumerate(header) if name not in _NUMERIC]
    for row in cells:
        if unwritable.search("".join(row)) is None:     # most rows: one search
            continue
        for i in text_at:
            if unwritable.search(row[i]):
                row[i] = unwritable.sub(escape, row[i])
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / "compare_per_layer_out.csv"
    lines = [", ".join(header)]
    separators = len(header) - 1
    for row in cells:
        line = ", ".join(row)
        if line.count(",") != separators:       # a cell holds a comma: written as '*'
            line = ", ".join(c.replace(", ", "* ").replace(",", "*") for c in row)
        lines.append(line)
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
    """qa_writers.psql's box table (numbers right-aligned, text left), column-wise.

    Every cell is padded to its column's width in characters, so each line's bars stand
    where the header's do, a '|' inside a name or not: the reader cuts a row with more
    bars than the header there. Cells hold no line breaks (``_write_compare`` escapes
    them)."""
    full = [""] + header
    body = [[str(i)] + r for i, r in enumerate(cells)]
    columns = zip(*body, strict=True) if body else ((),) * len(full)
    widths = [max((len(h), *map(len, column))) for h, column in zip(full, columns, strict=True)]
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


def check_out_dir(out: Path) -> list[str]:
    """The names of the files an earlier probe run left in ``out`` (replaced or removed by
    this run). Before anything is written, refuses a folder that holds anything else, and
    a probe_run.yaml listing anything but a file the probe writes, by its name, directly
    in the folder: a manifest may come with someone else's case, and nothing outside
    those names is ever replaced or removed."""
    if not os.path.lexists(out):
        return []
    if not out.is_dir():
        raise QcdoctorError("is not a folder", file=str(out), fix="give a new or empty folder")
    try:
        present = sorted(os.listdir(out))
    except OSError as exc:
        raise QcdoctorError(f"cannot read the output folder ({exc.strerror or exc})",
                            file=str(out), fix="give a folder you may read and write") from None
    if not present:
        return []
    manifest = out / PROBE_MANIFEST
    listed = _listed_files(manifest)
    if listed is not None:
        _refuse_foreign_entries(manifest, listed)
    ours = set() if listed is None else {PROBE_MANIFEST, *listed}
    foreign = [name for name in present if name not in ours and not _leftover(name)]
    if foreign:
        raise QcdoctorError(f"the output folder holds files qcdoctor probe did not write "
                            f"({', '.join(foreign[:3])})", file=str(out),
                            fix="give a new or empty folder (an earlier probe output is replaced)")
    if listed is None:          # nothing but temporaries (another run's, or a killed one's)
        return []
    return [name for name in listed if name != PROBE_MANIFEST and os.path.lexists(out / name)]


def _leftover(name: str) -> bool:
    """A temporary a killed run left (qcdoctor's own name for one, never a name a user
    gives): neither refused nor touched, so the rerun goes ahead."""
    return name.endswith(".tmp") and (name.startswith(_TEMPORARY) or any(
        name.startswith(f".{file}.") for file in PROBE_FILES))


_check_out_dir = check_out_dir         # its earlier name


def _listed_files(manifest: Path) -> list | None:
    """probe_run.yaml's ``files``; None where there is no readable manifest (a link or a
    folder at its name is none of the probe's)."""
    try:
        if not stat.S_ISREG(os.lstat(manifest).st_mode):
            return None
        written = _read_manifest(manifest)
    except (OSError, UnicodeDecodeError, QcdoctorError):    # unreadable: nothing is ours
        return None
    listed = written.get("files") if isinstance(written, dict) else None
    return listed if isinstance(listed, list) else None


def _refuse_foreign_entries(manifest: Path, listed: list) -> None:
    bad = [(entry, why) for entry in listed
           if (why := _entry_problem(manifest.parent, entry)) is not None]
    if not bad:
        return
    entry, why = bad[0]
    more = f" ({len(bad) - 1} more entries like it)" if len(bad) > 1 else ""
    # what is wrong first: a long entry is cut in its middle, never the reason
    raise QcdoctorError(f"{why}{more}, listed: {entry!r}", file=str(manifest), key="files",
                        fix="qcdoctor probe replaces or removes only the files it writes, by "
                            "their names, directly in its folder: remove the entry from "
                            "probe_run.yaml (or probe_run.yaml itself, if the folder is no "
                            "probe output of yours), or give a new or empty output folder")


def _entry_problem(folder: Path, entry) -> str | None:
    """Why a ``files`` entry of probe_run.yaml is none of the probe's files, or None."""
    if not isinstance(entry, str):
        return f"a {type(entry).__name__}, not a file name"
    if os.path.isabs(entry):
        return "an absolute path"
    if "/" in entry or "\\" in entry:
        parts = entry.replace("\\", "/").split("/")
        return "a path out of the folder" if ".." in parts else "a path into a subfolder"
    if not is_probe_file(entry):
        return "a name qcdoctor probe never writes"
    try:
        mode = os.lstat(folder / entry).st_mode
    except FileNotFoundError:
        return None                     # gone: nothing to replace
    except OSError as exc:
        return f"which cannot be read ({exc.strerror or exc})"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISDIR(mode):
        return "a folder"
    return None if stat.S_ISREG(mode) else "no regular file"


def is_probe_file(name: str) -> bool:
    """Whether qcdoctor probe writes a file of this name (in its output folder)."""
    if name in PROBE_FILES:
        return True
    match = _SENSITIVITY_FILE.fullmatch(name)
    return match is not None and name_problem(match["output"], match["metric"]) is None


@contextmanager
def _writing(out: Path):
    """A file of the probe that cannot be written is one clear error naming the folder."""
    try:
        yield
    except OSError as exc:
        raise QcdoctorError(f"cannot write the probe's files ({exc.strerror or exc})",
                            file=str(out), fix="free some space there, change its permissions, "
                                               "or give another output folder") from None


def _write_comparison(out: Path, earlier: list[str], result: ProbeResult, layers: LayerRows,
                      tables: dict, kind: str, metric: str) -> None:
    """compare_per_layer_out, fx_graph.txt, the sensitivity tables and probe_run.yaml in
    ``out``: each written whole into a temporary folder there, then put in place (a link
    at its name replaced, never followed); the earlier run's other files removed. A
    failure before that leaves ``out`` as it was."""
    created = not os.path.lexists(out)
    with _writing(out):
        out.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{_TEMPORARY}probe-", suffix=".tmp", dir=out))
        try:
            staged = _stage(staging, layers, tables, metric, result.sample_search)
            with _folder_lock(out):
                # another probe into this folder may have put its files in place since this
                # one looked: read what is there again, under the lock
                earlier = check_out_dir(out)
                _publish(out, staging, staged, earlier, result, kind, metric)
        finally:
            _remove_staging(staging)
            if created and not result.files:    # nothing put in place: no folder left
                _remove_empty(out)


def _remove_staging(staging: Path) -> None:
    """The staging folder removed: empty once its files are in place (then freed off this
    thread, as the files they replaced are), else with what a failure left in it."""
    try:
        remove_freeing_later(staging, folder=True)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)


@contextmanager
def _folder_lock(out: Path):
    """The output folder locked while a probe puts its files in place: a second probe into
    it at once waits, then replaces the first's output whole, as a rerun does; their files
    never mix. The lock is the folder's own (flock on its descriptor: no lock file, and
    released by the system however the process ends)."""
    try:
        import fcntl
    except ImportError:                 # no flock (Windows): one probe a folder at a time
        yield
        return
    fd = os.open(out, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)                    # releases the lock


def _stage(staging: Path, layers: LayerRows, tables: dict, metric: str,
           sample_search=None) -> list[str]:
    """The comparison's files written into ``staging``; their names, in order."""
    paths = _write_compare(staging, layers.rows)
    if layers.graph is not None:
        from qcdoctor.probe.fxgraph import write_fx_graph
        paths.append(write_fx_graph(staging / "fx_graph.txt", layers.graph,
                                    layers.graph_names))
    if layers.calls:
        paths.append(write_calls(staging, layers.calls))
    if layers.own_errors:
        from qcdoctor.probe.own_error import write_own_error
        paths.append(write_own_error(staging, layers.own_errors))
    for name, rows in tables.items():
        for fmt in ("txt", "pt"):
            paths.append(write_sensitivity(staging, rows, output=name, metric=metric,
                                           flops=False, fmt=fmt))
    if sample_search is not None:
        paths += [write_badcase(staging, sample_search), write_sample_errors(staging, sample_search)]
    return [Path(path).name for path in paths]


def _publish(out: Path, staging: Path, staged: list[str], earlier: list[str],
             result: ProbeResult, kind: str, metric: str) -> None:
    """The staged files put in place of the earlier run's, with their manifest; a Ctrl-C
    waits until the folder is whole."""
    with HeldInterrupts() as hold:
        hold()
        # both runs' files listed first: a run stopped half-way (killed) still leaves a
        # folder its rerun replaces (the earlier manifest does already when it lists
        # every file this run writes)
        if not set(staged) <= set(earlier):
            _write_manifest(result, kind, metric, files=sorted({*earlier, *staged}))
        for name in staged:
            new = staging / name
            # the earlier file's permissions kept, as every atomic replacement keeps them
            mode = existing_mode(out / name, default=os.stat(new).st_mode & 0o7777)
            put_in_place(new, out / name, mode, durable=False)
        for name in earlier:
            if name not in staged:
                _remove_file(out / name)
        result.files.extend(out / name for name in staged)
        _write_manifest(result, kind, metric)


def _remove_file(path: Path) -> None:
    """``path`` removed if it is a regular file (never a link's target, never a folder)."""
    try:
        if stat.S_ISREG(os.lstat(path).st_mode):
            path.unlink()
    except FileNotFoundError:
        pass


def _remove_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:                     # not empty, or gone: left as it is
        pass


# manifest path -> (the text this process wrote there, its file list): a rerun into the
# same folder finds the same text and skips parsing it again
_WRITTEN: dict[str, tuple[str, list]] = {}


def _read_manifest(manifest: Path):
    known = _WRITTEN.get(str(manifest))
    if known is not None and manifest.read_text(encoding="utf-8") == known[0]:
        return {"files": list(known[1])}
    return load_probe_manifest(manifest)


# the pairs each analysis type may name (fake_quant: the fake-quantized model is the
# calibrated one or the trained QAT one)
_TYPE_STAGE_PAIRS = {"fake_quant": {("float", "calib"), ("float", "qat"), ("calib", "qat")}}


def checked_stages(stages, kind: str, key: str = "stages") -> tuple[str, str]:
    """The (baseline, analysis) stage names of a probe of type ``kind``: ``stages`` when
    the type allows them, the type's own pair when None."""
    default = ANALYSIS_TYPE_STAGES[kind]
    if stages is None:
        return default
    allowed = sorted(_TYPE_STAGE_PAIRS.get(kind, {default}))
    pair = tuple(stages) if isinstance(stages, (tuple, list)) else None
    if pair is None or len(pair) != 2 or pair not in set(allowed):
        raise QcdoctorError(
            f"stages {stages!r} do not name a {kind} comparison", key=key,
            fix="give (baseline, analysis) as one of: " +
                "; ".join(f"{a},{b}" for a, b in allowed))
    return pair


def _write_manifest(result: ProbeResult, kind: str, metric: str,
                    files: list[str] | None = None) -> Path:
    """probe_run.yaml; ``files``: the names it lists (default: those of ``result.files``)."""
    import yaml

    from qcdoctor.atomic import write_text_atomic
    baseline, analysis = result.stages
    path = result.out_dir / PROBE_MANIFEST
    names = {p.name for p in result.files} if files is None else set(files)
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
                # R5.3: the baseline model ("self": the analysis model, fake quant off) and
                # the analysis model with every fake quant off against it
                "baseline_model": result.baseline_model, "models_match": result.models_match,
                "metric": metric, "sensitivity": bool(result.sensitivity),
                "layers": len(result.rows), "compared": result.compared,
                # rows compared / every analysis output; below 0.5 the table is no
                # layer-by-layer comparison (the warnings say why)
                "matched_share": round(result.matched_share, 4),
                "mostly_unmatched": result.mostly_unmatched,
                # the data flow's file: layer_calls.csv (every probe), else fx_graph.txt
                "graph": next((n for n in (CALLS_FILE, "fx_graph.txt") if n in names), None),
                # which computed the row numbers: the C kernel (CPU float32) or torch
                "row_statistics": result.row_statistics,
                # the analysis model's quantization flow (fix code is written in it)
                "flow": result.flow,
                # layer_own_error.csv's rows measured, and those not measured by reason
                "own_error": result.own_error,
                # the bad-case search over many samples (None: one input)
                "samples": result.samples,
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


def _flow(analysis: nn.Module, adapter: QuantizerAdapter) -> str:
    """torch_ao_fx, torch_ao_eager, or other (an adapter of the user's own)."""
    if type(adapter) is not TorchAoAdapter:
        return "other"
    return "torch_ao_fx" if isinstance(analysis, torch.fx.GraphModule) else "torch_ao_eager"


def _rounded_call(analysis: nn.Module, adapter):
    """The analysis model's call with every value its quantizers see rounded to their
    steps and none clipped (the clean model's error of the bad-case search); None where
    a quantizer switched on cannot round so (one the probe does not mirror: it would
    keep its clamp, and a clamp there would read as the clean model's): the tolerance
    alone decides then."""
    try:
        enabled = [q.module for q in adapter.quantizers(analysis) if adapter.is_enabled(q)]
    except Exception:  # noqa: BLE001 - another toolkit's adapter: not measured
        return None
    quantizers = unclippable(enabled)
    if not enabled or {id(m) for m in quantizers} != {id(m) for m in enabled}:
        return None

    def call(*args, **kwargs):
        with unclipped(quantizers):
            return analysis(*args, **kwargs)
    return call


def _clean_outputs(model: nn.Module, adapter, run) -> list[torch.Tensor] | None:
    """The model's outputs (one ``run``) with every value rounded to its quantizers' steps
    and none clipped: the clean model of the bad-case search, for the fix trials' floor;
    None where a quantizer cannot round so."""
    call = _rounded_call(model, adapter)
    if call is None:
        return None
    with torch.inference_mode():
        return [t for _, t in flatten_output(run(call))]


def _trial_copy(analysis: nn.Module) -> nn.Module:
    """A deep copy of the analysis model for the fix trials, in eval mode with its
    observers frozen (the user's model keeps its own modes and switches). Its parameters
    are the model's own: the trials swap quantizers and turn switches, never write a
    parameter (and the copy costs a fraction of the time and memory)."""
    trial = deep_copy(analysis, "for the fix trials", "try_fixes", "run without --try-fixes",
                      share_parameters=True)
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
