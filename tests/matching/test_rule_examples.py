"""Every rule's own examples: 'fires' cases fire it, 'quiet' cases do not.

Each example runs on durable_rules (the real engine) and on the pure-Python oracle;
both must agree with the example's expectation.
"""

from __future__ import annotations

import pytest

from qcdoctor.engine.matching.patterns import oracle_bindings
from qcdoctor.engine.matching.rulebook import load_rules
from qcdoctor.fact_types import normalise
from tests.conftest import single_rule_runner

CASES = [(rule, kind, i) for rule in load_rules() for kind in ("fires", "quiet")
         for i in range(len(rule.examples[kind]))]


@pytest.mark.parametrize("rule,kind,index", CASES,
                         ids=[f"{r.id}-{k}{i}" for r, k, i in CASES])
def test_rule_example(rule, kind, index):
    facts = [normalise(f) for f in rule.examples[kind][index]]
    hits = single_rule_runner(rule).run(facts)
    oracle = oracle_bindings(rule.when, facts)
    should_fire = kind == "fires"
    assert bool(hits) == should_fire, f"{rule.id} {kind}[{index}] on durable_rules"
    assert bool(oracle) == should_fire, f"{rule.id} {kind}[{index}] on the oracle"
    assert len(hits) == len(oracle)


def test_example_facts_are_valid_facts():
    """Examples use real fact types and fields (normalise raises otherwise)."""
    for rule in load_rules():
        for kind in ("fires", "quiet"):
            for case in rule.examples[kind]:
                for fact in case:
                    normalise(fact)
