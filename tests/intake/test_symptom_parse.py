"""The intake reads what the symptom line says: each number with its stage, the metric's
name (never a verb or a number), nothing offered where the sentence is ambiguous; the
questions go on to the stages the symptom names; an answer is never asked twice; a skip
is reported under the skipped question's own name."""

from __future__ import annotations

import io

import pexpect
import pytest

from qcdoctor.engine.intake.symptom_hints import read_symptom
from qcdoctor.wording import labels
from tests.intake.test_intake import ENTER, SPACE, answer_menu, answer_text, case_of, spawn
from tests.intake.test_intake_as_a_user_meets_it import case_folder, headers, intake
from tests.terminal import shows

GIVES = "mAP of quantized.bc is 0.391 while qat.bc gives 0.449"
FALLS = "BEV mAP falls from 0.449 (qat.bc) to 0.391 on quantized.bc"
ZH = "quantized.bc 的 mAP 是 0.391，qat.bc 是 0.449"
CONVERT_DROP = {"qat_bc": 0.449, "quantized_bc": 0.391}


# --- the parse ---------------------------------------------------------------------------

@pytest.mark.parametrize("symptom, values, metric", [
    (GIVES, CONVERT_DROP, "mAP"),
    (FALLS, CONVERT_DROP, "mAP"),
    (ZH, CONVERT_DROP, "mAP"),
    ("mAP falls from 0.449 to 0.391 from qat.bc to quantized.bc", CONVERT_DROP, "mAP"),
    ("0.391 on quantized.bc and 0.449 on the qat.bc", CONVERT_DROP, None),
    ("mAP drops by 0.058 from qat.bc 0.449 to quantized.bc 0.391", CONVERT_DROP, "mAP"),
    ("mAP@0.5 of quantized.bc is 39.1% while qat.bc gives 44.9%", CONVERT_DROP, "mAP@0.5"),
    ("score of quantized.bc is 0.391, qat.bc 0.449", CONVERT_DROP, "score"),
    ("mAP 从 0.449（qat.bc）降到 0.391（quantized.bc）", CONVERT_DROP, "mAP"),
    ("在板端的mAP只有0.30，仿真是0.443", {"board": 0.30, "hbm_x86": 0.443}, "mAP"),
    ("accuracy on the board is bad; qat 0.81, qat.bc 0.80", {"qat": 0.81, "qat_bc": 0.80},
     "accuracy"),
    ("hbm and board are bad while qat.bc gives 0.449", {"qat_bc": 0.449}, None),
    ("the drop is 0.06 on the board", {}, None),
    ("qat.bc gives 0.449", {"qat_bc": 0.449}, None)])
def test_each_number_goes_to_the_stage_the_sentence_ties_it_to(symptom, values, metric):
    reading = read_symptom(symptom)
    assert (reading.values, reading.metric, reading.ambiguous) == (values, metric, False)


@pytest.mark.parametrize("symptom", [
    "qat.bc and quantized.bc: 0.449 and 0.391",          # which is whose is a guess
    "mAP and NDS of quantized.bc are 0.391 and 0.5",     # two metrics
    "quantized.bc falls to 0.391, 0.449 earlier on the board hmm qat.bc",
])
def test_an_ambiguous_sentence_offers_no_value(symptom):
    reading = read_symptom(symptom)
    assert reading.ambiguous and reading.values == {}


def test_the_stages_a_sentence_names_are_kept_in_order():
    assert read_symptom("accuracy on the board is bad; qat 0.81, qat.bc 0.80").named == (
        "board", "qat", "qat_bc")


# --- under a terminal: the case.yaml written ------------------------------------------------

