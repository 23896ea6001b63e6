"""The series section of the JSON report and the plots drawn from it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.series import BUCKETS, kept_positions
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from tests.collectors.test_dumps import RNG, _dump_case
from tests.qa.writers import layer, write_compare

ROWS = 50_000
ORIGIN, SPIKE, WORST = 31_337, 12_345, 49_990
FUSED, MISMATCH = 20_000, 40_000


def _big_case(root: Path) -> Path:
    """50,000 rows in the profiler's 23-column CSV: a lone low spike that is neither the
    origin nor the worst, a fused row, a mismatch-shape row, a cliff, a later worst row."""
    rows = []
    for i in range(ROWS):
        cosine = 0.99995 if i < ORIGIN else 0.95 - (i - ORIGIN) * 1e-7
        if i == SPIKE:
            cosine = 0.9992
        if i == WORST:
            cosine = 0.90
        shape = "mismatch shape" if i == MISMATCH else "torch.Size([1, 8, 4, 4])"
        rows.append(layer(f"m.b{i // 100}.l{i % 100}", None if i in (FUSED, MISMATCH) else cosine,
                          shape=shape))
    write_compare(root / "qa_convert", rows, "23", "csv")
    (root / "case.yaml").write_text(
        "schema: qcdoctor/case-v1\nevidence: [dataset_eval]\nbadcase: available\n"
        "platform: {chip: J6P}\nstages:\n  qat_bc: {metric: mAP, value: 0.45}\n"
        "  quantized_bc: {metric: mAP, value: 0.39}\n", encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> dict:
    case = _big_case(tmp_path_factory.mktemp("big"))
    return triage_case(load_case(case), lang="en", environ={}, installed={}, cwd=case)


def test_a_50000_row_table_is_decimated_keeping_origin_worst_spikes_and_gaps(big):
    (table,) = big["series"]["layers"]
    points = table["points"]
    rows = [p["row"] for p in points]
    assert table["rows"] == ROWS and table["decimated"]
    assert (table["origin_row"], table["worst_row"]) == (ORIGIN, WORST)
    assert rows == sorted(set(rows)) and len(points) <= 5 * BUCKETS + 2
    assert {ORIGIN, WORST, SPIKE} <= set(rows)            # a bucket's minimum is never lost
    gaps = {p["row"]: p["gap"] for p in points if p["gap"]}
    assert gaps == {FUSED: "no_metric", MISMATCH: "mismatch_shape"}
    fused = next(p for p in points if p["row"] == FUSED)
    assert fused["cosine"] is None and fused["base_min"] == -1.0    # ranges stay, metrics gap
    origin = next(p for p in points if p["row"] == ORIGIN)
    assert origin["name"] == f"m.b{ORIGIN // 100}.l{ORIGIN % 100}" and origin["cosine"] == 0.95
    assert set(origin) == {"row", "name", "op_type", "dtype", "cosine", "atol", "qscale_diff",
                           "base_min", "base_max", "analy_min", "analy_max", "gap"}


def test_the_json_report_is_strict_json_and_stays_small(big):
    text = render(big, "json")
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON report"))
    assert len(text.encode()) < 1_000_000


def test_the_html_report_of_a_50000_row_table_meets_its_size_targets(big):
    page = render(big, "html")
    assert len(page.encode()) <= 2 * 2**20
    svgs = re.findall(r"(?s)<svg .*?</svg>", page)
    assert len(svgs) == 2                                   # the stage chain and the layers
    assert all(len(svg.encode()) <= 300 * 2**10 for svg in svgs)
    assert "error origin: m.b313.l37" in page and "worst layer: m.b499.l90" in page


def test_small_tables_are_kept_whole_and_buckets_keep_each_metric_extreme():
    values = np.arange(10, dtype=float)
    assert kept_positions([values], np.zeros(10, bool), [None]).tolist() == list(range(10))
    values = np.ones(1000)
    values[[17, 503]] = [0.2, 3.0]
    atol = np.zeros(1000)
    atol[640] = 9.0
    kept = kept_positions([values, atol], np.zeros(1000, bool), [999], keep_all=10, buckets=4)
    assert {17, 503, 640, 999} <= set(kept.tolist()) and len(kept) <= 4 * 4 + 1


def test_stage_series_leaves_unevaluated_stages_as_gaps():
    with example_path("wide_gap") as path:
        report = triage_case(load_case(path), lang="en", environ={}, installed={}, cwd=path)
    stages = {s["stage"]: s for s in report["series"]["stages"]}
    assert list(stages)[0] == "float" and list(stages)[-1] == "board"
    assert stages["float"]["value"] is None and stages["qat"]["value"] == 0.446
    board = stages["board"]
    assert (board["status"], board["reference"], board["reference_value"]) == ("abnormal", "qat", 0.446)
    assert board["tolerance"] == pytest.approx(0.00446) and board["direction"] == "higher"
    assert report["series"]["first_abnormal"] == "board"


def test_dump_series_per_output_and_their_plot(tmp_path):
    base = RNG.standard_normal(1000).astype(np.float32)
    case = _dump_case(tmp_path / "d", base, base * 0.5 + 0.1)
    report = triage_case(load_case(case), lang="zh", environ={}, installed={}, cwd=case)
    (pair,) = report["series"]["dumps"]
    assert (pair["left"], pair["right"]) == ("hbm_x86", "board")
    (output,) = pair["outputs"]
    assert output["status"] == "compared" and 0.9 < output["cosine"] < 1.0
    assert output["max_abs"] == pytest.approx(float(np.max(np.abs(base * 0.5 + 0.1 - base))),
                                              rel=1e-6)
    page = render(report, "html")
    assert 'id="plot-dumps-0"' in page and "dump 对比：hbm (x86) 对比 板端" in page
    # an audit page is its checklist table: no chart is drawn for it
    from qcdoctor.engine.reports.html import render_html
    audit = render_html(triage_case(load_case(case), lang="zh", environ={}, installed={},
                                    cwd=case, full_checklist=True), audit=True)
    assert re.findall(r'<figure class="plot" id="([^"]+)"', audit) == []
    assert "<table" in audit


def test_plot_text_is_literal_never_mathtext_nor_markup():
    from qcdoctor.engine.reports.plots import layer_curve
    from qcdoctor.wording import labels
    names = ["a$\\frac{1}{0}$b", "<tspan>x</tspan>&amp;"]
    points = [{"row": i, "name": n, "op_type": "", "dtype": "", "cosine": c, "atol": 0.1,
               "qscale_diff": None, "base_min": None, "base_max": None, "analy_min": None,
               "analy_max": None, "gap": None} for i, (n, c) in enumerate(zip(names, (0.5, 0.4), strict=True))]
    plot = layer_curve({"source": "t$x$.csv", "rows": 2, "decimated": False, "pattern": "cliff",
                        "origin_row": 0, "worst_row": 1, "points": points}, 0, labels()["en"])
    import html5lib
    svg = html5lib.parse(plot.svg, namespaceHTMLElements=False)
    texts = ["".join(t.itertext()) for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert set(names) <= set(texts) and "Per-layer error: t$x$.csv" in texts
    assert not list(svg.iter("{http://www.w3.org/2000/svg}tspan"))
    assert plot.caption == f"The error starts at {names[0]}; the worst layer {names[1]} comes " \
                           "later and is not the cause."
