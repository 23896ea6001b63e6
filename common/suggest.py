"""The known word nearest a mistyped one, for "did you mean" in an error."""

from __future__ import annotations


def nearest(typed: str, known, cutoff: float = 0.6) -> str | None:
    """The known word closest to ``typed`` (difflib's ratio at least ``cutoff``), or None."""
    import difflib  # only to word an error
    near = difflib.get_close_matches(str(typed), [str(k) for k in known], n=1, cutoff=cutoff)
    return near[0] if near else None


def did_you_mean(typed: str, known, cutoff: float = 0.6) -> str:
    """" (did you mean 'x'?)" for the nearest known word, "" when none is near."""
    near = nearest(typed, known, cutoff)
    return f" (did you mean {near!r}?)" if near is not None else ""
