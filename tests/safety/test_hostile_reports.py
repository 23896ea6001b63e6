"""User text in a case never becomes markup in a report: Markdown and HTML, triage and
audit, both languages. The HTML is parsed with html5lib, the way a browser would."""

from __future__ import annotations

import re
from pathlib import Path

import html5lib
import markdown
import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.markdown import md_fenced, md_message, md_text
from tests.qa.writers import (
    layer,
    write_advisor,
    write_compare,
    write_model_check,
    write_sensitivity,
)

LUT = "horizon_plugin_pytorch.nn.qat.segment_lut.SegmentLUT"
# table cells cannot hold spaces: payloads a browser still takes as markup
NAMES = ["head.<script>alert(1)</script>", "[x](javascript:alert(2))",
         "![i](http://evil.example/i.png)", "`</code><img/src=http://evil.example/c.png>`",
         "<a/href=javascript:alert(5)>x</a>", "_em_*strong*~~del~~&x",
         "rsqrt<svg/onload=alert(9)>"]
TEXT = ("T [x](javascript:alert(1)) ![i](http://evil.example/t.png) <script>alert(2)</script> "
        "<img src=x onerror=alert(3)> `a` ``` a<b & c")
OUT_DIR = "qa\n```\n<script>alert(4)</script>\n"


def _hostile_case(root: Path) -> Path:
    case = root / "case"
    qa = case / "qa_convert"
    rows = [layer(f"backbone.s{i}.conv", 0.99995) for i in range(4)]
    rows += [layer(name, 0.80 - i * 0.01, op=f"<script>op{i}</script>", analy_op="[o](javascript:1)")
             for i, name in enumerate(NAMES)]
    write_compare(qa, rows)
    write_sensitivity(qa, [(name, "activation", LUT, 0.5 - i * 0.05, "qint8")
                           for i, name in enumerate(NAMES)]
                      + [("tail.a", "activation", LUT, 0.0, "qint8")])
    write_advisor(qa, [(NAMES[0], "<script>x</script>", f"Total data range 1e6 maybe too large "
                        f"for quantization {TEXT}", "limit it")])
    write_model_check(case / "model_check_result.txt", unfused=NAMES[:3])
    data = {"schema": "qcdoctor/case-v1", "title": TEXT, "symptom": TEXT,
            "evidence": ["dataset_eval"], "badcase": "available",
            "stages": {"qat_bc": {"metric": "[m](javascript:alert(6))", "value": 0.5},
                       "quantized_bc": {"metric": "<b>mAP</b>", "value": 0.3},
                       "hbm_x86": {"status": "abnormal"}},
            "analyses_run": [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
                              "out_dir": OUT_DIR, "sensitivity": True},
                             {"type": "convert", "baseline": "qat_bc",
                              "analysis": "quantized_bc", "out_dir": "qa_convert"}],
            "deploy": {"description": TEXT,
                       "train": {"resize": "<script>alert(7)</script>", "padding": TEXT},
                       "board": {"resize": "[r](javascript:alert(8))", "padding": "|x|y|"},
                       "nodes": {"inserted": [TEXT]}}}
    (case / "case.yaml").write_text(yaml.safe_dump(data, allow_unicode=True), encoding="utf-8")
    return case


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict:
    case = _hostile_case(tmp_path_factory.mktemp("hostile"))
    out = {}
    for lang in ("en", "zh"):
        for audit in (False, True):
            report = triage_case(load_case(case), lang=lang, environ={}, installed={}, cwd=case,
                                 full_checklist=audit)
            for fmt in ("md", "html"):
                out[(lang, audit, fmt)] = render(report, fmt, audit=audit)
    return out


def _check_html(page: str) -> str:
    """No script, no javascript: URL, no remote or any src, no event handler; the text."""
    tree = html5lib.parse(page, namespaceHTMLElements=False)
    for element in tree.iter():
        tag = element.tag if isinstance(element.tag, str) else ""
        assert tag not in ("script", "img", "svg", "iframe", "a", "b", "object", "embed"), tag
        for name, value in element.attrib.items():
            assert not name.lower().startswith("on"), (tag, name)
            assert name.lower() not in ("src", "href", "srcset", "style"), (tag, name, value)
            assert "javascript:" not in value.lower(), (tag, name, value)
    for code in tree.iter("code"):
        text = "".join(code.itertext())
        assert "&lt;" not in text and "&amp;" not in text, text      # escaped once only
    return "".join(tree.find("body").itertext())


SVG = "{http://www.w3.org/2000/svg}"
# every element the HTML report's template and matplotlib's SVG writer emit
REPORT_TAGS = {"html", "head", "meta", "title", "style", "body", "header", "nav", "main",
               "section", "footer", "h1", "h2", "h3", "p", "ul", "ol", "li", "dl", "dt", "dd",
               "a", "span", "strong", "em", "code", "pre", "div", "button", "table", "thead",
               "tbody", "tr", "th", "td", "figure", "figcaption", "script", "details", "summary"}
SVG_TAGS = {"svg", "defs", "g", "path", "use", "clipPath", "rect", "text", "pattern", "style"}


