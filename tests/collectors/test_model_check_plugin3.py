"""model_check_result.txt as horizon_plugin_pytorch 3.x writes it (knowledge.md R5.10): the
version lines at the top, "Modules below are not used" and "... used multi times", the gemm
input-dtype table, the closing "Please check if these OPs qconfigs are expected.." table and
``name(n)`` calls in the per-layer tables, each read into facts with its line; the versions
and the march fold into the case's environment beside its other sources."""

from __future__ import annotations

from pathlib import Path

import pytest

from qcdoctor.collectors.model_check import read_model_check
from qcdoctor.collectors.reading.fx_graph import split_call
from qcdoctor.engine.diagnosis.triage import triage_path
from qcdoctor.engine.reports.formats import render_output


def _psql(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(header)]

    def line(cells):
        return "|" + "|".join(f" {c:<{w - 1}}" for c, w in zip(cells, widths, strict=True)) + "|"
    rule = "+" + "+".join("-" * w for w in widths) + "+"
    inner = "|" + "+".join("-" * w for w in widths) + "|"
    return [rule, line(header), inner, *map(line, rows), rule]


def plugin3_model_check(pytorch: str = "3.0.5", march: str = "nash-e") -> str:
    lines = [f"horizon_plugin_pytorch version: {pytorch}",
             "horizon_plugin_profiler version: 3.0.5",
             f"current march: {march}",
             "",
             "All fusable modules are fused in model!",
             "",
             "Modules below are not used:",
             *_psql(["name"], [["head.aux_conv"], ["head.unused_bn"]]),
             "",
             "Modules below are used multi times:",
             *_psql(["name", "called times"], [["model.0.act", "77"], ["model.5.pool", "2"]]),
             "",
             "Gemm input dtypes statistics(inputxweight):",
             *_psql(["input x weight", "count"], [["qint8xqint8", "58"],
                                                  ["torch.float32xqint8", "1"],
                                                  ["qint16xqint8", "3"]]),
             "",
             "Each layer out qconfig:",
             *_psql(["Module Name", "Module Type", "Input dtype", "out dtype", "ch_axis",
                     "observer"],
                    [["model.0.conv", "<class 'horizon_plugin_pytorch.nn.qat.conv2d.Conv2d'>",
                      "[torch.float32]", "['qint8']", "-1", "MinMaxObserver"],
                     ["model.0.act", "<class 'horizon_plugin_pytorch.nn.qat.silu.SiLU'>",
                      "['qint8']", "['qint8']", "-1", "MinMaxObserver"],
                     ["model.0.act(1)", "<class 'horizon_plugin_pytorch.nn.qat.silu.SiLU'>",
                      "[torch.float32]", "['qint8']", "-1", "MinMaxObserver"],
                     ["model.0.act(2)", "<class 'horizon_plugin_pytorch.nn.qat.silu.SiLU'>",
                      "[torch.float32]", "['qint8']", "-1", "MinMaxObserver"]]),
             "",
             "Please check if these OPs qconfigs are expected..",
             *_psql(["module", "message"],
                    [["model.0.conv", "Unexpect gemm input torch.float32xqint8"],
                     ["model.22.dfl.conv", "Unexpect gemm input torch.float32xqint8"],
                     ["model.23.cv3.0.2", "Output dtype is qint8, expect qint16 or float"]]),
             ""]
    return "\n".join(lines)


def _lines_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_every_plugin3_section_is_read_with_its_line(tmp_path):
    text = plugin3_model_check()
    path = tmp_path / "model_check_result.txt"
    path.write_text(text, encoding="utf-8")
    read = read_model_check(path)
    assert read.versions == {"horizon-plugin-pytorch": ("3.0.5", 1),
                             "horizon-plugin-profiler": ("3.0.5", 2)}
    assert read.march == ("nash-e", 3)
    by_kind: dict[str, list[dict]] = {}
    for item in read.findings:
        by_kind.setdefault(item["kind"], []).append(item)
    assert [f["module"] for f in by_kind["called_zero"]] == ["head.aux_conv", "head.unused_bn"]
    assert [(f["module"], f["detail"]) for f in by_kind["shared"]] == [
        ("model.0.act", "called 77 times"), ("model.5.pool", "called 2 times")]
    assert by_kind["shared"][0]["line"] == _lines_of(text, "| model.0.act ")
    (gemm,) = by_kind["gemm_float_input"]
    assert "torch.float32xqint8" in gemm["detail"] and gemm["detail"].startswith("1 ")
    checks = [(f["module"], f["detail"]) for f in by_kind["please_check"]]
    assert checks == [("model.0.conv", "Unexpect gemm input torch.float32xqint8"),
                      ("model.22.dfl.conv", "Unexpect gemm input torch.float32xqint8"),
                      ("model.23.cv3.0.2", "Output dtype is qint8, expect qint16 or float")]
    # a float input at the act's second call is one finding of the module, at that call
    floats = {f["module"]: f["call"] for f in by_kind["float_input"]}
    assert floats == {"model.0.conv": 0, "model.0.act": 1}


