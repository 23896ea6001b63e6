"""Ctrl-C held back while a triage does what must not stop half-way.

A KeyboardInterrupt can arrive between any two bytecodes. One that lands while a
temporary folder (an extracted support bundle, a built case's folder) is being removed
leaves the folder for good; one that lands while the engine worker is being started,
asked or replaced can leave a worker process behind; one that lands while matplotlib
draws a plot can leave its caches broken, so that later drawings fail. In a notebook's
kernel, which lives on after the interrupt, those would pile up. There, a SIGINT is only
noted, and handled as it would have been as soon as the step is over (milliseconds; the
seconds a first triage's worker takes to compile the rules). Where a step could hang
(asking the engine worker), a second one is handled at once.

The Python-level handler is swapped, not the signal blocked: Python runs signal handlers
in the main thread whichever thread the signal reaches, and a kernel has many threads,
so blocking it in one holds nothing back.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from contextlib import ExitStack, contextmanager


class HeldInterrupts:
    """``with HeldInterrupts() as hold, temporary() as folder: ... finally: hold()``:
    from ``hold()`` to the end of the outer block, a SIGINT waits; with ``forcible``, a
    second one does not. Signal handlers are the main thread's: elsewhere nothing is
    held (nor interrupted)."""

    def __init__(self, forcible: bool = False):
        self._forcible = forcible
        self._previous = None
        self._held = False
        self._noted = False

    def __enter__(self) -> HeldInterrupts:
        return self

    def __call__(self) -> None:
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is None:     # installed outside Python: kept
            return
        # a SIGINT already waiting is handled by the handler in place when it runs: from
        # here on, this one, which raises nothing, so the assignment always completes
        self._previous = signal.signal(signal.SIGINT, self._note)
        self._held = True

    def _note(self, signum, frame) -> None:
        if self._noted and self._forcible:      # asked again: at once, whatever is under way
            self.__exit__(None, None, None)
            return
        self._noted = True

    def __exit__(self, kind, value, traceback) -> bool:
        if not self._held:
            return False
        self._held = False
        previous = self._previous
        signal.signal(signal.SIGINT, previous)
        if self._noted:                 # handled now, as it would have been then
            self._noted = False
            if callable(previous):
                previous(signal.SIGINT, None)
            elif previous == signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
        return False


@contextmanager
def entered_whole(make: Callable[[], ContextManager]):
    """The context manager ``make()`` returns (one that makes something temporary: a
    folder, an extracted bundle), entered whole and left whole, whatever a Ctrl-C does
    meanwhile: one arriving as it is made waits until it is (a second one does not, for
    a long extraction), one arriving as it is left waits until it is gone."""
    with HeldInterrupts() as leaving, ExitStack() as stack:
        try:
            with HeldInterrupts(forcible=True) as entering:
                entering()
                value = stack.enter_context(make())
            yield value
        finally:
            leaving()
