"""``-o`` onto special files, and writes that fail: /dev/null, /dev/stdout, pipes and FIFOs
are written into (never replaced), a symlink is written through, other devices, sockets
and kernel files are refused, and a full disk or a file-size limit is one clear error that
leaves the earlier file as it was. No device node is created: /dev/null is checked, the
rest is FIFOs, sockets and pipes made here."""

from __future__ import annotations

import errno
import json
import os
import resource
import socket
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from qcdoctor.engine.commands.examples import example_path
from qcdoctor.errors import QcdoctorError

EXAMPLE = ("--example", "wide_gap", "--lang", "en")


def qcdoctor(*args: str, cwd: Path, **streams) -> subprocess.CompletedProcess:
    """The CLI as a shell runs it (``streams``: stdout=..., pass_fds=..., ...)."""
    streams.setdefault("stdout", subprocess.PIPE)
    streams.setdefault("stderr", subprocess.PIPE)
    return subprocess.run([sys.executable, "-m", "qcdoctor", *args], cwd=cwd, timeout=180,
                          **streams)


def clear_error(done: subprocess.CompletedProcess, *words: str) -> str:
    """The run ended with one qcdoctor error (exit 2) saying ``words``, no traceback."""
    err = done.stderr.decode("utf-8", "replace")
    assert done.returncode == 2, err
    assert err.startswith("qcdoctor: error: "), err
    assert "internal error" not in err and "Traceback" not in err, err
    for word in words:
        assert word in err
    return err


def dev_null() -> tuple[int, int, int]:
    info = os.stat("/dev/null")
    assert stat.S_ISCHR(info.st_mode), "/dev/null is no device before the run"
    return info.st_ino, info.st_rdev, info.st_mode


