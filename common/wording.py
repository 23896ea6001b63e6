"""The words of the reports, shared by every view and by the rule texts: labels.yaml,
ids shown as their words, and sources (where a fact was read) in the report language."""

from __future__ import annotations

import re
from functools import lru_cache

from qcdoctor.package_data import load_yaml


@lru_cache(maxsize=1)
def labels() -> dict:
    return load_yaml("qcdoctor.templates", "labels.yaml")


# word tables of labels.yaml searched by id_words, in this order
_WORD_TABLES = ("suspect", "value", "badcase", "evidence", "user_check", "compared", "action",
                "pitfall")


def id_words(value, lang: str) -> str:
    """An id shown in prose: a checklist item's title, or its words in labels.yaml; else as is."""
    from qcdoctor.catalogues import checklist_items
    text = str(value)
    item = checklist_items().get(text)
    if item:
        return item["title"][lang]
    words = labels()[lang]["words"]
    return next((words[t][text] for t in _WORD_TABLES if text in words[t]), text)


def item_words(item: str, status: str, lang: str) -> str:
    """A checklist item as its status reads: a failed item states the failure, any other
    its check (the title)."""
    from qcdoctor.catalogues import checklist_items
    spec = checklist_items().get(item)
    if spec is None:
        return id_words(item, lang)
    return spec["failed"][lang] if status == "fail" else spec["title"][lang]


def suspect_words(suspect: str, failed: list[str], lang: str) -> str:
    """The likely cause in words: a failed checklist item as its failure."""
    if suspect in failed:
        return item_words(suspect, "fail", lang)
    return id_words(suspect, lang) if suspect else ""


def source_text(source: str, lang: str) -> str:
    """Provenance in the report language: fixed English phrases translated, names kept."""
    if lang != "zh" or not source:
        return source
    for phrase, words in labels()[lang]["sources"].items():
        source = source.replace(phrase, words)
    source = re.sub(r" row (\d+) \(line (\d+)\)", r" 数据第 \1 行（文件第 \2 行）", source)
    return re.sub(r"(\S+) line (\d+)", r"\1 第 \2 行", source)
