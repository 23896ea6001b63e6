"""The guided intake as a new user meets it: numbers that go on when a session resumes, a
kept default echoed as the answer it became, help that adds to the question, defaults
taken from what was collected, answers the audit would refuse refused at the question,
the symptom asked first; and one count of the checklist in the intake, the audit and the
batch summary."""

from __future__ import annotations

import io
import json
import re
import shutil
from pathlib import Path

import pexpect
import pytest

from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.checklist_counts import checklist_counts, failed_items
from qcdoctor.engine.diagnosis.diagnose import checklist_request
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.intake.prompts import LinePrompter
from qcdoctor.engine.intake.session import Intake
from qcdoctor.wording import labels
from tests.intake.test_intake import ENTER, case_of, run_piped, spawn, stop_at_step_0
from tests.intake.test_intake_sessions import COMPILE_SCRIPT

HEAD = "schema: qcdoctor/case-v1\nlanguage: {lang}\n"
# four questions answered: the symptom, the evidence, the metric and qat.pt's result
STARTED = ("evidence: [dataset_eval]\nsymptom: quantized.bc mAP 0.391 vs qat.bc 0.449\n"
           "stages:\n  qat: {metric: mAP, value: 0.452}\n")
VERSIONS = ("versions: {hbdk4-compiler: 4.4.2, horizon-plugin-pytorch: 3.1.5, "
            "horizon-plugin-profiler: 3.1.5}\n")
# a convert case that names no chip (its versions given: the chip comes next)
NO_CHIP = ("evidence: [dataset_eval]\nsymptom: drop\nbadcase: available\n"
           "stages:\n  qat_bc: {status: normal}\n  quantized_bc: {status: abnormal}\n"
           + VERSIONS)
# a board problem with no deployment details yet: the deployment table comes next
BOARD = ("evidence: [dataset_eval]\nsymptom: hbm bad\nplatform: {chip: J6P}\n"
         "stages:\n  quantized_bc: {status: normal}\n  hbm_x86: {status: abnormal}\n"
         "  board: {status: abnormal}\n")
# the compile script of a BOARD case compiles for its chip (a script in the folder is read
# by triage too: another march would be a failed check that ends the intake early)
J6P_SCRIPT = COMPILE_SCRIPT.replace("nash-e", "nash-p")
STATUS_LINE = re.compile(r"(\d+) failed, (\d+) unknown, (\d+) passed, (\d+) not applicable")


def case_folder(root: Path, body: str, lang: str = "en", script: str | None = None) -> Path:
    root.mkdir(parents=True)
    (root / "case.yaml").write_text(HEAD.format(lang=lang) + body, encoding="utf-8")
    if script is not None:
        (root / "deploy").mkdir()
        (root / "deploy" / "build.py").write_text(script, encoding="utf-8")
    return root


def intake(folder: Path, lines: list[str], lang: str = "en") -> str:
    """The intake fed ``lines`` as typed answers (then end of input); what it printed."""
    out = io.StringIO()
    Intake(folder, LinePrompter(stdin=io.StringIO("".join(f"{x}\n" for x in lines)),
                                stdout=out), lang=lang, environ={}, installed={}).run()
    return out.getvalue()


def headers(text: str) -> list[str]:
    return re.findall(r"^\[(\d+\] .+?)$", text, flags=re.M)


def screen(transcript: str) -> list[str]:
    """The lines a wide terminal shows once ``transcript`` is played: text, carriage
    return, line feed, cursor up (ESC [ n A) and erase (ESC [ J / K) applied."""
    lines, row, col = [""], 0, 0
    for part in re.finditer(r"\x1b\[([0-9;]*)([A-Za-z])|\r|\n|\x1b.?|[^\x1b\r\n]+", transcript):
        token = part.group(0)
        if part.group(2) == "A":
            row = max(0, row - int(part.group(1) or 1))
        elif part.group(2) in ("J", "K"):
            lines[row] = lines[row][:col]
            if part.group(2) == "J":
                del lines[row + 1:]
        elif token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            if row == len(lines):
                lines.append("")
        elif not token.startswith("\x1b"):
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return [line.rstrip() for line in lines]


