"""Guided intake: real pseudo-terminal sessions, piped and scripted answers, resumption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from qcdoctor.engine.intake.case_writer import CaseDocument
from qcdoctor.engine.intake.prompts import LinePrompter
from qcdoctor.engine.intake.session import Intake
from tests.terminal import TerminalSession, shows

DOWN, ENTER, SPACE, LEFT = "\x1b[B", "\r", " ", "\x1b[D"
LOCALE_VARS = ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE")


def clean_env(**extra: str) -> dict:
    """This process's environment without board variables or a locale, plus ``extra``."""
    env = {k: v for k, v in os.environ.items()
           if "BOARD_TYPE" not in k and k not in LOCALE_VARS}
    env.update(extra)
    return env


def spawn(folder: Path, *extra: str, env: dict | None = None, columns: int = 120,
          term: str = "xterm") -> pexpect.spawn:
    env = clean_env(**(env or {}))
    env.update(TERM=term, COLUMNS=str(columns), LINES="40")
    # text is matched wherever the program wrapped it: the case's path differs per machine
    child = TerminalSession(sys.executable, ["-m", "qcdoctor", "intake", str(folder), *extra],
                            env=env, encoding="utf-8", timeout=30, dimensions=(40, columns))
    return child


def stop_at_step_0(child) -> None:
    """End a terminal session at the step-0 question (what comes after the stage table):
    Ctrl-D there, the session closed once the program has exited."""
    child.expect_exact("not checked yet")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()


def run_piped(folder: Path, answers: list[str], *extra: str, env: dict | None = None):
    return subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(folder), *extra],
                          input="\n".join(answers) + "\n", capture_output=True, text=True,
                          timeout=60, env=clean_env(**(env or {})))


def case_of(folder: Path) -> dict:
    return yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))


def answer_text(child, prompt: str, text: str) -> None:
    child.expect_exact(prompt)
    child.expect_exact("> ")
    child.sendline(text)


def answer_menu(child, prompt: str, keys: str) -> None:
    child.expect_exact(prompt)
    child.expect_exact("›")
    child.send(keys)


