"""Python values given to the API as the plain data of a document: the keys of a ``Case``
(written as case.yaml) and the dict given to ``Report.from_dict`` (a JSON report).

Any value a caller can build ends in that data or in one error naming its key path
(``stages.qat_bc.value``) and what is expected there; never in Python's own error: the
walk keeps its own stack (a list holding itself, or nested thousands of levels deep, is
refused at ``MAX_DEPTH`` rather than recursed into), and no value is converted to text
that Python refuses to convert (an integer of thousands of digits). Path arguments are
checked here too (``given_path``).
"""

from __future__ import annotations

import math
import numbers
import os
import reprlib
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from qcdoctor.collectors import limits
from qcdoctor.collectors.bounded_data import MAX_DIGITS
from qcdoctor.errors import QcdoctorError

# as deep as a case.yaml may nest (a report nests 8 levels deep)
MAX_DEPTH = limits.YAML_DEPTH
_PLAIN_FIX = "give text, numbers, True/False, and lists and dicts of them"


def plain_data(value: Any, key: str, *, error: type[QcdoctorError] = QcdoctorError,
               holder: str = "a report", drop_none: bool = False) -> Any:
    """``value`` as plain data: text, numbers, booleans, None, and lists and dicts (keyed by
    text) of them. A str subclass (a str Enum's member) is its text, an int subclass its
    number, a numpy scalar the Python number it holds, a path its text, a tuple a list.
    Anything else is ``error`` naming the key path below ``key``: bytes, a set, a key that
    is not text, an integer no float can hold, a value that holds itself, nesting deeper
    than ``MAX_DEPTH``; ``holder`` names what the data is for. ``drop_none``: dict entries
    whose value is None are left out."""
    made: list = []
    # (value, its key path, its depth, ids of the lists and dicts around it, where it goes)
    pending: list[tuple[Any, str, int, tuple[int, ...], Callable]] = \
        [(value, key, 0, (), made.append)]
    while pending:
        item, path, depth, around, put = pending.pop()
        item = _scalar(item, path, error, holder)
        if not isinstance(item, (Mapping, list, tuple)):
            put(item)
            continue
        if id(item) in around:
            raise error("this value holds itself (a list or dict inside its own items)",
                        key=path, fix="give a copy of the inner value instead of the value "
                                      "itself")
        if depth >= MAX_DEPTH:
            raise error(f"nested more than {MAX_DEPTH} levels deep (limit: {MAX_DEPTH} "
                        "levels)", key=path, fix="give the values flat, as docs/case-file.md "
                                                 "and docs/reports.md show them")
        inside = (*around, id(item))
        children = []
        if isinstance(item, Mapping):
            made_dict: dict = {}
            for name, inner in item.items():
                name = _key(name, path, error)
                if drop_none and inner is None:
                    continue
                made_dict[name] = None          # its place, in the caller's order
                children.append((inner, f"{path}.{name}" if path else name, depth + 1,
                                 inside, partial(made_dict.__setitem__, name)))
            put(made_dict)
        else:
            made_list: list = [None] * len(item)
            children = [(inner, f"{path}[{i}]", depth + 1, inside,
                         partial(made_list.__setitem__, i)) for i, inner in enumerate(item)]
            put(made_list)
        pending.extend(reversed(children))      # the first problem in reading order
    return made[0]


def given_path(value: Any, key: str) -> Path:
    """A path argument as a Path; a QcdoctorError naming ``key`` for anything that names
    no path (a number, bytes, a list, text holding a NUL)."""
    if isinstance(value, (str, os.PathLike)):
        try:
            text = os.fspath(value)
        except Exception:  # noqa: BLE001 - the object's own __fspath__ may fail any way
            text = None
        if isinstance(text, str) and text and "\0" not in text:
            return Path(text)
    raise QcdoctorError(f"expected a path (text or a pathlib.Path), found {shown(value)}",
                        key=key, fix="give the path as text, e.g. 'my_case'")


def _scalar(value: Any, path: str, error: type[QcdoctorError], holder: str) -> Any:
    """A value that is no list or dict as plain data; a list or dict as it is."""
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and callable(item) and getattr(value, "ndim", 1) == 0:
        value = item()                      # a numpy scalar as the Python number it holds
    if value is None or isinstance(value, (Mapping, list, tuple)):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)           # the text itself: YAML and JSON write no subclass
    if isinstance(value, numbers.Integral):
        return _integer(int(value), path, error)
    if isinstance(value, numbers.Real):
        try:
            return float(value)
        except (OverflowError, ValueError):     # a Fraction beyond any float
            raise error(f"{shown(value)} is too large for any number", key=path,
                        fix="give a number a float can hold (at most about 1.8e308)") \
                from None
    if isinstance(value, os.PathLike):
        try:
            text = os.fspath(value)
        except Exception:  # noqa: BLE001 - the object's own __fspath__ may fail any way
            text = None
        if isinstance(text, str):
            return str.__str__(text)
    raise error(f"found {type(value).__name__}, which {holder} does not hold", key=path,
                fix=_PLAIN_FIX)


def _integer(value: int, path: str, error: type[QcdoctorError]) -> int:
    if abs(value) < 10 ** MAX_DIGITS:
        return value
    raise error(f"an integer of {digits(value):,} digits, too large for any number",
                key=path, fix="give a number a float can hold (at most about 1.8e308)")


def _key(name: Any, path: str, error: type[QcdoctorError]) -> str:
    if isinstance(name, str):
        return str.__str__(name)
    raise error(f"the key {shown(name)} is not text", key=path or None,
                fix="name every key with text, as the documents write them")


def digits(value: int) -> int:
    """How many decimal digits ``value`` has, without converting it to text (Python refuses
    past 4,300 digits)."""
    size = abs(value)
    count = max(1, math.floor(size.bit_length() * math.log10(2)))   # off by one at most
    if size >= 10 ** count:
        return count + 1
    return count - 1 if count > 1 and size < 10 ** (count - 1) else count


def shown(value: Any) -> str:
    """``value`` in a message: short, and never an error of its own (the repr of a huge
    integer raises, of a deeply nested list recurses, of a caller's object may do
    anything)."""
    if isinstance(value, str):
        return reprlib.repr(str.__str__(value))
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10 ** MAX_DIGITS:
        return f"an integer of {digits(value):,} digits"
    try:
        return reprlib.repr(value)
    except Exception:  # noqa: BLE001 - a caller's __repr__ may fail any way
        return f"a {type(value).__name__}"
