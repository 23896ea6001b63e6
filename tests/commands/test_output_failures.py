"""Output that fails on its way out: a stdout that cannot grow (a full disk, the file-size
limit), stdout or stderr closed by the shell, ``diff -o`` aimed at what it read, names too
long to look up, and an example copied onto a full disk. Each ends in exit 2 with one
message naming what failed and the fix (or, with stderr closed, exit 2 and the report
untouched by error text); never exit 0 with a report cut short, never a half copy."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from tests.commands.test_output_targets import _file_size_limit, clear_error, qcdoctor

EXAMPLE = ("--example", "convert_quant_analysis", "--lang", "en")
LIMIT = 2000                    # bytes: below every report of EXAMPLE, in every format


def environment(unbuffered: bool) -> dict:
    """This environment with PYTHONUNBUFFERED set or not: an unbuffered stdout writes
    straight to the file, where a short write was dropped without a word."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def closing(*fds: int):
    """A child set-up closing ``fds``, as ``>&-`` and ``2>&-`` do."""
    def close() -> None:
        for fd in fds:
            os.close(fd)
    return close


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` (links not followed) by its content's hash."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


# --- stdout that cannot grow ----------------------------------------------------------

@pytest.mark.parametrize("command, fmt, unbuffered", [
    ("triage", "md", True), ("triage", "html", True), ("triage", "json", True),
    ("triage", "sarif", True), ("triage", "junit", True), ("triage", "json", False),
    ("audit", "json", True), ("audit", "md", False)])
def test_a_report_on_stdout_past_the_file_size_limit_is_an_error(tmp_path, command, fmt,
                                                                  unbuffered):
    report = tmp_path / f"report.{fmt}"
    with open(report, "wb") as out:
        done = qcdoctor(command, *EXAMPLE, "--format", fmt, cwd=tmp_path, stdout=out,
                        preexec_fn=_file_size_limit(LIMIT), env=environment(unbuffered))
    assert clear_error(done, "standard output: cannot write the output", "file-size limit",
                       "incomplete", "fix: raise the limit (ulimit -f unlimited)")
    assert report.stat().st_size <= LIMIT


def test_ulimit_in_a_shell_then_a_redirect_is_an_error(tmp_path):
    """As typed: ``ulimit -f 4; qcdoctor triage ... --format json > f``."""
    done = subprocess.run(["bash", "-c", 'ulimit -f 4; "$0" -m qcdoctor triage --example '
                           'convert_j6e_no_retrain --format json > f', sys.executable],
                          cwd=tmp_path, capture_output=True, timeout=180)
    clear_error(done, "standard output", "file-size limit")
    assert (tmp_path / "f").stat().st_size == 4096


def _dumps(folder: Path) -> tuple[str, str]:
    import numpy as np
    for side in ("left", "right"):
        (folder / side).mkdir()
        np.save(folder / side / "out.npy", np.arange(12, dtype=np.float32))
    return str(folder / "left"), str(folder / "right")


@pytest.mark.parametrize("args", [
    ["examples"], ["schema", "report"], ["rules", "list"], ["rules", "explain", "AN010"],
    ["completion", "bash"], ["--help"], ["--version"], ["compare", "DUMPS"],
    ["diff", "CASE", "CASE"], ["collect", "CASE"], ["triage", "CASE", "CASE"],
    ["triage", "CASE", "CASE", "--format", "jsonl"], ["pack", "CASE", "-o", "b.tar.gz"],
    ["triage", *EXAMPLE]], ids=lambda args: "-".join(args[:3]))
def test_every_command_printing_to_a_full_disk_says_so(tmp_path, args):
    with example_path("wide_gap") as case:
        given = []
        for arg in args:
            given += _dumps(tmp_path) if arg == "DUMPS" else [str(case) if arg == "CASE" else arg]
        with open("/dev/full", "wb") as full:
            done = qcdoctor(*given, cwd=tmp_path, stdout=full)
    clear_error(done, "standard output: cannot write the output: no space left on the device",
                "fix: free some space")


# --- stdout and stderr closed by the shell -------------------------------------------

@pytest.mark.parametrize("args", [("triage", *EXAMPLE, "--format", "json"), ("examples",),
                                  ("--help",)])
def test_a_closed_stdout_is_said_and_exits_2(tmp_path, args):
    done = qcdoctor(*args, cwd=tmp_path, preexec_fn=closing(1))
    clear_error(done, "standard output is closed", "fix: ")


def test_a_closed_stdout_is_no_error_when_the_report_goes_to_a_file(tmp_path):
    done = qcdoctor("triage", *EXAMPLE, "--format", "json", "-o", "r.json", cwd=tmp_path,
                    preexec_fn=closing(1))
    assert done.returncode == 0 and done.stderr == b""
    assert json.loads((tmp_path / "r.json").read_bytes())["schema"] == "qcdoctor/report-v1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_closing_stdout_in_bash_is_said(tmp_path):
    done = subprocess.run(["bash", "-c", '"$0" -m qcdoctor examples >&-', sys.executable],
                          cwd=tmp_path, capture_output=True, timeout=180)
    clear_error(done, "standard output is closed")


@pytest.mark.parametrize("output", [None, "r.json"])
def test_a_closed_stderr_leaves_the_report_whole(tmp_path, output):
    """With fd 2 closed the next file opened would take its number: no error text may
    reach the report, on stdout or in the file."""
    extra = ("-o", output) if output else ()
    done = qcdoctor("triage", *EXAMPLE, "--format", "json", *extra, cwd=tmp_path,
                    preexec_fn=closing(2))
    assert done.returncode == 0
    data = (tmp_path / output).read_bytes() if output else done.stdout
    assert json.loads(data)["schema"] == "qcdoctor/report-v1"
    if output:
        assert done.stdout == b"" and sorted(p.name for p in tmp_path.iterdir()) == [output]


def test_a_closed_stderr_still_exits_2_and_prints_no_error_into_the_report(tmp_path):
    done = qcdoctor("triage", "--example", "no_such_example", "--format", "json",
                    cwd=tmp_path, preexec_fn=closing(2))
    assert done.returncode == 2 and done.stdout == b""
    with open("/dev/full", "wb") as full:
        done = qcdoctor("triage", *EXAMPLE, "--format", "json", cwd=tmp_path, stdout=full,
                        preexec_fn=closing(2))
    assert done.returncode == 2


def test_stderr_on_a_full_disk_changes_no_exit_code(tmp_path):
    with open("/dev/full", "wb") as full:
        good = qcdoctor("triage", *EXAMPLE, "--format", "json", cwd=tmp_path, stderr=full)
        bad = qcdoctor("triage", "--example", "no_such_example", cwd=tmp_path, stderr=full)
    assert good.returncode == 0 and json.loads(good.stdout)["schema"] == "qcdoctor/report-v1"
    assert bad.returncode == 2 and bad.stdout == b""


# --- diff -o never over what it read -------------------------------------------------

@pytest.fixture(scope="module")
def a_report(tmp_path_factory) -> Path:
    """A JSON report, for the side of a diff that is no case folder."""
    report = tmp_path_factory.mktemp("diff") / "report.json"
    assert main(["triage", "--example", "convert_quant_analysis", "--format", "json",
                 "-o", str(report)]) == 0
    return report


@pytest.fixture
def diff_sides(tmp_path, a_report):
    """A case folder with artifacts, of this test alone, and a JSON report."""
    with example_path("convert_quant_analysis") as case:
        shutil.copytree(case, tmp_path / "case")
    return tmp_path / "case", a_report


@pytest.mark.parametrize("side", ["old", "new"])
@pytest.mark.parametrize("target, via", [
    ("case.yaml", None), ("qa_convert/badcase.txt", None),
    ("case.yaml", "symlink"), ("qa_convert/compare_per_layer_out.txt", "symlink"),
    ("case.yaml", "hard link"), ("qa_convert/badcase.txt", "hard link")])
def test_diff_never_writes_over_a_file_of_a_case_folder_side(tmp_path, diff_sides, capsys,
                                                              side, target, via):
    case, report = diff_sides
    before = fingerprint(case)
    output = case / target
    if via == "symlink":
        output = tmp_path / "link.md"
        output.symlink_to(case / target)
    elif via == "hard link":
        output = tmp_path / "hard.md"
        os.link(case / target, output)
    sides = [str(case), str(report)] if side == "old" else [str(report), str(case)]
    assert main(["diff", *sides, "--no-env", "-o", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"{output}: refusing to overwrite an input of this run" in err and "fix: " in err
    assert fingerprint(case) == before
    if via == "symlink":
        assert output.is_symlink()


def test_diff_still_writes_a_new_file(tmp_path, diff_sides, capsys):
    case, report = diff_sides
    assert main(["diff", str(report), str(case), "--no-env", "--format", "json",
                 "-o", str(tmp_path / "d.json")]) == 0
    assert "verdict" in json.loads((tmp_path / "d.json").read_text(encoding="utf-8"))


# --- names too long to look up ------------------------------------------------------

TOO_LONG = "a file name has at most 255 bytes, and one here has 300"


@pytest.mark.parametrize("command", [
    ["triage", "LONG"], ["audit", "LONG"], ["collect", "LONG"], ["pack", "LONG", "-o", "b.tgz"],
    ["triage", "LONG/case.yaml"], ["diff", "LONG", "EXAMPLE"], ["diff", "EXAMPLE", "LONG"],
    ["examples", "--copy", "wide_gap", "LONG"], ["examples", "--copy", "wide_gap", "x/LONG/y"],
    ["triage", "--example", "wide_gap", "-o", "LONG"]], ids="-".join)
def test_a_name_over_255_bytes_is_one_clear_error(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    with example_path("wide_gap") as example:
        args = [a.replace("LONG", "é" * 150).replace("EXAMPLE", str(example)) for a in command]
        assert main([*args, "--no-env"] if command[0] in ("triage", "audit", "diff", "pack")
                    else args) == 2
    err = capsys.readouterr().err
    assert err.startswith("qcdoctor: error: ") and "internal error" not in err
    assert f"the path is too long: {TOO_LONG}" in err and "fix: give a shorter name" in err
    assert list(tmp_path.iterdir()) == []


def test_a_path_over_4095_bytes_is_one_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["triage", "d/" * 2100 + "case", "--no-env"]) == 2
    err = capsys.readouterr().err
    assert "the path is too long: a path has at most 4095 bytes" in err, err


def test_a_batch_names_the_case_whose_path_is_too_long(tmp_path, capsys):
    long_case = str(tmp_path / ("c" * 300))
    with example_path("wide_gap") as case:
        assert main(["triage", str(case), long_case, "--no-env", "--jobs", "1"]) == 2
    captured = capsys.readouterr()
    assert TOO_LONG in captured.out + captured.err
    assert "internal error" not in captured.out + captured.err


@pytest.mark.parametrize("length", [245, 255])
def test_an_output_named_as_long_as_a_name_can_be_is_written(tmp_path, capsys, length):
    """The temporary file beside it must fit in a file name too."""
    output = tmp_path / ("r" * (length - 5) + ".json")
    assert main(["triage", *EXAMPLE, "--format", "json", "-o", str(output)]) == 0
    assert json.loads(output.read_bytes())["schema"] == "qcdoctor/report-v1"
    assert [p.name for p in tmp_path.iterdir()] == [output.name]


def test_a_temporary_file_beside_any_name_fits_in_a_name(tmp_path):
    from qcdoctor.atomic import discard, temporary_beside
    fd, name = temporary_beside(tmp_path / ("n" * 255))
    os.close(fd)
    try:
        assert Path(name).parent == tmp_path and len(os.fsencode(Path(name).name)) <= 255
    finally:
        discard(name)


# --- examples --copy: whole or nothing ----------------------------------------------

def _failing_copy(monkeypatch, failure: BaseException, after: int) -> None:
    """shutil's file copy, the disk full (or Ctrl-C) after ``after`` files, the failing
    one half written."""
    real, copied = shutil.copyfile, []

    def copy(source, destination, **options):
        if len(copied) >= after:
            with open(destination, "wb") as handle:
                handle.write(b"half")
            raise failure
        copied.append(destination)
        return real(source, destination, **options)
    monkeypatch.setattr(shutil, "copyfile", copy)


@pytest.mark.parametrize("failure, code, words", [
    (OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), 2,
     ["cannot copy the example: no space left on the device", "fix: free some space"]),
    (OSError(errno.EFBIG, os.strerror(errno.EFBIG)), 2, ["file-size limit"]),
    (KeyboardInterrupt(), 130, ["interrupted"])], ids=["ENOSPC", "EFBIG", "Ctrl-C"])
def test_a_copy_that_fails_midway_leaves_nothing_and_the_next_one_works(
        tmp_path, monkeypatch, capsys, failure, code, words):
    destination = tmp_path / "mine"
    _failing_copy(monkeypatch, failure, after=2)
    assert main(["examples", "--copy", "convert_quant_analysis", str(destination)]) == code
    err = capsys.readouterr().err
    assert "internal error" not in err and all(word in err for word in words), err
    assert list(tmp_path.iterdir()) == []                # no half case, no temporary folder
    monkeypatch.undo()
    assert main(["examples", "--copy", "convert_quant_analysis", str(destination)]) == 0
    with example_path("convert_quant_analysis") as example:
        assert fingerprint(destination) == fingerprint(example)


def test_a_failed_copy_into_an_empty_folder_leaves_it_empty(tmp_path, monkeypatch, capsys):
    destination = tmp_path / "mine"
    destination.mkdir()
    _failing_copy(monkeypatch, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), after=1)
    assert main(["examples", "--copy", "convert_quant_analysis", str(destination)]) == 2
    assert f"{destination}: cannot copy the example" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["mine"]
    assert list(destination.iterdir()) == []
