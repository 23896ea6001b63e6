"""Stage results a symptom line already states ("quantized.bc mAP 0.391 vs qat.bc 0.449"),
offered as defaults to confirm: the user never types a number twice."""

from __future__ import annotations

import re

# how users name the stages in a symptom line; longest names first so that
# "qat.export.pt" is not read as "qat"
_STAGE_WORDS = (("qat_export", r"qat\.export(?:\.pt)?|qat_export"), ("quantized_bc", r"quantized(?:\.bc|_bc)"),
                ("qat_bc", r"qat(?:\.bc|_bc)"), ("qat", r"qat(?:\.pt)?"), ("calib", r"calib(?:\.pt)?"),
                ("float", r"float(?:\.pt)?"), ("hbm_x86", r"x86|hbm|仿真"), ("board", r"board|板端|上板"))
_MENTION = re.compile("|".join(f"(?P<{stage}>(?<![\\w.])(?:{words})(?![\\w]))"
                               for stage, words in _STAGE_WORDS), re.I)
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?%?(?![\w.])")
_METRIC = re.compile(r"[A-Za-z][A-Za-z0-9@_\-]*")
_FILLER = {"vs", "and", "than", "with", "in", "on", "the", "of", "is", "was", "only", "for"}


def stage_hints(symptom: str) -> tuple[dict[str, float], str | None]:
    """({stage: value}, metric) read from a symptom: each stage named takes the first number
    that follows it before the next stage name; the metric is a word between the two."""
    values: dict[str, float] = {}
    metric = None
    mentions = list(_MENTION.finditer(symptom or ""))
    for i, found in enumerate(mentions):
        stage = found.lastgroup
        end = mentions[i + 1].start() if i + 1 < len(mentions) else len(symptom)
        span = symptom[found.end():end]
        number = _NUMBER.search(span)
        if number is None or stage in values:
            continue
        text = number.group()
        values[stage] = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
        words = [w for w in _METRIC.findall(span[:number.start()]) if w.lower() not in _FILLER]
        if metric is None and words:
            metric = words[0]
    if metric is None:
        # "mAP of quantized.bc 0.391": the metric may come first
        before = symptom[:mentions[0].start()] if mentions else ""
        words = [w for w in _METRIC.findall(before) if w.lower() not in _FILLER]
        metric = words[-1] if words and values else None
    return values, metric
