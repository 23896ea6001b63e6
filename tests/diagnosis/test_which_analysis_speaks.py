"""Which QuantAnalysis folder speaks for the located step (knowledge.md §17 R4.5), a
sibling folder's sensitivity (R4.7) and post-processing declared inside the analysed
model (R4.3), triaged end to end from case folders in both report languages."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcdoctor.collectors.quant_analysis import place_folders
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render
from tests.conftest import case_from
from tests.qa.scenarios import case_yaml, rounding_rows, sens_rows
from tests.qa.writers import layer, write_compare, write_sensitivity
from tests.reports.test_report_language import english_left

LANGS = ["en", "zh"]
RECOVERED_LAYER = "backbone.layer3.1.add"       # calib_float's source: QAT recovered it
CONVERT_LAYER = "head.bbox.conv"                # rounding_rows' source
TOPK = "head.topk_scores"
CONVERT_RUN = {"type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
               "out_dir": "qa_convert", "sensitivity": False}
SENS_RUN = {"type": "convert", "baseline": "qat_export", "analysis": "quantized_bc",
            "out_dir": "qa_convert_sens", "sensitivity": True}
CHECKED = {"evidence": ["dataset_eval"], "retrain": "yes", "fake_quant_state": "validation",
           "versions": {"horizon-plugin-pytorch": "3.2.1", "horizon-plugin-profiler": "3.2.1",
                        "hbdk4-compiler": "4.9.0"},
           "user_checks": {"same_checkpoint": True, "same_qconfig": True, "same_march": True,
                           "same_prepost": True}}


def triage(folder: Path, lang: str) -> dict:
    return triage_path(folder, lang=lang, use_env=False)


def rules_of(report: dict) -> set[str]:
    return {t["rule"] for t in report["trace"]}


def finding(report: dict, rule: str) -> str:
    (text,) = [f["text"] for f in report["findings"] if f["rule"] == rule]
    return text


def action_words(report: dict) -> list[str]:
    """Everything an action says or generates: its id, text and code."""
    return [" ".join((a["id"], a["text"], a.get("code", ""))) for a in report["next_actions"]]


HEADINGS = {"en": {"checks": "## Checks already run", "next": "## Next steps"},
            "zh": {"checks": "## 执行过的检查", "next": "## 下一步建议"}}


def section(report: dict, name: str) -> str:
    """One top-level section of the Markdown report."""
    md = render(report, "md")
    start = md.index(HEADINGS[report["language"]][name])
    end = md.find("\n## ", start + 3)
    return md[start:end if end > 0 else None]


def speaks_one_language(report: dict, *rules: str) -> None:
    """The given rules' findings carry no English prose in a Chinese report."""
    if report["language"] == "zh":
        for rule in rules:
            assert not english_left(report, finding(report, rule)), rule


# --- the four cases ----------------------------------------------------------------------

def truncation_at(name: str) -> list[dict]:
    """A clean prefix, then ``name`` truncated: qint8 at qscale 0.05 tops out at 6.35 where
    the baseline reaches 130 (the float vs calib reading of a residual add)."""
    rows = [layer(f"backbone.layer{i}.conv", 0.99996) for i in range(1, 4)]
    rows.append(layer(name, 0.62, qscale=0.05, base=(-130.0, 130.0), analy=(-6.35, 6.35),
                      op="torch.Tensor.add",
                      analy_op="horizon_plugin_pytorch.nn.qat.functional_modules.FloatFunctional"))
    return rows + [layer(f"backbone.layer4.{i}.conv", 0.60 - i * 0.01) for i in range(3)]


def recovered_calibration_case(root: Path) -> Path:
    """Case 1: a convert drop on J6M; calib lost accuracy that QAT recovered. calib_float
    (float vs calib) reads a truncation there, qa_convert a rounding at the convert step."""
    folder = root / "recovered"
    write_compare(folder / "calib_float", truncation_at(RECOVERED_LAYER))
    write_compare(folder / "qa_convert", rounding_rows())
    values = {"float": 0.60, "calib": 0.50, "qat": 0.598, "qat_export": 0.597, "qat_bc": 0.596,
              "quantized_bc": 0.52}
    case_yaml(folder, **CHECKED, platform={"chip": "J6M"},
              stages={s: {"metric": "mAP", "value": v} for s, v in values.items()},
              analyses_run=[{"type": "fake_quant", "baseline": "float", "analysis": "calib",
                             "out_dir": "calib_float", "sensitivity": False}, CONVERT_RUN])
    return folder


