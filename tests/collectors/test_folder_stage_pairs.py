"""Folder names by stage pair (knowledge.md §18 R5.8): a folder named
``<baseline>_vs_<analysis>`` or one of the guides' step folders compares those stages in
that order, read the same way as the same pair declared in analyses_run; the scenarios of
R4.5 give the same verdict on both spellings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from qcdoctor.collectors.quant_analysis import collect_quant_analysis, stage_pair_of_name
from tests.conftest import case_from
from tests.diagnosis.test_which_analysis_speaks import (
    CHECKED,
    one_run_export_case,
    postprocess_case,
    recovered_calibration_case,
    split_sensitivity_case,
    triage,
)
from tests.qa.scenarios import LUT, case_yaml, sens_rows
from tests.qa.writers import layer, write_compare, write_sensitivity

# name -> (type, baseline, analysis): the spellings the guides use
GUIDE_NAMES = {
    "floatvscalib": ("fake_quant", "float", "calib"),
    "float_vs_calib": ("fake_quant", "float", "calib"),
    "qatpt_vs_qatexportpt": ("pre_export", "qat", "qat_export"),
    "pre_export_pt_vs_qatbc": ("export", "qat_export", "qat_bc"),
    "qatbc_vs_quantizedbc": ("convert", "qat_bc", "quantized_bc"),
    "qa_pre_export": ("pre_export", "qat", "qat_export"),
    "qa_export": ("export", "qat_export", "qat_bc"),
    "qa_convert": ("convert", "qat_bc", "quantized_bc"),
    # the convert sensitivity runs against qat.export.pt (knowledge.md §16 R3.5)
    "qa_convert_sens": ("convert", "qat_export", "quantized_bc"),
}


@pytest.mark.parametrize("name", sorted(GUIDE_NAMES))
def test_a_guide_name_states_its_stage_pair(name):
    assert stage_pair_of_name(name) == GUIDE_NAMES[name]
    assert stage_pair_of_name(f"runs/{name.upper()}") == GUIDE_NAMES[name]


@pytest.mark.parametrize("name, expected", [
    ("qat.pt_vs_qat.export.pt", ("pre_export", "qat", "qat_export")),
    ("calib_vs_float", ("fake_quant", "calib", "float")),        # in the order written
    ("qatexportpt_vs_quantizedbc", ("convert", "qat_export", "quantized_bc")),
    ("calib_float", None), ("versus", None), ("qat_vs_qat", None), ("foo_vs_bar", None)])
def test_a_pair_is_read_in_the_order_written_and_only_from_known_stages(name, expected):
    assert stage_pair_of_name(name) == expected


def _rows(analy_op: str) -> list[dict]:
    return [layer(f"backbone.{i}.conv", 0.9999, analy_op=analy_op) for i in range(3)]


@pytest.mark.parametrize("name", sorted(GUIDE_NAMES))
def test_a_named_folder_is_read_as_the_declared_pair(tmp_path, name):
    """The qa_folder fact of a folder known by its name alone carries the comparison an
    analyses_run entry declaring the same pair gives; even HBIR tables on both sides (which
    the content would read as convert) do not override the name."""
    kind, baseline, analysis = GUIDE_NAMES[name]
    facts = {}
    for spelling in ("declared", "named"):
        folder = tmp_path / spelling
        write_compare(folder / name, _rows("hbir.conv2d [hbir.conv2d]"))
        runs = [{"baseline": baseline, "analysis": analysis, "out_dir": name}]
        case = case_from({"analyses_run": runs} if spelling == "declared" else {}, folder)
        (fact,) = [f for f in collect_quant_analysis(case) if f["type"] == "qa_folder"]
        facts[spelling] = fact
    for spelling, fact in facts.items():
        assert (fact["comparison"], fact["baseline"], fact["analysis_stage"]) == \
            (kind, baseline, analysis), spelling
    assert facts["declared"]["known_from"] == "analyses_run"
    assert facts["named"]["known_from"] == "folder name"


# --- the export case: both folders read forwards ---------------------------------

EXPORT_ORIGIN = "head.decode.mul"
SOFTMAX = "head.attn.softmax"


def export_case(root: Path, declared: bool) -> Path:
    """An export drop (qat.export.pt normal, qat.bc abnormal). qatpt_vs_qatexportpt (qat vs
    qat_export) reads a softmax LUT op; pre_export_pt_vs_qatbc (qat_export vs qat_bc, with
    its sensitivity) reads a truncation at head.decode.mul."""
    folder = root / ("declared" if declared else "named")
    pre = [layer(f"backbone.{i}.conv", 0.99996) for i in range(4)]
    pre.append(layer(SOFTMAX, 0.80, analy_op=LUT, op="torch.nn.modules.activation.Softmax"))
    pre += [layer(f"head.out.{i}", 0.79 - i * 0.01) for i in range(3)]
    write_compare(folder / "qatpt_vs_qatexportpt", pre)
    hbir = "hbir.mul [hbir.mul]"
    export = [layer(f"backbone.{i}.conv", 0.99996, analy_op="hbir.conv2d [hbir.conv2d]")
              for i in range(4)]
    export.append(layer(EXPORT_ORIGIN, 0.62, op="torch.Tensor.mul", analy_op=hbir, qscale=0.05,
                        base=(-130.0, 130.0), analy=(-6.35, 6.35)))
    export += [layer(f"head.out.{i}", 0.60 - i * 0.01, analy_op=hbir) for i in range(3)]
    write_compare(folder / "pre_export_pt_vs_qatbc", export)
    write_sensitivity(folder / "pre_export_pt_vs_qatbc", sens_rows(
        [(EXPORT_ORIGIN, 0.3), ("backbone.0.conv", 0.02), ("backbone.1.conv", 0.01),
         ("backbone.2.conv", 0.0), ("backbone.3.conv", 0.0)]))
    runs = [{"baseline": "qat", "analysis": "qat_export", "out_dir": "qatpt_vs_qatexportpt"},
            {"baseline": "qat_export", "analysis": "qat_bc", "out_dir": "pre_export_pt_vs_qatbc"}]
    case_yaml(folder, **CHECKED, platform={"chip": "J6E"},
              stages={"qat": {"metric": "mAP", "value": 0.45},
                      "qat_export": {"metric": "mAP", "value": 0.449},
                      "qat_bc": {"metric": "mAP", "value": 0.40}},
              **({"analyses_run": runs} if declared else {}))
    return folder


def verdict(report: dict) -> dict:
    """What a report decides: its conclusion, the rules that fired, its actions in order,
    its pitfalls, and each folder's comparison and scope."""
    return {"stage": report["conclusion"]["stage"],
            "rules": sorted({t["rule"] for t in report["trace"]}),
            "actions": [a["id"] for a in report["next_actions"]],
            "pitfalls": sorted(p["id"] for p in report["pitfalls"]),
            "folders": {f["analysis"]: (f["comparison"], f["baseline"], f["analysis_stage"],
                                        f["scope"], f["drives"])
                        for f in report["facts"] if f["type"] == "qa_folder"}}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_export_case_reads_the_same_on_both_spellings(tmp_path, lang):
    declared = triage(export_case(tmp_path, True), lang)
    named = triage(export_case(tmp_path, False), lang)
    assert verdict(named) == verdict(declared)
    seen = verdict(named)
    assert seen["stage"] == "export"
    assert seen["folders"]["pre_export_pt_vs_qatbc"][:4] == \
        ("export", "qat_export", "qat_bc", "located")
    assert seen["folders"]["qatpt_vs_qatexportpt"][:4] == \
        ("pre_export", "qat", "qat_export", "other_step")
    # the real origin drives the remedy; the softmax LUT op is a finding of its own step
    origins = [f["text"] for f in named["findings"] if f["rule"] == "LY010"]
    assert origins and all(t.startswith("pre_export_pt_vs_qatbc") for t in origins)
    assert f"`{EXPORT_ORIGIN}`" in origins[0]
    assert "LY093" in seen["rules"]
    assert not [a for a in seen["actions"] if SOFTMAX in a]
    assert f"fixed_scale:{EXPORT_ORIGIN}" in seen["actions"]
    # the export analysis the user ran (with its sensitivity) is not proposed again
    assert "qa_export" not in seen["actions"]


