"""A one-line progress indicator on stderr, shown only on a terminal."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, stream=None, every: float = 0.2, verb: str = "comparing"):
        self.verb = verb
        self.stream = stream or sys.stderr
        self.enabled = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.every = every
        self._last = 0.0

    def __call__(self, label: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.every:
            return
        self._last = now
        share = done / total if total else 1.0
        bar = "#" * int(share * 30)
        from qcdoctor.safe_text import one_line  # a file name's ESC would act on the terminal
        shown = one_line(label)[:40]
        self.stream.write(f"\r{self.verb} {shown:<40} [{bar:<30}] {share:6.1%}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()