def one_run_export_case(root: Path, separate_runs: bool = False) -> Path:
    """Case 2: a task-list model at export whose analysis ran in one run (R3.5): its table
    reads a rounding at the input QuantStub, its sensitivity that stub."""
    folder = root / f"export_{'two' if separate_runs else 'one'}_run"
    rows = [layer("quant_img", 0.93, qscale=0.0079, base=(-1.0, 1.0), analy=(-0.995, 1.0),
                  atol=0.0095, op="horizon_plugin_pytorch.quantization.stubs.QuantStub",
                  analy_op="hbir.quantize [hbir.quantize]")]
    rows += [layer(f"backbone.{i}.conv", 0.925 - i * 0.002) for i in range(4)]
    write_compare(folder / "qa_export", rows)
    write_sensitivity(folder / "qa_export", sens_rows(
        [("quant_img", 0.3), ("backbone.0.conv", 0.02), ("backbone.1.conv", 0.01),
         ("backbone.2.conv", 0.0), ("backbone.3.conv", 0.0)]))
    case_yaml(folder, **CHECKED, platform={"chip": "J6E"}, has_task_input=True,
              stages={"qat": {"metric": "mAP", "value": 0.45},
                      "qat_export": {"metric": "mAP", "value": 0.449},
                      "qat_bc": {"metric": "mAP", "value": 0.40}},
              analyses_run=[{"type": "export", "baseline": "qat_export", "analysis": "qat_bc",
                             "out_dir": "qa_export", "sensitivity": True,
                             "separate_runs": separate_runs}])
    return folder


def postprocess_case(root: Path, declared: str = "yes") -> Path:
    """Case 3: the analysed model keeps its top-k; the values it picks (a getitem row, no
    post-processing op type) fall at once, and the decoding after them follows."""
    folder = root / f"postprocess_{declared}"
    rows = [layer(f"backbone.s{i}.conv", 0.99995) for i in range(5)]
    rows.append(layer(TOPK, 0.41, op="torch.Tensor.__getitem__",
                      analy_op="torch.Tensor.__getitem__"))
    rows += [layer(f"head.decode.{i}", 0.40 - i * 0.01) for i in range(3)]
    write_compare(folder / "qa_convert", rows)
    case_yaml(folder, **CHECKED, platform={"chip": "J6P"}, postprocess_in_model=declared,
              analyses_run=[CONVERT_RUN])
    return folder


def split_sensitivity_case(root: Path, sens_dir: str = "qa_convert_sens",
                           runs: list[dict] | None = None) -> Path:
    """Case 4: the convert per-layer table in qa_convert, a sensitivity in ``sens_dir``
    (knowledge.md §6 rev 2: qa_convert_sens is the convert comparison's sensitivity run)."""
    folder = root / f"split_{sens_dir}_{len(runs) if runs is not None else 2}"
    write_compare(folder / "qa_convert", rounding_rows())
    write_sensitivity(folder / sens_dir, sens_rows(
        [(CONVERT_LAYER, 0.3), ("pre.1", 0.02), ("pre.2", 0.01), ("pre.3", 0.0), ("post.1", 0.0)]))
    case_yaml(folder, **CHECKED, platform={"chip": "J6P"},
              analyses_run=[CONVERT_RUN, SENS_RUN] if runs is None else runs)
    return folder


# --- case 1: a comparison of a step QAT recovered ----------------------------------------

