"""The compile script and the hb_compile / hb_mapper config of a case folder, found when
case.yaml names none: the same search for triage, audit and the intake."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from qcdoctor.collectors.deploy_script import TRACKED, Call, export_state, read_script
from qcdoctor.collectors.files import ArtifactRefused, CaseFiles, walk
from qcdoctor.collectors.yaml_schema import load_plain
from qcdoctor.errors import QcdoctorError

MAX_SCRIPTS = 50            # .py files looked at when searching the case for a compile script
MAX_CONFIGS = 50            # .yaml/.yml files looked at when searching for a compile config
MAX_DEPTH = 3
# a name that says what the file is wins over another candidate (knowledge.md R5.9)
CONFIG_NAME_WORDS = ("hb_compile", "hb_mapper", "config")
CONFIG_SECTIONS = ("model_parameters", "input_parameters", "compiler_parameters")
# the case's own files, never a compile config
NOT_CONFIGS = ("case.yaml", "case.yml", "answers.yaml", "fix_trials.yaml")


def parsed(reader, path: Path):
    """``reader(path)``, read again only when the file changed: the intake asks for known
    answers before every question, and the same script and config stay as they were."""
    info = os.stat(path)
    return _parsed_version(reader, str(path), info.st_mtime_ns, info.st_size, info.st_ino)


@lru_cache(maxsize=16)
def _parsed_version(reader, path: str, mtime_ns: int, size: int, inode: int):
    return reader(Path(path))


def script_calls(files: CaseFiles, path: Path) -> list[Call] | None:
    """The calls of a script of the case, None when it cannot be read."""
    try:
        return parsed(read_script, files.check(path, "script"))
    except (ArtifactRefused, QcdoctorError):
        return None


def _case_files(folder: Path, suffixes: tuple[str, ...], limit: int):
    """Files of the case with one of ``suffixes``, at most ``limit``, hidden folders left
    out, in walk order (sorted: the same on every machine)."""
    looked = 0
    for root, dirs, names in walk(folder, MAX_DEPTH):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            if name.endswith(suffixes) and looked < limit:
                looked += 1
                yield root / name


def find_compile_scripts(folder: Path, files: CaseFiles) -> list[str]:
    """Python files of the case (relative paths) that call hbdk4 convert/compile/insert_*;
    without any, those that set the fake-quant state and export (the export script shows
    the state the model was exported in, knowledge.md §5 user-side facts)."""
    found, exporting = [], []
    for path in _case_files(folder, (".py",), MAX_SCRIPTS):
        calls = script_calls(files, path)
        if calls and any(c.name in TRACKED for c in calls):
            found.append(path.relative_to(folder).as_posix())
        elif calls and export_state(calls) is not None:
            exporting.append(path.relative_to(folder).as_posix())
    return found or exporting


def find_compile_configs(folder: Path, files: CaseFiles) -> list[str]:
    """YAML files of the case (relative paths) written as hb_compile / hb_mapper configs:
    a mapping with model_parameters, input_parameters or compiler_parameters."""
    found = []
    for path in _case_files(folder, (".yaml", ".yml"), MAX_CONFIGS):
        if path.name in NOT_CONFIGS:
            continue
        try:
            config = parsed(_config_sections, files.check(path, "config"))
        except (ArtifactRefused, QcdoctorError, OSError, UnicodeDecodeError):
            continue
        if config:
            found.append(path.relative_to(folder).as_posix())
    return found


def _config_sections(path: Path) -> bool:
    data = load_plain(path.read_text(encoding="utf-8"), str(path))
    return isinstance(data, dict) and any(isinstance(data.get(s), dict) for s in CONFIG_SECTIONS)


def chosen(candidates: list[str], words: tuple[str, ...] = ()) -> str | None:
    """The one candidate to read: the only one, or the only one whose file name holds one
    of ``words``; None when that leaves several (the report names them, reads none)."""
    if len(candidates) == 1:
        return candidates[0]
    named = [c for c in candidates if any(w in Path(c).name.lower() for w in words)]
    return named[0] if len(named) == 1 else None

