"""Render rule messages: ``{name.field}`` reads a bound fact, ``!l`` shows a stage label."""

from __future__ import annotations

import string

from .vocabulary import STAGE_LABELS


class _Formatter(string.Formatter):
    def __init__(self, for_display: bool = True):
        super().__init__()
        self.for_display = for_display

    def get_field(self, field_name, args, kwargs):
        name, _, rest = field_name.partition(".")
        value = kwargs[name]
        for part in rest.split(".") if rest else ():
            value = value[part] if isinstance(value, dict) else getattr(value, part)
        return value, field_name

    def convert_field(self, value, conversion):
        if conversion == "l":
            return STAGE_LABELS.get(value, value)
        return super().convert_field(value, conversion)

    def format_field(self, value, format_spec):
        if isinstance(value, float) and not format_spec:
            return f"{value:.6g}"
        text = super().format_field(value, format_spec)
        # in a message shown to people, a value never carries a backtick: the message's
        # `code` spans are the rule's own, so reports keep them as code and show
        # everything else as plain text
        return text.replace("`", "'") if self.for_display else text


_FORMATTERS = {True: _Formatter(for_display=True), False: _Formatter(for_display=False)}


def render(template: str, bindings: dict, for_display: bool = True) -> str:
    """Fill a message (``for_display``) or a value such as an op list for generated code;
    a missing field is shown as '?' rather than failing the report."""
    formatter = _FORMATTERS[for_display]
    try:
        return formatter.vformat(template, (), bindings)
    except (KeyError, AttributeError, IndexError, ValueError):
        return formatter.vformat(template, (), _Lenient(bindings))


class _Lenient(dict):
    def __missing__(self, key):
        return _Unknown()


class _Unknown(dict):
    def __missing__(self, key):
        return "?"

    def __format__(self, spec):
        return "?"
