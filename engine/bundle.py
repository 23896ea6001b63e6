"""Support bundles (``qcdoctor pack``): their layout and reading one safely.

A bundle is a .tar.gz holding ``MANIFEST.json``, ``report/report.{md,json}`` and the case
under ``case/``. It comes from someone else, so it is opened like an untrusted archive:
only regular files and folders, relative names without ``..``, no links of any kind, at
most MAX_MEMBERS members, MAX_MEMBER_BYTES each and MAX_TOTAL_BYTES in all (as the
headers declare them: tarfile reads exactly that much), extracted into a private
temporary folder that is removed afterwards.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from .errors import QcdoctorError

TYPE_CHECKING = False            # typing is not imported for it on every start
if TYPE_CHECKING:
    import tarfile

CASE_DIR = "case"
REPORT_DIR = "report"
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "qcdoctor/bundle-v1"
MiB = 1 << 20
MAX_MEMBERS = 20000
MAX_MEMBER_BYTES = 1024 * MiB
MAX_TOTAL_BYTES = 4096 * MiB
_FIX = "ask for a bundle written by qcdoctor pack, or unpack it yourself and triage the folder"


def is_bundle(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz"))


def _refuse(path: Path, problem: str) -> QcdoctorError:
    return QcdoctorError(f"refused: {problem}", file=str(path), fix=_FIX)


def checked_members(path: Path, archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, once each is known to be safe to extract; a QcdoctorError otherwise."""
    members, names, total = [], set(), 0
    for member in archive:
        if len(members) >= MAX_MEMBERS:
            raise _refuse(path, f"more than {MAX_MEMBERS} members")
        name = PurePosixPath(member.name)
        if name.is_absolute() or member.name.startswith(("/", "\\")) or ":" in name.parts[0]:
            raise _refuse(path, f"the member {member.name!r} has an absolute path")
        if ".." in name.parts or "\\" in member.name:
            raise _refuse(path, f"the member {member.name!r} leaves the bundle (..)")
        if not (member.isfile() or member.isdir()):
            raise _refuse(path, f"the member {member.name!r} is a link or device, not a file")
        if member.size > MAX_MEMBER_BYTES:
            raise _refuse(path, f"the member {member.name!r} holds {member.size} bytes, more "
                                f"than {MAX_MEMBER_BYTES // MiB} MiB")
        total += member.size
        if total > MAX_TOTAL_BYTES:
            raise _refuse(path, f"more than {MAX_TOTAL_BYTES // MiB} MiB in all")
        key = name.as_posix()
        if key in names and member.isfile():
            raise _refuse(path, f"the member {member.name!r} is there twice")
        names.add(key)
        members.append(member)
    return members


@contextmanager
def opened_bundle(path: Path):
    """The case folder of the bundle at ``path``, extracted for the time of the block."""
    # imported here: every command asks is_bundle, few open a bundle
    import tarfile
    import tempfile
    if not path.is_file():
        raise QcdoctorError("no such bundle", file=str(path), fix="check the path")
    with tempfile.TemporaryDirectory(prefix="qcdoctor-bundle-") as tmp:
        try:
            with tarfile.open(path, "r:gz") as archive:
                members = checked_members(path, archive)
                # the data filter checks again (links, device files, modes) as it extracts
                archive.extractall(tmp, members=members, filter="data")
        except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
            raise QcdoctorError(f"not a readable .tar.gz bundle: {exc}", file=str(path),
                                fix=_FIX) from None
        case = Path(tmp) / CASE_DIR
        if not (case / "case.yaml").is_file():
            raise QcdoctorError(f"not a qcdoctor support bundle: no {CASE_DIR}/case.yaml in it",
                                file=str(path), fix=_FIX)
        yield case
