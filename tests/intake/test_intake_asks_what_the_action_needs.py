"""The guided intake, driven without a terminal: the compile script's normalisation comes
with its divisor, and the step-0 checks the report's first action waits on are asked
before the intake calls itself done. Each scenario checks the case.yaml it writes and the
report that case gives.
"""

from __future__ import annotations

import io
from pathlib import Path

import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.prompts import LinePrompter, Reply, default_text
from qcdoctor.engine.intake.session import Intake
from qcdoctor.wording import labels

# ImageNet values written for x / 255, as hbdk4's own examples write them
SCRIPT_MEAN, SCRIPT_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SCRIPT = '''\
import hbdk4.compiler as hbc
from hbdk4.compiler import load

bc = load("qat.bc")
for inp in reversed(bc.functions[0].inputs):
    node = inp.insert_transpose(permutes=[0, 3, 1, 2])
    node = node.insert_image_preprocess(mode="yuvbt601full2rgb", {divisor}mean={mean}, std={std})
    node.insert_image_convert("nv12")
quantized = hbc.convert(bc, "nash-e")
hbc.compile(quantized, "model.hbm", march="nash-e", core_num=1)
'''
VERSIONS = {"horizon-plugin-pytorch": "3.1.5", "horizon-plugin-profiler": "3.1.5",
            "hbdk4-compiler": "4.4.2"}
COMPILE_CASE = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"], "symptom": "hbm bad",
                "badcase": "available", "platform": {"chip": "J6E"}, "versions": VERSIONS,
                "stages": {"quantized_bc": {"metric": "mAP", "value": 0.44},
                           "hbm_x86": {"metric": "mAP", "value": 0.30},
                           "board": {"metric": "mAP", "value": 0.30}}}
CONVERT_CASE = {"schema": "qcdoctor/case-v1", "evidence": ["dataset_eval"],
                "symptom": "quantized.bc mAP 0.391 vs qat.bc 0.449", "badcase": "available",
                "platform": {"chip": "J6E"}, "versions": VERSIONS, "retrain": "yes",
                "consistency_levels_tried": [],
                "stages": {"qat": {"metric": "mAP", "value": 0.452},
                           "qat_bc": {"metric": "mAP", "value": 0.449},
                           "quantized_bc": {"metric": "mAP", "value": 0.391}}}
STEP0 = ("user_checks.same_checkpoint", "user_checks.same_qconfig", "user_checks.same_march",
         "user_checks.same_prepost")
ALL_SAME = "user_checks"           # the one question asked first


class KeyedPrompter:
    """Answers by question key, as a person at the prompt would: "" takes the default shown
    (or skips when there is none), a key with no answer is skipped. Keeps what was asked."""

    def __init__(self, replies: dict[str, str]):
        self.replies = replies
        self.asked: dict[str, object] = {}          # key -> the default offered
        self.out = io.StringIO()

    def say(self, text: str) -> None:
        self.out.write(text + "\n")

    def ask(self, question, lang, default, position, source="") -> Reply:
        self.asked.setdefault(question.key, default)
        reply = self.replies.get(question.key)
        if reply is None:
            return Reply("skip")
        if reply == "":
            shown = default_text(default)
            return Reply("answer", shown) if shown else Reply("skip")
        return Reply("answer", reply)


