"""Fuzzing the other ways in: support bundles as people re-pack and damage them, JSON
reports given to ``diff``, and the environment a command starts in. Each input ends in a
report or in exit 2 with a message naming what was wrong, within a time bound; never an
internal error, a traceback, a hang, or a leftover extracted bundle.

Same settings as tests/safety/test_fuzz.py: a fixed seed and a bounded number of examples in CI;
``QCDOCTOR_FUZZ_EXAMPLES=N`` runs a longer campaign with fresh randomness.
"""

from __future__ import annotations

import copy
import functools
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from qcdoctor.engine.commands.examples import example_path
from tests.safety.test_fuzz import _run, fuzz

SECONDS = 60


# --- bundles ----------------------------------------------------------------------------

# the inputs every example starts from, made once (not fixtures: a failing example would
# print them whole)
@functools.cache
def _packed() -> tuple[tuple[tarfile.TarInfo, bytes | None], ...]:
    """The members of a real bundle (``qcdoctor pack`` of an example), with their data."""
    with tempfile.TemporaryDirectory() as folder:
        bundle = Path(folder) / "case.tar.gz"
        with example_path("convert_quant_analysis") as case:
            code = _run("pack", str(case), "-o", str(bundle), "--no-env").code
        assert code == 0 and bundle.is_file()
        members = []
        with tarfile.open(bundle, "r:gz") as archive:
            for member in archive:
                data = archive.extractfile(member).read() if member.isfile() else None
                members.append((member, data))
    return tuple(members)


def _member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes = b"", **extra):
    info = tarfile.TarInfo(name)
    info.type, info.size = kind, len(data)
    for key, value in extra.items():
        setattr(info, key, value)
    return info, data if kind == tarfile.REGTYPE else None


# ways people and attackers change a bundle: each takes the member list and a draw
def _dot_prefix(members, draw):
    return [(_renamed(m, "./" + m.name), d) for m, d in members] + [_member(".", tarfile.DIRTYPE)]


def _renamed(member: tarfile.TarInfo, name: str) -> tarfile.TarInfo:
    member = copy.copy(member)
    member.name = name
    return member


def _odd_name(members, draw):
    index = draw(st.integers(0, len(members) - 1))
    name = draw(st.sampled_from(["", "/", "./", "../x", "/etc/passwd", "case/../../x", "a\\b",
                                 "C:x", "case/" + "n" * 300, "case/\x1b]0;t\x07", "case/\udcff",
                                 "case//case.yaml", "case/./case.yaml", "case/ü中文.txt"]))
    member, data = members[index]
    return members[:index] + [(_renamed(member, name), data)] + members[index + 1:]


def _odd_member(members, draw):
    kind = draw(st.sampled_from([tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE,
                                 tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.CONTTYPE]))
    target = draw(st.sampled_from(["/etc/passwd", "../../x", "case/case.yaml", ""]))
    name = draw(st.sampled_from(["case/case.yaml", "case/extra", "report/report.md"]))
    return [*members, _member(name, kind, linkname=target)]


def _duplicate(members, draw):
    index = draw(st.integers(0, len(members) - 1))
    member, data = members[index]
    if data is None:
        return [*members, members[index]]
    other = draw(st.binary(max_size=64))
    twin = copy.copy(member)
    twin.size = len(other)
    return [*members, (twin, other)]


def _pax(members, draw):
    key = draw(st.sampled_from(["path", "linkpath", "size", "uid", "comment", "mtime",
                                "hdrcharset", "GNU.sparse.size", "x" * 200]))
    value = draw(st.sampled_from(["", "-1", "9" * 40, "../x", "case/case.yaml", "\x00", "é" * 5000,
                                  "1e9", "nan"]))
    index = draw(st.integers(0, len(members) - 1))
    member, data = members[index]
    member = copy.copy(member)
    member.pax_headers = {key: value}
    return members[:index] + [(member, data)] + members[index + 1:]


def _many(members, draw):
    count = draw(st.sampled_from([500, 3000]))
    return members + [_member(f"case/extra/{i}.txt", data=b"x") for i in range(count)]