# --- 1. numbers go on where the answers in case.yaml stop ------------------------------

@pytest.mark.parametrize("lang, first, second", [
    ("en", "[5] Result of qat.bc?", "[6] Result of quantized.bc?"),
    ("zh", "[5] qat.bc 的评测结果？", "[6] quantized.bc 的评测结果？")])
def test_a_resumed_intake_numbers_on_from_the_answers_case_yaml_holds(tmp_path, lang, first,
                                                                      second):
    folder = case_folder(tmp_path / "resumed", STARTED, lang)
    said = headers(intake(folder, ["0.449", "0.391"], lang))
    assert said[0].startswith(first[1:]) and said[1].startswith(second[1:]), said
    assert not any(h.startswith("1] ") for h in said)


def test_numbers_of_one_session_and_the_next_read_as_one_sequence(tmp_path):
    folder = tmp_path / "two"
    first = headers(intake(folder, ["drop on quantized.bc", "1", "mAP", "0.452"]))
    second = headers(intake(folder, ["0.449"]))
    numbers = [int(h.split("]")[0]) for h in first + second]
    # the question the first session stopped at comes back with its number
    assert first[-1] == second[0] == "5] Result of qat.bc? A metric value, or normal / " \
                                     "abnormal / unknown"
    assert numbers[:5] == [1, 2, 3, 4, 5] and numbers[5:] == list(range(5, 5 + len(second)))


# --- 2. a kept default reads as the answer it became -------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_kept_default_is_echoed_as_the_answer_when_piped(tmp_path, lang):
    folder = case_folder(tmp_path / "kept", STARTED, lang)
    out = intake(folder, ["", "0.39"], lang)
    assert "> [0.449] 0.449\n" in out                           # offered, kept: echoed once
    assert "\n> 0.449\n" not in out
    assert "> [0.391] 0.39\n" in out                            # a typed answer, as typed
    assert case_of(folder)["stages"]["qat_bc"]["value"] == 0.449


@pytest.mark.parametrize("lang, prompt", [("en", "Result of qat.bc?"),
                                          ("zh", "qat.bc 的评测结果？")])
def test_a_kept_default_replaces_its_offer_in_a_real_terminal(tmp_path, lang, prompt):
    folder = case_folder(tmp_path / "terminal", STARTED, lang)
    child = spawn(folder, columns=200)
    child.logfile_read = transcript = io.StringIO()
    child.expect_exact(prompt)
    child.expect_exact("> [0.449] ")
    child.sendline("")
    child.expect_exact("[6]")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    shown = screen(transcript.getvalue())
    assert "> 0.449" in shown and not any("[0.449]" in line for line in shown)
    header = next(i for i, line in enumerate(shown) if line.startswith(f"[5] {prompt}"))
    assert header < shown.index("> 0.449") < next(
        i for i, line in enumerate(shown) if line.startswith("[6] "))
    assert case_of(folder)["stages"]["qat_bc"]["value"] == 0.449


# --- 3. help says what the question's lines do not ---------------------------------------

def test_help_on_a_menu_adds_to_the_question_and_repeats_none_of_its_lines(tmp_path):
    folder = case_folder(tmp_path / "help", NO_CHIP)
    child = spawn(folder, columns=200)
    child.logfile_read = transcript = io.StringIO()
    child.expect_exact("Which chip is the target?")
    child.expect_exact("›")
    child.send("?")
    child.expect_exact("BOARD_TYPE / BPU_ARCH")
    child.expect_exact("›")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    shown = [line.strip() for line in screen(transcript.getvalue()) if line.strip()]
    why = "(The high-consistency strategy exists only for J6E/J6M)"
    assert shown.count(why) == 1 and not any("exists only for J6E/J6M" in line
                                             for line in shown if line != why)
    assert any(line.startswith("Answers: ") and "1-8" in line for line in shown)
    # no line of the question shown twice (the case folder's path before it may wrap into
    # lines that look alike, whatever the temporary folder is called)
    asked = [line for line in shown[next(i for i, line in enumerate(shown)
                                         if "Which chip" in line):]
             if line not in str(folder.resolve())]     # a piece of the wrapped path
    assert len(asked) == len(set(asked)), [line for line in set(asked) if asked.count(line) > 1]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_help_on_a_line_prompt_names_the_answers_and_where_the_default_came_from(tmp_path,
                                                                                 lang):
    folder = case_folder(tmp_path / "line", STARTED, lang)
    out = intake(folder, ["?"], lang)
    words = labels()[lang]["intake"]
    asked = out[out.index("[5]"):]
    question_lines = [line.strip() for line in asked.splitlines()[:2]]
    shown = asked.split("> [0.449] ?\n", 1)[1].split("> [0.449]", 1)[0]
    help_lines = [line.strip() for line in shown.splitlines() if line.strip()]
    # where the default came from is under the question, before Enter can keep it
    origin = [line.strip() for line in asked.split("> [0.449] ?", 1)[0].splitlines()]
    assert any("0.449" in line and words["default_symptom"] in line for line in origin)
    assert help_lines and not set(help_lines) & set(question_lines + origin)    # nothing repeated
    assert any(line.startswith(words["help_answers"].split("{")[0]) for line in help_lines)