def test_convert_case_on_j6e_in_a_real_terminal(tmp_path):
    folder = tmp_path / "convert"
    child = spawn(folder, "--lang", "en")
    answer_text(child, "Describe the symptom", "quantized.bc mAP 0.391 vs qat.bc 0.449")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)          # dataset_eval
    # the symptom's metric and numbers are the defaults: Enter confirms them
    child.expect_exact("Which metric")
    child.expect_exact("> [mAP] ")
    child.sendline("")
    answer_text(child, "Result of qat.pt?", "0.452")
    child.expect_exact("Result of qat.bc?")
    child.expect_exact("> [0.449] ")
    child.sendline("")
    child.expect_exact("Result of quantized.bc?")
    child.expect_exact("> [0.391] ")
    child.sendline("")
    # convert is placed: hbm (x86) and board results cannot change it and are not asked
    answer_menu(child, "stable, reproducible bad case?", ENTER)                # available
    answer_menu(child, "Which chip is the target?", ENTER)                     # J6E
    answer_text(child, "hbdk4-compiler version?", "4.4.2")
    answer_text(child, "horizon-plugin-pytorch version?", "3.1.5")
    answer_text(child, "horizon-plugin-profiler version?", "")
    answer_menu(child, "Can you retrain (QAT)?", DOWN + ENTER)                 # no
    # the first action would be the step-0 checks: they are asked, not left to the report
    answer_menu(child, "evaluation pre/post-processing the same at every stage?",
                DOWN + DOWN + ENTER)                                           # unknown
    child.expect_exact("Conclusion: convert")
    asked = child.before
    # the smallest verifiable action comes first: step-0 checks before level 0
    child.expect_exact("Next step: User-side consistency is not fully confirmed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert not shows(asked, "Result of hbm (x86)?") and not shows(asked, "Result of board?")
    case = case_of(folder)
    assert case["stages"]["quantized_bc"] == {"metric": "mAP", "value": 0.391}
    assert case["platform"] == {"chip": "J6E"} and case["retrain"] is False
    assert case["versions"] == {"hbdk4-compiler": "4.4.2", "horizon-plugin-pytorch": "3.1.5"}
    assert "board" not in case["stages"]


def test_compile_case_asks_deployment_details_only(tmp_path):
    folder = tmp_path / "compile"
    folder.mkdir()
    (folder / "deploy").mkdir()
    (folder / "deploy" / "build.py").write_text("from hbdk4.compiler import convert\n")
    (folder / "case.yaml").write_text(
        "# written by hand\nschema: qcdoctor/case-v1\nevidence: [dataset_eval]\nsymptom: hbm bad\n"
        "platform: {chip: J6P}\nstages:\n  quantized_bc: {status: normal}\n"
        "  hbm_x86: {status: abnormal}\n  board: {status: abnormal}\n")
    child = spawn(folder, "--lang", "en")
    answer_text(child, "Path of the compile script", "deploy/missing.py")
    child.expect_exact("Not accepted: deploy/missing.py is not a file in the case folder")
    answer_text(child, "Path of the compile script", "deploy/build.py")
    answer_menu(child, "Input colour space in training?", ENTER)               # rgb
    answer_menu(child, "Input layout in training?", ENTER)                     # NCHW
    answer_text(child, "Training normalisation mean", "123.675, 116.28, 103.53")
    answer_text(child, "Training normalisation std", "58.395 57.12 57.375")
    answer_menu(child, "Input format on the board?", ENTER)                    # nv12
    answer_menu(child, "Where does the board input come from?", ENTER)         # pyramid
    answer_text(child, "Board input height?", "abc")
    child.expect_exact("Not accepted: give a number")
    answer_text(child, "Board input height?", "540")
    answer_text(child, "Board input width?", "960")
    answer_text(child, "post-processing identical", "yes")
    child.expect_exact("Conclusion:")
    output = child.before
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    # a compile case is never asked about retraining, consistency levels or QuantAnalysis
    for text in ("retrain", "consistency levels", "bad case", "qat.pt"):
        assert not shows(output, text)
    text = (folder / "case.yaml").read_text()
    assert text.startswith("# written by hand\n")                             # comments kept
    case = case_of(folder)
    assert case["deploy"]["board"] == {"color": "nv12", "input_source": "pyramid",
                                       "height": 540, "width": 960}
    assert case["deploy"]["train"]["mean"] == [123.675, 116.28, 103.53]


# the messages hold the case's path: short and long paths, wide and narrow terminals
@pytest.mark.parametrize("columns,depth", [(120, 0), (60, 4)])
def test_interrupted_session_keeps_answers_language_and_resumes(tmp_path, columns, depth):
    folder = tmp_path.joinpath(*["a_rather_long_folder_name"] * depth, "resume")
    # no --lang: the locale says English
    child = spawn(folder, env={"LANG": "en_US.UTF-8"}, columns=columns)
    answer_text(child, "Describe the symptom", "board worse than qat")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)
    answer_text(child, "Which metric", "NDS")
    answer_text(child, "Result of qat.pt?", "0.47")
    child.expect_exact("Result of qat.bc?")
    child.expect_exact("> ")
    child.sendintr()                                                            # Ctrl-C
    child.expect_exact("interrupted; what was answered or collected is saved in")
    child.expect_exact(f"resume with: qcdoctor intake {folder} --lang en")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    case = case_of(folder)
    assert case["evidence"] == ["dataset_eval"] and case["stages"]["qat"]["value"] == 0.47
    assert case["language"] == "en"

    # resumed under a Chinese locale without --lang: the case's language wins
    child = spawn(folder, env={"LANG": "zh_CN.UTF-8"}, columns=columns)
    # resumes here, numbered on from the four answers case.yaml holds
    child.expect_exact("[5] Result of qat.bc?")
    child.expect_exact("> ")
    child.sendline("<")                                                         # back ...
    child.expect_exact("This is the first question: there is none before it.")
    child.expect_exact("[5] Result of qat.bc?")                                 # ... same number
    child.sendeof()
    child.expect_exact("Your answers are saved; run `qcdoctor intake")
    child.expect_exact("--lang en` to answer the rest later.")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert case_of(folder)["symptom"] == "board worse than qat"


def test_piped_answers_with_invalid_ones_reasked(tmp_path):
    folder = tmp_path / "piped"
    result = run_piped(folder, ["", "9", "1", "mAP", "0.45", "zz", "0.449", "0.30",
                                "available", "J6P"], "--lang", "en")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Not accepted: choose one of: dataset_eval" in out
    assert "Not accepted: give a number, or normal / abnormal / unknown" in out
    assert "Conclusion: convert" in out
    case = case_of(folder)
    assert case["stages"]["qat_bc"]["value"] == 0.449 and case["platform"]["chip"] == "J6P"
    assert "retrain" not in case                                               # J6P: never asked


