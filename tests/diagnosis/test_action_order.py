"""The order of next actions when the analysis located the op (knowledge.md §16 R3.6) and
when the user cannot retrain (R3.7), on the bundled QuantAnalysis example and variants."""

from __future__ import annotations

import shutil

import pytest
import yaml

from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.matching.rulebook import load_rules_from
from qcdoctor.errors import RuleError
from tests.matching.test_catalogue import GOOD, _write_rule


def _example_case(tmp_path, **changes):
    """The bundled convert_quant_analysis case, with case.yaml keys changed."""
    with example_path("convert_quant_analysis") as source:
        folder = tmp_path / "case"
        shutil.copytree(source, folder)
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    data.update(changes)
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def _ids(report):
    return [(a["id"], a["rule"], a["cost"]) for a in report["next_actions"]]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_located_op_remedy_comes_first_and_bc_editor_confirms_after_it(lang):
    with example_path("convert_quant_analysis") as folder:
        report = triage_path(folder, lang=lang, use_env=False)
    ids = _ids(report)
    assert ids[0][:2] == ("fixed_scale:head.reciprocal", "LY030"), ids
    rules = [rule for _, rule, _ in ids]
    assert "AN041" not in rules                       # "if not located" does not apply
    assert rules.index("AN042") > 0                   # the confirmation, after the remedy
    label = "[needs retraining (QAT)]" if lang == "en" else "【需要重新训练（QAT）】"
    assert report["next_actions"][0]["text"].startswith(label)


def test_without_retraining_the_qat_remedy_is_labelled_and_never_first(tmp_path):
    report = triage_path(_example_case(tmp_path, retrain="no"), lang="en", use_env=False)
    ids = _ids(report)
    assert ids[0][2] != "retrain", ids
    retrain = [i for i, (_, _, cost) in enumerate(ids) if cost == "retrain"]
    assert retrain and retrain == list(range(len(ids) - len(retrain), len(ids)))  # last
    fixed = next(a for a in report["next_actions"] if a["id"].startswith("fixed_scale:"))
    assert fixed["text"].startswith("[needs retraining: you said you cannot retrain]")


def test_an_unknown_rank_is_refused_with_the_file_and_key(tmp_path):
    # the stage rule has no action of its own: give it one with a rank nobody knows
    text = GOOD.replace("then:\n", "then:\n  next_action: {id: x, kind: provide_info, "
                                   "cost: verify, rank: soonest}\n", 1)
    assert "rank: soonest" in text
    root = _write_rule(tmp_path, "stage", "ST050-broken.yaml", text)
    with pytest.raises(RuleError) as err:
        load_rules_from(root)
    assert "rank" in str(err.value) and "ST050-broken.yaml" in str(err.value)
