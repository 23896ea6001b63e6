"""Soak: the rule-example suite's engine path, 20 times over in one process.

This is the path that used to kill the test process with SIGSEGV now and then (one
process, ~170 rulesets, many retractions). Every answer must stay right, the process must
see no signal, and any worker that did die must have been replaced transparently.
"""

from __future__ import annotations

from qcdoctor.engine.matching.engine_process import engine_process
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.fact_types import normalise
from tests.conftest import single_rule_runner

ROUNDS = 20


def test_rule_examples_twenty_times_in_one_process():
    examples = [(rule, kind == "fires", [normalise(f) for f in case])
                for rule in load_rules() for kind in ("fires", "quiet")
                for case in rule.examples[kind]]
    engine = engine_process()
    deaths_before = engine.stats.worker_deaths
    matches_before = engine.stats.matches
    for round_ in range(ROUNDS):
        for rule, should_fire, facts in examples:
            fired = bool(single_rule_runner(rule).run(facts))
            assert fired == should_fire, f"round {round_}: {rule.id}"
    assert engine.stats.matches - matches_before >= ROUNDS * len(examples)
    # a worker death is survived, but it would mean the fragile path is still taken
    assert engine.stats.worker_deaths == deaths_before, engine.stats.deaths
