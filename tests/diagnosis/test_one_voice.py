"""knowledge.md §16 R3.14 over every bundled example, in both languages (the knowledge
coverage examples run the same checks in test_knowledge_coverage): no word written twice,
no two actions doing the same, no action listed again as information still needed."""

from __future__ import annotations

import pytest

from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from tests.diagnosis.one_voice import problems


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("name", example_names())
def test_an_example_report_speaks_with_one_voice(name, lang):
    with example_path(name) as path:
        report = triage_path(path, use_env=False, lang=lang)
    assert not problems(report), problems(report)


def test_the_checks_find_what_they_look_for():
    report = {"conclusion": {"evidence": [{"text": "the board board decode"}]},
              "next_actions": [{"id": "lut:a", "kind": "lut_bisect"},
                               {"id": "lut:b", "kind": "lut_bisect"},
                               {"id": "qa", "kind": "quant_analysis",
                                "analysis_model_type": "convert", "baseline": "qat_bc",
                                "analysis": "quantized_bc"}],
              "missing": [{"id": "qa", "text": "x"}]}
    found = problems(report)
    assert len(found) == 3, found
