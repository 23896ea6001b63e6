"""Hostile case folders: nothing outside the case is read, odd files never hang a run,
and ``-o`` never overwrites an input. Every folder is built here, never executed."""

from __future__ import annotations

import io
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.files import CaseFiles
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from tests.deploy.scripts import CORRECT
from tests.qa.scenarios import build, case_yaml
from tests.qa.writers import layer, write_compare, write_fx_graph, write_model_check

SECRET = "SECRETOUTSIDE7391"

_opened: list[str] = []
_recording = threading.Event()


def _audit(event: str, args) -> None:
    """Every file opened and every folder listed while recording."""
    if _recording.is_set() and event in ("open", "os.scandir", "os.listdir") and args \
            and isinstance(args[0], (str, bytes, os.PathLike)):
        _opened.append(os.fsdecode(args[0]))


sys.addaudithook(_audit)


def _outside(tmp_path: Path) -> Path:
    """A folder beside the case holding artifacts that name the secret."""
    out = tmp_path / "outside"
    qa = out / "qa_convert"
    write_compare(qa, [layer(f"{SECRET}.s{i}.conv", 0.9999) for i in range(3)]
                  + [layer(f"{SECRET}.head", 0.5)])
    write_fx_graph(out / "fx_graph.txt", [("call_module", f"{SECRET}_node", "head", "()")])
    write_model_check(out / "model_check_result.txt", unfused=[f"{SECRET}.fuse"])
    (out / "compile_model.py").write_text(
        CORRECT.replace("nash-e", SECRET), encoding="utf-8")
    (out / "hb_compile.yaml").write_text(
        f"model_parameters: {{march: {SECRET}}}\n", encoding="utf-8")
    (out / ".drobotics-s").mkdir()
    (out / ".drobotics-s" / ".env.board").write_text("BPU_ARCH=nash-p\n", encoding="utf-8")
    return out


RUN = [{"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
        "out_dir": "qa_convert", "sensitivity": True}]


def _qa_case(tmp_path: Path, **extra) -> Path:
    """A convert case with a QuantAnalysis folder qa_convert, and ``extra`` keys."""
    case = build("cliff", tmp_path)
    case_yaml(case, analyses_run=RUN, **extra)
    return case


def _triage(folder: Path, allow=()) -> tuple[dict, list[str], CaseFiles]:
    files = CaseFiles(folder, tuple(allow))
    _opened.clear()
    _recording.set()
    try:
        report = triage_case(load_case(folder), lang="en", environ={}, installed={},
                             cwd=folder, case_files=files, full_checklist=True)
        texts = [render(report, fmt) for fmt in ("md", "html", "json")]
    finally:
        _recording.clear()
    return report, texts, files


def _read_outside(opened: list[str], outside: Path) -> list[str]:
    root = os.path.realpath(outside)
    return [p for p in opened if os.path.realpath(p) == root
            or os.path.realpath(p).startswith(root + os.sep)]


def _refused(report: dict) -> dict[str, str]:
    return {f["file"]: f["problem"] for f in report["facts"] if f["type"] == "artifact_problem"}


def test_paths_out_of_the_case_are_refused_and_listed(tmp_path):
    outside = _outside(tmp_path)
    case = tmp_path / "case"
    case_yaml(case, artifacts={"quant_analysis": ["../outside/qa_convert"],
                               "model_check_result": str(outside / "model_check_result.txt"),
                               "fx_graph": "../outside/fx_graph.txt"},
              deploy={"script": "../outside/compile_model.py",
                      "config": str(outside / "hb_compile.yaml")})
    report, texts, files = _triage(case)
    assert _read_outside(_opened, outside) == []
    assert all(SECRET not in text for text in texts)
    refused = _refused(report)
    for name in ("../outside/qa_convert", "../outside/fx_graph.txt",
                 "../outside/compile_model.py", str(outside / "hb_compile.yaml"),
                 str(outside / "model_check_result.txt")):
        assert "outside the case folder" in refused[name], name
    # each is a finding of the report, and the report still concludes
    findings = " ".join(f["text"] for f in report["findings"] if f["rule"] == "LY095")
    assert "../outside/compile_model.py could not be read: refused" in findings
    assert report["conclusion"]["stage"] == "convert"
    assert not files.read


