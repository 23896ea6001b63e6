"""Detector: a source measured by its own error (knowledge.md §17 R4.2, §18 R5.2).

Where the probe measured a call's own error (the layer run on the baseline's inputs of
that call), it decides for that row, whatever its inputs: a source is a row whose own
error leaves the clean band, is kept by the rows reading it, and stands out: an own loss
(1 - own Cosine) of at least ``cliff_drop``, or ``dominance`` times every other row's own
loss. A measured row with a small own error is propagation. Measured sources come
largest first. A row left unmeasured is read by detect_clean_source.
"""

from __future__ import annotations

import numpy as np

from qcdoctor.collectors.reading.evidence import Evidence, in_band
from qcdoctor.collectors.reading.thresholds import Thresholds

THRESHOLDS = ("cliff_drop", "dominance")


def own_sources(ev: Evidence, limits: Thresholds, out: np.ndarray, keeps: np.ndarray
                ) -> np.ndarray:
    if ev.own is None:
        return np.zeros(ev.cos.size, dtype=bool)
    own_out = ~in_band(ev.own.cosine, ev.own.qsteps, limits) & ev.own_decides
    stands_out = (ev.own_loss >= limits.cliff_drop) | \
        (ev.own_loss >= limits.dominance * ev.own_largest_other)
    return own_out & stands_out & out & keeps & ~ev.barred


def largest_first(sources: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Measured sources by the error each makes, the largest first (then in row order)."""
    return np.array(sorted(sources.tolist(), key=lambda i: (-loss[i], i)), dtype=np.intp)


def test_of(ev: Evidence, limits: Thresholds, row: int) -> str:
    loss = float(ev.own_loss[row])
    if loss >= limits.cliff_drop:
        return f"own loss {loss:.6g} >= cliff_drop {limits.cliff_drop:g}"
    return (f"own loss {loss:.6g} >= dominance {limits.dominance:g} x every other own loss "
            f"(largest {float(ev.own_largest_other[row]):.6g})")
