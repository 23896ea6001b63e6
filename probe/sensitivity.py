"""Sensitivity: how much each quantizer alone moves the model outputs.

As the profiler defines the values of output_*_sensitive_ops (knowledge.md §8): all
fake quantization off, then one quantizer at a time on; each row is the error of every
model output against the baseline's with only that quantizer on. Rows are sorted most
sensitive first. Every switch is restored afterwards. Where the model keeps the samples
of a batch apart, many quantizers are measured in one forward, each on its own copy of
the input (probe/sensitivity_batched.py); else one forward each.
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Callable, Iterable

import torch

from qcdoctor.collectors.qa_writers import sensitivity_name
from qcdoctor.collectors.sensitivity import ASCENDING
from qcdoctor.engine.api.interrupts import HeldInterrupts
from qcdoctor.errors import QcdoctorError
from qcdoctor.probe.quantizers import QuantizerAdapter
from qcdoctor.probe.sensitivity_batched import batched_values, output_values
from qcdoctor.probe.stats import flatten_output

# file-name metric -> pair_stats key (also the collector's name of the metric)
METRICS = {"L1": "l1", "MSE": "mse", "KL": "kl", "ATOL": "atol", "Cosine": "cosine",
           "SQNR": "sqnr"}
NAME_BYTES = 255                    # the longest file name most file systems take
RETRIES = 3                         # runs of one undo step cut short before it is given up


def output_names(outputs: list[tuple[str, torch.Tensor]], names: list[str] | None) -> list[str]:
    """Names for the model outputs: the given ones, else their place (``0``, ``boxes``,
    ``heads_1``)."""
    if names is not None:
        return list(names)
    derived = [suffix.strip("[]").replace("][", "_") for suffix, _ in outputs]
    return [d or "0" for d in derived]


def name_problem(name, metric: str) -> str | None:
    """Why ``name`` cannot name an output's sensitivity tables
    (output_<name>_<metric>_sensitive_ops.{txt,pt}, one file directly in the folder),
    or None."""
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not a text"
    if not name.strip():
        return "is empty"
    if name in (".", ".."):
        return "names a folder"
    if "/" in name or "\\" in name:
        return "holds a path separator"
    if any(unicodedata.category(c) in ("Cc", "Cs") for c in name):
        return "holds a control character"
    try:
        size = len(os.fsencode(sensitivity_name(name, metric, ext="txt")))
    except UnicodeError:
        return "cannot be encoded as a file name"
    if size > NAME_BYTES:
        return (f"is too long: its file name output_<name>_{metric}_sensitive_ops.txt "
                f"would be {size} bytes, at most {NAME_BYTES}")
    return None


def check_output_names(names: list, metric: str, key: str = "names",
                       derived: bool = False) -> None:
    """One clear error for output names that cannot name their sensitivity tables, or
    that name two outputs alike (one table would replace the other). ``derived``: the
    names come from the model's output keys, not from the user."""
    seen = set()
    for name in names:
        why = name_problem(name, metric)
        if why is None and name in seen:
            why = "is given twice: one output's tables would replace the other's"
        if why is not None:
            where = "the model's output key" if derived else "output name"
            raise QcdoctorError(f"{where} {name!r} {why}", key=key,
                                fix="give one name per model output, each usable in a file "
                                    "name (letters, digits, '_', '-', no '/'), e.g. "
                                    + ("--names logits,boxes" if key.startswith("--")
                                       else "names=['logits', 'boxes']"))
        seen.add(name)


def undo_all(steps: Iterable[Callable[[], None]]) -> None:
    """Run every step (each one puts the caller's model back as it was; running one again
    does no harm) to its end, whatever interrupts it: a Ctrl-C waits until the last step
    is done, and a step cut short by an exception is run again (at most RETRIES times).
    The first exception is raised once all are done."""
    first: BaseException | None = None
    with HeldInterrupts() as hold:
        hold()
        for step in steps:
            for _ in range(RETRIES):
                try:
                    step()
                    break
                except BaseException as exc:  # noqa: BLE001 - raised after the last step
                    first = exc if first is None else first
    if first is not None:
        raise first


def sensitivity(analysis, adapter: QuantizerAdapter, run, reference: list[torch.Tensor],
                metric: str, progress: Callable[[str, int, int], None] | None = None,
                call: tuple[tuple, dict] | None = None):
    """rows per output: [(op_name, sensitive_type, op_type, value, quant_dtype), ...].

    ``call``: the (args, kwargs) ``run`` calls the model with; given, the quantizers are
    measured many in one forward where the model allows it (probe/sensitivity_batched.py),
    else one forward each."""
    key = METRICS[metric]
    quantizers = adapter.quantizers(analysis)
    saved = [(q, adapter.is_enabled(q)) for q in quantizers]
    per_output: list[list[tuple]] = [[] for _ in reference]
    try:
        for q in quantizers:
            adapter.set_enabled(q, False)
        values = None
        if call is not None and quantizers:
            try:
                values = batched_values(analysis, adapter, quantizers, *call, reference, key,
                                        progress)
            except Exception:  # noqa: BLE001 - NotBatched, or the model failing on the batch:
                values = None                  # one forward per quantizer below
            for q in quantizers:
                adapter.set_enabled(q, False)
        for done, q in enumerate(quantizers):
            if values is None:
                adapter.set_enabled(q, True)
                outputs = flatten_output(_run_alone(run, analysis, q))
                adapter.set_enabled(q, False)
                found = output_values(reference, [t for _, t in outputs], key)
                if progress is not None:
                    progress(q.op_name, done + 1, len(quantizers))
            else:
                found = values[done]
            for rows, value in zip(per_output, found, strict=True):
                rows.append((q.op_name, q.sensitive_type, q.op_type,
                             float("inf") if value is None else value, q.quant_dtype))
    finally:
        undo_all(lambda q=q, enabled=enabled: adapter.set_enabled(q, enabled)
                 for q, enabled in saved)
    reverse = key not in ASCENDING          # the collector's order: worst first

    def order(row):
        # a NaN (the model's output broke with that quantizer on) is the worst of all: a
        # NaN key would leave the order to chance
        nan = row[3] != row[3]
        return (nan, row[3]) if reverse else (not nan, row[3])
    return [sorted(rows, key=order, reverse=reverse) for rows in per_output]


def _run_alone(run, analysis, quantizer):
    """The model's output with only ``quantizer`` on; one clear error when the model
    fails so (it ran with all of them on)."""
    try:
        return run(analysis)
    except Exception as exc:  # noqa: BLE001 - whatever the user's forward raises
        lines = str(exc).strip().splitlines()
        what = f"{type(exc).__name__}: {lines[0][:200]}" if lines else type(exc).__name__
        raise QcdoctorError(f"the analysis model fails with only the quantizer of "
                            f"{quantizer.op_name} ({quantizer.sensitive_type}) on ({what})",
                            key="sensitivity",
                            fix="make the model run with any set of its fake quants "
                                "switched off, or run without sensitivity "
                                "(--no-sensitivity)") from exc
