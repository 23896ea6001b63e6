"""A forked child process and a two-way channel of pickled messages to it.

What the engine worker needs of ``multiprocessing`` (``Process`` and ``Pipe``), without
importing it: on a short command-line run ``multiprocessing`` and the modules it pulls in
(socket, its reduction and context machinery) cost a tenth of the run. Where ``fork`` is
missing the engine uses ``multiprocessing`` with ``spawn`` instead.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import sys
import time

_HEADER = 8         # bytes of the big-endian length before each pickled message


class Channel:
    """One end: ``send`` / ``recv`` whole objects, ``poll`` for a waiting message, as a
    ``multiprocessing`` connection. EOFError when the other end is closed."""

    def __init__(self, read_fd: int, write_fd: int):
        self._read, self._write = read_fd, write_fd

    def send(self, obj) -> None:
        data = pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        view = memoryview(len(data).to_bytes(_HEADER, "big") + data)
        while view:
            view = view[os.write(self._write_fd(), view):]

    def recv(self):
        size = int.from_bytes(self._exactly(_HEADER), "big")
        return pickle.loads(self._exactly(size))

    def poll(self, timeout: float = 0.0) -> bool:
        ready, _, _ = select.select([self._read_fd()], [], [], timeout)
        return bool(ready)

    def close(self) -> None:
        for fd in (self._read, self._write):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._read = self._write = None

    def _read_fd(self) -> int:
        if self._read is None:
            raise OSError("the channel is closed")
        return self._read

    def _write_fd(self) -> int:
        if self._write is None:
            raise OSError("the channel is closed")
        return self._write

    def _exactly(self, size: int) -> bytes:
        chunks, left = [], size
        while left:
            chunk = os.read(self._read_fd(), min(left, 1 << 20))
            if not chunk:
                raise EOFError("the other end closed the channel")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)


class ForkedProcess:
    """A child running ``target(channel, *args)``; ``pid``, ``is_alive``, ``join``, ``kill``
    and ``exitcode`` (minus the signal's number when a signal ended it) as a
    ``multiprocessing.Process``."""

    def __init__(self, target, args: tuple, keep_fds: tuple[int, ...] | None = None):
        """``keep_fds``: where given, the only descriptors the child keeps of those it
        inherits, beside 0-2 and its channel (see ``_let_go_of_inherited``)."""
        to_child, from_parent = os.pipe()
        to_parent, from_child = os.pipe()
        for stream in (sys.stdout, sys.stderr):    # nothing buffered may be written twice
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        pid = os.fork()
        if pid == 0:                                # the child: serve, then leave at once
            os.close(from_parent)
            os.close(to_parent)
            if keep_fds is not None:
                _let_go_of_inherited({*keep_fds, to_child, from_child})
            code = 1
            try:
                target(Channel(to_child, from_child), *args)
                code = 0
            except BaseException:  # noqa: BLE001 - its last words go to its stderr log
                import traceback
                traceback.print_exc()
            finally:
                os._exit(code)              # never the caller's exit handlers or buffers
        os.close(to_child)
        os.close(from_child)
        self.pid = pid
        self.exitcode: int | None = None
        self.channel = Channel(to_parent, from_parent)

    def is_alive(self) -> bool:
        if self.exitcode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:       # reaped elsewhere: it is gone
                self.exitcode = -1
                return False
            if pid:
                self.exitcode = os.waitstatus_to_exitcode(status)
        return self.exitcode is None

    def join(self, timeout: float | None = None) -> None:
        if timeout is None:
            if self.exitcode is None:
                try:
                    _, status = os.waitpid(self.pid, 0)
                    self.exitcode = os.waitstatus_to_exitcode(status)
                except ChildProcessError:   # reaped elsewhere: it is gone
                    self.exitcode = -1
            return
        deadline = time.monotonic() + timeout
        pause = 0.0005
        while self.is_alive():
            if time.monotonic() >= deadline:
                return
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def kill(self) -> None:
        if self.exitcode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _let_go_of_inherited(keep: set[int]) -> None:
    """Point every descriptor this child inherited, but 0-2 and ``keep``, at /dev/null. A
    long-lived child would otherwise hold pipes the rest of its parent opened (a browser
    driver's, a user's subprocess's) and their readers would never see the end of them.
    Not closed: an inherited object closing its descriptor later must not close a file
    this child has opened since under the same number."""
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except (OSError, ValueError):
        try:
            inherited = [int(name) for name in os.listdir("/dev/fd")]
        except (OSError, ValueError):
            return
    null = os.open(os.devnull, os.O_RDWR)
    for fd in inherited:
        if fd > 2 and fd != null and fd not in keep:
            try:
                os.fstat(fd)                # the listing's own, closed since: not there
                os.dup2(null, fd, inheritable=False)
            except OSError:
                pass
    os.close(null)
