"""The user's cache folder, and reading an entry of it without trusting what is there.

A cache entry is only ever a regular file this user owns, that nobody else can write to,
of a bounded size. Anything else found at its name (a FIFO, which would block the read
forever; a link to /dev/zero, which never ends; a file planted by another user; a file
larger than any entry we write) is treated as a miss: the caller rebuilds and rewrites it.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# no entry we write comes near this: the parsed rule book is the largest, about 1 MiB
MAX_ENTRY_BYTES = 32 << 20
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
    | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def read_entry(path, limit: int = MAX_ENTRY_BYTES) -> bytes | None:
    """The bytes of the cache entry at ``path``, or None when it is missing or not a
    plain private file of at most ``limit`` bytes."""
    try:
        # O_NOFOLLOW: a link is refused at open; O_NONBLOCK: a FIFO opens without a writer
        fd = os.open(path, _FLAGS)
    except OSError:
        return None
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return None
        if hasattr(os, "getuid") and (status.st_uid != os.getuid() or status.st_mode & 0o022):
            return None
        chunks, left = [], status.st_size + 1      # one byte more: a file still growing
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        return data if len(data) <= limit else None
    except OSError:
        return None
    finally:
        os.close(fd)


def write_entry(path, data: bytes) -> None:
    """Put ``data`` at ``path`` atomically, private to this user, replacing whatever is there:
    in our own cache folder a FIFO or link at an entry's name is a miss to overwrite, not a
    user's file to keep. A cache that cannot be written only costs the next run time, so
    nothing is raised."""
    from pathlib import Path

    from qcdoctor.atomic import replaced_atomically
    try:
        with replaced_atomically(Path(path), 0o600, replace_any=True) as temporary, \
                open(temporary, "wb") as out:
            out.write(data)
    except OSError:
        pass


def cache_dir() -> Path | None:
    chosen = os.environ.get("QCDOCTOR_CACHE_DIR")
    if chosen:
        return None if chosen.lower() == "off" else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "qcdoctor"


def private_dir(name: str) -> Path | None:
    """``cache_dir()/name``, created for this user alone; None when there is no cache folder
    or it is not this user's own (a folder others can write to could plant code there)."""
    base = cache_dir()
    if base is None:
        return None
    folder = base / name
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        status = folder.stat()
    except OSError:
        return None
    if hasattr(os, "getuid") and status.st_uid != os.getuid() or status.st_mode & 0o022:
        return None
    return folder