def test_scripted_answers_and_a_bad_answer_file(tmp_path):
    folder = tmp_path / "scripted"
    answers = tmp_path / "answers.yaml"
    answers.write_text(yaml.safe_dump({
        "evidence": "dataset_eval", "symptom": "drop", "stages.metric": "mAP",
        "stages.qat": 0.45, "stages.qat_bc": 0.30, "badcase": "available",
        "stages.qat_export": "normal", "versions.horizon-plugin-profiler": "3.1.5"}))
    result = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(folder), "--answers",
                             str(answers), "--lang", "zh"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "结论：export" in result.stdout
    case = case_of(folder)
    assert case["stages"]["qat_export"] == {"status": "normal"}               # the follow-up asked
    answers.write_text(yaml.safe_dump({"evidence": "sometimes"}))
    bad = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(tmp_path / "b"),
                          "--answers", str(answers)], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "'evidence'" in bad.stderr and "Traceback" not in bad.stderr


def test_existing_case_keeps_comments_order_and_unrelated_keys(tmp_path):
    folder = tmp_path / "kept"
    folder.mkdir()
    original = ("# team notes: do not lose\nschema: qcdoctor/case-v1\ntitle: mine  # keep\n"
                "artifacts: {fx_graph: fx_graph.txt}\nstages:\n  qat: {status: normal}\n"
                "  quantized_bc: {status: abnormal}\n")
    (folder / "case.yaml").write_text(original)
    prompter = LinePrompter(stdin=__import__("io").StringIO("sym\ndataset_eval\n"),
                            stdout=__import__("io").StringIO())
    Intake(folder, prompter, lang="en", environ={}, installed={}).run()
    text = (folder / "case.yaml").read_text()
    assert text.startswith(original.rstrip("\n").split("stages:")[0])
    assert "title: mine  # keep" in text and "artifacts: {fx_graph: fx_graph.txt}" in text
    assert case_of(folder)["evidence"] == ["dataset_eval"]


def test_a_broken_existing_case_is_refused_untouched(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "case.yaml").write_text("stages:\n  qat: {valeu: 1}\n")
    with pytest.raises(Exception) as err:
        CaseDocument(folder)
    assert "valeu" in str(err.value)
    assert (folder / "case.yaml").read_text() == "stages:\n  qat: {valeu: 1}\n"


def test_back_reasks_the_previous_question_with_its_answer_as_default(tmp_path):
    import io
    out = io.StringIO()
    # the symptom, then '<' at the evidence back to it, keep it with Enter, then stop (EOF)
    prompter = LinePrompter(stdin=io.StringIO("first symptom\n<\n\n"), stdout=out)
    Intake(tmp_path / "b", prompter, lang="en", environ={}, installed={}).run()
    text = out.getvalue()
    assert text.count("Describe the symptom") == 2
    assert "> [first symptom]" in text                    # the previous answer is the default
    assert "> [first symptom] first symptom\n" in text          # kept with Enter, echoed once
    assert case_of(tmp_path / "b")["symptom"] == "first symptom"


def _question(key: str):
    from qcdoctor.catalogues import question_topics
    from qcdoctor.engine.intake.questions import questions_for
    for topic in question_topics():
        for question in questions_for(topic if topic != "stage_result" else "stage_result:qat"):
            if question.key == key:
                return question
    raise AssertionError(f"no question {key}")


def _examples(kind):
    from qcdoctor.catalogues import question_examples
    return question_examples()[kind]


@pytest.mark.parametrize("example", _examples("accepted"), ids=lambda e: e["key"] + ":" + e["answer"])
def test_catalogue_accepted_answers(example):
    assert _question(example["key"]).parse(example["answer"], "zh") == example["stored"]


@pytest.mark.parametrize("example", _examples("rejected"), ids=lambda e: e["key"] + ":" + e["answer"])
def test_catalogue_rejected_answers(example):
    from qcdoctor.engine.intake.questions import AnswerError
    with pytest.raises(AnswerError) as err:
        _question(example["key"]).parse(example["answer"], "en")
    assert str(err.value)


