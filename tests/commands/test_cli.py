"""The command line as a user runs it: exit codes, messages, files, start-up cost."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from qcdoctor.engine.commands.cli import main


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "qcdoctor", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


CONVERT = """schema: qcdoctor/case-v1
title: "<script>alert(1)</script> | drop"
evidence: [dataset_eval]
stages:
  qat_bc: {metric: mAP, value: 0.449}
  quantized_bc: {metric: mAP, value: 0.391}
"""


@pytest.fixture
def case(tmp_path):
    (tmp_path / "case.yaml").write_text(CONVERT, encoding="utf-8")
    return tmp_path


def test_triage_example_in_both_languages_and_json(capsys):
    assert main(["triage", "--example", "convert_j6e_no_retrain", "--lang", "en"]) == 0
    assert "## Summary" in capsys.readouterr().out
    assert main(["triage", "--example", "convert_j6e_no_retrain"]) == 0
    assert "## 结论摘要" in capsys.readouterr().out
    assert main(["triage", "--example", "wide_gap", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["conclusion"]["stage"] == "undetermined"


def test_examples_lists_every_bundled_case(capsys):
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    assert "convert_j6e_no_retrain" in out and "wide_gap" in out


def test_fail_on_sets_exit_code(case):
    assert main(["triage", str(case), "--fail-on", "error", "-o", str(case / "r.md")]) == 1
    assert main(["triage", str(case), "--fail-on", "never", "-o", str(case / "r.md")]) == 0
    assert main(["triage", "--example", "pre_export_lut", "--fail-on", "error",
                 "-o", str(case / "r2.md")]) == 1


def test_output_file_is_written_and_inputs_are_protected(case, capsys):
    assert main(["triage", str(case), "--format", "json", "-o", str(case / "report.json")]) == 0
    assert json.loads((case / "report.json").read_text())["schema"] == "qcdoctor/report-v1"
    before = (case / "case.yaml").read_bytes()
    assert main(["triage", str(case), "-o", str(case / "case.yaml")]) == 2
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (case / "case.yaml").read_bytes() == before


def test_html_escapes_user_text(case, capsys):
    assert main(["triage", str(case), "--format", "html", "--lang", "en"]) == 0
    page = capsys.readouterr().out
    assert "<script>alert" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<table class=\"stages\">" in page and "<h2>Summary</h2>" in page


@pytest.mark.parametrize("content,words", [
    ("schema: qcdoctor/case-v1\nstages:\n  qat: {value: [1}\n", "not valid YAML"),
    ("schema: qcdoctor/case-v1\nplatfrom: {chip: J6E}\n", "did you mean 'platform'"),
    ("stages:\n  qat: {value: abc}\n", "expected a number"),
    ("retrain: perhaps\n", "yes | no | unknown"),
])
def test_broken_case_files_give_one_clear_error(tmp_path, content, words):
    (tmp_path / "case.yaml").write_text(content, encoding="utf-8")
    result = run("triage", str(tmp_path))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert words in result.stderr
    assert str(tmp_path / "case.yaml") in result.stderr
    assert result.stdout == ""


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["triage"]) == 2
    assert "either a case folder or --example" in capsys.readouterr().err
    assert main(["triage", "--example", "nope"]) == 2
    assert main(["triage", str(tmp_path)]) == 2          # no case.yaml
    assert main(["rules", "explain", "XX999"]) == 2
    with pytest.raises(SystemExit) as exc:
        main(["triage", "--format", "pdf"])
    assert exc.value.code == 2


def test_rules_list_and_explain(capsys):
    assert main(["rules", "list", "--format", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert any(r["id"] == "ST050" for r in listed)
    assert main(["rules", "explain", "CS022", "--lang", "en"]) == 0
    assert "level 1" in capsys.readouterr().out


def test_collect_prints_facts_with_sources(case, capsys):
    assert main(["collect", str(case), "--format", "json"]) == 0
    facts = json.loads(capsys.readouterr().out)
    stage = next(f for f in facts if f["type"] == "stage" and f["stage"] == "quantized_bc")
    assert stage["status"] == "abnormal" and stage["source"].startswith("case.yaml:6")


def test_help_imports_neither_torch_nor_pandas():
    code = ("import sys; from qcdoctor.engine.commands.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'pandas', 'durable', 'jinja2', 'matplotlib', 'rich')\n"
            "         if m in sys.modules]\n"
            "print(heavy)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_console_script_runs():
    result = subprocess.run(["qcdoctor", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.startswith("qcdoctor ")


def test_triage_reads_quantanalysis_outputs_and_trusts_pickles_only_when_asked(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from tests.collectors.test_quant_analysis import Custom
    from tests.qa.scenarios import build
    case = build("truncation", tmp_path)
    torch.save([("a", "activation", Custom(), 0.5, "qint8")],
               case / "qa_convert" / "output_z_L1_sensitive_ops.pt")
    assert main(["triage", str(case), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert any("--trust-pickles" in f["problem"] for f in report["facts"]
               if f["type"] == "artifact_problem")
    assert main(["collect", str(case), "--format", "json", "--trust-pickles"]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert any(f["type"] == "sensitivity_summary" and f["output"] == "z" for f in facts)


def test_rule_docs_cover_every_rule(tmp_path):
    from qcdoctor.engine.matching.rulebook import load_rules
    out = tmp_path / "rules.md"
    assert main(["rules", "docs", "--lang", "en", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")
    for rule in load_rules():
        assert f"## {rule.id}: {rule.title['en']}" in text
    assert "# deploy/ (" in text and "# stage/ (" in text


def test_a_case_without_analysis_outputs_or_dumps_never_loads_numpy_or_pandas():
    code = ("import sys\nfrom qcdoctor.engine.commands.cli import main\n"
            "main(['triage', '--example', 'board_nv12_deploy', '-o', '/dev/null'])\n"
            "print('HEAVY:' + ','.join(m for m in ('numpy', 'pandas', 'torch', 'matplotlib')\n"
            "                           if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip().endswith("HEAVY:"), result.stdout + result.stderr


@pytest.mark.parametrize("command", ["triage", "audit"])
def test_an_example_reads_the_same_whatever_this_machine_holds(command, tmp_path, capsys,
                                                               monkeypatch):
    """An example is someone else's case: a board variable, a board file in the working
    folder or a settings file cannot change it (as --no-env)."""
    args = [command, "--example", "convert_j6e_no_retrain", "--format", "json", "--lang", "en"]
    assert main([*args, "--no-env"]) == 0
    alone = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("BOARD_TYPE", "nash-p")
    (tmp_path / ".horizon").mkdir()
    (tmp_path / ".horizon" / ".env.board").write_text("BOARD_TYPE=nash-p\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert main(args) == 0
    here = json.loads(capsys.readouterr().out)
    assert here == alone
    platform = next(f for f in here["facts"] if f["type"] == "platform")
    assert platform["march"] == "nash-e" and "this machine" not in json.dumps(here)
