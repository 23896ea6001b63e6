"""Fuzzing the Python API with Python values no file holds: str subclasses and str Enum
members, nesting thousands of levels deep (built without recursion), lists and dicts that
hold themselves, integers of thousands of digits, NaN and infinities, bytes, sets,
tuples, as values and as keys, given to ``qcdoctor.Case(...)``, ``Case.update``,
``Case.stage`` and ``Report.from_dict``. Each call gives a valid object or one
``CaseError`` / ``QcdoctorError`` naming what is wrong; never another exception.

Same settings as tests/safety/test_fuzz.py: a fixed seed and a bounded number of examples in CI;
``QCDOCTOR_FUZZ_EXAMPLES=N`` runs a longer campaign with fresh randomness.
"""

from __future__ import annotations

import copy
import enum
import functools

from hypothesis import given
from hypothesis import strategies as st

import qcdoctor
from qcdoctor.fact_types import STAGES
from tests.safety.test_fuzz import fuzz


class Word(str):
    """A str subclass, as a library's string type may be."""


class Status(str, enum.Enum):
    NORMAL = "normal"
    ABNORMAL = "abnormal"
    QAT_BC = "qat_bc"


class Level(enum.IntEnum):
    ONE = 1


WORDS = ["J6E", "nash-e", "mAP", "qat_bc", "quantized_bc", "normal", "abnormal", "yes",
         "dataset_eval", "convert", "stage", "value", "metric", "", "é中文", "\x00", "a" * 300]


def _huge(digits: int, sign: int) -> int:
    """An integer of ``digits`` + 1 digits (made, not written: Python prints none past
    4,300 digits, so no strategy may hold one to show)."""
    return sign * 10 ** digits


huge = st.builds(_huge, st.sampled_from([19, 308, 400, 5000]), st.sampled_from([1, -1]))

texts = st.sampled_from(WORDS) | st.text(max_size=12)
words = texts | texts.map(Word) | st.sampled_from(list(Status))
numbers = (st.integers() | huge | st.floats() | st.sampled_from(list(Level))
           | st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, 5e-324]))
scalars = (st.none() | st.booleans() | words | numbers | st.binary(max_size=8)
           | st.builds(object))
keys = words | st.integers(-3, 3) | st.binary(max_size=4) | st.none() \
    | st.tuples(texts, texts) | st.frozensets(texts, max_size=2)


def _nested(value, depth: int, kind: str):
    """``value`` inside ``depth`` lists or dicts, built without recursion."""
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


def _looped(value, kind: str):
    """A list or dict that holds itself beside ``value``."""
    if kind == "list":
        loop: list = [value]
        loop.append(loop)
        return loop
    loop_dict: dict = {"value": value}
    loop_dict["self"] = loop_dict
    return loop_dict


def _containers(children):
    return (st.lists(children, max_size=4) | st.tuples(children, children)
            | st.sets(st.sampled_from(WORDS), max_size=3)
            | st.dictionaries(keys, children, max_size=4)
            | st.dictionaries(words, children, max_size=4))


values = st.recursive(scalars, _containers, max_leaves=12)
# the hostile shapes beside the random ones: deep nesting and self-reference
hostile = values | st.builds(_nested, values, st.integers(0, 3000),
                             st.sampled_from(["list", "dict"])) \
    | st.builds(_looped, values, st.sampled_from(["list", "dict"]))
ARGUMENTS = ["title", "language", "symptom", "evidence", "badcase", "chip", "march",
             "platform", "versions", "metric", "stages", "tolerance", "higher_is_better",
             "retrain", "consistency_level", "consistency_levels_tried", "deploy",
             "thresholds", "artifacts", "user_checks", "analyses_run"]
stage_ids = st.sampled_from(STAGES) | st.sampled_from(STAGES).map(Word) | hostile


def _either_valid_or_clear(call):
    """The call's object, or None after one clear qcdoctor error; anything else fails."""
    try:
        return call()
    except qcdoctor.QcdoctorError as error:
        assert str(error) and error.problem       # rendered, never an error of its own
        return None


@fuzz(ci_examples=150)
@given(arguments=st.dictionaries(st.sampled_from(ARGUMENTS), hostile, max_size=3))
def test_case_arguments(arguments):
    case = _either_valid_or_clear(lambda: qcdoctor.Case(**arguments))
    if case is not None:                # plain YAML, and what it holds builds it again
        assert "!!" not in case.to_yaml()
        again = qcdoctor.Case(**{k: v for k, v in case.data.items() if k != "schema"})
        assert again.data == case.data


@fuzz(ci_examples=100)
@given(first=st.dictionaries(st.sampled_from(ARGUMENTS), hostile, max_size=2),
       second=st.dictionaries(st.sampled_from(ARGUMENTS), hostile, max_size=2))
def test_case_update(first, second):
    case = qcdoctor.Case(chip="J6E", metric="mAP", stages={"qat_bc": 0.449})
    before = case.to_yaml()
    for values in (first, second):
        if _either_valid_or_clear(lambda values=values: case.update(**values)) is None:
            assert case.to_yaml() == before         # a refused update changes nothing
        before = case.to_yaml()


@fuzz(ci_examples=150)
@given(stage=stage_ids, value=st.none() | numbers | hostile, metric=st.none() | hostile,
       status=st.none() | st.sampled_from(list(Status)) | hostile)
def test_case_stage(stage, value, metric, status):
    case = qcdoctor.Case(metric="mAP")
    _either_valid_or_clear(lambda: case.stage(stage, value, metric=metric, status=status))


@functools.cache
def _report_dict() -> dict:
    return qcdoctor.triage(example="convert_j6e_no_retrain", lang="en").to_dict()


@st.composite
def _damaged_reports(draw):
    """A JSON report with one value (anywhere in it) replaced, or one key added."""
    data = copy.deepcopy(_report_dict())
    inner = data
    for _ in range(draw(st.integers(0, 4))):
        if isinstance(inner, dict) and inner:
            name = draw(st.sampled_from(sorted(inner)))
        elif isinstance(inner, list) and inner:
            name = draw(st.integers(0, len(inner) - 1))
        else:
            break
        if not isinstance(inner[name], (dict, list)):
            break
        inner = inner[name]
    if isinstance(inner, dict):
        inner[draw(keys if draw(st.booleans()) else st.sampled_from(sorted(inner) or ["x"]))] = \
            draw(hostile)
    elif inner:
        inner[draw(st.integers(0, len(inner) - 1))] = draw(hostile)
    return data


@fuzz(ci_examples=120)
@given(data=_damaged_reports())
def test_report_from_dict(data):
    report = _either_valid_or_clear(lambda: qcdoctor.Report.from_dict(data))
    if report is not None:
        assert report.to_dict()["schema"] == "qcdoctor/report-v1"
