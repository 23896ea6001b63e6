"""How a value written as text reads: the one test of "is this a number" that rule
patterns and the tables qcdoctor writes share."""

from __future__ import annotations


def looks_numeric(text: str) -> bool:
    """Whether ``text`` reads as a number (as ``float`` reads it: "1e-3", " 2 ", "nan")."""
    try:
        float(text)
    except ValueError:
        return False
    return True
