"""A long-lived process (a notebook's kernel, a service): many triages in one process, and
a Ctrl-C in the middle of one, leave the next triage working, and leave no process,
temporary folder or open file behind.

The interrupts land at chosen points: a trace function raises KeyboardInterrupt where
the named function is entered, as a signal arriving there would. (A real kernel
interrupt, at whatever point it falls, is in test_notebook.py.)
"""

from __future__ import annotations

import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

import qcdoctor
from qcdoctor.engine.commands.examples import copy_example
from qcdoctor.engine.matching.engine_process import engine_process
from tests.api.helpers import children, open_descriptors

NUMBERS = dict(chip="J6E", metric="mAP", evidence=["dataset_eval"],
               stages={"qat_bc": 0.447, "quantized_bc": 0.391})


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The temporary folder every temporary file and folder of this test goes to."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def others():
    """Child processes this test did not start (none, usually)."""
    engine_process().close()
    return children()


def strays(others: set[int]) -> set[int]:
    """Child processes left behind: any but the engine's worker and the one it started
    last (a worn worker's successor, started ahead of need)."""
    engine = engine_process()
    return children() - others - {engine.worker_pid(), engine.stats.last_worker_pid}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    from qcdoctor.engine.commands.cli import main
    root = tmp_path_factory.mktemp("bundle")
    case = copy_example("convert_quant_analysis", str(root / "case"))
    assert main(["pack", str(case), "-o", str(root / "case.tar.gz")]) == 0
    return root / "case.tar.gz"


@contextmanager
def interrupted_at(function: str, module_file: str):
    """Ctrl-C as ``function`` of ``module_file`` (a file name) is entered, once."""
    hit = []

    def trace(frame, event, arg):
        code = frame.f_code
        if event == "call" and code.co_name == function and \
                Path(code.co_filename).name == module_file:
            sys.settrace(None)
            hit.append(True)
            raise KeyboardInterrupt
        return None
    before = sys.gettrace()
    sys.settrace(trace)
    try:
        with pytest.raises(KeyboardInterrupt):
            yield
    finally:
        sys.settrace(before)
    assert hit, f"{function} was never reached"


def settled() -> int:
    """After a triage: this process's open descriptors, less the engine workers' own
    (each running worker holds three: its two-way channel and its log)."""
    qcdoctor.triage(example="board_only")
    engine = engine_process()
    workers = {engine.worker_pid(), engine.stats.last_worker_pid} & children()
    return open_descriptors() - 3 * len(workers)


# where a triage is interrupted, and what is triaged
POINTS = [
    ("poll", "child_process.py", "example"),            # waiting for the engine worker's answer
    ("collect_case", "case_facts.py", "example"),       # reading the case's tables
    ("_extracted_case", "bundle.py", "bundle"),         # unpacking a support bundle
    ("triage_case", "triage.py", "case"),               # a Case in its temporary folder
    ("report_plots", "plots.py", "html"),               # drawing the HTML report's plots
]


@pytest.mark.parametrize("function, module_file, what", POINTS, ids=[p[0] for p in POINTS])
def test_a_triage_interrupted_leaves_the_next_one_working(function, module_file, what,
                                                          own_tmp, bundle, others):
    def run():
        if what == "bundle":
            return qcdoctor.triage(bundle, lang="en")
        if what == "case":
            return qcdoctor.Case(**NUMBERS).triage(lang="en")
        report = qcdoctor.triage(example="convert_quant_analysis", lang="en")
        return report.to_html() if what == "html" else report

    expected = qcdoctor.triage(example="convert_quant_analysis", lang="en").to_dict()
    run()               # what loads once per process (fonts the plots keep open) is loaded
    before_fds = settled()
    worker = engine_process().worker_pid()
    with interrupted_at(function, module_file):
        run()
    assert qcdoctor.triage(example="convert_quant_analysis", lang="en").to_dict() == expected
    run()
    if function == "poll":          # its answer was lost: that worker is stopped and reaped
        assert engine_process().worker_pid() != worker
        assert not Path(f"/proc/{worker}").exists()
    assert settled() <= before_fds
    assert not strays(others)
    assert not list(own_tmp.iterdir())


def test_many_triages_in_one_process(own_tmp, bundle, tmp_path, others):
    folder = copy_example("convert_j6p", str(tmp_path / "folder"))
    runs = [lambda: qcdoctor.triage(example="wide_gap"),
            lambda: qcdoctor.audit(folder, lang="en"),
            lambda: qcdoctor.triage(bundle),
            lambda: qcdoctor.Case(**NUMBERS).stage("board", 0.2).triage()]
    first = [run().to_dict() for run in runs]
    before_fds = settled()
    workers = set()
    for _ in range(30):
        for run, expected in zip(runs, first, strict=True):
            assert run().to_dict() == expected
            workers.add(engine_process().worker_pid())
    assert settled() <= before_fds
    # one engine worker serves them (a worn one is replaced, and goes)
    assert not strays(others)
    assert not (workers - {engine_process().worker_pid()}) & children()
    assert not list(own_tmp.iterdir())


def test_a_ctrl_c_held_is_handled_when_the_step_is_over():
    import os
    import signal

    from qcdoctor.engine.api.interrupts import HeldInterrupts
    handler = signal.getsignal(signal.SIGINT)
    done = []
    with pytest.raises(KeyboardInterrupt):
        with HeldInterrupts() as hold:
            hold()
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the step")             # runs to its end
    assert done == ["the step"] and signal.getsignal(signal.SIGINT) is handler
    # a second Ctrl-C waits too, unless the step is one that could hang
    with pytest.raises(KeyboardInterrupt):
        with HeldInterrupts() as hold:
            hold()
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("the step again")
    assert done == ["the step", "the step again"]
    with pytest.raises(KeyboardInterrupt):
        with HeldInterrupts(forcible=True) as hold:
            hold()
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGINT)
            done.append("not reached")
    assert "not reached" not in done and signal.getsignal(signal.SIGINT) is handler
    # none: nothing happens
    with HeldInterrupts() as hold:
        hold()
    assert signal.getsignal(signal.SIGINT) is handler
