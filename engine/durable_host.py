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
- retraction is broken once a rule has fired: completing an action deletes its frame
  but leaves the facts' location entries pointing at it, so retracting such a fact
  finds a "dispatching" frame and calls ``deleteMessageFromFrame``, which clears the
  message without lowering the frame's count; the next retraction touching that frame
  scans past the end of its array (the random SIGSEGV of long runs). ``delete_state``
  touches freed pools as well. Neither is ever called: every match asserts into a
  fresh state (``sid``) that is simply abandoned. States keep their memory and a
  ruleset takes at most 1,024 of them, so the worker process that owns this host is
  replaced long before either matters (``engine_process``), and a crash here kills
  only that worker, never the caller.
- after each action the base class writes the state document back (``update_state``)
  and gives up on actions slower than 10 s; our actions never change the state, so
  ``do_actions`` runs and completes them without either.
"""

from __future__ import annotations

import itertools
import json

import durable_rules_engine
from durable import engine as _durable

from . import jsonfmt

# a fact type no rule can read (rules are type-checked against fact_types)
WARM_TYPE = "$warm"
# durable_rules refuses a ruleset's 1,025th state: a worker is replaced at this many
STATE_LIMIT = 900


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

    def do_actions(self, state_handle, complete):
        """Run the started actions one by one and complete each, without ``update_state``.

        Our actions never change the state, so there is nothing to write back, and a
        slow action (a loaded machine) is never mistaken for an abandoned one.
        """
        try:
            result = durable_rules_engine.start_action_for_state(self._handle, state_handle)
            if result:
                state, message = json.loads(result[0]), json.loads(result[1])
                while message:
                    action_name, bound = next(iter(message.items()))
                    closure = _durable.Closure(self._host, self, state, bound, state_handle)
                    self._actions[action_name]._func(closure)
                    following = durable_rules_engine.complete_and_start_action(
                        self._handle, closure._handle)
                    message = json.loads(following) if following else None
            complete(None, None)
        except BaseException as error:  # noqa: BLE001 - handed to the caller as the base does
            complete(error, None)


def bindings(c) -> dict:
    """Pattern name -> matched fact (without the engine's ``sid``) of an action's closure."""
    return {key[2:]: {k: v for k, v in dict(fact).items() if k != "sid"}
            for key, fact in c._m.items() if key.startswith("p_")}


class HostSealed(RuntimeError):
    """A ruleset was registered after the host had run facts."""


class QuietHost(_durable.Host):
    """A Host without background threads that matches each fact set in a fresh state."""

    def __init__(self):
        super().__init__()
        self._sealed = False
        self._hits: list[tuple[str, dict]] = []
        self._errors: list[str] = []
        self._states: dict[str, int] = {}
        self._sids = itertools.count(1)
        self._spares: dict[str, list[str]] = {}
        self._wanted: dict[str, None] = {}      # rulesets short of a spare, oldest first

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
        self._states[name] = 0
        self._spares[name] = []
        self._wanted[name] = None

    def registered(self) -> set[str]:
        return set(self._ruleset_directory)

    def _recorder(self, rule_id: str):
        def action(c):
            # an exception raised here would be swallowed by durable_rules: record it
            try:
                self._hits.append((rule_id, bindings(c)))
            except BaseException as exc:  # noqa: BLE001 - reported after the run
                self._errors.append(f"{rule_id}: {exc!r}")
        return action

    def match(self, name: str, facts: list[dict], gate: dict) -> tuple[list, list]:
        """Assert ``facts`` then ``gate`` into a fresh state: (hits, action errors)."""
        self._sealed = True
        sid = self._spares[name].pop() if self._spares[name] else self._new_sid(name)
        self._wanted[name] = None
        self._hits, self._errors = [], []
        for fact in facts + [gate]:
            self._assert_quietly(name, dict(fact, sid=sid))
        return self._hits, self._errors

    def prepare_spare(self) -> bool:
        """Create one empty state for a ruleset that lacks one; False when none does.

        Creating a state costs more than matching in it (its index arrays scale with the
        rule count), so the worker does it between requests, while the caller works.
        """
        if not self._wanted:
            return False
        name = next(iter(self._wanted))
        del self._wanted[name]
        if self._spares[name] or self._states[name] >= STATE_LIMIT:
            return True
        self._sealed = True
        sid = self._new_sid(name)
        # a fact no rule reads: the engine creates the state and stores nothing in it
        self._assert_quietly(name, {"type": WARM_TYPE, "sid": sid})
        self._spares[name].append(sid)
        return True

    def _new_sid(self, name: str) -> str:
        self._states[name] += 1
        return f"{name}#{next(self._sids)}"

    def _assert_quietly(self, name: str, fact: dict) -> None:
        try:
            self.assert_fact(name, fact)
        except (_durable.MessageNotHandledException, _durable.MessageObservedException):
            pass    # no rule reads it / an identical fact is known: both normal here

    def worn_out(self) -> bool:
        """True once some ruleset has used STATE_LIMIT states: time for a new worker."""
        return max(self._states.values(), default=0) >= STATE_LIMIT
