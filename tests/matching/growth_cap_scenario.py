"""Run as ``python -m tests.matching.growth_cap_scenario CALLER_HEAP CAP``: one convert
case matched 60 times with the worker's growth cap at CAP MiB, in this fresh interpreter,
so that the caller's heap is the scenario's own and not whatever a long test run left.
Prints {"workers_started": n, "growth": [MiB after each case]} as JSON.

CALLER_HEAP ``small``, or ``large and free``: about 240 MiB of malloc's blocks freed
before the worker is forked, left resident (a long run, a notebook), which the worker
fills without its resident size moving.
"""

from __future__ import annotations

import json
import sys

import yaml

from qcdoctor.collectors.case_facts import collect_facts
from qcdoctor.collectors.case_file import parse_case
from qcdoctor.engine.matching import engine_process
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.engine.matching.runner import RuleRunner

CONVERT = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "badcase": "available",
           "platform": {"chip": "J6E"},
           "stages": {"qat": {"metric": "mAP", "value": 0.452},
                      "qat_bc": {"metric": "mAP", "value": 0.452},
                      "quantized_bc": {"metric": "mAP", "value": 0.391}}}
CASES = 60          # far fewer than would wear out durable_rules' states (the other reason)


def main(caller_heap: str, cap: float) -> dict:
    engine_process.MAX_WORKER_GROWTH_MB = cap           # inherited by the forked workers
    if caller_heap != "small":
        # blocks of the sizes the engine's states take: past pymalloc's 512 bytes and below
        # malloc's own mappings, so freed they stay in its heap, where the worker reuses them
        held = [bytes(20_000) for _ in range(12_000)]
        held = held[::1000]             # the rest freed; these pin the heap, so not returned
    facts = collect_facts(parse_case(yaml.safe_dump(CONVERT), None, None),
                          environ={}, installed={})
    engine = engine_process.EngineProcess(max_matches=10**9)   # only growth replaces one
    try:
        runner = RuleRunner(load_rules(), engine=engine)
        growth = []
        for _ in range(CASES):
            runner.run(facts)
            growth.append(engine.stats.last_worker_growth_mb)
        return {"workers_started": engine.stats.workers_started, "growth": growth}
    finally:
        engine.close()


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], float(sys.argv[2]))))
