"""Decoded YAML values checked key by key: each problem names its key path, and every
problem of a document is collected (a linter's way) before the reader gives up on it.

fix_trials.yaml and probe_run.yaml's ``samples`` are read with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from qcdoctor.collectors.reasons import Reason, reason


@dataclass(frozen=True)
class TooLarge:
    """An integer of the file too long to be any number: kept as its text, for the reader
    to refuse with its key (Python's int() refuses past 4,300 digits, advising to change
    the interpreter's limit)."""
    text: str
    digits: int                 # in decimal

    def __str__(self) -> str:           # its start, as a message shows a long value
        return self.text if len(self.text) <= 40 else self.text[:37] + "..."

    __repr__ = __str__


class Failed(Exception):
    """The value being read has a problem (recorded): the reader goes on with the next."""


class KeyChecks:
    """The problems of one file, each naming its key, collected in the order found."""

    def __init__(self) -> None:
        self.problems: list[Reason] = []

    def fail(self, problem: Reason):
        self.problems.append(problem)
        raise Failed

    def mapping(self, value, key: str, keys: tuple, optional: tuple = (),
                strict: bool = True) -> dict:
        """``value`` as a mapping of ``keys`` (those in ``optional`` may be left out or
        null); ``strict``: no other key (a versioned file), else others are let be (a file
        that gains keys over releases)."""
        if not isinstance(value, dict):
            self.fail(reason("{key}: expected a mapping, found {found}", key=key,
                             found=shown_value(value)))
        for name in value if strict else ():
            if name not in keys:
                self.problems.append(reason("{key}: unknown key (allowed: {allowed})",
                                            key=key_path(key, name), allowed=", ".join(keys)))
        for name in keys:
            if value.get(name) is None and name not in optional:
                self.problems.append(reason("{key} is missing", key=key_path(key, name)))
        return value

    def too_large(self, value, key: str) -> None:
        """Refuse an integer too long to be any number, naming its key."""
        if isinstance(value, TooLarge):
            self.fail(reason("{key}: a number of {digits} digits, too large for any number",
                             key=key, digits=value.digits))

    def number(self, value, key: str, low: float = -math.inf, high: float = math.inf) -> float:
        """A finite number within [low, high]; YAML 1.1 reads ``1e-5`` as text: taken too."""
        self.too_large(value, key)
        number = None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            number = float(value) if abs(value) < 10 ** 308 else math.inf
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                number = None
        if number is None or not math.isfinite(number):
            self.fail(reason("{key}: expected a finite number, found {found}", key=key,
                             found=shown_value(value)))
        if not low <= number <= high:
            self.fail(reason("{key}: {value} is outside {low} to {high}", key=key,
                             value=shown_value(value), low=f"{low:g}", high=f"{high:g}"))
        return number

    def integer(self, value, key: str) -> int:
        self.too_large(value, key)
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(reason("{key}: expected a whole number, found {found}", key=key,
                             found=shown_value(value)))
        return value

    def count(self, value, key: str) -> int:
        self.too_large(value, key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            self.fail(reason("{key}: expected a whole number of 0 or more, found {found}",
                             key=key, found=shown_value(value)))
        return value

    def choice(self, value, key: str, choices: tuple) -> str:
        if not isinstance(value, str) or value not in choices:
            self.fail(reason("{key}: {value} is not one of {allowed}", key=key,
                             value=shown_value(value), allowed=", ".join(choices)))
        return value

    def flag(self, value, key: str) -> bool:
        if not isinstance(value, bool):
            self.fail(reason("{key}: expected true or false, found {found}", key=key,
                             found=shown_value(value)))
        return value

    def text(self, value, key: str) -> str:
        self.too_large(value, key)
        # an output may be named by its index (YAML reads an unquoted 0 as a number)
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        if not isinstance(value, str) or not value.strip():
            self.fail(reason("{key}: expected text, found {found}", key=key,
                             found=shown_value(value)))
        return value

    def items(self, value, key: str, read, *, empty: bool = True) -> list:
        """Every item of a list read by ``read(item, its key)``; a bad item is recorded and
        the others are still read."""
        if not isinstance(value, list):
            self.fail(reason("{key}: expected a list, found {found}", key=key,
                             found=shown_value(value)))
        if not value and not empty:
            self.fail(reason("{key}: an empty list", key=key))
        out = []
        for i, item in enumerate(value):
            try:
                out.append(read(item, f"{key}[{i}]"))
            except Failed:
                continue
        return out

    def layer(self, value, key: str) -> str:
        """A qualified layer name; one holding a comma or a control character is refused:
        the fact fields join names with commas, and generated code must get them back."""
        name = self.text(value, key)
        if "," in name or any(ord(c) < 32 or ord(c) == 127 for c in name):
            self.fail(reason("{key}: the layer name {value} holds a comma or a control "
                             "character", key=key, value=shown_value(value)))
        return name

    def field(self, mapping: dict, name: str, key: str, reader, *args):
        """``reader(value, its key, *args)`` of ``mapping[name]``; None when it is left out
        (``mapping`` says whether it may be) or failed (recorded)."""
        if not isinstance(mapping, dict) or mapping.get(name) is None:
            return None
        try:
            return reader(mapping[name], key_path(key, name), *args)
        except Failed:
            return None


def key_path(key: str, name) -> str:
    return f"{key}.{name}" if key else str(name)


def shown_value(value) -> str:
    """A value in a message: short, one line, the same in both languages."""
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, list):
        return "[...]"
    text = repr(value) if not isinstance(value, bool) else str(value).lower()
    return text if len(text) <= 60 else text[:57] + "..."
