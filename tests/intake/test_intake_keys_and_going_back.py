"""One meaning per key, in a terminal and through a pipe: choices named by numbers (the
consistency levels 0-2) are entered by their names, never by their place in the list, and
none / n answers where the question offers none. Going back N questions walks forward
through the same N with their saved answers as the defaults. A piped answer is written
back once; scripted answers whose questions were never reached are named in a warning."""

from __future__ import annotations

import io
import re

import pexpect
import pytest
import yaml

from qcdoctor.wording import labels
from tests.intake.test_intake import (
    CONVERT_J6E,
    DOWN,
    ENTER,
    LEFT,
    answer_text,
    case_of,
    run_piped,
    spawn,
    stop_at_step_0,
)
from tests.intake.test_intake_as_a_user_meets_it import (
    STARTED,
    case_folder,
    headers,
    intake,
    screen,
)

LEVELS = "Which consistency levels were tried already?"


def levels_case(root):
    root.mkdir(parents=True)
    (root / "case.yaml").write_text(CONVERT_J6E + "retrain: yes\n", encoding="utf-8")
    return root


# --- the levels: the digit is the level's name, in both modes ----------------------------

@pytest.mark.parametrize("typed, stored", [("1", [1]), ("0", [0]), ("2", [2]), ("0, 2", [0, 2]),
                                           ("none", []), ("n", []), ("无", [])])
def test_a_piped_level_is_the_level_of_that_name(tmp_path, typed, stored):
    folder = levels_case(tmp_path / "c")
    result = run_piped(folder, [typed])
    assert result.returncode == 0, result.stderr
    assert case_of(folder)["consistency_levels_tried"] == stored
    listed = result.stdout[result.stdout.index(LEVELS):].split("\n> ", 1)[0]
    # listed without places: no "1) level 0" to read two ways
    assert "  - level 0: no retraining" in listed and not re.search(r"\d\) level", listed)


@pytest.mark.parametrize("lang, refused", [
    ("en", "3 is not a choice: type one of 0, 1, 2 by its name, or none"),
    ("zh", "3 不是可选项：请按名称输入 0, 1, 2，或 none")])
def test_a_piped_number_that_names_no_level_is_refused_not_read_as_a_place(tmp_path, lang,
                                                                        refused):
    folder = levels_case(tmp_path / "c")
    result = run_piped(folder, ["3", "1"], "--lang", lang)
    assert result.returncode == 0, result.stderr
    assert refused in result.stdout
    assert case_of(folder)["consistency_levels_tried"] == [1]          # never level 2


def levels_in_a_terminal(folder, keys: str) -> str:
    child = spawn(folder, columns=200)
    child.logfile_read = transcript = io.StringIO()
    child.expect_exact(LEVELS)
    child.expect_exact("› [ ] level 0: no retraining")
    child.send(keys)
    stop_at_step_0(child)
    return transcript.getvalue()


@pytest.mark.parametrize("keys, stored", [("1" + ENTER, [1]), ("0" + "2" + ENTER, [0, 2]),
                                          ("n", []), ("2" + "2" + ENTER, [])])
def test_a_level_pressed_in_a_terminal_is_the_level_of_that_name(tmp_path, keys, stored):
    folder = levels_case(tmp_path / "c")
    levels_in_a_terminal(folder, keys)
    assert case_of(folder)["consistency_levels_tried"] == stored


def test_the_same_key_means_the_same_level_in_a_terminal_and_through_a_pipe(tmp_path):
    terminal, piped = levels_case(tmp_path / "t"), levels_case(tmp_path / "p")
    shown = screen(levels_in_a_terminal(terminal, "1" + ENTER))
    assert run_piped(piped, ["1"]).returncode == 0
    assert case_of(terminal)["consistency_levels_tried"] == \
        case_of(piped)["consistency_levels_tried"] == [1]
    assert any("[x] level 1: needs retraining" in line for line in shown)


def test_a_key_that_names_no_level_says_which_do_in_a_terminal(tmp_path):
    folder = levels_case(tmp_path / "c")
    shown = levels_in_a_terminal(folder, "3" + "1" + ENTER)
    assert "there is no choice 3: the choices are 0, 1, 2" in shown
    assert case_of(folder)["consistency_levels_tried"] == [1]


# --- going back N questions walks forward through the same N -----------------------------

def test_two_steps_back_then_forward_again_through_a_pipe(tmp_path):
    folder = tmp_path / "piped"
    out = intake(folder, ["drop on quantized.bc", "1", "mAP", "0.452", "0.449",
                          "<",                  # at quantized.bc: back to qat.bc
                          "<",                  # at qat.bc: back to qat.pt
                          "0.45",               # qat.pt corrected
                          "0.44",               # qat.bc asked again, [0.449] offered: corrected
                          "0.391"])
    said = [h.split(" ", 1)[0] for h in headers(out)]
    assert said[3:10] == ["4]", "5]", "6]", "5]", "4]", "5]", "6]"], said
    again = out.split("> [0.452] 0.45\n", 1)[1]                   # qat.pt, its answer offered
    assert again.split("\n> ", 1)[1].startswith("[0.449] 0.44\n")   # qat.bc, its answer offered
    stages = case_of(folder)["stages"]
    assert (stages["qat"]["value"], stages["qat_bc"]["value"],
            stages["quantized_bc"]["value"]) == (0.45, 0.44, 0.391)


