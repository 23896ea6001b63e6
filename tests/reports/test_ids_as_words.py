"""Users read words: no internal id (an action kind, a pitfall, a checklist item, a suspect)
is shown as prose or as a label in the Markdown, HTML and terminal reports or in the batch
table, in either language. Ids stay in --format json, and in code (a case.yaml key, the
generated code) where the user types them."""

from __future__ import annotations

import html as html_module
import re

import pytest

from qcdoctor.catalogues import checklist_items
from qcdoctor.engine.commands.batch import CaseResult
from qcdoctor.engine.commands.batch_output import summary_table
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.vocabulary import ACTION_KINDS, PITFALL_IDS
from qcdoctor.wording import labels

# names the user types as they are (a tool, a compile parameter): words, not ids
TOOL_NAMES = {"bc_editor", "hb_verifier", "core_num", "input_source"}


def _ids() -> set[str]:
    found = set(ACTION_KINDS) | set(PITFALL_IDS) | set(checklist_items())
    found |= set(labels()["en"]["words"]["suspect"])
    # an id of one plain word reads as that word (layout, padding, checklist)
    return {i for i in found if "_" in i} - TOOL_NAMES


IDS = sorted(_ids(), key=len, reverse=True)
_ID = re.compile(r"(?<![\w.`/-])(" + "|".join(map(re.escape, IDS)) + r")(?![\w`/-])")
_FENCE = re.compile(r"^(`{3,}).*?^\1\s*$", re.M | re.S)
_SPAN = re.compile(r"`[^`\n]*`")


def _prose_of_markdown(text: str) -> str:
    return _SPAN.sub(" ", _FENCE.sub(" ", text))


def _prose_of_html(text: str) -> str:
    body = re.sub(r"<(script|style|pre|code)\b.*?</\1>", " ", text, flags=re.S | re.I)
    body = re.sub(r"<[^>]+>", " ", body)
    return html_module.unescape(body)


def _prose_of_terminal(text: str, report: dict) -> str:
    code_lines = {line.strip() for a in report["next_actions"] for line in
                  (a.get("code") or "").splitlines() if line.strip()}
    return "\n".join(line for line in text.splitlines() if line.strip() not in code_lines)


def _reports(lang: str):
    for name in example_names():
        with example_path(name) as path:
            for audit in (False, True):
                yield name, audit, triage_path(path, use_env=False, lang=lang,
                                               full_checklist=audit)


def _shown_ids(prose: str) -> list[str]:
    return sorted(set(_ID.findall(prose)))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_id_is_shown_as_a_word(lang):
    assert len(IDS) > 20
    shown = {}
    for name, audit, report in _reports(lang):
        views = {"md": _prose_of_markdown(render(report, "md", audit=audit)),
                 "html": _prose_of_html(render(report, "html", audit=audit)),
                 "terminal": _prose_of_terminal(
                     render_terminal(report, audit=audit, color=False, width=120), report)}
        for view, prose in views.items():
            ids = _shown_ids(prose)
            if ids:
                shown[f"{name} {'audit' if audit else 'triage'} {view}"] = ids
    assert not shown, shown


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_batch_table_shows_words(lang):
    results = []
    for _name, audit, report in _reports(lang):
        if audit:
            continue
        from qcdoctor.engine.diagnosis.checklist_counts import failed_items
        conclusion = report["conclusion"]
        first = report["next_actions"][0] if report["next_actions"] else {}
        results.append(CaseResult(f"case{len(results)}", stage=conclusion["stage"],
                                  determined=conclusion["determined"],
                                  suspect=conclusion["suspect"], first_action=first.get("id", ""),
                                  first_kind=first.get("kind", ""),
                                  failed=[c["id"] for c in failed_items(report)]))
    table = summary_table(results, lang)
    assert not _shown_ids(table), table
    assert any(r.failed for r in results)        # the failed column is exercised


# what no reader should meet: a knowledge-base seed number, a template's escaped brace, a
# value table's raw key, a bare status word, a pill that names two things at once, the raw
# list of thresholds
LEAKS = re.compile(r"\bseed \d{3}\b|\{\{[\w ,]+\}\}|known from analyses_run|remedy or missing input"
                   r"|由 analyses_run 得知|: open\b|\bcosine_good=")


def _leaks(text: str) -> list[str]:
    return sorted(set(LEAKS.findall(text)))


def _as_shown(template: str) -> str:
    return template.replace("{{", "{").replace("}}", "}")


def test_rule_texts_and_their_explanations_read_as_words():
    from qcdoctor.engine.matching.rulebook import load_rules
    from qcdoctor.engine.reports.rule_docs import explain_rule
    shown = {}
    for rule in load_rules():
        for lang in ("en", "zh"):
            # a message is a format template (its doubled braces write one): read as shown
            texts = [rule.title[lang], *(_as_shown(getattr(rule, key)[lang])
                                         for key in ("message", "rationale")),
                     explain_rule(rule.id, lang)]
            found = [leak for text in texts for leak in _leaks(text)]
            if found:
                shown[f"{rule.id} {lang}"] = found
    assert not shown, shown


def test_the_rules_document_reads_as_words():
    from tests.paths import REPO
    assert not _leaks((REPO / "docs" / "rules.md").read_text(encoding="utf-8"))


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_view_of_every_example_reads_as_words(lang):
    from qcdoctor.engine.reports.formats import render_output
    shown = {}
    for name, audit, report in _reports(lang):
        views = {fmt: render_output(report, fmt, audit=audit, fail_on="error")
                 for fmt in ("md", "html", "json", "junit", "sarif")}
        views["terminal"] = render_terminal(report, audit=audit, color=False, width=120)
        for view, text in views.items():
            if view == "html":
                text = _prose_of_html(text)
            found = _leaks(text)
            if found:
                shown[f"{name} {'audit' if audit else 'triage'} {view}"] = found
    assert not shown, shown
