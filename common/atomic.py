"""Write files atomically: a reader never sees half a file, a crash never truncates one.

Only regular files are replaced: a device, FIFO or socket at the path is never turned into
a regular file (user-named outputs go through ``output_file``, which writes into those)."""

from __future__ import annotations

import errno
import os
import stat
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

# a temporary file's name: this, a random part, ".tmp"; never derived from the name it
# replaces, which may already be as long as a file name can be (255 bytes)
TEMPORARY_PREFIX = ".qcdoctor-"


def temporary_beside(path: str | Path, replace_any: bool = False) -> tuple[int, str]:
    """(open descriptor, name) of a new temporary file in ``path``'s folder: the same file
    system, so the rename that puts it in place is atomic. Refuses a path that holds
    something else than a regular file or a symlink, unless ``replace_any`` (a name in our
    own cache folder, where whatever lies there is ours to replace)."""
    path = Path(path)
    try:
        kind = None if replace_any else os.lstat(path).st_mode
    except FileNotFoundError:
        kind = None
    if kind is not None and not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        raise OSError(errno.EEXIST, "not a regular file: it is never replaced", str(path))
    return tempfile.mkstemp(dir=path.parent or ".", prefix=TEMPORARY_PREFIX, suffix=".tmp")


def put_in_place(temporary: str, path: str | Path, mode: int, durable: bool = True) -> None:
    """The written ``temporary`` becomes ``path`` with ``mode``. ``durable``: synced first, so
    after a crash the path holds the old file or the new one, never an empty one (what a
    rerun rewrites anyway, such as the probe's outputs, skips the sync: a reader still never
    sees half a file, and the two files are swapped where the system can, the old one
    then removed)."""
    if durable:
        fd = os.open(temporary, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.chmod(temporary, mode)
    if not durable and _exchanged(temporary, path):
        # it holds the replaced file now: gone at once, its blocks freed off this thread
        from qcdoctor.background_free import remove_freeing_later
        try:
            remove_freeing_later(temporary)
        except FileNotFoundError:
            pass
        return
    os.replace(temporary, path)


# renameat2's flag: the two names swap files atomically
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2 = None                           # libc's, once looked up (False: none)


def _exchanged(temporary: str | Path, path: str | Path) -> bool:
    """``temporary`` and ``path`` swapped atomically where the system can (Linux's
    renameat2): a file replaced by a rename is first written out by ext4 (its delayed
    allocation forced, a fraction of a millisecond a file), a swap is not. False where
    ``path`` holds no file or link to swap with, or the system cannot swap: the caller
    renames."""
    global _renameat2
    if _renameat2 is None:
        _renameat2 = _libc_renameat2()
    if not _renameat2:
        return False
    try:
        kind = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if not (stat.S_ISREG(kind) or stat.S_ISLNK(kind)):
        return False                        # a folder is never swapped away: rename refuses it
    return _renameat2(_AT_FDCWD, os.fsencode(temporary), _AT_FDCWD, os.fsencode(path),
                      _RENAME_EXCHANGE) == 0


def _libc_renameat2():
    """libc's renameat2 through ctypes, or False (not Linux, an older C library)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def discard(temporary: str) -> None:
    try:
        os.unlink(temporary)
    except FileNotFoundError:
        pass


def existing_mode(path: str | Path, default: int = 0o644) -> int:
    """The permission bits of the regular file at ``path`` (or a link's), else ``default``:
    never a device's mode."""
    try:
        info = os.stat(path)
    except OSError:
        return default
    return info.st_mode & 0o7777 if stat.S_ISREG(info.st_mode) else default


@contextmanager
def replaced_atomically(path: Path, mode: int = 0o644, durable: bool = True,
                        replace_any: bool = False):
    """A temporary file beside ``path`` to write; it becomes ``path`` (synced to disk unless
    not ``durable``, with ``mode``) when the block ends without error, and is removed
    otherwise. ``replace_any``: as for ``temporary_beside``."""
    fd, tmp = temporary_beside(path, replace_any)
    os.close(fd)
    try:
        yield tmp
        put_in_place(tmp, path, mode, durable)
    except BaseException:
        discard(tmp)
        raise


def write_text_atomic(path: str | Path, text: str, durable: bool = True) -> None:
    path = Path(path)
    with replaced_atomically(path, existing_mode(path), durable) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)


@contextmanager
def folder_made_atomically(path: str | Path):
    """A new temporary folder beside ``path`` to fill; it becomes ``path`` (absent, or an
    empty folder) when the block ends without error, and is removed with all it holds
    otherwise, an interrupt included: ``path`` never holds half of it."""
    path = Path(path)
    temporary = _new_folder_beside(path)
    try:
        yield temporary
        os.rename(temporary, path)      # takes an empty folder's place; never a full one's
    except BaseException:
        import shutil
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _new_folder_beside(path: Path) -> Path:
    """A new folder in ``path``'s folder, with the permissions a folder made there gets
    (mkdtemp's are the owner's alone)."""
    for _ in range(100):
        folder = path.parent / f"{TEMPORARY_PREFIX}{os.urandom(6).hex()}.tmp"
        try:
            os.mkdir(folder)
            return folder
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))
