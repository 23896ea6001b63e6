"""Render rule messages: ``{name.field}`` reads a bound fact, ``!l`` shows a stage label,
``!s`` a conclusion stage, ``!w`` an id (checklist item, user check, ...) in words of
the report language and ``!f`` a failed checklist item as its failure."""

from __future__ import annotations

import re
import string

from qcdoctor.vocabulary import CONCLUSION_LABELS, stage_label


class _Formatter(string.Formatter):
    def __init__(self, lang: str, for_display: bool = True):
        super().__init__()
        self.lang = lang
        self.for_display = for_display

    def get_field(self, field_name, args, kwargs):
        name, _, rest = field_name.partition(".")
        value = kwargs[name]
        for part in rest.split(".") if rest else ():
            value = value[part] if isinstance(value, dict) else getattr(value, part)
        return value, field_name

    def convert_field(self, value, conversion):
        if conversion == "l":
            return stage_label(value, self.lang)
        if conversion == "s":
            return CONCLUSION_LABELS[self.lang].get(value, value)
        if conversion == "w":
            from qcdoctor.wording import id_words  # report wording, loaded on first use
            return id_words(value, self.lang)
        if conversion == "f":
            from qcdoctor.wording import item_words
            return item_words(value, "fail", self.lang)
        return super().convert_field(value, conversion)

    def format_field(self, value, format_spec):
        if isinstance(value, float) and not format_spec:
            return f"{value:.6g}"
        text = super().format_field(value, format_spec)
        # in a message shown to people, a value never carries a backtick: the message's
        # `code` spans are the rule's own, so reports keep them as code and show
        # everything else as plain text
        return text.replace("`", "'") if self.for_display else text


_FORMATTERS = {(lang, shown): _Formatter(lang, shown)
               for lang in ("zh", "en") for shown in (True, False)}


# a space a field left between two Chinese characters ("板端 异常")
_CJK_SPACE = re.compile(r"(?<=[\u4e00-\u9fff]) (?=[\u4e00-\u9fff])")


def render(template: str, bindings: dict, lang: str = "en", for_display: bool = True) -> str:
    """Fill a message (``for_display``) or a value such as an op list for generated code;
    a missing field is shown as '?' rather than failing the report."""
    formatter = _FORMATTERS[lang, for_display]
    try:
        text = formatter.vformat(template, (), bindings)
    except (KeyError, AttributeError, IndexError, ValueError):
        text = formatter.vformat(template, (), _Lenient(bindings))
    if not for_display:
        return text
    # a bracketed field that came out empty ("directly ()"): the brackets go with it (a call
    # such as "sensitivity()" has no space before its brackets and stays)
    text = _EMPTY_BRACKETS.sub("", text)
    return _CJK_SPACE.sub("", text) if lang == "zh" else text


_EMPTY_BRACKETS = re.compile(r"(?: \(\s*\)|（\s*）)")


def code_spans(text: str) -> list[tuple[str, bool]]:
    """A rendered message cut into (part, is it a `code` span); with an unbalanced backtick,
    the whole text as one plain part (a value never brings a backtick: ``format_field``)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:
        return [(text, False)]
    return [(part, bool(i % 2)) for i, part in enumerate(parts)]


class _Lenient(dict):
    def __missing__(self, key):
        return _Unknown()


class _Unknown(dict):
    def __missing__(self, key):
        return "?"

    def __format__(self, spec):
        return "?"
