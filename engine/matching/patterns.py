"""Rule patterns: parsed from YAML, type-checked, compiled for durable_rules.

A ``when`` list holds fact patterns, all of which must match (a join over facts):
``{type: T, field: value, field: {op: value}, as: name}``; ``{not: {...}}`` means no
fact matches. Operators: eq, ne, gt, gte, lt, lte, in, not_in.
"""

from __future__ import annotations

from dataclasses import dataclass

from qcdoctor.errors import RuleError
from qcdoctor.fact_types import FACT_TYPES, GATE_TYPE
from qcdoctor.values import looks_numeric

OPS = ("eq", "ne", "gt", "gte", "lt", "lte", "in", "not_in")
_NUMERIC_OPS = ("gt", "gte", "lt", "lte")
_DURABLE_OP = {"ne": "$neq", "gt": "$gt", "gte": "$gte", "lt": "$lt", "lte": "$lte"}


@dataclass(frozen=True)
class Condition:
    field: str
    op: str
    value: object


@dataclass(frozen=True)
class Pattern:
    name: str
    type: str
    conditions: tuple[Condition, ...]
    negated: bool = False

    def matches(self, fact: dict) -> bool:
        if fact.get("type") != self.type:
            return False
        return all(_holds(c, fact.get(c.field)) for c in self.conditions)


def _holds(cond: Condition, actual) -> bool:
    op, want = cond.op, cond.value
    if op == "eq":
        return actual == want and type(actual) is type(want) or _num_eq(actual, want)
    if op == "ne":
        return not (actual == want and type(actual) is type(want) or _num_eq(actual, want))
    if op == "in":
        return actual in want
    if op == "not_in":
        return actual not in want
    if op == "gt":
        return actual > want
    if op == "gte":
        return actual >= want
    if op == "lt":
        return actual < want
    return actual <= want


def _num_eq(a, b) -> bool:
    numeric = (int, float)
    return (isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool)
            and not isinstance(b, bool) and a == b)


def _check_operand(ftype: str, field: str, op: str, value, where: str) -> object:
    spec = FACT_TYPES[ftype][field]
    if op in _NUMERIC_OPS:
        if spec.kind not in ("int", "float"):
            raise RuleError(f"'{op}' compares numbers but {ftype}.{field} is {spec.kind}",
                            file=where, key=field, fix="use eq/ne/in/not_in on text fields")
        values = [value]
    elif op in ("in", "not_in"):
        if not isinstance(value, list) or not value:
            raise RuleError(f"'{op}' needs a non-empty list", file=where, key=field)
        values = value
    else:
        values = [value]
    for item in values:
        if spec.kind == "float" and isinstance(item, int) and not isinstance(item, bool):
            continue
        problem = spec.check(item)
        if problem:
            fix = None
            if isinstance(item, str) and looks_numeric(item):
                fix = "YAML reads 1e-5 as text: write the number with a decimal point, e.g. 0.00001"
            elif isinstance(item, bool) and spec.kind == "str":
                fix = 'YAML reads bare yes/no as booleans: quote them, e.g. "yes"'
            raise RuleError(f"operand for {ftype}.{field} {problem}", file=where, key=field,
                            fix=fix)
    if spec.kind == "float":
        value = [float(v) for v in value] if isinstance(value, list) else float(value)
    return value


def parse_pattern(raw, where: str, index: int) -> Pattern:
    negated = False
    if isinstance(raw, dict) and set(raw) == {"not"}:
        negated, raw = True, raw["not"]
    if not isinstance(raw, dict) or "type" not in raw:
        raise RuleError(f"when[{index}] must be a mapping with a 'type'", file=where)
    ftype = raw["type"]
    if ftype not in FACT_TYPES:
        raise RuleError(f"when[{index}] reads unknown fact type {ftype!r}", file=where,
                        fix=f"known types: {', '.join(sorted(FACT_TYPES))}")
    name = raw.get("as", ftype)
    conds = []
    for field, spec in raw.items():
        if field in ("type", "as"):
            continue
        if field not in FACT_TYPES[ftype]:
            raise RuleError(f"fact type {ftype!r} has no field {field!r}", file=where,
                            key=f"when[{index}].{field}",
                            fix=f"fields: {', '.join(FACT_TYPES[ftype])}")
        ops = spec if isinstance(spec, dict) else {"eq": spec}
        for op, value in ops.items():
            if op not in OPS:
                raise RuleError(f"unknown operator {op!r}", file=where,
                                key=f"when[{index}].{field}", fix=f"operators: {', '.join(OPS)}")
            conds.append(Condition(field, op, _check_operand(ftype, field, op, value, where)))
    return Pattern(str(name), ftype, tuple(conds), negated)


def parse_when(when, where: str) -> tuple[Pattern, ...]:
    if not isinstance(when, list) or not when:
        raise RuleError("'when' must be a non-empty list of fact patterns", file=where)
    patterns = tuple(parse_pattern(raw, where, i) for i, raw in enumerate(when))
    if not any(not p.negated for p in patterns):
        # absence-only rules loop in durable_rules
        raise RuleError("'when' needs at least one positive pattern", file=where)
    names = [p.name for p in patterns if not p.negated]
    if len(names) != len(set(names)):
        raise RuleError("two patterns of one type need distinct 'as' names", file=where)
    return patterns


def _durable_condition(cond: Condition) -> dict:
    if cond.op == "eq":
        return {cond.field: cond.value}
    if cond.op == "in":
        return {"$or": [{cond.field: v} for v in cond.value]}
    if cond.op == "not_in":
        return {"$and": [{"$neq": {cond.field: v}} for v in cond.value]}
    return {_DURABLE_OP[cond.op]: {cond.field: cond.value}}


def _durable_pattern(p: Pattern) -> dict:
    return {"$and": [{"type": p.type}] + [_durable_condition(c) for c in p.conditions]}


def to_durable(patterns: tuple[Pattern, ...]) -> list[dict]:
    """The ``all`` list: positives, then (only when there are negations) the gate fact,
    then the negations.

    A ``$not`` placed before the last positive pattern is not re-checked when a
    matching fact arrives earlier; after the gate (asserted last) it sees every fact.
    A rule of positives alone needs no gate: it fires once all its facts are in.
    """
    out = [{f"p_{p.name}": _durable_pattern(p)} for p in patterns if not p.negated]
    negations = [{f"n{i}$not": _durable_pattern(p)} for i, p in enumerate(patterns) if p.negated]
    return out + [{"gate__": {"type": GATE_TYPE}}] + negations if negations else out


def oracle_bindings(patterns: tuple[Pattern, ...], facts: list[dict]) -> list[dict]:
    """Pure-Python matcher of the same semantics, for tests: every binding that fires."""
    positives = [p for p in patterns if not p.negated]
    if any(any(p.matches(f) for f in facts) for p in patterns if p.negated):
        return []
    bindings: list[dict] = [{}]
    for p in positives:
        bindings = [dict(b, **{p.name: f}) for b in bindings for f in facts if p.matches(f)]
    return bindings
