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
        self._started: float | None = None      # when the current run began

    ETA_AFTER = 3.0                             # seconds before a time left is shown

    def __call__(self, label: str, done: int, total: int) -> None:
        """``done`` of ``total`` steps (total 0: not known before the end, such as a
        generator's samples: the count alone, and ``finish`` ends the line)."""
        if not self.enabled:
            return
        now = time.monotonic()
        if self._started is None or done <= 1:
            self._started = now
        if (not total or done < total) and now - self._last < self.every:
            return
        self._last = now
        from qcdoctor.safe_text import one_line  # a file name's ESC would act on the terminal
        shown = one_line(label)[:40]
        if not total:
            self.stream.write(f"\r{self.verb} {shown:<40} {done}")
            self.stream.flush()
            return
        share = done / total
        bar = "#" * int(share * 30)
        self.stream.write(f"\r{self.verb} {shown:<40} [{bar:<30}] {share:6.1%} "
                          f"{done}/{total}{self._eta(now, done, total)}")
        if done >= total:
            self.stream.write("\n")
        self.stream.flush()

    def finish(self) -> None:
        """The line of a run whose total was not known ended."""
        if self.enabled and self._started is not None:
            self.stream.write("\n")
            self.stream.flush()
            self._started = None

    def _eta(self, now: float, done: int, total: int) -> str:
        """The time left, from the pace so far, once a run has taken a few seconds (a short
        one's estimate would only flicker)."""
        elapsed = 0.0 if self._started is None else now - self._started
        if done >= total or elapsed < self.ETA_AFTER or done < 2:
            return " " * 12
        left = elapsed / (done - 1) * (total - done)
        minutes, seconds = divmod(int(left + 0.5), 60)
        return f"  ETA {minutes:d}:{seconds:02d}".ljust(12)
