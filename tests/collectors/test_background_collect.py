"""The command line reads a case in a forked child while it loads the rest of itself: the
case, its facts and the record of what was read must be exactly those of reading it
in-process, and a child that fails or dies must change nothing but the time taken."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from qcdoctor.collectors import case_facts
from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.files import CaseFiles
from qcdoctor.collectors.threshold_sources import resolve as resolve_thresholds
from qcdoctor.engine.commands.background import read_early
from qcdoctor.engine.commands.examples import example_names, example_path
from qcdoctor.errors import QcdoctorError

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="reads in-process without fork")
OPTIONS = dict(environ={}, installed={}, use_env=False)


def _inline(path):
    case = load_case(path)
    files = CaseFiles(case.folder)
    return case, files, case_facts.collect_case(case, files=files, **OPTIONS)


@pytest.mark.parametrize("name", example_names())
def test_the_child_reads_what_the_parent_would(name):
    with example_path(name) as path:
        expected_case, expected_files, expected = _inline(path)
        reading = read_early(path, **OPTIONS)
        # the child does the reading (it would not fork beside a thread another test left)
        assert reading._child.forked, f"threads running: {threading.enumerate()}"
        case, files, collected, thresholds = reading.result()
    assert case == expected_case and collected == expected
    assert files.read == expected_files.read and files.refused == expected_files.refused
    # what it resolved comes with its facts, as the parent would resolve it
    assert thresholds == resolve_thresholds(expected_case, use_env=False)


def test_a_child_that_dies_leaves_the_parent_to_read(monkeypatch):
    parent = os.getpid()
    real = case_facts.collect_case

    def dies_in_the_child(*args, **kwargs):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    monkeypatch.setattr(case_facts, "collect_case", dies_in_the_child)
    with example_path("convert_quant_analysis") as path:
        expected_case, expected_files, expected = _inline(path)
        case, files, collected, thresholds = read_early(path, **OPTIONS).result()
    assert case == expected_case and collected == expected
    assert files.read == expected_files.read
    assert thresholds == resolve_thresholds(expected_case, use_env=False)


def test_an_error_is_worded_by_reading_again_in_the_parent(tmp_path):
    (tmp_path / "case.yaml").write_text("schema: qcdoctor/case-v1\nstages: [1, 2\n",
                                        encoding="utf-8")
    with pytest.raises(QcdoctorError) as raised:
        read_early(tmp_path, **OPTIONS).result()
    assert "case.yaml" in raised.value.render() and "line" in raised.value.render()


def test_a_collector_error_is_worded_by_collecting_again_in_the_parent(monkeypatch):
    def refuses(*args, **kwargs):
        raise QcdoctorError("the table is broken", file="qa/compare_per_layer_out.txt",
                            fix="send the whole file")
    monkeypatch.setattr(case_facts, "collect_case", refuses)
    with example_path("convert_j6e_no_retrain") as path:
        with pytest.raises(QcdoctorError) as raised:
            read_early(path, **OPTIONS).result()
    assert "compare_per_layer_out.txt" in raised.value.render()
    assert "send the whole file" in raised.value.render()


def test_a_case_read_in_the_child_reaches_a_report_without_the_reading_code(tmp_path):
    """The parent builds the report from what the child sent: it never imports PyYAML nor
    the case-file reader (that is the point of reading there)."""
    import subprocess
    import sys
    probe = ("import sys\nfrom qcdoctor.engine.commands.cli import main\n"
             "code = main(['triage', '--example', 'convert_j6e_no_retrain', '-o', sys.argv[1]])\n"
             "print(code, sorted(m for m in ('yaml', 'qcdoctor.collectors.case_file') "
             "if m in sys.modules))")
    # a rule cache of its own, warmed by a first run: with a cold or stale cache (another
    # checkout's run rewrote the shared one) the parent parses the rule files itself
    env = {**os.environ, "QCDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", probe, str(tmp_path / "r.md")],
                             capture_output=True, text=True, check=True, env=env).stdout
    assert out.split() == ["0", "[]"]
    assert "convert" in (tmp_path / "r.md").read_text(encoding="utf-8")


def test_a_settings_file_found_by_the_child_reaches_the_report(tmp_path):
    """The thresholds the child read the case with are the report's, with their source."""
    from qcdoctor.engine.commands.cli import main
    from qcdoctor.engine.commands.examples import copy_example
    case = copy_example("convert_quant_analysis", str(tmp_path / "case"))
    (tmp_path / "qcdoctor.toml").write_text("[thresholds]\ncosine_good = 0.97\n",
                                            encoding="utf-8")
    out = tmp_path / "report.json"
    assert main(["triage", str(case), "--format", "json", "-o", str(out)]) == 0
    import json
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["thresholds"]["cosine_good"] == 0.97
    assert "qcdoctor.toml" in report["threshold_sources"]["cosine_good"]
