"""How much memory an engine worker has gained since it started, read cheaply enough to
be read after every case.

durable_rules never frees an engine state, so a worker is replaced once it has grown
past a cap; what it inherited from its caller (all of it, when forked) is not its own.
Resident size cannot tell: a forked worker writing into pages it inherited (copied on
write), or reusing free heap the caller left, grows without its resident size moving.

- ``malloc_mb``: the bytes glibc's malloc has handed out (``mallinfo2``), which is where
  the C engine's states live. A few microseconds, whatever the caller held.
- ``private_mb``: the process's private pages (``/proc/self/smaps_rollup``), where
  ``mallinfo2`` is missing (musl, macOS, glibc before 2.33). The kernel walks every page
  the process maps to count them: tens of milliseconds in a worker forked from a caller
  holding gigabytes (a notebook with a model loaded, a long test run).

``Growth`` reads whichever is there, so often that reading takes at most ``SHARE`` of the
worker's time: with malloc's count, after every case; with the page walk, a reply may
carry the growth of a few cases ago.
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

_MALLINFO2_FIELDS = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                     "uordblks", "fordblks", "keepcost")


def malloc_reader() -> Callable[[], float] | None:
    """A function giving the MiB malloc has handed out (in its heaps and as mappings of
    their own), or None without glibc's ``mallinfo2``."""
    try:
        import ctypes
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (ImportError, OSError, AttributeError):
        return None

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2_FIELDS]

    mallinfo2.restype = MallInfo2
    mallinfo2.argtypes = ()

    def malloc_mb() -> float:
        info = mallinfo2()
        return (info.uordblks + info.hblkhd) / 2**20
    return malloc_mb


def private_mb() -> float:
    """The MiB of pages this process holds alone; its resident size where smaps_rollup is
    missing, -1 where that is too."""
    try:
        with open("/proc/self/smaps_rollup", encoding="ascii") as handle:
            kib = sum(int(line.split()[1]) for line in handle
                      if line.startswith(("Private_Clean:", "Private_Dirty:")))
        return kib / 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return -1.0


class Growth:
    """``mb``: the MiB gained since this was made, as of the last ``refresh()``."""

    SHARE = 0.05

    def __init__(self, read: Callable[[], float] | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read or malloc_reader() or private_mb
        self._clock = clock
        self._start = self._read()
        self.mb = 0.0
        self._due = clock()

    def refresh(self) -> None:
        began = self._clock()
        if began >= self._due:
            self.mb = self._read() - self._start
            self._due = began + (self._clock() - began) / self.SHARE
