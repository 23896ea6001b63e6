"""A support bundle: the report, case.yaml, the files the triage read
and the artefacts the report says to keep, with a MANIFEST.json saying why each is there.

Nothing outside the case folder is read: every file passes the case-folder gate
(``CaseFiles.inside``), so a symlink that leaves the folder is refused and listed, never
followed. Files over the size limit are listed as left out, never silently dropped.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tarfile
import time
from pathlib import Path

from qcdoctor import __version__
from qcdoctor.collectors.bundle import CASE_DIR, MANIFEST, MANIFEST_SCHEMA, REPORT_DIR
from qcdoctor.errors import QcdoctorError

DEFAULT_MAX_FILE_SIZE = 200 * 1000 * 1000
_UNITS = {"": 1, "k": 1000, "m": 1000 ** 2, "g": 1000 ** 3}


def parse_size(text: str) -> int:
    """Bytes from ``200M``, ``1.5G``, ``500k`` or a plain number (decimal units, as disks)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)b?\s*", text.lower())
    if not match:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r} is no size: write e.g. 200M, 1.5G or "
                                         "500000 (bytes)")
    return int(float(match[1]) * _UNITS[match[2]])


class _Hashing(io.RawIOBase):
    """A file read through once for the archive, hashed on the way."""

    def __init__(self, handle):
        self.handle, self.sha = handle, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self.handle.readinto(buffer)
        self.sha.update(memoryview(buffer)[:count])
        return count


def candidates(report: dict, folder: Path, read: set[Path], words: dict) -> dict[str, str]:
    """Relative path -> why it goes into the bundle (in the report's language)."""
    root = Path(os.path.realpath(folder))
    wanted = {"case.yaml": words["why_case"]}
    for resolved in sorted(read):
        if resolved.is_relative_to(root):
            wanted.setdefault(resolved.relative_to(root).as_posix(), words["why_read"])
    # the case's own threshold settings: the bundle must triage as the folder does
    from qcdoctor.collectors.threshold_sources import case_settings_files
    for name in case_settings_files(Path(root)):
        wanted.setdefault(name, words["why_settings"])
    for item in report["artifacts"]["keep"]:
        if item["present"] and item["path"]:
            wanted[item["path"]] = words["why_keep"].format(name=item["name"])
    return wanted


def escaping_links(folder: Path, files) -> list[str]:
    """Symlinks anywhere in the case folder that lead out of it (never followed)."""
    from qcdoctor.collectors.files import walk
    out = []
    for root, dirs, names in walk(folder):
        for name in [*dirs, *names]:
            path = root / name
            if path.is_symlink() and not files.inside(path):
                out.append(path.relative_to(folder).as_posix())
    return sorted(out)


def pack_case(case_path: str, output: Path, *, max_file_size: int = DEFAULT_MAX_FILE_SIZE,
              lang: str | None = None, use_env: bool = True,
              trust_pickles: bool = False) -> dict:
    """Write the bundle; returns its manifest."""
    from qcdoctor.collectors.case_file import load_case
    from qcdoctor.collectors.files import CaseFiles
    from qcdoctor.engine.diagnosis.triage import triage_case
    from qcdoctor.engine.reports.formats import render
    from qcdoctor.wording import labels

    case = load_case(case_path)
    if case.folder is None:
        raise QcdoctorError("a bundle needs the case folder", file=case_path,
                            fix="give the folder that holds case.yaml")
    target = _check_target(output, case.folder)
    files = CaseFiles(case.folder)
    report = triage_case(case, case_files=files, lang=lang, use_env=use_env,
                         trust_pickles=trust_pickles)
    words = labels()[report["language"]]["pack"]
    kept, left_out = [], []
    from qcdoctor.engine.commands.output_file import OutputFile
    with OutputFile(target) as sink, \
            tarfile.open(fileobj=sink, mode="w:gz", format=tarfile.PAX_FORMAT) as archive:
        for name, text in (("report.md", render(report, "md")),
                           ("report.json", render(report, "json"))):
            kept.append(_add_bytes(archive, f"{REPORT_DIR}/{name}", text.encode("utf-8"),
                                   words["why_report"]))
        for rel, why in sorted(candidates(report, case.folder, files.read, words).items()):
            entry = _add_file(archive, case.folder, rel, why, files, max_file_size, words)
            (kept if "sha256" in entry else left_out).append(entry)
        # then links out of the case and what else the triage refused, each listed once
        extra = [(f"{CASE_DIR}/{rel}", words["why_found"], words["out_link"])
                 for rel in escaping_links(case.folder, files)]
        chinese = report["language"] == "zh"
        extra += [(f"{CASE_DIR}/{p['file']}", words["why_named"],
                   p["problem_zh"] if chinese else p["problem"]) for p in files.problem_facts()]
        for name, why, reason in extra:
            if name not in {e["path"] for e in left_out}:
                left_out.append({"path": name, "why": why, "reason": reason})
        manifest = {"schema": MANIFEST_SCHEMA,
                    "tool": {"name": "qcdoctor", "version": __version__},
                    "case": report["case"], "language": report["language"],
                    "max_file_size": max_file_size,
                    "files": kept, "left_out": left_out}
        from qcdoctor.safe_text import json_text
        _add_bytes(archive, MANIFEST, (json_text(json.dumps(manifest, ensure_ascii=False,
                                                            indent=2)) + "\n").encode("utf-8"), "")
    return manifest


def _check_target(output: Path, folder: Path):
    """Where the bundle goes: streamed into /dev/stdout, a pipe or a FIFO, else a new
    .tar.gz file (a device, /proc or a missing folder refused as any -o)."""
    from qcdoctor.engine.commands.output_file import output_target
    target = output_target(output)
    if target.stream:
        return target
    if os.path.lexists(output):
        raise QcdoctorError("exists already", file=str(output),
                            fix="give a new file name (a bundle never replaces a file)")
    if not output.name.endswith((".tar.gz", ".tgz")):
        raise QcdoctorError("a bundle is a .tar.gz", file=str(output),
                            fix=f"e.g. -o {folder.name or 'case'}.tar.gz")
    return target


def _tar_info(name: str, size: int, mtime: float | None = None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    mtime = time.time() if mtime is None else mtime          # written now, or the file's
    info.size, info.mode, info.mtime = size, 0o644, int(mtime)
    return info


def _add_bytes(archive, name: str, data: bytes, why: str) -> dict:
    archive.addfile(_tar_info(name, len(data)), io.BytesIO(data))
    return {"path": name, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
            "why": why}


def _add_file(archive, folder: Path, rel: str, why: str, files, limit: int,
              words: dict) -> dict:
    """The file added (path, size, sha256, why), or why it was left out (path, why, reason)."""
    name = f"{CASE_DIR}/{rel}"
    path = folder / rel
    if not files.inside(path):
        return {"path": name, "why": why, "reason": words["out_leaves"]}
    try:
        info = os.stat(path)
    except OSError as exc:
        return {"path": name, "why": why,
                "reason": words["out_unreadable"].format(error=exc.strerror)}
    if not stat.S_ISREG(info.st_mode):
        return {"path": name, "why": why, "reason": words["out_not_regular"]}
    if info.st_size > limit:
        return {"path": name, "size": info.st_size, "why": why,
                "reason": words["out_size"].format(size=info.st_size, limit=limit)}
    with open(path, "rb") as handle:
        hashing = _Hashing(handle)
        archive.addfile(_tar_info(name, info.st_size, info.st_mtime), hashing)
    return {"path": name, "size": info.st_size, "sha256": hashing.sha.hexdigest(), "why": why}
