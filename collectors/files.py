"""The files of a case folder: listing, and the one gate every artifact read passes.

A case folder comes from someone else, so it is untrusted: an artifact path (given in
case.yaml or found by discovery) is read only when, with symlinks resolved, it lies in
the case folder or in a folder opened with ``--allow-outside``, and only when it is a
regular file within the size cap of its kind. The file type is checked with ``os.stat``
before anything is opened, so devices and FIFOs never hang or flood a run. Refusals
never stop a triage: they are recorded and reported as unreadable artifacts.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from qcdoctor.collectors.reasons import artifact_problem, reason, with_fix
from qcdoctor.errors import QcdoctorError

MAX_FILES = 20000
# Linux's limits, in bytes: one file name (every common file system's), a path as given
NAME_MAX, PATH_MAX = 255, 4096
LENGTH_FIX = "give a shorter name: rename the file or folder, or move it higher up"
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules"}

MiB = 1 << 20
# the largest file of each kind that is read (dumps are streamed in chunks: no cap)
SIZE_CAPS = {
    "table": 512 * MiB,        # QuantAnalysis text/CSV tables, model_check_result
    # fx_graph.txt, layer_calls.csv, layer_own_error.csv: held as a node or a row object
    # per line (about 12x their size in memory), so capped lower: a 64 MiB graph holds half
    # a million nodes, ten times the largest real model's
    "graph": 64 * MiB,
    "pickle": 1024 * MiB,      # .pt files: loaded whole into memory
    "script": 8 * MiB,         # the compile script
    "config": 8 * MiB,         # hb_compile YAML
    # hbm_perf's forward.json: parsed whole (Python objects take about 10x its size)
    "source_map": 64 * MiB,
    "board": 1 * MiB,          # .env.board
    "sidecar": 1 * MiB,        # JSON beside a raw dump
    "dump": None,
}


def length_problem(given: str | Path) -> str | None:
    """Why the system cannot look ``given`` up (ENAMETOOLONG), or None. Checked before
    pathlib's exists() and is_dir(), which raise that error rather than answer False."""
    raw = os.fsencode(given)
    longest = max(map(len, raw.split(b"/")))
    if longest > NAME_MAX:
        return (f"the path is too long: a file name has at most {NAME_MAX} bytes, and one "
                f"here has {longest}")
    if len(raw) >= PATH_MAX:
        return (f"the path is too long: a path has at most {PATH_MAX - 1} bytes, and this "
                f"one has {len(raw)}")
    return None


def check_path_length(given: str | Path) -> None:
    """A QcdoctorError naming ``given`` when it is too long to be looked up."""
    problem = length_problem(given)
    if problem:
        raise QcdoctorError(problem, file=str(given), fix=LENGTH_FIX)


class ArtifactRefused(QcdoctorError):
    """An artifact that is not read: outside the case, not a regular file, or too large."""