def test_every_topic_a_rule_can_ask_exists_and_every_missing_item_has_questions():
    from qcdoctor.engine.intake.questions import questions_for
    from qcdoctor.engine.matching.rulebook import load_rules
    from qcdoctor.vocabulary import FILE_MISSING_IDS, MISSING_IDS
    for missing in MISSING_IDS:
        assert (missing in FILE_MISSING_IDS) != bool(questions_for(missing)), missing
    for rule in load_rules():
        if "ask" in rule.then and "{" not in rule.then["ask"]:
            assert questions_for(rule.then["ask"]), rule.id


def test_a_new_user_reaches_a_report_in_chinese(tmp_path):
    folder = tmp_path / "zh"
    result = run_piped(folder, ["板端掉点", "1", "mAP", "0.446", "", "", "", "0.301", "0.30"])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "问题是怎样观察到的？" in out and "qat.pt 的评测结果？" in out
    # qat normal and board abnormal with nothing between: the bisection point is asked
    # again, now for its own reason, although it was skipped in the stage table
    assert out.count("quantized.bc 的评测结果？") == 2 and "这个阶段的结果把链路一分为二" in out
    assert "结论：" in out and "完整报告：qcdoctor triage" in out
    case = case_of(folder)
    assert case["stages"]["board"]["value"] == 0.301
    assert case["stages"]["quantized_bc"]["value"] == 0.30


def test_the_full_report_is_written_but_never_over_a_users_file(tmp_path):
    import io
    folder = tmp_path / "r"
    Intake(folder, LinePrompter(stdin=io.StringIO("1\n"), stdout=io.StringIO()), lang="en",
           environ={}, installed={}).run()
    report = (folder / "qcdoctor-report.md").read_text()
    assert report.startswith("# Consistency diagnosis report")
    (folder / "qcdoctor-report.md").write_text("my own notes\n")
    out = io.StringIO()
    Intake(folder, LinePrompter(stdin=io.StringIO(""), stdout=out), lang="en",
           environ={}, installed={}).run()
    assert (folder / "qcdoctor-report.md").read_text() == "my own notes\n"
    assert "Full report written" not in out.getvalue()


# --- issue: no silently wrong answers -------------------------------------------------

CONVERT_J6E = ("schema: qcdoctor/case-v1\nlanguage: en\nevidence: [dataset_eval]\nsymptom: drop\n"
               "stages:\n  qat_bc: {status: normal}\n  quantized_bc: {status: abnormal}\n"
               "badcase: available\nplatform: {chip: J6E}\n"
               "versions: {hbdk4-compiler: 4.4.2, horizon-plugin-pytorch: 3.1.5, "
               "horizon-plugin-profiler: 3.1.5}\n")


def test_multi_choice_enter_with_nothing_ticked_is_none_never_the_highlighted_option(tmp_path):
    folder = tmp_path / "levels"
    folder.mkdir()
    (folder / "case.yaml").write_text(CONVERT_J6E + "retrain: yes\n")
    child = spawn(folder)
    child.expect_exact("Which consistency levels were tried already?")
    # the hint under the prompt names every key that works here, n for none included
    # the levels are named by numbers: a digit is the level of that name, never a place
    child.expect_exact("↑↓ move · 0/1/2 tick the choice of that name · space tick · n none · "
                       "Enter confirm (nothing ticked = none)")
    child.expect_exact("? help · Ctrl-D")
    child.expect_exact("› [ ] level 0: no retraining")
    child.send(ENTER)
    stop_at_step_0(child)
    assert child.exitstatus == 0
    assert case_of(folder)["consistency_levels_tried"] == []                  # not [0]

    # where "none" is not an answer, Enter with nothing ticked says how to pick
    child = spawn(tmp_path / "evidence", "--lang", "en")
    answer_text(child, "Describe the symptom", "")
    child.expect_exact("How was the problem observed?")
    child.expect_exact("Enter confirm · s skip")
    child.expect_exact("› 1. [ ] a metric dropped in dataset evaluation")
    child.send(ENTER)
    child.expect_exact("Tick at least one with space or its number, then press Enter.")
    child.send("2" + ENTER)                                                     # a digit ticks
    child.expect_exact("[3] Which metric")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert case_of(tmp_path / "evidence")["evidence"] == ["reproducible_badcase"]


