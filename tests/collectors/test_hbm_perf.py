"""hbm_perf's forward.json (collectors/hbm_perf.py): each compiled layer's torch module and
source line, nested layers included; a located origin cites its source line, a module under
several compiled layers is the shared-module finding, and a damaged file is one clear
problem."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from qcdoctor.collectors.hbm_perf import load_forward_json
from qcdoctor.collectors.quant_analysis import collect_quant_analysis
from qcdoctor.engine.reports.formats import render
from tests.collectors.test_folder_stage_pairs import EXPORT_ORIGIN, export_case
from tests.conftest import case_from
from tests.diagnosis.test_which_analysis_speaks import triage

ORIGIN_AT = "model/head.py:123"
ACT_AT = "model/common.py:41"


def forward_doc() -> dict:
    """Nested layers as hbm_perf writes them: a block with sub-layers, one layer giving
    ``source`` as one string, an activation module under three compiled layers (one of them
    a sub-layer carrying the same module as its parent: not counted twice)."""
    return {"model": "yolo.hbm", "layers": [
        {"name": "/model.0/conv/Conv", "module": "model.0.conv", "file": "model/common.py",
         "line": 30},
        {"name": "/model.0/act/Sigmoid", "module": "model.0.act", "file": "model/common.py",
         "line": 41, "layers": [{"name": "/model.0/act/Sigmoid_lut", "module": "model.0.act",
                                 "source": ACT_AT}]},
        {"name": "block.head", "layers": [
            {"name": "/head/decode/Mul", "torch_module": "head.decode.mul",
             "source": ORIGIN_AT},
            {"name": "/head/inner", "children": [
                {"name": "/model.1/act/Sigmoid", "module": "model.0.act(1)", "source": ACT_AT},
                {"name": "/model.2/act/Sigmoid", "module": "model.0.act(2)", "file":
                    "model/common.py", "line": "41"}]}]}]}


def test_nested_layers_are_read_into_module_and_source_line():
    found = load_forward_json(json.dumps(forward_doc()).encode())
    assert found.defined_at == {"model.0.conv": "model/common.py:30", "model.0.act": ACT_AT,
                                "head.decode.mul": ORIGIN_AT}
    assert found.read == 6 and found.skipped == []
    assert found.shared() == {"model.0.act": ["/model.0/act/Sigmoid", "/model.1/act/Sigmoid",
                                              "/model.2/act/Sigmoid"]}
    # a row name finds its module: itself, its call, or the one module ending with it
    assert found.source_of("head.decode.mul") == ("head.decode.mul", ORIGIN_AT)
    assert found.source_of("model.0.act(2)") == ("model.0.act", ACT_AT)
    assert found.source_of("decode.mul") == ("head.decode.mul", ORIGIN_AT)
    assert found.source_of("neck.conv") is None


def test_a_list_at_the_top_is_read_too():
    found = load_forward_json(b'[{"name": "a", "module": "m.a", "source": "m.py:3"}]')
    assert found.defined_at == {"m.a": "m.py:3"}


@pytest.mark.parametrize("text, words", [
    (b"{not json", "line 1: not valid JSON: Expecting property name enclosed in double quotes "
                   "(check the line it names)"),
    (b"\xff\xfe", "not UTF-8 text (byte 0)"),
    (b'{"layers": {"a": 1}}', "no list of layers: expected a JSON object with a 'layers' list"),
    (b'"layers"', "no list of layers"),
    (b'{"layers": [' * 40 + b"]}" * 40, "line 1: nested more than 32 levels deep"),
    (b'{"layers": [{"line": 1' + b"9" * 400 + b"}]}", "line 1: a number of 401 digits"),
])
def test_a_file_that_is_no_layer_list_is_one_clear_error(text, words):
    with pytest.raises(ValueError) as caught:
        load_forward_json(text)
    assert str(caught.value).startswith(words)


def test_entries_that_cannot_be_read_are_skipped_and_counted():
    doc = {"layers": [
        {"name": "ok", "module": "m.ok", "file": "m.py", "line": 1},
        7,                                                         # not an object
        {"name": "no_source", "module": "m.lost"},
        {"name": "no_module", "source": "m.py:5"},
        {"name": "bad_line", "module": "m.bad", "file": "m.py", "line": True},
        {"name": "bad_text", "module": "m.bad2", "source": "m.py"},
        {"name": "list_module", "module": ["m"], "source": "m.py:9"},
        {"name": "bad_children", "layers": "none"},
        {"name": "container", "layers": []},                      # walked through, not counted
        {"name": "compiler_op"}]}
    found = load_forward_json(json.dumps(doc).encode())
    assert found.defined_at == {"m.ok": "m.py:1"}
    assert [str(s) for s in found.skipped] == [
        "layers[1]: not a JSON object",
        "layers[2]: module m.lost without its source file and line",
        "layers[3]: a source without a module path",
        "layers[4]: the source is not 'file:line' or a file with a whole line",
        "layers[5]: the source is not 'file:line' or a file with a whole line",
        "layers[6]: the module path is not text",
        "layers[7]: its sub-layers are not a list"]


def _case_with(tmp_path: Path, text: bytes, **case) -> list[dict]:
    folder = tmp_path / "case"
    (folder / "deploy").mkdir(parents=True)
    (folder / "deploy" / "forward.json").write_bytes(text)
    return collect_quant_analysis(case_from(case, folder))


def test_a_damaged_file_in_the_case_is_one_problem_naming_it_and_the_fix(tmp_path):
    doc = forward_doc()
    doc["layers"] += [3, {"name": "x", "module": "m.x"}]
    facts = _case_with(tmp_path, json.dumps(doc).encode())
    (problem,) = [f for f in facts if f["type"] == "artifact_problem"]
    assert problem["file"] == "deploy/forward.json" and problem["partial"]
    assert problem["problem"].startswith("2 layer entries could not be read and were skipped "
                                         "(6 read); layers[3]: not a JSON object (write each")
    assert problem["problem_zh"].startswith("2 个层条目无法读取，已跳过（读取了 6 个）")
    # the rest of the file is read: the shared module is found
    (shared,) = [f for f in facts if f["type"] == "compiled_shared_module"]
    assert (shared["count"], shared["module"], shared["defined_at"]) == (1, "model.0.act", ACT_AT)
    assert shared["modules"] == "model.0.act (3)"


@pytest.mark.parametrize("text", [b"{oops", b'{"layers": 5}', b"\x00\x01"])
def test_an_unreadable_file_is_one_problem_and_nothing_else(tmp_path, text):
    facts = _case_with(tmp_path, text)
    (problem,) = [f for f in facts if f["type"] == "artifact_problem"]
    assert problem["file"] == "deploy/forward.json" and not problem["partial"]
    assert not [f for f in facts if f["type"] in ("op_source", "compiled_shared_module")]


def test_artifacts_hbm_perf_names_the_file_and_a_missing_one_is_said(tmp_path):
    folder = tmp_path / "case"
    (folder / "perf").mkdir(parents=True)
    (folder / "perf" / "layers.json").write_text(json.dumps(forward_doc()), encoding="utf-8")
    (folder / "forward.json").write_text("{broken", encoding="utf-8")    # not the one named
    facts = collect_quant_analysis(case_from({"artifacts": {"hbm_perf": "perf/layers.json"}},
                                             folder))
    assert not [f for f in facts if f["type"] == "artifact_problem"]
    assert [f["module"] for f in facts if f["type"] == "compiled_shared_module"] == ["model.0.act"]
    missing = collect_quant_analysis(case_from({"artifacts": {"hbm_perf": "perf/gone.json"}},
                                               folder))
    (problem,) = [f for f in missing if f["type"] == "artifact_problem"]
    assert (problem["file"], problem["problem"]) == ("perf/gone.json", "file not found")


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    from qcdoctor.collectors import files
    monkeypatch.setitem(files.SIZE_CAPS, "source_map", files.MiB)
    folder = tmp_path / "case"
    folder.mkdir()
    (folder / "forward.json").write_bytes(json.dumps(forward_doc()).encode() + b" " * files.MiB)
    gate = files.CaseFiles(folder)
    facts = collect_quant_analysis(case_from({}, folder), files=gate)
    (refused,) = gate.problem_facts()
    assert refused["file"] == "forward.json"
    assert "more than the 1 MiB read for a source_map file" in refused["problem"]
    assert not [f for f in facts if f["type"] == "compiled_shared_module"]


# --- in the report ---------------------------------------------------------------------

def export_case_with_map(root: Path) -> Path:
    folder = export_case(root, declared=False)
    (folder / "hbm").mkdir()
    (folder / "hbm" / "forward.json").write_text(json.dumps(forward_doc()), encoding="utf-8")
    return folder


FORMATS = ["md", "html", "json", "sarif", "junit"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_located_origin_cites_its_source_line(tmp_path, lang):
    report = triage(export_case_with_map(tmp_path), lang)
    (cited,) = [f["text"] for f in report["findings"] if f["rule"] == "LY081"]
    expected = (f"pre_export_pt_vs_qatbc: the origin `{EXPORT_ORIGIN}` (module "
                f"`{EXPORT_ORIGIN}`) is defined at {ORIGIN_AT} (hbm_perf's forward.json)."
                if lang == "en" else
                f"pre_export_pt_vs_qatbc：误差源 `{EXPORT_ORIGIN}`（模块 `{EXPORT_ORIGIN}`）"
                f"定义于 {ORIGIN_AT}（hbm_perf 的 forward.json）。")
    assert cited == expected
    # the sensitivity's top op is the origin itself: cited once, as the origin
    assert "LY082" not in {f["rule"] for f in report["findings"]}
    # the other step's softmax is not cited (its folder does not speak for the drop)
    sources = [f for f in report["facts"] if f["type"] == "op_source"]
    assert [(f["layer"], f["role"], f["drives"]) for f in sources] == \
        [(EXPORT_ORIGIN, "origin", True)]
    for fmt in FORMATS:
        assert ORIGIN_AT in render(report, fmt), fmt
    assert json.loads(render(report, "json"))["findings"]


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_module_under_several_compiled_layers_is_the_shared_module_finding(tmp_path, lang):
    report = triage(export_case_with_map(tmp_path), lang)
    (text,) = [f["text"] for f in report["findings"] if f["rule"] == "LY083"]
    assert "`model.0.act`" in text and ACT_AT in text and "model.0.act (3)" in text
    assert "/model.0/act/Sigmoid, /model.1/act/Sigmoid, /model.2/act/Sigmoid" in text
    for fmt in FORMATS:
        assert "model.0.act" in render(report, fmt), fmt


def test_an_origin_at_a_call_of_a_compiled_shared_module_gets_its_own_module_remedy(tmp_path):
    """The map's shared module feeds the same finding as model_check_result's "used multi
    times": an origin at one of its calls is told to give that call its own module."""
    folder = export_case(tmp_path, declared=False)
    doc = forward_doc()
    doc["layers"].append({"name": "/head/decode/Mul_1", "module": "head.decode.mul(1)",
                          "source": ORIGIN_AT})
    (folder / "forward.json").write_text(json.dumps(doc), encoding="utf-8")
    report = triage(folder, "en")
    (text,) = [f["text"] for f in report["findings"] if f["rule"] == "LY079"]
    assert f"`{EXPORT_ORIGIN}`" in text and "called 2 times" in text
    assert f"own_module:{EXPORT_ORIGIN}" in [a["id"] for a in report["next_actions"]]