@dataclass
class CaseFiles:
    """What a run may read of a case folder, and what it did read or refuse."""
    folder: Path | None
    allow_outside: tuple[Path, ...] = ()
    read: set[Path] = field(default_factory=set)           # resolved paths approved
    refused: dict[str, dict] = field(default_factory=dict)  # shown name -> artifact_problem

    def __post_init__(self):
        roots = [self.folder] if self.folder is not None else []
        self._roots = [Path(os.path.realpath(r)) for r in [*roots, *self.allow_outside]]

    def shown(self, path: Path) -> str:
        """A path as the report shows it: relative to the case folder when inside it."""
        if self.folder is not None:
            try:
                return Path(path).relative_to(self.folder).as_posix() or "."
            except ValueError:
                pass
        return Path(path).as_posix()

    def _refuse(self, path: Path, problem: str, fix: str, source: str | None) -> ArtifactRefused:
        name = self.shown(path)
        self.refused.setdefault(name, artifact_problem(name, with_fix(problem, fix), False,
                                                       source or name))
        return ArtifactRefused(problem, file=name, fix=fix)

    def inside(self, path: Path) -> bool:
        resolved = Path(os.path.realpath(path))
        return any(resolved == root or resolved.is_relative_to(root) for root in self._roots)

    def folder_path(self, path: Path, source: str | None = None) -> Path:
        """A folder of artifacts (QuantAnalysis output, dumps), confined like a file."""
        if not self.inside(path):
            raise self._refuse(path, reason("refused: it lies outside the case folder"),
                               reason("copy it into the case folder, or pass --allow-outside "
                                      "with the folder that holds it"), source)
        return Path(os.path.realpath(path))

    def check(self, path: Path, kind: str, source: str | None = None) -> Path:
        """The resolved path of an artifact that may be read; ArtifactRefused otherwise."""
        resolved = self.folder_path(path, source)
        try:
            info = os.stat(resolved)
        except OSError as exc:
            raise self._refuse(path, reason("cannot read it: {error}",
                                            error=exc.strerror or "not found"),
                               reason("check the path, relative to the case folder"),
                               source) from None
        if not stat.S_ISREG(info.st_mode):
            raise self._refuse(path, reason("refused: not a regular file (a folder, device "
                                            "or FIFO)"),
                               reason("give the path of the file itself"), source)
        cap = SIZE_CAPS[kind]
        if cap is not None and info.st_size > cap:
            raise self._refuse(path, reason("refused: {size} bytes, more than the {cap} MiB "
                                            "read for a {kind} file", size=info.st_size,
                                            cap=cap // MiB, kind=kind),
                               reason("send the file this run needs, not a larger one"), source)
        self.read.add(resolved)
        return resolved

    def read_bytes(self, path: Path, kind: str, source: str | None = None) -> bytes:
        """The bytes of a checked artifact, never more than its cap."""
        resolved = self.check(path, kind, source)
        cap = SIZE_CAPS[kind]
        with open(resolved, "rb") as handle:
            data = handle.read(cap + 1 if cap is not None else -1)
        if cap is not None and len(data) > cap:
            raise self._refuse(path, reason("refused: it grew beyond its size cap while read"),
                               reason("send a file that is not being written to"), source)
        return data

    def read_text(self, path: Path, kind: str, source: str | None = None,
                  errors: str = "strict") -> str:
        return self.read_bytes(path, kind, source).decode("utf-8", errors=errors)

    def problem_facts(self) -> list[dict]:
        """What was refused, and the case folder's own settings files (qcdoctor.toml,
        pyproject.toml, read by ``threshold_settings``) that could not be used."""
        from qcdoctor.collectors.threshold_sources import settings_problems
        found = {**{p["file"]: p for p in settings_problems(self.folder)}, **self.refused}
        return [found[name] for name in sorted(found)]


def walk(folder: Path, max_depth: int | None = None):
    """A case folder top-down, as os.walk lists it (sorted, never following a symlinked
    folder out of it), without recursion: os.walk recurses once per level before Python
    3.12, and a case with a thousand nested folders ended in a RecursionError."""
    pending = [(Path(folder), 0)]
    while pending:
        root, depth = pending.pop()
        dirs, files, links = [], [], set()
        try:
            with os.scandir(root) as entries:
                for entry in entries:
                    try:               # as os.walk: a link to a folder is listed as one
                        is_dir = entry.is_dir()
                        if is_dir and entry.is_symlink():
                            links.add(entry.name)
                    except OSError:
                        is_dir = False
                    (dirs if is_dir else files).append(entry.name)
        except OSError:
            continue                        # unreadable: os.walk skips it too
        dirs = sorted(d for d in dirs if d not in _SKIP_DIRS
                      and (max_depth is None or depth < max_depth))
        yield root, dirs, sorted(files)
        # the caller may prune dirs in place, as with os.walk; depth first, in name order,
        # never into a symlinked folder
        pending.extend((root / d, depth + 1) for d in reversed(dirs) if d not in links)


def find_files(folder: Path, pattern: str) -> list[Path]:
    """Files (symlinks included, not followed) under ``folder`` whose name matches."""
    return sorted(Path(root, name) for root, _, files in walk(folder)
                  for name in files if fnmatch.fnmatch(name, pattern))


def list_case_files(folder: Path | None, limit: int = MAX_FILES) -> list[str]:
    """Relative POSIX paths under ``folder``, sorted, at most ``limit`` of them."""
    found: list[str] = []
    if folder is None:
        return found
    for root, _, files in walk(folder):
        for name in files:
            found.append(Path(root, name).relative_to(folder).as_posix())
            if len(found) >= limit:
                return found
    return found
