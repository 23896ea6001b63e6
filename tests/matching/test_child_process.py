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


def _writes_to(channel, kept: int, dropped: int):
    os.write(kept, b"kept")
    os.write(dropped, b"dropped")           # goes to /dev/null, not the caller's pipe
    channel.send(sorted(int(fd) for fd in os.listdir("/proc/self/fd")))
    channel.recv()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists /proc/self/fd")
def test_a_child_given_the_descriptors_to_keep_lets_go_of_the_others():
    """A long-lived child keeps only what it was given: a pipe the caller closes reaches
    its reader's end of file although the child lives on."""
    kept_read, kept_write = os.pipe()
    dropped_read, dropped_write = os.pipe()
    child = ForkedProcess(_writes_to, (kept_write, dropped_write), keep_fds=(kept_write,))
    try:
        assert child.channel.poll(30)
        child.channel.recv()
        os.close(kept_write)
        os.close(dropped_write)
        assert os.read(kept_read, 100) == b"kept"
        assert os.read(dropped_read, 100) == b""         # end of file: nobody holds it
    finally:
        child.channel.send(None)
        child.join(10)
        child.kill()
        child.channel.close()
        for fd in (kept_read, dropped_read):
            os.close(fd)


def test_a_child_not_told_what_to_keep_inherits_everything():
    read_end, write_end = os.pipe()
    child = ForkedProcess(_writes_to, (write_end, write_end))
    try:
        assert child.channel.poll(30)
        assert write_end in child.channel.recv()
        os.close(write_end)
        assert os.read(read_end, 100) == b"keptdropped"
    finally:
        child.channel.send(None)
        child.join(10)
        child.kill()
        child.channel.close()
        os.close(read_end)
