"""Support bundles: pack -> triage the bundle gives the folder's report; nothing outside the
case is packed; hostile archives are refused before anything is extracted."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

from qcdoctor.collectors import bundle
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_names, example_path


def copy_example(name: str, folder: Path) -> Path:
    with example_path(name) as source:
        shutil.copytree(source, folder)
    return folder


def report_of(path: Path, capsys) -> dict:
    assert main(["triage", str(path), "--format", "json", "--no-env", "--lang", "en"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    report["case"].pop("path")          # the folder or the bundle, as given
    return report


def members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path, "r:gz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}


def test_round_trip_of_every_example(tmp_path, capsys):
    for name in example_names():
        case = copy_example(name, tmp_path / name)
        target = tmp_path / f"{name}.tar.gz"
        assert main(["pack", str(case), "-o", str(target), "--no-env", "--lang", "en"]) == 0
        capsys.readouterr()
        assert report_of(target, capsys) == report_of(case, capsys), name


def test_manifest_lists_every_file_with_its_hash_and_why(tmp_path, capsys):
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    target = tmp_path / "b.tar.gz"
    assert main(["pack", str(case), "-o", str(target), "--no-env", "--lang", "en"]) == 0
    assert capsys.readouterr().out.startswith(f"bundle written: {target} (7 files, ")
    files = members(target)
    manifest = json.loads(files.pop("MANIFEST.json"))
    assert manifest["schema"] == "qcdoctor/bundle-v1" and manifest["left_out"] == []
    assert {e["path"] for e in manifest["files"]} == set(files)
    for entry in manifest["files"]:
        data = files[entry["path"]]
        assert entry["size"] == len(data)
        assert entry["sha256"] == hashlib.sha256(data).hexdigest()
    why = {e["path"]: e["why"] for e in manifest["files"]}
    assert why["case/case.yaml"] == "the case file"
    assert why["case/qa_convert/compare_per_layer_out.txt"] == \
        "artifact to keep: compare_per_layer_out.{txt,csv}"
    assert why["report/report.json"] == "the conclusion report"
    assert json.loads(files["report/report.json"])["conclusion"]["stage"] == "convert"


def test_large_files_are_listed_as_left_out(tmp_path, capsys):
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    target = tmp_path / "b.tar.gz"
    assert main(["pack", str(case), "-o", str(target), "--no-env", "--lang", "en",
                 "--max-file-size", "1k"]) == 0
    out = capsys.readouterr().out
    table = "case/qa_convert/compare_per_layer_out.txt"
    assert f"left out: {table}: 5376 bytes, over --max-file-size (1000 bytes)" in out
    files = members(target)
    manifest = json.loads(files["MANIFEST.json"])
    assert table not in files
    assert {"path": table, "size": 5376, "why": "artifact to keep: compare_per_layer_out.{txt,csv}",
            "reason": "5376 bytes, over --max-file-size (1000 bytes)"} in manifest["left_out"]


def test_nothing_outside_the_case_is_packed(tmp_path, capsys):
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "badcase.txt").write_text("TOP SECRET", encoding="utf-8")
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    (case / "qa_convert" / "badcase.txt").unlink()
    (case / "qa_convert" / "badcase.txt").symlink_to(secret / "badcase.txt")
    (case / "elsewhere").symlink_to(secret, target_is_directory=True)
    target = tmp_path / "b.tar.gz"
    assert main(["pack", str(case), "-o", str(target), "--no-env", "--lang", "en"]) == 0
    out = capsys.readouterr().out
    with open(target, "rb") as handle:
        import gzip
        raw = gzip.decompress(handle.read())
    assert b"TOP SECRET" not in raw
    manifest = json.loads(members(target)["MANIFEST.json"])
    left = {e["path"]: e["reason"] for e in manifest["left_out"]}
    assert left["case/qa_convert/badcase.txt"] == \
        "refused: it leads out of the case folder (never followed)"
    assert left["case/elsewhere"].startswith("refused: a symlink leading out of the case")
    assert "left out: case/elsewhere" in out


@pytest.mark.parametrize("make, message", [
    (lambda case, tmp: (tmp / "b.tar.gz").write_text("x"), "exists already"),
    (lambda case, tmp: None, "a bundle is a .tar.gz"),
])
def test_bad_pack_target(tmp_path, make, message, capsys):
    case = copy_example("wide_gap", tmp_path / "case")
    make(case, tmp_path)
    target = tmp_path / ("b.tar.gz" if message == "exists already" else "b.zip")
    assert main(["pack", str(case), "-o", str(target)]) == 2
    assert f"{target}: {message}" in capsys.readouterr().err
    assert message != "exists already" or target.read_text() == "x"


def hostile(tmp_path: Path, *entries) -> Path:
    """A .tar.gz with a valid case plus ``entries`` (TarInfo, data or None)."""
    path = tmp_path / "hostile.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        text = b"schema: qcdoctor/case-v1\n"
        info = tarfile.TarInfo("case/case.yaml")
        info.size = len(text)
        archive.addfile(info, io.BytesIO(text))
        for info, data in entries:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def member(name: str, kind=tarfile.REGTYPE, data: bytes | None = b"x", link: str = ""):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    info.size = len(data) if data is not None and kind == tarfile.REGTYPE else 0
    return info, data if kind == tarfile.REGTYPE else None


@pytest.mark.parametrize("entry, message", [
    (member("/tmp/qcdoctor-evil"), "has an absolute path"),
    (member("case/../../evil.txt"), "leaves the bundle (..)"),
    (member("case/link", tarfile.SYMTYPE, link="/etc/passwd"), "is a link or device"),
    (member("case/hard", tarfile.LNKTYPE, link="case/case.yaml"), "is a link or device"),
    (member("case/dev", tarfile.CHRTYPE), "is a link or device"),
    (member("case/fifo", tarfile.FIFOTYPE), "is a link or device"),
])
def test_hostile_members_are_refused(tmp_path, entry, message, capsys, monkeypatch):
    scratch = tmp_path / "scratch"             # bundles are extracted below this folder
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    path = hostile(tmp_path, entry)
    assert main(["triage", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: refused: the member" in err and message in err and "fix:" in err
    # where each member would have landed had it been extracted
    assert not (scratch / "evil.txt").exists() and not Path("/tmp/qcdoctor-evil").exists()
    assert list(scratch.iterdir()) == []       # nothing extracted, nothing left behind


def test_size_and_count_limits(tmp_path, monkeypatch, capsys):
    path = hostile(tmp_path, member("case/big.txt", data=b"y" * 2048))
    monkeypatch.setattr(bundle, "MAX_MEMBER_BYTES", 1024)
    assert main(["triage", str(path)]) == 2
    assert "'case/big.txt' holds 2048 bytes" in capsys.readouterr().err
    monkeypatch.setattr(bundle, "MAX_MEMBER_BYTES", 4096)
    monkeypatch.setattr(bundle, "MAX_TOTAL_BYTES", 2000)
    assert main(["triage", str(path)]) == 2
    assert "in all" in capsys.readouterr().err
    monkeypatch.setattr(bundle, "MAX_MEMBERS", 1)
    assert main(["triage", str(path)]) == 2
    assert "more than 1 members" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (b"not a gzip at all", "not a readable .tar.gz bundle"),
    (None, "not a qcdoctor support bundle: no case/case.yaml in it"),
])
def test_unreadable_bundles(tmp_path, content, message, capsys):
    path = tmp_path / "b.tar.gz"
    if content is None:
        with tarfile.open(path, "w:gz") as archive:
            info = tarfile.TarInfo("notes.txt")
            archive.addfile(info, io.BytesIO(b""))
    else:
        path.write_bytes(content)
    assert main(["triage", str(path)]) == 2
    assert f"{path}: {message}" in capsys.readouterr().err


def test_bundles_in_a_batch_and_a_diff(tmp_path, monkeypatch, capsys):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    target = tmp_path / "case.tar.gz"
    assert main(["pack", str(case), "-o", str(target), "--no-env"]) == 0
    assert main(["triage", str(target), str(case), "-j", "1", "--no-env", "--lang", "en",
                 "-o", str(tmp_path / "out"), "--format", "json"]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8"))
    assert [r["stage"] for r in summary["cases"]] == ["convert", "convert"]
    assert [r["report"] for r in summary["cases"]] == ["case/report.json", "case-2/report.json"]
    capsys.readouterr()
    assert main(["diff", str(target), str(case), "--no-env", "--lang", "en"]) == 0
    assert "**Verdict: unchanged**" in capsys.readouterr().out
    assert not [p for p in scratch.iterdir() if p.name.startswith("qcdoctor-bundle-")]


@pytest.mark.parametrize("lang, reason", [
    ("zh", "拒绝：它位于案例目录之外（把它复制进案例目录，或用 --allow-outside 指定它所在的文件夹）"),
    ("en", "refused: it lies outside the case folder (copy it into the case folder, or pass "
           "--allow-outside with the folder that holds it)"),
])
def test_a_refused_artifact_is_listed_with_its_reason_in_the_bundles_language(
        tmp_path, capsys, lang, reason):
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "fx_graph.txt").write_text("TOP SECRET", encoding="utf-8")
    case = copy_example("convert_quant_analysis", tmp_path / "case")
    with open(case / "case.yaml", "a", encoding="utf-8") as handle:
        handle.write("artifacts:\n  fx_graph: ../secret/fx_graph.txt\n")
    target = tmp_path / "b.tar.gz"
    assert main(["pack", str(case), "-o", str(target), "--no-env", "--lang", lang]) == 0
    capsys.readouterr()
    manifest = json.loads(members(target)["MANIFEST.json"])
    left = {e["path"]: e["reason"] for e in manifest["left_out"]}
    assert left["case/../secret/fx_graph.txt"] == reason
