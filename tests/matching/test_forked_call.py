"""Work done in a forked child: its value comes back whole, and any failure (an error, a
death, threads in the caller) leaves the caller to do the work itself, with the same
result: for the HTML report, the same plots byte for byte."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.matching.forked import MISSING, ForkedCall
from qcdoctor.engine.reports import plots
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.view import view_model

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")


def test_the_value_comes_back_from_another_process():
    parent = os.getpid()
    call = ForkedCall(lambda: (os.getpid(), "x" * 3_000_000)).start()   # more than a pipe holds
    assert call.forked
    pid, text = call.result()
    assert pid != parent and text == "x" * 3_000_000


def test_an_error_or_a_death_in_the_child_gives_no_value():
    def fails():
        raise ValueError("broken")
    assert ForkedCall(fails).start().result() is MISSING
    assert ForkedCall(lambda: os.kill(os.getpid(), signal.SIGKILL)).start().result() is MISSING
    assert ForkedCall(lambda: threading.Lock()).start().result() is MISSING   # cannot pickle


def test_no_fork_while_other_threads_run():
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        call = ForkedCall(os.getpid).start()
        assert call.result() is MISSING
    finally:
        stop.set()
        other.join()


@pytest.fixture(scope="module")
def plotted_report():
    with example_path("convert_quant_analysis") as path:
        report = triage_case(load_case(path), lang="en", environ={}, installed={}, cwd=path)
    assert len(plots.report_plots(report, view_model(report)["L"])) >= 2   # two processes
    return report


def test_plots_drawn_in_a_child_equal_plots_drawn_here(plotted_report, monkeypatch):
    started, real_start = [], ForkedCall.start

    def spied(self):
        real_start(self)
        started.append(self.forked)
        return self
    monkeypatch.setattr(ForkedCall, "start", spied)
    forked = render(plotted_report, "html")
    assert started == [True]                                        # a child drew half
    monkeypatch.setattr(ForkedCall, "start", lambda self: self)     # nothing forked
    assert render(plotted_report, "html") == forked


def test_a_child_that_dies_while_drawing_leaves_the_drawing_to_the_caller(plotted_report,
                                                                          monkeypatch, tmp_path):
    expected = render(plotted_report, "html")
    parent = os.getpid()
    real = plots.layer_curve
    death = tmp_path / "died"

    def dies_in_the_child(*args, **kwargs):
        if os.getpid() != parent:
            death.write_text("drawing in the child")
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    monkeypatch.setattr(plots, "layer_curve", dies_in_the_child)
    assert render(plotted_report, "html") == expected
    assert death.exists()                   # the layer curve really was the child's part


def test_an_interrupted_wait_ends_the_child_at_once(monkeypatch):
    """Ctrl-C while the child works: the caller stops waiting and the child is ended,
    even one that would not notice the interrupt for a long time."""
    import time
    call = ForkedCall(lambda: time.sleep(600)).start()
    assert call.forked
    child = call._child.pid

    def interrupted(fd, size):
        raise KeyboardInterrupt
    monkeypatch.setattr(os, "read", interrupted)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        call.result()
    assert time.monotonic() - started < 10
    with pytest.raises(ChildProcessError):              # ended and reaped
        os.waitpid(child, os.WNOHANG)