@pytest.mark.parametrize("lang", LANGS)
def test_a_step_qat_recovered_is_a_finding_never_an_action(tmp_path, lang):
    report = triage(recovered_calibration_case(tmp_path), lang)
    assert report["conclusion"]["stage"] == "convert"
    # no remedy, first action or bc_editor target comes from calib_float
    words = action_words(report)
    assert not [w for w in words if RECOVERED_LAYER in w or "calib_float" in w], words
    ids = [a["id"] for a in report["next_actions"]]
    assert f"qint16:{CONVERT_LAYER}" in ids and f"fixed_scale:{RECOVERED_LAYER}" not in ids
    bc_editor = [a for a in report["next_actions"] if a["kind"] == "bc_editor"]
    assert bc_editor and all(f"`{CONVERT_LAYER}`" in a["text"] for a in bc_editor)
    # its reading is a finding about its own step, worded so
    text = finding(report, "LY092")
    assert text.startswith("calib_float (float.pt vs calib.pt, a step QAT recovered): "
                           if lang == "en" else "calib_float（float.pt 对 calib.pt，一步 QAT 已恢复的损失）：")
    assert f"`{RECOVERED_LAYER}`" in text
    # the origin and remedy findings speak for qa_convert alone
    origins = [f for f in report["findings"] if f["rule"] in ("LY010", "LY030", "LY031", "LY020")]
    assert origins and all(f["text"].startswith("qa_convert") for f in origins)
    speaks_one_language(report, "LY092")


def test_folders_are_placed_against_the_located_drop():
    """The scope of each folder: the drop qat.bc -> quantized.bc with QAT recovering calib."""
    stages = [{"type": "transition", "from": "qat_bc", "to": "quantized_bc"},
              {"type": "calib_recovered"}]
    folders = {name: {"type": "qa_folder", "analysis": name, "comparison": kind,
                      "baseline": base, "analysis_stage": stage, "known_from": known}
               for name, kind, base, stage, known in (
                   ("calib_float", "fake_quant", "float", "calib", "folder name"),
                   ("qa_convert", "convert", "qat_bc", "quantized_bc", "analyses_run"),
                   ("qa_convert_sens", "convert", "qat_export", "quantized_bc", "folder name"),
                   ("qa_export", "export", "qat_export", "qat_bc", "probe"),
                   # the tables say float vs QAT, the name says convert: in doubt
                   ("qa_convert_content", "fake_quant", "float", "calib", "content"),
                   ("horizon_quant_analysis", "unknown", "", "", "unknown"))}
    origin = {"type": "layer_origin", "analysis": "calib_float", "layer": RECOVERED_LAYER}
    facts = [*folders.values(), origin]
    place_folders(facts, stages, case_from({}))
    assert {name: (f["scope"], f["drives"]) for name, f in folders.items()} == {
        "calib_float": ("recovered", False), "qa_convert": ("located", True),
        "qa_convert_sens": ("located", True), "qa_export": ("other_step", False),
        "qa_convert_content": ("unplaced", True), "horizon_quant_analysis": ("unplaced", True)}
    assert origin["drives"] is False
    assert (folders["qa_convert"]["drop_from"], folders["qa_convert"]["drop_to"]) == \
        ("qat_bc", "quantized_bc")
    # unknown stages between the drop's ends: a comparison of any part of the gap speaks
    gap = [{"type": "transition", "from": "qat", "to": "qat_bc"}]
    place_folders(facts, gap, case_from({}))
    assert folders["qa_export"]["scope"] == "located"
    assert folders["qa_convert"]["scope"] == "other_step"


# --- case 2: a run declared invalid -------------------------------------------------------

@pytest.mark.parametrize("lang", LANGS)
def test_an_invalid_run_drives_nothing_but_its_redo(tmp_path, lang):
    report = triage(one_run_export_case(tmp_path), lang)
    ids = [a["id"] for a in report["next_actions"]]
    assert ids[0] == "qa_export_two_runs"
    assert not [i for i in ids if i.startswith(("qint16:", "fixed_scale:", "per_channel:"))]
    assert "export_graph_inspection" not in ids
    assert not [a for a in report["next_actions"] if a["kind"] == "bc_editor"]
    assert not [w for w in action_words(report)[1:] if "quant_img" in w]
    fired = rules_of(report)
    assert "LY094" in fired and not {"LY010", "LY031", "LY041", "LY020"} & fired
    assert finding(report, "LY094").startswith("qa_export")
    speaks_one_language(report, "LY094")
    # the same run made in two runs drives its remedy and the graph inspection
    valid = triage(one_run_export_case(tmp_path, separate_runs=True), lang)
    ids = [a["id"] for a in valid["next_actions"]]
    assert "qa_export_two_runs" not in ids and "LY094" not in rules_of(valid)
    assert "qint16:quant_img" in ids and "export_graph_inspection" in ids


