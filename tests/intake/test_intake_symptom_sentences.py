"""Symptom sentences as users write them, through the intake under a real terminal and
piped: the case.yaml written holds what the sentence said (each number on its stage, a
percentage as the fraction written, the metric and the chip it names) once Enter has
confirmed each; an ambiguous sentence is asked about, with its parse shown; a percentage
typed at a stage prompt is stored as the symptom's are; the metric confirmed is kept even
when no stage value follows."""

from __future__ import annotations

import io

import pexpect
import pytest

from qcdoctor.wording import labels
from tests.intake.test_intake import (
    ENTER,
    SPACE,
    answer_menu,
    answer_text,
    case_of,
    run_piped,
    spawn,
)
from tests.intake.test_intake_as_a_user_meets_it import case_folder, intake
from tests.intake.test_intake_sessions import COMPILE_SCRIPT
from tests.terminal import shows

PROMPTS = {"en": {"symptom": "Describe the symptom", "observed": "How was the problem observed?",
                  "metric": "Which metric evaluates the stages?", "qat": "Result of qat.pt?",
                  "qat_bc": "Result of qat.bc?", "quantized_bc": "Result of quantized.bc?",
                  "chip": "Which chip is the target?", "badcase": "reproducible bad case?",
                  "reading": "Which stage has which number of the symptom?"},
           "zh": {"symptom": "简述异常现象", "observed": "问题是怎样观察到的？",
                  "metric": "各阶段用什么指标评测？", "qat": "qat.pt 的评测结果？",
                  "qat_bc": "qat.bc 的评测结果？", "quantized_bc": "quantized.bc 的评测结果？",
                  "chip": "部署到哪款芯片？", "badcase": "有稳定可复现的 badcase 吗？",
                  "reading": "异常现象里的数值分别属于哪个阶段？"}}

# (language, sentence, metric, qat.bc, quantized.bc, chip, the values as case.yaml spells them)
CONVERT_SENTENCES = [
    ("en", "mAP falls from 0.449 on qat.bc to 0.391 on quantized.bc on J6E",
     "mAP", 0.449, 0.391, "J6E", ("0.449", "0.391")),
    ("en", "top1 acc on quantized.bc is 71.2% while qat.bc gives 76.5%",
     "top1 acc", 0.765, 0.712, None, ("0.765", "0.712")),
    ("en", "On J6M, NDS goes from 51.2% on qat.bc to 47% on quantized.bc",
     "NDS", 0.512, 0.47, "J6M", ("0.512", "0.47")),
    ("zh", "J6E 上 quantized.bc 的 mAP 从 qat.bc 的 0.449 掉到 0.391",
     "mAP", 0.449, 0.391, "J6E", ("0.449", "0.391")),
    ("zh", "J6M 上 quantized.bc 的 top1 从 qat.bc 的 76.5% 掉到 71.2%",
     "top1", 0.765, 0.712, "J6M", ("0.765", "0.712")),
    ("zh", "quantized.bc 上 top1 acc 是 71.2%，而 qat.bc 是 76.5%",
     "top1 acc", 0.765, 0.712, None, ("0.765", "0.712")),
]
IDS = [s[1] for s in CONVERT_SENTENCES]


def expected_case(metric, qat_bc, quantized_bc) -> dict:
    return {"qat_bc": {"metric": metric, "value": qat_bc},
            "quantized_bc": {"metric": metric, "value": quantized_bc}}


def check_written(folder, metric, qat_bc, quantized_bc, chip, spelled) -> None:
    case = case_of(folder)
    assert case["stages"] == expected_case(metric, qat_bc, quantized_bc)
    assert case.get("platform") == ({"chip": chip} if chip else None)
    text = (folder / "case.yaml").read_text(encoding="utf-8")
    for value in spelled:                       # as written: no float noise in the file
        assert f"value: {value}}}" in text
    assert "0000000" not in text


@pytest.mark.parametrize("lang, symptom, metric, qat_bc, quantized_bc, chip, spelled",
                         CONVERT_SENTENCES, ids=IDS)
