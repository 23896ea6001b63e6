"""The forked child and its channel, as the engine worker uses them: whole messages both
ways whatever their size, EOF when the other side is gone, exit codes as
multiprocessing reports them."""

from __future__ import annotations

import os
import signal

import pytest

from qcdoctor.engine.matching.child_process import ForkedProcess

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this system")


def _echo(channel):
    while (message := channel.recv()) is not None:
        channel.send((os.getpid(), message))


def test_messages_of_any_size_come_back_whole():
    child = ForkedProcess(_echo, ())
    try:
        for message in ("x", {"facts": list(range(1000))}, b"\0" * 5_000_000):
            child.channel.send(message)
            assert child.channel.poll(30)
            pid, echoed = child.channel.recv()
            assert pid == child.pid != os.getpid() and echoed == message
        assert not child.channel.poll(0)                 # nothing more was sent
        child.channel.send(None)
        child.join(10)
        assert not child.is_alive() and child.exitcode == 0
    finally:
        child.kill()
        child.channel.close()


def _dies(channel):
    os.kill(os.getpid(), signal.SIGTERM)


def _fails(channel):
    raise RuntimeError("broken")


def test_a_death_reads_as_end_of_file_and_a_negative_signal_number():
    child = ForkedProcess(_dies, ())
    child.join(10)
    assert child.exitcode == -signal.SIGTERM
    with pytest.raises(EOFError):
        child.channel.recv()
    child.channel.close()
    failed = ForkedProcess(_fails, ())
    failed.join(10)
    assert failed.exitcode == 1
    failed.channel.close()


def _sleeps(channel):
    channel.recv()


def test_join_gives_up_at_its_time_out_and_kill_ends_the_child():
    child = ForkedProcess(_sleeps, ())
    child.join(0.05)
    assert child.is_alive()
    child.kill()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    child.channel.close()
    with pytest.raises(OSError):
        child.channel.send("closed")
