"""The section "Fixes measured on the model" in every rendering: the JSON report's
``fix_trials`` (and its schema), the Markdown and HTML tables, the HTML chart (also in a
real browser), the terminal view, in both languages; a case without fix_trials.yaml keeps
its report unchanged (the golden reports prove the rest)."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.json_schemas import report_schema
from qcdoctor.engine.reports.schema import check_report
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.engine.reports.view import FIX_TRIALS_SHOWN
from qcdoctor.wording import labels
from tests.browser import launched_chromium, open_page
from tests.qa.fix_trials import GREEDY_SET, PROBE, SINGLE_LAYER, build_fix_case, fix_doc
from tests.reports.test_report_language import english_left

KINDS = ("single", "accumulation", "not_reached")


def triage(folder, lang: str) -> dict:
    return triage_path(folder, lang=lang, environ={}, installed={}, cwd=folder)


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    """(kind, lang) -> report, each case built once."""
    root = tmp_path_factory.mktemp("fixes")
    out = {}
    for kind in KINDS:
        folder = build_fix_case(root, kind)
        for lang in ("en", "zh"):
            out[kind, lang] = triage(folder, lang)
    return out


def section(markdown: str, title: str) -> str:
    start = markdown.index(f"### {title}\n")
    return markdown[start:markdown.index("\n### ", start + 1)]


@pytest.mark.parametrize("kind", KINDS)
def test_the_json_report_carries_the_search_and_fits_its_schema(reports, kind):
    text = render(reports[kind, "en"], "json")
    report = json.loads(text)
    (entry,) = report["fix_trials"]
    expected = fix_doc(kind)
    assert entry["analysis"] == PROBE and entry["schema"] == "qcdoctor/fix-trials-v1"
    for key in ("metric", "output", "before", "target", "budget", "forwards", "candidates",
                "greedy", "notes", "caveats"):
        assert entry[key] == expected[key], key
    assert sorted(map(json.dumps, ({k: v for k, v in t.items() if k != "reaches"}
                                   for t in entry["trials"]))) == \
        sorted(map(json.dumps, expected["trials"]))
    jsonschema.Draft7Validator(report_schema()).validate(report)
    assert check_report(report, "report.json") is report


def test_a_damaged_fix_trials_entry_is_refused_by_both_schemas(reports):
    report = json.loads(render(reports["single", "en"], "json"))
    report["fix_trials"][0]["trials"][0]["fix"] = "int32"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(report_schema()).validate(report)
    with pytest.raises(Exception, match=r"fix_trials\[0\]\.trials\[0\]\.fix"):
        check_report(report, "report.json")


def test_a_case_without_the_file_has_no_section(tmp_path):
    folder = build_fix_case(tmp_path, "single")
    (folder / PROBE / "fix_trials.yaml").unlink()
    for lang in ("en", "zh"):
        report = triage(folder, lang)
        assert "fix_trials" not in report
        title = labels()[lang]["fixes"]["title"]
        assert title not in render(report, "md") and title not in render(report, "html")
        assert 'id="fix-trials"' not in render(report, "html")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_markdown_section(reports, lang):
    F = labels()[lang]["fixes"]
    text = render(reports["single", lang], "md")
    part = section(text, F["title"])
    # after the key findings, before the pitfalls
    assert text.index(labels()[lang]["findings"]) < text.index(F["title"]) < \
        text.index(labels()[lang]["pitfalls"])
    header = f"| {F['col_fix']} | {F['col_layers']} | {F['col_after'].format(metric='Cosine')} " \
             f"| {F['col_removed']} | {F['col_forwards']} |"
    assert header in part
    rows = [line for line in part.splitlines() if line.startswith("| ") and "---" not in line]
    assert rows[1:] == [
        f"| {F['fix']['float']} ✓ | {SINGLE_LAYER} | 0.9998 | 99.7% | 1 |",
        f"| {F['fix']['int16_activation']} ✓ | {SINGLE_LAYER} | 0.9996 | 99.4% | 1 |",
        f"| {F['fix']['fixed_scale']} | neck.fuse.conv | 0.95 | 20.6% | 1 |",
        f"| {F['fix']['int16_weight']} | {SINGLE_LAYER} | 0.94 | 4.8% | 1 |"]
    assert f"✓{labels()[lang]['colon']}{F['reaches']}" in part
    assert F["greedy_none"] in part
    assert F["caveat"]["one_input"] in part and F["caveat"]["fake_quant_only"] in part
    assert "90.0%" in part and "0.999" in part and "0.937" in part


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_markdown_greedy_set_and_notes(reports, lang):
    F = labels()[lang]["fixes"]
    part = section(render(reports["accumulation", lang], "md"), F["title"])
    greedy = next(line for line in part.splitlines() if F["reached"] in line)
    assert labels()[lang]["list"].join(GREEDY_SET) in greedy and "91.7%" in greedy
    short = section(render(reports["not_reached", lang], "md"), F["title"])
    assert F["not_reached"] in short
    assert f"{F['notes']}{labels()[lang]['colon']}the budget ran out" in short


def test_the_chinese_section_holds_no_english_prose(reports):
    for kind in KINDS:
        report = reports[kind, "zh"]
        text = render(report, "md")
        for note in fix_doc(kind)["notes"]:          # the probe's own words, quoted
            text = text.replace(note, "")
        # "probe" comes from the probe folder's existing line, not from this section
        assert english_left(report, text) <= {"probe"}, kind


def test_many_trials_show_the_best_and_count_the_rest(tmp_path):
    doc = fix_doc("single")
    doc["trials"] = [{"fix": "int16_activation", "layers": [f"layer{i}"], "after": 0.94,
                      "error_removed": i / 100, "forwards": 1} for i in range(FIX_TRIALS_SHOWN + 4)]
    report = triage(build_fix_case(tmp_path, "single", doc=doc), "en")
    part = section(render(report, "md"), labels()["en"]["fixes"]["title"])
    assert part.count("| qint16 activation |") == FIX_TRIALS_SHOWN
    assert f"| layer{FIX_TRIALS_SHOWN + 3} |" in part and "| layer3 |" not in part
    assert "4 more trials not listed" in part
    assert len(report["fix_trials"][0]["trials"]) == FIX_TRIALS_SHOWN + 4


def test_layer_names_are_shown_as_typed_in_every_format(tmp_path):
    odd = "head|cls*<b>[x](y)"
    doc = fix_doc("single")
    doc["trials"][0]["layers"] = [odd]
    report = triage(build_fix_case(tmp_path, "single", doc=doc), "en")
    markdown = render(report, "md")
    assert "| head\\|cls\\*&lt;b>\\[x](y) |" in markdown       # one cell, nothing as markup
    html = render(report, "html")
    assert "<code>head|cls*&lt;b&gt;[x](y)</code>" in html and "<b>[x]" not in html


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("kind", KINDS)
def test_html_section_and_chart(reports, kind, lang):
    F = labels()[lang]["fixes"]
    report = reports[kind, lang]
    page = render(report, "html")
    assert page == render(report, "html")                      # byte-stable, chart included
    start = page.index('<h3 id="fix-trials">')
    part = page[start:page.index("</section>", start)]
    assert F["title"] in part and "<table class=\"fixes\">" in part
    assert part.count("<tr class=\"row-") == len(fix_doc(kind)["trials"])
    (figure,) = re.findall(r'<figure class="plot" id="plot-fixes-0">.*?</figure>', part, re.S)
    shown = re.findall(r"<text\b[^>]*>(.*?)</text>", figure, re.S)
    C = F["chart"]
    assert C["title"].format(analysis=PROBE) in shown and C["x"] in shown
    assert C["target"].format(target="90%") in shown
    assert "0%" in shown and "100%" in shown
    if kind == "single":
        assert f"{F['fix']['int16_activation']}: {SINGLE_LAYER}" in shown
        assert C["reaches"] in shown and C["float"] in shown
    if fix_doc(kind)["greedy"]:
        assert C["greedy"].format(size=len(fix_doc(kind)["greedy"]["layers"])) in shown
    assert C["caption"] in figure
    # the section sits among the findings, before the next steps
    assert page.index('id="findings"') < start < page.index('id="next"')


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_terminal_view_shows_the_section(reports, lang):
    F = labels()[lang]["fixes"]
    text = render_terminal(reports["accumulation", lang], color=False, width=120)
    start = text.index(F["title"])
    assert text.index(labels()[lang]["findings"]) < start
    part = text[start:]
    assert F["col_layers"] in part and "decoder.layer5.linear" in part
    assert F["reached"] in part and "91.7%" in part
    flat = " ".join(part.split())
    assert F["caveat"]["fake_quant_only"] in flat


@pytest.fixture(scope="module")
def browser(reports):
    with launched_chromium() as chromium:
        yield chromium


@pytest.mark.parametrize("kind,lang", [("single", "en"), ("accumulation", "zh")])
def test_the_chart_in_a_browser(browser, reports, tmp_path, kind, lang):
    page_file = tmp_path / f"{kind}.{lang}.html"
    page_file.write_text(render(reports[kind, lang], "html"), encoding="utf-8")
    context, page, problems, requests = open_page(browser, page_file)
    try:
        assert problems == [] and requests == [page_file.as_uri()]
        box = page.query_selector("#plot-fixes-0 svg").bounding_box()
        assert box["width"] > 300 and box["height"] > 100
        assert page.query_selector("#fix-trials").is_visible()
        rows = page.query_selector_all("table.fixes tbody tr")
        assert len(rows) == len(fix_doc(kind)["trials"])
        first = rows[0].inner_text()
        assert (SINGLE_LAYER if kind == "single" else "decoder.layer5.linear") in first
        page.screenshot(path=str(tmp_path / f"{kind}.{lang}.png"))
    finally:
        context.close()
