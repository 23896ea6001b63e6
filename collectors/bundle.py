"""Support bundles (``qcdoctor pack``): their layout and reading one safely.

A bundle is a .tar.gz holding ``MANIFEST.json``, ``report/report.{md,json}`` and the case
under ``case/``. It comes from someone else, so it is opened like an untrusted archive:
only regular files and folders, relative names without ``..``, no links of any kind, at
most MAX_MEMBERS members, MAX_MEMBER_BYTES each and MAX_TOTAL_BYTES in all (as the
headers declare them: tarfile reads exactly that much), extracted into a private
temporary folder that is removed afterwards. Names as ``tar czf b.tar.gz -C dir .``
writes them (``./``, ``./case/case.yaml``) are read as the same names without ``./``.

The headers that tarfile reads whole into memory before it hands out a member (a GNU
long name or link name, a pax header, local or global) are checked from their own
512-byte header before a byte of their data is read: at most MAX_EXTENDED_BYTES each,
MAX_EXTENDED_TOTAL in all, MAX_EXTENDED_CHAIN in front of one member, at most
MAX_GLOBAL_KEYS global pax keys (every member copies them). Sparse members (GNU or pax),
whose maps tarfile also reads whole, are refused: qcdoctor pack never writes them.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path, PurePosixPath

from qcdoctor.errors import QcdoctorError

TYPE_CHECKING = False            # typing is not imported for it on every start
if TYPE_CHECKING:
    import tarfile

CASE_DIR = "case"
REPORT_DIR = "report"
MANIFEST = "MANIFEST.json"
MANIFEST_SCHEMA = "qcdoctor/bundle-v1"
KiB = 1 << 10
MiB = 1 << 20
MAX_MEMBERS = 20000
MAX_MEMBER_BYTES = 1024 * MiB
MAX_TOTAL_BYTES = 4096 * MiB
MAX_EXTENDED_BYTES = 64 * KiB       # one long name, long link name or pax header
MAX_EXTENDED_TOTAL = 4 * MiB        # all of them together
MAX_EXTENDED_CHAIN = 4              # of them in front of one member
MAX_GLOBAL_KEYS = 32                # keys of the global pax headers, copied to each member
_FIX = "ask for a bundle written by qcdoctor pack, or unpack it yourself and triage the folder"
# tar's type flags of the headers read whole before the member they describe
_EXTENDED = {b"L": "a GNU long name", b"K": "a GNU long link name", b"x": "a pax header",
             b"X": "a pax header", b"g": "a pax header"}


def is_bundle(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz"))


def _refuse(path: Path, problem: str) -> QcdoctorError:
    return QcdoctorError(f"refused: {problem}", file=str(path), fix=_FIX)


class _Refused(Exception):
    """Raised from within tarfile's reading: not an OSError, which tarfile rewords."""


def _checked_info_class(tarfile_module):
    """A TarInfo class that vets each header before tarfile reads what follows it; one
    class per archive opened: it keeps the archive's running totals."""
    base = tarfile_module.TarInfo

    class CheckedInfo(base):
        extended_total = 0
        chain = 0

        def _proc_member(self, archive):
            # tarfile's documented hook: the header is parsed, nothing after it is read yet
            cls = type(self)
            what = _EXTENDED.get(self.type)
            if self.type == tarfile_module.GNUTYPE_SPARSE:
                raise _Refused(f"the member {self.name!r} is a sparse file")
            if what is None:
                cls.chain = 0
                return super()._proc_member(archive)
            if self.size < 0 or self.size > MAX_EXTENDED_BYTES:
                raise _Refused(f"{what} of {self.size} bytes, more than the "
                               f"{MAX_EXTENDED_BYTES // KiB} KiB read for one")
            cls.extended_total += self.size
            if cls.extended_total > MAX_EXTENDED_TOTAL:
                raise _Refused(f"more than {MAX_EXTENDED_TOTAL // MiB} MiB of long names and "
                               "pax headers in all")
            cls.chain += 1
            if cls.chain > MAX_EXTENDED_CHAIN:
                raise _Refused(f"more than {MAX_EXTENDED_CHAIN} long names or pax headers "
                               "in front of one member")
            member = super()._proc_member(archive)
            if len(archive.pax_headers) > MAX_GLOBAL_KEYS:
                raise _Refused(f"more than {MAX_GLOBAL_KEYS} global pax header keys")
            return member

        # pax sparse files (GNU formats 0.0, 0.1, 1.0): their maps are read whole
        def _proc_gnusparse_00(self, next, pax_headers, buf):
            raise _Refused(f"the member {next.name!r} is a sparse file")

        def _proc_gnusparse_01(self, next, pax_headers):
            raise _Refused(f"the member {next.name!r} is a sparse file")

        def _proc_gnusparse_10(self, next, pax_headers, tarfile):
            raise _Refused(f"the member {next.name!r} is a sparse file")

    return CheckedInfo


