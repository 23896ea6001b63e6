"""Shared by the benchmarks: wall times over repeats, reported as min and median."""

from __future__ import annotations

import statistics
import time


def times(fn, runs: int = 5) -> list[float]:
    """Wall time of each of ``runs`` calls, in seconds."""
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def best(fn, runs: int = 5) -> float:
    """The fastest of ``runs`` calls, in seconds (the least disturbed by the machine)."""
    return min(times(fn, runs))


def spread(fn, runs: int = 5) -> tuple[float, float]:
    """(min, median) of ``runs`` calls, in seconds."""
    measured = times(fn, runs)
    return min(measured), statistics.median(measured)


def interleaved(first, second, runs: int = 7) -> tuple[tuple[float, float], tuple[float, float]]:
    """(min, median) of each of two calls, measured in turns so that both see the same
    load on a busy machine."""
    a, b = [], []
    for _ in range(runs):
        for fn, out in ((first, a), (second, b)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return (min(a), statistics.median(a)), (min(b), statistics.median(b))
