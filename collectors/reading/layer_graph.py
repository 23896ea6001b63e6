"""The per-layer table read as a graph (knowledge.md §17 R4.1, R4.2): each compared row is
read against the rows it reads, not against the row printed before it.

Rows are nodes of the model's data-flow graph. ``fx_graph.txt`` (the profiler's, or the
probe's with its ``mod_name`` column) says which nodes each node reads; nodes without a
row of their own (quantizers, shape queries, views) are looked through to the nearest
compared rows. Without a graph, each row reads the compared row printed before it (the
row-order fallback, said in the report).

The reading, with ``c_in`` the lowest Cosine of the rows a row reads (1 for a row reading
only graph inputs) and its *step* ``c_in - Cosine``:

- the clean band: Cosine >= ``cosine_good`` and Atol <= ``band_steps`` quantization steps
  (a missing number passes);
- a **source** leaves the band while every row it reads is inside it, by a step that
  stands out (``cosine_drop``: step >= ``cliff_drop``; ``dominant_step``: step >=
  ``dominance`` x the median of the other rows' steps, or, where every row is within the
  band's steps and above ``1 - cliff_drop``, ``dominance`` x every other step; ``atol_jump``: Atol >= ``atol_jump_steps`` and
  ``atol_jump`` x the largest Atol it reads), and its error is kept (a row reading it is
  out of the band too, or nothing reads it: a logits row whose softmax takes the error
  back is no source);
- where the probe measured a layer's **own error** (``layer_own_error.csv``: the layer run
  on the baseline's inputs), it decides: a source is a row whose own error leaves the
  band and stands out (``dominance`` x the 90th percentile of the others' own losses, or
  ``cliff_drop``) and is kept, whatever its inputs; measured sources come largest first,
  and one below ``cliff_drop`` and a ``dominance``-squared share of the largest is dropped;
  a row with a small own error is propagation;
- a row reading a row out of the band is **propagation**, however large its drop (a pooled
  or gated branch can lose more Cosine than the source did). In the row-order fallback a
  second source on such a row needs a drop ``dominance`` x the one just before it, at least
  ``cliff_drop`` and ``source_growth`` x the loss it reads;
- with no source: a drop on a row reading out-of-band rows by ``cliff_drop``, ``dominance``
  x the typical step and ``source_growth`` x the loss it reads is a step on top of an
  accumulation (``accumulation_with_step``, unproven without its own error); otherwise
  every row within the band's steps (its own error's, where measured) and the lowest
  Cosine above ``1 - cliff_drop`` is quantization **noise**, anything more is
  **accumulation** (``gradual``);
- post-processing rows (topk, argmax, sort, nms, comparisons, index outputs) are left out.

The **margin**: the reading is repeated with each deciding threshold 10 % lower and
higher; where one of them reads another pattern or origin, the verdict is borderline.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds

# ops that pick, sort or compare: integer or index outputs, no quantization fault
_POSTPROCESS = re.compile(r"(?:^|[._])(?:topk|argmax|argmin|argsort|sort|nms|batched_nms|"
                          r"multiclass_nms|eq|ne|gt|ge|lt|le|where|nonzero|masked_select|"
                          r"greater|less|equal|index_select|gather_nd|max_indices|"
                          r"searchsorted|unique|bucketize)(?:_\d+)?$", re.I)
_POSTPROCESS_TYPES = re.compile(r"topk|argmax|argmin|argsort|\bsort\b|nms|searchsorted|"
                                r"\bunique\b|bucketize|nonzero", re.I)
_INTEGER_DTYPE = re.compile(r"(?:torch\.)?(?:u?int\d+|long|bool)", re.I)
MARGIN = 0.1                # a verdict that this change of a deciding number flips: borderline
_DECIDING = ("cosine_good", "cliff_drop", "band_steps", "dominance", "source_growth",
             "atol_jump", "atol_jump_steps")
OWN_HIGH = 0.9              # the others' own losses a source's stands above: this quantile
MAX_INPUTS = 64             # rows a row reads, at most (a concat of hundreds reads them all)


@dataclass(frozen=True)
class Edges:
    """Which compared rows each compared row reads (positions into the compared rows), as
    two arrays of edges: ``reader[k]`` reads ``read[k]``, sorted by reader."""
    count: int
    reader: np.ndarray
    read: np.ndarray
    by_graph: bool                  # False: the row-order fallback
    unmapped: int = 0               # rows whose name no graph node carries

    def inputs_of(self, row: int) -> list[int]:
        start, end = np.searchsorted(self.reader, (row, row + 1))
        return self.read[start:end].tolist()

    @property
    def has_inputs(self) -> np.ndarray:
        return np.bincount(self.reader, minlength=self.count) > 0

    @property
    def inputs(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(self.inputs_of(i)) for i in range(self.count))


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


@dataclass
class GraphReading:
    pattern: str        # cliff | two_sources | accumulation_with_step | gradual | noise
                        # | outlier | none
    sources: list[int]  # rows (compared positions) that are sources, in order
    fired: list[str]    # what made each source one
    start: int | None   # the first row out of the band, in graph order
    second_step: int | None = None  # accumulation_with_step: the step on top of it
    borderline: bool = False
    flips: list[str] = field(default_factory=list)   # thresholds whose 10 % change flips it
    step: np.ndarray = field(default_factory=lambda: np.zeros(0))
    c_in: np.ndarray = field(default_factory=lambda: np.zeros(0))
    typical: float = 0.0
    own_decided: bool = False       # the own error decided the sources

    @property
    def origin(self) -> int | None:
        if self.sources:
            return self.sources[0]
        return self.second_step if self.pattern == "accumulation_with_step" else self.start

    @property
    def second(self) -> int | None:
        return self.sources[1] if len(self.sources) > 1 else None


# -- edges -----------------------------------------------------------------------------

def row_order_edges(count: int) -> Edges:
    return Edges(count, np.arange(1, max(count, 1), dtype=np.intp),
                 np.arange(0, max(count - 1, 0), dtype=np.intp), by_graph=False)


def _edges(inputs: list[tuple[int, ...]], by_graph: bool, unmapped: int = 0) -> Edges:
    sizes = np.fromiter((len(r) for r in inputs), dtype=np.intp, count=len(inputs))
    reader = np.repeat(np.arange(len(inputs), dtype=np.intp), sizes)
    read = np.fromiter((i for r in inputs for i in r), dtype=np.intp, count=int(sizes.sum()))
    return Edges(len(inputs), reader, read, by_graph, unmapped)


def graph_edges(graph, names: list[str]) -> Edges | None:
    """The rows each row reads, from ``graph`` (collectors.reading.fx_graph.Graph); None when too
    few rows are nodes of it to read the table as a graph (another model's graph)."""
    node_row: dict[str, int] = {}
    unmapped = 0
    for position, name in enumerate(names):
        node = graph.node_of_row(name) if name else None
        if node is None:
            unmapped += 1
        else:
            node_row.setdefault(node, position)
    if not names or len(node_row) < max(2, 0.8 * len(names)):
        return None
    # per graph node, the compared rows it carries or, looked through, its producers do
    frontier: dict[str, tuple[int, ...]] = {}
    reads: dict[int, tuple[int, ...]] = {}
    for node, producers in graph.producers.items():
        upstream: list[int] = []
        for producer in producers:
            for row in frontier.get(producer, ()):
                if row not in upstream:
                    upstream.append(row)
        upstream = upstream[:MAX_INPUTS]
        own = node_row.get(node)
        if own is not None:
            reads.setdefault(own, tuple(r for r in upstream if r != own))
            frontier[node] = (own,)
        else:
            frontier[node] = tuple(upstream)
    inputs = []
    for position in range(len(names)):
        if position in reads:
            inputs.append(reads[position])
        else:       # not a node of the graph: the row before it, as the fallback reads
            inputs.append(() if position == 0 else (position - 1,))
    return _edges(inputs, True, unmapped)


def postprocess_rows(names: list[str], op_types: list[str], dtypes: list[str]) -> np.ndarray:
    """Rows of ops that pick, sort or compare (integer or index outputs). Each distinct
    last name part and (op type, dtype) pair is tested once (tables repeat them), and rows
    are looked at one by one only when one of them says so."""
    lasts = [name.rpartition(".")[2] for name in names]
    named = {last for last in set(lasts) if _POSTPROCESS.search(last)}
    flags = np.fromiter((last in named for last in lasts), dtype=bool, count=len(names)) \
        if named else np.zeros(len(names), dtype=bool)
    pairs = list(zip(op_types, dtypes, strict=True))
    typed = {(op, dtype) for op, dtype in set(pairs)
             if (op and _POSTPROCESS_TYPES.search(op)) or
             (dtype and _INTEGER_DTYPE.fullmatch(dtype.strip()))}
    if typed:
        flags |= np.fromiter((pair in typed for pair in pairs), dtype=bool, count=len(names))
    return flags


# -- the reading ------------------------------------------------------------------------

@dataclass(frozen=True)
class _Rows:
    """The per-row numbers a reading needs, computed once for every threshold tried."""
    cos: np.ndarray
    qsteps: np.ndarray
    edges: Edges
    consumers: list              # per row, the rows reading it (built when first needed)
    reader: np.ndarray          # per edge: the row that reads ...
    read: np.ndarray            # ... the row it reads
    c_in: np.ndarray            # lowest Cosine read (1: none)
    q_in: np.ndarray            # largest Atol in steps read (nan: none known)
    cos_in_known: np.ndarray    # bool: some row read has a Cosine
    by_graph: bool
    own: OwnError | None
    # what no threshold changes, computed once for the margin's readings
    step: np.ndarray            # the Cosine a row loses against the lowest it reads
    typical: np.ndarray         # per row, the median of the other rows' steps
    largest_other: np.ndarray   # per row, the largest of the other rows' steps
    own_decides: np.ndarray     # bool: the row's own error is measured
    own_loss: np.ndarray        # 1 - own Cosine where measured, else 0
    own_high: np.ndarray        # per row, the others' own losses' OWN_HIGH quantile
    reached: dict = field(default_factory=dict)    # sources -> the rows reading them


def _rows(cos, qsteps, edges: Edges, own: OwnError | None) -> _Rows:
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
        # rounding everywhere gives own losses a few times apart: a source stands above
        # the others' high end, not their median
        own_high = quantile_without_each(np.maximum(own_loss, 0.0), OWN_HIGH)
    else:
        own_decides = np.zeros(count, dtype=bool)
        own_loss = own_high = np.zeros(count)
    return _Rows(cos, qsteps, edges, [], reader, read, c_in, q_in, known, edges.by_graph,
                 own, step, median_without_each(step), _largest_without_each(step),
                 own_decides, own_loss, own_high)


def read_graph(cos: np.ndarray, qsteps: np.ndarray, edges: Edges,
               own: OwnError | None = None, limits: Thresholds = DEFAULT,
               left_out: np.ndarray | None = None) -> GraphReading:
    """The pattern of one table (``cos``, ``qsteps`` per compared row, NaN: none) read
    along ``edges``, with its margin."""
    cos = np.asarray(cos, dtype=float).copy()
    qsteps = np.asarray(qsteps, dtype=float).copy()
    if left_out is not None and left_out.any():
        cos[left_out] = np.nan          # post-processing: read through, never a source
        qsteps[left_out] = np.nan
    rows = _rows(cos, qsteps, edges, own)
    reading = _read(rows, limits)
    for name in _DECIDING:
        for factor in (1 - MARGIN, 1 + MARGIN):
            other = _read(rows, _scaled(limits, name, factor))
            if (other.pattern, other.origin) != (reading.pattern, reading.origin) and \
                    name not in reading.flips:
                reading.flips.append(name)
    reading.borderline = bool(reading.flips)
    return reading


def _scaled(limits: Thresholds, name: str, factor: float) -> Thresholds:
    value = getattr(limits, name)
    if name == "cosine_good":       # the band's loss, 1 - cosine_good, is the number
        return replace(limits, cosine_good=1.0 - (1.0 - value) * factor)
    return replace(limits, **{name: value * factor})


def _band(cos, qsteps, limits: Thresholds) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return (np.isnan(cos) | (cos >= limits.cosine_good)) & \
            (np.isnan(qsteps) | (qsteps <= limits.band_steps))


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


def quantile_without_each(values: np.ndarray, share: float) -> np.ndarray:
    """Per row, the ``share`` quantile (the lower value) of the other rows' values."""
    count = values.size
    if count < 2:
        return np.zeros(count)
    order = np.sort(values)
    rank = np.empty(count, dtype=np.intp)
    rank[np.argsort(values, kind="stable")] = np.arange(count)
    at = int(np.floor(share * (count - 2)))         # among the count - 1 others
    # without a row ranked at or below ``at`` the others' value there moves up by one
    return np.where(rank <= at, order[min(at + 1, count - 1)], order[at])


def _largest_without_each(values: np.ndarray) -> np.ndarray:
    """Per row, the largest value of the other rows."""
    if values.size < 2:
        return np.zeros(values.size)
    top = int(np.argmax(values))
    second = float(np.max(np.delete(values, top)))
    out = np.full(values.size, float(values[top]))
    out[top] = second
    return out


def _read(rows: _Rows, limits: Thresholds) -> GraphReading:
    cos, q = rows.cos, rows.qsteps
    band = _band(cos, q, limits)
    with np.errstate(invalid="ignore"):
        reads_clean = (rows.c_in >= limits.cosine_good) & \
            (np.isnan(rows.q_in) | (rows.q_in <= limits.band_steps))
        step, typical = rows.step, rows.typical
        jump = (q >= limits.atol_jump_steps) & ~np.isnan(rows.q_in) & \
            (q >= limits.atol_jump * rows.q_in)
    out = ~band
    kept = _kept(rows, out)
    # why a row stands out, as an index into _WHY (0: it does not)
    why = np.where(step >= limits.cliff_drop, 1,
                   np.where(jump & (cos < limits.cosine_good) | (jump & np.isnan(cos)), 2,
                            np.where((step > 0) & (step >= limits.dominance * typical), 3, 0)))
    standing_out = why != 0
    own_decides, own_loss, own_high = rows.own_decides, rows.own_loss, rows.own_high
    own_source = np.zeros(cos.size, dtype=bool)
    if rows.own is not None:
        own_out = ~_band(rows.own.cosine, rows.own.qsteps, limits) & own_decides
        own_source = own_out & ((own_loss >= limits.cliff_drop) |
                                (own_loss >= limits.dominance * own_high)) & out & kept
    # noise: every row within the band's steps (its own steps where measured: the table's
    # carry the rounding of every row before) and the lowest Cosine above 1 - cliff_drop
    steps_of = q if rows.own is None else np.where(rows.own.known, rows.own.qsteps, q)
    known_q = steps_of[~np.isnan(steps_of)]
    quiet = (known_q.size == 0 or float(known_q.max()) <= limits.band_steps) and \
        bool((~np.isnan(cos)).any()) and float(np.nanmin(cos)) >= 1.0 - limits.cliff_drop
    if quiet:
        # every row within the band's steps: a step stands out only above every other one
        # (a step twice the median is common in quantization noise)
        above_all = (step > 0) & (step >= limits.dominance * rows.largest_other)
        standing_out = standing_out & ((why != 3) | above_all)
    graph_source = out & reads_clean & standing_out & kept & ~own_decides
    source_rows = np.flatnonzero(graph_source | own_source)
    if rows.own is not None and source_rows.size > 1:
        source_rows = _largest_first(source_rows, np.where(own_source, own_loss, step), limits)
    fired = [("own_error" if own_source[i] else _WHY[why[i]]) for i in source_rows]
    if not rows.by_graph and source_rows.size:
        source_rows, fired = _row_order_second(rows, limits, source_rows, fired, step, out)
    start = _first(out & ~np.isnan(cos)) if out.any() else None
    reading = GraphReading("none", [int(i) for i in source_rows], fired, start, step=step,
                           c_in=rows.c_in,
                           typical=float(np.median(step[step > 0])) if (step > 0).any() else 0.0,
                           own_decided=bool(own_decides.any()))
    if not (cos < limits.cosine_good).any():
        outlier = np.flatnonzero(jump & reads_clean & ~np.isnan(q))
        if outlier.size:
            reading.pattern, reading.sources, reading.fired = "outlier", [int(outlier[0])], \
                ["atol_jump"]
        return reading
    if reading.sources:
        downstream = _downstream(rows, reading.sources)
        lasting = out & ~downstream & ~np.isnan(cos)
        lasting[reading.sources] = False
        if len(reading.sources) > 1:
            reading.pattern = "two_sources"
        elif int(lasting.sum()) >= 2 and _before(rows, lasting, reading.sources[0]):
            reading.pattern = "accumulation_with_step"
        else:
            reading.pattern = "cliff"
        return reading
    # no source: a step on top of an accumulation, noise, or accumulation
    with np.errstate(invalid="ignore"):
        on_top = out & ~reads_clean & (step >= limits.cliff_drop) & \
            (step >= limits.dominance * typical) & \
            (step >= limits.source_growth * (1.0 - rows.c_in)) & kept
    if on_top.any() and not own_decides.any():
        reading.pattern, reading.second_step = "accumulation_with_step", _first(on_top)
        reading.fired = ["cosine_drop"]
        return reading
    reading.pattern = "noise" if quiet else "gradual"
    return reading


_WHY = ("", "cosine_drop", "atol_jump", "dominant_step")


def _kept(rows: _Rows, out: np.ndarray) -> np.ndarray:
    """Per row, whether the rows reading it keep its error: one of them is out of the band
    too (a logits row whose softmax takes the error back is no source; a residual add
    that halves it keeps it); a row nothing reads keeps it."""
    count = rows.cos.size
    readers = np.bincount(rows.read, minlength=count)
    out_readers = np.bincount(rows.read, weights=out[rows.reader].astype(float),
                              minlength=count)
    return (readers == 0) | (out_readers > 0)


def _largest_first(sources: np.ndarray, loss: np.ndarray, limits: Thresholds) -> np.ndarray:
    """Measured sources by the error each makes, the largest first; a small one (below
    ``cliff_drop``) making less than a ``dominance``-squared share of the largest (a pooled
    vector's own rounding beside a clamp) is no source to fix beside it."""
    order = sorted(sources.tolist(), key=lambda i: (-loss[i], i))
    largest = loss[order[0]]
    return np.array([i for i in order if loss[i] >= limits.cliff_drop
                     or loss[i] * limits.dominance ** 2 >= largest], dtype=np.intp)


def _row_order_second(rows: _Rows, limits, sources, fired, step, out):
    """Row order: a drop on a row after the first source is a second source only when it
    is ``dominance`` x the drop just before it, ``cliff_drop`` and ``source_growth`` x the
    loss it reads (an interleaved branch's fall is not); a row right after another
    source is the same one."""
    first = int(sources[0])
    before = np.concatenate(([0.0], step[:-1]))
    with np.errstate(invalid="ignore"):
        candidate = out & (step >= limits.cliff_drop) & \
            (step >= limits.dominance * np.maximum(before, 1e-12)) & \
            (step >= limits.source_growth * (1.0 - rows.c_in))
    candidate[:first + 1] = False
    candidate[first] = True
    after_one = np.concatenate(([False], candidate[:-1]))
    later = np.flatnonzero(candidate & ~after_one)
    later = later[later > first]
    return np.concatenate(([first], later)).astype(np.intp), \
        [fired[0]] + ["cosine_drop"] * int(later.size)


def _downstream(rows: _Rows, sources: list[int]) -> np.ndarray:
    key = tuple(sources)
    found = rows.reached.get(key)
    if found is None and not rows.by_graph:     # each row reads the one before it
        found = rows.reached[key] = np.arange(rows.cos.size) >= min(sources)
    if found is None:       # the margin's readings mostly name the same sources
        if not rows.consumers:
            rows.consumers.extend(consumers_of(rows.edges))
        found = rows.reached[key] = downstream(rows.consumers, sources)
    return found


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


def _before(rows: _Rows, lasting: np.ndarray, source: int) -> bool:
    """Whether out-of-band rows not downstream of ``source`` lie upstream of it (the
    accumulation that a step lands on), or, in row order, before it."""
    if not rows.by_graph:
        return bool(lasting[:source].sum() >= 2)
    seen = np.zeros(rows.cos.size, dtype=bool)
    todo, count = rows.edges.inputs_of(source), 0
    while todo:
        row = todo.pop()
        if seen[row]:
            continue
        seen[row] = True
        count += bool(lasting[row])
        todo.extend(rows.edges.inputs_of(row))
    return count >= 2


def _first(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None