def test_symlinks_out_of_the_case_are_not_followed(tmp_path):
    outside = _outside(tmp_path)
    case = tmp_path / "case"
    case_yaml(case, deploy={"script": "deploy/compile_model.py", "config": "deploy/hb.yaml"})
    (case / "deploy").mkdir()
    (case / "deploy" / "compile_model.py").symlink_to(outside / "compile_model.py")
    (case / "deploy" / "hb.yaml").symlink_to(outside / "hb_compile.yaml")
    (case / "qa_link").symlink_to(outside / "qa_convert")              # a linked folder
    (case / "qa_files").mkdir()                                         # linked files
    (case / "qa_files" / "compare_per_layer_out.txt").symlink_to(
        outside / "qa_convert" / "compare_per_layer_out.txt")
    (case / "fx_graph.txt").symlink_to(outside / "fx_graph.txt")
    (case / "model_check_result.txt").symlink_to(outside / "model_check_result.txt")
    (case / ".drobotics-s").symlink_to(outside / ".drobotics-s")
    report, texts, _ = _triage(case)
    assert _read_outside(_opened, outside) == []
    assert all(SECRET not in text for text in texts)
    refused = _refused(report)
    for name in ("deploy/compile_model.py", "deploy/hb.yaml", "qa_files/compare_per_layer_out.txt",
                 "fx_graph.txt", "model_check_result.txt", "qa_link"):
        assert "outside the case folder" in refused[name], name
    assert next(f for f in report["facts"] if f["type"] == "platform")["march"] != "nash-p"


def test_allow_outside_opens_one_folder(tmp_path):
    outside = _outside(tmp_path)
    case = tmp_path / "case"
    case_yaml(case, artifacts={"quant_analysis": ["../outside/qa_convert"]},
              deploy={"script": "../outside/compile_model.py"})
    report, texts, files = _triage(case, allow=[outside])
    assert SECRET in texts[0]                        # the layer names were read
    assert (outside / "compile_model.py").resolve() in files.read
    assert _refused(report) == {}


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/urandom", "fifo", "folder"])
def test_devices_fifos_and_folders_are_refused_at_once(tmp_path, special):
    case = _qa_case(tmp_path, deploy={"script": "deploy/compile_model.py",
                                      "config": "deploy/hb.yaml"})
    (case / "deploy").mkdir()
    target = case / "deploy" / "hb.yaml"
    qa = case / "qa_convert"
    if special == "fifo":
        os.mkfifo(target)
        os.mkfifo(case / "deploy" / "compile_model.py")
        os.mkfifo(case / "fx_graph.txt")
        os.mkfifo(qa / "badcase.txt")
    elif special == "folder":
        target.mkdir()
        (case / "deploy" / "compile_model.py").mkdir()
    else:
        target.symlink_to(special)
        (case / "deploy" / "compile_model.py").symlink_to(special)
        (case / "fx_graph.txt").symlink_to(special)
        (qa / "badcase.txt").symlink_to(special)
    started = time.monotonic()
    report, _, _ = _triage(case, allow=[Path("/dev")])        # even when /dev is allowed
    assert time.monotonic() - started < 30
    refused = _refused(report)
    assert "not a regular file" in refused["deploy/hb.yaml"]
    assert "not a regular file" in refused["deploy/compile_model.py"]
    if special != "folder":
        assert "not a regular file" in refused["fx_graph.txt"]
        assert "not a regular file" in refused["qa_convert/badcase.txt"]


def test_dump_folders_with_fifos_and_links_out(tmp_path):
    import numpy as np
    outside = _outside(tmp_path)
    np.save(outside / "secret.npy", np.arange(4, dtype=np.float32))
    case = tmp_path / "case"
    case_yaml(case, artifacts={"dumps": {"hbm_x86": "x86", "board": "board"}})
    for side in ("x86", "board"):
        (case / side).mkdir()
        np.save(case / side / "model_infer_output_0.npy", np.arange(4, dtype=np.float32))
    os.mkfifo(case / "x86" / "model_infer_output_1.npy")
    (case / "board" / "model_infer_output_1.npy").symlink_to(outside / "secret.npy")
    started = time.monotonic()
    report, _, _ = _triage(case)
    assert time.monotonic() - started < 30
    assert _read_outside(_opened, outside) == []
    refused = _refused(report)
    # the first refusal ends the comparison of that pair, and is reported
    assert "not a regular file" in refused["x86/model_infer_output_1.npy"]
    assert not [f for f in report["facts"] if f["type"] == "dump_pair"]


