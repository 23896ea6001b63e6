"""Work done in a forked child: its value comes back whole, and any failure (an error, a
death, threads in the caller) leaves the caller to do the work itself, with the same
result."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from qcdoctor.engine.forked import MISSING, ForkedCall

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")


def test_the_value_comes_back_from_another_process():
    parent = os.getpid()
    call = ForkedCall(lambda: (os.getpid(), "x" * 3_000_000)).start()   # more than a pipe holds
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
