"""fx_graph.txt (written by prepare): the data-flow graph, and deploy-only hints.

Rows are ``opcode name target args kwargs``; args and kwargs name the producer nodes, so
the graph is a DAG, not a chain. Memory addresses in targets differ per process and are
ignored. A module called several times has one node per call (``calls``): the table's
``name(n)`` row is its n-th call, 0-based (knowledge.md §18 R5.1). A quantizer module
(``activation_post_process_N``, a fake quant) called after several nodes is one quantizer
shared by all of them (``quantizer_of``).

Reading and matching are linear in the file size: names are matched by hashes of their
dotted suffixes, never by storing every suffix of every target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors.reasons import reason
from qcdoctor.collectors.tables import simple_table

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_DEPLOY = re.compile(r"deploy|getenv|environ|is_export|export_mode|onnx|tracing", re.I)
_CALL = re.compile(r"^(.*)\((\d+)\)$")
# quantizer modules torch.ao and the plugin insert: their output is a node's quantized output
_QUANTIZER = re.compile(r"(?:^|[._])(?:activation_post_process(?:_\d+)?|[a-z_]*fake_quant"
                        r"[a-z_]*|[a-z_]*observer[a-z_]*)$", re.I)
_PRIME = (1 << 61) - 1
_MIX = 0x9E3779B97F4A7C15 % _PRIME


def split_call(row_name: str) -> tuple[str, int]:
    """``head(2)`` -> (``head``, 2); a name without a call suffix is call 0."""
    found = _CALL.match(row_name)
    return (found.group(1), int(found.group(2))) if found else (row_name, 0)


def _suffix_hashes(text: str) -> list[int]:
    """Per dotted part j of ``text``, a hash of the suffix from part j on (right to left,
    each from the one after it: linear in the length)."""
    parts = text.split(".")
    out = [0] * len(parts)
    running = 0
    for j in range(len(parts) - 1, -1, -1):
        running = (running * _MIX + (hash(parts[j]) & 0xFFFFFFFFFFFF) + 1) % _PRIME
        out[j] = running
    return out


@dataclass
class Graph:
    nodes: dict[str, dict] = field(default_factory=dict)        # name -> row
    producers: dict[str, list[str]] = field(default_factory=dict)
    by_target: dict[str, str] = field(default_factory=dict)      # module path -> node name
    # module path -> its call nodes in graph order (a module called twice has two)
    calls: dict[str, list[str]] = field(default_factory=dict)
    # node -> the quantizer module (target) its output passes through
    quantized_by: dict[str, str] = field(default_factory=dict)
    # the probe's graph says which compare_per_layer row each node reports as (mod_name)
    row_nodes: dict[str, str] = field(default_factory=dict)      # mod_name -> node name
    short_lines: list[int] = field(default_factory=list)        # rows without their args

    # built on first use, after loading: (exact target hash -> orders, suffix hash ->
    # order of the first target ending in it, [targets in order])
    _suffixes: tuple | None = field(default=None, repr=False, compare=False)

    def node_of_row(self, layer: str) -> str | None:
        """The node a compare_per_layer row reports: as the graph names it where it says
        (the probe's ``mod_name`` column), else the n-th call of the module its name
        matches (``head(1)``: the second call), else the module's node."""
        if self.row_nodes:
            return self.row_nodes.get(layer)
        base, call = split_call(layer)
        target = self.target_for_layer(base)
        if target is None:
            return (layer if call == 0 else None) if layer in self.nodes else None
        calls = self.calls.get(target)
        if calls:
            return calls[call] if call < len(calls) else None
        return self.by_target[target] if call == 0 else None

    def quantizer_of(self, node: str | None) -> str:
        """The quantizer module a node's output passes through ("" for none known)."""
        return self.quantized_by.get(node, "") if node else ""

    def node_for_layer(self, layer: str) -> str | None:
        """The node of a compare_per_layer mod_name: the exact target, else the first target
        (in graph order) that ends the name or that the name ends, at a '.'."""
        target = self.target_for_layer(layer)
        if target is not None:
            return self.by_target[target]
        return layer if layer in self.nodes else None

    def target_for_layer(self, layer: str) -> str | None:
        if layer in self.by_target:
            return layer
        if self._suffixes is None:
            self._suffixes = self._suffix_index()
        exact, ends, targets = self._suffixes
        hashes = _suffix_hashes(layer)
        found = []
        starts = [i + 1 for i, ch in enumerate(layer) if ch == "."]
        for j, start in enumerate(starts, 1):       # the name's suffixes that are targets
            for order in exact.get(hashes[j], ()):
                if targets[order] == layer[start:]:
                    found.append(order)
                    break
        order = ends.get(hashes[0])                 # targets the name ends
        if order is not None and targets[order].endswith("." + layer):
            found.append(order)
        elif order is not None:                     # a hash collision: look the long way
            found += [i for i, t in enumerate(targets) if t.endswith("." + layer)][:1]
        return targets[min(found)] if found else None

    def _suffix_index(self):
        targets = list(self.by_target)
        exact: dict[int, list[int]] = {}
        ends: dict[int, int] = {}
        for i, target in enumerate(targets):
            hashes = _suffix_hashes(target)
            exact.setdefault(hashes[0], []).append(i)
            for value in hashes[1:]:
                ends.setdefault(value, i)
        return exact, ends, targets


def _producers(text: str, graph: Graph, name: str) -> list[str]:
    """The nodes a node's args or kwargs cell names, in order, each once (quoted strings,
    such as kwargs keys, are no nodes)."""
    found = dict.fromkeys(t for t in _NAME.findall(_QUOTED.sub(" ", text))
                          if t in graph.nodes and t != name)
    return list(found)


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
    kwargs_at = lower.index("kwargs") if "kwargs" in lower else None
    row_at = lower.index("mod_name") if "mod_name" in lower else None
    graph, hints = Graph(), []
    for line, cells in rows:
        if len(cells) <= args_at:           # a row cut short: the rest is read, this said
            graph.short_lines.append(line)
            continue
        name, opcode, target, args = cells[name_at], cells[op_at], cells[target_at], cells[args_at]
        if kwargs_at is not None and len(cells) > kwargs_at:
            args = f"{args} {cells[kwargs_at]}"
        graph.nodes[name] = {"opcode": opcode, "target": target, "line": line}
        if row_at is not None and len(cells) > row_at and cells[row_at].strip():
            graph.row_nodes.setdefault(cells[row_at].strip(), name)
        producers = graph.producers[name] = _producers(args, graph, name)
        if opcode == "call_module" and _QUANTIZER.search(target) and producers:
            graph.quantized_by.setdefault(producers[0], target)
        if opcode in ("call_module", "get_attr"):
            graph.by_target.setdefault(target, name)
            if opcode == "call_module":
                graph.calls.setdefault(target, []).append(name)
        elif opcode == "call_method" and producers:
            # a FloatFunctional op: get_attr of the module, then call_method on it
            owner = graph.nodes.get(producers[0], {})
            if owner.get("opcode") == "get_attr":
                graph.by_target[owner["target"]] = name
                graph.calls.setdefault(owner["target"], []).append(name)
        if _DEPLOY.search(name) or (opcode != "call_module" and _DEPLOY.search(target)):
            hints.append({"node": name, "target": target[:120], "line": line})
    return graph, hints
