"""Detector: accumulation, and a step on top of it (knowledge.md §16 R3.8, §17 R4.1).

A row reading a row out of the band is propagation, however large its drop. Without a
source, a drop on such a row stands out as a step on top of an accumulation when it is at
least ``cliff_drop``, ``dominance`` times the typical step and ``source_growth`` times the
loss it reads (unproven without its own error); otherwise rows out of the band are an
accumulation. A source with at least two other out-of-band rows upstream of it, none of
them reading it, is a step landing on an accumulation.

Row order (no graph): a drop after the first source is a second source only when it is at
least ``cliff_drop``, ``dominance`` times the drop just before it and ``source_growth``
times the loss it reads, and not right after another one (an interleaved branch's fall is
not).
"""

from __future__ import annotations

import numpy as np

from qcdoctor.collectors.reading.evidence import Evidence

THRESHOLDS = ("cliff_drop", "dominance", "source_growth")


def step_on_accumulation(ev: Evidence, limits, out, clean, keeps) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return out & ~clean & (ev.step >= limits.cliff_drop) & \
            (ev.step >= limits.dominance * ev.typical) & \
            (ev.step >= limits.source_growth * (1.0 - ev.c_in)) & keeps


def lands_on_accumulation(ev: Evidence, lasting: np.ndarray, source: int) -> bool:
    """Whether out-of-band rows not downstream of ``source`` lie upstream of it (the
    accumulation that a step lands on), or, in row order, before it."""
    if not ev.by_graph:
        return bool(lasting[:source].sum() >= 2)
    seen = np.zeros(ev.cos.size, dtype=bool)
    todo, count = ev.edges.inputs_of(source), 0
    while todo:
        row = todo.pop()
        if seen[row]:
            continue
        seen[row] = True
        count += bool(lasting[row])
        todo.extend(ev.edges.inputs_of(row))
    return count >= 2


def row_order_second(ev: Evidence, limits, sources, fired, out):
    """Row order: the first source and the later drops that are sources too."""
    step = ev.step
    first = int(sources[0])
    before = np.concatenate(([0.0], step[:-1]))
    with np.errstate(invalid="ignore"):
        candidate = out & (step >= limits.cliff_drop) & \
            (step >= limits.dominance * np.maximum(before, 1e-12)) & \
            (step >= limits.source_growth * (1.0 - ev.c_in))
    candidate[:first + 1] = False
    candidate[first] = True
    after_one = np.concatenate(([False], candidate[:-1]))
    later = np.flatnonzero(candidate & ~after_one)
    later = later[later > first]
    return np.concatenate(([first], later)).astype(np.intp), \
        [fired[0]] + ["cosine_drop"] * int(later.size)


def test_of(ev: Evidence, limits, row: int) -> str:
    return (f"step {float(ev.step[row]):.6g} >= cliff_drop {limits.cliff_drop:g}, >= "
            f"dominance {limits.dominance:g} x typical step {float(ev.typical[row]):.6g} "
            f"and >= source_growth {limits.source_growth:g} x loss read "
            f"{float(1.0 - ev.c_in[row]):.6g}")