def test_a_module_model_check_result_names_cites_its_source_line(tmp_path):
    """model_check_result's unfused module is cited; a module called 0 times was compiled
    into no layer, and is not looked up."""
    from tests.qa.writers import write_model_check
    folder = tmp_path / "case"
    folder.mkdir()
    write_model_check(folder / "model_check_result.txt", unfused=["model.0.conv"],
                      called=[("model.0.conv", 0)])
    (folder / "forward.json").write_text(json.dumps(forward_doc()), encoding="utf-8")
    facts = collect_quant_analysis(case_from({}, folder))
    kinds = {f["kind"] for f in facts if f["type"] == "model_check"}
    assert {"unfused", "called_zero"} <= kinds
    cited = [(f["layer"], f["role"], f["at"]) for f in facts if f["type"] == "op_source"]
    assert cited == [("model.0.conv", "checked", "model/common.py:30")]
    (folder / "case.yaml").write_text("schema: qcdoctor/case-v1\n", encoding="utf-8")
    report = triage(folder, "en")
    (text,) = [f["text"] for f in report["findings"] if f["rule"] == "LY084"]
    assert text == ("`model.0.conv`, which model_check_result names, (module `model.0.conv`) "
                    "is defined at model/common.py:30 (hbm_perf's forward.json).")
