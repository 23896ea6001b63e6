"""The question an ambiguous symptom asks: which of its readings is right, with the parse
shown, so that a value is never taken from the sentence without the user.

The choices are the readings the grammar allows (engine/intake/symptom_grammar.py), each
in words ("qat.bc 0.449, quantized.bc 0.391"), and ``none``: neither, each stage is
asked on its own. The chosen reading's values are written to their stages. It is asked
once a session for a symptom (answered, declined or skipped), before the stage results,
while none of the stages it would fill has a result; a symptom with no reading to choose
(two metrics, a stage given two numbers) has its parse shown once instead.
"""

from __future__ import annotations

from qcdoctor.engine.intake.case_writer import CaseDocument
from qcdoctor.engine.intake.questions import Question
from qcdoctor.engine.intake.stage_metric import stage_entry, stage_given
from qcdoctor.engine.intake.symptom_hints import SymptomReading, read_symptom
from qcdoctor.engine.intake.written_numbers import is_percentage
from qcdoctor.fact_types import STAGES
from qcdoctor.vocabulary import stage_label

READING_KEY = "symptom_reading"         # the question's key: no case.yaml key of its own
NONE = "none"
LANGS = ("zh", "en")


def _words(lang: str) -> dict:
    from qcdoctor.wording import labels
    return labels()[lang]["intake"]


def parse_words(reading: SymptomReading, lang: str) -> str:
    """The parse in words: each number with the stages it may belong to, the metric, the
    chip ("0.449 → qat.bc or quantized.bc; 0.391 → ...; metric mAP")."""
    w = _words(lang)
    parts = []
    for number in reading.numbers:
        shown = f"{number.text} = {number.value}" if is_percentage(number.text) else number.text
        if number.difference:
            parts.append(w["parse_difference"].format(number=shown))
        elif not number.stages:
            parts.append(w["parse_untied"].format(number=shown))
        else:
            stages = w["parse_or"].join(stage_label(s, lang) for s in number.stages)
            parts.append(w["parse_number"].format(number=shown, stages=stages))
    if len(reading.metrics) > 1:
        parts.append(w["parse_metrics"].format(metrics=", ".join(reading.metrics)))
    elif reading.metric:
        parts.append(w["parse_metric"].format(metric=reading.metric))
    if reading.chip:
        parts.append(w["parse_chip"].format(chip=reading.chip))
    return w["parse_sep"].join(parts)


def reading_words(values: dict[str, float], lang: str) -> str:
    """One reading as a menu entry, in chain order: "qat.bc 0.449, quantized.bc 0.391"."""
    ordered = sorted(values.items(), key=lambda item: STAGES.index(item[0]))
    return _words(lang)["reading_sep"].join(f"{stage_label(s, lang)} {v}" for s, v in ordered)


def reading_question(reading: SymptomReading) -> Question | None:
    """The question for ``reading``'s choices; None when the sentence leaves nothing to ask."""
    if not reading.ambiguous or not reading.readings:
        return None
    names = [f"reading_{i}" for i in range(1, len(reading.readings) + 1)]
    notes = {name: {lang: reading_words(values, lang) for lang in LANGS}
             for name, values in zip(names, reading.readings, strict=True)}
    notes[NONE] = {lang: _words(lang)["reading_none"] for lang in LANGS}
    return Question(
        topic=READING_KEY, key=READING_KEY, type="choice", allow_none=True,
        text={lang: _escaped(_words(lang)["reading_question"]) for lang in LANGS},
        why={lang: _escaped(_words(lang)["reading_why"].format(
            parse=parse_words(reading, lang))) for lang in LANGS},
        help={lang: _escaped(_words(lang)["reading_help"]) for lang in LANGS},
        choices=(*names, NONE), choice_help=notes)


def chosen_values(reading: SymptomReading, choice: str) -> dict[str, float] | None:
    """The values of the reading ``choice`` names; None for ``none``."""
    if choice == NONE or not choice.startswith("reading_"):
        return None
    return reading.readings[int(choice.removeprefix("reading_")) - 1]


def choice_of(reading: SymptomReading, stages: dict) -> str | None:
    """The choice that matches the stage values case.yaml holds (an answer given before,
    offered again after going back), else None: nothing is offered unseen."""
    for i, values in enumerate(reading.readings, 1):
        if all(isinstance(stages.get(s), dict) and stages[s].get("value") == v
               for s, v in values.items()):
            return f"reading_{i}"
    return None


def _escaped(text: str) -> str:
    """Filled text goes through the question's template once more: braces stay braces."""
    return text.replace("{", "{{").replace("}", "}}")


class ReadingAsked:
    """This session's questions about the symptom's reading (the symptom as case.yaml
    holds it: going back and changing it asks about the new one)."""

    def __init__(self, doc: CaseDocument):
        self.doc = doc
        self.done: set[str] = set()         # symptoms whose reading was asked
        self.told: set[str] = set()         # symptoms whose parse was shown instead

    def symptom(self) -> str:
        return str(self.doc.get("symptom") or "")

    def reading(self) -> SymptomReading:
        return read_symptom(self.symptom())

    def question(self) -> Question | None:
        """The question, whether or not it was asked (going back to it)."""
        return reading_question(self.reading())

    def to_ask(self) -> Question | None:
        """The question to ask before a stage result, or None."""
        reading = self.reading()
        question = reading_question(reading)
        if question is None or self.symptom() in self.done:
            return None
        stages = {stage for values in reading.readings for stage in values}
        return None if any(stage_given(self.doc, stage) for stage in stages) else question

    def parse_to_tell(self, lang: str) -> str | None:
        """The line that shows an ambiguous symptom's parse where no reading can be asked
        about; None once shown, or where there is nothing to show."""
        reading = self.reading()
        if not reading.ambiguous or reading.readings or self.symptom() in self.told:
            return None
        self.told.add(self.symptom())
        return _words(lang)["parse_not_offered"].format(parse=parse_words(reading, lang))

    def settle(self) -> None:
        """Asked: answered, declined or skipped."""
        self.done.add(self.symptom())

    def settled(self) -> bool:
        return self.symptom() in self.done

    def store(self, choice: str, metric: str | None) -> None:
        """The reading chosen: each of its stages written with its value (and the metric);
        none writes nothing, and the stages are asked one by one."""
        self.settle()
        for stage, number in (chosen_values(self.reading(), choice) or {}).items():
            stage_entry(self.doc, stage, {"value": number}, metric)

    def default(self) -> str | None:
        return choice_of(self.reading(), self.doc.get("stages") or {})