def test_a_file_over_its_size_cap_is_refused(tmp_path, monkeypatch):
    from qcdoctor.collectors import files
    monkeypatch.setitem(files.SIZE_CAPS, "script", 1000)
    case = tmp_path / "case"
    case_yaml(case, deploy={"script": "compile_model.py"})
    (case / "compile_model.py").write_text(CORRECT + "#" * 1000, encoding="utf-8")
    report, _, _ = _triage(case)
    assert "more than the 0 MiB read for a script file" in _refused(report)["compile_model.py"]


def _case_with_inputs(tmp_path: Path) -> Path:
    case = _qa_case(tmp_path, deploy={"script": "deploy/compile_model.py"})
    (case / "deploy").mkdir()
    (case / "deploy" / "compile_model.py").write_text(CORRECT, encoding="utf-8")
    return case


@pytest.mark.parametrize("target", ["deploy/compile_model.py", "case.yaml",
                                    "qa/compare_per_layer_out.txt", "hardlink", "symlink"])
def test_output_onto_an_input_is_refused(tmp_path, capsys, target):
    case = _case_with_inputs(tmp_path)
    target = target.replace("qa/", "qa_convert/")
    if target == "hardlink":
        os.link(case / "deploy" / "compile_model.py", tmp_path / "hardlink.py")
        path = tmp_path / "hardlink.py"
    elif target == "symlink":
        (tmp_path / "link.md").symlink_to(case / "case.yaml")
        path = tmp_path / "link.md"
    else:
        path = case / target
    before = path.read_bytes()
    assert main(["triage", str(case), "-o", str(path)]) == 2
    assert "refusing to overwrite an input of this run" in capsys.readouterr().err
    assert path.read_bytes() == before


def test_output_onto_a_folder_is_a_clear_error(tmp_path, capsys):
    case = _case_with_inputs(tmp_path)
    assert main(["audit", str(case), "-o", str(case / "deploy")]) == 2
    err = capsys.readouterr().err
    assert "this is a folder" in err and "internal error" not in err


def test_output_beside_the_inputs_is_written(tmp_path):
    case = _case_with_inputs(tmp_path)
    out = case / "report.html"
    assert main(["triage", str(case), "--format", "html", "-o", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not [p for p in case.iterdir() if p.name.endswith(".tmp")]


def test_cli_allow_outside_is_repeatable(tmp_path, capsys):
    outside = _outside(tmp_path)
    other = tmp_path / "other"
    shutil.copytree(outside / "qa_convert", other / "qa_b")
    case = tmp_path / "case"
    case_yaml(case, artifacts={"quant_analysis": ["../outside/qa_convert", "../other/qa_b"]})
    assert main(["collect", str(case), "--format", "json"]) == 0
    assert "outside the case folder" in capsys.readouterr().out
    assert main(["collect", str(case), "--format", "json", "--allow-outside", str(outside),
                 "--allow-outside", str(other)]) == 0
    out = capsys.readouterr().out
    assert "outside the case folder" not in out and SECRET in out


def test_intake_reads_outside_only_when_allowed(tmp_path):
    from qcdoctor.engine.intake.prompts import ScriptedPrompter
    from qcdoctor.engine.intake.session import Intake

    outside = _outside(tmp_path)
    case = tmp_path / "case"
    case_yaml(case, artifacts={"quant_analysis": ["../outside/qa_convert"]})
    answers = tmp_path / "answers.yaml"
    answers.write_text("symptom: drop\n", encoding="utf-8")
    for allow, expected in (((), "outside the case folder"), ((outside,), SECRET)):
        prompter = ScriptedPrompter(answers, stdout=io.StringIO())
        Intake(case, prompter, lang="en", environ={}, installed={}, strict=True,
               allow_outside=allow).run()
        assert expected in (case / "qcdoctor-report.md").read_text(encoding="utf-8")
