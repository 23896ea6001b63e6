"""One policy for what case text may show, in every output (common/safe_text.py): control
characters, DEL and bidi controls never reach a terminal, a report or an error message
raw; lone surrogates (names that are not UTF-8) are shown escaped, never crash a plot;
output never fails on the locale's encoding; a terminal width is always a sane one.

The command line is run as users run it (a subprocess, or a pseudo-terminal)."""

from __future__ import annotations

import copy
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case, triage_path
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.junit import render_junit
from qcdoctor.engine.reports.sarif import render_sarif
from qcdoctor.engine.reports.terminal import render_terminal
from qcdoctor.engine.reports.termtext import MAX_WIDTH, MIN_WIDTH, clamp_width, terminal_width
from qcdoctor.errors import QcdoctorError
from qcdoctor.safe_text import json_escapes, json_text, one_line, visible

# every kind of character the policy hides: C0 (NUL, BEL, ESC, CR), DEL, C1 (NEL, CSI)
# and the bidi controls (ALM, LRM, RLM, LRE..RLO, LRI..PDI)
HIDDEN = ["\x00", "\x07", "\x1b", "\r", "\x7f", "\x85", "\x9b", "\u061c", "\u200e", "\u200f",
          "\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068",
          "\u2069"]
# a window title, a bell, a screen clear and a right-to-left override
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\u202egnp.exe"
SGR = re.compile(r"\x1b\[[0-9;]*m")          # the terminal view's own colours


def _raw(text: str, ansi_colours: bool = False) -> list[str]:
    """The hidden characters ``text`` holds raw (the view's own colour codes aside)."""
    if ansi_colours:
        text = SGR.sub("", text)
    return [repr(c) for c in HIDDEN if c in text]


def _env(**extra: str) -> dict:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "PYTHONIOENCODING",
                            "PYTHONUTF8", "LC_ALL", "LC_CTYPE", "LANG")}
    environ.update(PYTHONIOENCODING="utf-8", **extra)
    return environ