@pytest.mark.parametrize("via_link", [False, True])
def test_dev_null_stays_the_device(tmp_path, via_link):
    before = dev_null()
    target = "/dev/null"
    if via_link:
        (tmp_path / "null.md").symlink_to("/dev/null")
        target = "null.md"
    done = qcdoctor("triage", *EXAMPLE, "-o", target, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == b"" and done.stderr == b""
    assert dev_null() == before                 # the same node, not a file in its place
    if via_link:
        assert os.readlink(tmp_path / "null.md") == "/dev/null"
    assert sorted(p.name for p in tmp_path.iterdir()) == (["null.md"] if via_link else [])


@pytest.mark.parametrize("args", [("triage", *EXAMPLE, "--format", "json"),
                                  ("rules", "docs", "--lang", "en")])
def test_dev_stdout_and_dev_stderr_are_written_into(tmp_path, args):
    done = qcdoctor(*args, "-o", "/dev/stdout", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = done.stdout.decode("utf-8")
    if "json" in args:
        assert json.loads(text)["schema"] == "qcdoctor/report-v1"
    else:
        assert text.startswith("#") and len(text) > 1000
    done = qcdoctor(*args, "-o", "/dev/stderr", cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == b""
    assert done.stderr.decode("utf-8") == text


def test_dev_stdout_into_a_file_opened_for_append_adds_to_it(tmp_path):
    """``qcdoctor ... -o /dev/stdout >> log``: the shell's file gets the report after what
    it held; it is not replaced by another file."""
    log = tmp_path / "log.txt"
    log.write_bytes(b"before\n")
    inode = log.stat().st_ino
    with open(log, "ab") as out:
        done = qcdoctor("triage", *EXAMPLE, "--format", "json", "-o", "/dev/stdout",
                        cwd=tmp_path, stdout=out)
    assert done.returncode == 0, done.stderr
    data = log.read_bytes()
    assert data.startswith(b"before\n{") and json.loads(data[len(b"before\n"):])
    assert log.stat().st_ino == inode and sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]


@pytest.mark.parametrize("form", ["/dev/fd/{}", "/proc/self/fd/{}"])
def test_a_pipe_given_as_a_descriptor_is_written_into(tmp_path, form):
    """``-o >(cmd)``: the shell passes a pipe as /dev/fd/N."""
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-m", "qcdoctor", "triage", *EXAMPLE,
                                  "--format", "json", "-o", form.format(write_end)],
                                 cwd=tmp_path, pass_fds=(write_end,),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        os.close(write_end)
        write_end = None
        with open(read_end, "rb", closefd=False) as reader:
            data = reader.read()
        out, err = child.communicate(timeout=180)
    finally:
        os.close(read_end)
        if write_end is not None:
            os.close(write_end)
    assert child.returncode == 0, err
    assert json.loads(data)["schema"] == "qcdoctor/report-v1" and out == b""


def test_a_fifo_with_a_reader_is_written_into_and_kept(tmp_path):
    fifo = tmp_path / "reports.fifo"
    os.mkfifo(fifo)
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdout.buffer.write("
                               "open(sys.argv[1], 'rb').read())", str(fifo)],
                              stdout=subprocess.PIPE)
    try:
        done = qcdoctor("triage", *EXAMPLE, "--format", "json", "-o", fifo.name, cwd=tmp_path)
        data, _ = reader.communicate(timeout=60)
    finally:
        if reader.poll() is None:       # qcdoctor never opened it: let the reader go
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            reader.wait(timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(data)["schema"] == "qcdoctor/report-v1"
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["reports.fifo"]


def test_a_symlink_to_a_file_is_written_through_and_kept(tmp_path):
    real = tmp_path / "kept" / "real.md"
    real.parent.mkdir()
    real.write_text("earlier", encoding="utf-8")
    real.chmod(0o600)
    (tmp_path / "link.md").symlink_to(Path("kept") / "real.md")
    dangling = tmp_path / "new.md"
    dangling.symlink_to(Path("kept") / "created.md")
    for name in ("link.md", "new.md"):
        done = qcdoctor("triage", *EXAMPLE, "-o", name, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
    assert (tmp_path / "link.md").is_symlink() and dangling.is_symlink()
    for written in (real, tmp_path / "kept" / "created.md"):
        assert written.read_text(encoding="utf-8").startswith("# Consistency")
    assert stat.S_IMODE(real.stat().st_mode) == 0o600
    assert sorted(p.name for p in real.parent.iterdir()) == ["created.md", "real.md"]


def test_sockets_kernel_files_and_unknown_descriptors_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)             # a relative socket name: no path-length limit
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("report.sock")
    (tmp_path / "loop.md").symlink_to("loop.md")
    (tmp_path / "status.md").symlink_to("/proc/self/status")
    try:
        cases = [("report.sock", "a socket, not a file"),
                 ("/proc/self/status", "a kernel file under /proc or /sys"),
                 ("status.md", "a kernel file under /proc or /sys"),
                 ("/sys/qcdoctor-no-such-file", "a kernel file under /proc or /sys"),
                 ("/dev/fd/250", "descriptor 250 is not open in this process"),
                 ("loop.md", "cannot write the output"),
                 ("no/such/folder/r.md", "the folder for the output does not exist"),
                 (".", "this is a folder"),
                 ("new.md/", "this names a folder")]
        for target, words in cases:
            done = qcdoctor("triage", *EXAMPLE, "-o", target, cwd=tmp_path)
            assert target in clear_error(done, words, "fix: ")
        assert stat.S_ISSOCK(os.lstat("report.sock").st_mode)
    finally:
        server.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["loop.md", "report.sock", "status.md"]


def _file_size_limit(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_a_file_size_limit_is_a_clear_error_and_the_earlier_file_is_kept(tmp_path):
    report = tmp_path / "report.json"
    report.write_bytes(b"earlier\n")
    done = qcdoctor("triage", *EXAMPLE, "--format", "json", "-o", report.name, cwd=tmp_path,
                    preexec_fn=_file_size_limit(2000))
    clear_error(done, "report.json: cannot write the output: the file would pass the "
                      "file-size limit", "the earlier file there is left as it was",
                "ulimit -f unlimited")
    assert report.read_bytes() == b"earlier\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]    # no temporary


def test_a_bundle_past_the_file_size_limit_leaves_nothing(tmp_path):
    with example_path("wide_gap") as case:
        done = qcdoctor("pack", str(case), "--no-env", "-o", "b.tar.gz", cwd=tmp_path,
                        preexec_fn=_file_size_limit(2000))
    clear_error(done, "b.tar.gz: cannot write the output", "file-size limit")
    assert list(tmp_path.iterdir()) == []


def test_a_full_device_is_a_clear_error(tmp_path):
    """/dev/full answers every write with ENOSPC: stdout sent there, -o /dev/stdout."""
    with open("/dev/full", "wb") as full:
        done = qcdoctor("triage", *EXAMPLE, "-o", "/dev/stdout", cwd=tmp_path, stdout=full)
    clear_error(done, "/dev/stdout: cannot write the output: no space left on the device",
                "free some space")


@pytest.mark.parametrize("code, words", [
    (errno.ENOSPC, "no space left on the device"), (errno.EDQUOT, "quota"),
    (errno.EFBIG, "file-size limit"), (errno.EROFS, "read-only"),
    (errno.EACCES, "permission denied"), (errno.EPERM, "not permitted")])
def test_a_failed_write_names_the_file_and_keeps_the_earlier_one(tmp_path, monkeypatch,
                                                                 code, words):
    from qcdoctor.engine.commands import output_file
    target = tmp_path / "report.md"
    target.write_text("earlier", encoding="utf-8")
    real_fdopen = os.fdopen

    class Failing:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            raise OSError(code, os.strerror(code))

        def __getattr__(self, name):
            return getattr(self.handle, name)

    monkeypatch.setattr(output_file.os, "fdopen",
                        lambda *a, **k: Failing(real_fdopen(*a, **k)))
    with pytest.raises(QcdoctorError) as caught:
        output_file.write_output(target, "x" * 100_000)
    assert caught.value.file == str(target) and words in caught.value.problem
    assert "left as it was" in caught.value.problem and caught.value.fix
    assert target.read_text(encoding="utf-8") == "earlier"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_bundle_goes_to_stdout_with_its_messages_on_stderr(tmp_path):
    before = dev_null()
    with example_path("wide_gap") as case, open(tmp_path / "b.tar.gz", "wb") as out:
        done = qcdoctor("pack", str(case), "--no-env", "--lang", "en", "-o", "/dev/stdout",
                        cwd=tmp_path, stdout=out)
        assert done.returncode == 0, done.stderr
        assert b"/dev/stdout" in done.stderr
        assert qcdoctor("pack", str(case), "--no-env", "-o", "/dev/null",
                        cwd=tmp_path).returncode == 0
    assert dev_null() == before
    with tarfile.open(tmp_path / "b.tar.gz", "r:gz") as archive:
        assert "MANIFEST.json" in archive.getnames()


def test_atomic_writes_never_replace_a_special_file(tmp_path):
    """The writer under case.yaml and the caches: a FIFO (or device) at the path stays."""
    from qcdoctor.atomic import write_text_atomic
    fifo = tmp_path / "case.yaml"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(OSError, match="never replaced"):
        write_text_atomic(fifo, "schema: qcdoctor/case-v1\n")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert [p.name for p in tmp_path.iterdir()] == ["case.yaml"]


@pytest.mark.parametrize("found", ["fifo", "deep", "huge_number"])
def test_an_output_folder_whose_summary_is_no_summary_is_refused_at_once(tmp_path, found):
    out = tmp_path / "out"
    out.mkdir()
    summary = out / "summary.json"
    if found == "fifo":
        os.mkfifo(summary)                    # read, it would wait for a writer forever
    elif found == "deep":
        summary.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    else:
        summary.write_text('{"schema": "qcdoctor/batch-summary-v1", "n": ' + "9" * 5000 + "}",
                           encoding="utf-8")
    with example_path("convert_j6p") as one, example_path("board_only") as two:
        done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", str(one), str(two),
                               "-o", str(out)], capture_output=True, text=True, cwd=tmp_path,
                              timeout=60)
    assert done.returncode == 2 and "a batch did not write" in done.stderr, done.stderr
    assert "internal error" not in done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["summary.json"]     # nothing written