def test_back_inside_the_stage_table_reasks_the_previous_stage_piped(tmp_path):
    # the issue's own reproduction: '<' at quantized.bc goes back to qat.bc
    result = run_piped(tmp_path / "X", ["sym", "dataset_eval", "mAP", "0.452", "0.449", "<"],
                       "--lang", "en")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("[5] Result of qat.bc?") == 2 and "> [0.449] " in out
    assert out.count("Result of quantized.bc?") == 1


def test_back_works_across_topics_and_from_menus_in_a_real_terminal(tmp_path):
    folder = tmp_path / "back"
    child = spawn(folder, "--lang", "en")
    answer_text(child, "Describe the symptom", "drop")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)
    answer_text(child, "Which metric", "<")                  # first of a table -> another topic
    answer_menu(child, "[2] How was the problem observed?", LEFT)      # and back from a menu
    child.expect_exact("[1] Describe the symptom")
    child.expect_exact("> [drop] ")
    child.sendline("drop on quantized.bc")
    # the evidence, gone back over, comes again with its answer kept (ticked)
    child.expect_exact("[2] How was the problem observed?")
    child.expect_exact("[x] a metric dropped in dataset evaluation")
    child.send(ENTER)
    child.expect_exact("[3] Which metric")                    # re-asks keep their numbers
    child.sendline("mAP")
    answer_text(child, "Result of qat.pt?", "0.45")
    answer_text(child, "Result of qat.bc?", "0.449")
    answer_text(child, "Result of quantized.bc?", "0.39")
    answer_menu(child, "stable, reproducible bad case?", LEFT)    # Left arrow on a menu
    child.expect_exact("[6] Result of quantized.bc?")
    child.expect_exact("> [0.39] ")
    child.sendline("0.38")
    answer_menu(child, "stable, reproducible bad case?", "\x04")  # Ctrl-D: save and stop
    child.expect(pexpect.EOF)
    child.close()
    case = case_of(folder)
    assert case["symptom"] == "drop on quantized.bc"
    assert case["stages"]["quantized_bc"]["value"] == 0.38 and "badcase" not in case


@pytest.mark.parametrize("environ, expected", [
    ({}, "zh"), ({"LANG": "en_US.UTF-8"}, "en"), ({"LANG": "zh_CN.UTF-8"}, "zh"),
    ({"LANG": "zh_CN.UTF-8", "LC_ALL": "en_GB.UTF-8"}, "en"),
    ({"LANG": "en_US.UTF-8", "LC_MESSAGES": "zh_TW.UTF-8"}, "zh"),
    ({"LC_ALL": "", "LANG": "en_US"}, "en"), ({"LANG": "C.UTF-8"}, "zh"),
    ({"LANG": "POSIX"}, "zh"), ({"LANG": "de_DE.UTF-8"}, "en")])
def test_language_default_follows_the_locale(environ, expected):
    from qcdoctor.engine.reports.locale_language import locale_language
    assert locale_language(environ) == expected


def test_answers_file_unknown_key_is_refused_with_a_suggestion(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text("evidence: dataset_eval\nplatfrom.chip: J6E\n")
    result = run_piped(tmp_path / "c", [], "--answers", str(answers))
    assert result.returncode == 2
    assert "'platfrom.chip': unknown question key" in result.stderr
    assert "did you mean 'platform.chip'?" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "c").exists()                          # checked before anything


@pytest.mark.parametrize("line, allowed", [
    ("platform.chip: J7", "allowed values: J6E, J6M, J6P, J6H, J6B, S100, S100P, S600"),
    ("consistency_levels_tried: [0, 5]", "allowed values: 0, 1, 2, none"),
    ("deploy.board.height: 0", "at least 1"),
    ("stages.board: bad-ish", "give a number, or normal / abnormal / unknown")])
def test_answers_file_bad_value_is_refused_even_for_a_question_never_asked(tmp_path, line, allowed):
    # a convert case on J6P: no deployment, consistency or platform question comes up
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "case.yaml").write_text(CONVERT_J6E.replace("J6E", "J6P"))
    before = (folder / "case.yaml").read_text()
    answers = tmp_path / "answers.yaml"
    answers.write_text(line + "\n")
    result = run_piped(folder, [], "--answers", str(answers))
    assert result.returncode == 2, result.stdout
    assert f"'{line.split(':')[0]}'" in result.stderr and allowed in result.stderr
    assert (folder / "case.yaml").read_text() == before


