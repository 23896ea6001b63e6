"""fx_graph.txt of a GraphModule, in the layout prepare() writes and
collectors/fx_graph.py reads: a ``Graph:`` line, then a fixed-width table ``opcode name
target args kwargs`` under a dashed rule (column boundaries at the dashes); args name the
producer nodes.

One column more, ``mod_name``: the compare_per_layer row each node reports as (a module's
qualified name, a function node's module path like ``features.stage3.unit1.add``), empty
for nodes with no row of their own (quantizers, shape queries). Readers that look only
for the five standard columns ignore it.
"""

from __future__ import annotations

from pathlib import Path

import torch

HEADER = ("opcode", "name", "target", "args", "kwargs", "mod_name")


def _text(value) -> str:
    return " ".join(str(value).split())


def graph_rows(gm: torch.fx.GraphModule, names: dict) -> list[tuple[str, ...]]:
    rows = []
    for node in gm.graph.nodes:
        rows.append((node.op, node.name, _text(node.target), _text(node.args), _text(node.kwargs),
                     names.get(node, "")))
    return rows


def write_fx_graph(path: Path, gm: torch.fx.GraphModule, names: dict) -> Path:
    """Write ``gm``'s graph to ``path``; ``names``: node -> its row name."""
    rows = graph_rows(gm, names)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADER)]
    # one format per line (str.format pads as ljust does; braces in cells are arguments)
    line = "  ".join(f"{{:<{w}}}" for w in widths).format
    lines = ["Graph:", line(*HEADER).rstrip(), "  ".join("-" * w for w in widths)]
    lines += [line(*r).rstrip() for r in rows]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