# --- 4. the chip's default is the family of the march the folder's script names ---------

@pytest.mark.parametrize("march, chip", [("nash-p", "J6P"), ("nash-m", "J6M"),
                                         ("nash-e", "J6E")])
def test_the_chip_default_follows_the_compile_scripts_march(tmp_path, march, chip):
    folder = case_folder(tmp_path / march, NO_CHIP,
                         script=COMPILE_SCRIPT.replace("nash-e", march))
    out = intake(folder, [""])
    assert f"> [{chip}] {chip}\n" in out
    assert case_of(folder)["platform"] == {"chip": chip}


def test_the_chip_menu_opens_on_the_scripts_chip_in_a_real_terminal(tmp_path):
    folder = case_folder(tmp_path / "menu", NO_CHIP,
                         script=COMPILE_SCRIPT.replace("nash-e", "nash-p"))
    child = spawn(folder, columns=200)
    child.expect_exact("Which chip is the target?")
    child.expect_exact("deploy/build.py")     # where the default came from, before Enter keeps it
    child.expect_exact("› 3. J6P - march nash-p")
    child.send(ENTER)
    stop_at_step_0(child)
    assert case_of(folder)["platform"] == {"chip": "J6P"}


def test_no_script_no_default_chip(tmp_path):
    folder = case_folder(tmp_path / "none", NO_CHIP)
    out = intake(folder, [""])
    assert "Which chip is the target?" in out and "> [J6" not in out
    assert "platform" not in case_of(folder)


# --- 5. an odd NV12 size is refused where it is typed ------------------------------------

# the deployment table of BOARD with COMPILE_SCRIPT in the folder: the script is found, and
# with it the layout and the board's NV12 format; the script's mean/std are kept (Enter)
TABLE = ["rgb", "", "", "pyramid"]


@pytest.mark.parametrize("lang, refused", [
    ("en", "Not accepted: an NV12 input needs an even height: 541 is odd"),
    ("zh", "答案无效：NV12 输入的高度必须是偶数：541 是奇数")])
def test_an_odd_nv12_height_or_width_is_asked_again(tmp_path, lang, refused):
    folder = case_folder(tmp_path / "nv12", BOARD, lang, script=J6P_SCRIPT)
    out = intake(folder, [*TABLE, "541", "544", "961", "960", "yes"], lang)
    assert refused in out
    height, width = (("Board input height?", "Board input width?") if lang == "en" else
                     ("板端输入高度？", "板端输入宽度？"))
    assert out.count(height) == 2 and out.count(width) == 2 and "961" in out
    assert case_of(folder)["deploy"]["board"] == {
        "color": "nv12", "input_source": "pyramid", "height": 544, "width": 960}
    # what was refused never reaches the audit
    report = triage_path(folder, lang="en", use_env=False, full_checklist=True)
    assert next(c for c in report["checklist"] if c["id"] == "nv12_even_size")["status"] == "pass"


