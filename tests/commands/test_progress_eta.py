"""The progress line (engine/commands/progress.py): the count of a run whose total is
known, with the time left once the run has taken a few seconds; a count alone where the
total is not known before the end (a generator's samples), its line ended by finish()."""

from __future__ import annotations

import io

from qcdoctor.engine.commands import progress as progress_module
from qcdoctor.engine.commands.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def clocked(monkeypatch, times: list[float]):
    """The progress module's clock reads ``times``, one a call (no other reader sees it)."""
    ticks = iter(times)

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return next(ticks)
    monkeypatch.setattr(progress_module, "time", Clock)


def test_a_known_total_shows_the_count_and_then_the_time_left(monkeypatch):
    stream = Terminal()
    shown = Progress(stream=stream, every=0.0, verb="comparing")
    clocked(monkeypatch, [0.0, 1.0, 4.0, 10.0])
    for done in (1, 2, 4, 10):
        shown(f"sample {done - 1}", done, 10)
    lines = stream.getvalue().split("\r")[1:]
    assert "1/10" in lines[0] and "ETA" not in lines[0]
    assert "2/10" in lines[1] and "ETA" not in lines[1]        # 1 s in: no estimate yet
    # 4 s for 3 samples after the first: 6 left take 8 s
    assert "4/10  ETA 0:08" in lines[2]
    assert lines[3].rstrip().endswith("10/10") and stream.getvalue().endswith("\n")


def test_an_unknown_total_shows_the_count_alone_and_finish_ends_the_line(monkeypatch):
    stream = Terminal()
    shown = Progress(stream=stream, every=0.0)
    clocked(monkeypatch, [0.0, 1.0, 2.0])
    for done in (1, 2, 3):
        shown(f"sample {done - 1}", done, 0)
    assert "\n" not in stream.getvalue() and stream.getvalue().rstrip().endswith(" 3")
    assert "%" not in stream.getvalue()
    shown.finish()
    assert stream.getvalue().endswith("\n")


def test_nothing_is_written_where_the_stream_is_no_terminal():
    stream = io.StringIO()
    shown = Progress(stream=stream)
    shown("x", 1, 2)
    shown.finish()
    assert stream.getvalue() == ""
