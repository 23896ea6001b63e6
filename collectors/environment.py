"""Facts from the machine: installed Horizon packages, the board file, variables.

The case file wins over all of these; each fact says where it came from. What describes
the machine qcdoctor runs on (not the case folder) has a source starting THIS_MACHINE:
it is not necessarily the user's machine (knowledge.md §4 rev 2).
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path

from qcdoctor.fact_types import MARCHES, PACKAGES

BOARD_FILES = (".drobotics-s/.env.board", ".horizon/.env.board")
BOARD_VARIABLES = ("HORIZON_BOARD_TYPE", "OE_BOARD_TYPE", "BOARD_TYPE")
# keys of the first board in .env.board, most precise first
BOARD_KEYS = ("BPU_ARCH", "BOARD_TYPE")
THIS_MACHINE = "this machine: "
_LINE = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*=\s*(.*?)\s*$")


def installed_versions() -> dict[str, tuple[str, str]]:
    """package -> (version, source) for the Horizon packages installed here.

    Read once per process (scanning package metadata costs more than a whole triage);
    a copy is returned, so callers cannot change what the next case sees.
    """
    return dict(_installed_versions())


@lru_cache(maxsize=1)
def _installed_versions() -> dict[str, tuple[str, str]]:
    return {package: (version, f"{THIS_MACHINE}installed package {package}")
            for package, version in distribution_versions(PACKAGES).items()}


def _dist_key(name: str) -> str:
    """A distribution name as metadata folders spell it (PEP 503 normalised, ``_``)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def distribution_versions(packages) -> dict[str, str]:
    """package -> version of those installed on ``sys.path``, the first one found winning,
    as ``importlib.metadata.version`` answers. The metadata folders are found by name
    (``<name>-<version>.dist-info`` / ``.egg-info``) and the version read from their
    METADATA / PKG-INFO: importlib.metadata costs about 50 ms a run (its import and a
    scan of every distribution), more than a whole triage."""
    wanted = {_dist_key(p): p for p in packages}
    found: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = sorted(os.listdir(entry or "."))
        except OSError:                 # a zip file or a folder gone: nothing we look for
            continue
        for name in names:
            stem, dot, suffix = name.rpartition(".")
            if suffix not in ("dist-info", "egg-info") or not dot:
                continue
            package = wanted.get(_dist_key(stem.split("-", 1)[0]))
            if package is None or package in found:
                continue
            version = _metadata_version(os.path.join(entry or ".", name))
            if version:
                found[package] = version
    return found


def _metadata_version(folder: str) -> str | None:
    """The Version header of a dist-info's METADATA or an egg-info's PKG-INFO (a folder,
    or the egg-info itself as a file)."""
    for path in (os.path.join(folder, "METADATA"), os.path.join(folder, "PKG-INFO"), folder):
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                for line in handle:
                    if not line.strip():
                        break           # the headers end at the first blank line
                    key, _, value = line.partition(":")
                    if key.strip().lower() == "version":
                        return value.strip() or None
        except OSError:
            continue
    return None


def read_env_board(path: Path) -> dict[str, tuple[str, int]]:
    """KEY -> (value, line) of an .env.board file; comments and placeholders skipped."""
    values = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return values
    for number, line in enumerate(lines, 1):
        m = _LINE.match(line)
        if m and not line.lstrip().startswith("#"):
            value = m.group(2).strip().strip("'\"")
            if value and not value.startswith("<"):
                values.setdefault(m.group(1), (value, number))
    return values


class BoardMarch(tuple):
    """(march, source) as found; ``locations``: where in the case folder it was read (as
    data, for SARIF), empty when the file was elsewhere (this machine)."""

    def __new__(cls, march: str, source: str, locations: list[dict] = ()):
        found = super().__new__(cls, (march, source))
        found.locations = list(locations)
        return found


def march_from_board_files(folders: list[Path], case_files=None,
                           case_folder: Path | None = None) -> tuple[str, str] | None:
    """(march, source) from the first .env.board found, or None.

    A file in the case folder is named relative to it, so reports do not depend on where
    the case lies; one found elsewhere (the working directory) describes this machine.
    With ``case_files`` (the case's CaseFiles), a file in the case folder is read only if
    it lets it through.
    """
    from qcdoctor.collectors.files import ArtifactRefused
    for folder in folders:
        for rel in BOARD_FILES:
            path = folder / rel
            if case_files is not None and folder == folders[0]:
                if not os.path.lexists(path):
                    continue
                try:
                    path = case_files.check(path, "board")
                except ArtifactRefused:
                    continue
            elif not path.is_file():
                continue
            values = read_env_board(path)
            for key in BOARD_KEYS:
                if key in values and values[key][0] in MARCHES:
                    value, line = values[key]
                    if folder == case_folder:
                        return BoardMarch(value, f"{Path(rel).as_posix()}:{line} ({key})",
                                          [{"file": Path(rel).as_posix(), "line": line}])
                    return value, f"{THIS_MACHINE}{path.as_posix()}:{line} ({key})"
    return None


def march_from_variables(environ=os.environ) -> tuple[str, str] | None:
    for name in BOARD_VARIABLES:
        value = environ.get(name, "").strip()
        if value in MARCHES:
            return value, f"{THIS_MACHINE}environment variable {name}"
    return None


def detect_march(case_folder: Path | None, cwd: Path | None = None, environ=os.environ,
                 use_env: bool = True, case_files=None):
    """March from .env.board (case folder, then working directory), then variables.

    Without ``use_env`` (``--no-env``) only the case folder's own board file counts.
    """
    folders = [case_folder] if case_folder is not None else []
    files = case_files if case_folder is not None else None
    if not use_env:
        return march_from_board_files(folders, files, case_folder)
    cwd = cwd or Path.cwd()
    if case_folder is None or cwd.resolve() != case_folder.resolve():
        folders.append(cwd)
    return (march_from_board_files(folders, files, case_folder)
            or march_from_variables(environ))
