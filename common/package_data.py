"""Data files shipped inside the package (rules, labels, checklist), read with libyaml.

These files are ours and tested as they ship, so the C loader reads them where PyYAML
has it (several times faster than the pure-Python one); user files go through
``collectors.yaml_schema`` instead, which keeps the reference loader's messages.

What a file holds is also kept in the user's private cache folder as ``marshal`` data,
keyed by a hash of the file's bytes and the Python version: building the objects from
YAML is the larger part of a short run's report rendering, loading them from marshal
a twentieth of it. A stale, damaged or foreign cache entry is ignored and rewritten.
"""

from __future__ import annotations

import importlib.util
import marshal
import os
import sys
from functools import lru_cache
from pathlib import Path

_FORMAT = b"qcdoctor-bundled-1"


def safe_yaml(text: str):
    """``text`` read by PyYAML's safe loader, libyaml's where PyYAML has it (imported here:
    with the caches warm a run reads no YAML of ours, and PyYAML costs a tenth of it)."""
    import yaml
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@lru_cache(maxsize=None)
def package_files(package: str):
    """Where a package's data files are: its folder, or importlib.resources' view of it
    where it is none (a zipped install); importlib.resources is imported only then, as it
    costs a fifteenth of a short run."""
    spec = importlib.util.find_spec(package)
    for location in (spec.submodule_search_locations or []) if spec else []:
        if os.path.isdir(location):
            return Path(location)
    from importlib import resources
    return resources.files(package)


def read_text(package: str, name: str) -> str:
    return (package_files(package) / name).read_text(encoding="utf-8")


def load_yaml(package: str, name: str):
    import hashlib  # here: finding the examples needs none of this
    data = (package_files(package) / name).read_bytes()
    key = hashlib.blake2b(_FORMAT + sys.version.encode() + b"\0" + data, digest_size=32).digest()
    path = _cache_path(package, name)
    if path is not None:
        from qcdoctor.cache_files import read_entry
        stored = read_entry(path)
        if stored is not None and stored[:32] == key:
            try:
                return marshal.loads(stored[32:])
            except Exception:  # noqa: BLE001 - a damaged entry: read the YAML
                pass
    value = safe_yaml(data.decode("utf-8"))
    if path is not None:
        _store(path, key, value)
    return value


def _cache_path(package: str, name: str):
    from qcdoctor.cache_files import private_dir
    folder = private_dir("bundled")
    return folder / f"{package}.{name.replace('/', '.')}.marshal" if folder else None


def _store(path, key: bytes, value) -> None:
    """Keep ``value`` for the next run; data marshal cannot hold, or a cache that cannot
    be written, only costs the next run the YAML."""
    from qcdoctor.cache_files import write_entry
    try:
        payload = marshal.dumps(value)
    except ValueError:
        return
    write_entry(path, key + payload)
