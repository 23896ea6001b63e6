"""Detector: a source from clean inputs (knowledge.md §17 R4.1).

A row is a source when it leaves the clean band while every row it reads is inside it,
its error is kept by the rows reading it, and its step stands out:

- ``cosine_drop``: its Cosine falls at least ``cliff_drop`` below the lowest row it reads;
- ``atol_jump``: its Atol is at least ``atol_jump_steps`` quantization steps and
  ``atol_jump`` times the largest Atol it reads;
- ``dominant_step``: its step is at least ``dominance`` times the median of the other
  rows' steps; in a quiet table (detect_noise) ``dominance`` times every other step.

A row whose own error the probe measured is left to detect_own_source.
"""

from __future__ import annotations

import numpy as np

from qcdoctor.collectors.reading.evidence import Evidence
from qcdoctor.collectors.reading.thresholds import Thresholds

WHY = ("", "cosine_drop", "atol_jump", "dominant_step")
THRESHOLDS = ("cliff_drop", "dominance", "atol_jump", "atol_jump_steps")


def atol_jumps(ev: Evidence, limits: Thresholds) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (ev.qsteps >= limits.atol_jump_steps) & ~np.isnan(ev.q_in) & \
            (ev.qsteps >= limits.atol_jump * ev.q_in)


def standing_out(ev: Evidence, limits: Thresholds, quiet: bool) -> np.ndarray:
    """Per row, why its step stands out, as an index into WHY (0: it does not)."""
    jump = atol_jumps(ev, limits)
    step = ev.step
    with np.errstate(invalid="ignore"):
        low = ev.cos < limits.cosine_good
        why = np.where(step >= limits.cliff_drop, 1,
                       np.where(jump & (low | np.isnan(ev.cos)), 2,
                                np.where((step > 0) & (step >= limits.dominance * ev.typical),
                                         3, 0)))
    if quiet:       # a step twice the median is common in quantization noise
        above_all = (step > 0) & (step >= limits.dominance * ev.largest_other)
        why = np.where((why == 3) & ~above_all, 0, why)
    return why


def clean_sources(ev: Evidence, limits: Thresholds, out: np.ndarray, clean: np.ndarray,
                  keeps: np.ndarray, quiet: bool) -> tuple[np.ndarray, np.ndarray]:
    """(the rows that are sources from clean inputs, why each row stands out)."""
    why = standing_out(ev, limits, quiet)
    found = out & clean & (why != 0) & keeps & ~ev.own_decides & ~ev.barred
    return found, why


def test_of(ev: Evidence, limits: Thresholds, row: int, why: str) -> str:
    """The comparison that made ``row`` a source, with its numbers and thresholds."""
    step = float(ev.step[row])
    if why == "cosine_drop":
        return f"step {step:.6g} >= cliff_drop {limits.cliff_drop:g}"
    if why == "atol_jump":
        return (f"Atol {float(ev.qsteps[row]):.6g} steps >= atol_jump_steps "
                f"{limits.atol_jump_steps:g} and >= atol_jump {limits.atol_jump:g} x "
                f"{float(ev.q_in[row]):.6g} read")
    return (f"step {step:.6g} >= dominance {limits.dominance:g} x typical step "
            f"{float(ev.typical[row]):.6g}")
