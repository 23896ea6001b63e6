"""The command line reads a case in a forked child while it loads the rest of itself: the
facts and the record of what was read must be exactly those of collecting in-process, and
a child that fails or dies must change nothing but the time taken."""

from __future__ import annotations

import os
import signal

import pytest

from qcdoctor.collectors import case_facts
from qcdoctor.collectors.background import collect_early
from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.files import CaseFiles
from qcdoctor.collectors.threshold_settings import resolve as resolve_thresholds
from qcdoctor.engine.errors import QcdoctorError
from qcdoctor.engine.examples import example_names, example_path

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="collects in-process without fork")
OPTIONS = dict(environ={}, installed={}, use_env=False)


def _inline(case):
    files = CaseFiles(case.folder)
    return case_facts.collect_case(case, files=files, **OPTIONS), files


@pytest.mark.parametrize("name", example_names())
def test_the_child_collects_what_the_parent_would(name):
    with example_path(name) as path:
        case = load_case(path)
        expected, expected_files = _inline(case)
        files = CaseFiles(case.folder)
        collection = collect_early(case, files, **OPTIONS)
        assert collection.result() == expected
        assert files.read == expected_files.read and files.refused == expected_files.refused
        # the child answered (what it resolved comes with its facts), as the parent would
        assert collection.thresholds == resolve_thresholds(case, use_env=False)


def test_a_child_that_dies_leaves_the_parent_to_collect(monkeypatch):
    parent = os.getpid()
    real = case_facts.collect_case

    def dies_in_the_child(*args, **kwargs):
        if os.getpid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    monkeypatch.setattr(case_facts, "collect_case", dies_in_the_child)
    with example_path("convert_quant_analysis") as path:
        case = load_case(path)
        expected, expected_files = _inline(case)
        files = CaseFiles(case.folder)
        collection = collect_early(case, files, **OPTIONS)
        assert collection.result() == expected
        assert files.read == expected_files.read
        assert collection.thresholds is None        # collected here: resolved here too


def test_an_error_is_worded_by_collecting_again_in_the_parent(monkeypatch):
    def refuses(*args, **kwargs):
        raise QcdoctorError("the table is broken", file="qa/compare_per_layer_out.txt",
                            fix="send the whole file")
    monkeypatch.setattr(case_facts, "collect_case", refuses)
    with example_path("convert_j6e_no_retrain") as path:
        case = load_case(path)
        with pytest.raises(QcdoctorError) as raised:
            collect_early(case, CaseFiles(case.folder), **OPTIONS).result()
    assert "compare_per_layer_out.txt" in raised.value.render()
    assert "send the whole file" in raised.value.render()


def test_a_settings_file_found_by_the_child_reaches_the_report(tmp_path):
    """The thresholds the child read the case with are the report's, with their source."""
    from qcdoctor.engine.cli import main
    from qcdoctor.engine.examples import copy_example
    case = copy_example("convert_quant_analysis", str(tmp_path / "case"))
    (tmp_path / "qcdoctor.toml").write_text("[thresholds]\ncosine_good = 0.97\n",
                                            encoding="utf-8")
    out = tmp_path / "report.json"
    assert main(["triage", str(case), "--format", "json", "-o", str(out)]) == 0
    import json
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["thresholds"]["cosine_good"] == 0.97
    assert "qcdoctor.toml" in report["threshold_sources"]["cosine_good"]
