"""fx_graph.txt (written by prepare): the data-flow graph, and deploy-only hints.

Rows are ``opcode name target args kwargs``; args name the producer nodes, so the graph
is a DAG, not a chain. Memory addresses in targets differ per process and are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import simple_table

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEPLOY = re.compile(r"deploy|getenv|environ|is_export|export_mode|onnx|tracing", re.I)


@dataclass
class Graph:
    nodes: dict[str, dict] = field(default_factory=dict)        # name -> row
    producers: dict[str, list[str]] = field(default_factory=dict)
    by_target: dict[str, str] = field(default_factory=dict)      # module path -> node name

    # built on first use, after loading: (target -> its order, [targets in order],
    # dotted suffix -> order of the first target ending in it)
    _suffixes: tuple | None = field(default=None, repr=False, compare=False)

    def node_for_layer(self, layer: str) -> str | None:
        """The node of a compare_per_layer mod_name: the exact target, else the first target
        (in graph order) that ends the name or that the name ends, at a '.'.

        Dictionary look-ups of the name's dotted suffixes: linear in the graph size overall,
        where comparing every layer with every target was quadratic.
        """
        if layer in self.by_target:
            return self.by_target[layer]
        if self._suffixes is None:
            self._suffixes = self._suffix_index()
        order, targets, ends = self._suffixes
        found = [order[layer[i + 1:]] for i, ch in enumerate(layer)
                 if ch == "." and layer[i + 1:] in order]
        if layer in ends:
            found.append(ends[layer])
        if found:
            return self.by_target[targets[min(found)]]
        return layer if layer in self.nodes else None

    def _suffix_index(self):
        targets = list(self.by_target)
        order = {t: i for i, t in enumerate(targets)}
        ends: dict[str, int] = {}
        for i, target in enumerate(targets):
            for at, ch in enumerate(target):
                if ch == ".":
                    ends.setdefault(target[at + 1:], i)
        return order, targets, ends


def load_graph(path: Path) -> tuple[Graph, list[dict]]:
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == "Graph:"), 0)
    parsed = simple_table(lines, start)
    if parsed is None:
        raise ValueError(reason("no 'opcode name target args kwargs' table found"))
    _, header, rows = parsed
    lower = [h.lower() for h in header]
    for need in ("opcode", "name", "target", "args"):
        if need not in lower:
            raise ValueError(reason("no {column} column (columns: {columns})", column=need,
                                    columns=", ".join(header)))
    op_at, name_at, target_at, args_at = (lower.index(k) for k in ("opcode", "name", "target", "args"))
    graph, hints = Graph(), []
    for line, cells in rows:
        if len(cells) <= args_at:
            continue
        name, opcode, target, args = cells[name_at], cells[op_at], cells[target_at], cells[args_at]
        graph.nodes[name] = {"opcode": opcode, "target": target, "line": line}
        graph.producers[name] = [t for t in _NAME.findall(args) if t in graph.nodes and t != name]
        if opcode in ("call_module", "get_attr"):
            graph.by_target.setdefault(target, name)
        elif opcode == "call_method" and graph.producers[name]:
            # a FloatFunctional op: get_attr of the module, then call_method on it
            owner = graph.nodes.get(graph.producers[name][0], {})
            if owner.get("opcode") == "get_attr":
                graph.by_target[owner["target"]] = name
        if _DEPLOY.search(name) or (opcode != "call_module" and _DEPLOY.search(target)):
            hints.append({"node": name, "target": target[:120], "line": line})
    return graph, hints


def graph_origin(graph: Graph, layers: list[tuple[int, str, bool]]) -> int | None:
    """First bad layer (in execution order) whose nearest known producers are all fine.

    ``layers`` is (position, mod_name, is_bad) for rows with metrics. Producers that have
    no compared row are looked through, up to the nearest compared ones.
    """
    status: dict[str, bool] = {}
    nodes = []
    for _, layer, bad in layers:
        node = graph.node_for_layer(layer) if layer else None
        nodes.append(node)
        if node is not None:
            status[node] = status.get(node, False) or bad
    upstream = _bad_upstream(graph, status)
    for (position, _, bad), node in zip(layers, nodes, strict=True):
        if bad and node is not None and not upstream.get(node, False):
            return position
    return None


def _bad_upstream(graph: Graph, status: dict[str, bool]) -> dict[str, bool]:
    """node -> whether one of its nearest compared producers is bad.

    Producers always come earlier in the file (args name nodes already read), so one pass
    in graph order computes it for every node, each edge looked at once.
    """
    upstream: dict[str, bool] = {}
    for node, producers in graph.producers.items():
        upstream[node] = any(status[p] if p in status else upstream.get(p, False)
                             for p in producers)
    return upstream
