"""JSON Schemas of case-v1 and report-v1, generated from the specs the validators use
(``CASE_SCHEMA`` for case.yaml, ``REPORT_SPEC`` for reports), so they never drift.

YAML reads ``yes``/``no`` and ``on``/``off`` as booleans in some editors and as text in
others, and case.yaml accepts both: the schema says so too. A key whose value is null
counts as not given, as in the validator.
"""

from __future__ import annotations

import json

from qcdoctor.collectors.versions import VERSION_RE
from qcdoctor.collectors.yaml_schema import (
    FALSE_WORDS,
    TRUE_WORDS,
    Choice,
    Flag,
    ListOf,
    Mapping,
    Number,
    Text,
    Version,
)

DRAFT = "http://json-schema.org/draft-07/schema#"


def _any_case(word: str) -> str:
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in word)


# the validator's own expression, anchored the JSON Schema (ECMA 262) way
_VERSION_PATTERN = "^" + VERSION_RE.pattern.removesuffix(r"\Z") + "$"
_FLAG_WORDS = "^(" + "|".join(_any_case(w) for w in sorted(TRUE_WORDS | FALSE_WORDS)) + ")$"


def json_schema(spec) -> dict:
    """The JSON Schema of one spec (recursively)."""
    from qcdoctor.engine.reports.schema import Anything, Fact
    if isinstance(spec, Fact):
        return _fact_schema()
    if isinstance(spec, Mapping):
        out = {"type": "object",
               "properties": {name: json_schema(s) if name in spec.required
                              else _nullable(json_schema(s)) for name, s in spec.fields.items()},
               "additionalProperties": (_nullable(json_schema(spec.values))
                                        if spec.values is not None else False)}
        if spec.required:
            out["required"] = list(spec.required)
        if spec.one_of:
            out["maxProperties"] = 1
        return out
    if isinstance(spec, ListOf):
        items = {"type": "array", "items": json_schema(spec.item)}
        return {"anyOf": [items, json_schema(spec.item)]} if spec.scalar_ok else items
    if isinstance(spec, Choice):
        choices = list(spec.choices)
        if {"yes", "no"} <= set(choices):
            choices += [True, False]            # YAML 1.1 booleans read as yes / no
        return {"enum": choices}
    if isinstance(spec, Flag):
        return {"anyOf": [{"type": "boolean"}, {"type": "string", "pattern": _FLAG_WORDS}]}
    if isinstance(spec, Number):
        out = {"type": "integer" if spec.integer else "number"}
        if spec.minimum is not None:
            out["minimum"] = spec.minimum
        if spec.maximum is not None:
            out["maximum"] = spec.maximum
        return out
    if isinstance(spec, Version):
        # an unquoted 4.4 is a number in YAML; the validator reads its text either way
        return {"anyOf": [{"type": "string", "pattern": _VERSION_PATTERN}, {"type": "number"}]}
    if isinstance(spec, Text):
        # the validator takes any scalar as text (title: 2024 is the text "2024")
        return {"const": spec.const} if spec.const is not None else \
            {"type": ["string", "number", "boolean"]}
    if isinstance(spec, Anything):
        return {}
    raise TypeError(f"no JSON Schema for {type(spec).__name__}")


_FIELD_TYPES = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def _fact_schema() -> dict:
    """A fact: a ``type``, and per type its declared fields (fact_types.FACT_TYPES)."""
    from qcdoctor.fact_types import FACT_TYPES

    def field_schema(field) -> dict:
        return {"enum": list(field.choices)} if field.choices is not None else \
            {"type": _FIELD_TYPES[field.kind]}
    return {"type": "object", "required": ["type"], "properties": {"type": {"type": "string"}},
            "allOf": [{"if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
                       "then": {"properties": {name: field_schema(field)
                                               for name, field in fields.items()},
                                "required": list(fields)}}
                      for kind, fields in FACT_TYPES.items() if fields]}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]} if schema else schema


def case_schema() -> dict:
    from qcdoctor.collectors.case_file import CASE_SCHEMA, SCHEMA_ID
    return {"$schema": DRAFT, "title": f"qcdoctor case file ({SCHEMA_ID})", **json_schema(CASE_SCHEMA)}


def report_schema() -> dict:
    from qcdoctor.engine.reports.schema import REPORT_SCHEMA_ID, REPORT_SPEC, REQUIRED
    return {"$schema": DRAFT, "title": f"qcdoctor JSON report ({REPORT_SCHEMA_ID})",
            **json_schema(REPORT_SPEC), "required": list(REQUIRED)}


SCHEMAS = {"case": case_schema, "report": report_schema}


def render_schema(name: str) -> str:
    return json.dumps(SCHEMAS[name](), ensure_ascii=False, indent=2) + "\n"
