"""Fuzzing where a report goes: a random format, written to a random place that takes it
whole or fails on the way (stdout a file, a full device, a closed descriptor, a file-size
limit; ``-o`` a file, a path whose folder is missing, a read-only folder). Whatever the
pairing: exit 0 only with the whole report there, else exit 2 with one message on stderr;
the case read is never changed.

Same settings as tests/safety/test_fuzz.py: a fixed seed and few examples in CI (each runs
a triage, the second kind in a process of its own); ``QCDOCTOR_FUZZ_EXAMPLES=N`` runs a
longer campaign.
"""

from __future__ import annotations

import errno
import functools
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from tests.commands.test_output_failures import fingerprint
from tests.safety.test_fuzz import fuzz

FORMATS = ("md", "html", "json", "sarif", "junit")


@pytest.fixture(scope="module")
def case():
    """A case folder with an artifact read (its compile script), never to be changed."""
    with tempfile.TemporaryDirectory() as folder, example_path("board_nv12_deploy") as source:
        shutil.copytree(source, Path(folder) / "case")
        yield Path(folder) / "case"


@functools.cache
def whole(case: Path, fmt: str) -> bytes:
    """The report in ``fmt`` as a run that nothing stops writes it."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report"
        assert main(["triage", str(case), "--no-env", "--format", fmt, "-o", str(report)]) == 0
        return report.read_bytes()


def assert_whole(data: bytes, fmt: str, expected: bytes) -> None:
    if fmt in ("json", "sarif"):
        json.loads(data)
    elif fmt == "junit":
        ElementTree.fromstring(data)
    assert data == expected


def assert_said(code: int, err: str) -> None:
    """A failed output: exit 2, one qcdoctor error, no traceback."""
    assert code == 2, err
    assert err.startswith("qcdoctor: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err


# --- in this process: stdout swapped for streams that fail as the system's do -----------

class SizeLimited(io.RawIOBase):
    """A file under a file-size limit: the write that reaches it is cut short, the next
    fails with EFBIG, as the kernel does with SIGXFSZ ignored."""

    def __init__(self, limit: int):
        self.limit, self.data = limit, bytearray()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        room = self.limit - len(self.data)
        if room <= 0:
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        taken = bytes(data[:room])
        self.data += taken
        return len(taken)


def _raw(kind: str, folder: Path, limit: int):
    if kind == "file":
        return io.FileIO(folder / "stdout", "w")
    if kind == "full":
        return io.FileIO("/dev/full", "w")
    if kind == "closed":                 # as a descriptor opened for reading: EBADF
        return io.FileIO(os.open(os.devnull, os.O_RDONLY), "w")
    return SizeLimited(limit)


def _stdout(raw, unbuffered: bool) -> io.TextIOWrapper:
    """A stdout over ``raw`` as Python makes it: buffered, or written through straight to
    the file (python -u, PYTHONUNBUFFERED)."""
    if unbuffered:
        return io.TextIOWrapper(raw, encoding="utf-8", write_through=True)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8")


def _written(raw, folder: Path) -> bytes:
    if isinstance(raw, SizeLimited):
        return bytes(raw.data)
    stdout = folder / "stdout"
    return stdout.read_bytes() if stdout.exists() else b""


def _close(stream: io.TextIOWrapper, raw) -> None:
    try:
        stream.close()              # what failed is still buffered: its flush fails again
    except OSError:
        pass
    raw.close()


@fuzz(10)
@given(fmt=st.sampled_from(FORMATS),
       place=st.sampled_from(["stdout file", "stdout full", "stdout closed", "stdout limit",
                              "-o file", "-o missing folder", "-o read-only folder"]),
       unbuffered=st.booleans(), limit=st.integers(0, 60_000))
def test_a_report_is_whole_or_its_failure_is_said(case, fmt, place, unbuffered, limit):
    before = fingerprint(case)
    expected = whole(case, fmt)
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        kind, _, where = place.partition(" ")
        raw = _raw(where, folder, limit) if kind == "stdout" else io.BytesIO()
        stream, err = _stdout(raw, unbuffered), io.StringIO()
        output = {"file": folder / "r", "missing folder": folder / "none" / "r",
                  "read-only folder": folder / "locked" / "r"}.get(where)
        if where == "read-only folder":
            output.parent.mkdir(mode=0o555)     # root writes there all the same: also whole
        args = ["-o", str(output)] if kind == "-o" else []
        try:
            with redirect_stdout(stream), redirect_stderr(err):
                code = main(["triage", str(case), "--no-env", "--format", fmt, *args])
            if kind == "stdout" and code == 0:
                stream.flush()
                data = _written(raw, folder)
            elif kind == "-o" and code == 0:
                data = output.read_bytes()
        finally:
            _close(stream, raw)
        event(f"{place}: exit {code}")
        if code == 0:
            assert err.getvalue() == ""
            assert_whole(data, fmt, expected)
        else:
            assert_said(code, err.getvalue())
            if kind == "-o":
                assert not output.exists()
    assert fingerprint(case) == before


# --- in a process of its own: the descriptors a shell gives ----------------------------

def _limit(size: int):
    def apply() -> None:
        import resource
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    return apply


def _closing(fd: int):
    return lambda: os.close(fd)


@fuzz(6)
@given(fmt=st.sampled_from(FORMATS),
       place=st.sampled_from(["stdout file", "stdout full", "stdout closed", "stdout limit",
                              "stderr closed", "-o missing folder"]),
       unbuffered=st.booleans())
def test_a_report_through_the_shells_descriptors_is_whole_or_said(case, fmt, place,
                                                                  unbuffered):
    before = fingerprint(case)
    expected = whole(case, fmt)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report"
        args = ["-o", str(Path(folder) / "none" / "r")] if place == "-o missing folder" else []
        setup = {"stdout closed": _closing(1), "stderr closed": _closing(2),
                 "stdout limit": _limit(len(expected) // 2)}.get(place)
        target = "/dev/full" if place == "stdout full" else report
        with open(target, "wb") as out:
            done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", str(case),
                                   "--no-env", "--format", fmt, *args], stdout=out,
                                  stderr=subprocess.PIPE, preexec_fn=setup, env=env,
                                  cwd=folder, timeout=180)
        err = done.stderr.decode("utf-8", "replace")
        event(f"{place}: exit {done.returncode}")
        if done.returncode == 0:
            assert err == ""
            assert_whole(report.read_bytes(), fmt, expected)
        elif place == "stderr closed":      # nothing can be said, and nothing is
            assert done.returncode == 2 and err == ""
        else:
            assert_said(done.returncode, err)
    assert place in ("stdout file", "stderr closed") or done.returncode == 2
    assert fingerprint(case) == before
