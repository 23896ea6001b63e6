"""Benchmark: what running the rules in a worker process costs, beside in-process matching
measured in the same run.

- per case: the bundled rules on 150 varied cases through the worker (``RuleRunner``)
  vs the same matches on a durable_rules host inside this process (unisolated, and
  never replaced, so it keeps every state: 150 cases is what it holds comfortably).
  Target: the worker adds at most 1.5x to matching.
- start: the first case in a fresh engine (fork + first match) vs a warm case. It is
  paid once per CLI run and once per worker replacement. Target <= 25 ms.
- recovery: a case right after the worker was killed (detect, replace, re-run) vs a warm case.
- memory: how much a worker grows past its start across 2,000 cases (engine states are
  never emptied, so a worker is replaced at MAX_WORKER_GROWTH_MB) and this process's RSS
  growth. Target: the worker
  stays under its cap, this process flat within 20 MB.

Run: python bench/bench_engine_worker.py
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_triage import rss_mb  # noqa: E402
from cases import varied_cases  # noqa: E402

from qcdoctor.collectors.case_facts import collect_facts  # noqa: E402
from qcdoctor.collectors.case_file import parse_case  # noqa: E402
from qcdoctor.engine import jsonfmt  # noqa: E402
from qcdoctor.engine.durable_host import QuietHost  # noqa: E402
from qcdoctor.engine.engine_process import EngineProcess  # noqa: E402
from qcdoctor.engine.fact_types import USUAL_TYPES  # noqa: E402
from qcdoctor.engine.patterns import to_durable  # noqa: E402
from qcdoctor.engine.rulebook import load_rules  # noqa: E402
from qcdoctor.engine.runner import _GATE, RuleRunner, _unique, engine_fact  # noqa: E402


def main() -> int:
    rules = load_rules()
    cases = [list(_unique(map(engine_fact, collect_facts(parse_case(t, None, None), environ={},
                                                         installed={}))).values())
             for t in varied_cases(150)]
    requests = [[(f["type"], jsonfmt.dumps(f)) for f in facts] for facts in cases]
    strata = sorted({r.stratum for r in rules})

    engine = EngineProcess()
    runner = RuleRunner(rules, engine=engine)
    start = time.perf_counter()
    runner.run(cases[0])
    first = time.perf_counter() - start
    start = time.perf_counter()
    for facts in cases:
        runner.run(facts)
    worker = (time.perf_counter() - start) / len(cases)

    engine.warm()
    os.kill(engine.worker_pid(), signal.SIGKILL)
    start = time.perf_counter()
    runner.run(cases[1])
    recovery = time.perf_counter() - start

    parent_before = rss_mb()
    worker_growth = []
    for i in range(2000):
        runner.run(cases[i % len(cases)])
        if i % 100 == 99:
            worker_growth.append(engine.stats.last_worker_growth_mb)
    parent_growth = rss_mb() - parent_before
    engine.close()

    # baseline, last (its states stay in this process): the same matches on a host here
    host = QuietHost()
    for s in strata:
        host.register(f"s{s}", {r.id: to_durable(r.when) for r in rules if r.stratum == s},
                      USUAL_TYPES)
    start = time.perf_counter()
    for request in requests:
        for s in strata:
            host.match(f"s{s}", request, _GATE)
    local = (time.perf_counter() - start) / len(cases)

    ratio = worker / local
    from qcdoctor.engine.engine_process import MAX_WORKER_GROWTH_MB
    bounded = max(worker_growth) < MAX_WORKER_GROWTH_MB + 20
    print(f"per case:  {worker * 1e3:7.2f} ms in the worker, {local * 1e3:.2f} ms in-process"
          f" ({ratio:.2f}x)  target <= 1.5x: {'OK' if ratio <= 1.5 else 'MISSED'}")
    print(f"start:     {first * 1e3:7.2f} ms first case in a fresh engine ({first / worker:.1f}x a"
          f" warm case)  target <= 25 ms: {'OK' if first <= 0.025 else 'MISSED'}")
    print(f"recovery:  {recovery * 1e3:7.2f} ms for a case after the worker was killed"
          f" ({recovery / worker:.1f}x a warm case); deaths seen: {engine.stats.worker_deaths}")
    print(f"memory:    worker growth {min(worker_growth):.0f}-{max(worker_growth):.0f} MB over 2,000 cases"
          f" ({engine.stats.workers_started} workers), this process +{parent_growth:.1f} MB"
          f"  target under {MAX_WORKER_GROWTH_MB} MB, this process +20 MB at most:"
          f" {'OK' if bounded and parent_growth < 20 else 'MISSED'}")
    ok = ratio <= 1.5 and first <= 0.025 and bounded and parent_growth < 20
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
