"""Where a user-named output (``-o``) goes, and the one writer for it.

As a shell's ``>``: a regular file (or a symlink to one: the link is kept) is replaced
atomically; /dev/null, a terminal, a FIFO, and a descriptor of this process (/dev/stdout,
/dev/stderr, /dev/fd/N, /proc/self/fd/N: a pipe, ``>(cmd)``) are written straight into,
never replaced. Anything else special (another device, a socket, the rest of /proc and
/sys) is refused. A write that fails (disk full, file-size limit, read-only, no
permission) is one clear error, and the earlier file at the path is left as it was.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from qcdoctor.atomic import discard, existing_mode, put_in_place, temporary_beside
from qcdoctor.errors import QcdoctorError

_SYSTEM = ("/proc", "/sys")             # kernel files: writing there changes the machine
_FD = re.compile(r"/proc/(\d+)(?:/task/\d+)?/fd/(\d+)")
_PLAIN_FIX = "give a file name, or /dev/stdout, /dev/null or a pipe"
_ELSEWHERE = "write it to another place (-o)"
# why a write failed, and what to do about it ({elsewhere}: where else it can go)
_BECAUSE = {
    errno.ENOSPC: ("no space left on the device", "free some space there, or {elsewhere}"),
    errno.EDQUOT: ("the disk quota is used up", "free some space there, or {elsewhere}"),
    errno.EFBIG: ("the file would pass the file-size limit (ulimit -f) or the largest file "
                  "the file system holds", "raise the limit (ulimit -f unlimited), or "
                                           "{elsewhere}"),
    errno.EROFS: ("the file system is read-only", "{elsewhere}"),
    errno.EACCES: ("permission denied", "choose a place you may write to, or "
                                        "change the permissions there"),
    errno.EPERM: ("operation not permitted", "choose a place you may write to, or "
                                             "change the permissions there"),
    errno.ENAMETOOLONG: ("the path is too long", "give a shorter name: rename the folder, "
                                                 "or write it higher up"),
}
STANDARD_OUTPUT = "standard output"


@dataclass(frozen=True)
class Target:
    shown: str                  # as the user gave it: named in messages
    path: str                   # the regular file to replace, or the special file to open
    stream: bool = False        # written straight into: no temporary file, never replaced
    fd: int | None = None       # a descriptor of this process to write into


def output_target(given: str | Path) -> Target:
    """Where ``given`` writes to; a QcdoctorError for a place that takes no output."""
    shown = str(given)
    hops = _hops(shown)
    for hop in hops:
        fd = _own_fd(hop)
        if fd is not None:
            return _fd_target(shown, fd)
        if _under_system(hop):
            raise QcdoctorError("a kernel file under /proc or /sys, not a place for output",
                                file=shown, fix=_PLAIN_FIX)
    final = hops[-1]
    if shown.endswith(("/", os.sep + ".")) and not os.path.isdir(final):
        raise QcdoctorError("this names a folder, and there is none", file=shown,
                            fix="give a file name for the output, e.g. report.md")
    try:
        info = os.stat(final)
    except FileNotFoundError:
        if not os.path.isdir(os.path.dirname(final)):
            raise QcdoctorError("the folder for the output does not exist", file=shown,
                                fix=f"create {os.path.dirname(final)} first") from None
        return Target(shown, final)
    except OSError as exc:              # a link loop, a file used as a folder, ...
        raise explained(exc, shown) from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        return Target(shown, final)
    if stat.S_ISDIR(mode):
        raise QcdoctorError("this is a folder", file=shown,
                            fix="give a file name for the output, e.g. report.md")
    if stat.S_ISFIFO(mode) or (stat.S_ISCHR(mode) and _plain_device(info.st_rdev)):
        return Target(shown, final, stream=True)
    kind = "a socket" if stat.S_ISSOCK(mode) else "a device"
    raise QcdoctorError(f"{kind}, not a file: no output is written into it", file=shown,
                        fix=_PLAIN_FIX)


def _hops(given: str) -> list[str]:
    """The absolute path, then each symlink's target in turn, folders resolved: the last
    is the file itself (or the place of a new one). A descriptor of this process
    (/proc/PID/fd/N) ends the chain: its link names no path to open."""
    path, hops = os.path.abspath(given), []
    for _ in range(40):                 # as the kernel's limit; a loop fails in os.stat
        folder, name = os.path.split(path)
        path = os.path.join(os.path.realpath(folder), name)
        hops.append(path)
        if _own_fd(path) is not None or not os.path.islink(path):
            break
        path = os.path.join(os.path.dirname(path), os.readlink(path))   # relative to it
    return hops


def _own_fd(path: str) -> int | None:
    match = _FD.fullmatch(path)
    return int(match[2]) if match and int(match[1]) == os.getpid() else None


def _under_system(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in _SYSTEM)


def under_system(path: str | Path) -> bool:
    """Whether ``path``, symlinks resolved, is under /proc or /sys (kernel files)."""
    return _under_system(os.path.realpath(path))


def _plain_device(rdev: int) -> bool:
    """/dev/null, /dev/tty and pseudo-terminals: the character devices a shell user writes
    output to. Opening others can act on hardware (a tape rewinds, a modem dials)."""
    major, minor = os.major(rdev), os.minor(rdev)
    return (major, minor) in ((1, 3), (5, 0)) or 136 <= major <= 143


def _fd_target(shown: str, fd: int) -> Target:
    """A descriptor the shell gave this process; not one qcdoctor opened itself (Python
    opens its own non-inheritable: writing there would corrupt its own pipes or files)."""
    import fcntl
    try:
        mode = os.fstat(fd).st_mode
        writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY
        given = os.get_inheritable(fd)
    except OSError:
        raise QcdoctorError(f"descriptor {fd} is not open in this process", file=shown,
                            fix=_PLAIN_FIX) from None
    if not given or stat.S_ISDIR(mode):
        raise QcdoctorError(f"descriptor {fd} was not given to this process for output",
                            file=shown, fix=_PLAIN_FIX)
    if not writable:
        raise QcdoctorError(f"descriptor {fd} is open for reading only", file=shown,
                            fix=_PLAIN_FIX)
    return Target(shown, f"/proc/self/fd/{fd}", stream=True, fd=fd)


def explained(exc: OSError, shown: str, replaced: bool = False, *,
              doing: str = "write the output", elsewhere: str = _ELSEWHERE,
              note: str = "") -> QcdoctorError:
    """One clear error for an output that could not be written: ``doing`` is what failed,
    ``elsewhere`` where else it can go, ``note`` what became of the output."""
    problem, fix = _BECAUSE.get(exc.errno, (exc.strerror or str(exc), "{elsewhere}"))
    if exc.errno == errno.ENAMETOOLONG:     # which limit, and by how much
        from qcdoctor.collectors.files import length_problem
        problem = length_problem(shown) or problem
    if replaced:
        note = "the earlier file there is left as it was"
    note = f"; {note}" if note else ""
    return QcdoctorError(f"cannot {doing}: {problem}{note}", file=shown,
                         fix=fix.format(elsewhere=elsewhere))


def standard_output_failed(exc: OSError) -> QcdoctorError:
    """One clear error for a write to stdout the system refused: what a shell's ``>``
    received is cut short, so the run must not end as if it had all been written."""
    if exc.errno == errno.EBADF:            # >&- (or 1<file): no byte can go there
        return QcdoctorError(f"{STANDARD_OUTPUT} is closed (or open for reading only): the "
                             "output cannot be written", fix="run it with standard output "
                             "open, or write the output to a file with -o FILE")
    return explained(exc, STANDARD_OUTPUT, elsewhere="write it to a file elsewhere with -o FILE",
                     note="what was written there is incomplete")


def make_folder(path: Path) -> None:
    """``path`` and its parents as folders, a failure being one clear error."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise explained(exc, str(path)) from None


