"""The intake's questions: which to ask for a report, how to read and validate answers.

The catalogue is data (rules/questions.yaml). A topic is named by a rule (a missing
item of knowledge.md §4, or an ``ask`` follow-up); each of its items writes one key of
case.yaml and is asked only while that key has no value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from qcdoctor.catalogues import question_topics
from qcdoctor.collectors import limits
from qcdoctor.collectors.versions import VERSION_RE
from qcdoctor.engine.intake.written_numbers import written_value
from qcdoctor.fact_types import STAGES
from qcdoctor.text import render
from qcdoctor.vocabulary import FILE_MISSING_IDS, stage_label

STATUS_WORDS = {"normal": "normal", "ok": "normal", "正常": "normal", "abnormal": "abnormal",
                "bad": "abnormal", "异常": "abnormal", "unknown": "unknown", "未知": "unknown"}
YES = {"y", "yes", "true", "是", "1", "能", "可以"}
NO = {"n", "no", "false", "否", "0", "不能", "不可以"}
# "none" where a question offers it (the prompt says "none if none")
NONE_WORDS = {"none", "n", "无", "没有", "都没有", "-", "[]"}


def _check_text(text: str, zh: bool) -> None:
    """An answer case.yaml can hold: text (a byte that is not UTF-8 arrives as a lone
    surrogate), and no longer than a case.yaml value may be."""
    if any("\ud800" <= c <= "\udfff" for c in text):
        raise AnswerError("含有不是 UTF-8 文本的字节；请重新输入" if zh else
                          "it holds bytes that are not UTF-8 text: type it again")
    if len(text) > limits.TEXT_CHARS:
        raise AnswerError(f"{len(text):,} 个字符，超过上限 {limits.TEXT_CHARS:,}；请写短一些，"
                          "长文本作为文件放进案例目录" if zh else
                          f"{len(text):,} characters, more than the {limits.TEXT_CHARS:,} a "
                          "value may hold: shorten it (attach long text as a file in the case "
                          "folder)")


class AnswerError(ValueError):
    """An answer that does not fit; the message says why (the question is asked again)."""


@dataclass
class Question:
    topic: str
    key: str                        # dotted case.yaml path
    type: str
    text: dict
    why: dict
    help: dict = field(default_factory=dict)
    choices: tuple = ()
    stage: str = ""
    minimum: float | None = None
    allow_none: bool = False
    choice_help: dict = field(default_factory=dict)     # choice -> {zh, en}
    folder: str = ""                # the QuantAnalysis folder a comparison question is about

    @property
    def id(self) -> str:
        return self.key

    @property
    def named_by_number(self) -> bool:
        """Choices named by numbers (consistency levels 0-2) are entered by their names,
        typed or pressed: a digit never also means a place in the list."""
        return any(str(c).isdigit() for c in self.choices)

    def _fill(self, template: str, lang: str) -> str:
        return render(template, {"label": stage_label(self.stage, lang) if self.stage else "",
                                 "folder": self.folder}, lang)

    def prompt(self, lang: str) -> str:
        return self._fill(self.text[lang], lang)

    def help_text(self, lang: str) -> str:
        """What to answer, with an example (the ``?`` key); '' when the catalogue gives
        none: the why line is shown under the question already, never again."""
        return self._fill(self.help.get(lang) or "", lang)

    def choice_note(self, choice, lang: str) -> str:
        """What one choice means, in the user's language ('' when it speaks for itself)."""
        note = self.choice_help.get(choice) or self.choice_help.get(str(choice)) or {}
        return note.get(lang, "")

    def parse(self, raw: str, lang: str = "en"):
        """The value to store for a typed answer; raises AnswerError with the reason."""
        text = raw.strip()
        zh = lang == "zh"
        _check_text(text, zh)
        if self.type == "text":
            if not text:
                raise AnswerError("请输入内容" if zh else "an answer is needed")
            return text
        if self.type == "metric":
            return _metric_name(text, zh)
        if self.type in ("choice", "comparison"):
            if self.allow_none and text.lower() in NONE_WORDS:
                return "none"
            return self._choice(text, zh)
        if self.type == "multi_choice":
            if self.allow_none and text.lower() in NONE_WORDS:
                return []
            parts = [p for p in re.split(r"[,\s，、]+", text) if p]
            if not parts:
                raise AnswerError("至少选一项" if zh else "choose at least one")
            return list(dict.fromkeys(self._choice(p, zh) for p in parts))
        if self.type == "yes_no":
            low = text.lower()
            if low in YES:
                return True
            if low in NO:
                return False
            raise AnswerError("请回答 yes 或 no" if zh else "answer yes or no")
        if self.type in ("number", "integer"):
            return self._number(text, zh)
        if self.type == "numbers":
            parts = [p for p in re.split(r"[,\s，]+", text.strip("[]()")) if p]
            try:
                values = [float(p) for p in parts]
            except ValueError:
                raise AnswerError("请输入用逗号分隔的数字" if zh else
                                  "give numbers separated by commas") from None
            if len(values) not in (1, 3):
                raise AnswerError("需要 1 个或 3 个数" if zh else "give 1 or 3 numbers")
            return values
        if self.type == "version":
            if not VERSION_RE.match(text):
                raise AnswerError("版本形如 4.4.2" if zh else "a version looks like 4.4.2")
            return text
        if self.type == "path":
            if not text:
                raise AnswerError("请输入路径" if zh else "a path is needed")
            return text
        if self.type == "stage_result":
            low = text.lower()
            if low in STATUS_WORDS:
                return {"status": STATUS_WORDS[low]}
            return {"value": self._number(text, zh, "stage")}
        raise AnswerError(f"unknown question type {self.type}")

    def _choice(self, text: str, zh: bool):
        options = [str(c) for c in self.choices]
        if not self.named_by_number and text.isascii() and text.isdigit() and \
                1 <= int(text) <= len(options):
            return self.choices[int(text) - 1]
        for option, value in zip(options, self.choices, strict=True):
            if text.lower() == option.lower() or (self.named_by_number and text.isascii() and
                                                  text.isdigit() and int(text) == value):
                return value
        if self.named_by_number:            # say so: a digit here is a name, never a place
            names = ", ".join(options)
            none = ("，或 none" if zh else ", or none") if self.allow_none else ""
            raise AnswerError(f"{text} 不是可选项：请按名称输入 {names}{none}" if zh else
                              f"{text} is not a choice: type one of {names} by its name{none}")
        raise AnswerError(("可选：" if zh else "choose one of: ") + ", ".join(options))

    def _number(self, text: str, zh: bool, what: str = ""):
        try:
            # a stage's result may be a percentage, stored as its fraction as the symptom's are
            value = int(text) if self.type == "integer" else \
                written_value(text) if what == "stage" else float(text)
        except ValueError:
            if what == "stage":
                raise AnswerError("请输入数值，或 normal / abnormal / unknown" if zh else
                                  "give a number, or normal / abnormal / unknown") from None
            raise AnswerError("请输入数字" if zh else "give a number") from None
        if value != value or value in (float("inf"), float("-inf")):
            raise AnswerError("需要有限的数" if zh else "give a finite number")
        if self.minimum is not None and value < self.minimum:
            raise AnswerError((f"不能小于 {self.minimum:g}" if zh else f"at least {self.minimum:g}"))
        return value