def convert_drop_in_a_terminal(folder, symptom: str, lang: str, metric_prompt: str,
                               stage_prompts: tuple[str, str, str], kept: str) -> str:
    """The symptom typed, dataset evaluation ticked, every default kept with Enter (qat.pt
    skipped); what the terminal showed up to quantized.bc's answer."""
    child = spawn(folder, "--lang", lang, columns=200)
    child.logfile_read = transcript = io.StringIO()
    answer_text(child, "Describe the symptom" if lang == "en" else "简述异常现象", symptom)
    child.expect_exact("›")
    child.send(SPACE + ENTER)                                   # dataset_eval
    child.expect_exact(metric_prompt)
    child.expect_exact("> [mAP] ")
    child.sendline("")
    qat, qat_bc, quantized_bc = stage_prompts
    answer_text(child, qat, "")                                 # not evaluated: skipped
    child.expect_exact(qat_bc)
    child.expect_exact(kept.format(value="0.449"))
    child.expect_exact("> [0.449] ")
    child.sendline("")
    child.expect_exact(quantized_bc)
    child.expect_exact("> [0.391] ")
    child.sendline("")
    child.expect_exact("›")                                     # the next question, a menu
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return transcript.getvalue()


@pytest.mark.parametrize("symptom", [GIVES, FALLS])
def test_the_symptoms_numbers_are_stored_on_their_own_stages(tmp_path, symptom):
    folder = tmp_path / "case"
    kept = "Enter keeps {value}: " + labels()["en"]["intake"]["default_symptom"]
    shown = convert_drop_in_a_terminal(
        folder, symptom, "en", "Which metric evaluates the stages?",
        ("Result of qat.pt?", "Result of qat.bc?", "Result of quantized.bc?"), kept)
    stages = case_of(folder)["stages"]
    assert stages == {"qat_bc": {"metric": "mAP", "value": 0.449},
                      "quantized_bc": {"metric": "mAP", "value": 0.391}}
    # where the guess came from was on screen before Enter kept it
    assert shows(shown, "Enter keeps mAP: read from the symptom")
    assert not shows(shown, "[gives]") and not shows(shown, "[to]")


def test_a_chinese_symptom_is_read_the_same_way(tmp_path):
    folder = tmp_path / "zh"
    kept = "回车保留 {value}：" + labels()["zh"]["intake"]["default_symptom"]
    convert_drop_in_a_terminal(folder, ZH, "zh", "各阶段用什么指标评测？",
                               ("qat.pt 的评测结果？", "qat.bc 的评测结果？",
                                "quantized.bc 的评测结果？"), kept)
    assert case_of(folder)["stages"] == {"qat_bc": {"metric": "mAP", "value": 0.449},
                                         "quantized_bc": {"metric": "mAP", "value": 0.391}}


def test_a_number_typed_as_the_metric_name_is_refused(tmp_path):
    folder = tmp_path / "number"
    child = spawn(folder, "--lang", "en", columns=200)
    answer_text(child, "Describe the symptom", "qat.bc 0.449, quantized.bc 0.391")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)
    child.expect_exact("Which metric evaluates the stages?")
    child.expect_exact("\n> ")                                  # nothing to keep: no name in it
    child.sendline("0.452")
    child.expect_exact("0.452 is a number, not a metric name")
    answer_text(child, "Which metric evaluates the stages?", "NDS")
    answer_text(child, "Result of qat.pt?", "")                 # skipped
    child.expect_exact("Result of qat.bc?")
    child.expect_exact("> [0.449] ")
    child.sendline("")
    child.expect_exact("Result of quantized.bc?")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    # the name typed after the refusal is the metric; 0.452 is stored nowhere
    assert case_of(folder)["stages"] == {"qat_bc": {"metric": "NDS", "value": 0.449}}


def test_an_ambiguous_symptom_offers_no_number_to_keep(tmp_path):
    folder = case_folder(tmp_path / "ambiguous",
                         "evidence: [dataset_eval]\n"
                         "symptom: 'qat.bc and quantized.bc: 0.449 and 0.391'\n")
    # the metric; the reading asked about, skipped; qat.pt skipped; then qat.bc
    out = intake(folder, ["mAP", "", "", ""])
    reading = out[out.index("Which stage has which number of the symptom?"):]
    assert reading.split("\n> ", 1)[1].startswith("\n")          # a bare prompt, no [value]
    asked = out[out.index("Result of qat.bc?"):]
    assert asked.split("\n> ", 1)[1].startswith("\n")            # nothing to keep there either
    assert "qat_bc" not in case_of(folder)["stages"]


