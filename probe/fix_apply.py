"""A measured fix set on a model again, exactly as the trial measured it: fix_trials.yaml's
``settings`` (a trial's, or the greedy set's) on a deep copy of the model, each quantizer
named there replaced by torch.ao's own ``FakeQuantize`` holding the measured qparams (its
observer off: the same ``fake_quantize_per_*_affine`` call as the trial's quantizer, so the
same output), or switched off. torch's own classes: the copy saves and loads with torch
alone.

``recommended(document)`` is the fix the report proposes (FX030, FX031): the best trial of
one layer that reaches the target, else the greedy set where it reaches it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from torch import nn

from qcdoctor.errors import QcdoctorError
from qcdoctor.fact_types import DEPLOYABLE_FIXES
from qcdoctor.probe.quantizers import QuantizerAdapter, TorchAoAdapter


class FixTrials(dict):
    """fix_trials.yaml's document (a dict, as written), which can also set a measured fix
    on a model: ``result.fix_trials.apply(model)``."""

    def recommended(self) -> dict | None:
        return recommended(self)

    def apply(self, model: nn.Module, trial: int | str | None = None,
              adapter: QuantizerAdapter | None = None) -> nn.Module:
        """A deep copy of ``model`` (the analysis model the probe measured, or one of the
        same structure) with the fix set: ``trial`` an index into ``trials``, "greedy", or
        None for the recommended one."""
        return apply_fix(model, self, trial=trial, adapter=adapter)


def recommended(document: dict) -> dict | None:
    """The trial the report proposes: one layer's fix reaching the target (the best
    first), else the greedy set when it reaches it; None when no fix does."""
    from qcdoctor.collectors.fix_trials import reaches
    target, metric, before = document["target"], document["metric"], document.get("before")
    for trial in document.get("trials") or []:
        if trial["fix"] in DEPLOYABLE_FIXES and len(trial["layers"]) == 1 and \
                reaches(trial, target, metric, before):
            return trial
    greedy = document.get("greedy")
    if greedy and greedy.get("reached") and greedy["layers"] and greedy["fix"] in DEPLOYABLE_FIXES:
        return greedy
    return None


def apply_fix(model: nn.Module, fix_trials, *, trial: int | str | None = None,
              adapter: QuantizerAdapter | None = None) -> nn.Module:
    """``model`` deep-copied with a measured fix set (see ``FixTrials.apply``);
    ``fix_trials``: the document, a fix_trials.yaml, or the probe's folder holding one.
    The model itself is never changed."""
    document = _document(fix_trials)
    chosen = _chosen(document, trial)
    fixed = copy.deepcopy(model)
    set_fix(fixed, chosen, adapter)
    return fixed


def set_fix(fixed: nn.Module, chosen: dict, adapter: QuantizerAdapter | None = None) -> None:
    """A trial's (or set's) ``settings`` set in ``fixed`` itself (a copy of the caller's)."""
    settings = chosen.get("settings") or []
    if not settings:
        raise QcdoctorError(
            "this fix_trials.yaml records no settings for the fix (written by an older "
            "qcdoctor)", key="fix_trials", fix="run qcdoctor probe --try-fixes again")
    adapter = adapter or TorchAoAdapter()
    found = {q.name: q for q in adapter.quantizers(fixed)}
    missing = [s["quantizer"] for s in settings if s["quantizer"] not in found]
    if missing:
        raise QcdoctorError(
            f"the model has no quantizer named {', '.join(missing[:3])}"
            + (f" and {len(missing) - 3} more" if len(missing) > 3 else ""),
            key="model", fix="apply the fix to the analysis model the probe measured (the same "
                             "modules, prepared the same way)")
    for setting in settings:
        quantizer = found[setting["quantizer"]]
        if setting["setting"] == "off":
            adapter.set_enabled(quantizer, False)
        else:
            adapter.swap(fixed, setting["quantizer"], fixed_fake_quantize(setting))


def fixed_fake_quantize(setting: dict) -> nn.Module:
    """torch.ao's FakeQuantize holding a setting's qparams, observer off."""
    from torch.ao.quantization import FakeQuantize, MinMaxObserver, PerChannelMinMaxObserver
    qmin, qmax, axis = setting["quant_min"], setting["quant_max"], setting.get("ch_axis")
    per_channel = axis is not None
    signed = qmin < 0
    dtype = (torch.qint8 if signed else torch.quint8) if qmax - qmin < 256 else torch.qint32
    options = {"ch_axis": axis, "qscheme": torch.per_channel_affine} if per_channel else \
        {"qscheme": torch.per_tensor_affine}
    quantizer = FakeQuantize(observer=PerChannelMinMaxObserver if per_channel else MinMaxObserver,
                             quant_min=qmin, quant_max=qmax, dtype=dtype, **options)
    quantizer.disable_observer()
    quantizer.scale = torch.tensor(setting["scale"], dtype=torch.float32)
    quantizer.zero_point = torch.tensor(setting["zero_point"], dtype=torch.int32)
    return quantizer


def _document(fix_trials) -> dict:
    """The checked document: given as one, or read from a fix_trials.yaml (or the folder
    holding it) as triage reads it."""
    from qcdoctor.collectors.fix_trials import read_fix_trials, read_fix_trials_file
    if isinstance(fix_trials, dict):
        where, read = "fix_trials", lambda: read_fix_trials(fix_trials)
    else:
        path = Path(fix_trials)
        path = path / "fix_trials.yaml" if path.is_dir() else path
        where, read = str(path), lambda: read_fix_trials_file(path, str(path))
    try:
        return read()
    except OSError as exc:
        raise QcdoctorError(f"cannot read {where} ({exc.strerror or exc})", file=where,
                            fix="give the fix_trials.yaml qcdoctor probe --try-fixes wrote, "
                                "or its folder") from None
    except ValueError as exc:
        raise QcdoctorError(f"the fix trials cannot be read: {exc}", file=where,
                            fix="run qcdoctor probe --try-fixes again") from None


def _chosen(document: dict, trial) -> dict:
    if trial is None:
        chosen = recommended(document)
        if chosen is None:
            raise QcdoctorError("no measured fix reaches the target", key="trial",
                                fix="choose one yourself: trial=<index into trials> or "
                                    "trial=\"greedy\"")
        return chosen
    if trial == "greedy":
        if not document.get("greedy"):
            raise QcdoctorError("the trials have no greedy set", key="trial",
                                fix="give an index into trials")
        return document["greedy"]
    trials = document.get("trials") or []
    if isinstance(trial, bool) or not isinstance(trial, int) or not 0 <= trial < len(trials):
        raise QcdoctorError(f"trial {trial!r} is not one of the {len(trials)} trials",
                            key="trial", fix=f"give 0 .. {len(trials) - 1}, \"greedy\", or "
                                             "nothing for the recommended fix")
    return trials[trial]