class OutputFile:
    """``with OutputFile(path) as out: out.write(data)``: the data reaches the target
    only when the block ends without error (a regular file: atomically)."""

    def __init__(self, target: Target | str | Path):
        self.target = target if isinstance(target, Target) else output_target(target)
        self._handle = None
        self._temporary: str | None = None

    def __enter__(self) -> OutputFile:
        _file_size_errors()
        target = self.target
        try:
            if target.fd is not None:
                _flush_printed()
                self._handle = os.fdopen(target.fd, "wb", closefd=False)
            elif target.stream:
                self._handle = _open_special(target.path)
            else:
                fd, self._temporary = temporary_beside(target.path)
                self._handle = os.fdopen(fd, "wb")
        except OSError as exc:
            raise explained(exc, target.shown) from None
        return self

    def write(self, data: bytes) -> int:
        try:
            return self._handle.write(data)
        except BrokenPipeError:
            raise                           # the reader left: as a shell, stop quietly
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        try:
            self._handle.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None

    def __exit__(self, kind, value, traceback) -> bool:
        if kind is not None:
            self._abandon()
            return False
        try:
            self._handle.close()            # flushes; a descriptor given stays open
            if self._temporary is not None:
                put_in_place(self._temporary, self.target.path,
                             existing_mode(self.target.path))
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise self._failed(exc) from None
        return False

    def _failed(self, exc: OSError) -> QcdoctorError:
        self._abandon()
        earlier = self._temporary is not None and os.path.lexists(self.target.path)
        return explained(exc, self.target.shown, replaced=earlier)

    def _abandon(self) -> None:
        handle, self._handle = self._handle, None
        if handle is not None:
            try:
                handle.close()
            except OSError:                 # the data that failed, still buffered
                pass
        if self._temporary is not None:
            discard(self._temporary)