# --- the questions go on to what the symptom names ---------------------------------------

def test_a_symptom_on_the_board_is_asked_down_to_the_board(tmp_path):
    folder = tmp_path / "board"
    child = spawn(folder, "--lang", "en", columns=200)
    answer_text(child, "Describe the symptom", "accuracy on the board is bad; qat 0.81, qat.bc 0.80")
    answer_menu(child, "How was the problem observed?", SPACE + ENTER)
    for prompt in ("Which metric evaluates the stages?", "Result of qat.pt?", "Result of qat.bc?"):
        answer_text(child, prompt, "")                          # the symptom's values kept
    answer_text(child, "Result of quantized.bc?", "0.79")
    answer_text(child, "Result of hbm (x86)?", "0.79")
    answer_text(child, "Result of board?", "0.52")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert case_of(folder)["stages"] == {
        "qat": {"metric": "accuracy", "value": 0.81}, "qat_bc": {"metric": "accuracy", "value": 0.8},
        "quantized_bc": {"metric": "accuracy", "value": 0.79},
        "hbm_x86": {"metric": "accuracy", "value": 0.79},
        "board": {"metric": "accuracy", "value": 0.52}}
    # the same drop with no later stage in the symptom: the table stops where it is placed
    other = case_folder(tmp_path / "convert", "evidence: [dataset_eval]\n"
                        "symptom: 'accuracy drops; qat 0.81, qat.bc 0.80'\n")
    asked = " ".join(headers(intake(other, ["", "", ""])))
    assert "Result of qat.bc?" in asked and "Result of board?" not in asked


# --- an answer is not asked again; a skip keeps its own name ------------------------------

@pytest.mark.parametrize("lang, observed, badcase", [
    ("en", "How was the problem observed?", "Is there a stable, reproducible bad case?"),
    ("zh", "问题是怎样观察到的？", "有稳定可复现的 badcase 吗？")])
def test_a_bad_case_that_fails_every_time_answers_the_bad_case_question(tmp_path, lang,
                                                                        observed, badcase):
    folder = tmp_path / lang
    child = spawn(folder, "--lang", lang, columns=200)
    child.logfile_read = transcript = io.StringIO()
    answer_text(child, "Describe" if lang == "en" else "简述异常现象", GIVES)
    answer_menu(child, observed, "2" + ENTER)                  # a bad case that fails every time
    child.expect_exact("mAP")
    child.expect_exact("> [mAP] ")
    for _ in range(3):                                          # metric, qat.pt, qat.bc
        child.sendline("")
        child.expect_exact("> ")
    child.sendline("")                                          # quantized.bc kept
    child.expect_exact("›")                                     # the next menu
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    case = case_of(folder)
    assert case["evidence"] == ["reproducible_badcase"] and case["badcase"] == "available"
    shown = transcript.getvalue()
    # said once, as answered by the evidence, never asked as a question of its own
    notes = {"en": ("yes, ready to replay", "a bad case that fails every time"),
             "zh": ("有，可直接回放", "稳定可复现的 badcase")}[lang]
    assert shows(shown, labels()[lang]["intake"]["implied"].format(
        question=badcase, value=notes[0], answer=notes[1]))
    assert not any(badcase in line for line in headers(shown))


def test_a_skipped_version_is_reported_under_its_own_question(tmp_path):
    folder = case_folder(tmp_path / "versions", "evidence: [dataset_eval]\nsymptom: drop\n"
                         "badcase: available\nplatform: {chip: J6E}\nretrain: false\n"
                         "stages:\n  qat_bc: {status: normal}\n  quantized_bc: {status: abnormal}\n"
                         "versions: {hbdk4-compiler: 4.4.2, horizon-plugin-pytorch: 3.1.5}\n")
    out = intake(folder, ["", "unknown"])
    still_open = out[out.index("Still open"):]
    profiler = next(line for line in still_open.splitlines() if "horizon-plugin-profiler" in line)
    assert 'you skipped "horizon-plugin-profiler version?"' in profiler
    assert "hbdk4-compiler" not in still_open
