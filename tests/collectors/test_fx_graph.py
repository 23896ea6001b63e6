"""fx_graph.txt: layer names map onto nodes as before, in time linear in the graph size."""

from __future__ import annotations

import time

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from qcdoctor.collectors.reading.calls import graph_edges
from qcdoctor.collectors.reading.fx_graph import Graph, load_graph
from qcdoctor.collectors.reading.layer_graph import read_graph
from tests.qa.writers import write_fx_graph


def _brute_force(graph: Graph, layer: str) -> str | None:
    """The original definition: the first target, in graph order, matching at a '.'."""
    if layer in graph.by_target:
        return graph.by_target[layer]
    for target, node in graph.by_target.items():
        if layer.endswith("." + target) or target.endswith("." + layer):
            return node
    return layer if layer in graph.nodes else None


_part = st.sampled_from(["a", "b", "conv", "head", "", "0"])
_name = st.lists(_part, min_size=1, max_size=4).map(".".join)


@settings(max_examples=200, deadline=None)
@given(targets=st.lists(_name, min_size=1, max_size=12), layers=st.lists(_name, max_size=12))
def test_layer_lookup_matches_the_definition(targets, layers):
    graph = Graph()
    for i, target in enumerate(targets):
        graph.nodes[f"n{i}"] = {"opcode": "call_module", "target": target, "line": i}
        graph.by_target.setdefault(target, f"n{i}")
    for layer in layers + targets + ["n0"]:
        assert graph.node_for_layer(layer) == _brute_force(graph, layer), layer


def _chain(n: int) -> list[tuple[str, str, str, str]]:
    nodes = [("placeholder", "input_0", "input_0", "()")]
    for i in range(n):
        nodes.append(("call_module", f"layer{i}_conv", f"backbone.layer{i}.conv",
                      f"({nodes[-1][1]},)"))
    return nodes + [("output", "output", "output", f"(({nodes[-1][1]},),)")]


def test_twenty_thousand_nodes_read_and_matched_in_linear_time(tmp_path):
    n = 20_000
    path = write_fx_graph(tmp_path / "fx_graph.txt", _chain(n))
    start = time.perf_counter()
    graph, _ = load_graph(path)
    # names that match no target by suffix: each used to be compared with every target
    assert graph_edges(graph, [f"model.other{i}" for i in range(n)]) is None
    names = [f"model.backbone.layer{i}.conv" for i in range(n)]
    edges = graph_edges(graph, names)
    cos = np.where(np.arange(n) >= n // 2, 0.9, 1.0)
    reading = read_graph(cos, np.full(n, np.nan), edges)
    assert reading.sources == [n // 2]              # the first bad one, its input fine
    elapsed = time.perf_counter() - start
    assert len(graph.nodes) == n + 2
    assert elapsed < 20, f"{elapsed:.1f} s: quadratic again? (was 4 minutes)"


def test_rows_are_read_against_their_nearest_compared_producers():
    graph = Graph()
    for name, producers in (("a", []), ("b", ["a"]), ("c", ["b"]), ("d", ["c"])):
        graph.nodes[name] = {"opcode": "call_module", "target": name, "line": 0}
        graph.producers[name] = producers
        graph.by_target[name] = name
    # b and c have no compared row: d reads a
    edges = graph_edges(graph, ["a", "d"])
    assert edges.inputs == ((), (0,))
    assert read_graph(np.array([0.9, 0.8]), np.full(2, np.nan), edges).sources == [0]
    assert read_graph(np.array([1.0, 0.8]), np.full(2, np.nan), edges).sources == [1]
