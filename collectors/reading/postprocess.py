"""Post-processing inside the analysed model as a region (knowledge.md §18 R5.4).

The region starts at each selection op (topk, argmax, argmin, sort, nms, max/min whose
indices are read) and covers every row that reads one of its rows, directly or through
other rows. Rows in the region are out of the origin search and never read as clean;
measured fixes are measured on the tensors entering it (``region_entries``).

Rows are positions into a table's rows; ``op_types[i]`` is row i's op type as the table
prints it (``torch.topk``, ``torch.Tensor.max``, ``<built-in method argmax ...>``, ``gather``)
and ``inputs[i]`` the positions row i reads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

from qcdoctor.collectors.reading.lut_ops import op_word

# ops whose output is (or carries) indices picked by value: post-processing starts here
SELECTION_OPS: frozenset[str] = frozenset({
    "topk", "argmax", "argmin", "sort", "argsort", "msort", "nms", "batched_nms",
    "batchednms", "multiclass_nms", "multiclassnms", "nms_rotated", "max_indices",
    "min_indices", "nonzero", "argwhere"})
# ops that read a tensor at given indices: a max/min read by one of them returned indices
INDEX_READERS: frozenset[str] = frozenset({
    "gather", "gather_nd", "index_select", "take", "take_along_dim", "__getitem__",
    "getitem", "index", "index_put", "index_put_", "index_add", "masked_select"})
# max/min return indices only when called with a dim: known from what reads them
_MAX_MIN = frozenset({"max", "min"})


def op_name(op_type: str) -> str:
    """An op type's last name part, lower case: ``torch.Tensor.topk`` -> ``topk``."""
    return op_word(op_type or "")


def postprocess_region(op_types: Sequence[str], inputs: Sequence[Sequence[int]]
                       ) -> frozenset[int]:
    """Rows (positions) in the post-processing region (knowledge.md R5.4): every selection
    row, and every row that reads, directly or through other rows, a row of the region.

    A ``max``/``min`` row is a selection when an index reader (gather, indexing, ...) reads
    it: its indices are used. Linear in the rows and edges."""
    words = [op_name(op) for op in op_types]
    consumers = _consumers(len(words), inputs)
    start = [row for row, word in enumerate(words) if word in SELECTION_OPS or (
        word in _MAX_MIN and any(words[c] in INDEX_READERS for c in consumers[row]))]
    return _reached(start, consumers)


def reaching(seeds: Iterable[int], inputs: Sequence[Sequence[int]]) -> frozenset[int]:
    """``seeds`` and every row that reads one of them, directly or through other rows."""
    return _reached(list(seeds), _consumers(len(inputs), inputs))


def _consumers(count: int, inputs: Sequence[Sequence[int]]) -> list[list[int]]:
    consumers: list[list[int]] = [[] for _ in range(count)]
    for row, read in enumerate(inputs[:count]):
        for source in read:
            if 0 <= source < count and source != row:
                consumers[source].append(row)
    return consumers


def _reached(start: list[int], consumers: list[list[int]]) -> frozenset[int]:
    region = set(start)
    todo = list(start)
    while todo:
        for consumer in consumers[todo.pop()]:
            if consumer not in region:
                region.add(consumer)
                todo.append(consumer)
    return frozenset(region)


def region_entries(region: frozenset[int], inputs: Sequence[Sequence[int]]) -> list[int]:
    """Rows outside the region that a row inside it reads: the tensors entering the
    region, where measured fixes are measured (in row order)."""
    entries = {source for row in region if row < len(inputs) for source in inputs[row]
               if source not in region}
    return sorted(entries)


def graph_region(graph) -> frozenset[str]:
    """The nodes of a data-flow graph (collectors.reading.fx_graph.Graph) in its post-
    processing region: selection ops that have no row of their own (a ``topk`` whose
    values and indices the table shows as the rows reading it) start it there too."""
    nodes = list(graph.nodes)
    at = {node: i for i, node in enumerate(nodes)}
    ops = [graph.nodes[n]["target"] if graph.nodes[n]["opcode"] in ("call_function",
                                                                    "call_method") else ""
           for n in nodes]
    inputs = [[at[p] for p in graph.producers.get(n, ()) if p in at] for n in nodes]
    return frozenset(nodes[i] for i in postprocess_region(ops, inputs))


# rows whose outputs are integers or indices by their name or op type (comparisons, index
# picks): no quantization error to read, wherever they lie
_INDEX_NAMES = re.compile(r"(?:^|[._])(?:topk|argmax|argmin|argsort|sort|nms|batched_nms|"
                          r"multiclass_nms|eq|ne|gt|ge|lt|le|where|nonzero|masked_select|"
                          r"greater|less|equal|index_select|gather_nd|max_indices|"
                          r"searchsorted|unique|bucketize)(?:_\d+)?$", re.I)
_INDEX_TYPES = re.compile(r"topk|argmax|argmin|argsort|\bsort\b|nms|searchsorted|"
                          r"\bunique\b|bucketize|nonzero", re.I)
_INTEGER_DTYPE = re.compile(r"(?:torch\.)?(?:u?int\d+|long|bool)", re.I)


def index_output_rows(names: list[str], op_types: list[str], dtypes: list[str]) -> np.ndarray:
    """Rows of ops that pick, sort or compare (integer or index outputs). Each distinct
    last name part and (op type, dtype) pair is tested once (tables repeat them), and rows
    are looked at one by one only when one of them says so."""
    lasts = [name.rpartition(".")[2] for name in names]
    named = {last for last in set(lasts) if _INDEX_NAMES.search(last)}
    flags = np.fromiter((last in named for last in lasts), dtype=bool, count=len(names)) \
        if named else np.zeros(len(names), dtype=bool)
    pairs = list(zip(op_types, dtypes, strict=True))
    typed = {(op, dtype) for op, dtype in set(pairs)
             if (op and _INDEX_TYPES.search(op)) or
             (dtype and _INTEGER_DTYPE.fullmatch(dtype.strip()))}
    if typed:
        flags |= np.fromiter((pair in typed for pair in pairs), dtype=bool, count=len(names))
    return flags
