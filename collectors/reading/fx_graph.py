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
    # the probe's graph says which compare_per_layer row each node reports as (mod_name)
    row_nodes: dict[str, str] = field(default_factory=dict)      # mod_name -> node name

    # built on first use, after loading: (target -> its order, [targets in order],
    # dotted suffix -> order of the first target ending in it)
    _suffixes: tuple | None = field(default=None, repr=False, compare=False)

    def node_of_row(self, layer: str) -> str | None:
        """The node a compare_per_layer row reports: as the graph names it where it says
        (the probe's ``mod_name`` column), else by its module path."""
        if self.row_nodes:
            return self.row_nodes.get(layer)
        return self.node_for_layer(layer)

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
    row_at = lower.index("mod_name") if "mod_name" in lower else None
    graph, hints = Graph(), []
    for line, cells in rows:
        if len(cells) <= args_at:
            continue
        name, opcode, target, args = cells[name_at], cells[op_at], cells[target_at], cells[args_at]
        graph.nodes[name] = {"opcode": opcode, "target": target, "line": line}
        if row_at is not None and len(cells) > row_at and cells[row_at].strip():
            graph.row_nodes.setdefault(cells[row_at].strip(), name)
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
