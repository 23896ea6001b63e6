"""compare_per_layer rows: one analysis output against its baseline output,
computed on a worker thread while the analysis model runs."""

from __future__ import annotations

import math
import os
import threading
from collections import deque
from dataclasses import dataclass

import torch

from qcdoctor.probe.held import Held
from qcdoctor.probe.layers import (
    Layer,
    output_scale,
)
from qcdoctor.probe.recorder import Sig
from qcdoctor.probe.stats import (
    flattened,
    pair_stats,
    shape_text,
    side_stats,
)

SAME, PATTERN_END, UNALIGNED, INTERMEDIATE = "name", "pattern_end", "unaligned", \
    "fused_intermediate"


@dataclass
class BaseOutput:
    layer: Layer
    stats: dict
    sig: Sig | None
    chain: tuple | None = None          # (head key, fusion tokens, BN included)


_METRICS = ("cosine", "mse", "l1", "kl", "sqnr", "atol", "rtol", "max_atol_diff",
            "max_qscale_diff")


def _blank(row: dict, how: str) -> None:
    for name in _METRICS:
        row.pop(name, None)
    row["match"] = how


_NO_STATS = {"min": None, "max": None, "mean": None, "var": None, "sumsq": None}


class RowMaker:
    """Rows computed on a worker thread while the analysis model runs on (torch releases
    the GIL inside its ops, so the statistics overlap the forward); once the model is
    done, the calling thread takes the jobs still waiting as well. In the calling thread
    alone on a single-CPU machine. The analysis tensor is held by reference (``add``
    returns it held: the FX tap copies it before an op writes into it) or, for an eager
    model, copied; no more than a budget of tensors waits at a time.

    Only rows of large tensors go to the worker (started with the first of them). A
    row is some forty torch calls: below a few milliseconds of work it is mostly Python,
    and the two threads hand the GIL to each other at every call, each hand-over a
    thread switch the forward waits for (measured on a two-CPU machine: with the rows
    from 2^15, or from 2^17, elements up on the worker, the probe was slower than with
    every row in this thread)."""

    INLINE = 1 << 19                            # elements: smaller rows in this thread

    def __init__(self, copy: bool, budget: int = 256 << 20):
        self.threaded = (os.cpu_count() or 1) > 1
        self.copy = copy
        self.sync = threading.Condition()       # held tensors' states, the job queue
        self.items: list = []                   # row dicts (or None until measured)
        self.blank: dict[int, str] = {}         # row index -> flag (metrics left empty)
        self.changed: list[str] = []            # rows whose tensor changed before read
        self.budget, self.queued = budget, 0
        self.jobs: deque = deque()
        self.running = 0
        self.error: BaseException | None = None
        self.closing = False
        self.worker = None

    def add(self, make, args: tuple, model_tensor: int) -> Held | None:
        """make(*args), args[model_tensor] being the model's own tensor."""
        index = len(self.items)
        self.items.append(None)
        tensor = args[model_tensor]
        if not self.threaded or tensor.numel() < self.INLINE:
            self.items[index] = make(*args)
            return None
        held = Held(tensor.clone() if self.copy else tensor, self.sync)
        size = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
        if self.worker is None:
            self.worker = threading.Thread(target=self._work, name="qcdoctor-probe",
                                           daemon=True)
            self.worker.start()
        with self.sync:
            self.jobs.append((index, held, make, args, model_tensor, size))
            self.queued += size
            self.sync.notify_all()
            while self.queued > self.budget and self.error is None:
                self.sync.wait()
        return None if self.copy else held

    def _next(self, wait: bool):
        with self.sync:
            while not self.jobs:
                if not wait or self.closing:
                    return None
                self.sync.wait()
            self.running += 1
            return self.jobs.popleft()

    def _work(self) -> None:
        # torch sizes a thread's OpenMP/MKL pool on its first parallel op or this call; a
        # row may start with a BLAS dot, which would then run on the default pool here and
        # round otherwise than in the calling thread
        torch.get_num_threads()
        while True:
            job = self._next(wait=True)
            if job is None:
                return
            self._run(job)

    def _run(self, job) -> None:
        index, held, make, args, model_tensor, size = job
        try:
            tensor, intact = held.read()
            if tensor is None:
                return                          # copied for an in-place op and let go
            if not intact:
                self.changed.append(args[0])
            with torch.inference_mode():
                self.items[index] = make(*args[:model_tensor], tensor,
                                         *args[model_tensor + 1:])
        except BaseException as exc:  # noqa: BLE001 - raised again in the calling thread
            self.error = self.error or exc
        finally:
            held.release()
            with self.sync:
                self.running -= 1
                self.queued -= size
                self.sync.notify_all()

    def rows(self) -> list[dict]:
        if self.worker is not None:
            while (job := self._next(wait=False)) is not None:
                self._run(job)                  # the model is done: help the worker
            with self.sync:
                while self.running:
                    self.sync.wait()
        if self.error is not None:
            raise self.error
        rows = list(self.items)
        for index, how in self.blank.items():
            _blank(rows[index], how)
        return rows

    def close(self) -> None:
        if self.worker is not None:
            with self.sync:
                self.closing = True
                self.jobs.clear()
                self.sync.notify_all()
            self.worker.join()


def make_unaligned_row(name: str, base_name: str, base: BaseOutput, layer: Layer,
                   seen: torch.Tensor | None, tensor: torch.Tensor) -> dict:
    if base.stats is None and seen is not None:
        base.stats = side_stats(seen)
    return make_row(name, base_name, base, layer, None, tensor, UNALIGNED)


def make_row(name: str, base_name: str, base: BaseOutput, layer: Layer,
         reference: torch.Tensor | None, tensor: torch.Tensor, how: str) -> dict:
    # each side flattened once (a non-contiguous one is copied by reshape: once)
    flat_ref = flattened(reference) if reference is not None else None
    flat = tensor.reshape(-1)
    if base.stats is None:
        base.stats = side_stats(flat_ref) if flat_ref is not None else _NO_STATS
    qscale, dtype = output_scale(layer.quantizer)
    side = side_stats(flat)
    row = {"mod_name": name, "base_op_type": base.layer.op_type, "analy_op_type": layer.op_type,
           "shape": shape_text(tensor), "quant_dtype": dtype, "qscale": qscale,
           "base_model_min": base.stats["min"], "analy_model_min": side["min"],
           "base_model_max": base.stats["max"], "analy_model_max": side["max"],
           "base_model_mean": base.stats["mean"], "analy_model_mean": side["mean"],
           "base_model_var": base.stats["var"], "analy_model_var": side["var"],
           "base_mod_name": base_name if base_name != name else "",
           "match": how}
    if reference is None or not tensor.is_floating_point():
        return row                      # (indices, masks: no error to measure)
    if reference.shape != tensor.shape:
        row["shape"] = "mismatch shape"
        return row
    if not (_finite(base.stats) and _finite(side)):
        # a NaN or inf on either side makes every metric NaN or meaningless (KL, Rtol):
        # the cells are left empty, and compare_models warns about the row
        return row
    metrics = pair_stats(flat_ref, flat, base_side=base.stats, analy_side=side)
    row.update(metrics)
    row["max_atol_diff"] = metrics["atol"]
    row["max_qscale_diff"] = metrics["atol"] / qscale if qscale and metrics["atol"] is not None \
        else None
    return row


def _finite(stats: dict) -> bool:
    """Whether a side's values are all finite: min and max are NaN when any value is
    (torch's reductions propagate NaN), infinite when one is."""
    low, high = stats["min"], stats["max"]
    return low is None or (math.isfinite(low) and math.isfinite(high))
