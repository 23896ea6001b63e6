"""Every value a fact field can take, and every rule's output, has words in every format
and both languages: a report that holds one (an error kind, a pattern, a scope, a cost)
renders in Markdown, HTML, the terminal, JSON, SARIF and JUnit, never an internal error.

The fact values are enumerated from common/fact_types.py, so a value added there is
rendered here without a change to this test: report k holds one fact of every type, each
closed field at its k-th value (cycling), so every value of every field is in some report.
The rules' outputs (action kinds, costs, ranks, checklist states) come from each rule's
own examples that fire, run through the whole rule book."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from qcdoctor.engine.diagnosis.diagnose import build_report, run_rules
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.reports.formats import render_output
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.fact_types import FACT_TYPES, normalise
from qcdoctor.wording import labels

# what generated code reads from a case (engine/diagnosis/triage.py case_context)
CONTEXT = {"march": "nash-e", "plugin_numbering": "new", "input_format_differs": False,
           "has_task_input": False, "badcase": "unknown", "out_dirs": {}}
FORMATS = ("md", "html", "json", "sarif", "junit", "terminal")


def _closed_fields() -> list[tuple[str, str, tuple]]:
    return [(ftype, name, field.choices) for ftype, fields in FACT_TYPES.items()
            for name, field in fields.items() if field.choices]


def _depth() -> int:
    return max(len(choices) for _, _, choices in _closed_fields())


def _facts_at(k: int) -> list[dict]:
    facts = []
    for ftype, fields in FACT_TYPES.items():
        fact = {"type": ftype}
        for name, field in fields.items():
            if field.choices:
                fact[name] = field.choices[k % len(field.choices)]
        facts.append({**normalise(fact), "source": "case.yaml"})
    return facts


def _render_everywhere(facts: list[dict], lang: str) -> dict[str, str]:
    hits = run_rules(facts)
    report = build_report(facts, hits, lang=lang, case_info={"path": "case", "title": ""},
                          case_context=CONTEXT, files=[])
    out = {}
    for fmt in FORMATS:
        out[fmt] = (render_terminal(report, color=False) if fmt == "terminal"
                    else render_output(report, fmt))
        assert out[fmt].strip(), (fmt, lang)
    json.loads(out["json"])
    json.loads(out["sarif"])
    ET.fromstring(out["junit"])
    return out


def test_the_enumeration_reaches_every_value():
    covered = {(ftype, name, choices[k % len(choices)])
               for k in range(_depth()) for ftype, name, choices in _closed_fields()}
    wanted = {(ftype, name, value) for ftype, name, choices in _closed_fields()
              for value in choices}
    assert covered == wanted
    assert len(wanted) > 500


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("k", range(_depth()))
def test_every_fact_value_renders_in_every_format(k, lang):
    out = _render_everywhere(_facts_at(k), lang)
    for fmt in ("md", "terminal"):
        assert "internal error" not in out[fmt]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_every_error_kind_has_its_words(lang):
    """The QuantAnalysis section words each kind at a source (but 'unclear', which it
    leaves out); a kind without words ended every text report in a KeyError."""
    kinds = FACT_TYPES["error_kind"]["kind"].choices
    qa = labels()[lang]["qa"]
    assert "weight" in kinds
    assert {k for k in kinds if k != "unclear"} <= {key[len("kind_"):] for key in qa
                                                    if key.startswith("kind_")}


def _fires_examples():
    for rule in load_rules():
        for i, example in enumerate(rule.examples.get("fires", [])[:1]):
            yield pytest.param(rule.id, example, id=f"{rule.id}-{i}")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("rule_id, example", list(_fires_examples()))
def test_every_rule_output_renders_in_every_format(rule_id, example, lang):
    facts = [{**normalise(f), "source": "case.yaml"} for f in example]
    out = _render_everywhere(facts, lang)
    assert rule_id in out["json"]        # it fired within the whole rule book too
