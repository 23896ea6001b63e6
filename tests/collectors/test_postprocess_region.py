"""The post-processing region (knowledge.md R5.4): from the selection ops through every
row reading them, and the tensors entering it."""

import pytest

from qcdoctor.collectors.reading.postprocess import (
    INDEX_READERS,
    SELECTION_OPS,
    postprocess_region,
    region_entries,
)


def test_fc_then_argmax_is_a_region_of_one_entered_by_fc():
    ops = ["torch.nn.modules.conv.Conv2d", "torch.nn.modules.linear.Linear", "torch.argmax"]
    inputs = [[], [0], [1]]
    region = postprocess_region(ops, inputs)
    assert region == {2}
    assert region_entries(region, inputs) == [1]


def test_topk_and_gather_and_what_follows_are_the_region():
    # 0 neck conv, 1 scores, 2 boxes, 3 topk(scores), 4 gather(boxes, topk), 5 amax(gather),
    # 6 a conv on the boxes that no selection reaches
    ops = ["Conv2d", "Conv2d", "Conv2d", "torch.topk", "gather", "torch.amax", "Conv2d"]
    inputs = [[], [0], [0], [1], [2, 3], [4], [2]]
    region = postprocess_region(ops, inputs)
    assert region == {3, 4, 5}
    assert region_entries(region, inputs) == [1, 2]


@pytest.mark.parametrize("op", ["torch.Tensor.max", "max", "<built-in method min of type "
                                                          "object at 0x7f>"])
def test_max_or_min_is_a_selection_only_where_its_indices_are_read(op):
    ops = ["Linear", op, "__getitem__"]
    assert postprocess_region(ops, [[], [0], [0, 1]]) == {1, 2}
    # its values only, read by an ordinary op: no post-processing
    assert postprocess_region(["Linear", op, "torch.add"], [[], [0], [1]]) == frozenset()


@pytest.mark.parametrize("op", ["torch.topk", "topk", "torch.Tensor.topk", "argmin",
                                "torchvision.ops.boxes.batched_nms", "torch.Tensor.argsort",
                                "<built-in method sort of type object at 0x1>"])
def test_every_spelling_of_a_selection_op_starts_the_region(op):
    assert postprocess_region(["Conv2d", op], [[], [0]]) == {1}


def test_a_model_without_selection_has_no_region():
    ops = ["Conv2d", "gather", "__getitem__", "torch.Tensor.max"]
    inputs = [[], [0], [1], [2]]
    assert postprocess_region(ops, inputs) == frozenset()
    assert region_entries(frozenset(), inputs) == []


def test_a_long_chain_after_the_selection_is_read_in_linear_time():
    count = 200_000
    ops = ["topk"] + ["torch.add"] * (count - 1)
    inputs = [[]] + [[i - 1] for i in range(1, count)]
    assert len(postprocess_region(ops, inputs)) == count


def test_the_op_sets_name_what_the_knowledge_names():
    assert {"topk", "argmax", "argmin", "sort", "nms"} <= SELECTION_OPS
    assert {"gather", "index_select", "take", "__getitem__"} <= INDEX_READERS
