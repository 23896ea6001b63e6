"""Detector: an Atol outlier (knowledge.md §16 R3.8).

Where no row falls below ``cosine_good``, a row from clean inputs whose Atol jumps (at
least ``atol_jump_steps`` quantization steps and ``atol_jump`` times the largest Atol it
reads) is an outlier of a few elements.
"""

from __future__ import annotations

import numpy as np

from qcdoctor.collectors.reading.detect_clean_source import atol_jumps
from qcdoctor.collectors.reading.evidence import Evidence

THRESHOLDS = ("cosine_good", "atol_jump", "atol_jump_steps")


def outliers(ev: Evidence, limits, clean: np.ndarray) -> np.ndarray:
    return atol_jumps(ev, limits) & clean & ~np.isnan(ev.qsteps)
