"""The edges of a profiler table read from fx_graph.txt (knowledge.md §18 R5.1, R5.5):
keyword arguments, every input of a node, ``name(n)`` rows as the n-th call, quantizers
shared by several nodes, and a table only partly mapped."""

from __future__ import annotations

import time

import pytest

from qcdoctor.collectors.reading.calls import graph_edges
from qcdoctor.collectors.reading.fx_graph import load_graph, split_call
from tests.collectors.call_tables import Row, origin, read, write_graph, write_table


def chain_graph(names: list[str], reads: dict[str, list[str]] | None = None,
                quantizers: dict[str, str] | None = None) -> list[tuple[str, ...]]:
    """call_module nodes for ``names`` (a name ``m(1)`` is a second call of ``m``), each
    followed by its quantizer node (``quantizers``: a shared quantizer module's target)."""
    reads, quantizers = reads or {}, quantizers or {}
    nodes = [("placeholder", "x", "x", "()")]
    last = {"x": "x"}
    previous = "x"
    for i, name in enumerate(names):
        module, call = split_call(name)
        node = module.replace(".", "_") + (f"_{call}" if call else "")
        args = ", ".join(last[r] for r in reads.get(name, [previous]))
        nodes.append(("call_module", node, module, f"({args},)"))
        target = quantizers.get(name, f"activation_post_process_{i}")
        nodes.append(("call_module", f"{target}_{i}", target, f"({node},)"))
        last[name] = f"{target}_{i}"
        previous = name
    return nodes


def test_keyword_arguments_are_edges(tmp_path):
    """``add(input=a, other=b)``: the add reads b's damage; without its kwargs it would read
    nothing and look like a second source from clean inputs."""
    nodes = [("placeholder", "x", "x", "()"),
             ("call_module", "stem", "stem", "(x,)"),
             ("call_module", "a", "a", "(stem,)"), ("call_module", "b", "b", "(stem,)"),
             ("call_function", "add", "<built-in function add>", "()",
              "{'input': a, 'other': b}"),
             ("call_module", "tail", "tail", "(add,)")]
    write_graph(tmp_path, nodes)
    rows = [Row("stem", 1.0), Row("a", 1.0), Row("b", 0.95), Row("add", 0.96),
            Row("tail", 0.955)]
    write_table(tmp_path, rows)
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    assert graph.producers["add"] == ["a", "b"]
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "b", "")
    assert facts["layer_table"][0]["graph"] == "fx_graph"


def test_a_quoted_keyword_named_like_a_node_is_no_edge(tmp_path):
    nodes = [("placeholder", "input", "input", "()"),
             ("call_module", "conv", "conv", "(input,)"),
             ("call_function", "mul", "mul", "()", "{'input': conv, 'other': 2}")]
    write_graph(tmp_path, nodes)
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    assert graph.producers["mul"] == ["conv"]


def test_a_concat_of_seventy_branches_reads_all_of_them(tmp_path):
    branches = [f"b{i}" for i in range(70)]
    nodes = [("placeholder", "x", "x", "()"), ("call_module", "stem", "stem", "(x,)")]
    nodes += [("call_module", b, b, "(stem,)") for b in branches]
    nodes += [("call_function", "cat", "torch.cat", f"([{', '.join(branches)}],)"),
              ("call_module", "tail", "tail", "(cat,)")]
    write_graph(tmp_path, nodes)
    rows = [Row("stem", 1.0)] + [Row(b, 0.95 if b == "b68" else 1.0) for b in branches]
    rows += [Row("cat", 0.99), Row("tail", 0.985)]
    write_table(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "b68", "")


def test_a_repeated_call_maps_to_its_own_node(tmp_path):
    """``head(1)`` is the head module's second node, reading the second level: the fault in
    that call is one source there, not a step after the first call."""
    names = ["fpn.p3", "fpn.p4", "head", "head(1)", "out"]
    reads = {"fpn.p4": ["fpn.p3"], "head": ["fpn.p3"], "head(1)": ["fpn.p4"],
             "out": ["head", "head(1)"]}
    write_graph(tmp_path, chain_graph(names, reads))
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    assert graph.node_of_row("head(1)") == "head_1" and graph.node_of_row("head(2)") is None
    edges = graph_edges(graph, names)
    assert edges.inputs_of(3) == [1] and edges.inputs_of(4) == [2, 3]
    write_table(tmp_path, [Row("fpn.p3", 1.0), Row("fpn.p4", 1.0), Row("head", 1.0),
                           Row("head(1)", 0.95), Row("out", 0.96)])
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "head(1)", "")


