"""QuantAnalysis thresholds from case.yaml or qcdoctor.toml / [tool.qcdoctor], with sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path


@pytest.fixture
def project(tmp_path) -> Path:
    """project/ (a git checkout) holding case/, the QuantAnalysis example."""
    (tmp_path / "project" / ".git").mkdir(parents=True)
    with example_path("convert_quant_analysis") as source:
        shutil.copytree(source, tmp_path / "project" / "case")
    return tmp_path / "project"


def add_to_case(case: Path, text: str) -> None:
    with open(case / "case.yaml", "a", encoding="utf-8") as handle:
        handle.write(text)


def triage(case: Path, capsys, *extra: str) -> dict:
    assert main(["triage", str(case), "--format", "json", "--lang", "en", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def sensitivity(report: dict) -> dict:
    return next(f for f in report["facts"] if f["type"] == "sensitivity_summary")


def test_case_yaml_thresholds_change_the_reading_and_say_where(project, capsys):
    before = triage(project / "case", capsys)
    assert sensitivity(before)["dominant"] is True and "LY041" in \
        [f["rule"] for f in before["findings"]]
    assert set(before["threshold_sources"].values()) == {"default"}
    add_to_case(project / "case", "thresholds:\n  dominance: 100\n")
    after = triage(project / "case", capsys)
    assert sensitivity(after)["dominant"] is False           # 80x is no longer dominant
    assert "LY041" not in [f["rule"] for f in after["findings"]]
    assert after["thresholds"]["dominance"] == 100
    assert after["threshold_sources"]["dominance"] == "case.yaml:21 (thresholds.dominance)"
    assert main(["triage", str(project / "case"), "--lang", "en"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "Thresholds" in x)
    assert "100 times the next (or the typical) one dominates (case.yaml:21 (thresholds.dominance))" \
        in line
    # the defaults named once, not each figure again (the HTML keeps them all, folded)
    assert line.endswith("the others at their defaults (docs/triage.md)")
    assert "Cosine 0.999" not in line
    from qcdoctor.engine.reports.formats import render_output
    html = render_output(after, "html")
    assert "Cosine 0.999 or more agrees with the baseline" in html.split("<details><summary>Thresholds")[1]


def test_config_files_upwards_and_case_yaml_first(project, capsys):
    (project / "qcdoctor.toml").write_text("[thresholds]\ndominance = 100\ntop_n = 3\n",
                                           encoding="utf-8")
    report = triage(project / "case", capsys)
    toml = str((project / "qcdoctor.toml").resolve())
    assert report["thresholds"]["dominance"] == 100 and report["thresholds"]["top_n"] == 3
    assert report["threshold_sources"]["top_n"] == f"{toml} (thresholds.top_n)"
    add_to_case(project / "case", "thresholds:\n  dominance: 50\n")
    report = triage(project / "case", capsys)
    assert report["thresholds"]["dominance"] == 50 and report["thresholds"]["top_n"] == 3
    assert report["threshold_sources"]["dominance"].startswith("case.yaml:")
    # --no-env: the folders above the case belong to this machine, not to the case
    report = triage(project / "case", capsys, "--no-env")
    assert report["thresholds"]["top_n"] == 10


def test_pyproject_table_and_the_search_stops_at_the_checkout(project, tmp_path, capsys):
    (tmp_path / "qcdoctor.toml").write_text("[thresholds]\ntop_n = 7\n", encoding="utf-8")
    assert triage(project / "case", capsys)["thresholds"]["top_n"] == 10     # above .git
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    assert triage(project / "case", capsys)["thresholds"]["top_n"] == 10     # no table
    # the project's own TOML, never naming qcdoctor, is not ours to judge
    (project / "pyproject.toml").write_text("[project\nname = 'x'\n", encoding="utf-8")
    assert triage(project / "case", capsys)["thresholds"]["top_n"] == 10
    (project / "pyproject.toml").write_text("[tool.qcdoctor.thresholds\ntop_n = 4\n",
                                            encoding="utf-8")
    assert main(["triage", str(project / "case")]) == 2
    assert "pyproject.toml" in capsys.readouterr().err.splitlines()[0]
    (project / "pyproject.toml").write_text("[tool.qcdoctor.thresholds]\ntop_n = 4\n",
                                            encoding="utf-8")
    report = triage(project / "case", capsys)
    assert report["thresholds"]["top_n"] == 4
    assert report["threshold_sources"]["top_n"].endswith("pyproject.toml (thresholds.top_n)")


@pytest.mark.parametrize("where, text, message, fix", [
    ("case", "thresholds:\n  dominence: 3\n", "'thresholds.dominence': unknown key",
     "did you mean 'dominance'?"),
    ("case", "thresholds:\n  top_n: 2.5\n", "'thresholds.top_n': expected a integer", None),
    ("case", "thresholds:\n  cosine_good: 1.5\n", "1.5 is above the maximum 1", None),
    ("toml", "[thresholds]\ndominence = 3\n", "'thresholds.dominence': unknown key",
     "did you mean 'dominance'?"),
    ("toml", "[thresholds]\ntop_n = 2.5\n", "expected a whole number, found 2.5", "top_n = 10"),
    ("toml", "[thresholds]\ncliff_share = 2\n", "2 is out of range", "from 0 to 1"),
    ("toml", "[thresholds]\ndominance = 'high'\n", "expected a number, found 'high'", None),
    ("toml", "[thresholds\n", "not valid TOML", None),
    ("toml", "thresholds = 3\n", "'thresholds': expected a table", None),
])
def test_bad_thresholds_are_one_clear_error(project, where, text, message, fix, capsys):
    if where == "case":
        add_to_case(project / "case", text)
        file = "case.yaml"
    else:
        (project / "qcdoctor.toml").write_text(text, encoding="utf-8")
        file = "qcdoctor.toml"
    assert main(["triage", str(project / "case")]) == 2
    err = capsys.readouterr().err
    assert file in err.splitlines()[0] and message in err
    assert fix is None or fix in err
