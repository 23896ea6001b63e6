"""The edges of the sources the knowledge-row map reads: the profiler's input scale, the
platform a script or config names, the hb_compile normalisation and input size, the
layout check in both directions, the fake-quant state a script exports in and the board
input's stride (tests/diagnosis/test_knowledge_coverage.py holds the map)."""

from __future__ import annotations

import pytest
import yaml

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.files import CaseFiles
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.intake.deploy_known import find_compile_scripts
from qcdoctor.engine.reports.formats import render
from qcdoctor.errors import QcdoctorError
from tests.diagnosis.test_knowledge_coverage import build_case, triage
from tests.reports.test_report_language import english_left


def facts_of(report: dict, kind: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == kind]


def compared(report: dict, item: str) -> dict:
    return next(f for f in facts_of(report, "deploy_compare") if f["item"] == item)


def status(report: dict, item: str) -> str:
    return next(c["status"] for c in report["checklist"] if c["id"] == item)


NO_TRAIN_SCALE = {"deploy": {"train": {"input_scale": None}}}


# --- the input QuantStub scale of the QuantAnalysis outputs ------------------------------

def test_the_statistic_table_gives_the_scale_when_there_is_no_compare_table(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": NO_TRAIN_SCALE,
        "profiler": {"analysis": "convert", "stub_scales": [0.00390625], "table": "statistic"}}))
    scale = compared(report, "input_scale")
    assert (scale["train"], scale["equal"]) == ("0.0039062", "no")     # 7 decimals, as printed
    assert "qa_convert/analysis_model/statistic.txt line" in scale["source"]
    assert status(report, "input_scale") == "fail"


def test_the_compare_table_row_is_cited(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": NO_TRAIN_SCALE,
        "profiler": {"analysis": "export", "stub_scales": [0.0078125]}}))
    scale = compared(report, "input_scale")
    assert scale["equal"] == "yes"
    assert scale["source"].startswith("qa_export/compare_per_layer_out.txt line ")
    assert {"file": "qa_export/compare_per_layer_out.txt"}.items() <= scale["locations"][0].items()


@pytest.mark.parametrize("profiler,why", [
    ({"analysis": "export", "stub_scales": [0.0078125, 0.0094101]}, "two inputs: which one?"),
    ({"analysis": "fake_quant", "stub_scales": [0.00390625]}, "a calibration model's scale"),
])
def test_scales_that_do_not_name_the_qat_input_scale_are_not_used(tmp_path, profiler, why):
    report = triage(build_case(tmp_path / "c", {"base": "compile", "case": NO_TRAIN_SCALE,
                                                 "profiler": profiler}))
    assert compared(report, "input_scale")["train"] == "unknown", why


def test_a_scale_printed_with_7_decimals_equals_the_exact_board_scale(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"train": {"input_scale": None},
                                               "board": {"input_scale": 0.00390625}}},
        "profiler": {"analysis": "export", "stub_scales": [0.00390625]}}))
    scale = compared(report, "input_scale")
    assert (scale["train"], scale["equal"]) == ("0.0039062", "yes")


def test_case_yaml_wins_over_the_profiler(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "profiler": {"analysis": "export", "stub_scales": [0.00390625]}}))
    scale = compared(report, "input_scale")
    assert scale["equal"] == "yes" and "deploy.train.input_scale" in scale["source"]


def test_a_case_without_a_board_scale_gets_no_deployment_facts_from_the_profiler(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "convert", "profiler": {"analysis": "export", "stub_scales": [0.0078125]}}))
    assert not facts_of(report, "deploy_compare")


# --- the platform a script or config names ------------------------------------------------

def test_a_platform_from_the_script_is_no_second_opinion_on_its_own_march(tmp_path):
    report = triage(build_case(tmp_path / "c", {"base": "compile", "case": {"platform": None},
                                                 "script": "compile_nash_m"}))
    [platform] = facts_of(report, "platform")
    assert not platform["known"]                  # convert says nash-e, compile nash-m
    [march] = facts_of(report, "march_check")
    assert (march["platform"], march["consistent"]) == ("unknown", "no")
    report = triage(build_case(tmp_path / "ok", {"base": "compile", "case": {"platform": None},
                                                  "script": "correct"}))
    [platform] = facts_of(report, "platform")
    assert (platform["march"], platform["chip"]) == ("nash-e", "J6E")
    assert platform["source"].startswith("deploy/compile_model.py line ")
    [march] = facts_of(report, "march_check")
    assert march["platform"] == "unknown" and march["consistent"] == "unknown"


