"""What a quantized output can represent, and what a row's ranges say about its error
(knowledge.md §8, §16 R3.9).

A dtype's integer range [qmin, qmax] and the row's qscale and zero point give the values
the quantizer can represent: [qscale x (qmin - zp), qscale x (qmax - zp)] (quint8 with zero
point 128 tops out at 127 x qscale). The profiler's tables give no zero point: a signed
dtype is symmetric (zero point 0); for an unsigned one the zero point is assumed to lie
wherever the analysis values put the range, so only the range's width, qscale x (qmax -
qmin), is judged, and an edge only where no such placement can reach it.

Truncation needs range evidence: the baseline reaching past what the quantizer can
represent (values then pile up at the range edge). An analysis range narrower than the
baseline's while the quantizer covers the baseline is upstream error, not truncation. An
unknown dtype is said to be unknown, never read as a range of 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# integer range of every dtype the profiler and torch write (quint7: x86's reduced range)
QRANGE = {"qint4": (-8, 7), "quint4": (0, 15), "quint7": (0, 127), "qint8": (-128, 127),
          "quint8": (0, 255), "qint16": (-32768, 32767), "quint16": (0, 65535),
          "qint32": (-2 ** 31, 2 ** 31 - 1)}
# plain integer spellings (torch.int8, uint8, ...) of the same ranges
_PLAIN = {"int4": "qint4", "uint4": "quint4", "int8": "qint8", "uint8": "quint8",
          "int16": "qint16", "uint16": "quint16", "int32": "qint32"}


def dtype_name(text) -> str | None:
    """The dtype a table cell names (``qint8``, ``torch.quint8``, ``int16`` ...), or None
    when it names none whose range is known."""
    if not isinstance(text, str):
        return None
    word = text.strip().strip("'\"").lower().rsplit(".", 1)[-1]
    word = _PLAIN.get(word, word)
    return word if word in QRANGE else None


@dataclass(frozen=True)
class Representable:
    """The values one quantized output can hold."""
    dtype: str
    qmin: int
    qmax: int
    qscale: float
    zero_point: float
    zero_point_given: bool

    @property
    def signed(self) -> bool:
        return self.qmin < 0

    @property
    def placed(self) -> bool:
        """Whether the range's ends are known: a signed dtype is symmetric; an unsigned
        one needs its zero point."""
        return self.signed or self.zero_point_given

    @property
    def low(self) -> float:
        return self.qscale * (self.qmin - self.zero_point) if self.placed else math.nan

    @property
    def high(self) -> float:
        return self.qscale * (self.qmax - self.zero_point) if self.placed else math.nan

    @property
    def width(self) -> float:
        return self.qscale * (self.qmax - self.qmin)


def representable(dtype_text, qscale: float, zero_point: float = math.nan) -> Representable | None:
    """The representable range of a row, None when its dtype or qscale is unknown."""
    dtype = dtype_name(dtype_text)
    if dtype is None or not (math.isfinite(qscale) and qscale > 0):
        return None
    qmin, qmax = QRANGE[dtype]
    given = math.isfinite(zero_point)
    return Representable(dtype, qmin, qmax, qscale, zero_point if given else 0.0, given)


@dataclass(frozen=True)
class RangeEvidence:
    """What the ranges of one row say, against what its quantizer can represent."""
    clipped: bool               # the baseline reaches past what the quantizer can hold
    at_edge: bool               # analysis values piled at a representable edge
    covered: str                # yes | no | unknown: the quantizer holds the baseline's range
    room: float                 # representable extent / baseline extent (nan: unknown)


def range_evidence(rep: Representable | None, base: tuple[float, float],
                   analy: tuple[float, float]) -> RangeEvidence:
    """Truncation evidence of one row; ``base`` and ``analy`` are (min, max)."""
    bmin, bmax = base
    amin, amax = analy
    if rep is None or not all(map(math.isfinite, (bmin, bmax))):
        return RangeEvidence(False, False, "unknown", math.nan)
    half = rep.qscale / 2               # a value within half a step of an edge reaches it
    if rep.placed:
        clipped = bmax > rep.high + half or bmin < rep.low - half
        at_edge = all(map(math.isfinite, (amin, amax))) and (
            (amax >= rep.high - half and bmax > amax + rep.qscale) or
            (amin <= rep.low + half and bmin < amin - rep.qscale))
        room = min(_extent(rep.high, bmax), _extent(-rep.low, -bmin))
    else:
        # every zero point that holds the analysis values: the top is at most amin + width,
        # the bottom at least amax - width
        analysed = all(map(math.isfinite, (amin, amax)))
        clipped = bmax - bmin > rep.width + half or analysed and (
            bmax > amin + rep.width + half or bmin < amax - rep.width - half)
        at_edge = analysed and amax - amin >= rep.width - rep.qscale and \
            bmax - bmin > amax - amin + rep.qscale
        span = max(bmax, amax if analysed else bmax) - min(bmin, amin if analysed else bmin)
        room = rep.width / span if span > 0 else math.inf
    truncated = clipped or at_edge
    return RangeEvidence(clipped, at_edge, "no" if truncated else "yes", room)


def _extent(reach: float, value: float) -> float:
    """How many times the representable reach on one side covers the baseline there."""
    if value <= 0:
        return math.inf                 # nothing on this side to hold
    return reach / value if reach > 0 else 0.0
