"""The HTML reports in a real browser: Debian's headless Chromium, driven by Playwright.

Every bundled example's triage report (zh and en in turn) and audits of the deployment
examples are opened from disk: no console error, no request beyond the file itself,
every plot laid out with a size, failed checklist items styled as failed, the conclusion
on the page, the copy buttons only with JavaScript. A PNG screenshot of each goes to
pytest's tmp folder. Without Chromium the tests skip, except under CI, where they fail.
"""

from __future__ import annotations

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.vocabulary import CONCLUSION_LABELS
from tests.browser import chromium_path, launched_chromium, open_page

AUDITED = ("board_nv12_deploy", "compile_x86_and_board_abnormal")
FAIL_ROW = "rgb(253, 236, 234)"          # tr.row-fail td, and the fail badge below
FAIL_BADGE = "rgb(198, 40, 40)"
# what the page shows, read in the browser: plot sizes, the conclusion card, checklist rows
LAID_OUT = """() => {
  const colour = (e) => e ? getComputedStyle(e).backgroundColor : null;
  const card = document.querySelector(".card.conclusion");
  return {
    plots: [...document.querySelectorAll("figure.plot")].map((f) => {
      const box = f.querySelector("svg").getBoundingClientRect();
      return [f.id, box.width, box.height];
    }),
    card: card ? card.innerText : "",
    rows: [...document.querySelectorAll("table.checklist tbody tr")].map((r) =>
      [r.innerText, colour(r.querySelector("td")), colour(r.querySelector(".badge"))]),
    buttons: [...document.querySelectorAll("button.copy")].map((b) => b.checkVisibility()),
    broken: [...document.querySelectorAll("a[href^='#']")].map((a) => a.hash.slice(1))
      .filter((id) => !document.getElementById(id)),
  };
}"""


# every example once, the languages taking turns (the suite's time is shared)
CASES = [(name, ("en", "zh")[i % 2], False) for i, name in enumerate(sorted(example_names()))] \
    + [(name, ("zh", "en")[i % 2], True) for i, name in enumerate(AUDITED)]
IDS = [f"{'audit' if a else 'triage'}-{n}-{lang}" for n, lang, a in CASES]


def _report(name: str, lang: str, audit: bool) -> dict:
    with example_path(name) as path:
        return triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path,
                           display_path=f"example:{name}", full_checklist=audit)


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict:
    """Every report written before the browser starts (the rule engine's worker process
    and Playwright's event loop are kept apart)."""
    chromium_path()
    folder = tmp_path_factory.mktemp("html")
    out = {}
    for (name, lang, audit), case_id in zip(CASES, IDS, strict=True):
        report = _report(name, lang, audit)
        page_file = folder / f"{case_id}.html"
        page_file.write_text(render(report, "html", audit=audit), encoding="utf-8")
        out[case_id] = (report, page_file)
    return out


@pytest.fixture(scope="module")
def browser(pages):
    with launched_chromium() as chromium:
        yield chromium


@pytest.mark.parametrize("case_id", IDS)
def test_report_in_a_browser(browser, pages, tmp_path, case_id):
    report, page_file = pages[case_id]
    lang = report["language"]
    context, page, problems, requests = open_page(browser, page_file)
    try:
        assert problems == []
        assert requests == [page_file.as_uri()]              # nothing but the file itself
        # an audit page is its checklist table, no chart; a report draws what it has data for
        audit = case_id.startswith("audit")
        drawn = not audit and any(s["value"] is not None for s in report["series"]["stages"])
        shown = page.evaluate(LAID_OUT)                     # one round trip for the checks
        assert len(shown["plots"]) == page_file.read_text(encoding="utf-8").count(
            '<figure class="plot"')
        assert bool(shown["plots"]) == drawn
        for plot_id, width, height in shown["plots"]:
            assert width > 300 and height > 100, plot_id
        card = shown["card"]
        assert CONCLUSION_LABELS[lang][report["conclusion"]["stage"]] in card
        assert report["conclusion"]["evidence"][0]["text"].replace("`", "") in card
        failed = [c["title"] for c in report["checklist"] if c["status"] == "fail"]
        assert len(shown["rows"]) >= len(failed)
        for (text, row_colour, badge_colour), title in zip(shown["rows"], failed, strict=False):
            assert title in text                        # failed items first, styled as failed
            assert (row_colour, badge_colour) == (FAIL_ROW, FAIL_BADGE), title
        assert all(shown["buttons"])                    # copy buttons shown with JavaScript
        assert shown["broken"] == []                    # every rule id and contents link lands
        page.screenshot(path=str(tmp_path / f"{case_id}.png"))
    finally:
        context.close()


def test_without_javascript_the_code_is_there_and_no_copy_button(browser, pages):
    (_, page_file), = [v for k, v in pages.items() if k.startswith("triage-convert_quant_analysis")]
    context, page, problems, _ = open_page(browser, page_file, javascript=False)
    try:
        assert problems == []
        buttons = page.query_selector_all("button.copy")
        assert buttons and not any(b.is_visible() for b in buttons)
        assert "QconfigSetter(" in page.inner_text("#smallest-action pre")
    finally:
        context.close()
