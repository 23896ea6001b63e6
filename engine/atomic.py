"""Write files atomically: a reader never sees half a file, a crash never truncates one."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def replaced_atomically(path: Path, mode: int = 0o644):
    """A temporary file beside ``path`` to write; it becomes ``path`` (synced to disk, with
    ``mode``) when the block ends without error, and is removed otherwise."""
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    with replaced_atomically(path, mode) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