def _metric_name(text: str, zh: bool) -> str:
    """A metric's name has a letter in it: a number typed here is a value, never a name."""
    if not text:
        raise AnswerError("请输入指标名" if zh else "a metric name is needed")
    if not re.search(r"[^\W\d_]", text):
        raise AnswerError(f"{text} 是数值，不是指标名；请输入指标名，如 mAP" if zh else
                          f"{text} is a number, not a metric name; give the name, such as mAP")
    return text


def _question(topic: str, spec: dict, item: dict, argument: str = "") -> Question:
    """One catalogue item; ``argument`` fills the stage or folder of a templated topic."""
    if item["type"] == "stage_result":
        # every stage result is asked alike: the words live with the stage_result topic
        item = {**question_topics()["stage_result"]["items"][0], **item}
    stage = str(item.get("stage", "")).replace("{stage}", argument)
    return Question(topic=topic, key=item["key"].replace("{stage}", argument).replace(
                        "{folder}", argument),
                    type=item["type"], text=item.get("text", {}), why=spec["why"],
                    help=item.get("help", {}), choices=tuple(item.get("choices", ())),
                    stage=stage, minimum=item.get("minimum"),
                    allow_none=item.get("allow_none", False),
                    choice_help=item.get("choice_help", {}),
                    folder=argument if topic == "qa_comparison" else "")


def questions_for(topic_ref: str) -> list[Question]:
    """The questions of a topic reference such as 'platform', 'stage_result:hbm_x86' or
    'qa_comparison:qa_out'."""
    topic, _, argument = topic_ref.partition(":")
    spec = question_topics().get(topic)
    if spec is None or (topic == "stage_result" and argument not in STAGES) or \
            (topic == "qa_comparison" and not argument):
        return []
    return [_question(topic, spec, item, argument) for item in spec["items"]]


def question_for_key(key: str) -> Question | None:
    """The catalogue question that writes ``key`` (e.g. 'platform.chip', 'stages.calib',
    'analyses_run.qa_out'), or None: used to go back to any earlier question and to
    check a file of scripted answers."""
    head, _, rest = key.partition(".")
    if head == "stages" and rest in STAGES:
        topic = "stage_result:" + rest
    elif head == "analyses_run" and rest:
        topic = "qa_comparison:" + rest
    else:
        topic = next((name for name, spec in question_topics().items()
                      if "{" not in str(spec["items"][0]["key"])
                      and any(item["key"] == key for item in spec["items"])), "")
    return next((q for q in questions_for(topic) if q.key == key), None) if topic else None


def all_question_keys() -> list[str]:
    """Every key a question can write, templated ones spelt with their placeholder."""
    keys = [item["key"] for spec in question_topics().values() for item in spec["items"]]
    return list(dict.fromkeys(keys + [f"stages.{stage}" for stage in STAGES]))


def pending_topics(report: dict) -> list[str]:
    """Topics the rules want answered: missing items first (in catalogue order), then asks."""
    order = list(question_topics())
    missing = sorted({m["id"] for m in report["missing"]} - set(FILE_MISSING_IDS),
                     key=order.index)
    asks = [a for a in report.get("ask", []) if a not in missing]
    return sorted(asks + missing, key=lambda t: order.index(t.split(":")[0]))
