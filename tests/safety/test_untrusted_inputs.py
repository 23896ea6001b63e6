"""Untrusted inputs at the edges: bundles re-packed by hand or built to exhaust memory, a
bundle interrupted by SIGTERM, JSON and TOML nested past any real file, reports with null
or mistyped parts, a case.yaml that is a link out of its folder, numbers too large for a
float. Each gets one clear error naming the file (exit 2), or, for a damaged artefact of
a case, an artifact_problem fact in a report that is still written."""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from qcdoctor.engine.commands.examples import example_path

CASE_HEAD = "schema: qcdoctor/case-v1\n"
MiB = 1 << 20


def run_cli(*args: str, env: dict | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """``qcdoctor ARGS`` as the user runs it: a separate process, its real exit code."""
    return subprocess.run([sys.executable, "-m", "qcdoctor", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def assert_clear_error(done: subprocess.CompletedProcess, *words: str) -> str:
    """Exit 2, no traceback, no internal error, and every one of ``words`` in stderr."""
    err = done.stderr
    assert done.returncode == 2, (done.returncode, err)
    assert "Traceback" not in err and "internal error" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def copy_example(name: str, folder: Path) -> Path:
    with example_path(name) as source:
        shutil.copytree(source, folder)
    return folder


# ---------------------------------------------------------------- bundles re-packed by hand

def _tar_member(archive: tarfile.TarFile, name: str, data: bytes | None) -> None:
    info = tarfile.TarInfo(name)
    if data is None:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
        archive.addfile(info)
    else:
        info.size, info.mode = len(data), 0o644
        archive.addfile(info, io.BytesIO(data))


def repacked(tmp_path: Path, names: list[tuple[str, bytes | None]]) -> Path:
    path = tmp_path / "repacked.tar.gz"
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as archive:
        for name, data in names:
            _tar_member(archive, name, data)
    return path


def test_a_bundle_repacked_with_dot_slash_names_is_read(tmp_path):
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    packed = tmp_path / "packed.tar.gz"
    assert run_cli("pack", case, "-o", packed, "--no-env", "--lang", "en").returncode == 0
    # unpack it, then pack it again the common way: tar czf b.tar.gz -C dir .
    unpacked = tmp_path / "unpacked"
    with tarfile.open(packed, "r:gz") as archive:
        archive.extractall(unpacked, filter="data")
    members = [("./", None)]
    for path in sorted(unpacked.rglob("*")):
        rel = "./" + path.relative_to(unpacked).as_posix()
        members.append((rel + "/", None) if path.is_dir() else (rel, path.read_bytes()))
    bundle = repacked(tmp_path, members)
    with tarfile.open(bundle, "r:gz") as archive:
        assert archive.getnames()[:2] == [".", "./MANIFEST.json"]
    tool = shutil.which("tar")
    if tool:                                    # and with tar itself, where it is installed
        made = tmp_path / "by_tar.tar.gz"
        subprocess.run([tool, "czf", str(made), "-C", str(unpacked), "."], check=True)
        with tarfile.open(made, "r:gz") as archive:
            assert archive.getnames()[0] in (".", "./")
    reports = {}
    for which, path in (("folder", case), ("bundle", bundle),
                        *((("tar", made),) if tool else ())):
        done = run_cli("triage", path, "--format", "json", "--no-env", "--lang", "en")
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        report["case"].pop("path")
        reports[which] = report
    assert reports["bundle"] == reports["folder"]
    assert reports.get("tar", reports["folder"]) == reports["folder"]


@pytest.mark.parametrize("name, words", [
    ("", ["refused: a member has an empty name"]),
    ("./", ["refused: the member './' names no file"]),
])
def test_a_member_without_a_name_is_refused_clearly(tmp_path, name, words):
    members = [("case/", None), ("case/case.yaml", CASE_HEAD.encode())]
    info = tarfile.TarInfo(name)
    info.size = 1
    bundle = tmp_path / "b.tar.gz"
    with tarfile.open(bundle, "w:gz", format=tarfile.GNU_FORMAT) as archive:
        for member, data in members:
            _tar_member(archive, member, data)
        archive.addfile(info, io.BytesIO(b"x"))     # a file (not a folder) with no name
    err = assert_clear_error(run_cli("triage", bundle), str(bundle), *words, "fix:")
    assert "IndexError" not in err


# ------------------------------------------------- bundles whose headers would exhaust memory

def _header(name: bytes, kind: bytes, size: int) -> bytes:
    """One 512-byte tar header declaring ``size`` bytes of data."""
    block = bytearray(512)
    block[0:len(name)] = name
    block[100:108] = b"0000644\0"
    for at in (108, 116):
        block[at:at + 8] = b"0000000\0"
    block[124:136] = b"%011o\0" % size
    block[136:148] = b"00000000000\0"
    block[156:157] = kind
    block[257:265] = b"ustar  \0"
    block[148:156] = b" " * 8
    block[148:156] = b"%06o\0 " % sum(block)
    return bytes(block)


def _gzip_member(data: bytes) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    return packer.compress(data) + packer.flush()


def hostile_bundle(path: Path, kind: bytes, declared: int, filler: bytes, repeats: int) -> Path:
    """A bundle whose first header (``kind``: a pax or GNU long-name header) declares
    ``declared`` bytes, followed by ``repeats`` MiB of ``filler`` bytes: gzip members
    concatenated, so a few hundred KiB on disk hold hundreds of MiB."""
    chunk = _gzip_member(filler * (MiB // len(filler)))
    with open(path, "wb") as handle:
        handle.write(_gzip_member(_header(b"././@LongLink", kind, declared)))
        for _ in range(repeats):
            handle.write(chunk)
        handle.write(_gzip_member(_header(b"case/case.yaml", b"0", 0) + b"\0" * 1024))
    return path


# the child measures the peak memory of qcdoctor, its only child: nothing run before counts
_PEAK = textwrap.dedent("""
    import resource, subprocess, sys
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", sys.argv[1]],
                          capture_output=True, text=True)
    sys.stdout.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) + "\\n")
    sys.stdout.write(str(done.returncode) + "\\n" + done.stderr)
""")


@pytest.mark.parametrize("kind, filler, words", [
    (b"x", b"\0", "a pax header"),              # a pax header declaring 400 MiB
    (b"g", b"9", "a pax header"),               # a global one
    (b"L", b"a", "a GNU long name"),            # a long name of 400 MiB
    (b"K", b"b", "a GNU long link name"),
])
def test_a_huge_extended_header_is_refused_in_bounded_memory(tmp_path, kind, filler, words):
    bundle = hostile_bundle(tmp_path / "hostile.tar.gz", kind, 400 * MiB, filler, 400)
    assert bundle.stat().st_size < 1 * MiB               # small on disk
    with gzip.open(bundle, "rb") as stream:              # as the header says, once unpacked
        assert tarfile.nti(stream.read(512)[124:136]) == 400 * MiB
    done = subprocess.run([sys.executable, "-c", _PEAK, str(bundle)], capture_output=True,
                          text=True, timeout=300)
    peak_kib, code, err = done.stdout.split("\n", 2)
    print(f"{kind!r}: peak {int(peak_kib) // 1024} MiB")
    assert int(code) == 2, err
    assert "Traceback" not in err and "internal error" not in err and "MemoryError" not in err
    assert f"{bundle}: refused: {words} of {400 * MiB} bytes" in err, err
    assert "fix:" in err
    assert int(peak_kib) < 300 * 1024, f"peak {int(peak_kib) // 1024} MiB"


@pytest.mark.parametrize("kind, records, count, words", [
    # 2,000 pax headers in a row: tarfile reads each one by recursing into the next
    (b"x", b"7 ab=c\n", 2000, "more than 4 long names or pax headers in front of one member"),
    # one global header of 40 keys, which every member would copy
    (b"g", b"".join(b"9 k%03d=v\n" % i for i in range(40)), 1,
     "more than 32 global pax header keys"),
])
def test_header_chains_and_key_floods_are_refused(tmp_path, kind, records, count, words):
    path = tmp_path / "b.tar.gz"
    header = _header(b"././@PaxHeader", kind, len(records)) + records + \
        b"\0" * (-len(records) % 512)
    path.write_bytes(gzip.compress(header * count + _header(b"case/case.yaml", b"0", 0)
                                   + b"\0" * 1024))
    assert_clear_error(run_cli("triage", path), f"{path}: refused: {words}", "fix:")


def test_a_sparse_member_is_refused(tmp_path):
    path = tmp_path / "b.tar.gz"
    path.write_bytes(gzip.compress(_header(b"case/case.yaml", b"S", 0) + b"\0" * 1024))
    assert_clear_error(run_cli("triage", path), f"{path}: refused: the member 'case/case.yaml' "
                                                 "is a sparse file")


# ------------------------------------------------ a bundle open when SIGTERM or SIGHUP comes

@pytest.mark.parametrize("signum,jobs", [(signal.SIGTERM, 1), (signal.SIGHUP, 1),
                                         (signal.SIGTERM, 2)])
def test_a_stop_signal_removes_the_extracted_bundle(tmp_path, signum, jobs):
    np = pytest.importorskip("numpy")
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    for side in ("x86", "board"):               # dumps make the run last a while
        (case / side).mkdir()
        np.save(case / side / "model_infer_output_0.npy",
                np.linspace(0, 1, MiB, dtype=np.float32))
    with open(case / "case.yaml", "a", encoding="utf-8") as handle:
        handle.write("artifacts:\n  dumps: {hbm_x86: x86, board: board}\n")
    bundle = tmp_path / "case.tar.gz"
    assert run_cli("pack", case, "-o", bundle, "--no-env").returncode == 0
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    # with --jobs 2 the batch's worker processes hold the extracted bundles
    bundles = [str(bundle)] if jobs == 1 else \
        [str(shutil.copy(bundle, tmp_path / f"copy{i}.tar.gz")) for i in range(4)]
    batch = [] if jobs == 1 else ["--jobs", "2", "-o", str(tmp_path / "out")]
    child = subprocess.Popen([sys.executable, "-m", "qcdoctor", "triage", *bundles,
                              "--no-env", "--format", "json", *batch],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "TMPDIR": str(scratch)})
    try:
        deadline = time.monotonic() + 120
        # directly in TMPDIR, or in the batch's folder for its workers' files
        while not any(p.name.startswith("qcdoctor-bundle-") for p in scratch.glob("*")) and \
                not any(p.name.startswith("qcdoctor-bundle-") for p in scratch.glob("*/*")):
            assert child.poll() is None, child.stderr.read()
            assert time.monotonic() < deadline, "the bundle was never opened"
            time.sleep(0.005)
        child.send_signal(signum)
        err = child.communicate(timeout=60)[1]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 128 + signum, (child.returncode, err)
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err, err
    assert list(scratch.iterdir()) == []        # nothing left behind, the engine's log neither


# ----------------------------------------------------- JSON and TOML nested past any real file

DEEP = 100_000
DEEP_JSON = "[" * DEEP + "]" * DEEP


def dump_case(folder: Path, sidecar: str) -> Path:
    """A case comparing two raw dumps; the first has ``sidecar`` beside it."""
    np = pytest.importorskip("numpy")
    for side in ("x86", "board"):
        (folder / side).mkdir(parents=True)
        np.arange(16, dtype=np.float32).tofile(folder / side / "model_infer_output_0.bin")
    (folder / "x86" / "model_infer_output_0.bin.json").write_text(sidecar, encoding="utf-8")
    (folder / "case.yaml").write_text(CASE_HEAD + "artifacts:\n  dumps: {hbm_x86: x86, board: board}\n",
                                      encoding="utf-8")
    return folder


def problems(report: dict) -> dict[str, dict]:
    return {f["file"]: f for f in report["facts"] if f["type"] == "artifact_problem"}


@pytest.mark.parametrize("sidecar, words", [
    (DEEP_JSON, "x86/model_infer_output_0.bin.json:1: nested more than 32 levels deep"),
    ('{"dtype": "float32",\n "shape": [1' + "0" * 900 + "]}",
     "x86/model_infer_output_0.bin.json:2: a number of 901 digits, too large"),
    ('{"dtype": "float32", "shape": "abc"}', "'shape' must be a list of sizes"),
    ('{"scale": [1, 2], "shape": [4, 4], "axis": 0}', "2 scales need an 'axis'"),
    ('{"zero_point": [1]}', "'zero_point' must be a number, found [1]"),
], ids=["deep", "long_number", "shape_text", "scales_without_axis", "zero_point_list"])
def test_a_damaged_sidecar_is_an_artifact_problem_and_the_report_is_written(tmp_path, sidecar,
                                                                                words):
    case = dump_case(tmp_path / "case", sidecar)
    for lang in ("en", "zh"):
        done = run_cli("triage", case, "--format", "json", "--no-env", "--lang", lang)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        [problem] = problems(report).values()
        assert words in problem["problem"], problem
        if lang == "zh" and "nested" in words:
            assert "嵌套超过 32 层" in problem["problem_zh"], problem
    # the same dumps compared directly: one clear error
    assert_clear_error(run_cli("compare", case / "x86", case / "board"),
                       words.split(":")[0] if ":" in words else "model_infer_output_0.bin",
                       words.split(": ", 1)[-1])


def settings_case(tmp_path: Path) -> Path:
    """A case with QuantAnalysis tables (read with the thresholds) in a project folder."""
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)       # the search for settings stops here
    return copy_example("convert_quant_analysis", project / "case")


DEEP_TOMLS = [
    ("qcdoctor.toml", "[thresholds]\ntop_n = " + "[" * DEEP + "]" * DEEP + "\n", 2),
    ("qcdoctor.toml", "thresholds." + ".".join(["a"] * DEEP) + " = 1\n", 1),
    ("qcdoctor.toml", "[thresholds." + ".".join(["a"] * DEEP) + "]\n", 1),
    ("qcdoctor.toml", "[thresholds]\nx = " + "{a = " * DEEP + "1" + "}" * DEEP + "\n", 2),
    ("pyproject.toml", "[tool.qcdoctor.thresholds]\n\n\ntop_n = " + "[" * DEEP + "\n", 4),
]
DEEP_TOML_IDS = ["arrays", "dotted_key", "table_header", "inline_tables", "pyproject"]


@pytest.mark.parametrize("name, text, line", DEEP_TOMLS, ids=DEEP_TOML_IDS)
def test_a_deep_settings_file_in_the_case_is_an_artifact_problem(tmp_path, name, text, line):
    case = settings_case(tmp_path)
    (case / name).write_text(text, encoding="utf-8")
    started = time.perf_counter()
    done = run_cli("triage", case, "--format", "json", "--lang", "en")
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - started < 60
    report = json.loads(done.stdout)
    problem = problems(report)[name]
    assert problem["problem"].startswith(f"line {line}: nested more than 32 levels deep"), \
        problem
    assert set(report["threshold_sources"].values()) == {"default"}


@pytest.mark.parametrize("name, text, line", DEEP_TOMLS[:2], ids=DEEP_TOML_IDS[:2])
def test_a_deep_settings_file_above_the_case_is_a_clear_error(tmp_path, name, text, line):
    case = settings_case(tmp_path)
    (case.parent / name).write_text(text, encoding="utf-8")
    assert_clear_error(run_cli("triage", case), f"{case.parent / name}:{line}: nested more than "
                                                "32 levels deep", "fix:")
    # this machine's settings: --no-env does not read them at all
    assert run_cli("triage", case, "--no-env").returncode == 0


def test_a_bad_value_in_the_cases_own_settings_file_does_not_stop_the_report(tmp_path):
    case = settings_case(tmp_path)
    (case / "qcdoctor.toml").write_text("[thresholds]\ntop_n = 1" + "0" * 900 + "\n"
                                        "dominance = 3\n", encoding="utf-8")
    done = run_cli("triage", case, "--format", "json", "--lang", "zh")
    assert done.returncode == 0, done.stderr
    problem = problems(json.loads(done.stdout))["qcdoctor.toml"]
    assert problem["problem"].startswith("line 2: a number of 901 digits"), problem
    assert problem["problem_zh"].startswith("第 2 行：一个 901 位的数"), problem
    (case / "qcdoctor.toml").write_text("[thresholds]\ndominence = 3\n", encoding="utf-8")
    report = json.loads(run_cli("triage", case, "--format", "json", "--lang", "zh").stdout)
    problem = problems(report)["qcdoctor.toml"]
    assert problem["problem"].startswith("'thresholds.dominence': unknown key (did you mean "
                                         "'dominance'? allowed here: cosine_good, ")
    assert problem["problem_zh"].startswith("'thresholds.dominence'：未知的键（是不是想写 "
                                            "'dominance'？"), problem


# ------------------------------------------------------------------- reports given to diff

@pytest.fixture(scope="module")
def report_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("report")
    case = copy_example("convert_quant_analysis", folder / "case")
    target = folder / "report.json"
    done = run_cli("triage", case, "--format", "json", "-o", target, "--no-env", "--lang", "en")
    assert done.returncode == 0, done.stderr
    return target


def _diff_error(tmp_path: Path, report_file: Path, text: str, capsys) -> str:
    from qcdoctor.engine.commands.cli import main
    side = tmp_path / "old.json"
    side.write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert main(["diff", str(side), str(report_file), "--no-env"]) == 2
    err = capsys.readouterr().err
    assert "internal error" not in err and "Traceback" not in err, err
    assert err.startswith(f"qcdoctor: error: {side}: "), err
    return err


def _edited(report_file: Path, edit) -> str:
    report = json.loads(report_file.read_text(encoding="utf-8"))
    edit(report)
    return json.dumps(report)


def _stage_fact(report: dict) -> dict:
    return next(f for f in report["facts"] if f["type"] == "stage" and f["has_value"])


@pytest.mark.parametrize("edit, key, words", [
    *[(lambda r, k=k: r.update({k: None}), k, "must not be null")
      for k in ("case", "conclusion", "checklist", "facts", "missing", "pitfalls", "language")],
    (lambda r: r.update(conclusion=[]), "conclusion", "expected a mapping, found a list"),
    (lambda r: r.update(facts={}), "facts", "expected a list, found a mapping"),
    (lambda r: r.update(language=3), "language", "3 is not one of zh | en"),
    (lambda r: r["case"].update(path=7), "case.path", "expected text, found the number 7"),
    (lambda r: r["case"].pop("path"), "case.path", "missing"),
    (lambda r: r["conclusion"].update(stage=None), "conclusion.stage", "must not be null"),
    (lambda r: r["conclusion"].update(determined="yes"), "conclusion.determined",
     "expected true or false, found the text 'yes'"),
    (lambda r: r["facts"].insert(0, None), "facts[0]", "a list item must not be null"),
    (lambda r: r["facts"].insert(0, {"stage": "qat"}), "facts[0].type", "missing"),
    (lambda r: _stage_fact(r).update(value="high"), ".value'", "must be float, got str 'high'"),
    (lambda r: _stage_fact(r).update(value=float("inf")), ".value'",
     "must be a finite number"),
    (lambda r: _stage_fact(r).update(status=None), ".status'", "must be str, got NoneType None"),
    (lambda r: _stage_fact(r).update(status="bad"), ".status'", "must be one of normal"),
    (lambda r: _stage_fact(r).pop("value"), ".value'", "missing"),
    (lambda r: r["checklist"].append({"status": "pass"}), "].id'", "missing"),
    (lambda r: r["pitfalls"].append({"id": "x", "text": ["a"]}), "].text'",
     "expected text, found a list"),
    (lambda r: r["missing"].append({"id": "x"}), "].question'", "missing"),
])
def test_a_report_with_null_or_mistyped_parts_is_one_clear_error(tmp_path, report_file, edit,
                                                                   key, words, capsys):
    err = _diff_error(tmp_path, report_file, _edited(report_file, edit), capsys)
    assert f"{key}': {words}" in err if not key.endswith("'") else f"{key}: {words}" in err, err
    assert "fix: write it again with this qcdoctor" in err


def test_a_null_conclusion_through_the_command(tmp_path, report_file):
    side = tmp_path / "old.json"
    side.write_text(_edited(report_file, lambda r: r.update(conclusion=None)), encoding="utf-8")
    assert_clear_error(run_cli("diff", side, report_file),
                       f"{side}: 'conclusion': must not be null", "fix:")


@pytest.mark.parametrize("text, words", [
    (DEEP_JSON, "nested more than 32 levels deep (limit: 32 levels) (line 1)"),
    ('{"schema": "qcdoctor/report-v1",\n"x": 1' + "0" * 900 + "}",
     "a number of 901 digits, too large for any number (line 2)"),
    ("\n{not json", "not valid JSON: Expecting property name enclosed in double quotes (line 2)"),
], ids=["deep", "long_number", "syntax"])
def test_a_report_past_the_limits_is_one_clear_error(tmp_path, report_file, text, words, capsys):
    err = _diff_error(tmp_path, report_file, text, capsys)
    assert f"not a readable JSON report: {words}" in err, err
    side = tmp_path / "old.json"
    assert_clear_error(run_cli("diff", side, report_file), f"{side}: not a readable JSON "
                                                            f"report: {words}")


# ------------------------------------------------------- a case.yaml leading out of its folder

SECRET = "TOP-SECRET-4711"


@pytest.fixture
def linked_case(tmp_path) -> Path:
    """A case folder whose case.yaml is a symlink to a file outside it."""
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "private.yaml").write_text(CASE_HEAD + f"title: {SECRET}\nbadcase: {SECRET}\n",
                                          encoding="utf-8")
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.yaml").symlink_to(outside / "private.yaml")
    return case


@pytest.mark.parametrize("command", ["triage", "audit", "pack"])
@pytest.mark.parametrize("named", ["folder", "file"])
def test_a_case_yaml_leading_out_of_the_case_is_refused(linked_case, tmp_path, command, named):
    given = linked_case if named == "folder" else linked_case / "case.yaml"
    extra = ["-o", str(tmp_path / "b.tar.gz")] if command == "pack" else []
    done = run_cli(command, given, "--no-env", *extra)
    err = assert_clear_error(done, f"{linked_case / 'case.yaml'}: refused: case.yaml is a "
                                   "symlink leading out of the case folder", "fix:")
    assert SECRET not in err and SECRET not in done.stdout
    assert not (tmp_path / "b.tar.gz").exists()


def test_links_inside_the_case_and_a_linked_case_folder_are_read(tmp_path):
    case = tmp_path / "real"
    (case / "versions").mkdir(parents=True)
    (case / "versions" / "v2.yaml").write_text(CASE_HEAD + "title: linked inside\n",
                                               encoding="utf-8")
    (case / "case.yaml").symlink_to(Path("versions") / "v2.yaml")
    (tmp_path / "alias").symlink_to(case, target_is_directory=True)   # the folder may be a link
    for given in (case, tmp_path / "alias", tmp_path / "alias" / "case.yaml"):
        done = run_cli("triage", given, "--no-env", "--format", "json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["case"]["title"] == "linked inside"


# --------------------------------------------------------- numbers too large for a float

BIG = "9" * 900


@pytest.mark.parametrize("text, line, key", [
    (f"stages:\n  qat: {{metric: mAP, value: {BIG}}}\n", 3, "stages.qat.value"),
    (f"deploy:\n  board:\n    height: {BIG}\n", 4, "deploy.board.height"),
    (f"thresholds:\n  top_n: {BIG}\n", 3, "thresholds.top_n"),
    (f"thresholds:\n  dominance: {BIG}\n", 3, "thresholds.dominance"),
    (f"consistency_level: {BIG}\n", 2, "consistency_level"),
    (f"consistency_levels_tried: [1, {BIG}]\n", 2, "consistency_levels_tried[1]"),
], ids=["stage_value", "board_height", "top_n", "dominance", "level", "levels_tried"])
def test_a_number_too_large_for_a_float_is_one_clear_error(tmp_path, text, line, key):
    (tmp_path / "case.yaml").write_text(CASE_HEAD + text, encoding="utf-8")
    err = assert_clear_error(run_cli("triage", tmp_path, "--no-env"),
                             f"{tmp_path / 'case.yaml'}:{line}: '{key}': '999", "fix:")
    assert "OverflowError" not in err and len(err) < 1000


@pytest.mark.parametrize("pax, words", [
    ({"size": "-1"}, "the member 'case/notes.txt' declares a negative size"),
    ({"size": "9" * 40}, "the member 'case/notes.txt' holds 9999"),
    ({"GNU.sparse.size": "10"}, "is a sparse file"),
], ids=["negative_size", "huge_size", "pax_sparse"])
def test_pax_headers_that_change_a_member_are_checked(tmp_path, pax, words):
    bundle = tmp_path / "b.tar.gz"
    with tarfile.open(bundle, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        _tar_member(archive, "case/case.yaml", CASE_HEAD.encode())
        info = tarfile.TarInfo("case/notes.txt")
        info.size, info.pax_headers = 1, pax
        archive.addfile(info, io.BytesIO(b"x"))
    assert_clear_error(run_cli("triage", bundle), f"{bundle}: refused: ", words, "fix:")


@pytest.mark.parametrize("mtime", ["9" * 40, "nan", "-1e30"])
def test_a_time_no_platform_can_set_is_only_metadata(tmp_path, mtime):
    """A pax header's mtime beyond time_t (or nan) once ended the run as an internal error;
    the case is read, its files dated at the epoch."""
    bundle = tmp_path / "b.tar.gz"
    with tarfile.open(bundle, "w:gz", format=tarfile.PAX_FORMAT) as archive:
        info = tarfile.TarInfo("case/case.yaml")
        info.size, info.pax_headers = len(CASE_HEAD.encode()), {"mtime": mtime}
        archive.addfile(info, io.BytesIO(CASE_HEAD.encode()))
    done = run_cli("triage", bundle, "--no-env")
    assert done.returncode in (0, 1), done.stderr
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert done.stdout.strip()


def test_an_error_inside_a_bundle_names_its_member_not_a_temporary_file(tmp_path):
    bundle = tmp_path / "b.tar.gz"
    text = b"schema: qcdoctor/case-v1\nrchema: x\n"
    with tarfile.open(bundle, "w:gz") as archive:
        _tar_member(archive, "case/case.yaml", text)
    err = assert_clear_error(run_cli("triage", bundle, "--no-env"),
                             f"{bundle}: case/case.yaml:2: 'rchema': unknown key", "fix:")
    assert "qcdoctor-bundle-" not in err


def test_the_intake_never_edits_a_linked_case_file(tmp_path):
    outside = tmp_path / "elsewhere.yaml"
    outside.write_text("schema: qcdoctor/case-v1\ntitle: not this case's\n", encoding="utf-8")
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.yaml").symlink_to(outside)
    done = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(case), "--lang",
                           "en"], input="", capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "symlink" in done.stderr, done.stderr
    assert "not this case's" not in done.stdout + done.stderr
    assert (case / "case.yaml").is_symlink()                       # left as it was
    assert outside.read_text(encoding="utf-8").endswith("title: not this case's\n")


def test_allow_outside_admits_a_linked_case_file(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    with example_path("convert_j6p") as source:
        (shared / "case.yaml").write_text((source / "case.yaml").read_text(encoding="utf-8"),
                                          encoding="utf-8")
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.yaml").symlink_to(shared / "case.yaml")
    refused = run_cli("triage", case, "--format", "json")
    assert refused.returncode == 2 and "symlink" in refused.stderr
    admitted = run_cli("triage", case, "--format", "json", "--allow-outside", shared)
    assert admitted.returncode == 0, admitted.stderr
    assert json.loads(admitted.stdout)["conclusion"]["stage"] == "convert"


def test_the_cases_own_settings_travel_in_its_bundle_and_links_out_are_not_read(tmp_path):
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    (case / "qcdoctor.toml").write_text("[thresholds]\ncliff_drop = 0.2\n", encoding="utf-8")
    folder = json.loads(run_cli("triage", case, "--format", "json", "--no-env").stdout)
    assert folder["thresholds"]["cliff_drop"] == 0.2
    bundle = tmp_path / "case.tar.gz"
    assert run_cli("pack", case, "-o", bundle, "--no-env").returncode == 0
    with tarfile.open(bundle) as archive:
        assert "case/qcdoctor.toml" in archive.getnames()
    packed = json.loads(run_cli("triage", bundle, "--format", "json", "--no-env").stdout)
    assert packed["thresholds"] == folder["thresholds"]

    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("[thresholds]\ncliff_drop = 0.3\n", encoding="utf-8")
    (case / "qcdoctor.toml").unlink()
    (case / "qcdoctor.toml").symlink_to(elsewhere)
    linked = json.loads(run_cli("triage", case, "--format", "json", "--no-env").stdout)
    assert linked["thresholds"]["cliff_drop"] != 0.3                     # not read
    assert any(f["type"] == "artifact_problem" and f["file"] == "qcdoctor.toml"
               for f in linked["facts"])