def test_skipped_items_are_named_at_the_end_never_nothing_open(tmp_path):
    result = run_piped(tmp_path / "s", ["drop", "1", "", "", "", "", "", ""], "--lang", "en")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Everything the rules need is answered" not in out
    assert "Still open (not asked again):" in out
    assert 'you skipped "Which metric evaluates the stages?' in out
    assert out.index("Still open") < out.index("Conclusion: undetermined")


def test_ctrl_c_at_the_first_question_writes_nothing_and_says_so(tmp_path):
    folder = tmp_path / "new"
    child = spawn(folder, "--lang", "en")
    child.expect_exact("Describe the symptom")
    child.expect_exact("> ")
    child.sendintr()
    child.expect_exact("interrupted before any answer; no file was written")
    child.expect_exact(f"start again with: qcdoctor intake {folder} --lang en")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    assert not (folder / "case.yaml").exists()


def test_intake_of_a_file_that_is_not_a_case_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine\n")
    result = run_piped(tmp_path / "notes.txt", ["1"])
    assert result.returncode == 2
    assert "notes.txt: not a case folder nor a case.yaml" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]   # nothing written


def test_a_guessed_quantanalysis_comparison_is_asked_with_the_guess_as_default(tmp_path):
    from tests.qa.scenarios import cliff_rows
    from tests.qa.writers import layer, write_compare
    folder = tmp_path / "qa"
    folder.mkdir()
    (folder / "case.yaml").write_text(CONVERT_J6E.replace("J6E", "J6P"))
    write_compare(folder / "qa_calib", cliff_rows())          # told by the folder name only
    hbir = [dict(layer(f"l{i}", 0.9999), base_op_type="hbir.conv [hbir.conv2d]",
                 analy_op_type="hbir.qconv [hbir.conv2d]") for i in range(3)]
    write_compare(folder / "horizon_quant_analysis", hbir)     # two HBIR sides: certain
    result = run_piped(folder, [""])
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "Which two models does the QuantAnalysis folder qa_calib compare?" in out
    assert "> [float vs calib] " in out and "horizon_quant_analysis compare" not in out
    assert case_of(folder)["analyses_run"] == [
        {"type": "fake_quant", "baseline": "float", "analysis": "calib", "out_dir": "qa_calib"}]


