"""Which stage each number of a symptom sentence belongs to, read from the sentence's parts.

The sentence is cut into clauses (at "while", "but", "而", ";", and at "and" / "," / "vs"
/ "和" unless they join two stage names or two numbers into a list), a clause into its
head and its "from" and "to" parts ("from 0.449 on qat.bc to 0.391 on quantized.bc",
"quantized.bc 的 mAP 从 qat.bc 的 0.449 掉到 0.391"). A number is paired inside the part
that holds it: with a stage in brackets beside it ("0.449 (qat.bc)"), the stage it is
said of ("0.391 on quantized.bc"), the stage that gives it ("qat.bc gives 0.449",
"qat.bc 的 0.449"), or the one stage of its part. A "to" part without a stage is the
head's stage ("quantized.bc 的 mAP 从 ... 掉到 0.391"), as is a "from" part whose "to"
names another; "from 0.449 to 0.391" and "from qat.bc to quantized.bc" in one sentence go
in order. A difference ("drops by 0.058", "下降了 0.058") is no stage's value.

Every number ends with the stages it may belong to: one (certain), several (a list of
stages with a list of numbers, two readings that disagree, a part with more stages than
numbers), or none (tied to no stage: never offered).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from qcdoctor.engine.intake.symptom_tokens import (
    ARTICLES,
    CLAUSE_ENDS,
    DIFFERENCE_BEFORE,
    DIFFERENCE_NOUNS,
    FROM_WORDS,
    JOINERS,
    OF_STAGE,
    RESPECTIVELY,
    TO_WORDS,
    Token,
)

MAX_READINGS = 6        # more ways to read it than this: the parse is shown, nothing offered
MAX_TRIED = 4096        # pairings tried at most (a long sentence of numbers and stages)


@dataclass(frozen=True)
class NumberReading:
    """One number of the sentence as the grammar read it."""
    text: str                       # as written ("71.2%")
    value: float                    # as stored (0.712)
    stages: tuple[str, ...]         # the stages it may be the result of, likeliest first
    difference: bool = False        # "drops by 0.058": no stage's result


def read_numbers(tokens: list[Token]) -> list[NumberReading]:
    """Every number of the sentence with the stages it may belong to, in sentence order."""
    candidates: dict[int, list[str]] = dict(_bracketed(tokens))
    differences = {i for i, t in enumerate(tokens) if t.kind == "number" and
                   i not in candidates and _difference(tokens, i)}
    clauses = _clauses(tokens)
    _paired_in_order(tokens, clauses, candidates, differences)
    for clause in clauses:
        _clause(tokens, clause, candidates, differences)
    return [NumberReading(t.text, t.value, tuple(candidates.get(i, ())), i in differences)
            for i, t in enumerate(tokens) if t.kind == "number"]


def readings(numbers: list[NumberReading]) -> list[dict[str, float]]:
    """The ways to give each number one of its stages, no stage two numbers; likeliest
    first. Numbers tied to no stage are left out; [] when there are too many ways."""
    tied = [n for n in numbers if n.stages and not n.difference]
    stages = {s for n in tied for s in n.stages}
    if len(tied) > len(stages) or math.prod(len(n.stages) for n in tied) > MAX_TRIED:
        return []                   # no stage for each, or too many ways to try them all
    out = []
    for choice in itertools.product(*(n.stages for n in tied)):
        if len(set(choice)) == len(choice):
            out.append({stage: n.value for stage, n in zip(choice, tied, strict=True)})
            if len(out) > MAX_READINGS:
                return []
    return out


# --- clauses and their parts -------------------------------------------------------------

def _clauses(tokens: list[Token]) -> list[list[int]]:
    """Token indices of each clause. A joiner between two names or two numbers makes a
    list and stays inside its clause."""
    clauses, current = [], []
    for i, t in enumerate(tokens):
        if t.key in CLAUSE_ENDS or (t.key in JOINERS and not _joins_a_list(tokens, i)):
            if current:
                clauses.append(current)
            current = []
            continue
        current.append(i)
    if current:
        clauses.append(current)
    return clauses


def _joins_a_list(tokens: list[Token], i: int) -> bool:
    before, after = _neighbour(tokens, i, -1), _neighbour(tokens, i, 1)
    if before is None or after is None:
        return False
    kinds = {_item_kind(before), _item_kind(after)}
    return len(kinds) == 1 and None not in kinds


def _neighbour(tokens: list[Token], i: int, step: int) -> Token | None:
    """The token beside ``i``, articles skipped ("the board and the hbm")."""
    j = i + step
    while 0 <= j < len(tokens) and tokens[j].key in ARTICLES:
        j += step
    return tokens[j] if 0 <= j < len(tokens) else None


def _item_kind(token: Token) -> str | None:
    if token.is_stage:
        return "stage"
    if token.kind == "number":
        return "number"
    if token.kind == "word" and token.text.isascii() and token.key not in JOINERS:
        return "word"           # "mAP and NDS": two names, one list
    return None


def _parts(tokens: list[Token], clause: list[int]) -> list[tuple[str, list[int]]]:
    """(head | from | to, token indices) in order: the clause cut at its from and to words."""
    parts, role, current = [], "head", []
    for i in clause:
        key = tokens[i].key
        if key in FROM_WORDS or key in TO_WORDS:
            parts.append((role, current))
            role, current = ("from" if key in FROM_WORDS else "to"), []
            continue
        current.append(i)
    parts.append((role, current))
    return parts


# --- pairing -----------------------------------------------------------------------------

def _bracketed(tokens: list[Token]) -> dict[int, list[str]]:
    """"0.449 (qat.bc)" and "qat.bc (0.449)"."""
    pairs = {}
    for i in range(len(tokens) - 3):
        a, opening, b, closing = tokens[i:i + 4]
        if opening.kind != "open" or closing.kind != "close":
            continue
        if a.kind == "number" and b.is_stage:
            pairs[i] = [b.kind]
        elif a.is_stage and b.kind == "number":
            pairs[i + 2] = [a.kind]
    return pairs


def _paired_in_order(tokens, clauses, candidates, differences) -> None:
    """"from 0.449 to 0.391" and "from qat.bc to quantized.bc" in one sentence: in order."""
    spans = [(f, t) for clause in clauses for f, t in _from_to(tokens, clause)]
    numbers = [(f, t) for f, t in spans if _only(tokens, f, "number", candidates, differences)
               and _only(tokens, t, "number", candidates, differences)]
    stages = [(f, t) for f, t in spans if _only(tokens, f, "stage") and _only(tokens, t, "stage")]
    if len(numbers) != 1 or len(stages) != 1:
        return
    for numbered, staged in zip(numbers[0], stages[0], strict=True):
        n = next(i for i in numbered if tokens[i].kind == "number")
        s = next(i for i in staged if tokens[i].is_stage)
        candidates[n] = [tokens[s].kind]


def _from_to(tokens: list[Token], clause: list[int]) -> list[tuple[list[int], list[int]]]:
    parts = _parts(tokens, clause)
    return [(a[1], b[1]) for a, b in zip(parts, parts[1:], strict=False) if (a[0], b[0]) == ("from", "to")]


def _only(tokens, part: list[int], kind: str, candidates=None, differences=()) -> bool:
    """The part names exactly one stage (kind "stage") or holds exactly one free number and
    no stage (kind "number")."""
    stages = {tokens[i].kind for i in part if tokens[i].is_stage}
    if kind == "stage":
        return len(stages) == 1 and not any(tokens[i].kind == "number" for i in part)
    free = [i for i in part if tokens[i].kind == "number" and i not in candidates
            and i not in differences]
    return len(free) == 1 and not stages


def _clause(tokens, clause: list[int], candidates: dict, differences: set) -> None:
    """Pair the numbers of one clause, part by part; then a part with a number and no stage
    takes the head's one stage that no other part names."""
    parts = _parts(tokens, clause)
    for _, part in parts:
        _pair_part(tokens, part, candidates, differences, _says_respectively(tokens, clause))
    head = next((part for role, part in parts if role == "head"), [])
    others = [(role, part) for role, part in parts if role != "head"]
    named_elsewhere = {tokens[i].kind for _, part in others for i in part if tokens[i].is_stage}
    paired_in_head = {s for i in head if i in candidates for s in candidates[i]}
    subject = list(dict.fromkeys(tokens[i].kind for i in head if tokens[i].is_stage
                                 and tokens[i].kind not in named_elsewhere | paired_in_head))
    stageless = [(role, _free(tokens, part, candidates, differences)) for role, part in others
                 if not any(tokens[i].is_stage for i in part)]
    stageless = [(role, free) for role, free in stageless if free]
    if not stageless or not subject:
        return
    if len(subject) > 1:                        # which of the head's stages: not said
        for _, free in stageless:
            for n in free:
                candidates[n] = subject
        return
    # the stage arrives at the "to" value ("quantized.bc ... 从 0.449 掉到 0.391"); its
    # "from" value is the head's only when the "to" part names another stage
    to_parts = [free for role, free in stageless if role == "to"]
    target = to_parts[-1] if to_parts else stageless[0][1]
    if len(target) == 1:
        candidates[target[0]] = subject