def _normalised(path: Path, member: tarfile.TarInfo) -> str | None:
    """The member's name as it is extracted (``./case/x`` is ``case/x``); None for the
    folder of the bundle itself (``./``); a QcdoctorError for a name that names nothing."""
    raw = member.name
    if not raw:
        raise _refuse(path, "a member has an empty name")
    name = PurePosixPath(raw)
    if name.is_absolute() or raw.startswith(("/", "\\")) or \
            (name.parts and ":" in name.parts[0]):
        raise _refuse(path, f"the member {raw!r} has an absolute path")
    if ".." in name.parts or "\\" in raw:
        raise _refuse(path, f"the member {raw!r} leaves the bundle (..)")
    if not name.parts:                          # ".", "./", "././"
        if member.isdir():
            return None
        raise _refuse(path, f"the member {raw!r} names no file")
    return name.as_posix()


def checked_members(path: Path, archive: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Every member, once each is known to be safe to extract, named as it is extracted;
    a QcdoctorError otherwise."""
    members, names, total, seen = [], set(), 0, 0
    for member in archive:
        seen += 1
        if seen > MAX_MEMBERS:
            raise _refuse(path, f"more than {MAX_MEMBERS} members")
        key = _normalised(path, member)
        if not (member.isfile() or member.isdir()):
            raise _refuse(path, f"the member {member.name!r} is a link or device, not a file")
        if member.size < 0:                     # a pax header can say so
            raise _refuse(path, f"the member {member.name!r} declares a negative size")
        if member.size > MAX_MEMBER_BYTES:
            raise _refuse(path, f"the member {member.name!r} holds {member.size} bytes, more "
                                f"than {MAX_MEMBER_BYTES // MiB} MiB")
        # a pax header may state any time: one the platform cannot set (10**40, nan) is
        # only metadata, so the file gets the epoch instead of failing the extraction
        if not isinstance(member.mtime, (int, float)) or not 0 <= member.mtime < 2**33:
            member.mtime = 0
        total += member.size if member.isfile() else 0
        if total > MAX_TOTAL_BYTES:
            raise _refuse(path, f"more than {MAX_TOTAL_BYTES // MiB} MiB in all")
        if key is None:
            continue                            # the bundle's own folder: already there
        if key in names and member.isfile():
            raise _refuse(path, f"the member {member.name!r} is there twice")
        names.add(key)
        member.name = key
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
        EXTRACTED.add(tmp)
        try:
            yield _extracted_case(path, tmp, tarfile)
        finally:
            EXTRACTED.discard(tmp)


# the folders bundles are extracted into right now: a process that must leave at once
# (a batch worker told to stop) removes them first (remove_extracted)
EXTRACTED: set[str] = set()


def remove_extracted() -> None:
    import shutil
    for folder in list(EXTRACTED):
        shutil.rmtree(folder, ignore_errors=True)
        EXTRACTED.discard(folder)


def _extracted_case(path: Path, tmp: str, tarfile) -> Path:
    """The case folder of the bundle at ``path``, extracted into ``tmp``."""
    try:
        with tarfile.open(path, "r:gz", tarinfo=_checked_info_class(tarfile)) as archive:
            members = checked_members(path, archive)
            # the data filter checks again (links, device files, modes) as it extracts
            archive.extractall(tmp, members=members, filter="data")
    except _Refused as exc:
        raise _refuse(path, str(exc)) from None
    except (tarfile.TarError, EOFError, OSError, ValueError, OverflowError) as exc:
        raise QcdoctorError(f"not a readable .tar.gz bundle: {exc}", file=str(path),
                            fix=_FIX) from None
    case = Path(tmp) / CASE_DIR
    if not (case / "case.yaml").is_file():
        raise QcdoctorError(f"not a qcdoctor support bundle: no {CASE_DIR}/case.yaml in it",
                            file=str(path), fix=_FIX)
    return case