def test_the_script_and_config_must_agree_to_name_the_platform(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "convert", "case": {"platform": None}, "script": "correct",
        "config": {"model_parameters": {"march": "nash-p"}}}))
    assert not facts_of(report, "platform")[0]["known"]
    assert "platform" in {m["id"] for m in report["missing"]}


def test_a_platform_in_case_yaml_is_never_replaced(tmp_path):
    report = triage(build_case(tmp_path / "c", {"base": "convert", "case": {"platform": {"chip": "J6M"}},
                                                 "script": "march_nash_p"}))
    assert facts_of(report, "platform")[0]["march"] == "nash-m"
    # ... and the script's other march is a user-side difference at convert
    assert report["conclusion"]["suspect"] == "inconsistent_inputs_between_stages"
    assert facts_of(report, "march_check")[0]["platform"] == "nash-m"


# --- hb_compile normalisation, input size and input types ---------------------------------

@pytest.mark.parametrize("values,board,equal", [
    # shown as the config writes it: x -> (x - mean_value) x scale_value (knowledge.md R5.9)
    ({"mean_value": "128", "scale_value": "0.0078125"}, "(x - [128.0]) × [0.0078125]", "no"),
    ({"mean_value": "123.675 116.28 103.53"}, "(x - [123.675, 116.28, 103.53]) × unknown",
     "unknown"),
])
def test_hb_compile_normalisation(tmp_path, values, board, equal):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"board": {"mean": None, "std": None}}},
        "config": {"input_parameters": values}}))
    norm = compared(report, "normalisation")
    assert (norm["board"], norm["equal"]) == (board, equal)
    assert "config.yaml" in norm["source"]


def test_the_script_normalisation_wins_over_the_config(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "script": "correct",
        "config": {"input_parameters": {"mean_value": "128", "std_value": "128"}}}))
    norm = compared(report, "normalisation")
    assert norm["equal"] == "yes" and "deploy/compile_model.py line" in norm["source"]


def test_a_resizer_input_size_is_not_the_nv12_size(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"board": {"height": None, "width": None}}},
        "config": {"input_parameters": {"input_type_rt": "nv12", "input_source": "resizer",
                                        "input_layout_train": "NCHW",
                                        "input_shape": "1x3x541x960"}}}))
    [size] = facts_of(report, "nv12_size")
    assert not size["known"] and status(report, "nv12_even_size") == "unknown"


def test_a_config_without_input_types_leaves_them_to_case_yaml(tmp_path):
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"train": {"color": "yuv444"}, "board": {"color": "rgb"}}},
        "config": {"compiler_parameters": {"core_num": 1}}}))
    [types] = facts_of(report, "input_types")
    assert (types["train"], types["rt"]) == ("yuv444", "rgb")
    assert status(report, "input_type_pair") == "fail"


# --- the layout check in both directions ---------------------------------------------------

@pytest.mark.parametrize("script,expected", [("correct", "fail"), ("numpy_permutes", "pass")])
def test_an_nhwc_model_fed_nchw_data_needs_the_inverse_permutes(tmp_path, script, expected):
    """hbdk semantics: turning the model's NHWC input into an NCHW one is [0, 2, 3, 1]."""
    report = triage(build_case(tmp_path / "c", {
        "base": "compile", "script": script,
        "case": {"deploy": {"train": {"layout": "NHWC"},
                            "board": {"layout": "NCHW", "color": "rgb", "input_source": "ddr"}}}}))
    assert status(report, "layout") == expected


# --- the fake-quant state the script exports in (knowledge.md §5 user-side facts) --------

EXPORT_SCRIPT = "deploy/export_model.py"
EXPORT_HEAD = '''"""Export the QAT model to qat.bc."""
from horizon_plugin_pytorch.quantization import FakeQuantState, set_fake_quantize
from horizon_plugin_pytorch.quantization.hbdk4 import export, pre_export

qat_pt.eval()
'''
EXPORT_STAGES = {"stages": {"qat_export": {"status": "normal"}, "qat_bc": {"status": "abnormal"}}}


