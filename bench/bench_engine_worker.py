"""Benchmark: what running the rules in a worker process costs, beside in-process matching
measured in the same run, in turns (min and median of 7 rounds; targets on the median).

- per case: the bundled rules on 150 varied cases through a fresh worker (``RuleRunner``,
  back to back) vs the same matches on a fresh durable_rules host inside one process (a
  forked child per round: a host there holds every state it made, as a worker does).
  Target: the worker adds at most 1.5x to matching.
- start: the first case in a fresh engine (fork, rulesets compiled in the worker, first
  match) vs the same inside one process (rulesets compiled, first match). It is paid once
  per CLI run, while the case is read, and once per worker replacement, by a successor
  started early. Target <= 1.5x.
- large caller: the same cases through a worker forked from this process while it holds
  a further 1 GiB (a notebook with a model loaded, a long test run) vs without it. The
  worker inherits every page: reading its growth by walking them would be paid here.
  Target <= 1.5x.
- recovery: a case right after the worker was killed (detect, replace, re-run) vs a warm case.
- memory: how much a worker grows past its start across 2,000 cases (engine states are
  never emptied, so a worker is replaced at MAX_WORKER_GROWTH_MB or near durable_rules'
  state limit; the time a case takes with those replacements is printed) and this
  process's RSS growth. Target: the worker stays under its cap, this process flat within 20 MB.

Run: python bench/bench_engine_worker.py
"""

from __future__ import annotations

import os
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_triage import rss_mb  # noqa: E402
from cases import varied_cases  # noqa: E402
from in_process import program_on  # noqa: E402
from timing import min_median  # noqa: E402

from qcdoctor.collectors.case_facts import collect_facts  # noqa: E402
from qcdoctor.collectors.case_file import parse_case  # noqa: E402
from qcdoctor.engine.matching.durable_host import QuietHost  # noqa: E402
from qcdoctor.engine.matching.engine_process import EngineProcess  # noqa: E402
from qcdoctor.engine.matching.forked import MISSING, ForkedCall  # noqa: E402
from qcdoctor.engine.matching.rulebook import load_rules  # noqa: E402
from qcdoctor.engine.matching.runner import RuleRunner, _unique, engine_fact  # noqa: E402


def in_one_process(rules, cases) -> tuple[float, float]:
    """(rulesets compiled and the first case matched, seconds a case over ``cases``) on a
    durable_rules host in this process, running the worker's own program (facts encoded,
    each stratum matched, hits ranked) without the round trip: call it in a forked child,
    which dies with the host."""
    start = time.perf_counter()
    host = QuietHost()
    program = program_on([host], rules)
    program.run(host, cases[0], None)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for facts in cases:
        program.run(host, facts, None)
    return first, (time.perf_counter() - start) / len(cases)


def per_case_in_new_worker(rules, cases) -> float:
    """Seconds a case over ``cases`` (after a first), in a worker forked for this call."""
    engine = EngineProcess()
    try:
        runner = RuleRunner(rules, engine=engine)
        runner.run(cases[0])
        start = time.perf_counter()
        for facts in cases:
            runner.run(facts)
        return (time.perf_counter() - start) / len(cases)
    finally:
        engine.close()


