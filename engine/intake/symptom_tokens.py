"""The parts of a symptom sentence: stage names, chips, numbers with their unit, words,
Chinese function words, brackets and punctuation (engine/intake/symptom_grammar.py reads
the sentence from them).

Chinese has no spaces, so the function words the grammar needs (从 ... 掉到, 而, 和,
下降了, ...) are cut out of a run of characters; the longest is taken first, so that 掉到
("falls to") is one word and not 掉 + 到.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from qcdoctor.engine.intake.written_numbers import PERCENT_SIGNS, written_value
from qcdoctor.fact_types import CHIPS

# how users name the stages; longest names first so that "qat.export.pt" is not "qat"
STAGE_WORDS = (("qat_export", r"qat\.export(?:\.pt)?|qat_export"),
               ("quantized_bc", r"quantized(?:\.bc|_bc)"), ("qat_bc", r"qat(?:\.bc|_bc)"),
               ("qat", r"qat(?:\.pt)?"), ("calib", r"calib(?:\.pt)?"),
               ("float", r"float(?:\.pt)?"), ("hbm_x86", r"hbm_x86|x86|hbm"),
               ("board", r"board"))
STAGES = tuple(stage for stage, _ in STAGE_WORDS)
# Chinese names stand inside a run of characters: no word boundary around them
_CJK_STAGE_WORDS = {"hbm_x86": "仿真", "board": "板端|上板"}

# the grammar's words, by the part they play (English lower-cased, Chinese as written)
FROM_WORDS = frozenset({"from", "从", "由"})
TO_WORDS = frozenset({"to", "->", "→", "=>", "到", "至", "掉到", "降到", "降至", "跌到", "跌至",
                      "下降到", "下降至", "降低到", "降低至", "变成", "变为", "变到", "减少到",
                      "升到", "上升到", "提升到", "涨到", "只剩"})
# end a clause whatever stands around them
CLAUSE_ENDS = frozenset({"while", "whereas", "but", "however", "compared", "against", "than",
                         "而", "但", "但是", "然而", "相比", "相比之下", "相较于", "相对于",
                         ";", "；", "。", "!", "?", "！", "？", " - "})
# join two names or two numbers into a list ("qat.bc and quantized.bc", "0.449 vs 0.391");
# between anything else they end a clause ("0.391 on quantized.bc and 0.449 on qat.bc")
JOINERS = frozenset({"and", "or", "vs", "versus", ",", "，", "、", "/", "和", "与", "及",
                     "跟", "对比", "比", "对"})
RESPECTIVELY = frozenset({"respectively", "分别", "各自"})
# a number said of the stage after it: "0.391 on quantized.bc"
OF_STAGE = frozenset({"on", "for", "of", "at", "in", "with", "using"})
ARTICLES = frozenset({"the", "a", "an", "its", "our", "my"})
# a number after "by" is a difference, not a stage's result ("drops by 0.058"), and so is
# one a few words after a noun for it ("the drop is 0.06", "差距是 0.06", "下降了 0.058")
DIFFERENCE_BEFORE = frozenset({"by"})
DIFFERENCE_NOUNS = frozenset({"drop", "gap", "difference", "diff", "delta", "差距", "差值",
                              "相差", "下降了", "掉了", "差了", "降了", "降低了", "少了",
                              "低了", "掉点"})
# Chinese words that hold a grammar word's character without being one (由于 is "because",
# 比较 "rather"): cut out whole, they play no part
_CJK_PLAIN = ("由于", "从而", "至少", "甚至", "以至", "到底", "自由", "理由", "比较", "比例")
_CJK_GRAMMAR = sorted({w for w in FROM_WORDS | TO_WORDS | CLAUSE_ENDS | JOINERS |
                       RESPECTIVELY | DIFFERENCE_NOUNS if re.match(r"[\u4e00-\u9fff]", w)}
                      | set(_CJK_PLAIN), key=len, reverse=True)
_CJK_STOPS = "|".join([*_CJK_STAGE_WORDS.values(), *_CJK_GRAMMAR])

_CHIP_NAMES = sorted((c for c in CHIPS if c != "unknown"), key=len, reverse=True)
_NUMBER = rf"\d+(?:\.\d+)?(?:\s?[{PERCENT_SIGNS}])?"
_TOKEN = re.compile(
    "|".join(f"(?P<{stage}>(?<![A-Za-z0-9_.])(?:{words})(?![A-Za-z0-9_])"
             + (f"|{_CJK_STAGE_WORDS[stage]})" if stage in _CJK_STAGE_WORDS else ")")
             for stage, words in STAGE_WORDS)
    + r"|(?P<chip>(?<![A-Za-z0-9_])(?:" + "|".join(_CHIP_NAMES) + r")(?![A-Za-z0-9_]))"
    + rf"|(?P<number>(?<![A-Za-z0-9_.@]){_NUMBER}(?![A-Za-z0-9_{PERCENT_SIGNS}]|\.\d))"
    + r"|(?P<arrow>->|=>|→)"
    + r"|(?P<word>[A-Za-z][A-Za-z0-9_\-]*(?:@\d*\.?\d+)?)"
    + "|(?P<zh>" + "|".join(_CJK_GRAMMAR) + ")"
    + rf"|(?P<cjk>(?:(?!{_CJK_STOPS})[\u4e00-\u9fff])+)"
    + r"|(?P<open>[(（\[])|(?P<close>[)）\]])"
    + r"|(?P<punct>[,;，；、。!?！？/]|\s-\s)", re.I)


@dataclass(frozen=True)
class Token:
    kind: str                   # a stage id, chip, number, word, cjk, open, close, punct
    text: str                   # as written
    start: int = 0              # where it stands in the sentence
    end: int = 0
    value: float = 0.0          # a number's value (a percentage as its fraction)

    @property
    def key(self) -> str:
        """What the grammar matches: English lower-cased, anything else as written."""
        return self.text.lower() if self.text.isascii() else self.text

    @property
    def is_stage(self) -> bool:
        return self.kind in STAGES


def tokens(text: str) -> list[Token]:
    out = []
    for found in _TOKEN.finditer(text):
        kind, raw, where = found.lastgroup, found.group(), found.span()
        if kind == "number":
            value = written_value(raw)
            # hundreds of digits overflow to inf, which no stage question takes: no value
            out.append(Token("number", raw, *where, value) if math.isfinite(value)
                       else Token("word", raw, *where))
        elif kind == "chip":
            out.append(Token("chip", raw.upper(), *where))
        elif kind in ("arrow", "zh", "punct"):
            out.append(Token("word" if kind != "punct" else "punct", raw, *where))
        else:
            out.append(Token(kind, raw, *where))
    return out