def test_an_odd_size_is_fine_where_the_input_is_not_nv12(tmp_path):
    folder = case_folder(tmp_path / "rgb", BOARD)
    # no script; rgb, NCHW, pixel-scale mean and std, an rgb board input from ddr
    out = intake(folder, ["", "rgb", "NCHW", "123.675, 116.28, 103.53",
                          "58.395, 57.12, 57.375", "rgb", "ddr", "541", "961", "yes"])
    assert "is odd" not in out
    assert case_of(folder)["deploy"]["board"] == {
        "color": "rgb", "input_source": "ddr", "height": 541, "width": 961}


def test_an_answers_file_with_an_odd_nv12_size_stops_naming_the_key(tmp_path):
    folder = case_folder(tmp_path / "scripted", BOARD, script=J6P_SCRIPT)
    answers = tmp_path / "answers.yaml"
    answers.write_text("deploy.train.color: rgb\ndeploy.board.input_source: pyramid\n"
                       "deploy.board.height: 544\ndeploy.board.width: 961\n")
    result = run_piped(folder, [], "--answers", str(answers))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "'deploy.board.width'" in result.stderr and "961 is odd" in result.stderr
    assert str(answers) in result.stderr
    assert "width" not in case_of(folder)["deploy"]["board"]


# --- 6. what happened comes before how it was seen ---------------------------------------

@pytest.mark.parametrize("lang, symptom, evidence", [
    ("en", "Describe the symptom", "How was the problem observed?"),
    ("zh", "简述异常现象", "问题是怎样观察到的？")])
def test_the_symptom_is_asked_before_the_evidence(tmp_path, lang, symptom, evidence):
    out = intake(tmp_path / "new", ["board mAP 0.30 vs qat.pt 0.446", "1"], lang)
    said = headers(out)
    assert said[0].startswith(f"1] {symptom}") and said[1].startswith(f"2] {evidence}")
    case = case_of(tmp_path / "new")
    assert case["symptom"] == "board mAP 0.30 vs qat.pt 0.446"
    assert case["evidence"] == ["dataset_eval"]


# --- 7. one count of the checklist everywhere --------------------------------------------

def deploy_with_two_mistakes(root: Path) -> Path:
    """No transpose for an NCHW model fed NV12 (layout) and an odd NV12 size (the finer
    check and, rolled up, padding): two checks to fix, three FAIL rows."""
    return case_folder(root, BOARD + (
        "deploy:\n  script: deploy/build.py\n  train: {color: rgb, layout: NCHW}\n"
        "  board: {color: nv12, input_source: pyramid, height: 541, width: 961}\n"
        "  postprocess_same: yes\n"), script="from hbdk4.compiler import convert\n")


def example(root: Path, name: str) -> Path:
    with example_path(name) as source:
        shutil.copytree(source, root)
    return root


ROLLED_UP = re.compile(r"; (\d+) mandatory item\(s\) \(\*\) show the status of a finer check")


def audit_counts(folder: Path, capsys) -> dict:
    assert main(["audit", str(folder), "--format", "md", "--no-env", "--lang", "en"]) == 0
    found = STATUS_LINE.search(capsys.readouterr().out)
    counts = dict(zip(("fail", "unknown", "pass", "not_applicable"),
                      map(int, found.groups()), strict=True))
    rolled = ROLLED_UP.search(found.string[found.end():].split("\n", 1)[0])
    counts["rolled_up"] = int(rolled.group(1)) if rolled else 0
    return counts


def intake_failed(folder: Path) -> int:
    found = re.search(r"Failed deployment checks \((\d+)\)", intake(folder, []))
    return int(found.group(1)) if found else 0