def test_three_steps_back_then_forward_again_in_a_terminal(tmp_path):
    folder = tmp_path / "terminal"
    child = spawn(folder, "--lang", "en", columns=200)
    answer_text(child, "Describe the symptom", "quantized.bc mAP 0.391 vs qat.bc 0.449")
    child.expect_exact("How was the problem observed?")
    child.expect_exact("›")
    child.send(" " + ENTER)
    answer_text(child, "Which metric", "")
    answer_text(child, "Result of qat.pt?", "0.452")
    answer_text(child, "Result of qat.bc?", "")
    answer_text(child, "Result of quantized.bc?", "")
    child.expect_exact("stable, reproducible bad case?")
    child.expect_exact("›")
    child.send(LEFT)                                            # back to quantized.bc
    answer_text(child, "[6] Result of quantized.bc?", "<")      # back to qat.bc
    answer_text(child, "[5] Result of qat.bc?", "<")            # back to qat.pt
    answer_text(child, "[4] Result of qat.pt?", "0.45")
    child.expect_exact("[5] Result of qat.bc?")                 # walked through again ...
    child.expect_exact("> [0.449] ")                            # ... with the saved answers
    child.sendline("0.448")
    child.expect_exact("[6] Result of quantized.bc?")
    child.expect_exact("> [0.391] ")
    child.sendline("")
    child.expect_exact("stable, reproducible bad case?")
    child.expect_exact("›")
    child.send(DOWN + ENTER)                                    # only a dataset
    child.expect_exact("Which chip is the target?")
    child.expect_exact("›")
    child.send("\x04")
    child.expect(pexpect.EOF)
    child.close()
    case = case_of(folder)
    assert {s: e["value"] for s, e in case["stages"].items()} == {
        "qat": 0.45, "qat_bc": 0.448, "quantized_bc": 0.391}
    assert case["badcase"] == "dataset_only"


def test_going_back_to_the_reading_of_the_symptom_offers_the_reading_chosen(tmp_path):
    folder = case_folder(tmp_path / "reading", "evidence: [dataset_eval]\n"
                         "symptom: 'qat.bc and quantized.bc: 0.449 and 0.391'\n")
    out = intake(folder, ["mAP", "1", "<", "2", ""])
    reading = "Which stage has which number of the symptom?"
    assert out.count(reading) == 2
    assert "> [reading_1] 2\n" in out                           # the choice made, offered
    assert case_of(folder)["stages"] == {"qat_bc": {"metric": "mAP", "value": 0.391},
                                         "quantized_bc": {"metric": "mAP", "value": 0.449}}


# --- a piped answer is written back once ---------------------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_piped_default_kept_with_enter_is_echoed_once(tmp_path, lang):
    folder = case_folder(tmp_path / "kept", STARTED, lang)
    result = run_piped(folder, ["", ""], "--lang", lang)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines.count("> [0.449] 0.449") == 1 and lines.count("> [0.391] 0.391") == 1
    assert "> 0.449" not in lines and "> [0.449] " not in lines
    assert sum("0.449" in line for line in lines if line.startswith(">")) == 1


# --- scripted answers for questions never reached ------------------------------------------

@pytest.mark.parametrize("lang, warning", [
    ("en", "qcdoctor: warning: not used: the answers file gives these questions, which were "
           "never reached: consistency_levels_tried, retrain"),
    ("zh", "qcdoctor: warning: 回答文件中以下问题没有问到，其回答未使用：consistency_levels_tried, "
           "retrain")])
def test_answers_for_questions_never_reached_are_named_in_one_warning(tmp_path, lang, warning):
    # on J6P neither retraining nor consistency levels is ever asked
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "case.yaml").write_text(CONVERT_J6E.replace("J6E", "J6P").replace(
        "language: en", f"language: {lang}"), encoding="utf-8")
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({"retrain": "no", "consistency_levels_tried": [0],
                                       "user_checks": "yes"}), encoding="utf-8")
    result = run_piped(folder, [], "--answers", str(answers))
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("qcdoctor: warning:") == 1
    assert warning in result.stderr and str(answers) in result.stderr
    assert "user_checks" not in result.stderr                   # used: not named
    assert case_of(folder)["user_checks"]["same_march"] is True     # YAML's yes


def test_no_warning_when_every_scripted_answer_was_used(tmp_path):
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "case.yaml").write_text(CONVERT_J6E + "retrain: yes\n", encoding="utf-8")
    answers = tmp_path / "answers.yaml"
    answers.write_text("consistency_levels_tried: 1\nuser_checks: 'yes'\n", encoding="utf-8")
    result = run_piped(folder, [], "--answers", str(answers))
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr
    assert case_of(folder)["consistency_levels_tried"] == [1]
    assert labels()["en"]["intake"]["answers_unused"].split(":")[0] not in result.stdout
