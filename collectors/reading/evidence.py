"""What every detector of the per-layer reading reads, computed once per table and shared
by the margin's re-readings: each row's Cosine and Atol (in quantization steps), what it
reads along the edges, its step below what it reads, the clean band, its own error.

The clean band (knowledge.md §8, R5.6): Cosine >= ``cosine_good`` and Atol <=
``band_steps`` quantization steps; a missing number passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from qcdoctor.collectors.reading.calls import Edges
from qcdoctor.collectors.reading.thresholds import Thresholds


@dataclass(frozen=True)
class OwnError:
    """What the probe measured of each compared row alone (NaN: not measured)."""
    cosine: np.ndarray
    qsteps: np.ndarray
    weight_sqnr: np.ndarray         # the worst channel's SQNR of the quantized weight, dB
    per_tensor: np.ndarray          # bool: the weight is quantized with one scale
    channel_ratio: np.ndarray       # largest / smallest channel |max| of the weight

    @property
    def known(self) -> np.ndarray:
        return ~np.isnan(self.cosine)


@dataclass(frozen=True)
class Evidence:
    """The per-row numbers a reading needs, computed once for every threshold tried."""
    cos: np.ndarray
    qsteps: np.ndarray
    edges: Edges
    consumers: list              # per row, the rows reading it (built when first needed)
    reader: np.ndarray          # per edge: the row that reads ...
    read: np.ndarray            # ... the row it reads
    c_in: np.ndarray            # lowest Cosine read (1: none)
    q_in: np.ndarray            # largest Atol in steps read (nan: none known)
    by_graph: bool
    own: OwnError | None
    step: np.ndarray            # the Cosine a row loses against the lowest it reads
    typical: np.ndarray         # per row, the median of the other rows' steps
    largest_other: np.ndarray   # per row, the largest of the other rows' steps
    own_decides: np.ndarray     # bool: the row's own error is measured
    own_loss: np.ndarray        # 1 - own Cosine where measured, else 0
    own_largest_other: np.ndarray   # per row, the largest of the other rows' own losses
    left_out: np.ndarray        # bool: post-processing, out of the search and never clean
    groups: np.ndarray          # per row, the first row sharing its output quantizer
    barred: np.ndarray          # bool: no source here (the margin's re-reading)
    reached: dict = field(default_factory=dict)    # sources -> the rows reading them


def gather(cos, qsteps, edges: Edges, own: OwnError | None, left_out: np.ndarray
           ) -> Evidence:
    """The aggregates over the edges, with numpy's grouped reductions (no Python work per
    row: tables reach 100,000 rows)."""
    count = cos.size
    reader, read = edges.reader, edges.read
    read_cos, read_q = cos[read], qsteps[read]
    low = np.full(count, np.inf)
    np.minimum.at(low, reader, np.where(np.isnan(read_cos), np.inf, read_cos))
    known = np.bincount(reader, weights=(~np.isnan(read_cos)).astype(float),
                        minlength=count) > 0
    c_in = np.where(known, low, 1.0)
    high = np.full(count, -np.inf)
    np.maximum.at(high, reader, np.where(np.isnan(read_q), -np.inf, read_q))
    q_in = np.where(np.isinf(high), np.nan, high)
    step = np.where(np.isnan(cos), 0.0, np.maximum(c_in - cos, 0.0))
    if own is not None:
        own_decides = own.known & ~np.isnan(cos)
        own_loss = np.where(own_decides, 1.0 - own.cosine, 0.0)
        own_largest = largest_without_each(np.maximum(own_loss, 0.0))
    else:
        own_decides = np.zeros(count, dtype=bool)
        own_loss = own_largest = np.zeros(count)
    groups = edges.groups if len(edges.quantizers) == count else np.arange(count)
    return Evidence(cos, qsteps, edges, [], reader, read, c_in, q_in, edges.by_graph, own,
                    step, median_without_each(step), largest_without_each(step),
                    own_decides, own_loss, own_largest, left_out, groups,
                    np.zeros(count, dtype=bool))


def in_band(cos, qsteps, limits: Thresholds) -> np.ndarray:
    """The clean band: Cosine >= cosine_good and Atol <= band_steps steps (NaN passes)."""
    with np.errstate(invalid="ignore"):
        return (np.isnan(cos) | (cos >= limits.cosine_good)) & \
            (np.isnan(qsteps) | (qsteps <= limits.band_steps))


def reads_clean(ev: Evidence, limits: Thresholds) -> np.ndarray:
    """Per row, whether every row it reads is in the clean band."""
    with np.errstate(invalid="ignore"):
        return (ev.c_in >= limits.cosine_good) & \
            (np.isnan(ev.q_in) | (ev.q_in <= limits.band_steps))


def kept(ev: Evidence, out: np.ndarray) -> np.ndarray:
    """Per row, whether the rows reading it keep its error: one of them is out of the band
    too, or is post-processing, whose values say nothing either way (a logits row whose
    softmax takes the error back is no source; a residual add that halves it keeps it); a
    row nothing reads keeps it."""
    count = ev.cos.size
    keeping = out | ev.left_out
    readers = np.bincount(ev.read, minlength=count)
    out_readers = np.bincount(ev.read, weights=keeping[ev.reader].astype(float),
                              minlength=count)
    return (readers == 0) | (out_readers > 0)


def median_without_each(values: np.ndarray) -> np.ndarray:
    """Per row, the median of the other rows' positive values (0 when there are none)."""
    order = np.sort(values[values > 0])
    if order.size <= 1:
        return np.zeros(values.size)
    rank = np.searchsorted(order, values)
    others = order.size - 1

    def other(j: int) -> np.ndarray:
        return np.where(j < rank, order[min(j, order.size - 1)], order[min(j + 1, order.size - 1)])
    middle = other(others // 2) if others % 2 else (other(others // 2 - 1) + other(others // 2)) / 2
    return np.where(values > 0, middle, float(np.median(order)))


def largest_without_each(values: np.ndarray) -> np.ndarray:
    """Per row, the largest value of the other rows."""
    if values.size < 2:
        return np.zeros(values.size)
    top = int(np.argmax(values))
    second = float(np.max(np.delete(values, top)))
    out = np.full(values.size, float(values[top]))
    out[top] = second
    return out


def consumers_of(edges: Edges) -> list[list[int]]:
    """Per row, the rows reading it (a stable sort of the edges by the row read)."""
    order = np.argsort(edges.read, kind="stable")
    bounds = np.searchsorted(edges.read[order], np.arange(edges.count + 1)).tolist()
    readers = edges.reader[order].tolist()
    return [readers[bounds[i]:bounds[i + 1]] for i in range(edges.count)]


def downstream(consumers, sources: list[int]) -> np.ndarray:
    """Rows that read, directly or not, one of ``sources`` (the sources included)."""
    reached = [False] * len(consumers)
    for source in sources:
        reached[source] = True
    todo = list(sources)
    while todo:
        for consumer in consumers[todo.pop()]:
            if not reached[consumer]:
                reached[consumer] = True
                todo.append(consumer)
    return np.array(reached, dtype=bool)


def downstream_of(ev: Evidence, sources: list[int]) -> np.ndarray:
    """``downstream``, cached per set of sources (the margin's readings mostly name the
    same ones); in row order every row after the first source."""
    key = tuple(sources)
    found = ev.reached.get(key)
    if found is None and not ev.by_graph:
        found = ev.reached[key] = np.arange(ev.cos.size) >= min(sources)
    if found is None:
        if not ev.consumers:
            ev.consumers.extend(consumers_of(ev.edges))
        found = ev.reached[key] = downstream(ev.consumers, sources)
    return found


def first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None