def test_a_quantizer_module_called_after_two_nodes_is_one_quantizer(tmp_path):
    """torch.ao's conv and the ReLU6 after it share one activation_post_process: a clamp
    of it, measured on both rows, is one source at the conv."""
    names = ["stem", "conv2.conv", "conv2.activ", "tail"]
    shared = {"conv2.conv": "activation_post_process_7", "conv2.activ":
              "activation_post_process_7"}
    write_graph(tmp_path, chain_graph(names, quantizers=shared))
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    edges = graph_edges(graph, names)
    assert edges.quantizers[1] == edges.quantizers[2] == "activation_post_process_7"
    assert edges.groups.tolist() == [0, 1, 1, 3]
    from tests.collectors.call_tables import write_own
    write_table(tmp_path, [Row("stem", 1.0), Row("conv2.conv", 0.95),
                           Row("conv2.activ", 0.949), Row("tail", 0.94)])
    write_own(tmp_path, {"stem": 1.0, "conv2.conv": 0.95, "conv2.activ": 0.95,
                         "tail": 0.99997})
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "conv2.conv", "")
    assert facts["layer_origin"][0]["same_quantizer"] == "conv2.activ"


@pytest.mark.parametrize("mapped", [8, 7])
def test_a_partly_mapped_table_is_read_by_the_graph_where_mapped(tmp_path, mapped):
    """Rows the graph does not carry are counted and named; the rest is read along the
    graph (a branch printed between the fault and its reader does not hide it)."""
    names = ["stem", "a1", "a2", "b1", "b2", "add", "t1", "t2", "t3", "t4"]
    reads = {"a1": ["stem"], "b1": ["stem"], "a2": ["a1"], "b2": ["b1"],
             "add": ["a2", "b2"], "t1": ["add"], "t2": ["t1"], "t3": ["t2"], "t4": ["t3"]}
    write_graph(tmp_path, chain_graph(names[:mapped], reads))
    cos = {"stem": 1.0, "a1": 0.95, "a2": 0.94, "b1": 1.0, "b2": 1.0, "add": 0.95,
           "t1": 0.94, "t2": 0.935, "t3": 0.93, "t4": 0.925}
    write_table(tmp_path, [Row(n, cos[n]) for n in names])
    _, facts = read(tmp_path)
    table = facts["layer_table"][0]
    assert (table["graph"], table["graph_rows"], table["unmapped"]) == \
        ("fx_graph", mapped, 10 - mapped)
    assert table["unmapped_layers"] == ", ".join(names[mapped:])
    assert origin(facts) == ("cliff", "a1", "")
    assert not facts["layer_origin"][0]["borderline"]


def test_an_origin_resting_on_an_unmapped_row_is_borderline(tmp_path):
    reads = {"a1": ["stem"], "b1": ["stem"]}
    write_graph(tmp_path, chain_graph(["stem", "a1", "b1"], reads))
    write_table(tmp_path, [Row("stem", 1.0), Row("a1", 1.0), Row("b1", 1.0),
                           Row("add", 0.95), Row("tail", 0.94)])
    _, facts = read(tmp_path)
    fact = facts["layer_origin"][0]
    assert fact["layer"] == "add" and fact["borderline"] and "graph_rows" in fact["flips"]


def test_long_dotted_targets_are_matched_in_linear_time_and_memory(tmp_path):
    """Every suffix of every target stored would take gigabytes here."""
    depth, count = 400, 200
    prefix = ".".join(f"level{i}" for i in range(depth))
    nodes = [("placeholder", "x", "x", "()")]
    for i in range(count):
        nodes.append(("call_module", f"n{i}", f"{prefix}.conv{i}", f"({nodes[-1][1]},)"))
    write_graph(tmp_path, nodes)
    start = time.perf_counter()
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    names = [f"model.{prefix}.conv{i}" for i in range(count)] + ["conv5", "other.conv7"]
    edges = graph_edges(graph, names)
    assert edges.inputs_of(3) == [2]
    assert graph.node_for_layer("conv5") == "n5"         # it ends that target at a '.'
    assert graph.node_for_layer("onv5") is None          # no '.'-bounded match
    assert graph.node_for_layer(f"level{depth - 1}.conv5") == "n5"
    assert time.perf_counter() - start < 10
