"""The QuantAnalysis thresholds a case is read with, and where each value came from.

Per threshold, the first that sets it wins: ``thresholds:`` in case.yaml, then the
nearest ``qcdoctor.toml`` (its ``[thresholds]`` table) or ``pyproject.toml`` (its
``[tool.qcdoctor.thresholds]`` table) found from the case folder upwards (up to the
folder that holds ``.git``, or the filesystem root), then the defaults. With ``--no-env``
only the case folder itself is searched: the folders above it belong to this machine.
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from functools import lru_cache
from pathlib import Path

from qcdoctor.engine.errors import QcdoctorError

from . import limits
from .thresholds import DEFAULT, Thresholds

# (minimum, maximum) of each threshold; top_n is a count
BOUNDS = {"cosine_good": (0, 1), "cliff_drop": (0, 1), "cliff_share": (0, 1),
          "atol_jump": (0, None), "atol_jump_steps": (0, None), "range_narrow": (0, 1),
          "dominance": (1, None), "flat_spread": (1, None), "tail_share": (0, 1),
          "tail_near_zero": (0, 1), "top_n": (1, 1000)}
assert set(BOUNDS) == {f.name for f in fields(Thresholds)}
INTEGER = {"top_n"}
DEFAULT_SOURCE = "default"
# (file name, keys of the table, a word the file holds when it can hold the table: a
# project's pyproject.toml without it is not ours to parse nor to judge)
CONFIG_FILES = (("qcdoctor.toml", ("thresholds",), None),
                ("pyproject.toml", ("tool", "qcdoctor", "thresholds"), b"qcdoctor"))


def threshold_specs() -> dict:
    """The case.yaml ``thresholds:`` mapping, from the same bounds."""
    from .yaml_schema import Number
    return {name: Number(minimum=low, maximum=high, integer=name in INTEGER)
            for name, (low, high) in BOUNDS.items()}


def resolve(case, use_env: bool = True) -> tuple[Thresholds, dict[str, str]]:
    """(thresholds, name -> where its value came from) for ``case``."""
    values, sources = {}, {}
    for name, value in case.get("thresholds", {}).items():
        values[name], sources[name] = value, case.source(f"thresholds.{name}")
    found = find_config(case.folder, use_env)
    if found:
        path, table = found
        for name, value in table.items():
            if name not in values:
                values[name], sources[name] = value, f"{path} (thresholds.{name})"
    for name in BOUNDS:
        sources.setdefault(name, DEFAULT_SOURCE)
    return replace(DEFAULT, **values), sources


def find_config(folder: Path | None, use_env: bool) -> tuple[Path, dict] | None:
    """The nearest config file with a thresholds table: (path, checked table)."""
    if folder is None:
        return None
    here = Path(folder).resolve()
    for place in [here, *here.parents] if use_env else [here]:
        for name, keys, marker in CONFIG_FILES:
            path = place / name
            if path.is_file():
                table = _table(path, keys, marker)
                if table is not None:
                    return path, table
        if (place / ".git").exists():
            break
    return None


def _toml():
    try:
        import tomllib
    except ModuleNotFoundError:         # Python 3.10
        import tomli as tomllib
    return tomllib


@lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int, marker: bytes | None) -> dict | None:
    """A settings file's TOML, parsed once per version of the file (a batch of cases
    under one project reads the same pyproject.toml for every case); None when the file
    never says ``marker`` (a table named with escapes in its key is not looked for)."""
    data = Path(path).read_bytes()
    if marker is not None and marker not in data:
        return None
    return _toml().loads(data.decode("utf-8"))


def _table(path: Path, keys: tuple[str, ...], marker: bytes | None) -> dict | None:
    try:
        info = path.stat()
        if info.st_size > limits.CASE_FILE_BYTES:
            raise QcdoctorError(f"larger than the {limits.size_text(limits.CASE_FILE_BYTES)} "
                                "limit for a settings file", file=str(path),
                                fix="keep only the settings in it")
        data = _parsed(str(path), info.st_mtime_ns, info.st_size, marker)
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(f"cannot read it: {exc}", file=str(path)) from None
    except ValueError as exc:           # TOMLDecodeError (tomllib loads only when parsing)
        raise QcdoctorError(f"not valid TOML: {exc}", file=str(path),
                            fix="check the line it names") from None
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    where = ".".join(keys)
    if not isinstance(data, dict):
        raise QcdoctorError("expected a table", file=str(path), key=where,
                            fix=f"write it as [{where}] with name = value lines")
    return {name: _checked(path, f"{where}.{name}", name, value) for name, value in data.items()}


def _checked(path: Path, key: str, name: str, value):
    if name not in BOUNDS:
        import difflib  # only to word an error: not imported otherwise
        close = difflib.get_close_matches(name, list(BOUNDS), n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        raise QcdoctorError("unknown key", file=str(path), key=key,
                            fix=f"{hint}allowed here: {', '.join(BOUNDS)}")
    integer = name in INTEGER
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) \
            or not math.isfinite(value):
        raise QcdoctorError(f"expected {'a whole number' if integer else 'a number'}, "
                            f"found {value!r}", file=str(path), key=key,
                            fix=f"e.g. {name} = {getattr(DEFAULT, name)}")
    low, high = BOUNDS[name]
    if value < low or (high is not None and value > high):
        span = f"from {low} to {high}" if high is not None else f"from {low} up"
        raise QcdoctorError(f"{value} is out of range", file=str(path), key=key,
                            fix=f"use a value {span}")
    return value
