"""The per-layer table read as a graph (knowledge.md §17 R4.1, R4.2): each row against the
rows it reads. Small graphs shaped like the branches of real networks (an SE gate, a
residual, two heads), written as the profiler writes fx_graph.txt."""

from __future__ import annotations

import numpy as np
import pytest

from qcdoctor.collectors.reading.calls import graph_edges, row_order_edges
from qcdoctor.collectors.reading.evidence import OwnError
from qcdoctor.collectors.reading.fx_graph import load_graph
from qcdoctor.collectors.reading.layer_graph import read_graph
from qcdoctor.collectors.reading.postprocess import index_output_rows
from tests.qa.writers import write_fx_graph

NAN = float("nan")


def table(tmp_path, nodes):
    """nodes: (mod_name, [names it reads], cosine, qsteps). The graph gives each a
    call_module node and a quantizer node after it, as FX-prepared models have."""
    graph_nodes = [("placeholder", "x", "x", "()")]
    last = {"x": "x"}
    for i, (name, reads, _, _) in enumerate(nodes):
        node = name.replace(".", "_")
        args = ", ".join(last[r] for r in reads) or "x"
        graph_nodes.append(("call_module", node, name, f"({args},)"))
        graph_nodes.append(("call_module", f"activation_post_process_{i}",
                            f"activation_post_process_{i}", f"({node},)"))
        last[name] = f"activation_post_process_{i}"
    graph, _ = load_graph(write_fx_graph(tmp_path / "fx_graph.txt", graph_nodes))
    names = [n[0] for n in nodes]
    cos = np.array([n[2] for n in nodes], dtype=float)
    qsteps = np.array([n[3] for n in nodes], dtype=float)
    return graph_edges(graph, names), names, cos, qsteps


def sources(reading, names):
    return [names[i] for i in reading.sources]


# an SE block after a clean stem: the activation is the fault; the SE branch's pool, convs
# and gate are printed between it and the gate's mul, and the pooled vector falls further
SE = [("stem", [], 1.0, 0.0),
      ("unit.conv2.conv", ["stem"], 1.0, 0.0),
      ("unit.conv2.activ", ["unit.conv2.conv"], 0.957, 30.0),
      ("unit.se.pool", ["unit.conv2.activ"], 0.90, 40.0),
      ("unit.se.conv1", ["unit.se.pool"], 0.88, 40.0),
      ("unit.se.conv2", ["unit.se.conv1"], 0.95, 20.0),
      ("unit.se.sigmoid", ["unit.se.conv2"], 0.995, 3.0),
      ("unit.se.mul", ["unit.conv2.activ", "unit.se.sigmoid"], 0.93, 35.0),
      ("next.conv", ["unit.se.mul"], 0.92, 30.0)]


def test_an_se_branch_read_as_a_graph_is_one_origin_at_the_activation(tmp_path):
    edges, names, cos, qsteps = table(tmp_path, SE)
    assert edges is not None and edges.by_graph
    reading = read_graph(cos, qsteps, edges)
    assert (reading.pattern, sources(reading, names)) == ("cliff", ["unit.conv2.activ"])
    assert reading.fired == ["cosine_drop"] and not reading.borderline


def test_the_same_rows_in_row_order_read_another_way_and_say_so(tmp_path):
    """The fallback reads each row against the one printed before it: the SE rows then
    look like a recovery and a second fall; the edges say the reading is by row order."""
    _, names, cos, qsteps = table(tmp_path, SE)
    edges = row_order_edges(len(names))
    assert not edges.by_graph
    reading = read_graph(cos, qsteps, edges)
    assert reading.sources and names[reading.sources[0]] == "unit.conv2.activ"


