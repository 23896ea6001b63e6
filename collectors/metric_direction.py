"""Which way a metric improves (knowledge.md §5 rev 2, §16 R3.1), and whether it is a
fraction by nature (R3.2).

``higher_is_better`` in the case wins. Without it the metric's name decides, by whole
tokens: ``error_rate`` and ``minADE`` are lower-is-better, ``mAP`` is higher-is-better;
a name with no known token in either direction (``success_rate``, ``mNLL``) has an
unknown direction, and the chain is then read both ways (``collectors/stages.py``).

Whether two names are one metric (knowledge.md §17 R4.9) is ``metric_key``'s: every place
that compares metric names compares their keys.
"""

from __future__ import annotations

import re

LOWER_TOKENS = frozenset({"error", "err", "loss", "wer", "cer", "epe", "mae", "mse", "rmse",
                          "ate", "rpe", "aoe", "ase", "ave", "aae", "fpr", "fnr", "latency",
                          "distance",
                          # R3.1: trajectory displacement errors, set and probability errors
                          "ade", "fde", "chamfer", "brier", "l1", "l2"})
# nuScenes writes "mean" as a leading m (mATE, mAOE, ...); "min" is the best of k
# predictions (minADE, minFDE), the m being taken for "mean"
PREFIXED = frozenset(prefix + t for prefix in ("m", "min") for t in LOWER_TOKENS)
LOWER_JOINED = frozenset({"absrel", "sqrel", "missrate", "rmselog"})
HIGHER_TOKENS = frozenset({"map", "ap", "nds", "miou", "iou", "f1", "top1", "top5", "acc",
                           "accuracy", "precision", "recall", "auc", "psnr", "ssim"})
# metrics that are fractions by nature: their values are either all at most 1 or all
# percentages (R3.2 units)
FRACTION_TOKENS = frozenset({"map", "ap", "nds", "miou", "iou", "f1", "top1", "top5", "acc",
                             "accuracy", "precision", "recall", "auc"})

# "@" too: mAP@0.5 and Acc@1 name the metric before it
_SEPARATORS = re.compile(r"[_\-./@\s]+")
_CASE_CHANGE = re.compile(r"(?<=[a-z])(?=[A-Z])")

# why a direction holds, as the report words it (templates/labels.yaml direction_why)
FROM_CASE, FROM_NAME, BY_DEFAULT, UNKNOWN = "case", "metric name", "default", "unknown"


def metric_tokens(name: str) -> list[str]:
    """Split at ``_ - . / @ space`` and at lower→upper case changes, lower-cased."""
    return [t.lower() for part in _SEPARATORS.split(name)
            for t in _CASE_CHANGE.split(part) if t]


# --- R4.9: one metric under several spellings ------------------------------------------

# names whose whole-number threshold is an IoU in percent (COCO writes AP50 for AP@0.5)
_AP_NAMES = frozenset({"ap", "map"})
_FUSED_AP = re.compile(r"^(m?ap)(\d\d)$")
_PERCENT_IOU = (10, 95)
# "Top1 acc" and "top-1 accuracy" are top-1: the qualifier adds nothing
_QUALIFIED_TOP_K = re.compile(r"^(top\d+)(?:acc|accuracy)$")
_ACCURACY_NAMES = frozenset({"acc", "accuracy"})
_SUFFIX_NOISE = re.compile(r"[\s_\[\]()]+")
_NUMBER = re.compile(r"\d*\.\d+|\d+")


def metric_key(name: str) -> str:
    """The name two spellings of one metric share (knowledge.md §17 R4.9).

    Case, spaces and ``_ - . /`` do not count (``mAP`` = ``map`` = ``MAP``, ``top-1`` =
    ``top1``), nor ``acc``/``accuracy`` after a top-k (``Top1 acc`` = ``top1``). What
    follows ``@`` is a threshold or a k, part of the metric (``mAP@0.5`` is not ``mAP``)
    but compared as numbers (``@0.5`` = ``@.5`` = ``@0.50``); after an AP name a whole
    number from 10 to 95 is an IoU in percent (``AP@50`` = ``AP50`` = ``AP@0.5``), and
    ``Acc@k`` is top-k."""
    base, _, suffix = name.partition("@")
    key = "".join(metric_tokens(base))
    fused = _FUSED_AP.match(key)
    if fused and not suffix:
        key, suffix = fused.groups()
    top_k = _QUALIFIED_TOP_K.match(key)
    key = top_k.group(1) if top_k else key
    suffix = _suffix_key(suffix, key)
    if key in _ACCURACY_NAMES and suffix.isdigit():
        return f"top{suffix}"
    return f"{key}@{suffix}" if suffix else key


def _suffix_key(suffix: str, key: str) -> str:
    def number(match: re.Match) -> str:
        text, value = match.group(0), float(match.group(0))
        low, high = _PERCENT_IOU
        if key in _AP_NAMES and "." not in text and low <= value <= high:
            value /= 100
        return f"{value:g}"
    return _NUMBER.sub(number, _SUFFIX_NOISE.sub("", suffix.lower()))


def same_metric(a: str, b: str) -> bool:
    return metric_key(a) == metric_key(b)


def _names(name: str) -> tuple[list[str], str]:
    """The name's tokens, and its joined spelling without the ``@`` part (``mIoU@0.5``:
    ``miou``), as ``metric_key`` writes it."""
    return metric_tokens(name), metric_key(name).partition("@")[0]


def lower_is_better_by_name(name: str) -> bool:
    tokens, joined = _names(name)
    return any(t in LOWER_TOKENS or t in PREFIXED for t in tokens) or joined in LOWER_JOINED


def higher_is_better_by_name(name: str) -> bool:
    """mIoU splits into m, io, u and top-1 into top, 1: the joined name counts too."""
    tokens, joined = _names(name)
    return any(t in HIGHER_TOKENS for t in tokens) or joined in HIGHER_TOKENS


def is_fraction_metric(name: str) -> bool:
    tokens, joined = _names(name)
    return any(t in FRACTION_TOKENS for t in tokens) or joined in FRACTION_TOKENS


def metric_direction(metric: str, given: bool | None) -> tuple[bool | None, str]:
    """(higher_is_better, why). ``why`` is ``case`` when given, ``metric name`` when the
    name says, ``default`` (higher) without a name; ``unknown`` with None when the name
    says nothing either way. A lower-is-better token wins over a higher one
    (``accuracy_error``)."""
    if given is not None:
        return bool(given), FROM_CASE
    if not metric:
        return True, BY_DEFAULT
    if lower_is_better_by_name(metric):
        return False, FROM_NAME
    if higher_is_better_by_name(metric):
        return True, FROM_NAME
    return None, UNKNOWN
