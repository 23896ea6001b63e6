"""What a symptom line already states, offered as defaults to confirm: the user never types
a number twice, and is never offered a number the sentence does not tie to its stage.

The sentence is read by its parts (engine/intake/symptom_tokens.py) and its grammar
(engine/intake/symptom_grammar.py): each number with the stage its clause names. When
every number tied to a stage is tied to one, those values are offered; when one may
belong to more than one stage, a stage is given two numbers, a number is tied to no stage
while a stage is left without one, or two metrics are named, the reading is ambiguous:
no value is offered, and the readings it allows are kept for the intake to ask about,
with the parse shown. The metric is a known metric name (a phrase of them, "top1 acc",
is one name), else the noun before "of" or before a stage's number; never a verb, a
preposition or a number. A chip named in the sentence (J6E) is kept for the chip question.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from qcdoctor.collectors.metric_direction import (
    HIGHER_TOKENS,
    LOWER_JOINED,
    LOWER_TOKENS,
    PREFIXED,
    metric_key,
    metric_tokens,
)
from qcdoctor.engine.intake.symptom_grammar import NumberReading, read_numbers, readings
from qcdoctor.engine.intake.symptom_tokens import (
    ARTICLES,
    CLAUSE_ENDS,
    DIFFERENCE_BEFORE,
    JOINERS,
    OF_STAGE,
    Token,
    tokens,
)

# never a metric: verbs, prepositions and the small words around numbers
_NOT_METRIC = CLAUSE_ENDS | JOINERS | OF_STAGE | ARTICLES | DIFFERENCE_BEFORE | {
    "is", "are", "was", "were", "be", "been", "gives", "give", "gave", "get", "gets", "got",
    "reaches", "reach", "reached", "drops", "drop", "dropped", "falls", "fall", "fell",
    "goes", "go", "went", "becomes", "became", "shows", "show", "showed", "has", "have",
    "had", "scores", "scored", "yields", "yield", "only", "just", "about", "around", "to",
    "from", "into", "down", "up", "then", "now", "still", "also", "after", "before", "which",
    "that", "it", "this", "model", "result", "results", "value", "lower", "higher", "worse",
    "better", "bad", "good", "much", "very", "same", "decreases", "decreased", "increase",
    "increases", "increased", "less", "more", "over", "under", "between", "respectively"}
_KNOWN_METRICS = HIGHER_TOKENS | LOWER_TOKENS | PREFIXED | LOWER_JOINED


@dataclass
class SymptomReading:
    """What a symptom line says: values only when every pairing is certain."""
    values: dict[str, float] = field(default_factory=dict)
    metric: str | None = None
    named: tuple[str, ...] = ()         # the stages the sentence names, in order
    ambiguous: bool = False             # numbers are there, but which stage has which is not
    chip: str | None = None             # the one chip the sentence names
    # an ambiguous sentence: each way to read it ({stage: value}), likeliest first
    readings: tuple[dict[str, float], ...] = ()
    numbers: tuple[NumberReading, ...] = ()     # the parse: each number with its stages
    metrics: tuple[str, ...] = ()       # the known metric names it uses (two: ambiguous)


def read_symptom(symptom: str) -> SymptomReading:
    parts = tokens(symptom or "")
    named = tuple(dict.fromkeys(t.kind for t in parts if t.is_stage))
    numbers = read_numbers(parts)
    results = [n for n in numbers if not n.difference]
    ways = readings(numbers)
    metrics = _known_metrics(symptom or "", parts)
    tied = {s for n in results if n.stages for s in n.stages}
    ambiguous = any(len(n.stages) > 1 for n in results) or len(metrics) > 1 or \
        len(ways) != 1 and any(n.stages for n in results) or \
        any(not n.stages for n in results) and bool(set(named) - tied)
    return SymptomReading(values={} if ambiguous or not ways else ways[0],
                          metric=_metric(symptom or "", parts, metrics, numbers),
                          named=named, ambiguous=ambiguous, chip=_chip(parts),
                          readings=tuple(ways) if ambiguous and len(metrics) <= 1 else (),
                          numbers=tuple(numbers), metrics=tuple(metrics.values()))


def stage_hints(symptom: str) -> tuple[dict[str, float], str | None]:
    """({stage: value}, metric) the symptom states; no values where it is ambiguous."""
    reading = read_symptom(symptom)
    return reading.values, reading.metric


def _chip(parts: list[Token]) -> str | None:
    chips = list(dict.fromkeys(t.text for t in parts if t.kind == "chip"))
    return chips[0] if len(chips) == 1 else None


# --- the metric --------------------------------------------------------------------------

def _metric(text: str, parts: list[Token], known: dict[str, str],
            numbers: list[NumberReading]) -> str | None:
    """A known metric name when the sentence has one (two different ones: none); else the
    noun before "of" + stage or before a stage's number, when only one such word is."""
    if known:
        return next(iter(known.values())) if len(known) == 1 else None
    tied = {n.text for n in numbers if n.stages}
    found = []
    for i, t in enumerate(parts):
        if not _metric_word(t):
            continue
        after = parts[i + 1] if i + 1 < len(parts) else None
        before_of = after is not None and after.key == "of" and i + 2 < len(parts) and \
            parts[i + 2].is_stage
        if before_of or (after is not None and after.kind == "number" and after.text in tied):
            found.append(t.text)
    return found[0] if len({metric_key(f) for f in found}) == 1 else None


def _known_metrics(text: str, parts: list[Token]) -> dict[str, str]:
    """{metric key: the first spelling} of the known metric names the sentence uses; names
    written side by side are one name ("top1 acc", "Top-1 accuracy")."""
    runs: list[list[Token]] = []
    previous = None
    for t in parts:
        if t.kind == "word" and t.text.isascii() and _known_metric(t.text):
            if previous is not None and runs and runs[-1][-1] is previous and \
                    not text[previous.end:t.start].strip():
                runs[-1].append(t)
            else:
                runs.append([t])
        previous = t
    known: dict[str, str] = {}
    for run in runs:
        name = text[run[0].start:run[-1].end]
        known.setdefault(metric_key(name), name)
    return known


def _known_metric(word: str) -> bool:
    tokens_ = metric_tokens(word.partition("@")[0])
    joined = "".join(tokens_)
    return joined in _KNOWN_METRICS or (len(tokens_) > 1 and any(
        t in HIGHER_TOKENS or t in LOWER_TOKENS for t in tokens_))


def _metric_word(token: Token) -> bool:
    return token.kind == "word" and token.text.isascii() and \
        token.key not in _NOT_METRIC and any(c.isalpha() for c in token.text)
