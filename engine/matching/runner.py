"""Run facts through the rules on durable_rules, stratum by stratum, and record hits.

The matching itself happens in an engine worker process (``engine_process``); this
module keeps the rules, feeds derived facts back between strata and orders the hits.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from functools import cached_property, lru_cache
from itertools import count
from typing import Callable, Iterable

from qcdoctor.engine.matching import jsonfmt
from qcdoctor.engine.matching.engine_process import (
    EngineFailure,
    EngineProcess,
    InvalidFacts,
    engine_process,
)
from qcdoctor.engine.matching.patterns import to_durable
from qcdoctor.engine.matching.rulebook import Rule, load_rules
from qcdoctor.fact_types import GATE_TYPE, USUAL_TYPES, normalise

__all__ = ["EngineFailure", "Hit", "RuleRunner", "canonical", "engine_fact",
           "MAX_ENGINE_STRING"]

# Longer strings are cut before they reach the engine (durable_rules fails on very long
# properties); rules compare short vocabulary values, reports show the cut text.
MAX_ENGINE_STRING = 2000
_CUT_NOTE = "… [{} more characters]"
_SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(frozen=True)
class Hit:
    """One firing: the rule and the facts bound to its patterns."""
    rule: Rule
    facts: dict                 # pattern name -> fact (engine fields only)

    @cached_property
    def sort_key(self):
        return (-self.rule.priority, self.rule.id, canonical(self.facts))


def canonical(value) -> str:
    return _canonical(value)


_canonical = json.JSONEncoder(sort_keys=True, ensure_ascii=False, default=str).encode


def bounded_string(text: str) -> str:
    """``text`` as the engine can take it: no lone surrogates, at most MAX_ENGINE_STRING long."""
    if _SURROGATE.search(text):
        text = _SURROGATE.sub("\ufffd", text)
    if len(text) > MAX_ENGINE_STRING:
        rest = len(text) - MAX_ENGINE_STRING
        text = text[:MAX_ENGINE_STRING] + _CUT_NOTE.format(rest)
    return text


def engine_fact(fact: dict) -> dict:
    """The part of a fact the engine sees: typed fields only, no provenance, strings bounded."""
    typed = normalise(fact)                 # keeps the typed fields only
    for key, value in typed.items():
        # short ASCII text (most of it) can hold neither a surrogate nor too many characters
        if isinstance(value, str) and not (value.isascii() and len(value) <= MAX_ENGINE_STRING):
            typed[key] = bounded_string(value)
    return typed


DeriveFn = Callable[[int, list[Hit]], list[dict]]
_names = count(1)
_names_lock = threading.Lock()


def _unique_name(prefix: str) -> str:
    with _names_lock:
        return f"{prefix}_{next(_names)}"


@lru_cache(maxsize=1)
def bundled_runner() -> RuleRunner:
    """The bundled rules, compiled once per process; its derive step is in ``derived``."""
    return RuleRunner(load_rules(), preload=("qcdoctor.engine.matching.derived",))


def stratum_rulesets(rules: Iterable[Rule]) -> list[tuple[int, dict[str, list]]]:
    """(stratum, {rule id: durable_rules patterns}) of each stratum in order: a ruleset each."""
    rules = tuple(rules)
    return [(stratum, {r.id: to_durable(r.when) for r in rules if r.stratum == stratum})
            for stratum in sorted({r.stratum for r in rules})]


class RuleRunner:
    """Compiles a rule set once; ``run`` is then cheap and safe to call per case."""

    def __init__(self, rules: Iterable[Rule], engine: EngineProcess | None = None,
                 preload: tuple[str, ...] = ()):
        """``preload``: modules the ``derive`` functions passed to ``run`` live in; the
        worker imports them as soon as it starts."""
        self.rules = tuple(rules)
        self._engine = engine or engine_process()
        self._by_id = {r.id: r for r in self.rules}
        rulesets: list[tuple[int, str]] = []
        for stratum, patterns in stratum_rulesets(self.rules):
            name = _unique_name(f"qcdoctor_s{stratum}")
            self._engine.register(name, patterns, USUAL_TYPES)
            rulesets.append((stratum, name))
        self._program = _unique_name("qcdoctor_case")
        self._engine.register_program(self._program,
                                      CaseProgram(tuple(rulesets), self.rules, preload))

    def warm(self) -> None:
        """Have an engine worker ready (it compiles the rules while the caller works on)."""
        self._engine.warm()

    def run(self, facts: Iterable[dict], derive: DeriveFn | None = None) -> list[Hit]:
        """All hits for one case, ordered by priority, rule id and bound facts.

        The whole case is one request to the engine worker, so ``derive`` runs there: it
        must be a module-level function (or a ``functools.partial`` of one).
        """
        found = self._engine.run(self._program, list(facts), derive)
        return [Hit(self._by_id[rule_id], bound) for rule_id, bound in found]


@dataclass(frozen=True)
class CaseProgram:
    """What the engine worker does with one case: each stratum's ruleset in turn, the facts
    derived from the hits so far fed to the next."""
    rulesets: tuple[tuple[int, str], ...]
    rules: tuple[Rule, ...]
    preload: tuple[str, ...] = ()

    @cached_property
    def by_id(self) -> dict[str, Rule]:
        return {r.id: r for r in self.rules}

    def run(self, host, facts: list[dict], derive: DeriveFn | None) -> tuple[list, int]:
        """(hits as (rule id, bound facts), in order; matches made) on ``host``."""
        try:
            pending = _unique(map(engine_fact, facts))
        except ValueError as exc:
            raise InvalidFacts(str(exc)) from None
        texts: dict[str, str] = {}          # canonical text -> the engine's JSON of the fact
        all_hits: list[Hit] = []
        for stratum, name in self.rulesets:
            ordered = sorted(pending.items())
            request = []
            for key, fact in ordered:
                if key not in texts:
                    texts[key] = jsonfmt.dumps(fact)
                request.append((fact["type"], texts[key]))
            found, errors = host.match(name, request, _GATE)
            if errors:
                raise RuntimeError("; ".join(errors))
            all_hits += sorted((Hit(self.by_id[rule_id],
                                    {pattern: ordered[index][1] for pattern, index in bound.items()})
                                for rule_id, bound in found), key=lambda h: h.sort_key)
            if derive is not None:
                pending.update(_unique(map(engine_fact, derive(stratum, all_hits))))
        ranked = sorted(all_hits, key=lambda h: h.sort_key)
        return [(h.rule.id, h.facts) for h in ranked], len(self.rulesets)


_GATE = (GATE_TYPE, jsonfmt.dumps({"type": GATE_TYPE}))


def _unique(facts: Iterable[dict]) -> dict[str, dict]:
    """Each fact once, by its canonical text (the engine ignores an identical second fact)."""
    return {canonical(f): f for f in facts}