@pytest.mark.parametrize("name, expected", [("head", ("head", 0)), ("head(1)", ("head", 1)),
                                            ("a.b(12)", ("a.b", 12)), ("f(x)", ("f(x)", 0))])
def test_a_call_is_named_as_the_profiler_names_it(name, expected):
    assert split_call(name) == expected


def _case(tmp_path: Path, body: str, model_check: str) -> Path:
    case = tmp_path / "case"
    case.mkdir()
    (case / "case.yaml").write_text("symptom: mAP drops after convert\n" + body,
                                    encoding="utf-8")
    (case / "model_check_result.txt").write_text(model_check, encoding="utf-8")
    return case


def _facts(report: dict, kind: str) -> list[dict]:
    return [f for f in report["facts"] if f["type"] == kind]


def test_triage_reads_the_findings_versions_and_march(tmp_path):
    case = _case(tmp_path, "", plugin3_model_check())
    report = triage_path(case, use_env=False, lang="en")
    kinds = {f["kind"]: f for f in _facts(report, "model_check")}
    assert kinds["shared"]["count"] == 2 and "model.0.act" in kinds["shared"]["modules"]
    assert kinds["called_zero"]["count"] == 2
    please = [f for f in _facts(report, "model_check") if f["kind"] == "please_check"]
    assert sorted((f["count"], f["detail"]) for f in please) == [
        (1, "Output dtype is qint8, expect qint16 or float"),
        (2, "Unexpect gemm input torch.float32xqint8")]
    fired = {t["rule"] for t in report["trace"]}
    assert {"LY071", "LY072", "LY077", "LY078"} <= fired
    versions = {f["package"]: f for f in _facts(report, "version")}
    plugin = versions["horizon-plugin-pytorch"]
    assert (plugin["version"], plugin["known"]) == ("3.0.5", True)
    assert plugin["source"].startswith("model_check_result.txt line 1")
    (platform,) = _facts(report, "platform")
    assert (platform["march"], platform["chip"]) == ("nash-e", "J6E")
    for lang in ("zh", "en"):
        for fmt in ("md", "html", "json", "sarif", "junit"):
            assert render_output(triage_path(case, use_env=False, lang=lang), fmt)


def test_a_version_case_yaml_gives_otherwise_is_a_mismatch(tmp_path):
    case = _case(tmp_path, "platform: {chip: J6E}\n"
                           "versions: {horizon-plugin-pytorch: 3.1.5}\n",
                 plugin3_model_check(pytorch="3.0.5"))
    report = triage_path(case, use_env=False, lang="en")
    (mismatch,) = _facts(report, "version_mismatch")
    assert (mismatch["given"], mismatch["found"]) == ("3.1.5", "3.0.5")
    versions = {f["package"]: f for f in _facts(report, "version")}
    assert versions["horizon-plugin-pytorch"]["version"] == "3.1.5"    # case.yaml wins
    assert "GT042" in {t["rule"] for t in report["trace"]}


def test_the_same_version_written_alike_is_no_mismatch(tmp_path):
    case = _case(tmp_path, "versions: {horizon-plugin-pytorch: '3.0.5'}\n",
                 plugin3_model_check(pytorch="3.0.5"))
    report = triage_path(case, use_env=False, lang="en")
    assert not _facts(report, "version_mismatch")


def test_the_march_prepare_recorded_joins_the_march_comparison(tmp_path):
    script = ("from hbdk4.compiler import convert, compile\n"
              "m = convert(model, march='nash-e')\n"
              "compile(m, 'model.hbm', march='nash-e')\n")
    case = _case(tmp_path, "platform: {chip: J6E}\ndeploy: {script: build.py}\n",
                 plugin3_model_check(march="nash-m"))
    (case / "build.py").write_text(script, encoding="utf-8")
    report = triage_path(case, use_env=False, lang="en")
    checks = _facts(report, "march_check")
    assert checks and checks[0]["prepare"] == "nash-m" and checks[0]["consistent"] == "no"
    assert "prepare=nash-m" in checks[0]["differing"]
    assert "DP030" in {t["rule"] for t in report["trace"]}
