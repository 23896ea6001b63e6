"""JSON that durable_rules' C parser accepts: floats always in positional notation.

The parser rejects exponent notation such as ``1e-05`` (and crashes on it in batch
asserts), and JSON has no NaN/Inf, so both are refused here before they reach it.
"""

from __future__ import annotations

import json
import math


def format_float(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        raise ValueError(f"NaN/Inf cannot be sent to the rule engine: {value!r}")
    text = repr(value)
    if "e" in text or "E" in text:
        from decimal import Decimal  # rare: its import costs more than a case
        text = format(Decimal(text), "f")
    if "." not in text:
        text += ".0"
    return text


def _encode(value) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return format_float(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k), ensure_ascii=False)}: {_encode(v)}"
                               for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_encode(v) for v in value) + "]"
    raise TypeError(f"cannot encode {type(value).__name__} for the rule engine")


_plain = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(", ", ": ")).encode


def _positional(value) -> bool:
    """True for scalars that ``json`` already writes the way the C parser reads them."""
    if isinstance(value, float):
        # repr switches to exponent notation outside [1e-4, 1e16)
        return value == 0.0 or 1e-4 <= abs(value) < 1e16
    return value is None or isinstance(value, (str, int))


def dumps(value) -> str:
    """Serialise facts and rulesets for durable_rules.

    A flat fact whose floats need no exponent goes through the C encoder of ``json`` (one
    encoder, built once); anything else through the positional writer above.
    """
    if isinstance(value, dict) and all(map(_positional, value.values())):
        try:
            return _plain(value)
        except ValueError:          # NaN / Inf: let the positional writer say so
            pass
    return _encode(value)


def without_nonfinite(result: dict) -> dict:
    """A flat result for strict JSON: NaN and Infinity (which JSON lacks) become null, and
    a ``notes`` entry names each such field and what it was."""
    out, notes = {}, []
    for key, value in result.items():
        if isinstance(value, float) and not math.isfinite(value):
            notes.append(f"{key} was {value!r} (not a JSON number): written as null")
            value = None
        out[key] = value
    if notes:
        out["notes"] = notes
    return out