# --- case 3: post-processing declared inside the analysed model ---------------------------

@pytest.mark.parametrize("lang", LANGS)
def test_post_processing_inside_the_model_is_compared_without_it_first(tmp_path, lang):
    report = triage(postprocess_case(tmp_path), lang)
    first = report["next_actions"][0]
    assert (first["id"], first["rule"]) == ("compare_without_postprocess:qa_convert", "LY027")
    assert first["kind"] == "quant_analysis"
    # the top-k row is nobody's source, and no remedy or bc_editor range rests on it
    fired = rules_of(report)
    assert not {"LY010", "LY014", "LY015", "LY033", "LY031", "AN042"} & fired
    assert not [w for w in action_words(report) if TOPK in w]
    bc_editor = [i for i, a in enumerate(report["next_actions"]) if a["kind"] == "bc_editor"]
    assert all(i > 0 for i in bc_editor)
    assert "postprocess_in_model: yes" in finding(report, "LY027")
    speaks_one_language(report, "LY027")
    assert TOPK not in section(report, "next")
    # without the declaration the same tables are read as before (R4.3 leaves out only the
    # rows it recognises as post-processing)
    undeclared = triage(postprocess_case(tmp_path, declared="no"), lang)
    assert "LY027" not in rules_of(undeclared)
    assert any(f["rule"] == "LY010" and f"`{TOPK}`" in f["text"]
               for f in undeclared["findings"])


# --- case 4: a sensitivity in a sibling folder --------------------------------------------

@pytest.mark.parametrize("lang", LANGS)
def test_a_sibling_folders_sensitivity_counts_for_its_comparison(tmp_path, lang):
    report = triage(split_sensitivity_case(tmp_path), lang)
    assert "no_sensitivity" not in {p["id"] for p in report["pitfalls"]}
    assert not {"LY090", "PF090"} & rules_of(report)
    folders = {f["analysis"]: f for f in report["facts"] if f["type"] == "qa_folder"}
    assert folders["qa_convert"]["sibling_sensitivity"] and not folders["qa_convert"]["has_sensitivity"]
    # beside the sensitivity run the checks list, no "no sensitivity" anywhere
    checks = section(report, "checks")
    assert "(qa_convert_sens); with sensitivity" in checks if lang == "en" else \
        "（qa_convert_sens）；含 sensitivity" in checks


def test_an_unlisted_sibling_counts_too(tmp_path):
    # analyses_run names the per-layer run only; the sensitivity folder is found by its name
    report = triage(split_sensitivity_case(tmp_path, runs=[CONVERT_RUN]), "en")
    assert not {"LY090", "PF090"} & rules_of(report)
    assert "qa_convert" not in [a["id"] for a in report["next_actions"]]   # no re-run asked


def test_a_sensitivity_of_another_comparison_does_not_count(tmp_path):
    export_sens = {"type": "export", "baseline": "qat_export", "analysis": "qat_bc",
                   "out_dir": "qa_export_sens", "sensitivity": True}
    report = triage(split_sensitivity_case(tmp_path, "qa_export_sens", [CONVERT_RUN, export_sens]),
                    "en")
    assert "no_sensitivity" in {p["id"] for p in report["pitfalls"]}
    assert finding(report, "LY090").startswith("qa_convert ")
    folders = {f["analysis"]: f for f in report["facts"] if f["type"] == "qa_folder"}
    assert not folders["qa_convert"]["sibling_sensitivity"]
    assert folders["qa_export_sens"]["scope"] == "other_step"