def _free(tokens, part: list[int], candidates: dict, differences: set) -> list[int]:
    return [i for i in part if tokens[i].kind == "number" and i not in candidates
            and i not in differences]


def _pair_part(tokens, part: list[int], candidates: dict, differences: set,
               respectively: bool) -> None:
    free = _free(tokens, part, candidates, differences)
    kinds = list(dict.fromkeys(tokens[i].kind for i in part if tokens[i].is_stage))
    if not free or not kinds:
        return
    listed = _listed(tokens, part, free, kinds)
    if listed is not None:
        for n, stage in listed.items():
            candidates[n] = [stage] if respectively else [stage] + [k for k in kinds if k != stage]
        free = [n for n in free if n not in listed]
    for n in free:
        after = _stage_after(tokens, n, part)
        said = ([after] if after else []) + _stages_before(tokens, n, part)
        if said:
            candidates[n] = list(dict.fromkeys(said))
    taken = {s for n in part if n in candidates and len(candidates[n]) == 1
             for s in candidates[n]}
    left = [n for n in free if n not in candidates]
    open_stages = [k for k in kinds if k not in taken]
    if left and open_stages:
        for n in left:
            candidates[n] = open_stages


def _listed(tokens, part: list[int], free: list[int], kinds: list[str]) -> dict | None:
    """"qat.bc and quantized.bc: 0.449 and 0.391": the numbers in the order of the stages
    (certain only with "respectively"), when the part lists as many stages as numbers."""
    if len(kinds) < 2 or len(free) != len(kinds):
        return None
    stage_list = [i for i in part if tokens[i].is_stage]
    if len(stage_list) != len(kinds) or not _joined(tokens, stage_list) or \
            not _joined(tokens, free):
        return None
    return {n: tokens[s].kind for n, s in zip(free, stage_list, strict=True)}