REPACKS = {"dot_prefix": _dot_prefix, "odd_name": _odd_name, "odd_member": _odd_member,
           "duplicate": _duplicate, "pax": _pax, "many": _many}


def _write_bundle(path: Path, members, tar_format: int) -> None:
    with tarfile.open(path, "w:gz", format=tar_format) as archive:
        for member, data in members:
            try:
                archive.addfile(member, io.BytesIO(data) if data is not None else None)
            except (ValueError, UnicodeError):
                continue               # a header this format cannot write: left out


def _extracted_left(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("qcdoctor-bundle"))


def _triage_bundle(bundle: Path, tmp: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=str(tmp))
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", str(bundle), "--format",
                           "json"], capture_output=True, text=True, env=env, timeout=SECONDS)
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
    assert done.returncode in (0, 1, 2), (done.returncode, done.stderr)
    if done.returncode == 2:
        assert bundle.name in done.stderr and "qcdoctor: error:" in done.stderr, done.stderr
    else:
        assert json.loads(done.stdout)["schema"] == "qcdoctor/report-v1"
    assert not _extracted_left(tmp), "an extracted bundle was left behind"
    return done


@fuzz(ci_examples=12)
@given(data=st.data())
def test_repacked_bundles(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("bundle")
    members = list(_packed())
    for change in data.draw(st.lists(st.sampled_from(sorted(REPACKS)), min_size=1, max_size=3)):
        members = REPACKS[change](members, data.draw)
    tar_format = data.draw(st.sampled_from([tarfile.PAX_FORMAT, tarfile.GNU_FORMAT]))
    bundle = folder / "received.tar.gz"
    _write_bundle(bundle, members, tar_format)
    (folder / "tmp").mkdir()
    _triage_bundle(bundle, folder / "tmp")


@fuzz(ci_examples=12)
@given(data=st.data())
def test_damaged_bundle_bytes(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("bytes")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for member, blob in _packed():
            archive.addfile(member, io.BytesIO(blob) if blob is not None else None)
    plain = bytearray(raw.getvalue())
    damage = data.draw(st.sampled_from(["truncate", "flip", "header_size", "gzip_only"]))
    if damage == "truncate":
        plain = plain[:data.draw(st.integers(0, len(plain)))]
    elif damage == "flip":
        for _ in range(data.draw(st.integers(1, 20))):
            plain[data.draw(st.integers(0, len(plain) - 1))] ^= data.draw(st.integers(1, 255))
    elif damage == "header_size":                     # a member declares a huge size
        octal = data.draw(st.sampled_from([b"77777777777", b"00000001000", b"\x80" + b"\xff" * 10]))
        plain[124:124 + len(octal)] = octal
    packed_bytes = gzip.compress(bytes(plain))
    if damage == "gzip_only":
        packed_bytes = packed_bytes[:data.draw(st.integers(0, len(packed_bytes)))]
    bundle = folder / "damaged.tar.gz"
    bundle.write_bytes(packed_bytes)
    (folder / "tmp").mkdir()
    _triage_bundle(bundle, folder / "tmp")


# --- JSON reports given to diff ---------------------------------------------------------

@functools.cache
def _report_json() -> str:
    return _run("triage", "--example", "convert_quant_analysis", "--format", "json").out.decode()


def _paths(value, prefix=()):
    """Every key path of a JSON document (lists by index), the root first."""
    yield prefix
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:6]):
            yield from _paths(inner, (*prefix, index))


ODD_JSON = [None, 0, -1, 1e308, "", "x" * 5000, "\x1b[2J", [], {}, [None], {"": None}, True,
            "ü中文", [[[[[]]]]], {"type": None}, 12345678901234567890123]