# --- the scenarios of R4.5, once declared and once by the folder's name alone ------------

def undeclared(folder: Path) -> Path:
    """The same case folder with analyses_run removed: the folders speak by name alone."""
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    data.pop("analyses_run")
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


def renamed_recovered_case(root: Path) -> Path:
    """Case 1 of R4.5 with its float vs calib folder under the guides' name."""
    folder = recovered_calibration_case(root)
    (folder / "calib_float").rename(folder / "float_vs_calib")
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    data["analyses_run"][0]["out_dir"] = "float_vs_calib"
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return folder


SCENARIOS = {"recovered_calibration": renamed_recovered_case,
             # a task-list model whose export run was made in one run (R3.5): by its name
             # alone the folder is that run too (an entry says separate_runs: true)
             "invalid_one_run": one_run_export_case,
             "postprocess_in_model": postprocess_case,
             "sibling_sensitivity": split_sensitivity_case}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_the_r45_scenarios_give_the_same_verdict_by_name(tmp_path, scenario, lang):
    declared = triage(SCENARIOS[scenario](tmp_path / "declared"), lang)
    named = triage(undeclared(SCENARIOS[scenario](tmp_path / "named")), lang)
    assert verdict(named) == verdict(declared)
    assert {f["known_from"] for f in named["facts"] if f["type"] == "qa_folder"} == \
        {"folder name"}


def test_the_invalid_run_by_name_drives_nothing_but_its_redo(tmp_path):
    report = triage(undeclared(one_run_export_case(tmp_path)), "en")
    ids = [a["id"] for a in report["next_actions"]]
    assert ids[0] == "qa_export_two_runs" and "qint16:quant_img" not in ids
    assert "LY094" in {t["rule"] for t in report["trace"]}


def test_the_recovered_step_by_name_is_a_finding_never_an_action(tmp_path):
    report = triage(undeclared(renamed_recovered_case(tmp_path)), "en")
    assert report["conclusion"]["stage"] == "convert"
    folders = {f["analysis"]: f for f in report["facts"] if f["type"] == "qa_folder"}
    assert (folders["float_vs_calib"]["scope"], folders["float_vs_calib"]["drives"]) == \
        ("recovered", False)
    assert not [a for a in report["next_actions"] if "backbone.layer3.1.add" in a["id"]]


def test_the_intake_asks_about_a_word_in_a_name_never_a_stated_pair(tmp_path):
    """A name stating its stage pair is read as declared: intake does not ask for its
    comparison again; a name with a hinting word only (``qa_calib``) is still a guess."""
    from qcdoctor.engine.intake.session import _comparison_guessed
    for name in ("qatpt_vs_qatexportpt", "qa_convert", "qa_calib"):
        write_compare(tmp_path / name, _rows("custom.Conv2d"))     # content tells nothing
    facts = {f["analysis"]: f for f in collect_quant_analysis(case_from({}, tmp_path))
             if f["type"] == "qa_folder"}
    assert {name: (f["known_from"], _comparison_guessed(f)) for name, f in facts.items()} == {
        "qatpt_vs_qatexportpt": ("folder name", False), "qa_convert": ("folder name", False),
        "qa_calib": ("folder name", True)}
