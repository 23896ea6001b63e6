"""Shared by the API tests: the command line's output for the same case, and what this
process has running and open."""

from __future__ import annotations

import json
import os
from pathlib import Path

from qcdoctor.engine.commands.cli import main


def cli_output(out: Path, *args: str) -> str:
    """What ``qcdoctor ARGS -o out`` writes, run in this process (as a user's shell would
    run it, minus the start-up)."""
    assert main([*args, "-o", str(out)]) in (0, 1)
    return out.read_text(encoding="utf-8")


def cli_json(out: Path, *args: str) -> dict:
    """The JSON report ``qcdoctor ARGS --format json`` writes, parsed."""
    return json.loads(cli_output(out, *args, "--format", "json"))


def children() -> set[int]:
    """The processes this process started that are still there (zombies included)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
        except OSError:                     # gone meanwhile
            continue
        if int(fields[1]) == me:
            found.add(int(entry))
    return found


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))
