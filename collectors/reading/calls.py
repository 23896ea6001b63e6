"""The rows of a per-layer table as calls in the model's data flow (knowledge.md §18 R5.1,
R5.5): which compared rows each row reads, and which quantizer its output passes through.

Edges come from ``layer_calls.csv`` where it lies beside the table (the probe's record of
each call's inputs, by tensor identity, every argument), else from ``fx_graph.txt`` (the
profiler's), else each row reads the row printed before it (the row-order fallback, said).
A table partly mapped onto the graph is read along the graph where it is mapped; an
unmapped row reads the row printed before it, and the unmapped rows are counted.

Rows whose output passes through one quantizer object are one candidate for a fault: a
conv and the ReLU6 after it, a pool or flatten reusing its input's quantizer, the views of
an attention's v (``groups``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Edges:
    """Which compared rows each compared row reads (positions into the compared rows), as
    two arrays of edges: ``reader[k]`` reads ``read[k]``, sorted by reader."""
    count: int
    reader: np.ndarray
    read: np.ndarray
    by_graph: bool                  # False: the row-order fallback
    unmapped: int = 0               # rows that map to no call of the graph
    source: str = "row_order"       # layer_calls | fx_graph | row_order
    unmapped_rows: np.ndarray | None = None     # bool per row, where some are unmapped
    quantizers: tuple[str, ...] = ()            # per row, its output quantizer ("": none)

    def inputs_of(self, row: int) -> list[int]:
        start, end = np.searchsorted(self.reader, (row, row + 1))
        return self.read[start:end].tolist()

    @property
    def has_inputs(self) -> np.ndarray:
        return np.bincount(self.reader, minlength=self.count) > 0

    @property
    def inputs(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(self.inputs_of(i)) for i in range(self.count))

    @property
    def mapped(self) -> int:
        return self.count - self.unmapped if self.by_graph else 0

    @property
    def groups(self) -> np.ndarray:
        """Per row, the first row (in table order) whose output passes through the same
        quantizer: the row itself where it has none of its own or shares none."""
        heads = np.arange(self.count, dtype=np.intp)
        first: dict[str, int] = {}
        for row, quantizer in enumerate(self.quantizers):
            if quantizer:
                heads[row] = first.setdefault(quantizer, row)
        return heads


def row_order_edges(count: int) -> Edges:
    return Edges(count, np.arange(1, max(count, 1), dtype=np.intp),
                 np.arange(0, max(count - 1, 0), dtype=np.intp), by_graph=False)


def edges_of(inputs: list[tuple[int, ...]], source: str, unmapped_rows: np.ndarray,
             quantizers: list[str] | None = None) -> Edges:
    sizes = np.fromiter((len(r) for r in inputs), dtype=np.intp, count=len(inputs))
    reader = np.repeat(np.arange(len(inputs), dtype=np.intp), sizes)
    read = np.fromiter((i for r in inputs for i in r), dtype=np.intp, count=int(sizes.sum()))
    return Edges(len(inputs), reader, read, True, int(unmapped_rows.sum()), source,
                 unmapped_rows, tuple(quantizers or ()))


def _with_fallback(reads: dict[int, tuple[int, ...]], count: int) -> list[tuple[int, ...]]:
    """Each row's inputs; a row the graph does not carry reads the row printed before it."""
    return [reads[p] if p in reads else (() if p == 0 else (p - 1,)) for p in range(count)]


def graph_edges(graph, names: list[str]) -> Edges | None:
    """The rows each row reads, from ``graph`` (collectors.reading.fx_graph.Graph): a row
    ``name(n)`` is the n-th call of its module; nodes without a row are looked through to
    the nearest rows, every input kept. None when fewer than two rows are nodes of it (the
    graph of another model)."""
    node_row: dict[str, int] = {}
    for position, name in enumerate(names):
        node = graph.node_of_row(name) if name else None
        if node is not None:
            node_row.setdefault(node, position)
    if len(node_row) < 2:
        return None
    # per graph node, the compared rows it carries or, looked through, its producers do;
    # a node with one producer shares that producer's tuple (no copy along a chain)
    frontier: dict[str, tuple[int, ...]] = {}
    reads: dict[int, tuple[int, ...]] = {}
    for node, producers in graph.producers.items():
        if len(producers) == 1:
            upstream = frontier.get(producers[0], ())
        else:
            upstream = tuple(dict.fromkeys(row for producer in producers
                                           for row in frontier.get(producer, ())))
        own = node_row.get(node)
        if own is not None:
            reads.setdefault(own, tuple(r for r in upstream if r != own))
            frontier[node] = (own,)
        else:
            frontier[node] = upstream
    unmapped = np.array([p not in reads for p in range(len(names))], dtype=bool)
    row_node = {row: node for node, row in node_row.items()}
    quantizers = [graph.quantizer_of(row_node.get(p)) for p in range(len(names))]
    return edges_of(_with_fallback(reads, len(names)), "fx_graph", unmapped, quantizers)


def layer_calls_edges(calls: dict, names: list[str]) -> Edges | None:
    """The rows each row reads, from layer_calls.csv's calls by row name: an input row
    without a compared row (no metrics) is looked through to the rows it reads. None when
    no row is a call of the file."""
    position: dict[str, int] = {}
    for p, name in enumerate(names):
        if name:
            position.setdefault(name, p)
    if not any(name in calls for name in position):
        return None
    # in file order: a call's inputs are earlier rows, looked through before it is
    stands: dict[str, tuple[int, ...]] = {name: (p,) for name, p in position.items()}
    for name, call in calls.items():
        if name not in stands:
            stands[name] = tuple(dict.fromkeys(r for i in call.inputs
                                               for r in stands.get(i, ())))

    def compared(name: str) -> tuple[int, ...]:
        return stands.get(name, ())

    reads: dict[int, tuple[int, ...]] = {}
    for p, name in enumerate(names):
        call = calls.get(name)
        if call is not None:
            reads[p] = tuple(r for r in dict.fromkeys(x for i in call.inputs
                                                      for x in compared(i)) if r != p)
    unmapped = np.array([p not in reads for p in range(len(names))], dtype=bool)
    found = [calls.get(name) for name in names]
    quantizers = [c.output_quantizer if c else "" for c in found]
    return edges_of(_with_fallback(reads, len(names)), "layer_calls", unmapped, quantizers)
