"""Post-processing inside the analysed model read as a region (knowledge.md §18 R5.4):
out of the origin search, never clean, always said, with the tensors entering it."""

from __future__ import annotations

from tests.collectors.call_tables import (
    Row,
    origin,
    read,
    write_calls,
    write_graph,
    write_table,
)

LINEAR = "torch.nn.modules.linear.Linear"


def test_fc_then_argmax_reads_one_cliff_at_fc(tmp_path):
    """The argmax row has no Cosine worth reading; left out, it must not pass for a clean
    reader that takes fc's error back."""
    rows = [Row("stem", 1.0), Row("body", 1.0, ["stem"]), Row("fc", 0.95, ["body"], LINEAR),
            Row("argmax", 0.2, ["fc"], "torch.argmax", dtype="int64")]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "fc", "")
    post = facts["layer_postprocess"][0]
    assert (post["first_layer"], post["entries"], post["region_rows"]) == ("argmax", "fc", 1)
    assert post["worst"]
    assert facts["layer_worst"][0]["layer"] == "fc"


def test_fc_then_argmax_in_row_order_reads_the_same(tmp_path):
    rows = [Row("stem", 1.0), Row("body", 1.0), Row("fc", 0.95, op=LINEAR),
            Row("argmax", float("nan"), op="torch.argmax", dtype="int64")]
    write_table(tmp_path, rows)
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "fc", "")
    assert facts["layer_postprocess"][0]["first_layer"] in ("argmax", "")


def test_topk_and_gather_are_the_region_entered_by_scores_and_boxes(tmp_path):
    """A detector with topk + gather inside the model and a neck conv 100x too small:
    one origin at the neck; gather and what reads it are post-processing; the figures are
    taken on the scores and boxes entering it."""
    rows = [Row("stem", 1.0), Row("neck.conv", 0.9, ["stem"]),
            Row("head.cls", 0.89, ["neck.conv"]), Row("head.box", 0.88, ["neck.conv"]),
            Row("topk", 0.5, ["head.cls"], "torch.topk"),
            Row("gather", 0.3, ["head.box", "topk"], "torch.gather"),
            Row("amax", 0.35, ["gather"], "torch.amax")]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    reading, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "neck.conv", "")
    post = facts["layer_postprocess"][0]
    assert (post["first_layer"], post["region_rows"]) == ("topk", 3)
    assert post["entries"] == "head.cls, head.box"
    assert facts["layer_worst"][0]["layer"] == "head.box"


def test_a_model_without_post_processing_gives_no_such_fact(tmp_path):
    rows = [Row("stem", 1.0), Row("fc", 0.95, ["stem"], LINEAR), Row("max", 0.94, ["fc"],
                                                                     "torch.Tensor.max")]
    write_table(tmp_path, rows)
    write_calls(tmp_path, rows)
    _, facts = read(tmp_path)
    assert "layer_postprocess" not in facts
    assert origin(facts) == ("cliff", "fc", "")


def test_a_selection_op_without_a_row_of_its_own_starts_the_region(tmp_path):
    """The table shows topk's values (``getitem``) and the gathered boxes, not the topk:
    the graph says where post-processing starts."""
    nodes = [("placeholder", "x", "x", "()"), ("call_module", "neck", "neck", "(x,)"),
             ("call_module", "score", "score", "(neck,)"),
             ("call_module", "box", "box", "(neck,)"),
             ("call_method", "topk", "topk", "(score, 5)", "{'dim': 1}"),
             ("call_function", "getitem", "<built-in function getitem>", "(topk, 0)"),
             ("call_function", "getitem_1", "<built-in function getitem>", "(topk, 1)"),
             ("call_function", "gather", "<built-in method gather of type object at 0x1>",
              "(box, 1, getitem_1)")]
    write_graph(tmp_path, nodes)
    write_table(tmp_path, [Row("neck", 0.9), Row("score", 0.89), Row("box", 0.88),
                           Row("getitem", -0.5, op="Select"),
                           Row("gather", 0.3, op="Select")])
    _, facts = read(tmp_path)
    assert origin(facts) == ("cliff", "neck", "")
    post = facts["layer_postprocess"][0]
    assert (post["first_layer"], post["region_rows"]) == ("getitem", 2)
    assert post["entries"] == "score, box"
