"""A cache of the parsed rule book, so a CLI run does not parse 170 YAML files each time.

The cache file holds the rules exactly as ``parse_rule`` built them. It is found by the
files' stamps (size, times, inode) and the Python version, so a run that hits it opens no
rule file; it also records a hash of every rule file and of the code that parses and checks
them. Stamps alone are trusted only for files last changed well before the cache was
written: a file changed within ``SETTLED_NS`` of it (a change inside the file system's
clock tick keeps its stamp) is hashed on every read until the cache is rewritten later.
It lives in a folder of this user's cache folder (``QCDOCTOR_CACHE_DIR``, else
``$XDG_CACHE_HOME/qcdoctor``, else ``~/.cache/qcdoctor``; ``QCDOCTOR_CACHE_DIR=off``
disables it). A stale, corrupt, foreign or unreadable file is ignored and the rules are
parsed afresh; a file holding anything but rule objects is refused by the unpickler
before any of it runs.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import pickle
import sys
from pathlib import Path

from qcdoctor.cache_files import private_dir

_FORMAT = b"qcdoctor-rules-3"
# the code whose behaviour is frozen into cached rules
_CODE = ("qcdoctor.engine.matching.rulebook", "qcdoctor.engine.matching.patterns",
         "qcdoctor.rule_outputs", "qcdoctor.values", "qcdoctor.fact_types", "qcdoctor.vocabulary",
         "qcdoctor.engine.matching.rule_cache")
# what a cache file may contain: these classes and plain data, nothing else
_ALLOWED = {("qcdoctor.engine.matching.rulebook", "Rule"), ("qcdoctor.engine.matching.patterns", "Pattern"),
            ("qcdoctor.engine.matching.patterns", "Condition"), ("builtins", "set"),
            ("builtins", "frozenset")}


# stamps alone are trusted only for files last changed this long before they were read:
# a rewrite within the file system's clock tick (2 s on FAT) keeps its stamp
SETTLED_NS = 3_000_000_000


def _code_files() -> list[tuple[str, str, object]]:
    """(module, file, loader) of the code above: imported already, as the rule book uses it."""
    found = []
    for name in _CODE:
        module = importlib.import_module(name)
        found.append((name, module.__file__, module.__loader__))
    return found


def stamp(status: os.stat_result) -> tuple[int, int, int, int]:
    """What changes when a file is rewritten, replaced or touched."""
    return status.st_size, status.st_mtime_ns, status.st_ctime_ns, status.st_ino


def cache_key(sources: list[tuple[str, bytes]]) -> str:
    """Hash of (name, bytes) of every rule file plus the parsing code and Python version."""
    digest = hashlib.sha256(_FORMAT + sys.version.encode())
    for name, file, loader in _code_files():     # through the loader: it may be zipped
        digest.update(name.encode() + b"\0" + loader.get_data(file))
    for name, data in sources:
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def stamp_key(root: str, stamps: list[tuple[str, tuple]]) -> tuple[str, int]:
    """(the cache key of the rule files under ``root`` by their stamps, the code's and the
    Python version; the newest change time among those files, in ns). The key starts with
    a hash of ``root``: each installed copy keeps its own cache file. OSError when the code
    has no stamps (a zipped package)."""
    code = [(name, stamp(os.stat(file))) for name, file, _ in _code_files()]
    digest = hashlib.sha256(_FORMAT + sys.version.encode() + repr(code).encode())
    digest.update(repr(stamps).encode())
    newest = max((max(s[1], s[2]) for _, s in code + stamps), default=0)
    family = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{family}-{digest.hexdigest()[:40]}", newest


def content_file_key(content: str) -> str:
    """The cache key of rule files without stamps (a zipped install): their contents'."""
    return f"anywhere-{content[:40]}"


class _RulesOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a rule cache")
        return super().find_class(module, name)


def _path(key: str) -> Path | None:
    folder = private_dir("rules")
    return folder / f"rules-{key}.pickle" if folder else None


def enabled() -> bool:
    return private_dir("rules") is not None


def settled(read_from_ns: int, newest_ns: int) -> bool:
    """Whether stamps alone can vouch for files read from ``read_from_ns`` on, whose newest
    change was at ``newest_ns``."""
    return read_from_ns - newest_ns >= SETTLED_NS


def read(key: str, content_key, now_settled: bool):
    """The cached rules for ``key`` (``stamp_key``'s, or ``content_file_key``'s where the files
    have no stamps), or None when there is no usable cache file. ``content_key``: a callable
    giving ``cache_key`` of the files, asked when the stamps alone cannot vouch for them;
    a cache so checked is rewritten as settled once ``now_settled``."""
    path = _path(key)
    if path is None:
        return None
    from qcdoctor.cache_files import read_entry
    blob = read_entry(path)
    if blob is None:
        return None
    try:
        stored = _RulesOnly(io.BytesIO(blob)).load()
    except Exception:  # noqa: BLE001 - any unreadable cache is simply not used
        return None
    if not (isinstance(stored, dict) and stored.get("key") == key
            and isinstance(stored.get("rules"), tuple)):
        return None
    if stored.get("settled") is not True:
        content = content_key()
        if stored.get("content") != content:
            return None
        if now_settled:
            write(key, stored["rules"], content, now_settled)
    return stored["rules"]


def write(key: str, rules: tuple, content: str, now_settled: bool) -> None:
    """Store ``rules`` for ``key`` with the files' ``content`` hash, to be trusted on their
    stamps alone when ``now_settled``. A cache that cannot be written is skipped silently."""
    path = _path(key)
    if path is None:
        return
    from qcdoctor.cache_files import write_entry
    try:
        write_entry(path, pickle.dumps({"key": key, "content": content, "settled": now_settled,
                                        "rules": rules}, protocol=pickle.HIGHEST_PROTOCOL))
        family = key.split("-", 1)[0]       # this copy's caches of other versions
        stale = [*path.parent.glob(f"rules-{family}-*.pickle"),
                 *path.parent.parent.glob("rules-*.pickle")]    # the old place, before 0.1
        for old in stale:
            if old != path:
                old.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - a read-only or full disk only costs speed
        pass                            # (the temporary file is already removed)
