"""Whether the two models differ beyond quantization (knowledge.md R5.3).

The analysis model with every fake quant switched off is run once and its outputs are
compared with the baseline's. Where they match, the per-layer table reads quantization
alone; where they do not (a trained QAT model against its float one, a calibration run in
train mode that moved the BN statistics, an op computed otherwise), every row carries that
difference too, and the quantization error alone is read by comparing the analysis model
with itself, fake quant off against on (``compare_models("self", ...)``).

probe_run.yaml's ``models_match``: ``fake_quant_off_cosine`` (the lowest output Cosine),
``fake_quant_off_max_abs`` (the largest absolute difference over the outputs),
``fake_quant_off_relative`` (that difference over the baseline outputs' largest absolute
value) and ``match``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from qcdoctor.probe.quantizers import QuantizerAdapter, TorchAoAdapter
from qcdoctor.probe.sensitivity import undo_all
from qcdoctor.probe.stats import flatten_output, pair_stats

# the largest difference, relative to the baseline output's largest value, still read as
# the same model: float noise of the same weights computed in another order (a fused
# conv-bn, another kernel) is about 1e-6 relative; one optimizer step or a BN statistics
# update moves outputs by 1e-2 and more. 1e-3 keeps both three orders of magnitude away.
RELATIVE_TOLERANCE = 1e-3


def all_off_outputs(analysis: nn.Module, adapter: QuantizerAdapter, run,
                    modules: list[nn.Module] | None = None) -> list[torch.Tensor]:
    """The analysis model's output tensors with every fake quant switched off, each
    quantizer put back as it was afterwards (an interrupt included). ``modules``:
    analysis.modules(), when at hand."""
    bypassed: list[tuple[nn.Module, object]] = []
    saved: list = []
    try:
        plain = _plain_torch_quantizers(analysis, adapter, modules)
        if plain is not None:
            bypassed = _bypass(plain)
        else:
            quantizers = adapter.quantizers(analysis)
            bypassed = _bypass([q.module for q in quantizers])
            skipped = {id(module) for module, _ in bypassed}
            for quantizer in quantizers:
                if id(quantizer.module) not in skipped:
                    saved.append((quantizer, adapter.is_enabled(quantizer)))
                    adapter.set_enabled(quantizer, False)
        with torch.inference_mode():
            return [t for _, t in flatten_output(run(analysis))]
    finally:
        undo_all([lambda: _restore(bypassed)] +
                 [lambda q=q, enabled=enabled: adapter.set_enabled(q, enabled)
                  for q, enabled in saved])


def quantizes(model: nn.Module, adapter: QuantizerAdapter,
              modules: list[nn.Module] | None = None) -> bool:
    """Whether ``model`` quantizes: a fake quant of it switched on. With torch.ao's adapter
    read from ``modules`` (model.modules(), when at hand) without the adapter's list, which
    names every module: on a float model, a walk the size of its forward."""
    if type(adapter).quantizers is not TorchAoAdapter.quantizers:
        return any(adapter.is_enabled(q) for q in adapter.quantizers(model))
    from torch.ao.quantization import FakeQuantizeBase
    return any(isinstance(module, FakeQuantizeBase) and _on(module, "fake_quant_enabled")
               for module in (model.modules() if modules is None else modules))


def _plain_torch_quantizers(analysis: nn.Module, adapter: QuantizerAdapter,
                            modules: list[nn.Module] | None) -> list[nn.Module] | None:
    """Every quantizer of ``analysis`` where the adapter lists them as torch.ao's does
    (its FakeQuantizeBase modules) and each is one of torch's own with its observer off,
    so that ``_bypass`` takes them all; None otherwise. Found without the adapter's list,
    which names every module of the model: on a small model more than the pass's forward
    costs."""
    if type(adapter).quantizers is not TorchAoAdapter.quantizers:
        return None
    from torch.ao.quantization import FakeQuantizeBase
    kinds = _torch_fake_quants()
    found = []
    for module in analysis.modules() if modules is None else modules:
        if isinstance(module, FakeQuantizeBase):
            if type(module) not in kinds or _on(module, "observer_enabled"):
                return None
            found.append(module)
    return found


def _torch_fake_quants() -> tuple[type, ...]:
    from torch.ao.quantization.fake_quantize import (
        FakeQuantize,
        FixedQParamsFakeQuantize,
        FusedMovingAvgObsFakeQuantize,
    )
    return FakeQuantize, FusedMovingAvgObsFakeQuantize, FixedQParamsFakeQuantize


def _bypass(modules: list[nn.Module]) -> list[tuple[nn.Module, object]]:
    """torch's own fake quants with their observer off return their input as it is once
    fake quant is off: each such one returns its input directly for the pass, its switch
    left as it is. Switching it would cost its kernel call (tens of microseconds) and write
    its switch, whose new version makes the next run read every quantizer's numbers again
    (probe/fast_quant.py's plans). (module, the forward its instance held) for
    ``_restore``."""
    kinds = _torch_fake_quants()
    done = []
    for module in modules:
        if type(module) not in kinds or _on(module, "observer_enabled"):
            continue
        done.append((module, module.__dict__.get("forward", _ABSENT)))
        module.__dict__["forward"] = _identity      # what Module.__setattr__ does here
    return done


def _restore(bypassed: list[tuple[nn.Module, object]]) -> None:
    while bypassed:
        module, forward = bypassed.pop()
        if forward is _ABSENT:
            module.__dict__.pop("forward", None)
        else:
            module.__dict__["forward"] = forward


def _on(module: nn.Module, name: str) -> bool:
    flag = getattr(module, name, None)
    return not isinstance(flag, torch.Tensor) or bool(flag.reshape(-1)[0])


def _identity(x, *rest, **kwargs):
    return x


_ABSENT = object()


def models_match(reference: list[torch.Tensor], off: list[torch.Tensor]) -> dict | None:
    """probe_run.yaml's ``models_match`` for the baseline's outputs ``reference`` and the
    analysis model's with every fake quant off; None where the outputs differ in number or
    shape (no comparison)."""
    if len(reference) != len(off) or not reference or \
            any(b.shape != a.shape for b, a in zip(reference, off, strict=True)):
        return None
    cosine, max_abs, scale = 1.0, 0.0, 0.0
    for base, analysis in zip(reference, off, strict=True):
        if base.numel() == 0:
            continue
        stats = pair_stats(base, analysis, ("cosine", "atol"))
        value = stats["cosine"]
        # a NaN or a zero output leaves no Cosine: the absolute difference still decides
        if value is not None and math.isfinite(value):
            cosine = min(cosine, float(value))
        atol = stats["atol"]
        # a NaN on one side only is the largest difference of all
        max_abs = max(max_abs, math.inf if atol is None or not math.isfinite(atol) else atol)
        scale = max(scale, float(base.detach().abs().max()))
    relative = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else math.inf)
    return {"fake_quant_off_cosine": round(cosine, 9),
            "fake_quant_off_max_abs": _shown(max_abs),
            "fake_quant_off_relative": _shown(relative),
            "tolerance": RELATIVE_TOLERANCE,
            "match": bool(relative <= RELATIVE_TOLERANCE)}


def _shown(value: float) -> float | None:
    """Six significant digits; None for a difference that is no number."""
    return float(f"{value:.6g}") if math.isfinite(value) else None


def identical() -> dict:
    """``models_match`` of a baseline that is the analysis model itself with every fake
    quant off: the same model by construction."""
    return {"fake_quant_off_cosine": 1.0, "fake_quant_off_max_abs": 0.0,
            "fake_quant_off_relative": 0.0, "tolerance": RELATIVE_TOLERANCE, "match": True}


SELF = "self"


def is_self_baseline(baseline) -> bool:
    """Whether ``baseline`` asks for the analysis model itself with every fake quant off;
    one clear error for any other text."""
    if not isinstance(baseline, str):
        return False
    if baseline != SELF:
        from qcdoctor.errors import QcdoctorError
        raise QcdoctorError(f"the baseline {baseline!r} is neither a model nor {SELF!r}",
                            key="baseline",
                            fix=f"give the reference model, or {SELF!r} to compare the analysis "
                                f"model with itself, fake quant off against on")
    return True


def fake_quant_off_copy(analysis: nn.Module, adapter: QuantizerAdapter) -> nn.Module:
    """The baseline of ``"self"``: a deep copy of the analysis model with every fake quant
    switched off (the user's model keeps its switches)."""
    baseline = deep_copy(analysis, "as its own baseline", "baseline",
                         "give the float model as the baseline")
    for quantizer in adapter.quantizers(baseline):
        adapter.set_enabled(quantizer, False)
    return baseline


def deep_copy(model: nn.Module, purpose: str, key: str, instead: str,
              share_parameters: bool = False) -> nn.Module:
    """A deep copy of the analysis model, or one clear error naming ``key`` (what its
    modules hold decides whether it copies: an open file, a lock, a generator does not).
    ``share_parameters``: the copy holds the model's own ``nn.Parameter`` objects (for a
    copy that never writes one); buffers, switches and modules are its own."""
    import copy

    from qcdoctor.errors import QcdoctorError
    memo = {id(p): p for p in model.parameters()} if share_parameters else {}
    try:
        return copy.deepcopy(model, memo)
    except Exception as exc:  # noqa: BLE001 - whatever the user's modules hold
        lines = str(exc).strip().splitlines()
        raise QcdoctorError(f"the analysis model cannot be deep-copied {purpose} "
                            f"({type(exc).__name__}: {lines[0][:200] if lines else ''})",
                            key=key,
                            fix="keep no uncopyable state (open files, locks, generators) in "
                                f"the modules, or {instead}") from exc
