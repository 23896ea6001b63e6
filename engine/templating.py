"""The Jinja2 environment over the bundled templates (works installed or editable)."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from .bundled import package_files


def _load(name: str):
    node = package_files("qcdoctor.templates")
    for part in name.split("/"):
        node = node / part
    if not node.is_file():
        return None
    return node.read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _bytecode_cache() -> jinja2.BytecodeCache | None:
    """Compiled templates kept between runs (compiling them is most of a first render).

    Jinja checks each entry against the template's source, so an edited template is
    compiled afresh; the folder is the rule cache's, made private to the user.
    """
    from .rule_cache import private_dir
    folder = private_dir("templates")
    return _TolerantCache(str(folder)) if folder else None


class _TolerantCache(jinja2.FileSystemBytecodeCache):
    def load_bytecode(self, bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except Exception:  # noqa: BLE001 - a damaged entry (Jinja reads its header unguarded)
            bucket.reset()                   # is simply compiled afresh and rewritten


def new_environment(autoescape: bool = False, filters: dict | None = None,
                    finalize=None) -> jinja2.Environment:
    """A separate environment (overlays would share and leak their filters);
    ``finalize`` turns every ``{{ }}`` value into its text."""
    env = jinja2.Environment(loader=jinja2.FunctionLoader(_load), autoescape=autoescape,
                             undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True, keep_trailing_newline=True, finalize=finalize,
                             bytecode_cache=_bytecode_cache())
    env.filters.update(filters or {})
    return env


@lru_cache(maxsize=2)
def environment(autoescape: bool = False) -> jinja2.Environment:
    return new_environment(autoescape)


def render_template(name: str, autoescape: bool = False, **context) -> str:
    return environment(autoescape).get_template(name).render(**context)
