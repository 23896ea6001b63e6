"""SIGTERM and SIGHUP end a run the way Ctrl-C does: as an exception in the main thread, so
every ``with`` block on the way out runs (a support bundle's extracted folder is removed,
a report being written is not left half-replaced) and the exit handlers stop the engine
worker. The exit code is the shell's for a signal: 128 + its number (143 for SIGTERM).

A process forked from this one (the engine worker, the case reader) inherits the handler:
there it restores the default action and dies of the signal, as it always did; its parent
sees that and cleans up after it.
"""

from __future__ import annotations

import os
import signal

STOP_SIGNALS = ("SIGTERM", "SIGHUP")
_owner: int | None = None          # the process the handler raises in
_stopping = False                  # set once: a second signal does not cut the clean-up short


class Terminated(SystemExit):
    """The run was stopped by ``signum``; exits with 128 + ``signum``."""

    def __init__(self, signum: int):
        super().__init__(128 + signum)
        self.signum = signum

    @property
    def name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"


def _handler(signum: int, frame) -> None:
    global _stopping
    if os.getpid() != _owner:       # a forked child: die of it, as without the handler
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if _stopping:
        return
    _stopping = True
    raise Terminated(signum)


def install() -> None:
    """Raise Terminated on SIGTERM and SIGHUP in this (the main) thread; a signal this
    process was started ignoring (``nohup``) stays ignored."""
    global _owner, _stopping
    _owner, _stopping = os.getpid(), False
    for name in STOP_SIGNALS:
        number = getattr(signal, name, None)
        if number is None:                      # no SIGHUP on Windows
            continue
        try:
            if signal.getsignal(number) is signal.SIG_DFL:
                signal.signal(number, _handler)
        except ValueError:                      # not the main thread: leave them be
            return


def finishing() -> None:
    """The run is over (its output written): a signal now no longer interrupts the exit."""
    global _stopping
    _stopping = True
