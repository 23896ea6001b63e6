"""A number as the user wrote it, in the symptom line and at a stage prompt alike.

A percentage is its fraction ("71.2%" is 0.712): case.yaml holds a metric on one scale,
and the symptom's numbers are offered on the scale the stage prompts store. The division
is decimal, so 0.712 is stored as written, never as the float noise of 71.2 / 100
(0.7120000000000001).
"""

from __future__ import annotations

import re
from decimal import Decimal

PERCENT_SIGNS = "%％"
_PERCENTAGE = re.compile(rf"^\s*(?P<number>[+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*[{PERCENT_SIGNS}]\s*$")


def is_percentage(text: str) -> bool:
    return bool(_PERCENTAGE.match(text))


def written_value(text: str) -> float:
    """The value of ``text``: a plain number, or a percentage as its fraction. Raises
    ValueError for anything else; a value too large to be finite comes back as inf, which
    the caller refuses in its own words."""
    found = _PERCENTAGE.match(text)
    return float(Decimal(found["number"]).scaleb(-2)) if found else float(text)
