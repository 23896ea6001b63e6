"""The HTML report's charts under values no chart can show, and drawn from many threads
at once.

A layer table whose Cosine cells are +-1e308, infinite or subnormal renders (the command
line exits 0 with a valid page, ``to_html`` returns one): what cannot be drawn is left out
and the chart's caption says so. Reports rendered in eight threads at once are the page
each gives alone, and the caller's matplotlib settings stay theirs throughout (never
swapped for the plots' own, not even while a plot is being drawn)."""

from __future__ import annotations

import copy
import math
import threading
import warnings

import html5lib
import pytest

import qcdoctor
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.plots import report_plots
from qcdoctor.wording import labels
from tests.commands.test_output_targets import qcdoctor as run_qcdoctor
from tests.qa.fix_trials import build_fix_case
from tests.qa.scenarios import build, gradual_rows
from tests.qa.writers import write_compare

LEFT_OUT = "left out of this chart"
EXTREMES = {"huge": [1e308, -1e308], "infinite": [math.inf, -math.inf],
            "subnormal": [1e-320, -1e-320, 5e-324], "mixed": [1e308, math.inf, 1e-320, -1e308]}


def _case_with_cosines(root, values: list[float]):
    """A QuantAnalysis case whose compare_per_layer table has ``values`` in its Cosine
    column (every other row; the rest as measured)."""
    case = build("gradual", root)
    rows = gradual_rows()
    for i, value in enumerate(values):
        rows[2 * i]["cosine"] = value
    write_compare(case / "qa_convert", rows)
    return case


def _page_figures(page: str) -> dict[str, str]:
    """Each figure's id and caption, the page parsed strictly (any HTML error raises)."""
    tree = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(page)
    return {f.get("id"): "".join(f.itertext()) for f in tree.iter("figcaption")}


@pytest.mark.parametrize("kind", list(EXTREMES))
def test_extreme_cosines_render_in_the_command_line_and_the_api(tmp_path, kind):
    case = _case_with_cosines(tmp_path, EXTREMES[kind])
    out = tmp_path / "report.html"
    done = run_qcdoctor("triage", str(case), "--format", "html", "--lang", "en", "-o",
                        str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr
    for page in (out.read_text(encoding="utf-8"), qcdoctor.triage(case, lang="en").to_html()):
        layers = _page_figures(page)["plot-layers-0-caption"]
        # a cell beyond any Cosine (|Cosine| > 1) is no Cosine: read as missing, and the
        # report says so where it lists what it could not read, not in the chart
        assert LEFT_OUT not in layers
        assert ("outside [-1, 1]" in page) == (kind in ("huge", "mixed"))


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    with example_path("convert_quant_analysis") as path:
        analysis = triage_path(path, use_env=False, lang="en")
    with example_path("board_nv12_deploy") as path:
        stages = triage_path(path, use_env=False, lang="en")
    fixes = triage_path(build_fix_case(tmp_path_factory.mktemp("fixes"), "accumulation"),
                        use_env=False, lang="en")
    return {"analysis": analysis, "stages": stages, "fixes": fixes}


def _with(report: dict, change) -> dict:
    report = copy.deepcopy(report)
    change(report)
    return report


def _set_all(rows: list[dict], field: str, values: list) -> None:
    for i, row in enumerate(rows):
        if row.get(field) is not None:
            row[field] = values[i % len(values)]


CHANGES = {
    "stage values": ("stages", "stages", lambda r, v: _set_all(r["series"]["stages"], "value", v)),
    "tolerance bands": ("stages", "stages", lambda r, v: _set_all(
        r["series"]["stages"], "reference_value", v)),
    "layer cosines": ("analysis", "layers", lambda r, v: _set_all(
        r["series"]["layers"][0]["points"], "cosine", v)),
    "layer atol": ("analysis", "layers", lambda r, v: _set_all(
        r["series"]["layers"][0]["points"], "atol", v)),
    "sensitivity": ("analysis", "sensitivity", lambda r, v: _set_all(
        r["series"]["sensitivity"][0]["ops"], "value", v)),
    "dumps": ("analysis", "dumps", lambda r, v: r["series"]["dumps"].append(
        {"left": "hbm_x86", "right": "board", "outputs": [
            {"output": f"out{i}", "cosine": v[i % len(v)], "max_abs": v[(i + 1) % len(v)],
             "status": "compared"} for i in range(4)]})),
    "fix trials": ("fixes", "fixes", lambda r, v: _set_all(
        r["fix_trials"][0]["trials"], "error_removed", v)),
    "fix target": ("fixes", "fixes", lambda r, v: r["fix_trials"][0]["target"].update(
        error_removed=v[0])),
}
VALUES = {"huge": [1e308, -1e308], "nan and infinite": [math.nan, math.inf, -math.inf],
          "an int past any float": [10 ** 400, 0.5]}


@pytest.mark.parametrize("values", list(VALUES.values()), ids=list(VALUES))
@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_every_chart_leaves_out_what_it_cannot_draw_and_says_so(reports, change, values):
    source, kind, edit = CHANGES[change]
    report = _with(reports[source], lambda r: edit(r, values))
    with warnings.catch_warnings():
        warnings.simplefilter("error")              # no overflow, no singular axis
        plots = [p for p in report_plots(report, labels()["en"]) if p.kind == kind]
    assert plots and all(p.svg.startswith("<svg") for p in plots)
    assert any(LEFT_OUT in p.caption for p in plots), [p.caption for p in plots]


def test_a_chart_with_nothing_to_leave_out_says_nothing_of_it(reports):
    for report in reports.values():
        assert not [p for p in report_plots(report, labels()["en"]) if LEFT_OUT in p.caption]


# --- several threads at once ---------------------------------------------------------

def test_pages_rendered_in_threads_are_each_as_alone_and_the_callers_settings_stay(reports):
    import matplotlib
    data = qcdoctor.triage(example="convert_quant_analysis", lang="en").to_dict()
    alone = qcdoctor.Report.from_dict(data).to_html()
    assert "<svg" in alone
    with matplotlib.rc_context({"font.size": 17.0, "text.color": "#123456",
                                "lines.linewidth": 4.0}):
        theirs = dict(matplotlib.rcParams)
        pages: list = [None] * 8
        changed: list = []
        start = threading.Barrier(len(pages) + 1)
        drawing = threading.Event()

        shared = qcdoctor.Report.from_dict(data)        # its page not made yet

        def render(i: int) -> None:
            start.wait()
            # half the threads share one report, half have one each: every page is drawn
            report = shared if i % 2 else qcdoctor.Report.from_dict(data)
            pages[i] = report.to_html()

        def watch() -> None:
            start.wait()
            while drawing.is_set():
                now = dict(matplotlib.rcParams)
                if now != theirs:
                    changed.append({k: v for k, v in now.items() if v != theirs[k]})
        drawing.set()
        threads = [threading.Thread(target=render, args=(i,)) for i in range(len(pages))]
        watcher = threading.Thread(target=watch)
        for thread in (*threads, watcher):
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        drawing.clear()
        watcher.join(timeout=60)
        assert not [t for t in (*threads, watcher) if t.is_alive()]
        assert not changed, changed[:3]            # never the plots' settings meanwhile
        assert dict(matplotlib.rcParams) == theirs
    assert [page == alone for page in pages] == [True] * len(pages)
