"""``normalise`` checks the common exact types inline: it must accept, convert and refuse
exactly what each field's own ``Field.check`` does, with the same messages."""

from __future__ import annotations

import enum

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from qcdoctor.fact_types import FACT_TYPES, PROVENANCE_KEYS, normalise


class Level(enum.IntEnum):
    TWO = 2


class Name(str):
    pass


def reference(fact: dict) -> dict:
    """The field-by-field definition: defaults filled, ints widened to float, each checked."""
    schema = FACT_TYPES[fact["type"]]
    out = {"type": fact["type"]}
    for name, spec in schema.items():
        value = fact.get(name)
        value = spec.default if value is None else value
        if spec.kind == "float" and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        problem = spec.check(value)
        if problem:
            raise ValueError(f"fact {fact['type']}.{name} {problem}")
        out[name] = value
    return out


_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True),
                    st.sampled_from(["", "unknown", "yes", "qat_bc", "J6E", "mAP", "x" * 3]),
                    st.just(Level.TWO), st.just(Name("yes")), st.lists(st.integers(), max_size=1))


@st.composite
def facts(draw):
    ftype = draw(st.sampled_from(sorted(FACT_TYPES)))
    fields = sorted(FACT_TYPES[ftype])
    chosen = draw(st.lists(st.sampled_from(fields), unique=True)) if fields else []
    fact = {"type": ftype, **{name: draw(_values) for name in chosen}}
    if draw(st.booleans()):
        fact[draw(st.sampled_from(PROVENANCE_KEYS))] = "case.yaml:3"
    return fact


@settings(max_examples=600, deadline=None, derandomize=True)
@given(facts())
def test_normalise_agrees_with_the_field_checks(fact):
    try:
        expected = reference(fact)
    except ValueError as error:
        with pytest.raises(ValueError) as raised:
            normalise(fact)
        assert str(raised.value) == str(error)
        return
    got = normalise(fact)
    assert got == expected
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_unknown_fields_and_types_are_named():
    with pytest.raises(ValueError, match="has no field 'colour'; fields: stage, status"):
        normalise({"type": "stage", "stage": "qat", "colour": "red", "source": "x"})
    with pytest.raises(ValueError, match="unknown fact type 'nonsense'"):
        normalise({"type": "nonsense"})
