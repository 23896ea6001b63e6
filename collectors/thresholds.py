"""Named thresholds of the per-layer reading rules (knowledge.md §8), stated in reports."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Thresholds:
    cosine_good: float = 0.999        # a layer at or above this agrees with its baseline
    cliff_drop: float = 0.01          # a cosine fall this large from the previous row is sharp
    cliff_share: float = 0.5          # a cliff carrying this share of the total loss is "the" source
    atol_jump: float = 10.0           # Atol / baseline range this many times the previous row's: a jump ...
    atol_jump_steps: float = 2.0      # ... when it is also this many quantization steps
    range_narrow: float = 0.9         # analysis range below this share of the baseline's: truncated
    dominance: float = 2.0            # top-1 sensitivity this many times the second: dominant
    flat_spread: float = 1.5          # top-1 within this factor of the 5th: flat (accumulation)
    tail_share: float = 0.2           # the last share of sensitivity rows is "the tail" ...
    tail_near_zero: float = 0.01      # ... near zero when at most this share of the top value
    top_n: int = 10                   # how many most sensitive ops are "the most sensitive"

    def as_dict(self) -> dict:
        return asdict(self)


DEFAULT = Thresholds()
