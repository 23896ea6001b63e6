"""The per-layer reading of tables without a graph, row by row (knowledge.md §16 R3.8,
§17 R4.1), and the error kind at its source (R3.9, R3.11, R4.3), on small tables written
as the profiler writes them."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.reading.compare_layers import load_compare, read_layers, row_facts
from qcdoctor.collectors.reading.evidence import median_without_each
from qcdoctor.collectors.reading.lut_ops import lut_op
from qcdoctor.collectors.reading.quant_range import (
    QRANGE,
    dtype_name,
    range_evidence,
    representable,
)
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.fact_types import normalise
from tests.qa.scenarios import case_yaml, gradual_rows
from tests.qa.writers import layer, write_compare

QSCALE = 0.0082740          # the writers' default: qint8 over about [-1.05, 1.05]


def read(tmp_path, rows, fmt="txt"):
    """(reading, facts by type) of a table written from ``rows``."""
    path = write_compare(tmp_path / "qa", rows, "16", fmt)
    table = load_compare(path)
    reading = read_layers(table)
    facts = {}
    for fact in row_facts(table, reading, "qa", f"qa/{path.name}"):
        normalise(fact)                                 # every fact fits its schema
        facts.setdefault(fact["type"], []).append(fact)
    return reading, facts


def clean(count, start=0):
    return [layer(f"pre.{start + i}", 1.0) for i in range(count)]


def declining(name, first_cosine, step, count, start=0):
    return [layer(f"{name}.{start + i}", round(first_cosine - i * step, 7)) for i in range(count)]


def steps_of(atol_steps):
    return atol_steps * QSCALE


# --- the shapes of R3.8 -------------------------------------------------------------

def test_clean_prefix_then_a_step_then_larger_propagation_is_one_origin(tmp_path):
    """Issue example: Cosine exactly 1 up to the faulty layer, a step of 0.03 there, then
    a decline of 0.003 a row that adds up to four times the step: one origin, at the step."""
    rows = clean(12) + [layer("neck.fault", 0.97)] + declining("head", 0.967, 0.003, 40)
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert (reading.pattern, origin["layer"], origin["row"]) == ("cliff", "neck.fault", 12)
    assert origin["fired"] == "cosine_drop" and origin["located"]
    assert origin["drop"] == pytest.approx(0.03) and origin["loss"] == pytest.approx(0.15)
    assert origin["loss"] > 4 * origin["drop"]          # the later decline is larger ...
    assert origin["sources"] == 1 and origin["second_layer"] == ""     # ... yet no source
    assert facts["layer_worst"][0]["layer"] == "head.39"


def test_decline_in_similar_small_steps_with_an_early_atol_jump_is_accumulation(tmp_path):
    """Issue example: 180 rows each 0.0004 lower; row 1's Atol jumps (a few elements) with
    no Cosine step: accumulation, starting where the band is left, no source named."""
    rows = declining("backbone.block", 0.9996, 0.0004, 180)
    rows[1] = dict(rows[1], atol=steps_of(12), max_qscale_diff=12.0)
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert reading.pattern == "gradual" and not reading.located and not origin["located"]
    assert (origin["layer"], origin["start_row"]) == ("backbone.block.2", 2)  # below 0.999
    assert origin["typical_step"] == pytest.approx(0.0004, rel=1e-3)
    assert origin["largest_step"] == pytest.approx(0.0004, rel=1e-3)
    assert origin["declining"] == 180 and origin["region"] == "backbone.block"
    assert "error_kind" not in facts                    # no single source has a kind
    assert all(f["layer"] != "backbone.block.1" for f in facts["layer_origin"])


def test_gradual_scenario_names_the_broad_remedy_region(tmp_path):
    reading, facts = read(tmp_path, gradual_rows())
    origin = facts["layer_origin"][0]
    assert (reading.pattern, origin["layer"], origin["region"]) == \
        ("gradual", "decoder.layer1.linear", "decoder")


def test_accumulation_with_one_outstanding_step_is_both(tmp_path):
    rows = (declining("backbone.block", 0.9996, 0.0004, 30) + [layer("neck.fault", 0.958)]
            + declining("head.block", 0.9576, 0.0004, 20))
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert (reading.pattern, origin["layer"], origin["row"]) == \
        ("accumulation_with_step", "neck.fault", 30)
    assert (origin["start_layer"], origin["start_row"]) == ("backbone.block.2", 2)
    assert origin["drop"] == pytest.approx(0.03, abs=1e-6)
    assert origin["loss_before"] == pytest.approx(0.012, abs=1e-6)
    assert origin["typical_step"] == pytest.approx(0.0004, rel=1e-3)
    # the accumulation is the backbone's rows; the head's carry the step as well
    assert origin["region"] == "backbone.block"
    assert [f["order"] for f in facts["error_kind"]] == [1]     # the step has its kind


def test_two_separated_steps_are_two_sources_in_order(tmp_path):
    rows = (clean(8) + [layer("backbone.s2.conv", 0.95)] + declining("neck", 0.949, 0.001, 12)
            + [layer("head.exp", 0.818)] + declining("head.cls", 0.817, 0.001, 5))
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert reading.pattern == "two_sources" and origin["sources"] == 2
    assert (origin["layer"], origin["row"], origin["drop"]) == \
        ("backbone.s2.conv", 8, pytest.approx(0.05))
    assert (origin["second_layer"], origin["second_row"]) == ("head.exp", 21)
    assert origin["second_drop"] == pytest.approx(0.12, abs=1e-6)
    assert origin["second_cosine"] == pytest.approx(0.818)
    assert [(f["layer"], f["order"]) for f in facts["error_kind"]] == \
        [("backbone.s2.conv", 1), ("head.exp", 2)]


def test_a_step_that_only_carries_on_the_loss_is_no_second_source(tmp_path):
    """The same second fall, but it adds less than source_growth times the loss before."""
    rows = (clean(8) + [layer("backbone.s2.conv", 0.95)] + declining("neck", 0.949, 0.001, 12)
            + [layer("head.conv", 0.90)] + declining("head.cls", 0.899, 0.001, 5))
    reading, facts = read(tmp_path, rows)
    assert reading.pattern == "cliff" and facts["layer_origin"][0]["second_layer"] == ""


def test_a_small_step_standing_out_from_the_decline_after_a_clean_prefix(tmp_path):
    rows = (clean(6) + [layer("stage2.conv1", 0.9955, atol=steps_of(0.5))]
            + declining("stage2.tail", 0.9950, 0.0005, 10))
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert (reading.pattern, origin["fired"], origin["layer"]) == \
        ("cliff", "dominant_step", "stage2.conv1")
    assert origin["drop"] == pytest.approx(0.0045) and origin["drop"] < DEFAULT.cliff_drop
    assert origin["drop"] >= DEFAULT.dominance * origin["typical_step"]


def test_an_atol_jump_with_a_small_cosine_step_after_a_clean_prefix(tmp_path):
    """A step below cliff_drop, not even twice the steps after it; its Atol jumps."""
    rows = (clean(4) + [layer("head.silu", 0.9985, atol=steps_of(46))]
            + declining("head.tail", 0.9975, 0.001, 10))
    reading, facts = read(tmp_path, rows)
    origin = facts["layer_origin"][0]
    assert (reading.pattern, origin["fired"], origin["layer"]) == ("cliff", "atol_jump", "head.silu")
    assert origin["qdiff"] == pytest.approx(46) and origin["qdiff_known"]
    assert origin["steps_before"] < 1


def test_a_dip_that_comes_back_does_not_end_the_clean_prefix(tmp_path):
    """The attention logits before a softmax dip and recover: no source, and the step
    after them still follows a clean prefix."""
    rows = (clean(3) + [layer("attn.mul", 0.996), layer("attn.softmax", 0.9999)] + clean(5, 5)
            + [layer("mlp.fc1", 0.987)] + declining("mlp.tail", 0.9868, 0.0002, 8))
    reading, facts = read(tmp_path, rows)
    assert (reading.pattern, facts["layer_origin"][0]["layer"]) == ("cliff", "mlp.fc1")


def test_an_atol_jump_without_a_cosine_step_is_an_outlier(tmp_path):
    rows = declining("body", 0.99999, 0.000001, 5)
    rows.append(layer("body.add", 0.99989, atol=steps_of(46)))
    rows += declining("tail", 0.99988, 0.000001, 5)
    reading, facts = read(tmp_path, rows)
    origin, kind = facts["layer_origin"][0], facts["error_kind"][0]
    assert (reading.pattern, origin["layer"], origin["fired"]) == ("outlier", "body.add", "atol_jump")
    assert origin["qdiff"] == pytest.approx(46)
    # tens of steps with the qint8 range covering the baseline: the op's conversion
    assert (kind["kind"], kind["covered"]) == ("conversion", "yes")
    rows[5] = dict(rows[5], atol=steps_of(5), max_qscale_diff=5.0)
    assert read(tmp_path / "few", rows)[1]["error_kind"][0]["kind"] == "rounding"


def test_layers_that_agree_give_no_origin(tmp_path):
    reading, facts = read(tmp_path, declining("body", 0.99999, 0.000001, 20))
    assert reading.pattern == "none" and "layer_origin" not in facts
    assert not facts["layer_table"][0]["abnormal"]


@pytest.mark.parametrize("fmt", ["txt", "csv"])
def test_rows_without_metrics_are_gaps(tmp_path, fmt):
    rows = clean(3) + [layer("fused.conv", None)] + [layer("fused.relu", 0.9)] + \
        declining("head", 0.899, 0.001, 5)
    reading, facts = read(tmp_path, rows, fmt)
    assert (reading.pattern, facts["layer_origin"][0]["row"]) == ("cliff", 4)


def test_messages_say_what_fired(tmp_path):
    """The Atol jump's finding names its quantization steps; "sharp cosine drop" is kept
    for a step of cliff_drop or more."""
    case = tmp_path / "case"
    case_yaml(case)
    rows = (clean(4) + [layer("head.silu", 0.9985, atol=steps_of(46))]
            + declining("head.tail", 0.9975, 0.001, 10))
    write_compare(case / "qa_convert", rows)
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    found = {f["rule"]: f for f in report["findings"]}
    assert "LY010" not in found
    assert "Atol jumps to 46 quantization steps" in found["LY014"]["text"]
    assert "`head.silu`" in found["LY014"]["text"]
    assert "sharp" not in found["LY014"]["title"].lower()


def test_the_band_and_the_growth_are_thresholds_a_case_can_set(tmp_path):
    """Rows before the step at Cosine 0.9999 with Atol 3 quantization steps are clean by
    default (a float baseline's rounding); comparing two quantized models a case sets
    band_steps to 1, and they become accumulation before the step."""
    prefix = [layer(f"pre.{i}", 0.9999, atol=steps_of(3)) for i in range(6)]
    rows = prefix + [layer("neck.fault", 0.95)] + declining("head", 0.949, 0.001, 10)
    table = load_compare(write_compare(tmp_path / "qa", rows))
    assert read_layers(table).pattern == "cliff"
    strict = read_layers(table, Thresholds(band_steps=1.0))
    assert (strict.pattern, strict.curve["start"]) == ("accumulation_with_step", 0)
    # a second step of 1.94 x the loss before it: a source at 1.5, propagation at 2.5
    two = (clean(8) + [layer("backbone.s2.conv", 0.95)] + declining("neck", 0.949, 0.001, 12)
           + [layer("head.exp", 0.818)] + declining("head.cls", 0.817, 0.001, 5))
    table = load_compare(write_compare(tmp_path / "two", two))
    assert read_layers(table).pattern == "two_sources"
    assert read_layers(table, Thresholds(source_growth=2.5)).pattern == "cliff"


def test_typical_step_without_each_row_is_the_median_of_the_others():
    generator = random.Random(0)
    for _ in range(200):
        steps = np.array([generator.choice([0.0, round(generator.random(), 2)])
                          for _ in range(generator.randint(1, 12))])
        got = median_without_each(steps)
        for i in range(steps.size):
            others = np.delete(steps, i)
            others = others[others > 0]
            want = float(np.median(others)) if others.size else 0.0
            if steps[i] > 0:
                assert got[i] == pytest.approx(want), (steps, i)


# --- what the quantizer can represent (R3.9) ----------------------------------------

@pytest.mark.parametrize("text,name", [
    ("qint8", "qint8"), ("torch.qint8", "qint8"), ("int8", "qint8"), ("torch.int8", "qint8"),
    ("uint8", "quint8"), ("torch.quint8", "quint8"), ("quint7", "quint7"), ("int16", "qint16"),
    (" QINT16 ", "qint16"), ("quint16", "quint16"), ("qint4", "qint4"), ("quint4", "quint4"),
    ("qint32", "qint32"), ("float32", None), ("", None), (None, None)])
def test_dtype_spellings(text, name):
    assert dtype_name(text) == name


def test_integer_ranges():
    assert {d: QRANGE[d][1] for d in QRANGE} == {
        "qint4": 7, "quint4": 15, "quint7": 127, "qint8": 127, "quint8": 255,
        "qint16": 32767, "quint16": 65535, "qint32": 2 ** 31 - 1}
    assert all(low == (-high - 1 if name.startswith("qint") else 0)
               for name, (low, high) in QRANGE.items())


def test_a_zero_point_moves_the_range():
    """quint8 with zero point 128 tops out at 127 x qscale, not 255 x qscale."""
    rep = representable("quint8", 0.1, 128)
    assert (rep.low, rep.high) == (pytest.approx(-12.8), pytest.approx(12.7))
    assert representable("torch.quint8", 0.1, 0).high == pytest.approx(25.5)
    signed = representable("qint8", 0.05)                  # symmetric: no zero point needed
    assert signed.placed and (signed.low, signed.high) == (pytest.approx(-6.4), pytest.approx(6.35))
    unsigned = representable("quint8", 0.1)                # no zero point: width only
    assert not unsigned.placed and math.isnan(unsigned.high)
    assert unsigned.width == pytest.approx(25.5)
    assert representable("float32", 0.1) is None and representable("qint8", math.nan) is None


def test_range_evidence_without_a_zero_point():
    rep = representable("quint8", 0.1)
    held = range_evidence(rep, (-5.0, 5.0), (-5.0, 5.0))
    assert (held.clipped, held.covered) == (False, "yes") and held.room == pytest.approx(2.55)
    wide = range_evidence(rep, (-15.0, 15.0), (-12.0, 13.0))      # span 30 > width 25.5
    assert (wide.clipped, wide.covered) == (True, "no")


def zero_point_table(tmp_path, zero_point):
    """A clean prefix, then a quint8 row over [0, 15] at qscale 0.1, with a zero_point
    column (which the profiler does not write; the reader takes it where given)."""
    rows = clean(3) + [layer("head.act", 0.97, dtype="quint8", qscale=0.1, base=(0.0, 15.0),
                             analy=(0.0, 12.7), atol=0.25)]
    path = write_compare(tmp_path / "qa", rows, "16", "csv")
    lines = path.read_text(encoding="utf-8").splitlines()
    lines = [lines[0] + ", zero_point"] + [line + f", {zero_point}" for line in lines[1:]]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    table = load_compare(path)
    reading = read_layers(table)
    return reading, [f for f in row_facts(table, reading, "qa", "qa/x.csv")
                     if f["type"] == "error_kind"][0]


def test_zero_point_column_decides_truncation(tmp_path):
    reading, kind = zero_point_table(tmp_path / "a", 128)
    assert reading.kind == "truncation" and kind["zero_point_given"] and kind["range_placed"]
    assert kind["range_high"] == pytest.approx(12.7) and kind["clipped"]
    # zero point 0: the range covers the baseline; what is cut is cut by the op itself
    # (an analysis range narrower than the baseline's from clean inputs: a clamp, R4.3)
    reading, kind = zero_point_table(tmp_path / "b", 0)
    assert kind["range_high"] == pytest.approx(25.5) and not kind["clipped"]
    assert kind["narrower"] and kind["inputs_clean"] and reading.kind == "truncation"


def test_quint7_range_is_known(tmp_path):
    rows = clean(3) + [layer("stage2.dw", 0.976, dtype="quint7", qscale=0.1283,
                             base=(-6.88, 6.02), analy=(-6.67, 6.16), atol=0.1283 * 8)]
    reading, facts = read(tmp_path, rows)
    kind = facts["error_kind"][0]
    assert kind["dtype_known"] and kind["range_known"] and kind["qmax"] == 127
    assert kind["range_width"] == pytest.approx(127 * 0.1283)
    assert reading.kind == "rounding" and kind["covered"] == "yes"


def test_a_narrower_range_from_clean_inputs_is_a_clamp(tmp_path):
    """qscale x qmax covers the baseline |max| a hundred times, yet the output range is
    half the baseline's while every row it reads is clean: the op clamps (R4.3)."""
    rows = clean(3) + [layer("neck.conv", 0.9, dtype="qint16", qscale=0.001, base=(-0.3, 0.3),
                             analy=(-0.15, 0.15), atol=0.006)]
    reading, facts = read(tmp_path, rows)
    kind = facts["error_kind"][0]
    assert kind["narrower"] and kind["range_ratio"] == pytest.approx(0.5)
    assert kind["room"] == pytest.approx(32.767 / 0.3) and kind["room"] > 100
    assert reading.kind == "truncation" and not kind["clipped"] and kind["inputs_clean"]


def test_a_narrower_range_after_damaged_inputs_is_not_truncation(tmp_path):
    """The same narrowing on a step over an accumulation: the range may have come from
    upstream, so it is no evidence of a clamp."""
    rows = (declining("backbone.block", 0.9996, 0.0004, 30)
            + [layer("neck.conv", 0.9, dtype="qint16", qscale=0.001, base=(-0.3, 0.3),
                     analy=(-0.15, 0.15), atol=0.006)])
    reading, facts = read(tmp_path, rows)
    kind = facts["error_kind"][0]
    assert reading.pattern == "accumulation_with_step"
    assert kind["narrower"] and not kind["inputs_clean"] and reading.kind == "rounding"


def test_an_unknown_dtype_is_said_to_be_unknown(tmp_path):
    case = tmp_path / "case"
    case_yaml(case)
    rows = clean(3) + [layer("head.mystery", 0.9, dtype="float32", base=(-100.0, 100.0),
                             analy=(-96.0, 97.0), atol=1.0)]
    write_compare(case / "qa_convert", rows)
    report = triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)
    kind = next(f for f in report["facts"] if f["type"] == "error_kind")
    assert (kind["dtype_known"], kind["range_known"], kind["kind"]) == (False, False, "unclear")
    assert kind["scale_limit"] == 0 and kind["qmax"] == 0     # unknown, flagged, never used
    found = {f["rule"]: f["text"] for f in report["findings"]}
    assert "LY030" not in found and "LY034" not in found
    assert "'float32'" in found["LY037"] and "unknown" in found["LY037"]
    assert "qscale×qmax = 0" not in " ".join(found.values())