def write_output(target: Target | str | Path, text: str | bytes) -> None:
    """``text`` (UTF-8; undecodable file names escaped) written to the user's output."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "backslashreplace")
    with OutputFile(target) as out:
        out.write(data)


def _flush_printed() -> None:
    """What was printed so far comes before the output written into the same descriptor."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):       # closed: its own writes fail, not this one
            pass


def _open_special(path: str):
    """A FIFO or plain device opened for writing as it is: never created, never truncated;
    it must still be one once open (not swapped for a regular file meanwhile)."""
    fd = os.open(path, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    info = os.fstat(fd)
    if not (stat.S_ISFIFO(info.st_mode) or
            (stat.S_ISCHR(info.st_mode) and _plain_device(info.st_rdev))):
        os.close(fd)
        raise OSError(errno.EEXIST, "changed while opened: not written", path)
    return os.fdopen(fd, "wb")


def _file_size_errors() -> None:
    """Past the file-size limit the kernel sends SIGXFSZ, which by default ends the process
    without a word; ignored (as Python starts), the write fails with EFBIG instead."""
    if (hasattr(signal, "SIGXFSZ") and threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGXFSZ) == signal.SIG_DFL):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def same_file(target: Path, inputs: list[Path]) -> bool:
    """Whether ``target`` is one of ``inputs``: the same path once resolved, or a hard link
    (or a descriptor, /dev/stdout, open on one)."""
    resolved = os.path.realpath(target)         # never raises on a link loop
    try:
        info = os.stat(target)
        identity = (info.st_dev, info.st_ino)
    except OSError:
        identity = None
    for path in inputs:
        if not os.path.lexists(path):
            continue
        if os.path.realpath(path) == resolved:
            return True
        try:
            other = os.stat(path)
        except OSError:
            continue
        if identity == (other.st_dev, other.st_ino):
            return True
    return False


def printable(text: str) -> str:
    """``text`` with lone surrogates escaped, so it can be written as UTF-8."""
    if text.isascii():
        return text
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def emit(text: str, output: str | None, protected: list[Path]) -> None:
    """``text`` to stdout, or atomically to ``output`` unless that is one of the run's
    ``protected`` inputs."""
    text = printable(text)
    if output is None:
        sys.stdout.write(text)      # the command line's stdout says why a write failed
        return
    # where it goes first: /dev/stdout, a FIFO or a symlink is no file to replace, and a
    # device or kernel file is refused before it could be compared with the inputs
    target = output_target(output)
    if same_file(Path(output), protected):
        raise QcdoctorError("refusing to overwrite an input of this run", file=output,
                            fix="write the report to another file")
    write_output(target, text)
