"""Guided intake: real pseudo-terminal sessions, piped and scripted answers, resumption."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest
import yaml

from qcdoctor.engine.case_document import CaseDocument
from qcdoctor.engine.intake import Intake
from qcdoctor.engine.prompts import LinePrompter

DOWN, ENTER, SPACE = "\x1b[B", "\r", " "


def spawn(folder: Path, *extra: str) -> pexpect.spawn:
    env = {k: v for k, v in os.environ.items() if "BOARD_TYPE" not in k}
    env.update(TERM="xterm", COLUMNS="120", LINES="40")
    child = pexpect.spawn(sys.executable, ["-m", "qcdoctor", "intake", str(folder), *extra],
                          env=env, encoding="utf-8", timeout=30, dimensions=(40, 120))
    return child


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
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)          # dataset_eval
    answer_text(child, "Describe the symptom", "quantized.bc mAP 0.391 vs qat.bc 0.449")
    answer_text(child, "Which metric", "mAP")
    answer_text(child, "Result of qat.pt?", "0.452")
    answer_text(child, "Result of qat.bc?", "0.449")
    answer_text(child, "Result of quantized.bc?", "0.391")
    answer_text(child, "Result of hbm (x86)?", "")                              # skip
    answer_text(child, "Result of board?", "")
    answer_menu(child, "stable, reproducible bad case?", ENTER)                # available
    answer_menu(child, "Which chip is the target?", ENTER)                     # J6E
    answer_text(child, "hbdk4-compiler version?", "4.4.2")
    answer_text(child, "horizon-plugin-pytorch version?", "3.1.5")
    answer_text(child, "horizon-plugin-profiler version?", "")
    answer_menu(child, "Can you retrain (QAT)?", DOWN + ENTER)                 # no
    child.expect_exact("Conclusion: convert")
    # the smallest verifiable action comes first: step-0 checks before level 0
    child.expect_exact("Next step: User-side consistency is not fully confirmed")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
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
        assert text not in output
    text = (folder / "case.yaml").read_text()
    assert text.startswith("# written by hand\n")                             # comments kept
    case = case_of(folder)
    assert case["deploy"]["board"] == {"color": "nv12", "input_source": "pyramid",
                                       "height": 540, "width": 960}
    assert case["deploy"]["train"]["mean"] == [123.675, 116.28, 103.53]


def test_interrupted_session_keeps_answers_and_resumes(tmp_path):
    folder = tmp_path / "resume"
    child = spawn(folder, "--lang", "en")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)
    answer_text(child, "Describe the symptom", "board worse than qat")
    answer_text(child, "Which metric", "NDS")
    answer_text(child, "Result of qat.pt?", "0.47")
    child.expect_exact("Result of qat.bc?")
    child.expect_exact("> ")
    child.sendintr()                                                            # Ctrl-C
    child.expect_exact("interrupted; answers so far are saved in")
    child.expect_exact(f"resume with: qcdoctor intake {folder}")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 130
    case = case_of(folder)
    assert case["evidence"] == ["dataset_eval"] and case["stages"]["qat"]["value"] == 0.47

    child = spawn(folder, "--lang", "en")
    child.expect_exact("[1] Result of qat.bc?")                                 # resumes here
    child.expect_exact("> ")
    child.sendline("<")                                                         # back ...
    child.expect_exact("Result of qat.bc?")                                     # ... nothing before in this run
    child.sendeof()
    child.expect_exact("Your answers are saved")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert case_of(folder)["symptom"] == "board worse than qat"


def test_piped_answers_with_invalid_ones_reasked(tmp_path):
    folder = tmp_path / "piped"
    answers = "\n".join(["9", "1", "", "mAP", "0.45", "zz", "0.449", "0.30", "", "",
                         "available", "J6P"]) + "\n"
    result = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(folder), "--lang", "en"],
                            input=answers, capture_output=True, text=True, timeout=60)
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
    prompter = LinePrompter(stdin=__import__("io").StringIO("dataset_eval\nsym\n"),
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
    # evidence, symptom, then '<' back to the symptom, keep it with Enter, then stop (EOF)
    prompter = LinePrompter(stdin=io.StringIO("1\nfirst symptom\n<\n\n"), stdout=out)
    Intake(tmp_path / "b", prompter, lang="en", environ={}, installed={}).run()
    text = out.getvalue()
    assert text.count("Describe the symptom") == 2
    assert "> [first symptom]" in text                    # the previous answer is the default
    assert case_of(tmp_path / "b")["symptom"] == "first symptom"


def _question(key: str):
    from qcdoctor.engine.questions import questions_for
    from qcdoctor.engine.rulebook import question_topics
    for topic in question_topics():
        for question in questions_for(topic if topic != "stage_result" else "stage_result:qat"):
            if question.key == key:
                return question
    raise AssertionError(f"no question {key}")


def _examples(kind):
    from qcdoctor.engine.rulebook import question_examples
    return question_examples()[kind]


@pytest.mark.parametrize("example", _examples("accepted"), ids=lambda e: e["key"] + ":" + e["answer"])
def test_catalogue_accepted_answers(example):
    assert _question(example["key"]).parse(example["answer"], "zh") == example["stored"]


@pytest.mark.parametrize("example", _examples("rejected"), ids=lambda e: e["key"] + ":" + e["answer"])
def test_catalogue_rejected_answers(example):
    from qcdoctor.engine.questions import AnswerError
    with pytest.raises(AnswerError) as err:
        _question(example["key"]).parse(example["answer"], "en")
    assert str(err.value)


def test_every_topic_a_rule_can_ask_exists_and_every_missing_item_has_questions():
    from qcdoctor.engine.questions import questions_for
    from qcdoctor.engine.rulebook import load_rules
    from qcdoctor.engine.vocabulary import MISSING_IDS
    for missing in MISSING_IDS:
        assert questions_for(missing), missing
    for rule in load_rules():
        if "ask" in rule.then and "{" not in rule.then["ask"]:
            assert questions_for(rule.then["ask"]), rule.id


def test_a_new_user_reaches_a_report_in_chinese(tmp_path):
    folder = tmp_path / "zh"
    answers = "\n".join(["1", "板端掉点", "mAP", "0.446", "", "", "", "0.301",
                         "0.30"]) + "\n"
    result = subprocess.run([sys.executable, "-m", "qcdoctor", "intake", str(folder)],
                            input=answers, capture_output=True, text=True, timeout=60)
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