# --- LUT ops at the origin (R3.11) --------------------------------------------------

@pytest.mark.parametrize("analy,base,name,lut", [
    ("torch.nn.modules.activation.SiLU", "torch.nn.modules.activation.SiLU", "act", "silu"),
    ("<class 'torch.nn.modules.activation.GELU'>", "", "mlp.act", "gelu"),
    ("torch.Tensor.softmax", "", "attn.softmax", "softmax"),
    # a replaced module whose type says nothing: the baseline's op type tells
    ("tests.probe_nets.LutSiLU", "torch.nn.modules.activation.SiLU", "dw.activ", "silu"),
    # a generic function call: the module name is read by whole tokens
    ("horizon_plugin_pytorch.nn.quantized.FloatFunctional", "", "head.exp", "exp"),
    # the op type decides where it is known: a convolution named exp_conv is no LUT op
    ("torch.nn.modules.conv.Conv2d", "torch.nn.modules.conv.Conv2d", "head.exp_conv", None),
])
def test_lut_kind_by_op_type_before_name(tmp_path, analy, base, name, lut):
    rows = clean(3) + [layer(name, 0.95, op=base, analy_op=analy, atol=steps_of(30))]
    reading, facts = read(tmp_path, rows)
    kind = facts["error_kind"][0]
    assert kind["lut_op"] == (lut or "")
    assert reading.kind == ("lut" if lut else "conversion")


def test_lut_op_helper_reads_the_type_first():
    assert lut_op("torch.nn.modules.conv.Conv2d", "head.exp_conv") is None
    assert lut_op("", "head.exp") == "exp" and lut_op("FloatFunctional", "pos.sin") == "sin"
    assert lut_op("torch.nn.modules.activation.Sigmoid", "conv") == "sigmoid"


def test_truncation_evidence_wins_over_a_lut_op(tmp_path):
    rows = clean(3) + [layer("head.reciprocal", 0.62, dtype="qint8", qscale=0.05,
                             base=(-130.0, 130.0), analy=(-6.35, 6.35),
                             analy_op="horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT")]
    reading, facts = read(tmp_path, rows)
    kind = facts["error_kind"][0]
    assert reading.kind == "truncation" and kind["lut_op"] == "segment_lut"
    assert (kind["range_low"], kind["range_high"]) == (pytest.approx(-6.4), pytest.approx(6.35))
