"""The HTML report: rendered from the Diagnosis with its own template, plots inline.

One self-contained file: inline CSS, inline SVG plots, one small inline script (the copy
buttons, which stay hidden without JavaScript), no network, system fonts. Every string
from a case goes through Jinja's autoescaping (or ``message`` for rule messages), and the
page through ``visible`` (common/safe_text.py): controls and bidi controls in text and
attributes shown as U+FFFD. That is the same as doing it to every value, since escaping
neither makes nor removes them and the template holds none.
"""

from __future__ import annotations

from functools import lru_cache

from markupsafe import Markup, escape

from qcdoctor.engine.reports.view import audit_view, failed_first, view_model
from qcdoctor.safe_text import visible
from qcdoctor.templating import new_environment
from qcdoctor.text import code_spans

# the only script of the page: shows the copy buttons and copies their block's code
COPY_SCRIPT = """document.querySelectorAll("button.copy").forEach(function (b) {
  b.hidden = false;
  b.addEventListener("click", function () {
    var code = document.getElementById(b.dataset.target).textContent;
    navigator.clipboard.writeText(code).then(function () {
      b.textContent = b.dataset.done;
    }, function () {});
  });
});"""


def message(value) -> Markup:
    """A rule message: its `code` spans (values in them hold no backtick, common/text.py)
    become <code>; everything is escaped."""
    return Markup("").join(Markup("<code>{}</code>").format(part) if code else escape(part)
                           for part, code in code_spans(str(value)))


@lru_cache(maxsize=1)
def _environment():
    return new_environment(autoescape=True, filters={"message": message})


def _cited_rules(report: dict, lang: str) -> list[dict]:
    from qcdoctor.engine.matching.rulebook import rule_by_id
    ids = dict.fromkeys(t["rule"] for t in report["trace"])
    out = []
    for rule_id in ids:
        rule = rule_by_id(rule_id)
        if rule is not None:
            out.append({"id": rule.id, "title": rule.title[lang], "why": rule.rationale[lang],
                        "severity": rule.severity})
    return out


def render_html(report: dict, audit: bool = False) -> str:
    from qcdoctor import __version__
    from qcdoctor.engine.reports.plots import report_plots
    view = view_model(report)
    L = view["L"]
    plots: dict[str, list] = {}              # kind (stages, layers, ...) -> its plots
    # an audit page is its table: no chart would say more than it
    for plot in ([] if audit else report_plots(report, L)):
        plots.setdefault(plot.kind, []).append(plot)
    view.update(
        audit=audit, plots=plots,
        checklist=failed_first(report["checklist"]), rules=_cited_rules(report, view["lang"]),
        **audit_view(report), copy_script=COPY_SCRIPT, V=L["view"],
        footer=L["view"]["generated_by"].format(version=__version__))
    return render_view("report.html.j2", **view)


def render_view(template: str, **context) -> str:
    """An HTML view (the report, the batch index) rendered alike: the report's stylesheet
    (page_style.css.j2, included by each), its filters, its sanitiser."""
    return visible(_environment().get_template(template).render(**context))