def _check_report_html(page: str) -> tuple[str, list[str]]:
    """The HTML report: only its own elements, links within the page, the one script, no
    event handler, no source of anything; (the body's text, the plots' SVG texts)."""
    from qcdoctor.engine.reports.html import COPY_SCRIPT
    tree = html5lib.parse(page, namespaceHTMLElements=False)
    anchors = {e.get("id") for e in tree.iter() if e.get("id")}
    svg_text = []
    for element in tree.iter():
        tag = element.tag if isinstance(element.tag, str) else ""
        if tag.startswith(SVG):
            assert tag[len(SVG):] in SVG_TAGS, tag
            if tag == SVG + "text":
                svg_text.append("".join(element.itertext()))
        else:
            assert tag in REPORT_TAGS or not tag, tag
        for name, value in element.attrib.items():
            name = name if isinstance(name, str) else name[1]
            assert not name.lower().startswith("on"), (tag, name)
            assert name.lower() not in ("src", "srcset", "action", "formaction"), (tag, name)
            assert "javascript:" not in value.lower(), (tag, name, value)
            if name.lower() == "href":               # a, and SVG's <use>: within the page
                assert value.startswith("#") and value[1:] in anchors, (tag, value)
            if name == "style":
                assert tag.startswith(SVG), (tag, value)
    assert ["".join(s.itertext()) for s in tree.iter("script")] == ["\n" + COPY_SCRIPT + "\n"]
    for code in tree.iter("code"):
        text = "".join(code.itertext())
        assert "&lt;" not in text and "&amp;" not in text, text      # escaped once only
    return "".join(tree.find("body").itertext()), svg_text


def test_html_reports_hold_no_markup_from_user_text(reports):
    for key, page in reports.items():
        if key[2] != "html":
            continue
        shown, svg_text = _check_report_html(page)
        # the user's text is shown as the characters it is, not dropped
        assert "<script>alert(" in shown, key
        assert "[x](javascript:alert(" in shown, key
        if not key[1]:                                   # triage: the QuantAnalysis part
            assert "head.<script>alert(1)</script>" in shown, key
            # and in the plots: layer names label the sensitivity bars, escaped as text
            assert {"head.<script>alert(1)</script>", "rsqrt<svg/onload=alert(9)>"} <= \
                set(svg_text), (key, svg_text)


def test_markdown_reports_hold_no_markup_from_user_text(reports):
    for key, md in reports.items():
        if key[2] != "md":
            continue
        prose = re.sub(r"(?ms)^(`{3,})python\n.*?^\1$", "", md)      # code blocks
        prose = re.sub(r"`[^`\n]*`", "", prose)                         # code spans
        assert not re.search(r"<(?!br>)[A-Za-z/!?]", prose), key   # no tag but the table <br>
        assert not re.search(r"(?<!\\)!?\[[^\]\n]*\]\(", prose), key  # no link, no image
        # any Markdown renderer (here Python-Markdown) makes safe HTML of it
        shown = _check_html(markdown.markdown(md, extensions=["tables", "fenced_code"]))
        assert "<script>alert(2)</script>" in shown, key


def test_a_fence_in_user_text_cannot_close_the_code_block(reports):
    md = reports[("en", False, "md")]
    assert "```\n<script>" not in md
    block = md_fenced('x = "```"\n````\nos.system("id")\n')
    assert block.startswith("`````python\n") and block.endswith("\n`````")
    html = markdown.markdown("1. a\n\n" + block + "\n", extensions=["fenced_code"])
    tree = html5lib.parse(html, namespaceHTMLElements=False)
    assert ["".join(c.itertext()) for c in tree.iter("code")] == ['x = "```"\n````\nos.system("id")\n']


@pytest.mark.parametrize("text", ["# heading", "- item", "1. item", "> quote", "a_b_ _c_",
                                  "**b** *i*", "[l](x) ![i](y) <u> &amp;", "x | y", "~~s~~"])
def test_user_text_renders_as_itself(text):
    for escaped in (md_text(text), md_message(text)):
        html = markdown.markdown("- " + escaped, extensions=["tables"])
        tree = html5lib.parse(html, namespaceHTMLElements=False)
        item = tree.find("body").find("ul").find("li")
        assert "".join(item.itertext()) == text and not list(item), (text, html)


def test_terminal_escapes_and_bidi_overrides_are_shown_not_obeyed():
    for shown in (md_text("a\x1b[31mred\x07 \u202egnp.exe"), md_message("`\x1b]0;x\x07`")):
        assert not any(ch in shown for ch in "\x1b\x07\u202e"), shown
        assert "\ufffd" in shown


def test_message_code_spans_stay_code_and_values_cannot_break_them():
    from qcdoctor.text import render as fill
    message = fill("the error starts at `{f.layer}` ({f.where})",
                   {"f": {"layer": "a`b<script>", "where": "`x` [l](javascript:1)"}})
    assert message == "the error starts at `a'b<script>` ('x' [l](javascript:1))"
    html = markdown.markdown(md_message(message))
    tree = html5lib.parse(html, namespaceHTMLElements=False)
    assert ["".join(c.itertext()) for c in tree.iter("code")] == ["a'b<script>"]
    assert not list(tree.iter("a"))


def test_generated_code_keeps_the_names_exactly(reports):
    import ast
    md = reports[("en", False, "md")]
    blocks = re.findall(r"(?ms)^(`{3,})python\n(.*?)^\1$", md)
    strings = {n.value for _, code in blocks for n in ast.walk(ast.parse(code))
               if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    found = strings & set(NAMES)
    assert found, strings                         # the names the code needs reach it...
    mangled = {s for s in strings - set(NAMES)
               if any(bit in s for bit in ("alert(", "evil.example", "*strong*"))}
    assert not mangled                            # ...exactly: only messages lose backticks
