"""fx_graph.txt: layer names map onto nodes as before, in time linear in the graph size."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from qcdoctor.collectors.fx_graph import Graph, graph_origin, load_graph
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
    unmatched = [(i, f"model.other{i}", i > n // 2) for i in range(n)]
    assert graph_origin(graph, unmatched) is None
    prefixed = [(i, f"model.backbone.layer{i}.conv", i >= n // 2) for i in range(n)]
    assert graph_origin(graph, prefixed) == n // 2          # the first bad one, producers fine
    elapsed = time.perf_counter() - start
    assert len(graph.nodes) == n + 2
    assert elapsed < 10, f"{elapsed:.1f} s: quadratic again? (was 4 minutes)"


def test_origin_looks_through_uncompared_producers():
    graph = Graph()
    for name, producers in (("a", []), ("b", ["a"]), ("c", ["b"]), ("d", ["c"])):
        graph.nodes[name] = {"opcode": "call_module", "target": name, "line": 0}
        graph.producers[name] = producers
        graph.by_target[name] = name
    # b and c have no compared row: d's nearest compared producer is a
    assert graph_origin(graph, [(0, "a", True), (1, "d", True)]) == 0
    assert graph_origin(graph, [(0, "a", False), (1, "d", True)]) == 1