def test_a_sentence_confirmed_with_enter_in_a_terminal_is_what_case_yaml_holds(
        tmp_path, lang, symptom, metric, qat_bc, quantized_bc, chip, spelled):
    folder = tmp_path / "case"
    p = PROMPTS[lang]
    kept = labels()[lang]["intake"]["help_default"]
    source = labels()[lang]["intake"]["default_symptom"]
    child = spawn(folder, "--lang", lang, columns=200)
    child.logfile_read = transcript = io.StringIO()
    answer_text(child, p["symptom"], symptom)
    answer_menu(child, p["observed"], SPACE + ENTER)            # dataset evaluation
    child.expect_exact(p["metric"])
    child.expect_exact(kept.format(value=metric, source=source))
    child.expect_exact(f"> [{metric}] ")
    child.sendline("")
    answer_text(child, p["qat"], "")                            # not in the sentence: skipped
    for stage, value in (("qat_bc", qat_bc), ("quantized_bc", quantized_bc)):
        child.expect_exact(p[stage])
        child.expect_exact(kept.format(value=value, source=source))
        child.expect_exact(f"> [{value}] ")
        child.sendline("")
    answer_menu(child, p["badcase"], ENTER)                     # available
    child.expect_exact(p["chip"])
    if chip:                                                    # offered, with where from
        child.expect_exact(kept.format(value=chip, source=source))
        child.expect_exact(f"› {['J6E', 'J6M'].index(chip) + 1}. {chip}")
        child.send(ENTER)
        child.expect_exact("hbdk4-compiler")                    # the next question: stop
        child.expect_exact("> ")
        child.sendeof()
    else:
        child.expect_exact("›")
        child.send("\x04")                                      # Ctrl-D: nothing to keep
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    if not chip:
        assert not shows(transcript.getvalue()[transcript.getvalue().index(p["chip"]):],
                         source)
    check_written(folder, metric, qat_bc, quantized_bc, chip, spelled)


@pytest.mark.parametrize("lang, symptom, metric, qat_bc, quantized_bc, chip, spelled",
                         CONVERT_SENTENCES, ids=IDS)
def test_a_sentence_confirmed_with_enter_through_a_pipe_is_what_case_yaml_holds(
        tmp_path, lang, symptom, metric, qat_bc, quantized_bc, chip, spelled):
    folder = tmp_path / "case"
    # symptom, evidence, then Enter at the metric, qat.pt (skipped), qat.bc, quantized.bc,
    # the bad case (skipped) and the chip
    result = run_piped(folder, [symptom, "1", "", "", "", "", "", ""], "--lang", lang)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"> [{metric}] {metric}\n" in out and f"> [{qat_bc}] {qat_bc}\n" in out
    if chip:
        assert f"> [{chip}] {chip}\n" in out
    check_written(folder, metric, qat_bc, quantized_bc, chip, spelled)


# --- the chip a sentence names, and the march collected ------------------------------------

NO_CHIP = ("evidence: [dataset_eval]\nbadcase: available\n"
           "stages:\n  qat_bc: {status: normal}\n  quantized_bc: {status: abnormal}\n"
           "versions: {hbdk4-compiler: 4.4.2, horizon-plugin-pytorch: 3.1.5, "
           "horizon-plugin-profiler: 3.1.5}\n")


@pytest.mark.parametrize("said, march, offered", [
    ("J6M", None, "J6M"),
    ("S100", "nash-e", "S100"),           # the sentence's chip runs the script's march
    ("J6M", "nash-e", "J6E"),             # it does not: the collected march decides
])
def test_the_chip_question_offers_the_chip_the_sentence_names(tmp_path, said, march, offered):
    folder = case_folder(tmp_path / "chip", NO_CHIP + f"symptom: drop on {said}\n",
                         script=COMPILE_SCRIPT.replace("nash-e", march) if march else None)
    out = intake(folder, [""])
    assert f"> [{offered}] {offered}\n" in out
    assert case_of(folder)["platform"] == {"chip": offered}


# --- an ambiguous sentence is asked about, with its parse ----------------------------------

AMBIGUOUS = {"en": "qat.bc and quantized.bc: 0.449 and 0.391",
             "zh": "qat.bc 和 quantized.bc 是 0.449 和 0.391"}
PARSE = {"en": "0.449 → qat.bc or quantized.bc; 0.391 → quantized.bc or qat.bc",
         "zh": "0.449 → qat.bc 或 quantized.bc；0.391 → quantized.bc 或 qat.bc"}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_an_ambiguous_sentence_shows_its_parse_and_asks_which_reading_piped(tmp_path, lang):
    folder = case_folder(tmp_path / "piped", f"evidence: [dataset_eval]\n"
                                             f"symptom: '{AMBIGUOUS[lang]}'\n", lang)
    # the metric, then the second reading: qat.bc 0.391, quantized.bc 0.449
    out = intake(folder, ["mAP", "2"], lang)
    asked = out[out.index(PROMPTS[lang]["reading"]):]
    assert PARSE[lang] in asked.split("\n> ", 1)[0]              # shown before the answer
    assert asked.split("\n> ", 1)[1].startswith("2\n")          # no default: nothing unseen
    assert case_of(folder)["stages"] == {"qat_bc": {"metric": "mAP", "value": 0.391},
                                         "quantized_bc": {"metric": "mAP", "value": 0.449}}
    assert PROMPTS[lang]["qat_bc"] not in out                   # answered by the reading


