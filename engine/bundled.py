"""Data files shipped inside the package (rules, labels, checklist), read with libyaml.

These files are ours and tested as they ship, so the C loader reads them where PyYAML
has it (several times faster than the pure-Python one); user files go through
``collectors.yaml_schema`` instead, which keeps the reference loader's messages.
"""

from __future__ import annotations

from importlib import resources

import yaml

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_text(package: str, name: str) -> str:
    return (resources.files(package) / name).read_text(encoding="utf-8")


def load_yaml(package: str, name: str):
    return yaml.load(read_text(package, name), Loader=SAFE_LOADER)
