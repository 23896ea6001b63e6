"""The per-layer table read as a graph (knowledge.md §17 R4.1, R4.2, §18 R5.1-R5.5): each
compared row is read against the rows it reads (collectors/reading/calls.py), not against
the row printed before it, by a few detectors, each owning its thresholds:

- detect_clean_source: a row leaving the clean band from clean inputs by a step that
  stands out (``cosine_drop``, ``atol_jump``, ``dominant_step``);
- detect_own_source: where the probe measured a call's own error, it decides that row;
- detect_accumulation: propagation, a step on top of an accumulation, accumulation, and
  the row-order fallback's second source;
- detect_noise: quantization noise;
- detect_outlier: an Atol outlier where no row falls below ``cosine_good``.

Sources whose outputs pass through one quantizer are one candidate, named at the first of
them (R5.1). Post-processing rows are out of the search and never clean (R5.4).

The **margin**: the reading is repeated with each deciding threshold 10 % lower and
higher, and, where some rows map to no call of the graph, with no source allowed at
those rows (``graph_rows``); where one of them reads another pattern or origin, the
verdict is borderline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from qcdoctor.collectors.reading import (
    detect_accumulation,
    detect_clean_source,
    detect_noise,
    detect_outlier,
    detect_own_source,
)
from qcdoctor.collectors.reading.calls import (  # noqa: F401 - where the edges are built
    Edges,
    graph_edges,
    row_order_edges,
)
from qcdoctor.collectors.reading.evidence import (  # noqa: F401 - the own error's home
    Evidence,
    OwnError,
    downstream_of,
    first,
    gather,
    in_band,
    kept,
    reads_clean,
)
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds

MARGIN = 0.1                # a verdict that this change of a deciding number flips: borderline
DECIDING = ("cosine_good", "cliff_drop", "band_steps", "dominance", "source_growth",
            "atol_jump", "atol_jump_steps")


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
    # per source (or the step on an accumulation, or noise): the comparison that decided
    # it, its numbers and the thresholds it used
    tests: list[str] = field(default_factory=list)

    @property
    def origin(self) -> int | None:
        if self.sources:
            return self.sources[0]
        return self.second_step if self.pattern == "accumulation_with_step" else self.start

    @property
    def second(self) -> int | None:
        return self.sources[1] if len(self.sources) > 1 else None


def read_graph(cos: np.ndarray, qsteps: np.ndarray, edges: Edges,
               own: OwnError | None = None, limits: Thresholds = DEFAULT,
               left_out: np.ndarray | None = None) -> GraphReading:
    """The pattern of one table (``cos``, ``qsteps`` per compared row, NaN: none) read
    along ``edges``, with its margin; ``left_out``: post-processing rows."""
    cos = np.asarray(cos, dtype=float).copy()
    qsteps = np.asarray(qsteps, dtype=float).copy()
    left_out = np.zeros(cos.size, dtype=bool) if left_out is None else left_out
    if left_out.any():
        cos[left_out] = np.nan          # post-processing: never a source, never clean
        qsteps[left_out] = np.nan
    ev = gather(cos, qsteps, edges, own, left_out)
    reading = _read(ev, limits)
    if edges.unmapped_rows is not None and edges.unmapped_rows.any():
        # an unmapped row's inputs are a guess (the row before it): a verdict resting on
        # one is borderline, settled by a graph that carries it
        other = _read(replace(ev, barred=edges.unmapped_rows, reached={}), limits)
        if (other.pattern, other.origin) != (reading.pattern, reading.origin):
            reading.flips.append("graph_rows")
    for name in DECIDING:
        for factor in (1 - MARGIN, 1 + MARGIN):
            other = _read(ev, _scaled(limits, name, factor))
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


def _read(ev: Evidence, limits: Thresholds) -> GraphReading:
    cos = ev.cos
    out = ~in_band(cos, ev.qsteps, limits)
    clean = reads_clean(ev, limits)
    keeps = kept(ev, out)
    quiet = detect_noise.quiet(ev, limits)
    graph_source, why = detect_clean_source.clean_sources(ev, limits, out, clean, keeps,
                                                           quiet)
    own_source = detect_own_source.own_sources(ev, limits, out, keeps)
    source_rows = np.flatnonzero(graph_source | own_source)
    if ev.own is not None and source_rows.size > 1:
        source_rows = detect_own_source.largest_first(
            source_rows, np.where(own_source, ev.own_loss, ev.step))
    fired = [("own_error" if own_source[i] else detect_clean_source.WHY[why[i]])
             for i in source_rows]
    if not ev.by_graph and source_rows.size:
        source_rows, fired = detect_accumulation.row_order_second(ev, limits, source_rows,
                                                                  fired, out)
    source_rows, fired = _one_per_quantizer(ev, source_rows, fired)
    start = first(out & ~np.isnan(cos)) if out.any() else None
    step = ev.step
    reading = GraphReading("none", [int(i) for i in source_rows], fired, start, step=step,
                           c_in=ev.c_in,
                           typical=float(np.median(step[step > 0])) if (step > 0).any() else 0.0,
                           own_decided=bool(ev.own_decides.any()))
    reading.tests = [_test(ev, limits, row, why) for row, why in zip(reading.sources, fired,
                                                                        strict=True)]
    if not (cos < limits.cosine_good).any():
        outlier = np.flatnonzero(detect_outlier.outliers(ev, limits, clean))
        if outlier.size:
            row = int(outlier[0])
            reading.pattern, reading.sources, reading.fired = "outlier", [row], ["atol_jump"]
            reading.tests = [_test(ev, limits, row, "atol_jump")]
        return reading
    if reading.sources:
        downstream = downstream_of(ev, reading.sources)
        lasting = out & ~downstream & ~np.isnan(cos)
        lasting[reading.sources] = False
        if len(reading.sources) > 1:
            reading.pattern = "two_sources"
        elif int(lasting.sum()) >= 2 and detect_accumulation.lands_on_accumulation(
                ev, lasting, reading.sources[0]):
            reading.pattern = "accumulation_with_step"
        else:
            reading.pattern = "cliff"
        return reading
    # no source: a step on top of an accumulation, noise, or accumulation
    on_top = detect_accumulation.step_on_accumulation(ev, limits, out, clean, keeps)
    if on_top.any() and not ev.own_decides.any():
        reading.pattern, reading.second_step = "accumulation_with_step", first(on_top)
        reading.fired = ["cosine_drop"]
        reading.tests = [detect_accumulation.test_of(ev, limits, reading.second_step)]
        return reading
    reading.pattern = "noise" if quiet else "gradual"
    if quiet:
        reading.tests = [detect_noise.test_of(ev, limits)]
    return reading


def _test(ev: Evidence, limits: Thresholds, row: int, why: str) -> str:
    if why == "own_error":
        return detect_own_source.test_of(ev, limits, row)
    return detect_clean_source.test_of(ev, limits, row, why)


def _one_per_quantizer(ev: Evidence, sources, fired) -> tuple[np.ndarray, list[str]]:
    """Sources whose outputs pass through one quantizer are one candidate (knowledge.md
    R5.1), named at the first of them in table order: a clamped quantizer shared by a conv
    and its ReLU6, or by a concat's inputs, damages each of them, one fault."""
    heads: dict[int, int] = {}          # quantizer group -> its first source in table order
    for source in sorted(sources.tolist()):
        heads.setdefault(int(ev.groups[source]), source)
    chosen: dict[int, str] = {}
    for source, why in zip(sources.tolist(), fired, strict=True):
        chosen.setdefault(heads[int(ev.groups[source])], why)
    return np.array(list(chosen), dtype=np.intp), list(chosen.values())