@pytest.mark.parametrize("lang, keys", [("en", "1" + ENTER), ("zh", "n")])
def test_an_ambiguous_sentence_is_asked_about_in_a_terminal(tmp_path, lang, keys):
    folder = tmp_path / "terminal"
    p = PROMPTS[lang]
    child = spawn(folder, "--lang", lang, columns=200)
    answer_text(child, p["symptom"], AMBIGUOUS[lang])
    answer_menu(child, p["observed"], SPACE + ENTER)
    answer_text(child, p["metric"], "mAP")
    child.expect_exact(p["reading"])
    child.expect_exact(PARSE[lang])
    child.expect_exact("› 3. none")                            # opens on none: nothing unseen
    child.send(keys)
    child.expect_exact(p["qat"])
    child.expect_exact("> ")
    child.sendline("")
    if keys == "n":                                             # none: each stage asked, no default
        child.expect_exact(p["qat_bc"])
        child.expect_exact("\n> ")
        child.sendline("0.449")
        child.expect_exact(p["quantized_bc"])
        child.expect_exact("\n> ")
        child.sendline("0.391")
    child.expect_exact("›")                                     # the next menu: stop
    child.send("\x04")
    child.expect(pexpect.EOF)
    child.close()
    assert case_of(folder)["stages"] == {"qat_bc": {"metric": "mAP", "value": 0.449},
                                         "quantized_bc": {"metric": "mAP", "value": 0.391}}


def test_a_sentence_with_no_reading_to_choose_shows_its_parse(tmp_path):
    folder = case_folder(tmp_path / "two", "evidence: [dataset_eval]\n"
                         "symptom: mAP and NDS of quantized.bc are 0.391 and 0.5\n")
    out = intake(folder, ["mAP", "", "", ""])
    said = labels()["en"]["intake"]["parse_not_offered"].split("{")[0]
    assert out.count(said) == 1 and "metrics mAP, NDS" in out
    assert out.index(said) < out.index("Result of qat.pt?")
    assert "> [0.391]" not in out and "> [0.5]" not in out


# --- a percentage at a stage prompt; the metric kept ---------------------------------------

@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_percentage_typed_at_a_stage_prompt_is_stored_as_the_symptoms_are(tmp_path, lang):
    folder = case_folder(tmp_path / "percent", "evidence: [dataset_eval]\n"
                         "symptom: top1 acc on quantized.bc is 71.2% while qat.bc gives 76.5%\n",
                         lang)
    out = intake(folder, ["", "45.2%", "", "71.2 %"], lang)
    assert "give a number" not in out and "请输入数值" not in out
    stages = case_of(folder)["stages"]
    assert stages["qat"] == {"metric": "top1 acc", "value": 0.452}
    assert stages["qat_bc"]["value"] == 0.765 and stages["quantized_bc"]["value"] == 0.712
    assert "0000000" not in (folder / "case.yaml").read_text(encoding="utf-8")


def test_a_percentage_in_a_real_terminal_is_accepted(tmp_path):
    folder = case_folder(tmp_path / "pty", "evidence: [dataset_eval]\nsymptom: drop\n")
    child = spawn(folder, columns=200)
    answer_text(child, "Which metric", "mAP")
    answer_text(child, "Result of qat.pt?", "45.2%")
    child.expect_exact("Result of qat.bc?")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert case_of(folder)["stages"] == {"qat": {"metric": "mAP", "value": 0.452}}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_metric_confirmed_is_written_at_once_and_not_asked_again(tmp_path, lang):
    folder = case_folder(tmp_path / "metric", "evidence: [dataset_eval]\n"
                         "symptom: quantized.bc mAP 0.391 vs qat.bc 0.449\n", lang)
    intake(folder, [""], lang)                                  # the metric kept, then stop
    assert case_of(folder)["stages"] == {"qat": {"metric": "mAP"}}
    again = intake(folder, ["abnormal", "", ""], lang)          # resumed: qat.pt comes first
    assert PROMPTS[lang]["metric"] not in again
    stages = case_of(folder)["stages"]
    assert stages["qat"] == {"metric": "mAP", "status": "abnormal"}
    assert stages["qat_bc"] == {"metric": "mAP", "value": 0.449}


def test_a_metric_answered_with_status_words_only_is_kept(tmp_path):
    folder = case_folder(tmp_path / "statuses", "evidence: [dataset_eval]\nsymptom: drop\n")
    intake(folder, ["NDS", "normal", "normal", "abnormal"])
    stages = case_of(folder)["stages"]
    assert stages["qat"] == {"metric": "NDS", "status": "normal"}
    assert stages["quantized_bc"] == {"status": "abnormal"}
