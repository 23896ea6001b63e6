"""A batch that meets a failure part-way: a report that cannot be written, a worker process
killed, Ctrl-C or SIGTERM. The other cases are written and complete, the failed one is
named with the reason, nothing half-written is left, no worker process outlives the run,
and the same command run again is never refused for what the batch itself left."""

from __future__ import annotations

import errno
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from qcdoctor.atomic import TEMPORARY_PREFIX
from qcdoctor.engine.commands import batch, output_file
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from tests.safety.test_fuzz import fuzz

NAMES = [f"case_{i:02d}" for i in range(10)]


@pytest.fixture(scope="module")
def example_case(tmp_path_factory) -> Path:
    """A bundled example that triages quickly, copied once for the module."""
    folder = tmp_path_factory.mktemp("example") / "wide_gap"
    with example_path("wide_gap") as source:
        shutil.copytree(source, folder)
    return folder


@pytest.fixture
def cases(tmp_path, example_case) -> list[Path]:
    folders = [tmp_path / "cases" / name for name in NAMES]
    for folder in folders:
        shutil.copytree(example_case, folder)
    return folders


class Run:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err


def run(*args) -> Run:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main([str(a) for a in args])
    return Run(code, out.getvalue(), err.getvalue())


def batch_args(cases: list[Path], out: Path, *extra) -> list:
    return ["triage", *cases, "--no-env", "--lang", "en", "--format", "json", "-o", out,
            *extra]


def summary(out: Path) -> dict:
    data = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert data["schema"] == "qcdoctor/batch-summary-v1"
    return data


def rows_by_name(out: Path) -> dict[str, dict]:
    return {Path(row["case"]).name: row for row in summary(out)["cases"]}


def assert_written(out: Path, names) -> None:
    """Each of ``names`` has its row and a complete report."""
    rows = rows_by_name(out)
    for name in names:
        row = rows[name]
        assert row["exit"] == 0 and row["error"] is None, row
        assert row["report"] == f"{name}/report.json"
        report = json.loads((out / row["report"]).read_text(encoding="utf-8"))
        assert report["schema"] == "qcdoctor/report-v1"


def assert_clean(result: Run) -> None:
    text = result.out + result.err
    assert "internal error" not in text and "Traceback" not in text, text


# --- a report that cannot be written ---------------------------------------------------------

class _FailingHandle:
    """A file on a disk that fails: every write raises ``failure``."""

    def __init__(self, handle, failure: BaseException):
        self._handle, self._failure = handle, failure

    def write(self, data):
        raise self._failure

    def flush(self):
        pass

    def close(self):
        self._handle.close()


def failing_on(failures: dict[str, BaseException], where: str):
    """(module, name, stand-in) for monkeypatch: the report of each case named in
    ``failures`` fails with its exception while written (``where`` "write") or while its
    folder is put in place ("folder"); every other write is real."""
    if where == "write":
        real_enter = output_file.OutputFile.__enter__

        def enter(self):
            opened = real_enter(self)
            failure = failures.get(Path(self.target.shown).parent.name)
            if failure is not None:
                self._handle = _FailingHandle(self._handle, failure)
            return opened
        return output_file.OutputFile, "__enter__", enter
    real_rename = os.rename

    def rename(source, target, *args, **kwargs):
        failure = failures.get(Path(target).name)
        if failure is not None:
            raise failure
        return real_rename(source, target, *args, **kwargs)
    return os, "rename", rename


@pytest.mark.parametrize("where", ["write", "folder"])
def test_a_case_whose_report_cannot_be_written_fails_alone_and_a_rerun_succeeds(
        cases, tmp_path, monkeypatch, where):
    out, victim = tmp_path / "out", NAMES[3]
    args = batch_args(cases, out, "--jobs", "1")
    with monkeypatch.context() as patched:
        patched.setattr(*failing_on({victim: OSError(errno.ENOSPC, "No space left")}, where))
        failed = run(*args)
    assert failed.code == 2
    assert_clean(failed)
    rows = rows_by_name(out)
    assert summary(out)["exit"] == 2
    row = rows[victim]
    assert row["exit"] == 2 and row["report"] is None
    assert str(out / victim) in row["error"] and "no space left on the device" in row["error"]
    assert "fix: free some space there" in row["error"]
    assert not (out / victim).exists()
    assert_written(out, [n for n in NAMES if n != victim])
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [*(n for n in NAMES if n != victim), "summary.json"])      # nothing half-made
    table = failed.out
    assert victim in table and "no space left on the device" in table
    assert "10 cases: 0 with a broken stage found, 9 undetermined, 0 with no consistency " \
        "problem, 1 with an error" in table

    again = run(*args)                                  # the same command, the disk freed
    assert again.code == 0, again.err
    assert_written(out, NAMES)


