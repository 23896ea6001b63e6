"""A call made in a forked child while the caller goes on; its result comes back pickled.

Used where a run has two independent parts and a second core to spare: the case read
while the engine and report code load, half of a report's plots drawn while the other
half is. Built on the engine worker's ``ForkedProcess`` and its channel. Any failure in
the child, no ``fork`` on this system or other threads running in the caller make
``result()`` say so, and the caller does the work itself, so errors read exactly as they
always do.
"""

from __future__ import annotations

import os
import sys

from qcdoctor.engine.matching.child_process import ForkedProcess

TYPE_CHECKING = False            # typing itself is not imported for it: it costs a fork's lead
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

MISSING = object()      # result() when the child could not give one


class ForkedCall:
    """``call()`` run in a child; ``result()`` waits for its value, or ``MISSING``."""

    def __init__(self, call: Callable[[], Any]):
        self._call = call
        self._child: ForkedProcess | None = None

    def start(self) -> ForkedCall:
        # a lock another thread holds at the fork stays held in the child for ever (threads
        # exist only once threading is imported: it is not imported here for nothing)
        threading = sys.modules.get("threading")
        if hasattr(os, "fork") and not (threading and threading.active_count() > 1):
            self._child = ForkedProcess(_send_value, (self._call,))
        return self

    @property
    def forked(self) -> bool:
        """Whether a child is (or was) doing the call."""
        return self._child is not None

    def result(self) -> Any:
        if self._child is None:
            return MISSING
        child = self._child
        try:
            value = child.channel.recv()
        except Exception:  # noqa: BLE001 - it died or sent garbage: no answer, do it here
            value = MISSING
        except BaseException:
            child.kill()            # interrupted (Ctrl-C): its work is not wanted, and it
            raise                   # may be deep in C code that does not notice
        finally:
            child.channel.close()
            child.join()
        return value if child.exitcode == 0 else MISSING


def _send_value(channel, call: Callable[[], Any]) -> None:
    try:
        channel.send(call())
    except BaseException:  # noqa: BLE001 - nothing sent: the caller does the work and reports it
        pass
