"""The Jinja2 environment over the bundled templates (works installed or editable)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import jinja2


def _load(name: str):
    node = resources.files("qcdoctor.templates")
    for part in name.split("/"):
        node = node / part
    if not node.is_file():
        return None
    return node.read_text(encoding="utf-8")


def new_environment(autoescape: bool = False, filters: dict | None = None,
                    finalize=None) -> jinja2.Environment:
    """A separate environment (overlays would share and leak their filters);
    ``finalize`` turns every ``{{ }}`` value into its text."""
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, finalize=finalize)
    env.filters.update(filters or {})
    return env


@lru_cache(maxsize=2)
def environment(autoescape: bool = False) -> jinja2.Environment:
    return new_environment(autoescape)


def render_template(name: str, autoescape: bool = False, **context) -> str:
    return environment(autoescape).get_template(name).render(**context)
