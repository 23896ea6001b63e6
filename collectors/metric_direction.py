"""Which way a metric improves (knowledge.md §5 rev 2, metric direction).

``higher_is_better`` in the case wins. Without it the metric's name decides, by whole
tokens: ``error_rate`` is lower-is-better, ``success_rate`` or ``mAP`` are not.
"""

from __future__ import annotations

import re

LOWER_TOKENS = frozenset({"error", "err", "loss", "wer", "cer", "epe", "mae", "mse", "rmse",
                          "ate", "rpe", "aoe", "ase", "ave", "aae", "fpr", "fnr", "latency",
                          "distance"})
# nuScenes writes "mean" as a leading m: mATE, mAOE, mASE, mAVE, mAAE
MEAN_PREFIXED = frozenset({"m" + t for t in LOWER_TOKENS})
LOWER_JOINED = frozenset({"absrel", "sqrel", "missrate"})

_SEPARATORS = re.compile(r"[_\-./\s]+")
_CASE_CHANGE = re.compile(r"(?<=[a-z])(?=[A-Z])")


def metric_tokens(name: str) -> list[str]:
    """Split at ``_ - . / space`` and at lower→upper case changes, lower-cased."""
    return [t.lower() for part in _SEPARATORS.split(name)
            for t in _CASE_CHANGE.split(part) if t]


def lower_is_better_by_name(name: str) -> bool:
    tokens = metric_tokens(name)
    if any(t in LOWER_TOKENS or t in MEAN_PREFIXED for t in tokens):
        return True
    return "".join(tokens) in LOWER_JOINED


def metric_direction(metric: str, given: bool | None) -> tuple[bool, str]:
    """(higher_is_better, why): ``case`` when given, ``metric name`` or ``default``."""
    if given is not None:
        return bool(given), "case"
    if metric and lower_is_better_by_name(metric):
        return False, "metric name"
    return True, "metric name" if metric else "default"