def exporting(tmp_path, body: str, case: dict | None = None, head: str = EXPORT_HEAD,
              lang: str = "en") -> dict:
    """Triage a case whose deploy.script is an export script ``head + body``."""
    folder = build_case(tmp_path / "c", {"base": "minimal",
                                         "case": {**EXPORT_STAGES, **(case or {})}})
    (folder / EXPORT_SCRIPT).parent.mkdir(parents=True)
    (folder / EXPORT_SCRIPT).write_text(head + body, encoding="utf-8")
    data = yaml.safe_load((folder / "case.yaml").read_text(encoding="utf-8"))
    data.setdefault("deploy", {})["script"] = EXPORT_SCRIPT
    (folder / "case.yaml").write_text(yaml.safe_dump(data), encoding="utf-8")
    return triage_case(load_case(folder), lang=lang, environ={}, installed={}, cwd=folder)


def rules_fired(report: dict) -> set[str]:
    return {entry["rule"] for entry in report["trace"]}


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


@pytest.mark.parametrize("head,body", [
    # the module under another name, the state by keyword
    ("import horizon_plugin_pytorch.quantization as hq\n"
     "from horizon_plugin_pytorch.quantization import hbdk4 as h4\n",
     "hq.set_fake_quantize(qat_pt, state=hq.FakeQuantState._FLOAT)\nh4.export(qat_pt, x)\n"),
    # the functions and the enum under other names
    ("from horizon_plugin_pytorch.quantization import FakeQuantState as FQS\n"
     "from horizon_plugin_pytorch.quantization import set_fake_quantize as set_state\n"
     "from horizon_plugin_pytorch.quantization.hbdk4 import pre_export as pe\n",
     "set_state(qat_pt, FQS._FLOAT)\nqat_export_pt = pe(qat_pt)\n"),
    # through the package, the state held in a constant and passed under another keyword
    ("import horizon_plugin_pytorch as hpp\nSTATE = hpp.quantization.FakeQuantState._FLOAT\n",
     "hpp.quantization.set_fake_quantize(qat_pt, mode=STATE)\n"
     "hpp.quantization.hbdk4.export(qat_pt, x)\n"),
    # inside the script's main(), run under the __main__ guard
    (EXPORT_HEAD, "def main():\n    set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                  "    export(qat_pt, x)\n\n\nif __name__ == \"__main__\":\n    main()\n"),
])
def test_a_script_exporting_in_float_is_the_user_side_export_state(tmp_path, head, body):
    report = exporting(tmp_path, body, head=head)
    assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
        ("user_side", "export_state")
    assert {"ST163", "PF042"} <= rules_fired(report)
    assert "fake_quant_state" in [p["id"] for p in report["pitfalls"]]
    [state] = facts_of(report, "export_state")
    assert (state["state"], state["case_state"], state["agrees"]) == ("float", "unknown", "unknown")
    # the report cites the script lines: where the state is set and where it exports
    text = head + body
    set_line = line_of(text, "_FLOAT)") if "STATE =" not in text else line_of(text, "mode=STATE")
    assert state["set_line"] == set_line
    assert state["source"] == f"{EXPORT_SCRIPT} line {set_line}"
    assert {"file": EXPORT_SCRIPT, "line": set_line} in state["locations"]
    assert {"file": EXPORT_SCRIPT, "line": state["export_line"]} in state["locations"]
    [evidence] = [e for e in report["conclusion"]["evidence"] if e["rule"] == "ST163"]
    assert f"line {set_line}" in evidence["text"]


def test_the_state_at_the_last_export_counts(tmp_path):
    # the _FLOAT diagnostic, then VALIDATION again before the export
    report = exporting(tmp_path / "a", "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                                       "set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\n"
                                       "qat_bc = export(qat_pt, x)\n")
    assert facts_of(report, "export_state")[0]["state"] == "validation"
    assert report["conclusion"]["stage"] == "export"
    # the script answers the reminder and its question (PF041), as case.yaml would
    assert not {"ST163", "PF042", "PF041"} & rules_fired(report)
    assert "fake_quant_state" not in [c["id"] for c in report["cautions"]]
    # a diagnostic export in _FLOAT after the VALIDATION one: the last export is the artifact
    report = exporting(tmp_path / "b", "set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\n"
                                       "qat_bc = export(qat_pt, x)\n"
                                       "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                                       "qat_bc = export(qat_pt, x)\n"
                                       "set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\n")
    assert facts_of(report, "export_state")[0]["state"] == "float"
    assert report["conclusion"]["suspect"] == "export_state"


