"""Named thresholds of the per-layer reading rules (knowledge.md §8), stated in reports.

Which detector reads which (each module's THRESHOLDS): the clean band (evidence.py)
cosine_good, band_steps; detect_clean_source cliff_drop, dominance, atol_jump,
atol_jump_steps; detect_own_source cliff_drop, dominance; detect_accumulation cliff_drop,
dominance, source_growth; detect_noise band_steps, cliff_drop; detect_outlier
cosine_good, atol_jump, atol_jump_steps; the error kind (compare_layers.error_kind)
conversion_steps, range_narrow, weight_sqnr_low, channel_spread; the sensitivity summary
dominance, flat_spread, tail_share, tail_near_zero, top_n.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Thresholds:
    cosine_good: float = 0.999        # a layer at or above this agrees with its baseline
    cliff_drop: float = 0.01          # a cosine fall this large below the rows before is sharp
    # no longer read: the graph reading keeps a step when a row reading it is out of the
    # band too (knowledge.md R4.1); accepted so that older settings files still load
    cliff_share: float = 0.5
    atol_jump: float = 10.0           # Atol in quantization steps this many times the largest before: a jump ...
    atol_jump_steps: float = 2.0      # ... when it is also this many quantization steps
    # Atol of a row in the clean band, in quantization steps: about one step of its own
    # rounding where both sides are quantized (1 suits qat.bc vs quantized.bc); against a
    # float baseline the largest element error of a clean row (Cosine 0.9999) carries the
    # rounding of every row before it and reaches ten steps and more
    band_steps: float = 16.0
    # a step after earlier loss is a new source only when it adds at least this times the
    # loss so far (1.5: the loss grows 2.5-fold); an error passed on through one more layer,
    # even where a small pooled vector's Cosine exaggerates it, grows it less
    source_growth: float = 1.5
    # Atol at the origin this many quantization steps or more, with the range covered: the
    # op's conversion / requantization, not rounding (about one step per element)
    conversion_steps: float = 10.0
    range_narrow: float = 0.9         # analysis range below this share of the baseline's: narrower
    # a weighted source's own error comes from its weights (knowledge.md R4.3) when the
    # worst output channel's SQNR of the quantized weight is below this (dB; int8
    # per-channel weights reach 35-40) ...
    weight_sqnr_low: float = 25.0
    # ... or when one scale serves channels whose ranges are this many times apart
    channel_spread: float = 10.0
    dominance: float = 2.0            # top-1 sensitivity / a cosine step this many times the next / typical: dominant
    flat_spread: float = 1.5          # top-1 within this factor of the 5th: flat (accumulation)
    tail_share: float = 0.2           # the last share of sensitivity rows is "the tail" ...
    tail_near_zero: float = 0.01      # ... near zero when at most this share of the top value
    top_n: int = 10                   # how many most sensitive ops are "the most sensitive"

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULT = Thresholds()
