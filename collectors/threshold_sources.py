"""The QuantAnalysis thresholds a case is read with, and where each value came from.

Per threshold, the first that sets it wins: ``thresholds:`` in case.yaml, then the
nearest ``qcdoctor.toml`` (its ``[thresholds]`` table) or ``pyproject.toml`` (its
``[tool.qcdoctor.thresholds]`` table) found from the case folder upwards (up to the
folder that holds ``.git``, or the filesystem root), then the defaults. With ``--no-env``
only the case folder itself is searched: the folders above it belong to this machine.

A settings file in the case folder came with the case: when it cannot be used (not valid
TOML, nested past the limits, a bad value) it is skipped as if absent and reported as an
artifact_problem (``settings_problems``), never stopping the triage. One above the case
folder is this machine's own: its problems are an error to fix there.
"""

from __future__ import annotations

import math
import os
from dataclasses import fields, replace
from functools import lru_cache
from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.bounded_data import DataRefused, load_toml
from qcdoctor.collectors.reading.thresholds import DEFAULT, Thresholds
from qcdoctor.collectors.reasons import Reason, artifact_problem, reason, with_fix, zh
from qcdoctor.errors import QcdoctorError

# (minimum, maximum) of each threshold; top_n is a count
BOUNDS = {"cosine_good": (0, 1), "cliff_drop": (0, 1), "cliff_share": (0, 1),
          "atol_jump": (0, None), "atol_jump_steps": (0, None), "band_steps": (0, None),
          "source_growth": (0, None), "conversion_steps": (1, None), "range_narrow": (0, 1),
          "weight_sqnr_low": (0, None), "channel_spread": (1, None),
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
    from qcdoctor.collectors.yaml_schema import Number
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
    """The nearest config file with a usable thresholds table: (path, checked table). One
    in the case folder that cannot be used is passed over (``settings_problems``)."""
    if folder is None:
        return None
    here = Path(folder).resolve()
    for place in [here, *here.parents] if use_env else [here]:
        for name, keys, marker in CONFIG_FILES:
            path = place / name
            if place == here and not own_file(path, here):
                continue                # a link out of the case: settings_problems says so
            if path.is_file():
                try:
                    table = _table(path, keys, marker)
                except QcdoctorError:
                    if place == here:
                        continue        # the case's own: an artifact_problem, not a stop
                    raise
                if table is not None:
                    return path, table
        if (place / ".git").exists():
            break
    return None


def own_file(path: Path, folder: Path) -> bool:
    """Whether ``path`` in the case ``folder`` (resolved) is absent or stays inside it: a
    settings file linked from elsewhere is not the case's, as for any artefact."""
    if not os.path.islink(path):
        return True
    target = Path(os.path.realpath(path))
    return target.is_relative_to(folder)


def case_settings_files(folder: Path) -> list[str]:
    """The names of the settings files of the case ``folder`` itself that a triage reads
    (its own regular files; a pyproject.toml only where it names qcdoctor)."""
    here = Path(folder).resolve()
    names = []
    for name, _, marker in CONFIG_FILES:
        path = here / name
        if not own_file(path, here) or not path.is_file():
            continue
        try:
            with open(path, "rb") as handle:
                head = handle.read(limits.CASE_FILE_BYTES + 1)
        except OSError:
            continue
        if marker is None or marker in head:
            names.append(name)
    return names


def settings_problems(folder: Path | None) -> list[dict]:
    """An artifact_problem fact for each settings file of the case folder itself that
    cannot be used (``find_config`` passes over them)."""
    if folder is None:
        return []
    here = Path(folder).resolve()
    found = []
    for name, keys, marker in CONFIG_FILES:
        path = here / name
        if not own_file(path, here):
            found.append(artifact_problem(name, reason(
                "refused: it lies outside the case folder"), False,
                name))
            continue
        if not path.is_file():
            continue
        try:
            _table(path, keys, marker)
        except QcdoctorError as exc:
            found.append(artifact_problem(name, with_fix(_placed(exc), exc.fix), False, name))
    return found


def _placed(exc: QcdoctorError) -> Reason:
    """The error's problem after its line and key, in both languages (the fact names the
    file)."""
    def place(problem: str, chinese: bool) -> str:
        # each template filled once per language, with that language's problem
        if exc.key:
            problem = reason("'{key}': {problem}", key=exc.key, problem=problem)
            problem = zh(problem) if chinese else str(problem)
        if exc.line:
            problem = reason("line {line}: {problem}", line=exc.line, problem=problem)
            problem = zh(problem) if chinese else str(problem)
        return problem
    return Reason(place(str(exc.problem), False), place(zh(exc.problem), True))


@lru_cache(maxsize=32)
def _parsed(path: str, mtime_ns: int, size: int, marker: bytes | None) -> dict | None:
    """A settings file's TOML, parsed once per version of the file (a batch of cases
    under one project reads the same pyproject.toml for every case); None when the file
    never says ``marker`` (a table named with escapes in its key is not looked for)."""
    data = Path(path).read_bytes()
    if marker is not None and marker not in data:
        return None
    return load_toml(data.decode("utf-8"))


def _table(path: Path, keys: tuple[str, ...], marker: bytes | None) -> dict | None:
    try:
        info = path.stat()
        if info.st_size > limits.CASE_FILE_BYTES:
            raise QcdoctorError(reason("larger than the {limit} limit for a settings file",
                                       limit=limits.size_text(limits.CASE_FILE_BYTES)),
                                file=str(path), fix=reason("keep only the settings in it"))
        data = _parsed(str(path), info.st_mtime_ns, info.st_size, marker)
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(reason("cannot read it: {error}", error=exc), file=str(path)) \
            from None
    except DataRefused as exc:          # not valid TOML, or past the limits
        raise QcdoctorError(exc.problem, file=str(path), line=exc.line, fix=exc.fix) from None
    for key in keys:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    where = ".".join(keys)
    if not isinstance(data, dict):
        raise QcdoctorError(reason("expected a table"), file=str(path), key=where,
                            fix=reason("write it as [{where}] with name = value lines",
                                       where=where))
    return {name: _checked(path, f"{where}.{name}", name, value) for name, value in data.items()}


def _checked(path: Path, key: str, name: str, value):
    if name not in BOUNDS:
        import difflib  # only to word an error: not imported otherwise
        close = difflib.get_close_matches(name, list(BOUNDS), n=1)
        names = ", ".join(BOUNDS)
        raise QcdoctorError(reason("unknown key"), file=str(path), key=key,
                            fix=reason("did you mean '{close}'? allowed here: {names}",
                                       close=close[0], names=names) if close else
                            reason("allowed here: {names}", names=names))
    integer = name in INTEGER
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) \
            or (isinstance(value, float) and not math.isfinite(value)):
        found = (reason("expected a whole number, found {value!r}", value=value) if integer
                 else reason("expected a number, found {value!r}", value=value))
        raise QcdoctorError(found, file=str(path), key=key,
                            fix=reason("e.g. {name} = {default}", name=name,
                                       default=getattr(DEFAULT, name)))
    low, high = BOUNDS[name]
    if value < low or (high is not None and value > high):
        raise QcdoctorError(reason("{value} is out of range", value=value), file=str(path),
                            key=key,
                            fix=reason("use a value from {low} to {high}", low=low, high=high)
                            if high is not None else reason("use a value from {low} up", low=low))
    return value
