"""How much memory an engine worker has gained since it started, known after every case
without the knowing slowing the worker down.

durable_rules never frees an engine state, so a worker is replaced once it has grown
past a cap; what it inherited from its caller (all of it, when forked) is not its own.
Resident size cannot tell: a forked worker writing into pages it inherited (copied on
write), or reusing free heap the caller left, grows without its resident size moving.

- ``malloc_reader()``: the bytes glibc's malloc has handed out (``mallinfo2``), which is
  where the C engine's states live. Microseconds on a tidy heap; glibc walks every free
  chunk to count it, so up to a tenth of a second in a worker forked from a caller whose
  heap is riddled with freed blocks (a long test run, a notebook used for hours).
- ``private_mb``: the process's private pages (``/proc/self/smaps_rollup``), where
  ``mallinfo2`` is missing (musl, macOS, glibc before 2.33). The kernel walks every page
  the process maps: tens of milliseconds beside a caller holding gigabytes.
- ``resident_mb``: the resident size (``/proc/self/statm``), a few microseconds always,
  blind only to the inherited pages above.

``Growth`` reads the first that is there so often that reading takes at most ``SHARE`` of
the worker's time (after every case, when reading is quick), and the resident size after
every case: between two readings the growth is the last reading plus what the resident
size has gained since, so only a worker filling inherited pages is seen late.
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
        return resident_mb()


def resident_mb() -> float:
    """The MiB of this process's resident pages, -1 without /proc."""
    try:
        with open("/proc/self/statm", encoding="ascii") as handle:
            return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return -1.0


class Growth:
    """``mb``: the MiB gained since this was made, as of the last ``refresh()``; it never
    goes down (a worker's engine states are never freed)."""

    SHARE = 0.05

    def __init__(self, read: Callable[[], float] | None = None,
                 resident: Callable[[], float] = resident_mb,
                 clock: Callable[[], float] = time.monotonic):
        self._read = read or malloc_reader() or private_mb
        self._resident, self._clock = resident, clock
        self._start = self._timed_read()       # the first reading is due its share too
        self._read_mb, self._resident_then = 0.0, resident()
        self.mb = 0.0

    def refresh(self) -> None:
        if self._clock() >= self._due:
            self._read_mb = self._timed_read() - self._start
            self._resident_then = self._resident()
        since = max(0.0, self._resident() - self._resident_then)
        self.mb = max(self.mb, self._read_mb + since)

    def _timed_read(self) -> float:
        began = self._clock()
        value = self._read()
        self._due = began + (self._clock() - began) / self.SHARE
        return value
