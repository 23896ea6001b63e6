"""What a symptom line already states, offered as defaults to confirm: the user never types
a number twice, and is never offered a number the sentence does not tie to its stage.

Each number is paired with a stage by what the sentence says: a stage name in parentheses
beside it ("0.449 (qat.bc)"), "from X to Y" said of both the numbers and the stages, a
number said of a stage ("0.391 on quantized.bc") and a stage said to give a number
("qat.bc gives 0.449", "quantized.bc mAP 0.391", "qat.bc 是 0.449"). Two readings that
disagree, stages listed together before their numbers, or a number and a stage left
without a partner make the reading ambiguous: then no value is offered at all. The metric
is a known metric name, else the noun before "of" or before a number; never a verb, a
preposition or a number.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from qcdoctor.collectors.metric_direction import (
    HIGHER_TOKENS,
    LOWER_JOINED,
    LOWER_TOKENS,
    PREFIXED,
    metric_key,
    metric_tokens,
)

# how users name the stages in a symptom line; longest names first so that
# "qat.export.pt" is not read as "qat"
_STAGE_WORDS = (("qat_export", r"qat\.export(?:\.pt)?|qat_export"),
                ("quantized_bc", r"quantized(?:\.bc|_bc)"), ("qat_bc", r"qat(?:\.bc|_bc)"),
                ("qat", r"qat(?:\.pt)?"), ("calib", r"calib(?:\.pt)?"),
                ("float", r"float(?:\.pt)?"), ("hbm_x86", r"hbm_x86|x86|hbm"), ("board", r"board"))
# Chinese names stand inside a run of characters: no word boundary around them
_CJK_STAGE_WORDS = {"hbm_x86": "仿真", "board": "板端|上板"}
_CJK_STAGES = "|".join(_CJK_STAGE_WORDS.values())
_TOKEN = re.compile(
    "|".join(f"(?P<{stage}>(?<![A-Za-z0-9_.])(?:{words})(?![A-Za-z0-9_])"
             + (f"|{_CJK_STAGE_WORDS[stage]})" if stage in _CJK_STAGE_WORDS else ")")
             for stage, words in _STAGE_WORDS)
    + r"|(?P<number>(?<![A-Za-z0-9_.@])\d+(?:\.\d+)?%?(?![A-Za-z0-9_%]|\.\d))"
    + r"|(?P<word>[A-Za-z][A-Za-z0-9_\-]*(?:@\d*\.?\d+)?)"
    + rf"|(?P<cjk>(?:(?!{_CJK_STAGES})[\u4e00-\u9fff])+)"
    + r"|(?P<open>[(（\[])|(?P<close>[)）\]])|(?P<sep>[,;，；。!?！？]|\s-\s)", re.I)
_STAGES = tuple(stage for stage, _ in _STAGE_WORDS)

# words that end a clause: a number after one is not said of a stage before it
_CLAUSE_WORDS = {"while", "whereas", "but", "and", "vs", "versus", "compared", "against",
                 "than", "而", "但", "但是", "和", "与", "对比", "相比"}
# words that join two stage names into a list ("qat.bc and quantized.bc: 0.449 and 0.391");
# a colon is no clause end: it ties a stage to its number ("qat.bc: 0.449")
_LIST_WORDS = {"and", "or", "和", "与", "及", ",", "，", "、", "/"}
# "0.391 on quantized.bc": a number said of the stage after it
_OF_STAGE = {"on", "for", "of", "at", "in", "with", "from", "using"}
_ARTICLES = {"the", "a", "an", "its", "our", "my"}
# a number after "by" is a difference, not a stage's result ("drops by 0.058"), and so is
# one a few words after a noun for it ("the drop is 0.06", "差距是 0.06")
_DIFFERENCE = {"by"}
_DIFFERENCE_NOUNS = {"drop", "gap", "difference", "diff", "delta", "差距", "差值", "下降了",
                     "掉了", "差了", "降了"}
# never a metric: verbs, prepositions and the small words around numbers
_NOT_METRIC = _CLAUSE_WORDS | _OF_STAGE | _ARTICLES | _DIFFERENCE | {
    "is", "are", "was", "were", "be", "been", "gives", "give", "gave", "get", "gets", "got",
    "reaches", "reach", "reached", "drops", "drop", "dropped", "falls", "fall", "fell",
    "goes", "go", "went", "becomes", "became", "shows", "show", "showed", "has", "have",
    "had", "scores", "scored", "yields", "yield", "only", "just", "about", "around", "to",
    "into", "down", "up", "then", "now", "still", "also", "after", "before", "which", "that",
    "it", "this", "model", "result", "results", "value", "lower", "higher", "worse", "better",
    "bad", "good", "much", "very", "same", "decreases", "decreased", "increase",
    "increases", "increased", "less", "more", "over", "under", "between", "respectively"}
_KNOWN_METRICS = HIGHER_TOKENS | LOWER_TOKENS | PREFIXED | LOWER_JOINED


@dataclass(frozen=True)
class Token:
    kind: str                   # a stage id, number, word, cjk, open, close, sep
    text: str
    value: float = 0.0


@dataclass
class SymptomReading:
    """What a symptom line says: values only when every pairing is certain."""
    values: dict[str, float] = field(default_factory=dict)
    metric: str | None = None
    named: tuple[str, ...] = ()         # the stages the sentence names, in order
    ambiguous: bool = False             # numbers are there, but which stage has which is not


def read_symptom(symptom: str) -> SymptomReading:
    tokens = _tokens(symptom or "")
    named = tuple(dict.fromkeys(t.kind for t in tokens if t.kind in _STAGES))
    pairs, ambiguous = _pairs(tokens)
    values = {tokens[s].kind: tokens[n].value for n, s in pairs.items()}
    if len(values) != len(pairs) or len(_known_metrics(tokens)) > 1:
        ambiguous = True                        # one stage given two numbers, or two metrics
    return SymptomReading(values={} if ambiguous else values, metric=_metric(tokens, pairs),
                          named=named, ambiguous=ambiguous)


def stage_hints(symptom: str) -> tuple[dict[str, float], str | None]:
    """({stage: value}, metric) the symptom states; no values where it is ambiguous."""
    reading = read_symptom(symptom)
    return reading.values, reading.metric


# --- tokens ------------------------------------------------------------------------------

def _tokens(text: str) -> list[Token]:
    out = []
    for found in _TOKEN.finditer(text):
        kind, raw = found.lastgroup, found.group()
        if kind == "number":
            value = float(raw.rstrip("%")) / (100 if raw.endswith("%") else 1)
            # hundreds of digits overflow to inf, which no stage question takes: no value
            out.append(Token(kind, raw, value) if math.isfinite(value) else Token("word", raw))
        elif kind == "word" and raw.lower() in _CLAUSE_WORDS or kind == "cjk" and raw in _CLAUSE_WORDS:
            out.append(Token("sep", raw.lower()))
        else:
            out.append(Token(kind, raw))
    return out


def _is_stage(token: Token) -> bool:
    return token.kind in _STAGES


def _lower(token: Token) -> str:
    return token.text.lower()


# --- pairing -----------------------------------------------------------------------------

def _pairs(tokens: list[Token]) -> tuple[dict[int, int], bool]:
    """{number index: stage index} and whether the reading is ambiguous."""
    if _listed_stages(tokens):
        return {}, True
    pairs = _parenthesised(tokens)
    pairs.update(_from_to(tokens, pairs))
    free = [i for i, t in enumerate(tokens) if t.kind == "number" and i not in pairs
            and not _difference(tokens, i)]
    taken = set(pairs.values())
    candidates: dict[int, set[int]] = {}
    for n in free:
        stage = _stage_after(tokens, n)
        if stage is not None and stage not in taken:
            candidates.setdefault(n, set()).add(stage)
    for s, t in enumerate(tokens):
        if _is_stage(t) and s not in taken:
            n = _number_after(tokens, s)
            if n is not None and n in free:
                candidates.setdefault(n, set()).add(s)
    ambiguous = False
    for n, stages in candidates.items():
        kinds = {tokens[s].kind for s in stages}
        if len(kinds) > 1:
            ambiguous = True                    # two readings tie it to two stages
        pairs[n] = min(stages)
    unpaired_numbers = [n for n in free if n not in pairs]
    stages_paired = {tokens[s].kind for s in pairs.values()}
    unpaired_stages = [t for t in tokens if _is_stage(t) and t.kind not in stages_paired]
    if unpaired_numbers and unpaired_stages:
        ambiguous = True                        # a number the sentence ties to no stage
    return pairs, ambiguous


def _listed_stages(tokens: list[Token]) -> bool:
    """Two different stages joined by "and" or a comma, with numbers after the list in its
    clause: which number is whose is then a guess ("qat.bc and quantized.bc: 0.449 and
    0.391"); "hbm and board are bad, qat.bc gives 0.449" is no list of numbers."""
    for i, t in enumerate(tokens[:-2]):
        if _is_stage(t) and _lower(tokens[i + 1]) in _LIST_WORDS and \
                _is_stage(tokens[i + 2]) and tokens[i + 2].kind != t.kind and \
                _number_after(tokens, i + 2) is not None:
            return True
    return False


def _parenthesised(tokens: list[Token]) -> dict[int, int]:
    """"0.449 (qat.bc)" and "qat.bc (0.449)"."""
    pairs = {}
    for i in range(len(tokens) - 3):
        a, opening, b, closing = tokens[i:i + 4]
        if opening.kind != "open" or closing.kind != "close":
            continue
        if a.kind == "number" and _is_stage(b):
            pairs[i] = i + 2
        elif _is_stage(a) and b.kind == "number":
            pairs[i + 2] = i
    return pairs


def _from_to(tokens: list[Token], pairs: dict[int, int]) -> dict[int, int]:
    """"from 0.449 to 0.391" and "from qat.bc to quantized.bc" in one sentence: in order."""
    numbers = _from_to_spans(tokens, lambda t: t.kind == "number")
    stages = _from_to_spans(tokens, _is_stage)
    if len(numbers) != 1 or len(stages) != 1 or any(n in pairs for n in numbers[0]):
        return {}
    return dict(zip(numbers[0], stages[0], strict=True))


def _from_to_spans(tokens: list[Token], wanted) -> list[tuple[int, int]]:
    spans = []
    for i in range(len(tokens) - 3):
        if _lower(tokens[i]) == "from" and wanted(tokens[i + 1]) and \
                _lower(tokens[i + 2]) == "to" and wanted(tokens[i + 3]):
            spans.append((i + 1, i + 3))
    return spans


def _difference(tokens: list[Token], n: int) -> bool:
    """A number after "by" ("drops by 0.058") or a few words after a noun for a difference
    in its clause ("the drop is 0.06", "下降了 0.058"); "drop from 0.449" is a value."""
    before = tokens[n - 1] if n else None
    if before is None or _lower(before) in ("from", "to"):
        return False
    if _lower(before) in _DIFFERENCE:
        return True
    for t in reversed(tokens[max(0, n - 3):n]):
        if t.kind == "sep" or _is_stage(t) or t.kind == "number":
            return False
        if _lower(t) in _DIFFERENCE_NOUNS or (t.kind == "cjk" and any(
                t.text.endswith(noun) for noun in _DIFFERENCE_NOUNS)):
            return True
    return False


def _stage_after(tokens: list[Token], n: int) -> int | None:
    """"0.391 on quantized.bc", "0.30 on the board": the stage the number is said of."""
    i = n + 1
    if i >= len(tokens) or _lower(tokens[i]) not in _OF_STAGE:
        return None
    i += 1
    while i < len(tokens) and _lower(tokens[i]) in _ARTICLES:
        i += 1
    return i if i < len(tokens) and _is_stage(tokens[i]) else None


def _number_after(tokens: list[Token], s: int) -> int | None:
    """The first number after stage ``s`` in its clause, with only words (a metric, a verb)
    or the same stage's other name between: "qat.bc gives 0.449", "x86 hbm F1 0.612"."""
    for i in range(s + 1, len(tokens)):
        t = tokens[i]
        if t.kind == "number":
            return i
        if t.kind in ("sep", "open", "close") or (_is_stage(t) and t.kind != tokens[s].kind):
            return None
    return None


# --- the metric --------------------------------------------------------------------------

def _metric(tokens: list[Token], pairs: dict[int, int]) -> str | None:
    """A known metric name when the sentence has one (two different ones: none); else the
    noun before "of" + stage or before a stage's number, when only one such word is."""
    known = _known_metrics(tokens)
    if known:
        return next(iter(known.values())) if len(known) == 1 else None
    found = []
    for i, t in enumerate(tokens):
        if not _metric_word(t):
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        before_of = after is not None and _lower(after) == "of" and i + 2 < len(tokens) and \
            _is_stage(tokens[i + 2])
        if before_of or (after is not None and i + 1 in pairs):
            found.append(t.text)
    return found[0] if len({metric_key(f) for f in found}) == 1 else None


def _known_metrics(tokens: list[Token]) -> dict[str, str]:
    """{metric key: the first spelling} of the known metric names the sentence uses."""
    known: dict[str, str] = {}
    for t in tokens:
        if t.kind == "word" and _known_metric(t.text):
            known.setdefault(metric_key(t.text), t.text)
    return known


def _known_metric(word: str) -> bool:
    tokens = metric_tokens(word.partition("@")[0])
    joined = "".join(tokens)
    return joined in _KNOWN_METRICS or (len(tokens) > 1 and any(
        t in HIGHER_TOKENS or t in LOWER_TOKENS for t in tokens))


def _metric_word(token: Token) -> bool:
    return token.kind == "word" and token.text.lower() not in _NOT_METRIC and \
        any(c.isalpha() for c in token.text)