def test_an_interrupted_write_leaves_no_half_case_and_a_rerun_succeeds(cases, tmp_path,
                                                                       monkeypatch):
    out, victim = tmp_path / "out", NAMES[2]
    args = batch_args(cases, out, "--jobs", "1")
    with monkeypatch.context() as patched:
        patched.setattr(*failing_on({victim: KeyboardInterrupt()}, "write"))
        stopped = run(*args)
    assert stopped.code == 130 and "interrupted" in stopped.err
    assert_clean(stopped)
    assert not (out / victim).exists()
    assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
    for folder in (p for p in out.iterdir() if p.is_dir()):      # each there is complete
        json.loads((folder / "report.json").read_text(encoding="utf-8"))
    rows = rows_by_name(out)                    # the summary says nothing is vouched for
    assert summary(out)["exit"] == 2
    assert all(row["report"] is None and "stopped before" in row["error"]
               for row in rows.values())

    again = run(*args)
    assert again.code == 0, again.err
    assert_written(out, NAMES)


# what the atomic writer names a file it has not finished
LEFTOVER = f"{TEMPORARY_PREFIX}k3j_x9a2.tmp"


def test_the_batchs_own_leftovers_are_taken_but_not_a_users_files(cases, tmp_path):
    """A summary the batch was still writing when it was killed is its own; anything
    else in the folder is still refused."""
    out = tmp_path / "out"
    out.mkdir()
    (out / LEFTOVER).write_text('{"sch', encoding="utf-8")
    done = run(*batch_args(cases[:2], out, "--jobs", "1"))
    assert done.code == 0, done.err
    assert_written(out, NAMES[:2])

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / LEFTOVER).write_text("", encoding="utf-8")
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    refused = run(*batch_args(cases[:2], mine, "--jobs", "1"))
    assert refused.code == 2 and "this folder holds files a batch did not write" in refused.err
    assert sorted(p.name for p in mine.iterdir()) == [LEFTOVER, "notes.txt"]


# --- a worker killed -----------------------------------------------------------------------

