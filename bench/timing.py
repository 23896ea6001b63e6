"""Shared by the benchmarks: best-of-N wall time."""

from __future__ import annotations

import time


def best(fn, runs: int = 5) -> float:
    """The fastest of ``runs`` calls, in seconds (the least disturbed by the machine)."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)
