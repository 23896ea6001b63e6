"""Chip and march: either names the other (knowledge.md §15)."""

from __future__ import annotations

CHIP_TO_MARCH = {"J6E": "nash-e", "S100": "nash-e", "J6M": "nash-m", "S100P": "nash-m",
                 "J6P": "nash-p", "S600": "nash-p", "J6H": "nash-h", "J6B": "nash-b"}
MARCH_TO_CHIP = {"nash-e": "J6E", "nash-m": "J6M", "nash-p": "J6P", "nash-h": "J6H",
                 "nash-b": "J6B", "nash-b-lite": "J6B", "nash-b-plus": "J6B"}
STRATEGY_MARCHES = ("nash-e", "nash-m")


def platform_fact(chip: str | None, march: str | None, source: str) -> dict:
    march = march or CHIP_TO_MARCH.get(chip or "")
    chip = chip or MARCH_TO_CHIP.get(march or "")
    return {"type": "platform", "chip": chip or "unknown", "march": march or "unknown",
            "known": bool(march), "strategy_chip": march in STRATEGY_MARCHES,
            "source": source}