def main() -> int:
    rules = load_rules()
    cases = [list(_unique(map(engine_fact, collect_facts(parse_case(t, None, None), environ={},
                                                         installed={}))).values())
             for t in varied_cases(150)]

    starts, local_starts, per_case, local_per_case = [], [], [], []
    for _ in range(7):      # in turns, so both see the same machine; each from a fresh start
        start = time.perf_counter()         # the rules' patterns made here, as in one process
        fresh = EngineProcess()
        fresh_runner = RuleRunner(rules, engine=fresh)
        fresh_runner.run(cases[0])
        starts.append(time.perf_counter() - start)
        start = time.perf_counter()
        for facts in cases:
            fresh_runner.run(facts)
        per_case.append((time.perf_counter() - start) / len(cases))
        fresh.close()
        measured = ForkedCall(lambda: in_one_process(rules, cases)).start().result()
        if measured is MISSING:
            print("in-process baseline: no forked child on this system; nothing to compare")
            return 1
        local_starts.append(measured[0])
        local_per_case.append(measured[1])
    (worker_min, worker), (local_min, local) = min_median(per_case), min_median(local_per_case)
    (first_min, first), (local_first_min, local_first) = min_median(starts), min_median(local_starts)

    small_caller, large_caller = [], []
    for _ in range(3):
        small_caller.append(per_case_in_new_worker(rules, cases))
        held = bytearray(b"\1") * (1 << 30)      # resident: every page written
        large_caller.append(per_case_in_new_worker(rules, cases))
        del held
    small, large = statistics.median(small_caller), statistics.median(large_caller)
    large_ratio = large / small

    engine = EngineProcess()
    runner = RuleRunner(rules, engine=engine)
    runner.run(cases[0])
    recoveries = []
    for _ in range(3):
        engine.warm()
        os.kill(engine.worker_pid(), signal.SIGKILL)
        start = time.perf_counter()
        runner.run(cases[1])
        recoveries.append(time.perf_counter() - start)
    recovery = statistics.median(recoveries)

    parent_before = rss_mb()
    worker_growth = []
    start = time.perf_counter()
    for i in range(2000):
        runner.run(cases[i % len(cases)])
        if i % 100 == 99:
            worker_growth.append(engine.stats.last_worker_growth_mb)
    sustained = (time.perf_counter() - start) / 2000
    parent_growth = rss_mb() - parent_before
    engine.close()

    ratio, start_ratio = worker / local, first / local_first
    from qcdoctor.engine.matching.engine_process import MAX_WORKER_GROWTH_MB
    bounded = max(worker_growth) < MAX_WORKER_GROWTH_MB + 20
    print(f"per case:  worker min {worker_min * 1e3:.2f} ms, median {worker * 1e3:.2f} ms;"
          f" in one process min {local_min * 1e3:.2f} ms, median {local * 1e3:.2f} ms"
          f" ({ratio:.2f}x)  target <= 1.5x: {'OK' if ratio <= 1.5 else 'MISSED'}")
    print(f"start:     fresh engine, first case min {first_min * 1e3:.1f} ms, median"
          f" {first * 1e3:.1f} ms; in one process min {local_first_min * 1e3:.1f} ms, median"
          f" {local_first * 1e3:.1f} ms ({start_ratio:.2f}x)  target <= 1.5x:"
          f" {'OK' if start_ratio <= 1.5 else 'MISSED'}")
    print(f"large caller: per case {large * 1e3:.2f} ms with 1 GiB more held, {small * 1e3:.2f}"
          f" ms without (median of 3, {large_ratio:.2f}x)  target <= 1.5x:"
          f" {'OK' if large_ratio <= 1.5 else 'MISSED'}")
    print(f"recovery:  {recovery * 1e3:7.2f} ms (median of 3) for a case after the worker was"
          f" killed ({recovery / worker:.1f}x a warm case); deaths seen:"
          f" {engine.stats.worker_deaths}")
    print(f"memory:    worker growth {min(worker_growth):.0f}-{max(worker_growth):.0f} MB over 2,000 cases"
          f" ({engine.stats.workers_started} workers, {sustained * 1e3:.2f} ms a case with the"
          f" replacements), this process +{parent_growth:.1f} MB"
          f"  target under {MAX_WORKER_GROWTH_MB} MB, this process +20 MB at most:"
          f" {'OK' if bounded and parent_growth < 20 else 'MISSED'}")
    ok = (ratio <= 1.5 and start_ratio <= 1.5 and large_ratio <= 1.5 and bounded
          and parent_growth < 20)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
