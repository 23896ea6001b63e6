"""Rows are calls and faults live in quantizers (knowledge.md §18 R5.1, R5.2, R5.5): a
module called twice, a head shared by two levels, rows sharing one quantizer, read from
the layer_calls.csv the probe writes beside the table."""

from __future__ import annotations

import pytest

from tests.collectors.call_tables import Row, origin, read, write_calls, write_own, write_table

RELU6 = "torch.nn.modules.activation.ReLU6"
POOL = "torch.nn.modules.pooling.MaxPool2d"


def unet(fault: str) -> list[Row]:
    """A UNet-like net whose pooling module ``pool`` runs twice (encoder levels 1 and 2,
    one quantizer for both calls, shared with the activation before it, as torch.ao does);
    ``fault``: where the error starts."""
    bad = {"before": "enc1.conv", "at": "pool(1)", "after": "bott.conv1"}[fault]
    rows = [Row("stem", 1.0), Row("enc1.conv", 1.0, ["stem"], weight="enc1.conv.w"),
            Row("enc1.act", 1.0, ["enc1.conv"], RELU6, quantizer="pool.q"),
            Row("pool", 1.0, ["enc1.act"], POOL, quantizer="pool.q"),
            Row("enc2.conv", 1.0, ["pool"], weight="enc2.conv.w"),
            Row("pool(1)", 1.0, ["enc2.conv"], POOL, quantizer="pool.q"),
            Row("bott.conv1", 1.0, ["pool(1)"], weight="bott.conv1.w"),
            Row("bott.conv2", 1.0, ["bott.conv1"], weight="bott.conv2.w"),
            Row("up.conv", 1.0, ["bott.conv2", "enc2.conv"], weight="up.conv.w"),
            Row("head", 1.0, ["up.conv", "enc1.act"], weight="head.w")]
    names = [r.name for r in rows]
    damaged = {bad}
    for r in rows:                  # the fault and everything reading it, directly or not
        if r.name == bad or damaged & set(r.inputs):
            damaged.add(r.name)
            r.cosine = 0.95 if r.name == bad else 0.9 - 0.01 * names.index(r.name)
    if fault == "at":               # the second call's values clipped by the shared range
        rows[5].base, rows[5].analy = (0.0, 6.0), (0.0, 2.0)
    return rows


@pytest.mark.parametrize("fault,at", [("before", "enc1.conv"), ("at", "pool(1)"),
                                      ("after", "bott.conv1")])
def test_a_module_called_twice_reads_one_origin_at_the_planted_call(tmp_path, fault, at):
    rows = unet(fault)
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    reading, facts = read(tmp_path)
    assert origin(facts) == ("cliff", at, "")
    fact = facts["layer_origin"][0]
    assert fact["reading"] == "graph" and not fact["borderline"]
    assert fact["test"] == "step 0.05 >= cliff_drop 0.01"
    assert facts["layer_table"][0]["graph"] == "layer_calls"
    assert facts["layer_table"][0]["unmapped"] == 0
    if fault == "at":               # the first call is clean: the fault shows at the second
        assert fact["same_quantizer"] == "enc1.act, pool"
        assert facts["error_kind"][0]["kind"] == "truncation"


def test_the_same_net_in_row_order_is_said_to_be_read_so(tmp_path):
    rows = unet("before")
    write_table(tmp_path, rows)
    _, facts = read(tmp_path)
    assert facts["layer_table"][0]["graph"] == "row_order"
    assert facts["layer_origin"][0]["reading"] == "row_order"


def test_a_head_shared_by_two_levels_reads_the_second_call_by_its_own_error(tmp_path):
    """The fault is in the head's second call (its values, the second level's, are the
    ones the shared quantizer clips): each call's own error is keyed by its row name."""
    rows = [Row("fpn.p3", 1.0), Row("fpn.p4", 1.0, ["fpn.p3"]),
            Row("head", 0.9995, ["fpn.p3"], quantizer="head.q", weight="head.w"),
            Row("head(1)", 0.93, ["fpn.p4"], quantizer="head.q", weight="head.w"),
            Row("out_a", 0.9994, ["head"]), Row("out_b", 0.92, ["head(1)"])]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    write_own(tmp_path, {"fpn.p3": 1.0, "fpn.p4": 0.99999, "head": 0.99995,
                         "head(1)": 0.93, "out_a": 0.99998, "out_b": 0.99996})
    reading, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "head(1)", "")
    fact = facts["layer_origin"][0]
    assert fact["fired"] == "own_error" and fact["own_cosine"] == pytest.approx(0.93)
    assert fact["test"] == "own loss 0.07 >= cliff_drop 0.01"     # numbers and thresholds
    assert fact["same_quantizer"] == "head"


