"""The files of a case folder, for artifact presence (bounded: huge trees are cut)."""

from __future__ import annotations

import os
from pathlib import Path

MAX_FILES = 20000
_SKIP_DIRS = {".git", "__pycache__", ".venv", "venv", "node_modules"}


def list_case_files(folder: Path | None, limit: int = MAX_FILES) -> list[str]:
    """Relative POSIX paths under ``folder``, sorted, at most ``limit`` of them."""
    found: list[str] = []
    if folder is None:
        return found
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            found.append(Path(root, name).relative_to(folder).as_posix())
            if len(found) >= limit:
                return found
    return found
