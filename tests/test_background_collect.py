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
        assert collection._child is not None                 # it really forked
        assert collection.result() == expected
        assert files.read == expected_files.read and files.refused == expected_files.refused


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
        assert collect_early(case, files, **OPTIONS).result() == expected
        assert files.read == expected_files.read


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
