"""fx_graph.txt of a GraphModule, in the layout prepare() writes and
collectors/reading/fx_graph.py reads: a ``Graph:`` line, then a fixed-width table ``opcode name
target args kwargs`` under a dashed rule (column boundaries at the dashes); args name the
producer nodes.

One column more, ``mod_name``: the compare_per_layer row each node reports as (a module's
qualified name, a function node's module path like ``features.stage3.unit1.add``), empty
for nodes with no row of their own (quantizers, shape queries). Readers that look only
for the five standard columns ignore it.
"""

from __future__ import annotations

import weakref
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


# GraphModule -> (its graph and code, the names, the text): a probe run again on the same
# model writes the same text without walking the graph again
_TEXTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def write_fx_graph(path: Path, gm: torch.fx.GraphModule, names: dict) -> Path:
    """Write ``gm``'s graph to ``path``; ``names``: node -> its row name."""
    known = _TEXTS.get(gm)
    code = (id(gm.graph), len(gm.graph.nodes), gm.code)
    if known is not None and known[0] == code and known[1] == names:
        text = known[2]
    else:
        text = fx_graph_text(gm, names)
        _TEXTS[gm] = (code, dict(names), text)
    Path(path).write_text(text, encoding="utf-8")
    return path


def fx_graph_text(gm: torch.fx.GraphModule, names: dict) -> str:
    rows = graph_rows(gm, names)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(HEADER)]
    # one format per line (str.format pads as ljust does; braces in cells are arguments)
    line = "  ".join(f"{{:<{w}}}" for w in widths).format
    lines = ["Graph:", line(*HEADER).rstrip(), "  ".join("-" * w for w in widths)]
    lines += [line(*r).rstrip() for r in rows]
    return "\n".join(lines) + "\n"