@fuzz(ci_examples=25)
@given(data=st.data())
def test_mutated_reports_to_diff(tmp_path_factory, data):
    folder = tmp_path_factory.mktemp("diff")
    report_json = json.loads(_report_json())
    changed = copy.deepcopy(report_json)
    paths = [p for p in _paths(changed) if p]
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(paths))
        holder = changed
        try:
            for step in path[:-1]:
                holder = holder[step]
            if data.draw(st.booleans()) and isinstance(holder, dict):
                holder.pop(path[-1], None)
            else:
                holder[path[-1]] = data.draw(st.sampled_from(ODD_JSON))
        except (KeyError, IndexError, TypeError):
            continue                             # an earlier change removed the way there
    old, new = folder / "old.json", folder / "new.json"
    old.write_text(json.dumps(report_json), encoding="utf-8")
    text = json.dumps(changed)
    if data.draw(st.booleans()):
        text = text[:data.draw(st.integers(0, len(text)))]           # cut short
    new.write_text(text, encoding="utf-8")
    first, second = (old, new) if data.draw(st.booleans()) else (new, old)
    result = _run("diff", str(first), str(second), "--format",
                  data.draw(st.sampled_from(["md", "json", "html"])))
    assert "internal error" not in result.err and "Traceback" not in result.err, result.err
    assert result.code in (0, 1, 2), (result.code, result.err)
    if result.code == 2:
        assert "new.json" in result.err or "old.json" in result.err, result.err
    assert result.seconds < SECONDS


# --- the environment a command starts in ------------------------------------------------

ENVIRONMENT = {
    "LANG": ["C", "POSIX", "zh_CN.UTF-8", "zh_CN.GB18030", "en_US.ISO-8859-1", "xx", ""],
    "LC_ALL": ["C", "POSIX", "zh_CN.UTF-8", "\x1b", None],
    "PYTHONUTF8": ["0", "1", None],
    "PYTHONIOENCODING": ["ascii", "latin-1", "utf-8:strict", "bogus", None],
    "COLUMNS": ["0", "-5", "abc", "1", "20", "999999999", "", "80", None],
    "LINES": ["0", "abc", "999999999", None],
    "TERM": ["dumb", "xterm", "", "\x1b[2J", None],
    "NO_COLOR": ["1", "", None],
    "FORCE_COLOR": ["1", "0", "", None],
    "QCDOCTOR_CACHE_DIR": ["off", "/dev/null", "/proc/self", "{tmp}/cache", "{tmp}/file",
                           "relative/cache", "\x00", None],
    "XDG_CACHE_HOME": ["/nonexistent", "{tmp}/file", "", None],
    "HOME": ["/nonexistent", "", None],
    "TMPDIR": ["/nonexistent", "{tmp}/file", "{tmp}/" + "t" * 200, None],
    "HORIZON_BOARD_TYPE": ["J6E", "\x1b]0;x\x07", "x" * 5000, None],
    "BOARD_TYPE": ["nash-p", "", None],
}
COMMANDS = [["triage", "--example", "convert_j6e_no_retrain"],
            ["audit", "--example", "board_nv12_deploy", "--lang", "zh"],
            ["triage", "--example", "convert_quant_analysis", "--format", "html"],
            ["examples"], ["rules", "explain", "ST050"], ["--help"]]


@fuzz(ci_examples=20)
@given(data=st.data())
def test_commands_in_odd_environments(tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("env")
    (tmp / "file").write_text("not a folder")
    env = {k: v for k, v in os.environ.items() if k not in ENVIRONMENT}
    env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    for name in data.draw(st.lists(st.sampled_from(sorted(ENVIRONMENT)), unique=True,
                                   max_size=6)):
        value = data.draw(st.sampled_from(ENVIRONMENT[name]))
        if value is not None and "\x00" not in value:
            env[name] = value.format(tmp=tmp)
    command = data.draw(st.sampled_from(COMMANDS))
    done = subprocess.run([sys.executable, "-m", "qcdoctor", *command], capture_output=True,
                          env=env, timeout=SECONDS, cwd=tmp)
    err = done.stderr.decode("utf-8", "replace")
    if env.get("PYTHONIOENCODING") == "bogus":
        # the interpreter refuses it before any of our code runs: its own message
        assert "unknown encoding: bogus" in err and not done.stdout, err
        return
    assert b"Traceback" not in done.stderr and "internal error" not in err, (env, err)
    assert done.returncode in (0, 1), (done.returncode, err)
    assert done.stdout.strip(), "nothing printed"
    assert b"\x1b]0;" not in done.stdout + done.stderr           # no retitled window
