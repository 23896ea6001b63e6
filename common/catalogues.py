"""The data catalogues the rules, the intake and the reports share: the intake's question
topics (rules/questions.yaml) and the deployment checklist items with their roll-up
(templates/checklist_items.yaml), each read once and checked against the fact types."""

from __future__ import annotations

from functools import lru_cache

from qcdoctor.errors import RuleError
from qcdoctor.fact_types import CHECKLIST_ITEMS
from qcdoctor.package_data import load_yaml


@lru_cache(maxsize=1)
def question_topics() -> dict:
    """The intake's question catalogue (rules/questions.yaml): topic -> items."""
    return {k: v for k, v in load_yaml("qcdoctor.rules", "questions.yaml").items()
            if k != "examples"}


@lru_cache(maxsize=1)
def question_examples() -> dict:
    return load_yaml("qcdoctor.rules", "questions.yaml")["examples"]


@lru_cache(maxsize=1)
def checklist_items() -> dict:
    """The deployment checklist items (templates/checklist_items.yaml), in report order."""
    items = load_yaml("qcdoctor.templates", "checklist_items.yaml")
    if list(items) != list(CHECKLIST_ITEMS):
        raise RuleError("checklist_items.yaml must list exactly the checklist item ids, in order",
                        file="templates/checklist_items.yaml")
    for item, spec in items.items():
        if "part_of" in spec and (spec["mandatory"] or not items.get(spec["part_of"], {}).get(
                "mandatory")):
            raise RuleError("part_of names the mandatory item a finer check rolls up into",
                            file="templates/checklist_items.yaml", key=f"{item}.part_of")
    return items
