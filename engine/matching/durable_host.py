"""durable_rules 2.0.28 behind guards; this module runs only inside an engine worker.

durable_rules is unmaintained and has traps, each guarded here:
- its Python ``Host`` starts two timer threads that re-arm forever, builds a JSON
  message for every fact no rule reads, and writes the state back after every action:
  the C engine (``durable_rules_engine``) is driven directly instead;
- its ruleset and fact JSON go through ``json.dumps``, whose ``1e-05`` the C parser
  rejects: everything goes through ``jsonfmt.dumps`` instead;
- facts are asserted one at a time (batch asserts crash on some inputs);
- asserting a fact no rule reads answers "not handled" and an identical fact
  "observed": both are normal here;
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

Creating a state costs more than matching in it: durable_rules zeroes about 10 KB per
rule condition in every new state, and about 90 us of fixed work. So each ruleset is
split into shards, one per set of uncommon fact types its rules need, and a match
creates states only for the shards whose fact types the case has; the worker readies
empty states between requests.
"""

from __future__ import annotations

import itertools
import json

import durable_rules_engine

from qcdoctor.engine.matching import jsonfmt

# a fact type no rule can read (rules are type-checked against fact_types)
WARM_TYPE = "$warm"
# durable_rules refuses a ruleset's 1,025th state: a worker is replaced at this many
STATE_LIMIT = 900
# the position of a fact in the request, carried through the engine to name bound facts
INDEX_KEY = "i__"
_NOT_HANDLED, _OBSERVED = 1, 2


def bindings(bound: dict) -> dict:
    """Pattern name -> request index of the fact bound to it, from an action's message."""
    return {key[2:]: fact[INDEX_KEY] for key, fact in bound.items() if key.startswith("p_")}


def _pattern_type(condition: dict) -> str:
    """The fact type a compiled pattern (``patterns.to_durable``) reads."""
    return condition["$and"][0]["type"] if "$and" in condition else condition["type"]


class HostSealed(RuntimeError):
    """A ruleset was registered after the host had run facts."""


class _Shard:
    """The rules of one ruleset that need the same fact types, as a durable_rules ruleset."""

    def __init__(self, name: str, patterns: dict[str, list], needs: frozenset):
        self.name = name
        self.needs = needs                      # types every rule here needs: else none fires
        self.reads = {_pattern_type(condition)  # every type any rule here looks at
                      for all_ in patterns.values() for element in all_
                      for condition in element.values()}
        definition = {rule_id: {"all": all_} for rule_id, all_ in patterns.items()}
        self.handle = durable_rules_engine.create_ruleset(name, jsonfmt.dumps(definition))
        self.states = 0
        self.spare: str | None = None


class QuietHost:
    """Matches each fact set in fresh durable_rules states, one per shard it can fire in."""

    def __init__(self):
        self._sealed = False
        self._shards: dict[str, list[_Shard]] = {}
        self._sids = itertools.count(1)
        self._wanted: dict[_Shard, None] = {}     # shards without a spare state, oldest first

    def register(self, name: str, patterns: dict[str, list], usual: frozenset = frozenset()
                 ) -> None:
        """Register a ruleset from ``{rule_id: durable 'all' patterns}``.

        Its rules are sharded by the fact types they need beyond the ``usual`` ones (those
        nearly every case has): rules needing only usual types share one shard, which
        saves a state per case, and a shard is matched only when its types are present.
        ``usual`` changes only the speed, never the hits.
        """
        if self._sealed:
            raise HostSealed("durable_rules cannot take new rulesets after facts were "
                             "asserted (it corrupts memory)")
        if name in self._shards:
            return
        groups: dict[frozenset, dict[str, list]] = {}
        for rule_id, all_ in patterns.items():
            needs = frozenset(_pattern_type(c) for e in all_ for k, c in e.items()
                              if k.startswith("p_"))
            groups.setdefault(needs - usual, {})[rule_id] = all_
        shards = [_Shard(f"{name}/{i}", group, needs) for i, (needs, group)
                  in enumerate(sorted(groups.items(), key=lambda g: sorted(g[0])))]
        self._shards[name] = shards
        self._wanted.update(dict.fromkeys(shards))

    def registered(self) -> set[str]:
        return set(self._shards)

    def match(self, name: str, facts: list[tuple[str, str]], gate: tuple[str, str]
              ) -> tuple[list, list]:
        """Assert ``facts`` (type, JSON object) then ``gate`` into fresh states.

        Returns (hits, action errors); a hit is (rule id, {pattern name: fact index}),
        the gate's index being ``len(facts)``.
        """
        self._sealed = True
        present = {kind for kind, _ in facts}
        hits: list = []
        errors: list = []
        numbered = list(enumerate(facts)) + [(len(facts), gate)]
        for shard in self._shards[name]:
            if not shard.needs <= present:
                continue                        # a rule here needs a fact type the case lacks
            sid, shard.spare = shard.spare or self._new_sid(shard), None
            self._wanted[shard] = None
            head = '{"' + INDEX_KEY + '": %d, "sid": "' + sid + '", '
            for index, (kind, body) in numbered:
                if kind in shard.reads:
                    self._assert(shard, head % index + body[1:], hits, errors)
        return hits, errors

    def _assert(self, shard: _Shard, text: str, hits: list, errors: list) -> None:
        code, state = durable_rules_engine.assert_fact(shard.handle, text)
        if code in (_NOT_HANDLED, _OBSERVED):
            return
        result = durable_rules_engine.start_action_for_state(shard.handle, state)
        message = json.loads(result[1]) if result else None
        while message:
            (rule_id, bound), = message.items()
            try:
                hits.append((rule_id, bindings(bound)))
            except Exception as exc:  # noqa: BLE001 - reported after the run, never swallowed
                errors.append(f"{rule_id}: {exc!r}")
            following = durable_rules_engine.complete_and_start_action(shard.handle, state)
            message = json.loads(following) if following else None

    def prepare_spare(self) -> bool:
        """Create one empty state for a shard that lacks one; False when none does.

        The worker calls this between requests, while the caller works.
        """
        while self._wanted:
            shard = next(iter(self._wanted))
            del self._wanted[shard]
            if shard.spare is None and shard.states < STATE_LIMIT:
                self._sealed = True
                sid = self._new_sid(shard)
                # a fact no rule reads: the engine creates the state and stores nothing in it
                durable_rules_engine.assert_fact(
                    shard.handle, '{"type": "' + WARM_TYPE + '", "sid": "' + sid + '"}')
                shard.spare = sid
                return True
        return False

    def _new_sid(self, shard: _Shard) -> str:
        shard.states += 1
        return f"s{next(self._sids)}"

    def wear(self) -> float:
        """The share of STATE_LIMIT the busiest shard has used (1.0: time for a new worker)."""
        return max((s.states for shards in self._shards.values() for s in shards),
                   default=0) / STATE_LIMIT