def test_intake_audit_and_batch_count_the_same_failed_checks(tmp_path, capsys):
    folders = [deploy_with_two_mistakes(tmp_path / "cases" / "two_mistakes"),
               example(tmp_path / "cases" / "board", "board_nv12_deploy"),
               example(tmp_path / "cases" / "convert", "convert_j6p")]
    expected_failed = {"two_mistakes": ["layout", "nv12_even_size"],
                       "board": ["preprocess_mode"], "convert": []}
    out = tmp_path / "out"
    assert main(["audit", *map(str, folders), "-j", "1", "--no-env", "--lang", "en",
                 "--format", "json", "-o", str(out)]) == 0
    table = capsys.readouterr().out
    rows = {Path(r["case"]).name: r for r in json.loads((out / "summary.json").read_text())["cases"]}
    for folder in folders:
        report = json.loads((out / rows[folder.name]["report"]).read_text())
        counts = audit_counts(folder, capsys)
        assert counts == checklist_counts(report)
        assert rows[folder.name]["failed"] == [c["id"] for c in failed_items(report)] \
            == expected_failed[folder.name]
        assert intake_failed(folder) == counts["fail"] == len(expected_failed[folder.name])
    # the failed checks counted beside what the cases concluded, whatever --fail-on says
    assert "of these, 2 with failed checklist items, 0 with findings at --fail-on" in table


def test_the_triage_batch_lists_the_same_failed_checks(tmp_path, capsys):
    folder = deploy_with_two_mistakes(tmp_path / "cases" / "two_mistakes")
    out = tmp_path / "out"
    assert main(["triage", str(folder), str(folder), "-j", "1", "--no-env", "--lang", "en",
                 "--format", "json", "-o", str(out)]) == 0
    assert "of these, 2 with failed checklist items" in capsys.readouterr().out
    rows = json.loads((out / "summary.json").read_text())["cases"]
    assert [r["failed"] for r in rows] == [["layout", "nv12_even_size"]] * 2


def test_the_intake_names_each_failed_check_once_with_what_failed(tmp_path):
    said = intake(deploy_with_two_mistakes(tmp_path / "c"), [])
    listed = said[said.index("Failed deployment checks (2):"):].splitlines()[1:3]
    # each named by its failure
    assert listed[0].startswith("  - The layout conversion does not fit the training and board "
                                "layouts: Training is NCHW")
    assert listed[1].startswith("  - NV12 input height or width is not even: NV12 input 541×961")
    assert "Padding" not in said[said.index("Failed deployment checks"):]
    assert "Next step: fix these 2 items, then evaluate again" in said


def test_postprocessing_the_intake_wrote_is_never_asked_for_again(tmp_path, capsys):
    """The compile script removes Dequantize: the I/O types stay to confirm, and the
    pre/post-processing item is unknown through that finer check alone."""
    with example_path("board_nv12_deploy") as source:
        script = (source / "deploy" / "compile_model.py").read_text(encoding="utf-8")
    folder = case_folder(tmp_path / "pp", BOARD.replace("J6P", "J6E") + VERSIONS,
                         script=script)
    # colour, mean and std (the script's), input source, height, width, post-processing
    intake(folder, [*TABLE, "544", "960", "yes"])
    assert case_of(folder)["deploy"]["postprocess_same"] is True
    assert main(["audit", str(folder), "--format", "md", "--no-env", "--lang", "en"]) == 0
    audit = capsys.readouterr().out
    # what the item asks for when the case gives none of its keys
    asked = checklist_request("pre_post_nodes", set(), "en", set())
    assert "(deploy.postprocess_same)" in asked and asked not in audit
    report = triage_path(folder, lang="en", use_env=False, full_checklist=True)
    item = next(c for c in report["checklist"] if c["id"] == "pre_post_nodes")
    assert item["status"] == "unknown" and [p["id"] for p in item["parts"]] == ["qdq_io_types"]
    # it asks what its finer check needs, as that check's own row does
    io_types = next(c for c in report["checklist"] if c["id"] == "qdq_io_types")
    assert item["provide"] == io_types["provide"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_compile_script_in_the_folder_is_no_nothing_to_collect(tmp_path, lang):
    """The script case.yaml does not name yet is said where the intake says what it
    collected, never "nothing to collect"."""
    folder = tmp_path / "case"
    (folder / "deploy").mkdir(parents=True)
    (folder / "deploy" / "compile_model.py").write_text(COMPILE_SCRIPT, encoding="utf-8")
    said = intake(folder, [], lang=lang)
    words = labels()[lang]["intake"]
    assert words["none_found"] not in said
    assert words["script_found"].format(script="deploy/compile_model.py") in said
    empty = intake(tmp_path / "empty", [], lang=lang)
    assert words["none_found"] in empty