@pytest.mark.parametrize("shape", ["conv_relu6", "pool_flatten", "attention_v"])
def test_rows_sharing_a_quantizer_are_one_source_at_its_first_row(tmp_path, shape):
    """A quantizer clamped too narrow damages every row whose output passes through it;
    each row's own error, measured with that quantizer, is poor too: one source."""
    share = {"conv_relu6": [("conv2.conv", CONV_T), ("conv2.activ", RELU6)],
             "pool_flatten": [("a", CONV_T), ("pool", POOL), ("flatten", "torch.flatten")],
             "attention_v": [("attn.v", "torch.nn.modules.linear.Linear"),
                             ("attn.reshape_2", "torch.Tensor.reshape"),
                             ("attn.transpose_2", "torch.Tensor.transpose")]}[shape]
    rows, own, before = [Row("stem", 1.0)], {"stem": 1.0}, "stem"
    for k, (name, op) in enumerate(share):
        rows.append(Row(name, 0.95 - 0.002 * k, [before], op, quantizer="shared.q",
                        base=(0.0, 6.0), analy=(0.0, 2.0)))
        own[name] = 0.95
        before = name
    rows.append(Row("tail", 0.94, [before]))
    own["tail"] = 0.99995
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    write_own(tmp_path, own)
    _, facts = read(tmp_path)
    first = share[0][0]
    assert origin(facts) == ("cliff", first, "")
    assert facts["layer_origin"][0]["same_quantizer"] == ", ".join(n for n, _ in share[1:])
    assert [f["layer"] for f in facts["error_kind"]] == [first]


CONV_T = "torch.nn.modules.conv.Conv2d"


def test_a_concat_whose_inputs_share_its_quantizer_is_one_source(tmp_path):
    rows = [Row("stem", 1.0), Row("b1.conv", 0.95, ["stem"], quantizer="cat.q"),
            Row("b2.conv", 0.951, ["stem"], quantizer="cat.q"),
            Row("cat", 0.95, ["b1.conv", "b2.conv"], "torch.cat", quantizer="cat.q"),
            Row("tail", 0.94, ["cat"])]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "b1.conv", "")
    assert facts["layer_origin"][0]["same_quantizer"] == "b2.conv, cat"
    # the same two falls with two quantizers of their own are two sources
    for r in rows[1:4]:
        r.quantizer = ""
    write_calls(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("two_sources", "b1.conv", "b2.conv")


def test_a_concat_of_seventy_branches_reads_every_input(tmp_path):
    """No cap on a call's inputs: a fault in branch 68 is one source there, the concat
    reading it is propagation."""
    rows = [Row("stem", 1.0)] + [Row(f"b{i}", 1.0, ["stem"]) for i in range(70)]
    rows[69].cosine = 0.95                  # b68
    rows.append(Row("cat", 0.99, [f"b{i}" for i in range(70)], "torch.cat"))
    rows.append(Row("tail", 0.985, ["cat"]))
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "b68", "")


def test_unmeasured_own_error_is_neither_propagation_nor_a_source(tmp_path):
    """Past the memory budget the probe leaves later calls unmeasured: their numbers are
    not read (a stale own Cosine would make the row look like propagation)."""
    rows = [Row("stem", 1.0), Row("c1", 1.0, ["stem"]), Row("c2", 0.95, ["c1"]),
            Row("c3", 0.94, ["c2"])]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    # c3's cells hold what was measured on the analysis model's inputs: its table Cosine
    write_own(tmp_path, {"stem": 1.0, "c1": 0.99999, "c2": "no_baseline_inputs",
                         "c3": (0.94, "no_baseline_inputs")})
    reading, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "c2", "")
    fact = facts["layer_origin"][0]
    assert fact["fired"] == "cosine_drop" and not fact["own_known"]
    table = facts["layer_table"][0]
    assert table["own_unmeasured"] == 2
    assert table["own_unmeasured_why"] == "no_baseline_inputs 2"


def test_an_old_own_error_file_without_its_status_reads_as_measured(tmp_path):
    rows = [Row("stem", 1.0), Row("c1", 1.0, ["stem"]), Row("c2", 0.95, ["c1"]),
            Row("c3", 0.94, ["c2"])]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    write_own(tmp_path, {"stem": 1.0, "c1": 0.99999, "c2": 0.95, "c3": 0.99998},
              status=False)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "c2", "")
    fact = facts["layer_origin"][0]
    assert fact["fired"] == "own_error" and fact["own_known"]
    assert facts["layer_table"][0]["own_unmeasured"] == 0


def test_a_damaged_layer_calls_file_is_one_named_problem(tmp_path):
    from qcdoctor.collectors.reading.layer_calls import load_layer_calls
    path = tmp_path / "layer_calls.csv"
    path.write_text("name,op_type\nconv,Conv2d\n", encoding="utf-8")
    with pytest.raises(ValueError, match="layer_calls.csv: no inputs column"):
        load_layer_calls(path)
    path.write_text("name,inputs\nconv,[]\nadd,\"[conv\"\nrelu,\"[\"\"conv\"\"]\"\n",
                    encoding="utf-8")
    calls, problems = load_layer_calls(path)
    assert list(calls) == ["conv", "relu"] and calls["relu"].inputs == ("conv",)
    assert "line(s) 3" in problems[0]