def test_an_export_script_is_no_compile_script_but_one_script_can_be_both(tmp_path):
    body = "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\nqat_bc = export(qat_pt, x)\n"
    report = exporting(tmp_path / "a", body)
    # no hbdk4 call: nothing said of inserts, removals or the march
    assert not facts_of(report, "deploy_script") and not facts_of(report, "march_check")
    report = exporting(tmp_path / "b", body + "from hbdk4.compiler import convert\n"
                                              "quantized = convert(qat_bc, 'nash-e')\n")
    assert facts_of(report, "deploy_script")[0]["converts"]
    assert facts_of(report, "export_state")[0]["state"] == "float"


@pytest.mark.parametrize("body,why", [
    ("if args.diagnose:\n    set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
     "export(qat_pt, x)\n", "set in one branch only: either state"),
    ("set_fake_quantize(qat_pt, getattr(FakeQuantState, args.state))\nexport(qat_pt, x)\n",
     "a state known only at run time"),
    ("set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n", "no export follows"),
    ("set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\nexport(qat_pt, x)\n"
     "if args.diagnose:\n    set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
     "    export(qat_pt, x)\n", "the last export to run depends on a branch"),
    ("import torch\nset_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
     "torch.onnx.export(qat_pt, x, 'qat.onnx')\n", "another library's export"),
    ("set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\n"
     "set_fake_quantize(float_copy, FakeQuantState._FLOAT)\nexport(float_copy, x)\n"
     "export(qat_pt, x)\n", "the _FLOAT diagnostic on a copy"),
])
def test_what_the_script_does_not_show_is_not_guessed(tmp_path, body, why):
    report = exporting(tmp_path, body)
    states = [f["state"] for f in facts_of(report, "export_state")]
    assert states in ([], ["validation"]), why
    assert not {"ST163", "PF042"} & rules_fired(report), why
    if not states:                    # the state is still not known: the reminder stays
        assert "PF041" in rules_fired(report), why


@pytest.mark.parametrize("given,script,stage,rule", [
    ("validation", "_FLOAT", "export", None),
    ("float", "VALIDATION", "user_side", "ST161"),
])
def test_case_yaml_wins_over_the_script_and_a_disagreement_is_said(tmp_path, given, script,
                                                                     stage, rule):
    report = exporting(tmp_path, f"set_fake_quantize(qat_pt, FakeQuantState.{script})\n"
                                 "export(qat_pt, x)\n", case={"fake_quant_state": given})
    assert report["conclusion"]["stage"] == stage
    assert "ST163" not in rules_fired(report) and "PF042" not in rules_fired(report)
    if rule:
        assert rule in rules_fired(report)
    [state] = facts_of(report, "export_state")
    assert (state["case_state"], state["agrees"]) == (given, "no")
    [finding] = [f for f in report["findings"] if f["rule"] == "ST164"]
    assert f"fake_quant_state: {given}" in finding["text"]
    # both sides are cited: the script line and case.yaml's key
    source = finding["evidence"]["export_state"]["source"]
    assert source.startswith(f"{EXPORT_SCRIPT} line ") and "(fake_quant_state)" in source


