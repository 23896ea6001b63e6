"""Which way a metric improves (knowledge.md §5 rev 2, §16 R3.1), and whether it is a
fraction by nature (R3.2).

``higher_is_better`` in the case wins. Without it the metric's name decides, by whole
tokens: ``error_rate`` and ``minADE`` are lower-is-better, ``mAP`` is higher-is-better;
a name with no known token in either direction (``success_rate``, ``mNLL``) has an
unknown direction, and the chain is then read both ways (``collectors/stages.py``).
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


def _names(name: str) -> tuple[list[str], str]:
    tokens = metric_tokens(name)
    return tokens, "".join(tokens)


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
