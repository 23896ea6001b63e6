"""A cache of the parsed rule book, so a CLI run does not parse 170 YAML files each time.

The cache file holds the rules exactly as ``parse_rule`` built them, keyed by a hash of
every rule file, the code that parses and checks them, and the Python version. It lives
in the user's cache folder (``QCDOCTOR_CACHE_DIR``, else ``$XDG_CACHE_HOME/qcdoctor``,
else ``~/.cache/qcdoctor``; ``QCDOCTOR_CACHE_DIR=off`` disables it). A stale, corrupt,
foreign or unreadable file is ignored and the rules are parsed afresh; a file holding
anything but rule objects is refused by the unpickler before any of it runs.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import sys
from pathlib import Path

from .atomic import replaced_atomically

_FORMAT = b"qcdoctor-rules-2"
# the code whose behaviour is frozen into cached rules
_CODE = ("rulebook.py", "patterns.py", "fact_types.py", "vocabulary.py", "rule_cache.py")
# what a cache file may contain: these classes and plain data, nothing else
_ALLOWED = {("qcdoctor.engine.rulebook", "Rule"), ("qcdoctor.engine.patterns", "Pattern"),
            ("qcdoctor.engine.patterns", "Condition"), ("builtins", "set"),
            ("builtins", "frozenset")}


def cache_dir() -> Path | None:
    chosen = os.environ.get("QCDOCTOR_CACHE_DIR")
    if chosen:
        return None if chosen.lower() == "off" else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qcdoctor"


def private_dir(name: str) -> Path | None:
    """``cache_dir()/name``, created for this user alone; None when there is no cache folder
    or it is not this user's own (a folder others can write to could plant code there)."""
    base = cache_dir()
    if base is None:
        return None
    folder = base / name
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        status = folder.stat()
    except OSError:
        return None
    if hasattr(os, "getuid") and status.st_uid != os.getuid() or status.st_mode & 0o022:
        return None
    return folder


def cache_key(sources: list[tuple[str, bytes]]) -> str:
    """Hash of (name, bytes) of every rule file plus the parsing code and Python version."""
    digest = hashlib.sha256(_FORMAT + sys.version.encode())
    here = Path(__file__).resolve().parent
    for name in _CODE:
        digest.update(name.encode() + b"\0" + (here / name).read_bytes())
    for name, data in sources:
        digest.update(name.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


class _RulesOnly(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) not in _ALLOWED:
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed in a rule cache")
        return super().find_class(module, name)


def _path(key: str) -> Path | None:
    folder = cache_dir()
    return folder / f"rules-{key[:40]}.pickle" if folder else None


def read(key: str):
    """The cached rules for ``key``, or None when there is no usable cache file."""
    path = _path(key)
    if path is None:
        return None
    try:
        blob = path.read_bytes()
        stored = _RulesOnly(io.BytesIO(blob)).load()
    except Exception:  # noqa: BLE001 - any unreadable cache is simply not used
        return None
    if not (isinstance(stored, dict) and stored.get("key") == key
            and isinstance(stored.get("rules"), tuple)):
        return None
    return stored["rules"]


def write(key: str, rules: tuple) -> None:
    """Store ``rules`` for ``key``; a cache that cannot be written is skipped silently."""
    path = _path(key)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with replaced_atomically(path, 0o600) as temporary, open(temporary, "wb") as out:
            pickle.dump({"key": key, "rules": rules}, out, protocol=pickle.HIGHEST_PROTOCOL)
        for stale in path.parent.glob("rules-*.pickle"):    # other versions' caches
            if stale != path:
                stale.unlink(missing_ok=True)
    except Exception:  # noqa: BLE001 - a read-only or full disk only costs speed
        pass                            # (the temporary file is already removed)
