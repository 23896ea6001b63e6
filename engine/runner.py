"""Run facts through the rules on durable_rules, stratum by stratum, and record hits."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from .durable_host import host, unique_name
from .fact_types import GATE_TYPE, PROVENANCE_KEYS, normalise
from .patterns import to_durable
from .rulebook import Rule


@dataclass(frozen=True)
class Hit:
    """One firing: the rule and the facts bound to its patterns."""
    rule: Rule
    facts: dict                 # pattern name -> fact (engine fields only)

    @property
    def sort_key(self):
        return (-self.rule.priority, self.rule.id, canonical(self.facts))


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def engine_fact(fact: dict) -> dict:
    """The part of a fact the engine sees: typed fields only, no provenance."""
    return normalise({k: v for k, v in fact.items() if k not in PROVENANCE_KEYS})


class EngineFailure(RuntimeError):
    """An action raised inside durable_rules (swallowed there, re-raised here)."""


DeriveFn = Callable[[int, list[Hit]], list[dict]]


class RuleRunner:
    """Compiles a rule set once; ``run`` is then cheap and safe to call per case."""

    def __init__(self, rules: Iterable[Rule]):
        self.rules = tuple(rules)
        self._host = host()
        self._lock = threading.Lock()
        self._hits: list[Hit] = []
        self._errors: list[str] = []
        self._recording = False
        self._rulesets: list[tuple[int, str]] = []
        for stratum in sorted({r.stratum for r in self.rules}):
            name = unique_name(f"qcdoctor_s{stratum}")
            definition = {r.id: {"all": to_durable(r.when), "run": self._action(r)}
                          for r in self.rules if r.stratum == stratum}
            self._host.register_rulesets({name: definition})
            self._rulesets.append((stratum, name))

    def _action(self, rule: Rule):
        def action(c):
            if not self._recording:         # retraction at the end of a case: ignore
                return
            # exceptions raised here would be swallowed by durable_rules: record them
            try:
                bound = {key[2:]: {k: v for k, v in dict(fact).items() if k != "sid"}
                         for key, fact in c._m.items() if key.startswith("p_")}
                self._hits.append(Hit(rule, bound))
            except BaseException as exc:  # noqa: BLE001 - reported after the run
                self._errors.append(f"{rule.id}: {exc!r}")
        return action

    def run(self, facts: Iterable[dict], derive: DeriveFn | None = None) -> list[Hit]:
        """All hits for one case, ordered by priority, rule id and bound facts."""
        engine_facts = sorted({canonical(f): f for f in map(engine_fact, facts)}.items())
        pending = [f for _, f in engine_facts]
        all_hits: list[Hit] = []
        with self._lock:
            for stratum, name in self._rulesets:
                sid = name                  # one state per ruleset, emptied after each case
                self._hits, self._errors = [], []
                asserted = [dict(fact, sid=sid) for fact in pending]
                asserted.append({"sid": sid, "type": GATE_TYPE})
                done = 0
                self._recording = True
                try:
                    for fact in asserted:
                        self._host.assert_one(name, fact)
                        done += 1
                finally:
                    self._recording = False
                    self._host.forget(name, asserted[:done + 1])
                if self._errors:
                    raise EngineFailure("; ".join(self._errors))
                hits = sorted(self._hits, key=lambda h: h.sort_key)
                all_hits += hits
                if derive is not None:
                    derived = [engine_fact(f) for f in derive(stratum, all_hits)]
                    pending = pending + derived
        return sorted(all_hits, key=lambda h: h.sort_key)


