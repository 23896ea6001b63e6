"""A job run on a thread of its own while the caller's block runs, where the machine has
a core to spare for it (at least twice as many as torch's threads); else in the caller's
thread before the block. Either way it is done when the block ends, with the same result:
only the time differs.

The probe runs the analysis model with every fake quant off (R5.3) beside the baseline
model's recorded run: two forwards of distinct modules, most of whose time torch spends
outside the GIL. The recording hooks are global and see every thread's module calls: the
recorder ignores calls from any thread but its own (probe/eager_tap.py)."""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager


def spare_core() -> bool:
    """Whether a second forward can run without taking a core from the first one's torch
    threads."""
    import torch
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):       # no affinity call (macOS, Windows)
        cores = os.cpu_count() or 1
    return cores >= 2 * torch.get_num_threads()


class Beside:
    """``job()`` run during a block (``around``); ``result()`` its value or its error."""

    def __init__(self, job, concurrent: bool):
        self.job = job
        self.concurrent = concurrent
        self.value = None
        self.error: BaseException | None = None
        self.done = False

    @contextmanager
    def around(self):
        if not self.concurrent:
            self._call()
            yield
            return
        thread = threading.Thread(target=self._in_thread, name="qcdoctor-beside", daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join()               # done (and its changes undone) before anything else

    def result(self):
        if not self.done:
            self._call()                # never run in a block: run now
        if self.error is not None:
            raise self.error
        return self.value

    def _in_thread(self) -> None:
        import torch
        # torch sizes a thread's OpenMP pool on its first parallel op or this call: sized
        # here, its ops round as they would in the calling thread
        torch.get_num_threads()
        self._call()

    def _call(self) -> None:
        try:
            self.value = self.job()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller by result()
            self.error = exc
        finally:
            self.done = True
