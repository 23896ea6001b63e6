"""case.yaml validation: every mistake is one error naming file, line, key and fix."""

from __future__ import annotations

import pytest

from qcdoctor.collectors.case_file import load_case, parse_case
from qcdoctor.errors import QcdoctorError

GOOD = """schema: qcdoctor/case-v1
title: demo
stages:
  qat:          {metric: mAP, value: 0.452}
  quantized_bc: {metric: mAP, value: 0.391}
retrain: yes
"""


def _error(text: str) -> QcdoctorError:
    with pytest.raises(QcdoctorError) as err:
        parse_case(text, None, None)
    return err.value


def test_good_case_reads_values_and_lines():
    case = parse_case(GOOD, None, None)
    assert case.data["stages"]["qat"] == {"metric": "mAP", "value": 0.452}
    assert case.data["retrain"] == "yes"            # YAML boolean accepted for yes/no
    assert case.lines["stages.quantized_bc"] == 5
    assert case.source("stages.qat") == "case.yaml:4 (stages.qat)"


@pytest.mark.parametrize("text,line,key,words", [
    (GOOD.replace("title: demo", "titel: demo"), 2, "titel", "did you mean 'title'"),
    (GOOD.replace("value: 0.391", "valeu: 0.391"), 5, "stages.quantized_bc.valeu", "unknown key"),
    (GOOD.replace("value: 0.452", "value: high"), 4, "stages.qat.value", "expected a number"),
    (GOOD.replace("retrain: yes", "retrain: maybe"), 6, "retrain", "yes | no | unknown"),
    (GOOD + "platform: {chip: J6X}\n", 7, "platform.chip", "J6E"),
    (GOOD + "stages:\n  qat: {status: normal}\n", 7, "stages", "given twice"),
    (GOOD + "tolerance: {abs: 0.01, rel: 0.01}\n", 7, "tolerance", "only one"),
    (GOOD + "evidence: [dataset]\n", 7, "evidence[0]", "did you mean 'dataset_eval'"),
    (GOOD + "higher_is_better: unknown\n", 7, "higher_is_better", "true or false"),
    (GOOD + "consistency_level: 5\n", 7, "consistency_level", "maximum 4"),
    (GOOD + "stages_extra: 1\n", 7, "stages_extra", "unknown key"),
    (GOOD.replace("value: 0.452", "value: .nan"), 4, "stages.qat.value", "not a finite number"),
    (GOOD + "platform: {chip: J6P, march: nash-e}\n", 7, "platform", "does not run"),
    (GOOD + "stages_list:\n- a\n", 7, "stages_list", "unknown key"),
    (GOOD.replace("schema: qcdoctor/case-v1", "schema: qcdoctor/case-v2"), 1, "schema", "expected"),
    (GOOD + "analyses_run:\n  - {type: convert, baseline: qat_bc}\n", 7, "analyses_run[0]", "no 'analysis'"),
    (GOOD + "deploy:\n  board: {stride: 0}\n", 8, "deploy.board.stride", "below the minimum 1"),
    (GOOD + "deploy:\n  board: {uv_stride: -32}\n", 8, "deploy.board.uv_stride", "below the minimum 1"),
    (GOOD + "deploy:\n  board: {stride: 1920px}\n", 8, "deploy.board.stride", "whole number"),
    (GOOD + "deploy:\n  board: {strde: 1920}\n", 8, "deploy.board.strde", "did you mean 'stride'"),
    (GOOD + "deploy:\n  train: {stride: 1920}\n", 8, "deploy.train.stride", "belongs under deploy.board"),
])
def test_mistakes_name_line_key_and_fix(text, line, key, words):
    err = _error(text)
    rendered = err.render()
    assert err.line == line, rendered
    assert err.key == key, rendered
    assert words in rendered
    assert err.fix, "every error says how to fix it"


def test_malformed_yaml_names_the_line():
    err = _error("schema: qcdoctor/case-v1\nstages:\n  qat: {metric: mAP, value: 0.4\n")
    assert "not valid YAML" in err.problem and err.line


def test_wrong_shape_is_rejected():
    assert "expected a mapping" in _error("- just\n- a list\n").problem
    assert "expected a list" in _error("evidence: {a: 1}\n").render() or \
        "expected" in _error("evidence: {a: 1}\n").render()


def test_yaml_quirks_are_read_as_meant():
    case = parse_case("tolerance: {abs: 1e-5}\nversions: {hbdk4-compiler: 4.10}\n"
                      "input_format_differs: no\n", None, None)
    assert case.data["tolerance"]["abs"] == pytest.approx(1e-5)     # not the text '1e-5'
    assert case.data["versions"]["hbdk4-compiler"] == "4.10"          # not 4.1
    assert case.data["input_format_differs"] is False


def test_empty_file_is_an_empty_case():
    assert parse_case("", None, None).data == {}
    assert parse_case("# only a comment\n", None, None).data == {}


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(QcdoctorError, match="no case.yaml"):
        load_case(tmp_path)
    with pytest.raises(QcdoctorError, match="no such case"):
        load_case(tmp_path / "nope")


def test_non_utf8_file(tmp_path):
    (tmp_path / "case.yaml").write_bytes(b"title: \xff\xfe\n")
    with pytest.raises(QcdoctorError, match="UTF-8"):
        load_case(tmp_path)


def test_loading_never_changes_the_file(tmp_path):
    path = tmp_path / "case.yaml"
    path.write_text(GOOD + "titel: x\n", encoding="utf-8")
    before = path.read_bytes()
    with pytest.raises(QcdoctorError):
        load_case(tmp_path)
    assert path.read_bytes() == before