def case_folder(root: Path, data: dict, script: str | None = None) -> Path:
    root.mkdir(parents=True)
    if script is not None:
        (root / "deploy").mkdir()
        (root / "deploy" / "build.py").write_text(script, encoding="utf-8")
    (root / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return root


def script(divisor: str | None = "divisor=255, ", mean=SCRIPT_MEAN, std=SCRIPT_STD) -> str:
    return SCRIPT.format(divisor=divisor or "", mean=mean, std=std)


def run_intake(folder: Path, prompter) -> dict:
    return Intake(folder, prompter, lang="en", environ={}, installed={}).run()


def written(folder: Path) -> dict:
    """case.yaml as the tool reads it (yes / no kept as words, values typed)."""
    return load_case(folder).data


def triaged(folder: Path) -> dict:
    return triage_case(load_case(folder), lang="en", environ={}, installed={}, cwd=folder)


def normalisation(report: dict) -> dict:
    return next(f for f in report["facts"]
                if f["type"] == "deploy_compare" and f["item"] == "normalisation")


def item(report: dict, name: str) -> dict:
    return next(c for c in report["checklist"] if c["id"] == name)


DEPLOY_REPLIES = {"deploy.train.color": "rgb", "deploy.train.mean": "", "deploy.train.std": "",
                  "deploy.board.input_source": "pyramid", "deploy.board.height": "544",
                  "deploy.board.width": "960", "deploy.postprocess_same": "yes"}


# --- (a) the compile script's normalisation comes with its divisor -----------------------

def test_accepting_the_scripts_mean_and_std_carries_its_divisor(tmp_path):
    folder = case_folder(tmp_path / "c", COMPILE_CASE, script())
    prompter = KeyedPrompter(DEPLOY_REPLIES)
    run_intake(folder, prompter)
    # the script's values were offered, and its divisor came along without a question
    assert prompter.asked["deploy.train.mean"] == SCRIPT_MEAN
    assert "deploy.train.divisor" not in prompter.asked
    train = written(folder)["deploy"]["train"]
    assert (train["mean"], train["std"], train["divisor"]) == (SCRIPT_MEAN, SCRIPT_STD, 255)
    assert "deploy/build.py:7 insert_image_preprocess" in (folder / "case.yaml").read_text()
    report = triaged(folder)
    assert normalisation(report)["equal"] == "yes"
    assert item(report, "input_preprocessing")["status"] != "fail"
    assert report["conclusion"]["suspect"] != "deployment_checklist"


def test_accepting_the_defaults_at_the_prompt_gives_no_normalisation_failure(tmp_path):
    """The same through plain typed lines: Enter takes each offered default."""
    folder = case_folder(tmp_path / "p", COMPILE_CASE, script())
    # colour 1 (rgb); Enter, Enter for mean and std; pyramid; 544; 960; yes
    answers = "\n".join(["1", "", "", "1", "544", "960", "yes"]) + "\n"
    out = io.StringIO()
    run_intake(folder, LinePrompter(stdin=io.StringIO(answers), stdout=out))
    assert "divided by" not in out.getvalue()
    assert written(folder)["deploy"]["train"]["divisor"] == 255
    report = triaged(folder)
    assert normalisation(report)["equal"] == "yes"
    assert report["conclusion"]["stage"] == "compile"


def test_a_script_that_leaves_its_divisor_out_asks_for_it(tmp_path):
    folder = case_folder(tmp_path / "d", COMPILE_CASE, script(divisor=None))
    prompter = KeyedPrompter({**DEPLOY_REPLIES, "deploy.train.divisor": "255"})
    run_intake(folder, prompter)
    assert "deploy.train.divisor" in prompter.asked
    assert written(folder)["deploy"]["train"]["divisor"] == 255
    # the script's own divisor is unknown: its normalisation is never compared as 1
    report = triaged(folder)
    assert normalisation(report)["equal"] == "unknown"
    assert item(report, "input_preprocessing")["status"] == "unknown"


def test_pixel_scale_values_typed_by_hand_mean_divisor_1_and_ask_nothing(tmp_path):
    folder = case_folder(tmp_path / "px", COMPILE_CASE, script(
        divisor="divisor=1, ", mean=[123.675, 116.28, 103.53], std=[58.395, 57.12, 57.375]))
    replies = {**DEPLOY_REPLIES, "deploy.train.mean": "123.675, 116.28, 103.53",
               "deploy.train.std": "58.395, 57.12, 57.375"}
    prompter = KeyedPrompter(replies)
    run_intake(folder, prompter)
    assert "deploy.train.divisor" not in prompter.asked
    assert normalisation(triaged(folder))["equal"] == "yes"


def test_fraction_values_typed_by_hand_ask_for_their_divisor(tmp_path):
    folder = case_folder(tmp_path / "fr", COMPILE_CASE)
    replies = {"deploy.train.color": "rgb", "deploy.train.layout": "NCHW",
               "deploy.train.mean": "0.5", "deploy.train.std": "0.5",
               "deploy.train.divisor": "255", "deploy.board.color": "rgb",
               "deploy.board.input_source": "ddr", "deploy.postprocess_same": "yes"}
    prompter = KeyedPrompter(replies)
    run_intake(folder, prompter)
    assert prompter.asked["deploy.train.divisor"] is None          # nothing to guess from
    train = written(folder)["deploy"]["train"]
    assert (train["mean"], train["std"], train["divisor"]) == ([0.5], [0.5], 255)
    assert normalisation(triaged(folder))["train"] == "(x / 255 - [0.5]) / [0.5]"


# --- (b) the step-0 checks the first action waits on -------------------------------------

def test_the_step0_checks_are_asked_when_the_first_action_is_to_make_them(tmp_path):
    folder = case_folder(tmp_path / "s", CONVERT_CASE)
    before = triaged(folder)
    assert before["next_actions"][0]["id"] == "user_side_checks"
    prompter = KeyedPrompter({ALL_SAME: "yes"})
    report = run_intake(folder, prompter)
    # one question when all are the same
    assert [k for k in prompter.asked if k.startswith("user_checks")] == [ALL_SAME]
    assert written(folder)["user_checks"] == {k.split(".")[1]: "yes" for k in STEP0}
    # confirmed: the next step moves on to the toolchain, and the intake is done
    assert "user_side_checks" not in [a["id"] for a in report["next_actions"]]
    assert labels()["en"]["intake"]["done"] in prompter.out.getvalue()


def test_a_step0_check_that_differs_is_asked_by_name_and_makes_it_user_side(tmp_path):
    folder = case_folder(tmp_path / "n", CONVERT_CASE)
    replies = {ALL_SAME: "no", **dict.fromkeys(STEP0, "yes"), "user_checks.same_march": "no"}
    prompter = KeyedPrompter(replies)
    report = run_intake(folder, prompter)
    assert [k for k in prompter.asked if k.startswith("user_checks")] == [ALL_SAME, *STEP0]
    assert written(folder)["user_checks"] == {"same_checkpoint": "yes", "same_qconfig": "yes",
                                              "same_march": "no", "same_prepost": "yes"}
    assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
        ("user_side", "inconsistent_inputs_between_stages")
    assert report["next_actions"][0]["id"] == "fix_user_side"


def test_not_checked_yet_is_written_and_keeps_the_checks_first(tmp_path):
    """The user has not made them: the intake asked, and the first action stays."""
    data = {**CONVERT_CASE, "user_checks": {"same_march": "yes"}}
    folder = case_folder(tmp_path / "u", data)
    prompter = KeyedPrompter(dict.fromkeys(STEP0, "unknown"))
    report = run_intake(folder, prompter)
    # one was answered in case.yaml: the others are asked one by one, never overwritten
    assert [k for k in prompter.asked if k.startswith("user_checks")] == \
        [k for k in STEP0 if k != "user_checks.same_march"]
    assert written(folder)["user_checks"]["same_march"] == "yes"
    assert written(folder)["user_checks"]["same_qconfig"] == "unknown"
    assert report["next_actions"][0]["id"] == "user_side_checks"
    assert labels()["en"]["intake"]["done"] in prompter.out.getvalue()


def test_skipped_step0_checks_keep_the_intake_open(tmp_path):
    folder = case_folder(tmp_path / "k", CONVERT_CASE)
    prompter = KeyedPrompter({})
    report = run_intake(folder, prompter)
    assert ALL_SAME in prompter.asked
    assert report["next_actions"][0]["id"] == "user_side_checks"
    said = prompter.out.getvalue()
    words = labels()["en"]["intake"]
    assert words["done"] not in said and words["open"] in said
    assert "user_checks" not in written(folder)


def test_the_step0_checks_are_not_asked_when_another_action_comes_first(tmp_path):
    """A failed deployment check is fixed first: its fix, not step 0, is the next step."""
    bad = script().replace('mode="yuvbt601full2rgb"', 'mode="yuvbt601full2bgr"')
    folder = case_folder(tmp_path / "f", COMPILE_CASE, bad)
    prompter = KeyedPrompter({**DEPLOY_REPLIES, ALL_SAME: "yes"})
    report = run_intake(folder, prompter)
    assert not any(k.startswith("user_checks") for k in prompter.asked)
    assert report["next_actions"][0]["id"] == "fix_check:preprocess_mode"
