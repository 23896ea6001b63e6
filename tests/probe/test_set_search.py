"""The set search of the fix trials (probe/fix_trials.py, step 4): a bisection over the
ranked layers, every set measured whole.

The model is replaced by an oracle: each layer left at 8 bits adds its share of the output
error, so a set reaches the target (99.9 % of the error removed) exactly when it holds
every needed layer (the shares of the others are too small to matter). The search must return exactly the needed layers,
and its passes (the one with every layer at 16 bits included) must stay within the
issue's bound k·⌈log2(N/k)⌉ + k + 2 wherever the ranking puts the needed layers first,
and wherever one layer is needed at any place; elsewhere it still finds them.
"""

from __future__ import annotations

import math
import random

import pytest

pytest.importorskip("torch")

from qcdoctor.probe import fix_trials  # noqa: E402
from qcdoctor.probe.fix_trials import Target, _Layer, _OutOfBudget, _Search  # noqa: E402


class Oracle:
    """Stands for the copy of the model: the Cosine of the output with ``changes`` (here
    layer names at 16 bits) applied; each measurement of a new set is one pass."""

    def __init__(self, layers: list[str], needed: set[str], budget: int = 10_000):
        self.layers, self.needed, self.budget = layers, needed, budget
        self.spent = 0
        self.known: dict[frozenset, float] = {}

    def measure(self, changes: tuple, label: str) -> float:
        key = frozenset(changes)
        if key not in self.known:
            if self.spent >= self.budget:
                raise _OutOfBudget
            self.spent += 1
            # a needed layer at 8 bits costs 0.01 of Cosine, any other 1e-8
            self.known[key] = 1.0 - sum(0.01 if n in self.needed else 1e-8
                                        for n in self.layers if n not in key)
        return self.known[key]


def search_over(count: int, needed_at: list[int], budget: int = 10_000):
    names = [f"layer{i:03d}" for i in range(count)]
    needed = {names[i] for i in needed_at}
    oracle = Oracle(names, needed, budget)
    layers = {n: _Layer(n, [i], i) for i, n in enumerate(names)}
    search = _Search(oracle, layers, Target(0.999, None), "Cosine", {}, swaps=True)
    search.int16 = lambda name: (name,)           # a layer's 16-bit setting: its name
    search.settings = lambda changes: [{"quantizer": c} for c in changes]
    search.before = oracle.measure((), "before")
    search.before_error = search.error(search.before)
    oracle.spent = 0                              # the pass before is the trials'
    found = search.greedy(names)
    return found, needed, oracle, search


def bound(k: int, count: int) -> int:
    return k * math.ceil(math.log2(count / k)) + k + 2


CASES_FIRST = [(n, k) for n in (4, 8, 21, 64, 300) for k in (1, 2, 3, 5, 8) if 2 * k <= n]


@pytest.mark.parametrize(("count", "k"), CASES_FIRST)
def test_needed_layers_ranked_first_are_found_within_the_bound(count, k):
    found, needed, oracle, _ = search_over(count, list(range(k)))
    assert set(found["layers"]) == needed and found["reached"]
    assert found["forwards"] == oracle.spent
    assert oracle.spent <= 1 + math.ceil(math.log2(count)) + k <= bound(k, count)
    assert found["ranked"] == count


@pytest.mark.parametrize("count", [2, 5, 8, 21, 64, 300])
def test_one_needed_layer_anywhere_in_the_ranking_is_within_the_bound(count):
    for place in range(count):
        found, needed, oracle, _ = search_over(count, [place])
        assert found["layers"] == sorted(needed) and found["reached"]
        assert oracle.spent <= math.ceil(math.log2(count)) + 2 <= bound(1, count), place


def test_needed_layers_anywhere_are_found_exactly_and_every_set_was_measured():
    rng = random.Random(7)
    for _ in range(300):
        count = rng.randint(2, 80)
        k = rng.randint(1, min(count, 10))
        places = rng.sample(range(count), k)
        found, needed, oracle, _ = search_over(count, places)
        assert set(found["layers"]) == needed, (count, sorted(places))
        # the figure is the one measured for that very set
        assert oracle.known[frozenset(found["layers"])] == found["after"]
        # each needed layer costs a bisection at most (two for the doubling): never
        # one pass per layer ranked
        assert oracle.spent <= 2 + k * (2 * math.ceil(math.log2(count)) + 2)


def test_all_layers_needed_costs_a_pass_per_layer_and_the_prefix():
    found, needed, oracle, _ = search_over(12, list(range(12)))
    assert set(found["layers"]) == needed
    assert oracle.spent <= 1 + math.ceil(math.log2(12)) + 12


def test_a_budget_ending_in_the_search_returns_the_smallest_set_measured(monkeypatch):
    """Cut short, the set returned is the last one measured to reach the target (its
    figure is that set's), a superset of the needed layers, with a note."""
    for budget in range(2, 14):
        found, needed, oracle, search = search_over(40, [3, 17, 30], budget=budget)
        assert needed <= set(found["layers"]) and found["reached"]
        assert oracle.known[frozenset(found["layers"])] == found["after"]
        assert oracle.spent <= budget
        ended = [n for n in search.notes if n.startswith("budget_spent:")]
        assert ended or set(found["layers"]) == needed


def test_the_search_ranks_the_readings_sources_first():
    layers = {n: _Layer(n, [i], i) for i, n in enumerate("abcdef")}
    ranking = fix_trials._ranking(["e", "x", "b"], ["a", "b", "c", "d", "e", "f"], layers)
    assert ranking == ["e", "b", "a", "c", "d", "f"]
