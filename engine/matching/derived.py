"""Facts derived from hits between strata: the winning conclusion and the checklist.

Stage rules read the conclusion, deployment rules the checklist statuses; both are
built here from the hits of their producers. This runs in the engine worker (passed to
``RuleRunner.run``), so it stays light: no report code is needed to import it.
"""

from __future__ import annotations

from functools import lru_cache

from qcdoctor.catalogues import checklist_items
from qcdoctor.engine.matching.runner import Hit, RuleRunner
from qcdoctor.text import render


def fill(value, bindings):
    """The rule's structured outputs (action ids, op lists, layers) with facts filled in."""
    if isinstance(value, str) and "{" in value:
        return render(value, bindings, for_display=False)
    if isinstance(value, dict):
        return {k: fill(v, bindings) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, bindings) for v in value]
    return value


def conclusion_fact(hits: list[Hit]) -> dict | None:
    """The winning conclusion among hits: highest priority, then lowest rule id."""
    for hit in hits:
        if "conclusion" in hit.rule.then:
            c = hit.rule.then["conclusion"]
            # a suspect may name a bound fact's field ("{checklist.item}": the failed item)
            suspect = fill(c.get("suspect", ""), hit.facts)
            return {"type": "conclusion", "stage": c["stage"], "determined": c["determined"],
                    "suspect": str(suspect), "source": f"rule {hit.rule.id}"}
    return None


STATUS_RANK = {"fail": 3, "unknown": 2, "pass": 1, "not_applicable": 0}


def checklist_statuses(hits: list[Hit]) -> dict[str, str]:
    """item -> worst status over every rule that judged it (fail > unknown > pass > n/a)."""
    worst: dict[str, str] = {}
    for hit in hits:
        if "checklist" not in hit.rule.then:
            continue
        c = fill(hit.rule.then["checklist"], hit.facts)
        worst[c["item"]] = _worse(worst.get(c["item"]), c["status"])
    return worst


def _worse(a: str | None, b: str) -> str:
    return b if a is None or STATUS_RANK[b] > STATUS_RANK[a] else a


def rolled_up(own: dict[str, str]) -> dict[str, tuple[str, list[str]]]:
    """Mandatory item -> (status, finer items that made it worse than its own judgement).

    knowledge.md §10 rev 2: a finer check rolls up into its mandatory item, worst wins;
    only judged finer checks count (an unjudged one says nothing), n/a never does.
    """
    items = checklist_items()
    out = {}
    for item, spec in items.items():
        if not spec["mandatory"]:
            continue
        parts = [p for p, s in items.items() if s.get("part_of") == item
                 and own.get(p) not in (None, "not_applicable")]
        statuses = [own[p] for p in parts] + ([own[item]] if item in own else [])
        if not statuses:
            continue
        status = max(statuses, key=STATUS_RANK.__getitem__)
        worse = status != own.get(item)
        out[item] = (status, [p for p in parts if own[p] == status] if worse else [])
    return out


def _checklist_facts(hits: list[Hit]) -> list[dict]:
    own = checklist_statuses(hits)
    rolled = rolled_up(own)
    facts = []
    for item in sorted(set(own) | set(rolled)):
        status, parts = rolled.get(item, (own.get(item), []))
        facts.append({"type": "checklist", "item": item, "status": status,
                      "rolled_up": bool(parts), "source": "deploy rules"})
    return facts


def _conclusion_facts(hits: list[Hit]) -> list[dict]:
    found = conclusion_fact(sorted(hits, key=lambda h: h.sort_key))
    return [found] if found else []


# derived fact kind -> how it is built from the hits of its producers
DERIVED = {"conclusion": _conclusion_facts, "checklist": _checklist_facts}


@lru_cache(maxsize=16)
def last_producers(runner: RuleRunner) -> dict[str, int]:
    """Derived fact kind -> the last stratum holding a rule that produces it."""
    return {kind: max((r.stratum for r in runner.rules if kind in r.then), default=-1)
            for kind in DERIVED}


def derived_facts(last: dict[str, int], stratum: int, hits_so_far: list[Hit]) -> list[dict]:
    """The derived facts due after ``stratum``: each kind once the last of its producers ran.

    It runs in the engine worker, between strata (``RuleRunner.run``).
    """
    return [fact for kind, build in DERIVED.items() if last[kind] == stratum
            for fact in build(hits_so_far)]
