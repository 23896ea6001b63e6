"""A call made in a forked child while the caller goes on; its result comes back pickled.

Used where a run has two independent parts and a second core to spare: the case read
while the engine and report code load, half of a report's plots drawn while the other
half is. The child leaves with ``os._exit`` (never the caller's exit handlers nor its
buffers); any failure in it, no ``fork`` on this system or other threads running in the
caller make ``result()`` say so,
and the caller does the work itself, so errors read exactly as they always do.
"""

from __future__ import annotations

import os
import signal
import sys

TYPE_CHECKING = False            # typing itself is not imported for it: it costs a fork's lead
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MISSING = object()      # result() when the child could not give one


class ForkedCall:
    """``call()`` run in a child; ``result()`` waits for its value, or ``MISSING``."""

    def __init__(self, call: Callable[[], Any]):
        self._call = call
        self._child: int | None = None
        self._pipe: int | None = None

    def start(self) -> ForkedCall:
        # a lock another thread holds at the fork stays held in the child for ever (threads
        # exist only once threading is imported: it is not imported here for nothing)
        threading = sys.modules.get("threading")
        if not hasattr(os, "fork") or (threading and threading.active_count() > 1):
            return self
        for stream in (sys.stdout, sys.stderr):    # nothing buffered may be written twice
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read_end)
            _call_and_send(self._call, write_end)
        os.close(write_end)
        self._child, self._pipe = child, read_end
        return self

    def result(self) -> Any:
        if self._child is None:
            return MISSING
        chunks, finished = [], False
        try:
            while chunk := os.read(self._pipe, 1 << 20):
                chunks.append(chunk)
            finished = True
        finally:
            os.close(self._pipe)
            if not finished:                # interrupted (Ctrl-C): its work is not wanted,
                try:                        # and it may be deep in C code that ignores it
                    os.kill(self._child, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            _, status = os.waitpid(self._child, 0)
            self._child = None
        if status != 0 or not chunks:
            return MISSING
        import pickle
        try:
            return pickle.loads(b"".join(chunks))
        except Exception:  # noqa: BLE001 - a garbled answer is no answer: do the work here
            return MISSING


def _call_and_send(call: Callable[[], Any], pipe: int) -> None:
    code = 1
    try:
        import pickle
        data = pickle.dumps(call(), pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(pipe, view):]
        code = 0
    except BaseException:  # noqa: BLE001 - the caller does the work again and reports it
        pass
    finally:
        os._exit(code)
