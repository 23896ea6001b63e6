"""The per-layer curve of compare_per_layer: where the error starts, and how it grows
(knowledge.md §8, §16 R3.8).

The reading, over the rows with metrics in execution order:

1. Cosine steps. A row's step is how far its Cosine falls below the lowest Cosine of the
   rows before it (1 before the first row), so a dip that recovers (a side branch, a
   pooled vector) and falls back adds no new step. The loss before a row is 1 minus that
   lowest Cosine; the step's growth is step / loss before (unbounded after a clean
   prefix). A new error as large as all the loss so far doubles it; an error passed on
   through one more layer grows it by a fraction.
2. Atol in quantization steps: ``max_qscale_diff`` where the table has it, else Atol /
   qscale. An Atol jump: at least ``atol_jump_steps`` steps and ``atol_jump`` times the
   largest before it (never on the first row).
3. The clean band: Cosine >= ``cosine_good`` and Atol <= ``band_steps`` quantization
   steps (a missing number passes; an Atol jump is an outlier, judged apart).
4. A source: a step that stands out, by what fired (named in this order):
   ``cosine_drop`` (step >= ``cliff_drop``), ``atol_jump`` (an Atol jump whose Cosine
   step is >= ``dominance`` x the typical step before it) or ``dominant_step`` (>=
   ``dominance`` x the typical step, the median of the other positive steps); and that
   is new error, not the old one propagating: the row's Cosine leaves the band, growth
   >= ``source_growth``, and the step is kept (one of the next ``KEPT_ROWS`` rows stays
   ``cliff_share`` of it below the level before it: a dip the next rows take back at
   once, as a softmax does its logits', is not). Adjacent source rows are one source,
   at the first.
5. The shape (``pattern``):
   - Cosine never leaves the band: an Atol jump is an outlier of a few elements
     (``outlier``, at the first jump); otherwise the layers agree (``none``);
   - no source: accumulation (``gradual``), from the first row out of the band: no
     single source;
   - the rows before the first source in the band (runs of up to ``DIP_ROWS`` rows that
     return to it aside): one origin (``cliff``), whatever the decline after it adds up
     to; two or more separated sources: ``two_sources``, named in order;
   - rows lastingly out of the band before the first source: accumulation with one
     dominant source at that step (``accumulation_with_step``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from qcdoctor.collectors.thresholds import DEFAULT, Thresholds

KEPT_ROWS = 2           # a step is kept when one of this many rows after it still shows it
DIP_ROWS = 5            # out-of-band runs this short that return to the band are dips


@dataclass
class Curve:
    """One reading of a curve; every row number is a position in the compared rows."""
    pattern: str                # cliff | gradual | accumulation_with_step | two_sources
                                # | outlier | none
    origin: int | None          # the (first) source; where accumulation starts for gradual
    start: int | None           # first row out of the clean band (None: never)
    second: int | None          # the second source (two_sources, accumulation_with_step)
    sources: int                # how many sources the curve has
    fired: str                  # cosine_drop | dominant_step | atol_jump | none
    steps: np.ndarray           # Cosine step of every row
    loss_before: np.ndarray     # 1 - the lowest Cosine before every row
    qsteps: np.ndarray          # Atol in quantization steps (nan: unknown)
    qbefore: np.ndarray         # the largest Atol in steps before every row
    typical: float              # median of the positive steps
    largest: int | None         # the row of the largest step


def read_curve(cosine: np.ndarray, qsteps: np.ndarray, limits: Thresholds = DEFAULT) -> Curve:
    """The shape of one curve: ``cosine`` and ``qsteps`` per compared row (nan: none)."""
    steps, loss_before = cosine_steps(cosine)
    qbefore = largest_before(qsteps)
    jumps = atol_jumps(qsteps, qbefore, limits)
    band = in_band(cosine, qsteps, jumps, limits)
    lasting = ~band & ~dips(band)
    positive = steps[steps > 0]
    typical = float(np.median(positive)) if positive.size else 0.0
    largest = int(np.argmax(steps)) if positive.size else None
    start = _first(lasting) if lasting.any() else _first(~band)

    def curve(pattern, origin=None, second=None, sources=0, fired="none"):
        return Curve(pattern, origin, start, second, sources, fired, steps, loss_before,
                     qsteps, qbefore, typical, largest)

    if not (cosine < limits.cosine_good).any():        # nan compares False
        outlier = _first(jumps)
        return curve("outlier", outlier, fired="atol_jump") if outlier is not None \
            else curve("none")
    sources = source_steps(cosine, steps, loss_before, jumps, limits)
    if not sources:
        return curve("gradual", start)
    (first, fired), second = sources[0], sources[1][0] if len(sources) > 1 else None
    if not lasting[:first].any():
        return curve("two_sources" if second is not None else "cliff", first, second,
                     len(sources), fired)
    return curve("accumulation_with_step", first, second, len(sources), fired)


def cosine_steps(cosine: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(step, loss before) per row: the fall below the lowest Cosine before it."""
    known = np.where(np.isnan(cosine), 1.0, cosine)
    lowest = np.minimum.accumulate(np.concatenate(([1.0], known)))
    before = lowest[:-1]
    steps = np.where(np.isnan(cosine), 0.0, np.maximum(before - known, 0.0))
    return steps, 1.0 - before


