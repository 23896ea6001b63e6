"""Every problem of a case.yaml in one run, as a linter reports them: each with its line,
key and fix, in the order of the file, the list of allowed keys whole."""

from __future__ import annotations

import pytest

from qcdoctor.collectors.case_file import CASE_SCHEMA, parse_case
from qcdoctor.collectors.yaml_schema import MAX_PROBLEMS
from qcdoctor.engine.commands.cli import main
from qcdoctor.errors import QcdoctorError

THREE_TYPOS = """schema: qcdoctor/case-v1
titel: drop after convert
evidence: [dataset_eval]
platform: {chip: J6X}
stages:
  qat_bc: {metric: mAP, value: 0.449}
  quantized_bc: {metirc: mAP, value: 0.391}
"""


def _error(text: str) -> QcdoctorError:
    with pytest.raises(QcdoctorError) as caught:
        parse_case(text, None, None)
    return caught.value


def test_three_typos_are_reported_together_in_file_order():
    error = _error(THREE_TYPOS)
    assert [(p.line, p.key) for p in error.problems] == [
        (2, "titel"), (4, "platform.chip"), (7, "stages.quantized_bc.metirc")]
    assert [p.fix.split("?")[0] for p in error.problems] == [
        "did you mean 'title'", "did you mean 'J6P'", "did you mean 'metric'"]
    text = error.render()
    assert text.startswith("case.yaml: 3 problems:\n- case.yaml:2: 'titel': unknown key\n")
    assert text.count("\n    fix: ") == 3
    # the first problem is the error's own, for callers that read one
    assert (error.line, error.key) == (2, "titel")


def test_one_problem_reads_as_it_always_did():
    error = _error(THREE_TYPOS.replace("titel", "title").replace("J6X", "J6P")
                   .replace("metirc", "metric").replace("0.391", "abc"))
    assert error.problems == [error]
    assert error.render() == ("case.yaml:7: 'stages.quantized_bc.value': expected a number, "
                              "found 'abc'\n  fix: write a plain number such as 0.449")


def test_a_bad_value_of_a_required_key_is_not_also_called_missing():
    text = THREE_TYPOS.replace("platform: {chip: J6X}", "platform: {chip: J6P}").replace(
        "  quantized_bc: {metirc: mAP, value: 0.391}\n",
        "analyses_run:\n  - {type: convert, baseline: qat_bc, analysis: quantized_bcc}\n")
    error = _error(text.replace("titel", "title"))
    assert [p.key for p in error.problems] == ["analyses_run[0].analysis"]


def test_the_allowed_keys_are_listed_whole():
    error = _error("schema: qcdoctor/case-v1\nzzz: 1\n")
    assert error.fix.endswith(", ".join(CASE_SCHEMA.fields))
    assert "left out" not in error.render()


def test_past_the_limit_the_rest_are_counted():
    keys = "".join(f"unknown_{i}: 1\n" for i in range(MAX_PROBLEMS + 5))
    error = _error("schema: qcdoctor/case-v1\n" + keys)
    assert len(error.problems) == MAX_PROBLEMS + 5
    text = error.render()
    assert text.count("unknown key") == MAX_PROBLEMS
    assert text.rstrip().endswith("- ... and 5 more (fix these and run again)")


def test_the_command_prints_them_all_once(tmp_path, capsys):
    (tmp_path / "case.yaml").write_text(THREE_TYPOS, encoding="utf-8")
    assert main(["triage", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"qcdoctor: error: {tmp_path / 'case.yaml'}: 3 problems:")
    for line, key in ((2, "titel"), (4, "platform.chip"), (7, "stages.quantized_bc.metirc")):
        assert err.count(f"{tmp_path / 'case.yaml'}:{line}: '{key}':") == 1


def test_in_a_bundle_every_problem_names_the_member(tmp_path, capsys):
    import io
    import tarfile
    path = tmp_path / "b.tar.gz"
    data = THREE_TYPOS.encode()
    with tarfile.open(path, "w:gz") as archive:
        info = tarfile.TarInfo("case/case.yaml")
        info.size = len(data)
        archive.addfile(info, io.BytesIO(data))
    assert main(["triage", str(path)]) == 2
    err = capsys.readouterr().err
    for line in (2, 4, 7):
        assert f"- {path}: case/case.yaml:{line}: '" in err
    assert "tmp" not in err.replace(str(path), "")     # no extracted temporary path
