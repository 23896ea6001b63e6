"""What the report's charts draw: rows as whole numbers, the stage chart only where results
are (the evaluated stages and their neighbours), no chart that repeats a table."""

from __future__ import annotations

import re

from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.plots import charted_stages, report_plots
from qcdoctor.fact_types import STAGES
from qcdoctor.wording import labels


def _report(name: str, lang: str = "en") -> dict:
    with example_path(name) as path:
        return triage_path(path, use_env=False, lang=lang)


def _tick_texts(svg: str) -> list[str]:
    """Every text the chart writes (tick labels, titles, legends), as SVG text."""
    return re.findall(r"<text\b[^>]*>([^<]*)</text>", svg)


def _stages(values: dict) -> list[dict]:
    return [{"stage": s, "value": values.get(s)} for s in STAGES]


def test_the_stage_chart_keeps_the_evaluated_stages_and_their_neighbours():
    shown = charted_stages(_stages({"qat_bc": 0.449, "quantized_bc": 0.391}))
    assert [s["stage"] for s in shown] == ["qat_export", "qat_bc", "quantized_bc", "nv12_bc"]
    far = charted_stages(_stages({"qat": 0.45, "board": 0.30}))
    assert [s["stage"] for s in far] == ["calib", "qat", "qat_export", "hbm_x86", "board"]
    assert charted_stages(_stages({})) == []


def test_the_stage_chart_draws_only_those():
    report = _report("convert_j6e_no_retrain")
    stages = report["series"]["stages"]
    plot = next(p for p in report_plots(report, labels()["en"]) if p.kind == "stages")
    drawn = [s["stage"] for s in charted_stages(stages)]
    assert len(drawn) < len(stages)
    ticks = _tick_texts(plot.svg)
    assert "board" not in ticks and "float.pt" not in ticks
    assert "quantized.bc" in ticks and "qat.bc" in ticks


def test_layer_rows_are_ticked_as_whole_numbers():
    report = _report("convert_quant_analysis")
    plot = next(p for p in report_plots(report, labels()["en"]) if p.kind == "layers")
    numbers = [t for t in _tick_texts(plot.svg) if re.fullmatch(r"[-−]?\d+(\.\d+)?", t)]
    rows = [t for t in numbers if "." not in t]             # the row axis: whole numbers
    assert len(rows) >= 3 and not [t for t in numbers if re.fullmatch(r"\d+\.5", t)]


def test_no_chart_repeats_the_checklist():
    report = _report("board_nv12_deploy")
    kinds = {p.kind for p in report_plots(report, labels()["en"])}
    assert "audit" not in kinds and "stages" in kinds


def test_an_op_charted_for_its_activation_and_its_weight_says_which_bar_is_which():
    from qcdoctor.engine.reports.plots import sensitivity_bars

    def op(name, kind, value):
        return {"op": name, "kind": kind, "op_type": "conv", "value": value, "lut": False}
    table = {"output": "0", "metric": "L1", "flat": False, "tail_near_zero": True,
             "dominant": True, "ops": [op("block2.0", "activation", 0.02),
                                       op("fc", "weight", 0.001), op("fc", "activation", 0.0009),
                                       op("block1.0", "weight", 0.0004)]}
    for lang, weight, activation in (("en", "fc (weight)", "fc (activation)"),
                                     ("zh", "fc（权重）", "fc（激活）")):
        texts = _tick_texts(sensitivity_bars(table, 0, labels()[lang]).svg)
        assert weight in texts and activation in texts
        # an op charted once keeps its bare name
        assert "block2.0" in texts and "block1.0" in texts
