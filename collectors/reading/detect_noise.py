"""Detector: quantization noise (knowledge.md §17 R4.1).

A table is quiet when every row is within the band's quantization steps (``band_steps``;
a row's own error's steps where the probe measured it: the table's carry the rounding of
every row before) and its lowest Cosine is at least ``cosine_good``, the threshold the
report cites (knowledge.md R5.6: rows falling below it are accumulation, never noise). A
quiet table without a source is quantization noise: two models that both quantize
honestly. A control (one stage against itself) is read as what noise looks like at the
folder (scope ``control``), whatever its rows.
"""

from __future__ import annotations

import numpy as np

from qcdoctor.collectors.reading.evidence import Evidence

THRESHOLDS = ("band_steps", "cosine_good")


def quiet(ev: Evidence, limits) -> bool:
    steps = ev.qsteps if ev.own is None else np.where(ev.own.known, ev.own.qsteps, ev.qsteps)
    known = steps[~np.isnan(steps)]
    return (known.size == 0 or float(known.max()) <= limits.band_steps) and \
        bool((~np.isnan(ev.cos)).any()) and float(np.nanmin(ev.cos)) >= limits.cosine_good


def test_of(ev: Evidence, limits) -> str:
    steps = ev.qsteps if ev.own is None else np.where(ev.own.known, ev.own.qsteps, ev.qsteps)
    known = steps[~np.isnan(steps)]
    largest = float(known.max()) if known.size else 0.0
    return (f"largest Atol {largest:.6g} steps <= band_steps {limits.band_steps:g}; lowest "
            f"Cosine {float(np.nanmin(ev.cos)):.6g} >= cosine_good {limits.cosine_good:g}")
