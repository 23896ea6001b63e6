"""A report made from a relative path, used after the working directory changed (a
notebook's %cd): it still never saves over the case's own files, named by any path, and
its other language reads the case where it was, as if nothing had moved."""

from __future__ import annotations

from pathlib import Path

import pytest

import qcdoctor
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import copy_example


@pytest.fixture
def places(tmp_path, monkeypatch) -> dict[str, Path]:
    """A copied example case under ``cases/``, the working directory there, and an empty
    folder to move to."""
    cases, elsewhere = tmp_path / "cases", tmp_path / "elsewhere"
    elsewhere.mkdir(parents=True)
    case = copy_example("convert_quant_analysis", str(cases / "mine"))
    monkeypatch.chdir(cases)
    return {"case": case, "elsewhere": elsewhere,
            "table": case / "qa_convert" / "compare_per_layer_out.txt"}


def _contents(*paths: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in paths}


def _refused(report, target: str | Path, protected: Path) -> None:
    """Saving ``report`` to ``target`` (naming ``protected``) is one clear error."""
    with pytest.raises(qcdoctor.QcdoctorError) as caught:
        report.save(target, format="md")
    assert caught.value.file == str(target), target
    assert "overwrite an input" in caught.value.problem
    assert "another file" in caught.value.fix


def test_no_save_replaces_the_case_files_after_a_chdir(places, monkeypatch):
    case, table = places["case"], places["table"]
    before = _contents(case / "case.yaml", table)
    reports = [qcdoctor.triage("mine", lang="en"), qcdoctor.triage("mine/case.yaml"),
               qcdoctor.Case.load("mine").triage(lang="en"),
               qcdoctor.Case(chip="J6E", stages={"qat_bc": 0.4}, folder="mine").triage()]
    monkeypatch.chdir(places["elsewhere"])
    for report in reports:
        # by its absolute path, and by a relative one that leads there from the new place
        for target in (case / "case.yaml", "../cases/mine/case.yaml"):
            _refused(report, target, case / "case.yaml")
    for target in (table, "../cases/mine/qa_convert/compare_per_layer_out.txt"):
        _refused(reports[0], target, table)
    assert _contents(*before) == before
    # a relative name from here is a new file here: written
    assert reports[0].save("case.yaml", format="md").resolve() == \
        places["elsewhere"] / "case.yaml"


def test_no_save_replaces_the_bundle_after_a_chdir(places, monkeypatch):
    assert main(["pack", "mine", "-o", "mine.tar.gz", "--no-env"]) == 0
    bundle = Path("mine.tar.gz").resolve()
    before = _contents(bundle)
    report = qcdoctor.triage("mine.tar.gz", lang="en")
    monkeypatch.chdir(places["elsewhere"])
    for target in (bundle, "../cases/mine.tar.gz"):
        _refused(report, target, bundle)
    assert _contents(bundle) == before


def test_the_other_language_after_a_chdir_is_the_same(places, monkeypatch):
    report = qcdoctor.triage("mine", lang="en")
    expected = qcdoctor.triage("mine", lang="zh")
    loaded = qcdoctor.Case.load("mine").triage(lang="en")
    monkeypatch.chdir(places["elsewhere"])
    for made in (report, loaded):
        other = made.in_language("zh")
        # every artifact of the case still found: present, with its path
        kept = {k.name: k.present for k in other.keep}
        assert kept == {k.name: k.present for k in expected.keep} and any(kept.values())
    assert report.in_language("zh").to_dict() == expected.to_dict()
    assert report.in_language("zh").to_markdown() == expected.to_markdown()