def test_a_residual_add_reading_the_damaged_shortcut_is_propagation(tmp_path):
    rows = [("stem", [], 1.0, 0.0), ("s1.activ", ["stem"], 1.0, 0.0),
            ("s2.identity_conv", ["s1.activ"], 0.81, 6000.0),
            ("s2.conv1", ["s1.activ"], 1.0, 0.0), ("s2.conv2", ["s2.conv1"], 1.0, 0.0),
            ("s2.add", ["s2.conv2", "s2.identity_conv"], 0.65, 150.0),
            ("s2.activ", ["s2.add"], 0.74, 150.0), ("s3.conv", ["s2.activ"], 0.75, 70.0)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert (reading.pattern, sources(reading, names)) == ("cliff", ["s2.identity_conv"])
    # read in row order, the clean body rows after the fault make it look like a dip
    by_rows = read_graph(cos, qsteps, row_order_edges(len(names)))
    assert [names[i] for i in by_rows.sources] != ["s2.identity_conv"]


def test_a_drop_larger_than_the_origin_on_a_damaged_input_is_propagation(tmp_path):
    rows = [("a", [], 1.0, 0.0), ("b", ["a"], 0.985, 20.0), ("pool", ["b"], 0.80, 25.0),
            ("fc", ["pool"], 0.78, 25.0)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert (reading.pattern, sources(reading, names)) == ("cliff", ["b"])


def test_two_heads_each_leaving_the_band_from_clean_inputs_are_two_sources(tmp_path):
    rows = [("neck", [], 1.0, 0.0), ("head_a.conv", ["neck"], 0.95, 40.0),
            ("head_a.out", ["head_a.conv"], 0.94, 40.0),
            ("head_b.conv", ["neck"], 0.93, 50.0), ("head_b.out", ["head_b.conv"], 0.92, 50.0)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert reading.pattern == "two_sources"
    assert sources(reading, names) == ["head_a.conv", "head_b.conv"]


def test_many_small_steps_in_a_deep_chain_are_accumulation(tmp_path):
    rows = [(f"chain.{i}", [f"chain.{i - 1}"] if i else [], 1.0 - 0.0005 * i, 2.0 + i)
            for i in range(60)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert reading.pattern == "gradual" and reading.sources == []
    assert names[reading.start] == "chain.3"        # the first row below 0.999


def test_rows_a_few_steps_apart_with_nothing_standing_out_are_noise(tmp_path):
    """Every row 1-6 steps apart, Cosine above cosine_good (0.999): nothing stands out."""
    rng = np.random.default_rng(3)
    rows = [(f"n.{i}", [f"n.{i - 1}"] if i else [], float(1.0 - rng.uniform(0, 0.0009)),
             float(rng.uniform(1, 6))) for i in range(40)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert reading.pattern in ("none", "noise") and reading.sources == []


def test_rows_below_the_cited_threshold_are_accumulation_never_noise(tmp_path):
    """knowledge.md R5.6: the same rows falling to 0.996, below the cosine_good the report
    cites, are no noise (a control says what noise is: at the folder, scope control)."""
    rng = np.random.default_rng(3)
    rows = [(f"n.{i}", [f"n.{i - 1}"] if i else [], float(1.0 - rng.uniform(0, 0.004)),
             float(rng.uniform(1, 6))) for i in range(40)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    reading = read_graph(cos, qsteps, edges)
    assert reading.pattern != "noise"


def test_a_verdict_that_a_tenth_of_a_threshold_flips_is_borderline(tmp_path):
    """A step of 0.0105 from clean rows, then propagation of 0.008 a row: one origin at
    cliff_drop 0.01, no source at 0.011 (the step is no twice the typical one either)."""
    cos = [1.0, 1.0, 0.9895] + [0.9895 - 0.008 * i for i in range(1, 8)]
    rows = [(f"c.{i}", [f"c.{i - 1}"] if i else [], cos[i], 3.0 if i < 2 else 20.0)
            for i in range(len(cos))]
    edges, names, c, q = table(tmp_path, rows)
    reading = read_graph(c, q, edges)
    assert (reading.pattern, sources(reading, names)) == ("cliff", ["c.2"])
    assert reading.borderline and reading.flips == ["cliff_drop"]


def test_the_own_error_decides_where_it_is_known(tmp_path):
    """The pooled row falls far on a damaged input: propagation by the graph, and its own
    error is small; a later row with a large own error is a second source, though the row
    it reads is out of the band; the larger comes first."""
    rows = [("a", [], 1.0, 0.0), ("b", ["a"], 0.97, 30.0), ("pool", ["b"], 0.85, 30.0),
            ("c", ["pool"], 0.70, 60.0)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    own = OwnError(cosine=np.array([1.0, 0.97, 0.9999, 0.82]),
                   qsteps=np.array([0.0, 30.0, 0.5, 40.0]),
                   weight_sqnr=np.full(4, NAN), per_tensor=np.zeros(4, dtype=bool),
                   channel_ratio=np.full(4, NAN))
    reading = read_graph(cos, qsteps, edges, own)
    assert reading.own_decided              # the larger error first: the one to fix first
    assert (reading.pattern, sources(reading, names)) == ("two_sources", ["c", "b"])
    assert reading.fired == ["own_error", "own_error"]


@pytest.mark.parametrize("name,op,dtype", [("head.topk", "torch.Tensor.topk", "float32"),
                                           ("post.argmax", "", ""),
                                           ("post.index", "", "int64")])
def test_post_processing_rows_are_left_out_of_the_search(name, op, dtype):
    left_out = index_output_rows(["conv", name], ["torch.nn.Conv2d", op], ["qint8", dtype])
    assert left_out.tolist() == [False, True]
    reading = read_graph(np.array([1.0, 0.5]), np.array([0.5, 900.0]), row_order_edges(2),
                         left_out=left_out)
    assert reading.pattern == "none" and reading.sources == []


def test_a_graph_of_another_model_is_not_used(tmp_path):
    rows = [("a", [], 1.0, 0.0), ("b", ["a"], 0.9, 30.0)]
    edges, _, _, _ = table(tmp_path, rows)
    graph, _ = load_graph(tmp_path / "fx_graph.txt")
    assert graph_edges(graph, ["other.x", "other.y", "other.z"]) is None
    assert edges is not None


def test_the_same_table_gives_the_same_reading_whatever_the_noise_in_its_last_digits(tmp_path):
    """Cosine +-1e-4 and Atol +-1 %: the same verdict, or an explicit borderline."""
    edges, names, cos, qsteps = table(tmp_path, SE)
    first = read_graph(cos, qsteps, edges)
    rng = np.random.default_rng(0)
    for _ in range(50):
        c = np.clip(cos + rng.uniform(-1e-4, 1e-4, cos.size), -1, 1)
        q = qsteps * rng.uniform(0.99, 1.01, qsteps.size)
        other = read_graph(c, q, edges)
        assert (other.pattern, other.sources) == (first.pattern, first.sources) or \
            other.borderline or first.borderline


def test_a_pooled_vectors_small_own_error_beside_a_large_one_is_no_second_source(tmp_path):
    rows = [("a", [], 1.0, 0.0), ("se.pool", ["a"], 0.997, 0.5), ("se.conv", ["se.pool"], 0.996, 1.0),
            ("clamp", ["se.conv"], 0.95, 500.0), ("head", ["clamp"], 0.94, 80.0)]
    edges, names, cos, qsteps = table(tmp_path, rows)
    own = OwnError(cosine=np.array([1.0, 0.9978, 1.0, 0.972, 1.0]),
                   qsteps=np.array([0.0, 0.5, 0.5, 539.0, 0.5]),
                   weight_sqnr=np.full(5, NAN), per_tensor=np.zeros(5, dtype=bool),
                   channel_ratio=np.full(5, NAN))
    reading = read_graph(cos, qsteps, edges, own)
    assert sources(reading, names) == ["clamp"]


def test_the_largest_of_the_others_leaves_each_row_out():
    """What an own loss below cliff_drop must stand above (dominance x it)."""
    from qcdoctor.collectors.reading.evidence import largest_without_each
    rng = np.random.default_rng(1)
    for _ in range(200):
        values = rng.choice([0.0, 0.1, 0.5, 1.0, 3.0], size=rng.integers(2, 15))
        got = largest_without_each(values)
        for i in range(values.size):
            assert got[i] == np.delete(values, i).max(), (values, i)
