"""A thin, guarded wrapper around durable_rules 2.0.28.

durable_rules is unmaintained and has traps, each guarded here:
- ``Host()`` starts two timer threads that re-arm forever: ``QuietHost`` starts none
  and is created once per process;
- its ruleset and fact JSON go through ``json.dumps``, whose ``1e-05`` the C parser
  rejects: everything goes through ``jsonfmt.dumps`` instead;
- facts are asserted one at a time (batch asserts crash on some inputs) and each
  case's state is deleted in a ``finally`` (it leaks ~1.6 MB per case otherwise);
- asserting a fact no rule reads raises ``MessageNotHandledException`` and an
  identical fact ``MessageObservedException``: both are normal here;
- ``durable.lang`` is never imported (its ``from ... import *`` rebinds all/any);
- a ruleset registered after facts were asserted into another one corrupts the C
  engine's heap (segfault or "free(): invalid pointer" on the next run): the host
  refuses registration once it has been used, so build every RuleRunner first;
- ``delete_state`` frees a state's beta-node pools before deleting its messages, and
  deleting a message then touches those freed pools: a random segfault that depends on
  the heap layout. It is never called: each runner keeps one state (one ``sid``) and
  empties it after every case by retracting what it asserted (``forget``), so memory
  stays flat and no case sees another's facts.
"""

from __future__ import annotations

import threading

import durable_rules_engine
from durable import engine as _durable

from . import jsonfmt


class _SafeRuleset(_durable.Ruleset):
    def __init__(self, name, host, ruleset_definition):  # noqa: D401 - mirrors the base
        self._actions = {}
        self._name = name
        self._host = host
        for rule_name, rule in ruleset_definition.items():
            self._actions[rule_name] = _durable.Promise(rule.pop("run"))
        self._handle = durable_rules_engine.create_ruleset(name, jsonfmt.dumps(ruleset_definition))
        self._definition = ruleset_definition

    def assert_fact(self, fact):
        return self._handle_result(
            durable_rules_engine.assert_fact(self._handle, jsonfmt.dumps(fact)), fact)

    def retract_fact(self, fact):
        # the same encoding as the assert, or the fact is not found and stays behind
        return self._handle_result(
            durable_rules_engine.retract_fact(self._handle, jsonfmt.dumps(fact)), fact)


class HostSealed(RuntimeError):
    """A ruleset was registered after the host had run facts."""


class QuietHost(_durable.Host):
    """A Host without background dispatch or timer threads."""

    _sealed = False

    def _run(self):
        return None

    def register_rulesets(self, ruleset_definitions):
        if self._sealed:
            raise HostSealed("durable_rules cannot take new rulesets after facts were "
                             "asserted (it corrupts memory): create every RuleRunner "
                             "before running any")
        for name, definition in ruleset_definitions.items():
            if name in self._ruleset_directory:
                raise ValueError(f"ruleset {name} already registered")
            ruleset = _SafeRuleset(name, self, definition)
            self._ruleset_directory[name] = ruleset
            self._ruleset_list.append(ruleset)
        return list(ruleset_definitions)

    def forget(self, ruleset_name: str, facts: list[dict]) -> None:
        """Retract a case's facts, last first, leaving its state empty for the next case.

        The gate fact is asserted last, so it goes first: with it gone no rule can
        match, and a negated pattern whose fact is being retracted cannot fire.
        """
        for fact in reversed(facts):
            try:
                self.retract_fact(ruleset_name, fact)
            except (_durable.MessageNotHandledException, _durable.MessageObservedException):
                pass

    def assert_one(self, ruleset_name: str, fact: dict) -> None:
        """Assert one fact; 'no rule reads it' and 'already known' are not errors."""
        self._sealed = True
        try:
            self.assert_fact(ruleset_name, fact)
        except (_durable.MessageNotHandledException, _durable.MessageObservedException):
            pass


_host: QuietHost | None = None
_lock = threading.Lock()
_names = iter(range(1, 1 << 62))


def host() -> QuietHost:
    global _host
    with _lock:
        if _host is None:
            _host = QuietHost()
        return _host


def unique_name(prefix: str) -> str:
    with _lock:
        return f"{prefix}_{next(_names)}"