def test_the_same_state_in_both_is_no_finding(tmp_path):
    report = exporting(tmp_path, "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                                 "export(qat_pt, x)\n", case={"fake_quant_state": "float"})
    assert facts_of(report, "export_state")[0]["agrees"] == "yes"
    assert "ST161" in rules_fired(report) and "ST164" not in rules_fired(report)


def test_an_export_script_is_found_in_the_case_folder_when_no_compile_script_is(tmp_path):
    folder = tmp_path / "c"
    (folder / "tools").mkdir(parents=True)
    (folder / "tools" / "export.py").write_text(
        EXPORT_HEAD + "set_fake_quantize(qat_pt, FakeQuantState.VALIDATION)\nexport(qat_pt, x)\n",
        encoding="utf-8")
    (folder / "tools" / "train.py").write_text("import torch\n", encoding="utf-8")
    assert find_compile_scripts(folder, CaseFiles(folder)) == ["tools/export.py"]
    # a compile script is the one the case names, when there is one
    (folder / "compile.py").write_text("from hbdk4.compiler import convert\nconvert(m, 'nash-e')\n",
                                       encoding="utf-8")
    assert find_compile_scripts(folder, CaseFiles(folder)) == ["compile.py"]


@pytest.mark.parametrize("lang", ("zh", "en"))
def test_the_export_state_wording_in_both_languages(tmp_path, lang):
    float_report = exporting(tmp_path / "f", "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                                             "export(qat_pt, x)\n", lang=lang)
    disagreeing = exporting(tmp_path / "d", "set_fake_quantize(qat_pt, FakeQuantState._FLOAT)\n"
                                            "export(qat_pt, x)\n",
                            case={"fake_quant_state": "validation"}, lang=lang)
    for report in (float_report, disagreeing):
        text = render(report, "md")
        assert "?" not in "".join(e["text"] for e in report["conclusion"]["evidence"])
        if lang == "zh":
            assert not english_left(report, text)
    assert any(f["rule"] == "ST164" for f in disagreeing["findings"])


# --- the board input's row stride (knowledge.md §10: J6 Y/UV strides are 32-byte aligned) ---

def strided(tmp_path, board: dict, **kw) -> dict:
    return triage(build_case(tmp_path / "c", {"base": "compile",
                                              "case": {"deploy": {"board": board}}, **kw}))


@pytest.mark.parametrize("board,padding,fired", [
    ({"stride": 1024}, "pass", {"DP073"}),
    ({"stride": 1000}, "fail", {"DP074"}),
    ({"stride": 928}, "fail", {"DP075"}),                 # aligned, but short of 960 bytes
    ({"stride": 960, "uv_stride": 976}, "fail", {"DP073", "DP074"}),
    ({"stride": "1920"}, "pass", {"DP073"}),              # quoted: read as the number
])
def test_the_stride_judges_padding(tmp_path, board, padding, fired):
    report = strided(tmp_path, board)
    assert status(report, "padding") == padding
    assert fired <= rules_fired(report)
    assert not {"DP073", "DP074", "DP075"} - fired & rules_fired(report)
    strides = facts_of(report, "stride")
    assert [f["plane"] for f in strides] == ["Y", "UV"][:len(strides)]
    assert strides[0]["source"].startswith("case.yaml:") and "deploy.board.stride" in \
        strides[0]["source"]
    if padding == "fail":
        assert (report["conclusion"]["stage"], report["conclusion"]["suspect"]) == \
            ("user_side", "padding")
        assert any(e["rule"] in fired for e in report["conclusion"]["evidence"])


def test_no_stride_no_judgement(tmp_path):
    report = strided(tmp_path, {})
    assert not facts_of(report, "stride") and status(report, "padding") == "pass"
    # an aligned stride never hides what else judges padding
    report = strided(tmp_path / "p", {"stride": 1024, "padding": "zero"})
    assert status(report, "padding") == "fail"


def test_the_stride_fits_the_width_from_the_hb_compile_config(tmp_path):
    report = strided(tmp_path, {"stride": 1920, "height": None, "width": None},
                     config={"input_parameters": {"input_type_rt": "nv12",
                                                  "input_layout_train": "NCHW",
                                                  "input_shape": "1x3x1080x1984"}})
    [stride] = facts_of(report, "stride")
    assert (stride["width"], stride["short"], stride["aligned_stride"]) == (1984, True, 1984)
    assert status(report, "padding") == "fail"


def test_a_stride_of_an_input_without_yuv_planes_is_not_judged(tmp_path):
    report = strided(tmp_path, {"stride": 1000, "color": "rgb", "input_source": "ddr"})
    assert not facts_of(report, "stride")


@pytest.mark.parametrize("board,words", [
    ({"stride": 0}, "below the minimum 1"),
    ({"stride": -32}, "below the minimum 1"),
    ({"uv_stride": 0}, "below the minimum 1"),
    ({"stride": "1920 bytes"}, "expected a integer"),
    ({"stride": 1920.5}, "expected a integer"),
])
def test_a_stride_that_is_no_byte_count_is_a_case_file_error(tmp_path, board, words):
    folder = tmp_path / "c"
    folder.mkdir()
    key = next(iter(board))
    (folder / "case.yaml").write_text(yaml.safe_dump(
        {"schema": "qcdoctor/case-v1", "deploy": {"board": {"color": "nv12", **board}}}),
        encoding="utf-8")
    with pytest.raises(QcdoctorError) as err:
        load_case(folder)
    assert err.value.key == f"deploy.board.{key}" and words in err.value.render()
    assert err.value.line and err.value.fix


@pytest.mark.parametrize("lang", ("zh", "en"))
def test_the_stride_wording_in_both_languages(tmp_path, lang):
    report = triage_case(load_case(build_case(tmp_path / "c", {
        "base": "compile", "case": {"deploy": {"board": {"stride": 900, "uv_stride": 1024}}}})),
        lang=lang, environ={}, installed={}, cwd=tmp_path / "c")
    text = render(report, "md")
    assert "900" in text and ("32 的倍数" if lang == "zh" else "multiple of 32") in text
    if lang == "zh":
        assert not english_left(report, text)
