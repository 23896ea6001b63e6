"""Python's cyclic garbage collector paused around work that makes many objects."""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager

# how many threads are inside a pause, and whether the collector ran before the first
_pause = {"inside": 0, "was_enabled": False}
_PAUSE = threading.Lock()


@contextmanager
def collector_paused():
    """No cyclic garbage collection inside: work that makes thousands of objects (a
    report's plots, a probe's rows) triggers full collections over everything the caller
    holds (a large table, a torch model of a million objects), which can cost as much
    again as the work, at moments no one chose. Reference counting still frees what
    is dropped; cycles are collected when the collector runs next. Counted across
    threads: the last one out gives the collector back as the first one in found it."""
    with _PAUSE:
        if _pause["inside"] == 0:
            _pause["was_enabled"] = gc.isenabled()
            gc.disable()
        _pause["inside"] += 1
    try:
        yield
    finally:
        with _PAUSE:
            _pause["inside"] -= 1
            if _pause["inside"] == 0 and _pause["was_enabled"]:
                gc.enable()