def qcdoctor(*args, cwd: Path, env: dict | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """The CLI as a shell runs it, its output as bytes."""
    return subprocess.run([sys.executable, "-m", "qcdoctor", *args], cwd=cwd,
                          capture_output=True, timeout=timeout,
                          env=env if env is not None else _env())


# --- the policy --------------------------------------------------------------------------

def test_the_policy():
    for char in HIDDEN:
        assert visible(f"a{char}b") == "a\ufffdb", repr(char)
        assert visible(f"a{char}b", lines=False) == "a\ufffdb", repr(char)
    assert visible("a\tb\nc") == "a\tb\nc"                  # lines keep their breaks
    assert visible("a\tb\nc", lines=False) == "a\ufffdb\ufffdc"
    assert visible("case_\udcff") == "case_\\udcff"          # undecodable: escaped
    assert visible("普通 text, ✓ → ok") == "普通 text, ✓ → ok"
    assert one_line(" a\n\tb\x1b ") == "a b\ufffd"
    # JSON escapes them in its text and keeps the data as it was
    data = {"t": "".join(HIDDEN) + "\udcff"}
    text = json_text(json.dumps(data, ensure_ascii=False))
    assert not _raw(text) and "\udcff" not in text and json.loads(text) == data


def test_error_messages_show_every_part_visibly():
    error = QcdoctorError(f"bad {HOSTILE}", file=f"dir{HOSTILE}/case.yaml", line=3,
                          key=f"k{HOSTILE}\nx", fix=f"remove {HOSTILE}")
    shown = error.render()
    assert not _raw(shown) and str(error) == shown
    assert shown.count("\n") == 1                               # the key's break too
    assert shown.startswith("dir\ufffd]0;pwned\ufffd")


# --- error messages from the command line --------------------------------------------------

CASE_HEAD = "schema: qcdoctor/case-v1\n"
YAML_KEY = '"\\e]0;pwned\\a\\e[2J\\u202ekey"'                  # HOSTILE-like, YAML-escaped
TOML_KEY = '"\\u001b]0;pwned\\u0007\\u001b[2J\\u202ekey"'


@pytest.mark.parametrize("where", ["case.yaml", "qcdoctor.toml", "answers"])
def test_a_hostile_key_never_reaches_the_terminal_raw(tmp_path, where):
    case = tmp_path / "case"
    case.mkdir()
    args = ["triage", str(case), "--format", "md"]
    if where == "case.yaml":
        (case / "case.yaml").write_text(f"{CASE_HEAD}{YAML_KEY}: 1\n", encoding="utf-8")
    elif where == "qcdoctor.toml":
        # above the case: this machine's own settings, whose error stops the run (a file
        # inside the case is an artefact: its problem is reported, see the next test)
        (case / "case.yaml").write_text(CASE_HEAD, encoding="utf-8")
        (tmp_path / "qcdoctor.toml").write_text(f"[thresholds]\n{TOML_KEY} = 1\n",
                                                 encoding="utf-8")
    else:
        answers = tmp_path / "answers.yaml"
        answers.write_text(f"platform.chip: J6E\n{YAML_KEY}: 1\n", encoding="utf-8")
        args = ["intake", str(case), "--answers", str(answers), "--lang", "en"]
    done = qcdoctor(*args, cwd=tmp_path)
    err = done.stderr.decode("utf-8")
    assert done.returncode == 2, err
    assert "unknown" in err and "key" in err and "internal error" not in err
    assert "\ufffd]0;pwned\ufffd\ufffd[2J\ufffdkey" in err     # shown, harmlessly
    assert not _raw(err) and not _raw(done.stdout.decode("utf-8")), err


def test_a_hostile_key_in_the_cases_own_settings_is_reported_harmlessly(tmp_path):
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.yaml").write_text(CASE_HEAD, encoding="utf-8")
    (case / "qcdoctor.toml").write_text(f"[thresholds]\n{TOML_KEY} = 1\n", encoding="utf-8")
    done = qcdoctor("triage", str(case), "--format", "md", "--lang", "en", cwd=tmp_path)
    out = done.stdout.decode("utf-8")
    assert done.returncode == 0, done.stderr
    assert "qcdoctor.toml" in out                                  # its problem is reported
    assert "\ufffd]0;pwned" in out                                # the key, shown harmlessly
    assert not _raw(out) and not _raw(done.stderr.decode("utf-8"))


# --- case text in every output format ------------------------------------------------------

def _hostile_case(root: Path, name: str = f"case{HOSTILE}") -> Path:
    """The QuantAnalysis example in a folder named with HOSTILE, its title and its
    sensitive layer's name holding it too."""
    with example_path("convert_quant_analysis") as source:
        shutil.copytree(source, root / name)
    case = root / name
    text = (case / "case.yaml").read_text(encoding="utf-8")
    title = '"t\\e]0;x\\a\\e[2J\\u202eX\\u200fY\\u061cZ\\x9b\\x7f\\u2066W"'
    text = re.sub(r"(?m)^title: .*$", lambda _: f"title: {title}", text)
    (case / "case.yaml").write_text(text, encoding="utf-8")
    for table in (case / "qa_convert").iterdir():
        table.write_text(table.read_text(encoding="utf-8").replace(
            "head.reciprocal", "head\x1b[2J\u202e\x07.rcp"), encoding="utf-8")
    return case


FORMATS = {"md": ["--format", "md"], "html": ["--format", "html"],
           "sarif": ["--format", "sarif"], "junit": ["--format", "junit"],
           "json": ["--format", "json"], "terminal": ["--color", "always"]}


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_hostile_names_and_titles_in_every_format(tmp_path, fmt):
    case = _hostile_case(tmp_path)
    done = qcdoctor("triage", case.name, "--lang", "en", *FORMATS[fmt], cwd=tmp_path)
    out = done.stdout.decode("utf-8")
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    assert not _raw(out, ansi_colours=fmt == "terminal"), fmt
    assert not _raw(done.stderr.decode("utf-8"))
    if fmt == "json":                 # the data kept as it was, its text escaped
        report = json.loads(out)
        assert report["case"]["path"] == case.name
        assert "\x1b[2J\u202e" in report["case"]["title"]
        assert any("head\x1b[2J\u202e\x07.rcp" == f.get("layer") for f in report["facts"])
        assert "\\u202e" in out and "\\u001b" in out
    else:
        assert "\ufffd" in out        # the characters shown, not dropped


def test_the_batch_index_shows_names_visibly(tmp_path):
    cases = tmp_path / "cases"
    cases.mkdir()
    _hostile_case(cases)
    _hostile_case(cases, f"other{HOSTILE}")
    done = qcdoctor("triage", str(cases), "-r", "-j", "1", "--format", "html", "-o",
                    str(tmp_path / "out"), "--lang", "en", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    index = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "gnp.exe" in index and not _raw(index)
    assert not _raw(done.stdout.decode("utf-8"))
    for page in (tmp_path / "out").glob("*/report.html"):
        assert not _raw(page.read_text(encoding="utf-8")), page


def _report_with_everything_hidden() -> dict:
    with example_path("board_nv12_deploy") as path:
        report = triage_path(path, lang="en", use_env=False, full_checklist=True)
    report = copy.deepcopy(report)
    hidden = "".join(HIDDEN) + "\udcff"
    report["case"]["title"] = f"title {hidden}"
    report["case"]["path"] = f"folder {hidden}"
    for item in (report["findings"][0], report["pitfalls"][0] if report["pitfalls"] else {},
                 report["conclusion"]["evidence"][0]):
        if item:
            item["text"] = f"text {hidden} `code {hidden}`"
    report["checklist"][0]["title"] = f"check {hidden}"
    report["next_actions"][0]["code"] = f"x = 1  # {hidden}\n"
    return report


@pytest.mark.parametrize("sink", ["md", "html", "json", "sarif", "junit", "terminal",
                                  "audit-md", "audit-html"])
def test_every_sink_applies_the_policy(sink):
    report = _report_with_everything_hidden()
    if sink == "sarif":
        out = render_sarif(report, audit=True)
    elif sink == "junit":
        out = render_junit(report, audit=True)
    elif sink == "terminal":
        out = render_terminal(report, color=False, width=100)
    elif sink.startswith("audit-"):
        out = render(report, sink[len("audit-"):], audit=True)
    else:
        out = render(report, sink)
    assert not _raw(out), sink
    assert not re.search("[\ud800-\udfff]", out), sink             # written as \udcff
    if sink != "json":
        assert "\\udcff" in out and "\ufffd" in out


# --- names that are not UTF-8 ----------------------------------------------------------------

def test_undecodable_names_in_the_html_plots_and_sarif(tmp_path):
    root = os.fsencode(tmp_path)
    folder = os.path.join(root, b"case_\xff")
    with example_path("convert_quant_analysis") as source:
        shutil.copytree(source, os.fsdecode(folder))
    # the QuantAnalysis folder's name is in the layer plot's title
    os.rename(os.path.join(folder, b"qa_convert"), os.path.join(folder, b"qa_convert\xff"))
    out = tmp_path / "report.html"
    for extra in ([], ["-o", str(out)]):
        done = qcdoctor("triage", folder, "--format", "html", "--lang", "en", *extra,
                        cwd=tmp_path)
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
        page = (done.stdout if not extra else out.read_bytes()).decode("utf-8")
        assert "case_\\udcff" in page and "qa_convert\\udcff/compare_per_layer_out.txt" in page
        assert "<svg" in page and not _raw(page)
    done = qcdoctor("triage", folder, "--format", "sarif", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    log = json.loads(done.stdout)
    uris = {place["physicalLocation"]["artifactLocation"]["uri"]
            for result in log["runs"][0]["results"] for place in result.get("locations", [])}
    # the name's own byte, percent-encoded under the case root
    assert "qa_convert%FF/compare_per_layer_out.txt" in uris
    assert log["runs"][0]["originalUriBaseIds"]["CASEROOT"]["uri"].endswith("/case_%FF/")


# --- the locale's encoding ---------------------------------------------------------------------

def _posix_env() -> dict:
    environ = _env(PYTHONUTF8="0", LC_ALL="POSIX")
    del environ["PYTHONIOENCODING"]
    return environ


def test_the_posix_locale_really_is_ascii(tmp_path):
    """The precondition of the next test: under it Python writes ASCII, and fails on
    anything else (surrogateescape only passes undecodable bytes through)."""
    done = subprocess.run([sys.executable, "-c", "import sys; print(sys.stdout.encoding, "
                           "sys.stdout.errors)"], capture_output=True, text=True,
                          env=_posix_env(), cwd=tmp_path, timeout=60)
    assert done.stdout.split() == ["ascii", "surrogateescape"]


def _example_report(name: str, lang: str) -> dict:
    with example_path(name) as path:
        return triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path,
                           display_path=f"example:{name}")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("fmt", ["md", "html"])
def test_an_ascii_locale_gets_the_report_escaped(tmp_path, lang, fmt):
    done = qcdoctor("triage", "--example", "convert_j6e_no_retrain", "--lang", lang,
                    *(["--format", fmt] if fmt == "html" else []),
                    cwd=tmp_path, env=_posix_env(), timeout=120)
    err = done.stderr.decode("ascii", "replace")
    assert done.returncode == 0, err
    assert "internal error" not in err
    # every character the locale cannot write as an escape: nothing lost, nothing failed
    expected = render(_example_report("convert_j6e_no_retrain", lang), fmt)
    # as JSON escapes them (stdout carries JSON too): \u00b7, a surrogate pair beyond the BMP
    assert done.stdout.decode("ascii") == expected.encode("ascii", json_escapes()).decode()
    assert expected.startswith("<!DOCTYPE html>" if fmt == "html" else "# ")


# --- terminal widths -----------------------------------------------------------------------------

def _no_terminal(fd):
    raise OSError("not a terminal")


def test_widths_are_clamped_in_one_place(monkeypatch):
    monkeypatch.setattr(os, "get_terminal_size", _no_terminal)   # whoever runs the tests
    assert (MIN_WIDTH, MAX_WIDTH) == (20, 512)
    assert [clamp_width(w) for w in (0, -5, 5, 80, 512, 999_999_999)] == [20, 20, 20, 80, 512,
                                                                           512]
    assert clamp_width("abc") == 80 and clamp_width(None) == 80
    for columns, width in (("0", 80), ("-5", 80), ("abc", 80), ("999999999", 512),
                           ("100", 100), ("7", 20)):
        monkeypatch.setenv("COLUMNS", columns)
        assert terminal_width() == width, columns     # no terminal here: 80 by default
    with example_path("convert_j6p") as path:
        report = triage_path(path, lang="en", use_env=False)
    lines = render_terminal(report, color=False, width=999_999_999).splitlines()
    assert max(map(len, lines)) == MAX_WIDTH


@pytest.mark.parametrize("columns", ["0", "-5", "abc", "999999999"])
def test_columns_through_a_pipe(tmp_path, columns):
    done = qcdoctor("triage", "--example", "convert_j6p", "--lang", "en", "--color", "always",
                    cwd=tmp_path, env=_env(COLUMNS=columns), timeout=60)
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    lines = SGR.sub("", done.stdout.decode("utf-8")).splitlines()
    assert "Consistency diagnosis report" in lines[0]
    # no terminal: an invalid COLUMNS is ignored for the default 80; a huge one clamped
    assert max(map(len, lines)) == (MAX_WIDTH if columns == "999999999" else 80)


@pytest.mark.parametrize("columns", ["0", "-5", "abc", "999999999"])
def test_columns_on_a_terminal(columns):
    pexpect = pytest.importorskip("pexpect")
    environ = _env(COLUMNS=columns, LINES="40", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-m", "qcdoctor", "triage", "--example",
                                           "convert_j6p", "--lang", "en"],
                          env=environ, dimensions=(40, 90), encoding="utf-8", timeout=60)
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    plain = SGR.sub("", out.replace("\r\n", "\n"))
    assert "Consistency diagnosis report" in plain
    # an invalid COLUMNS leaves the terminal's own 90; a huge one is clamped (the
    # terminal wraps what is wider than itself)
    assert max(map(len, plain.splitlines())) == (MAX_WIDTH if columns == "999999999" else 90)


def test_the_progress_line_shows_file_names_without_their_controls():
    from qcdoctor.engine.commands.progress import Progress

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    Progress(stream=stream)("qa\x1b]0;owned\x07/\u202ecompare.txt", 1, 1)
    shown = stream.getvalue()
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown
    assert shown.startswith("\rcomparing qa") and shown.endswith("\n")


def test_usage_errors_quote_what_was_typed_harmlessly(tmp_path):
    done = qcdoctor("triage", f"--form{HOSTILE}", cwd=tmp_path)
    err = done.stderr.decode("utf-8")
    assert done.returncode == 2 and "unrecognized arguments" in err
    assert not _raw(err) and "\ufffd]0;pwned" in err


def test_diff_batch_and_collect_outputs_show_case_text_harmlessly(tmp_path):
    case = _hostile_case(tmp_path)
    report = qcdoctor("triage", str(case), "--format", "json", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    old = tmp_path / "old.json"
    old.write_bytes(report.stdout)
    for fmt in ("md", "html", "json"):
        diff = qcdoctor("diff", str(old), str(case), "--format", fmt, cwd=tmp_path)
        assert diff.returncode == 0, diff.stderr
        assert not _raw(diff.stdout.decode("utf-8")), fmt
    with example_path("convert_j6p") as other:
        out = tmp_path / "batch"
        batch = qcdoctor("triage", str(case), str(other), "--format", "jsonl", cwd=tmp_path)
        assert batch.returncode == 0 and not _raw(batch.stdout.decode("utf-8"))
        written = qcdoctor("triage", str(case), str(other), "-o", str(out), cwd=tmp_path)
        assert written.returncode == 0, written.stderr
    summary = (out / "summary.json").read_text(encoding="utf-8")
    assert not _raw(summary) and json.loads(summary)["cases"][0]["case"].endswith(HOSTILE)
    for fmt in ("md", "json"):
        facts = qcdoctor("collect", str(case), "--format", fmt, cwd=tmp_path)
        assert facts.returncode == 0 and not _raw(facts.stdout.decode("utf-8")), fmt
