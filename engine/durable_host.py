"""durable_rules 2.0.28 behind guards; this module runs only inside an engine worker.

durable_rules is unmaintained and has traps, each guarded here:
- ``Host()`` starts two timer threads that re-arm forever: ``QuietHost`` starts none;
- its ruleset and fact JSON go through ``json.dumps``, whose ``1e-05`` the C parser
  rejects: everything goes through ``jsonfmt.dumps`` instead;
- facts are asserted one at a time (batch asserts crash on some inputs);
- asserting a fact no rule reads raises ``MessageNotHandledException`` and an
  identical fact ``MessageObservedException``: both are normal here;
- ``durable.lang`` is never imported (its ``from ... import *`` rebinds all/any);
- a ruleset registered after facts were asserted into another one corrupts the C
  engine's heap: the host refuses registration once it has been used;
- ``delete_state`` frees a state's beta-node pools before deleting its messages and then
  touches them: it is never called. Each ruleset keeps one state (one ``sid``) that is
  emptied after every match by retracting what was asserted, last first. Retraction can
  still fail or crash in the C engine now and then (a heap-layout lottery in processes
  holding many rulesets), so this host runs only in a worker process that is replaced
  after any failure (``engine_process``): a crash here never reaches the caller, and a
  state that could not be emptied is never used again.
"""

from __future__ import annotations

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


def bindings(c) -> dict:
    """Pattern name -> matched fact (without the engine's ``sid``) of an action's closure."""
    return {key[2:]: {k: v for k, v in dict(fact).items() if k != "sid"}
            for key, fact in c._m.items() if key.startswith("p_")}


class HostSealed(RuntimeError):
    """A ruleset was registered after the host had run facts."""


class QuietHost(_durable.Host):
    """A Host without background threads; each ruleset's state is emptied after a match."""

    def __init__(self):
        super().__init__()
        self._sealed = False
        self._hits: list[tuple[str, dict]] = []
        self._errors: list[str] = []
        self._recording = False

    def _run(self):
        return None

    def register(self, name: str, patterns: dict[str, list]) -> None:
        """Register a ruleset from ``{rule_id: durable 'all' patterns}``."""
        if self._sealed:
            raise HostSealed("durable_rules cannot take new rulesets after facts were "
                             "asserted (it corrupts memory)")
        if name in self._ruleset_directory:
            return
        definition = {rule_id: {"all": all_, "run": self._recorder(rule_id)}
                      for rule_id, all_ in patterns.items()}
        ruleset = _SafeRuleset(name, self, definition)
        self._ruleset_directory[name] = ruleset
        self._ruleset_list.append(ruleset)

    def registered(self) -> set[str]:
        return set(self._ruleset_directory)

    def _recorder(self, rule_id: str):
        def action(c):
            if not self._recording:         # retraction at the end of a match: ignore
                return
            # an exception raised here would be swallowed by durable_rules: record it
            try:
                self._hits.append((rule_id, bindings(c)))
            except BaseException as exc:  # noqa: BLE001 - reported after the run
                self._errors.append(f"{rule_id}: {exc!r}")
        return action

    def match(self, name: str, facts: list[dict], gate: dict) -> tuple[list, list, bool]:
        """Assert ``facts`` then ``gate``, then retract them all.

        Returns (hits, action errors, whether the state was emptied cleanly).
        """
        self._sealed = True
        sid = name
        asserted = [dict(fact, sid=sid) for fact in facts] + [dict(gate, sid=sid)]
        self._hits, self._errors = [], []
        done = 0
        self._recording = True
        try:
            for fact in asserted:
                self._quietly(self.assert_fact, name, fact)
                done += 1
        finally:
            self._recording = False
            clean = self._forget(name, asserted[:done + 1])
        return self._hits, self._errors, clean

    def _forget(self, name: str, asserted: list[dict]) -> bool:
        """Retract, last first: the gate goes first, so no rule can fire meanwhile."""
        clean = True
        for fact in reversed(asserted):
            try:
                self._quietly(self.retract_fact, name, fact)
            except Exception:  # noqa: BLE001 - the state is dirty: the worker is replaced
                clean = False
        return clean

    @staticmethod
    def _quietly(operation, name: str, fact: dict) -> None:
        """'No rule reads it' and 'already known' are not errors."""
        try:
            operation(name, fact)
        except (_durable.MessageNotHandledException, _durable.MessageObservedException):
            pass
