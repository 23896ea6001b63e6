"""Reading an entry of the user's cache folder without trusting what is there.

A cache entry is only ever a regular file this user owns, that nobody else can write to,
of a bounded size. Anything else found at its name (a FIFO, which would block the read
forever; a link to /dev/zero, which never ends; a file planted by another user; a file
larger than any entry we write) is treated as a miss: the caller rebuilds and rewrites it.
"""

from __future__ import annotations

import os
import stat

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

    from .atomic import replaced_atomically
    try:
        with replaced_atomically(Path(path), 0o600, replace_any=True) as temporary, \
                open(temporary, "wb") as out:
            out.write(data)
    except OSError:
        pass
