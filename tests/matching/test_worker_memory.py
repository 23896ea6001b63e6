"""An engine worker's growth: both readings see what a forked worker writes into the free
heap it inherited (where its resident size stays flat), and reading never takes more
than its share of the worker's time, however slow a reading is."""

from __future__ import annotations

import itertools
import os
import sys

import pytest

from qcdoctor.engine.matching.forked import MISSING, ForkedCall
from qcdoctor.engine.matching.worker_memory import Growth, malloc_reader, private_mb

GLIBC = pytest.mark.skipif(malloc_reader() is None, reason="no glibc mallinfo2 here")
LINUX_PROC = pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"),
                                reason="reads /proc/self/smaps_rollup")
BLOCK = 1000                     # bytes: past pymalloc's 512, so malloc hands them out


def _growth_in_inherited_free_heap(read) -> float:
    """MiB ``read`` says a forked child gained by filling 40 MiB of heap its parent freed."""
    held = [bytes(BLOCK) for _ in range(100_000)]       # ~100 MiB in malloc's heap
    keep = held[::1000]                                 # pins the heap: freed, not returned
    del held

    def child() -> float:
        before = read()
        filled = [bytes(BLOCK) for _ in range(40 * 2**20 // BLOCK)]
        gained = read() - before
        del filled
        return gained
    try:
        gained = ForkedCall(child).start().result()
    finally:
        del keep
    if gained is MISSING:
        pytest.skip("no forked child here")
    return gained


@GLIBC
def test_malloc_count_sees_a_fork_fill_the_heap_it_inherited():
    assert 38 <= _growth_in_inherited_free_heap(malloc_reader()) <= 60


@LINUX_PROC
@pytest.mark.skipif(sys.platform != "linux", reason="Linux page accounting")
def test_private_pages_see_a_fork_fill_the_heap_it_inherited():
    assert 38 <= _growth_in_inherited_free_heap(private_mb) <= 60


class _Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _readings(reading_costs: float, case_costs: float, cases: int) -> list[float]:
    """When each reading began, over ``cases`` back to back after the first reading."""
    clock, began = _Clock(), []

    def read() -> float:
        began.append(clock.now)
        clock.now += reading_costs
        return float(len(began))
    growth = Growth(read, resident=lambda: 0.0, clock=clock)
    for _ in range(cases):
        clock.now += case_costs
        growth.refresh()
    return began[1:]


def test_a_cheap_reading_is_made_after_every_case():
    assert len(_readings(reading_costs=0.000003, case_costs=0.003, cases=500)) == 500


def test_a_slow_reading_takes_at_most_its_share_of_the_time():
    began = _readings(reading_costs=0.030, case_costs=0.003, cases=2000)
    gaps = [b - a for a, b in itertools.pairwise(began)]
    # each reading is followed by cost / share of time before the next: at most the share
    assert min(gaps) >= 0.030 / Growth.SHARE
    # and the gap is no longer than that plus one case: it is still read
    assert max(gaps) <= 0.030 / Growth.SHARE + 0.003 + 1e-9
    assert len(began) >= 10


def test_the_growth_is_counted_from_the_first_reading():
    values = iter([100.0, 100.0, 130.5])
    growth = Growth(lambda: next(values), resident=lambda: 500.0, clock=_Clock())
    assert growth.mb == 0.0
    growth.refresh()
    assert growth.mb == 0.0
    growth.refresh()
    assert growth.mb == 30.5


def test_between_slow_readings_the_resident_size_adds_what_it_gained():
    clock, resident = _Clock(), [400.0]
    readings = iter([100.0, 110.0, 150.0])

    def read() -> float:
        clock.now += 0.1                    # so the next reading is due 2 s after one
        return next(readings)
    growth = Growth(read, resident=lambda: resident[0], clock=clock)
    clock.now += 0.01
    growth.refresh()
    assert growth.mb == 0.0                 # not read again yet
    resident[0] += 25.0                     # new pages
    growth.refresh()
    assert growth.mb == 25.0
    resident[0] -= 5.0                      # given back: the growth stays
    growth.refresh()
    assert growth.mb == 25.0
    clock.now = 2.5                         # read: 10 past the start, resident since: 0
    growth.refresh()
    assert growth.mb == 25.0
    resident[0] += 30.0
    growth.refresh()
    assert growth.mb == 40.0                # the reading plus what is resident since
    clock.now = 5.0                         # read: 50
    growth.refresh()
    assert growth.mb == 50.0