def largest_before(qsteps: np.ndarray) -> np.ndarray:
    """The largest Atol in steps of the rows before each row (nan before any)."""
    filled = np.where(np.isnan(qsteps), -np.inf, qsteps)
    running = np.maximum.accumulate(np.concatenate(([-np.inf], filled)))[:-1]
    return np.where(np.isinf(running), np.nan, running)


def atol_jumps(qsteps: np.ndarray, qbefore: np.ndarray, limits: Thresholds) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (qsteps >= limits.atol_jump_steps) & ~np.isnan(qbefore) & \
            (qsteps >= limits.atol_jump * qbefore)


def in_band(cosine: np.ndarray, qsteps: np.ndarray, jumps: np.ndarray,
            limits: Thresholds) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        cosine_ok = np.isnan(cosine) | (cosine >= limits.cosine_good)
        atol_ok = np.isnan(qsteps) | (qsteps <= limits.band_steps) | jumps
    return cosine_ok & atol_ok


def dips(band: np.ndarray) -> np.ndarray:
    """Rows out of the band in a run of at most ``DIP_ROWS`` that the band resumes after
    (the attention logits before a softmax, a side branch): they do not end a clean
    prefix."""
    edges = np.diff(np.concatenate(([0], (~band).astype(np.int8), [0])))
    dip = np.zeros(band.size, dtype=bool)
    for first, end in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1), strict=True):
        if end < band.size and end - first <= DIP_ROWS:
            dip[first:end] = True
    return dip


def source_steps(cosine, steps, loss_before, jumps, limits: Thresholds):
    """(row, what fired) of every source, in order; adjacent rows count once. A source
    leaves the band: a step within it is no visible error."""
    with np.errstate(invalid="ignore"):
        new_error = (steps > 0) & (cosine < limits.cosine_good) & \
            (steps >= limits.source_growth * loss_before)
    sharp = steps >= limits.cliff_drop
    dominant = steps >= limits.dominance * typical_without_each(steps)
    known = np.flatnonzero(~np.isnan(cosine))
    found, previous = [], None
    for i in np.flatnonzero(new_error & (sharp | dominant | jumps)):
        # an Atol jump says more than the step's size: named before a dominant step
        jumped = jumps[i] and steps[i] >= limits.dominance * typical_step(steps[:i])
        why = ("cosine_drop" if sharp[i] else "atol_jump" if jumped else
               "dominant_step" if dominant[i] else None)
        if why and _kept(cosine, known, i, steps[i], 1.0 - loss_before[i], limits):
            if previous is None or not _adjacent(known, previous, i):
                found.append((int(i), why))
            previous = i
    return found


def typical_step(steps: np.ndarray) -> float:
    """The median of the positive steps (0 when there are none)."""
    positive = steps[steps > 0]
    return float(np.median(positive)) if positive.size else 0.0


def typical_without_each(steps: np.ndarray) -> np.ndarray:
    """Per row, the median of the positive steps of the other rows (0 when none)."""
    order = np.sort(steps[steps > 0])
    if order.size == 0:
        return np.zeros(steps.size)
    own = steps > 0
    rank = np.searchsorted(order, steps)        # where a row's own step sits in ``order``
    others = order.size - 1

    def other(j: int) -> np.ndarray:
        """The j-th smallest step of the other rows, for every row with a step."""
        return np.where(j < rank, order[min(j, order.size - 1)],
                        order[min(j + 1, order.size - 1)])
    if others == 0:
        middle = np.zeros(steps.size)
    elif others % 2:
        middle = other(others // 2)
    else:
        middle = (other(others // 2 - 1) + other(others // 2)) / 2
    # a row without a positive step sets nothing aside: the median of them all
    return np.where(own, middle, float(np.median(order)))


def _kept(cosine: np.ndarray, known: np.ndarray, i: int, step: float, level: float,
          limits: Thresholds) -> bool:
    """The rows after the step keep it: one of the next ``KEPT_ROWS`` stays ``cliff_share``
    of the step below the level before it (a dip that the next rows take back at once,
    as a softmax does its logits', is no source; the last row is kept). ``known``: the
    rows with a Cosine."""
    after_at = int(np.searchsorted(known, i, side="right"))
    after = cosine[known[after_at:after_at + KEPT_ROWS]]
    return after.size == 0 or float(after.min()) <= level - limits.cliff_share * step


def _adjacent(known: np.ndarray, a: int, b: int) -> bool:
    """No row with a Cosine between rows ``a`` and ``b``."""
    return int(np.searchsorted(known, b) - np.searchsorted(known, a, side="right")) == 0


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None