def test_a_dumb_terminal_gets_plain_line_prompts(tmp_path):
    folder = tmp_path / "dumb"
    child = spawn(folder, "--lang", "en", term="dumb")
    child.logfile_read = transcript = __import__("io").StringIO()
    answer_text(child, "Describe the symptom", "drop")
    child.expect_exact("1) a metric dropped in dataset evaluation")
    child.expect_exact("Enter: keep default / skip · <: back · ?: help")
    child.expect_exact("> ")
    child.sendline("?")
    child.expect_exact("Example: 1, 3")                                       # help, then again
    child.expect_exact("> ")
    child.sendline("1, 3")
    child.expect_exact("Which metric")
    child.expect_exact("> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert "\x1b[" not in transcript.getvalue()                  # no cursor control at all
    assert case_of(folder)["evidence"] == ["dataset_eval", "multi_frame_visual"]


def test_every_question_has_help_and_every_choice_a_meaning_in_both_languages():
    from qcdoctor.catalogues import question_topics
    from qcdoctor.engine.intake.questions import questions_for
    for topic in question_topics():
        ref = {"stage_result": "stage_result:qat", "qa_comparison": "qa_comparison:qa"}.get(topic, topic)
        for question in questions_for(ref):
            for lang in ("zh", "en"):
                assert question.help_text(lang) not in ("", question.why[lang]), question.key
                for choice in question.choices:
                    assert question.choice_note(choice, lang), (question.key, choice, lang)


def test_wrapping_keeps_words_whole_and_counts_wide_characters():
    from qcdoctor.engine.reports.termtext import display_width, wrap
    lines = wrap("  The stage is read off the step from the last normal to the first abnormal "
                 "stage", 30)
    assert lines[0] == "  The stage is read off the" and all(len(x) <= 30 for x in lines)
    assert " ".join(x.strip() for x in lines).startswith("The stage is read off the step")
    zh = wrap("  阶段由最后一个正常阶段到第一个异常阶段的跳变决定，（例如）", 20)
    assert all(display_width(x) <= 21 for x in zh)            # 1 column of overhang for punctuation
    assert not any(x.strip().startswith(("，", "）")) for x in zh)
    assert "".join(x.strip() for x in zh) == "阶段由最后一个正常阶段到第一个异常阶段的跳变决定，（例如）"


@pytest.mark.parametrize("symptom, stages, metric", [
    ("quantized.bc mAP 0.391 vs qat.bc 0.449", {"quantized_bc": 0.391, "qat_bc": 0.449}, "mAP"),
    ("x86 hbm F1 0.612 and board 0.609, quantized.bc 0.842",
     {"hbm_x86": 0.612, "board": 0.609, "quantized_bc": 0.842}, "F1"),
    ("板端 mAP 0.30，x86 仿真 0.443，qat.pt 0.446", {"board": 0.30, "hbm_x86": 0.443, "qat": 0.446}, "mAP"),
    ("qat.export.pt 0.44, qat.pt 0.45", {"qat_export": 0.44, "qat": 0.45}, None),
    ("board worse than qat", {}, None)])
def test_symptom_numbers_become_stage_defaults(symptom, stages, metric):
    from qcdoctor.engine.intake.symptom_hints import stage_hints
    assert stage_hints(symptom) == (stages, metric)


def test_deployment_answers_the_compile_config_states_are_not_asked(tmp_path):
    import io
    folder = tmp_path / "config"
    folder.mkdir()
    (folder / "hb_compile.yaml").write_text(
        "model_parameters: {march: nash-p}\ninput_parameters: {input_type_train: bgr, "
        "input_type_rt: nv12, input_layout_train: NCHW, input_source: pyramid}\n")
    (folder / "case.yaml").write_text(
        "schema: qcdoctor/case-v1\nevidence: [dataset_eval]\nsymptom: hbm bad\n"
        "platform: {chip: J6P}\nstages:\n  quantized_bc: {status: normal}\n"
        "  hbm_x86: {status: abnormal}\n  board: {status: abnormal}\n"
        "deploy: {config: hb_compile.yaml}\n")
    out = io.StringIO()
    # no compile script: skipped; then mean, std, height, width, post-processing
    answers = "\n".join(["", "0", "255", "544", "960", "yes"]) + "\n"
    Intake(folder, LinePrompter(stdin=io.StringIO(answers), stdout=out), lang="en",
           environ={}, installed={}).run()
    text = out.getvalue()
    for stated in ("Input colour space in training?", "Input layout in training?",
                   "Input format on the board?", "Where does the board input come from?"):
        assert f"] {stated}" not in text and f'"{stated}" is known from the files' in text
    deploy = case_of(folder)["deploy"]
    assert deploy["train"] == {"color": "bgr", "layout": "NCHW", "mean": [0.0], "std": [255.0]}
    assert deploy["board"] == {"color": "nv12", "input_source": "pyramid", "height": 544,
                               "width": 960}
    assert "input_type_rt" in (folder / "case.yaml").read_text()            # where it was read


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_answered_topic_still_open_shows_answers_as_the_prompts_do(tmp_path, lang):
    """A yes/no answer reads yes or no in the open-topics line, never True or False."""
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "compile_model.py").write_text("print('compile')\n")
    (tmp_path / "case.yaml").write_text(
        "schema: qcdoctor/case-v1\n"
        "deploy:\n"
        "  script: deploy/compile_model.py\n"
        "  train: {color: rgb, layout: NCHW, mean: [123.675, 116.28, 103.53],"
        " std: [58.395, 57.12, 57.375]}\n"
        "  board: {color: nv12, input_source: pyramid, height: 544, width: 960}\n",
        encoding="utf-8")
    intake = Intake(tmp_path, LinePrompter(), lang=lang, strict=True)
    intake.doc.set("deploy.postprocess_same", False)        # as answered in this session
    report = {"missing": [{"id": "deploy_adaptation", "question": "deployment settings"}],
              "ask": [], "facts": []}
    [(what, reason)] = intake.still_open(report)
    assert what == "deployment settings"
    assert "deploy/compile_model.py; rgb; NCHW; 123.675, 116.28, 103.53; " \
           "58.395, 57.12, 57.375; nv12; pyramid; 544; 960; no" in reason
    assert "True" not in reason and "False" not in reason