def killing(victim: str, once: Path | None):
    """A stand-in triage that kills the worker process handling ``victim`` (only the first
    time, with ``once``: a marker file); never the process that runs the test."""
    real, test_process = batch._triage, os.getpid()

    def triage(path, settings):
        if Path(path).name == victim and os.getpid() != test_process:
            if once is None or not once.exists():
                if once is not None:
                    once.touch()
                os.kill(os.getpid(), signal.SIGKILL)
        return real(path, settings)
    return triage


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie does not)."""
    fields = _stat_fields(Path(f"/proc/{pid}"))
    return fields is not None and fields[0] not in ("Z", "X")


def still_running(pids, within: float = 15.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [pid for pid in pids if running(pid)]
        if not left:
            return []
        time.sleep(0.05)
    return left


def _stat_fields(entry: Path) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, pgrp, ...)."""
    try:
        return (entry / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def in_my_group() -> set[int]:
    """The processes of this process's group, itself aside: every process it forks, and
    theirs, whoever their parent is by now."""
    group, found = os.getpgrp(), set()
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(entry) if entry.name.isdigit() else None
        if fields and int(fields[2]) == group and int(entry.name) != os.getpid():
            found.add(int(entry.name))
    return found


def descendants(pid: int) -> set[int]:
    """Every process below ``pid``, read from /proc (each process's parent)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        fields = _stat_fields(entry) if entry.name.isdigit() else None
        if fields:
            parents[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


@pytest.mark.parametrize("always", [True, False], ids=["kills_every_time", "kills_once"])
def test_a_killed_worker_fails_only_its_case_and_the_rest_are_written(
        cases, tmp_path, monkeypatch, always):
    out, victim = tmp_path / "out", NAMES[4]
    monkeypatch.setattr(batch, "_triage", killing(victim, None if always else
                                                  tmp_path / "killed_once"))
    before = in_my_group()                  # this process's own engine worker, say
    done = run(*batch_args(cases, out, "--jobs", "2"))
    assert_clean(done)
    # no worker left behind, nor the engine worker of the killed one (an orphan by then)
    assert still_running(in_my_group() - before) == []
    if not always:                  # retried in a fresh worker, where it went through
        assert (tmp_path / "killed_once").exists()
        assert done.code == 0, done.err
        assert_written(out, NAMES)
        return
    assert done.code == 2
    assert summary(out)["exit"] == 2
    row = rows_by_name(out)[victim]
    assert row["exit"] == 2 and row["report"] is None
    assert row["error"].startswith(f"{cases[4]}: the worker ended by signal SIGKILL")
    assert "retried in a fresh worker" in row["error"]
    assert not (out / victim).exists()
    assert_written(out, [n for n in NAMES if n != victim])
    assert "the worker ended by signal SIGKILL" in done.out               # the table says so


def test_no_worker_process_to_be_had_is_one_clear_error(cases, tmp_path, monkeypatch):
    import multiprocessing.process

    def refused(self):
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refused)
    done = run(*batch_args(cases, tmp_path / "out", "--jobs", "2"))
    assert done.code == 2 and "cannot start a worker process" in done.err
    assert "--jobs 1 runs every case in this process" in done.err
    assert_clean(done)
    assert not (tmp_path / "out").exists()


# --- Ctrl-C and SIGTERM ----------------------------------------------------------------------

# the batch as the command runs it, with one case that holds its worker until stopped
SLOW_BATCH = """
import sys, time
from pathlib import Path
from qcdoctor.engine.commands import batch
from qcdoctor.engine.commands.cli import entry

real = batch._triage
def triage(path, settings):
    if Path(path).name == sys.argv[2]:
        Path(sys.argv[1]).touch()
        time.sleep(120)
    return real(path, settings)
batch._triage = triage
entry(sys.argv[3:])
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_a_stopped_batch_leaves_no_half_case_and_no_worker(cases, tmp_path, signum):
    out, started = tmp_path / "out", tmp_path / "started"
    args = [str(a) for a in batch_args(cases, out, "--jobs", "2")]
    child = subprocess.Popen([sys.executable, "-c", SLOW_BATCH, str(started), NAMES[6], *args],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not started.exists():
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the slow case never started"
            time.sleep(0.01)
        below = descendants(child.pid)
        assert below, "no worker process found"
        if signum == signal.SIGINT:         # Ctrl-C reaches every process of the terminal's job
            os.killpg(child.pid, signal.SIGINT)
        else:
            child.send_signal(signum)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
    assert child.returncode == 128 + signum, err
    words = "qcdoctor: interrupted" if signum == signal.SIGINT else "stopped by SIGTERM"
    assert words in err and "Traceback" not in err and "internal error" not in err, err
    assert still_running(below) == []
    if out.exists():                            # whatever is there is complete
        for folder in (p for p in out.iterdir() if p.is_dir()):
            json.loads((folder / "report.json").read_text(encoding="utf-8"))
        assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []


# --- any case's write failing, in any order -------------------------------------------------

FAILURES = {"write_enospc": ("write", OSError(errno.ENOSPC, "full")),
            "write_eacces": ("write", OSError(errno.EACCES, "denied")),
            "write_interrupted": ("write", KeyboardInterrupt()),
            "folder_enospc": ("folder", OSError(errno.ENOSPC, "full")),
            "folder_interrupted": ("folder", KeyboardInterrupt())}


@fuzz(ci_examples=40)
@given(plan=st.lists(st.tuples(st.booleans(), st.sampled_from([None, None, *FAILURES])),
                     min_size=1, max_size=6),
       kept=st.lists(st.booleans(), min_size=6, max_size=6))
def test_whatever_fails_the_folder_stays_the_batchs_own_and_complete(plan, kept):
    """Cases with or without a report, each write failing (full disk, no permission,
    Ctrl-C; writing the report or putting its folder in place) or not, over an earlier
    batch's output or not: every row with a report has it whole, no case folder is
    half-made or lost, and a rerun is accepted."""
    import tempfile

    from qcdoctor.engine.commands.batch import CaseResult
    from qcdoctor.engine.commands.batch_output import check_output_folder, write_outputs

    names = [f"c{i}" for i in range(len(plan))]
    has_report = {name: has for name, (has, _) in zip(names, plan, strict=True)}
    failing = {name: FAILURES[failure] for name, (_, failure) in zip(names, plan, strict=True) if failure}

    def results():
        return [CaseResult(f"/cases/{name}", stage="convert",
                           text=f"report of {name}\n" if has_report[name] else None,
                           error=None if has_report[name] else f"/cases/{name}: broken",
                           exit=0 if has_report[name] else 2) for name in names]

    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "out"
        write_outputs(out, results(), "md", "en", html=True)            # an earlier run
        for name, keep in zip(names, kept[:len(names)], strict=True):
            if not keep and (out / name).exists():
                (out / name / "report.md").unlink()
                (out / name).rmdir()
        earlier = {name: (out / name / "report.md").read_text() for name in names
                   if (out / name).exists()}
        rows = results()
        interrupted = False
        with pytest.MonkeyPatch.context() as patched:
            for where in ("write", "folder"):
                patched.setattr(*failing_on({name: failure for name, (at, failure)
                                             in failing.items() if at == where}, where))
            try:
                write_outputs(out, rows, "md", "en", html=True)
            except KeyboardInterrupt:
                interrupted = True

        check_output_folder(out)                # a rerun is never refused
        data = summary(out)
        assert [Path(row["case"]).name for row in data["cases"]] == names
        for name, row in zip(names, data["cases"], strict=True):
            report = out / name / "report.md"
            if row["report"] is not None:
                assert report.read_text() == f"report of {name}\n"
            else:
                assert row["exit"] == 2 and row["error"], row
            if name in earlier:                 # replaced whole, or left as it was
                assert report.read_text() in (f"report of {name}\n", earlier[name])
            elif (out / name).exists():         # made by this run: only whole
                assert report.read_text() == f"report of {name}\n"
        assert [p.name for p in out.iterdir() if p.name.startswith(".")] == []
        if not interrupted:
            # a folder put in place over an earlier one is no new folder: written in place
            unwritten = {n for n, (at, _) in failing.items()
                         if has_report[n] and (at == "write" or n not in earlier)}
            assert {n for n, r in zip(names, rows, strict=True) if r.exit == 2 and has_report[n]} == unwritten
            assert data["exit"] == (2 if unwritten or not all(has_report.values()) else 0)