def _joined(tokens, indices: list[int]) -> bool:
    """Consecutive items with only joiners and articles between them."""
    return all(all(tokens[j].key in JOINERS or tokens[j].key in ARTICLES
                   for j in range(a + 1, b)) for a, b in zip(indices, indices[1:], strict=False))


def _says_respectively(tokens, clause: list[int]) -> bool:
    return any(tokens[i].key in RESPECTIVELY for i in clause)


def _stage_after(tokens, n: int, part: list[int]) -> str | None:
    """"0.391 on quantized.bc", "0.30 on the board": the stage the number is said of."""
    rest = [i for i in part if i > n]
    if not rest or tokens[rest[0]].key not in OF_STAGE:
        return None
    for i in rest[1:]:
        if tokens[i].key in ARTICLES:
            continue
        return tokens[i].kind if tokens[i].is_stage else None
    return None


def _stages_before(tokens, n: int, part: list[int]) -> list[str]:
    """"qat.bc gives 0.449", "qat.bc 的 0.449", "x86 hbm F1 0.612": the nearest stage before
    the number, with no other number between; with the stages listed with it ("qat.bc and
    quantized.bc: 0.449" may be either's)."""
    before = [i for i in part if i < n]
    for place in range(len(before) - 1, -1, -1):
        t = tokens[before[place]]
        if t.kind in ("number", "open", "close"):
            return []
        if t.is_stage:
            listed = [t.kind]
            while place >= 2 and tokens[before[place - 1]].key in JOINERS and \
                    tokens[before[place - 2]].is_stage:
                place -= 2
                listed.append(tokens[before[place]].kind)
            return list(dict.fromkeys(reversed(listed)))
    return []


def _difference(tokens: list[Token], n: int) -> bool:
    """A number after "by" ("drops by 0.058") or a few words after a noun for a difference
    in its clause ("the drop is 0.06", "下降了 0.058"); "drop from 0.449" is a value."""
    before = tokens[n - 1] if n else None
    if before is None or before.key in FROM_WORDS or before.key in TO_WORDS:
        return False
    if before.key in DIFFERENCE_BEFORE:
        return True
    for t in reversed(tokens[max(0, n - 3):n]):
        if t.kind in ("punct", "number") or t.is_stage or t.key in CLAUSE_ENDS:
            return False
        if t.key in DIFFERENCE_NOUNS or (t.kind == "cjk" and t.text.endswith(
                tuple(DIFFERENCE_NOUNS))):
            return True
    return False
