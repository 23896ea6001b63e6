"""The Jinja2 environment over the bundled templates (works installed or editable)."""

from __future__ import annotations

from functools import lru_cache

import jinja2

from qcdoctor.package_data import package_files


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

    Each entry is checked against the template's source, so an edited template is
    compiled afresh; the folder is the rule cache's, made private to the user.
    """
    from qcdoctor.cache_files import private_dir
    folder = private_dir("templates")
    return _PlainDataCache(str(folder)) if folder else None


class _PlainDataCache(jinja2.BytecodeCache):
    """Jinja's file cache without its pickle: an entry is our magic, the source checksum
    as plain text and the marshalled code, the same trust as Python's own .pyc files.
    Anything else found there (a damaged or planted entry, a FIFO, a link, another user's
    file) is a miss and is compiled afresh and rewritten."""

    _MAGIC = b"qcdoctor-templates-1\n"

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, bucket) -> str:
        import os
        return os.path.join(self.directory, f"{bucket.key}.cache")

    def load_bytecode(self, bucket) -> None:
        import marshal

        from qcdoctor.cache_files import read_entry
        data = read_entry(self._path(bucket))
        checksum = bucket.checksum.encode("utf-8") + b"\n"
        head = self._MAGIC + checksum
        if data is None or not data.startswith(head):
            return
        try:
            code = marshal.loads(data[len(head):])
        except (EOFError, ValueError, TypeError):
            return
        if type(code).__name__ == "code":
            bucket.code = code

    def dump_bytecode(self, bucket) -> None:
        import marshal

        from qcdoctor.cache_files import write_entry
        try:
            code = marshal.dumps(bucket.code)
        except ValueError:      # a cache that cannot be written only costs speed
            return
        write_entry(self._path(bucket), self._MAGIC + bucket.checksum.encode("utf-8") + b"\n"
                    + code)


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
