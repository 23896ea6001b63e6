"""Why an artifact could not be read, in the report's language: every reason a reader writes
comes from a template of templates/reasons.yaml, filled in English and in Chinese alike,
and a Chinese report says it in Chinese."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import string
from pathlib import Path

import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.collectors.reasons import (
    Reason,
    artifact_problem,
    joined,
    of_exception,
    reason,
    with_fix,
)
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.errors import QcdoctorError
from qcdoctor.package_data import load_yaml
from tests.reports.test_report_language import english_left

CATALOGUE = load_yaml("qcdoctor.templates", "reasons.yaml")
CODE = ("qcdoctor", "qcdoctor.engine", "qcdoctor.collectors", "qcdoctor.collectors.reading",
        "qcdoctor.probe")


def _fields(template: str) -> list[tuple[str, str, str | None]]:
    """(name, format spec, conversion) of each field of ``template``."""
    return [(name, spec, conversion) for _, name, spec, conversion
            in string.Formatter().parse(template) if name is not None]


def _templates_in_code() -> dict[str, str]:
    """Template -> where, for every reason(...) call in the package's code."""
    found = {}
    folders = {Path(folder) for name in CODE
               for folder in importlib.util.find_spec(name).submodule_search_locations}
    for path in sorted(p for folder in folders for p in folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "reason":
                first = node.args[0] if node.args else None
                where = f"{path.parent.name}/{path.name}:{node.lineno}"
                assert isinstance(first, ast.Constant) and isinstance(first.value, str), \
                    f"{where}: reason() takes its template as written, not computed"
                found[first.value] = where
    return found


def test_every_reason_written_has_its_chinese_wording_and_every_entry_is_used():
    listed = [entry["en"] for entry in CATALOGUE]
    assert len(listed) == len(set(listed)), "a template is listed twice"
    used = _templates_in_code()
    assert len(used) > 60                              # the scan sees the readers
    missing = {t: where for t, where in used.items() if t not in listed}
    assert not missing, f"add these to templates/reasons.yaml: {missing}"
    assert not set(listed) - set(used), "entries no reader writes any more"
    for entry in CATALOGUE:
        english = {name for name, _, _ in _fields(entry["en"])}
        chinese = _fields(entry["zh"])
        assert {name for name, _, _ in chinese} == english, entry          # every value shown
        assert all(not spec and not conversion for _, spec, conversion in chinese), entry


def _sample(name: str, index: int) -> str:
    return {"columns": "mod_name, Cosine", "error": "[Errno 13] Permission denied"}.get(
        name, f"v{index}_{name}")


@pytest.mark.parametrize("entry", CATALOGUE, ids=lambda e: e["en"][:40])
def test_each_reason_is_filled_alike_in_both_languages(entry):
    values = {name: _sample(name, i) for i, (name, _, _) in enumerate(_fields(entry["en"]))}
    written = reason(entry["en"], **values)
    assert str(written) == entry["en"].format(**values)          # the English as before
    shown = {}                                 # the values as the English text holds them
    for _, name, spec, conversion in string.Formatter().parse(entry["en"]):
        if name is not None:
            value = repr(values[name]) if conversion == "r" else values[name]
            shown[name] = format(value, spec)
    assert written.zh == entry["zh"].format(**shown)


def test_joined_reasons_fixes_files_and_other_text():
    outside = reason("refused: it lies outside the case folder")
    fix = reason("copy it into the case folder, or pass --allow-outside with the folder that "
                 "holds it")
    fact = artifact_problem("../x.txt", with_fix(outside, fix), False, "case.yaml:3")
    assert fact["problem"] == f"{outside} ({fix})"
    assert fact["problem_zh"] == \
        "拒绝：它位于案例目录之外（把它复制进案例目录，或用 --allow-outside 指定它所在的文件夹）"
    # reasons of one template joined, one of them holding "; " itself: never mixed up
    rows = [reason("line {line}: value {value!r} is not a number; row skipped", line=n,
                   value=v) for n, v in ((3, "x; y"), (4, "z"))]
    both = joined([*rows, reason("{count} non-numeric value(s) in {column} were treated as "
                                 "missing", count=2, column="cosine")])
    assert str(both) == "; ".join(map(str, rows)) + \
        "; 2 non-numeric value(s) in cosine were treated as missing"
    assert both.zh == "第 3 行：值 'x; y' 不是数字；已跳过该行；第 4 行：值 'z' 不是数字；已跳过该行；" \
                      "cosine 列中有 2 个非数值，已按缺失处理"
    # a reason whose last field is followed by its fix, the fix holding parentheses
    torch = with_fix(reason("reading .pt files needs torch"),
                     reason("pip install torch==2.13.0 (CPU build is enough)"))
    assert torch.zh == "读取 .pt 文件需要 torch（pip install torch==2.13.0（CPU 版本即可））"
    read = with_fix(reason("cannot read it: {error}", error="No such file or directory"),
                    reason("check the path, relative to the case folder"))
    assert read.zh == "无法读取：No such file or directory（检查相对于案例目录的路径）"
    # an error the reader raised keeps its wording; a library's own message stays as it is
    assert of_exception(ValueError(reason("no table found"))).zh == "找不到表格"
    plain = of_exception(ValueError("magic string is not correct; expected b'\\x93NUMPY'"))
    assert plain == plain.zh == "magic string is not correct; expected b'\\x93NUMPY'"
    error = QcdoctorError(reason("no such dump file"), file="dumps/a.npy")
    assert with_fix(error.problem, error.fix).zh == "没有这个 dump 文件"
    import pickle
    sent = pickle.loads(pickle.dumps(QcdoctorError(reason("no such dump file"), file="a")))
    assert sent.problem == "no such dump file" and sent.problem.zh == "没有这个 dump 文件"
    long = artifact_problem("f", Reason("x" * 400, "字" * 400), True, "f")
    assert len(long["problem"]) == len(long["problem_zh"]) == 300


def _quant_case(tmp_path: Path) -> Path:
    with example_path("convert_quant_analysis") as source:
        shutil.copytree(source, tmp_path / "case")
    case = tmp_path / "case"
    (case / "qa_convert" / "compare_per_layer_out.txt").write_text("not a table\n",
                                                                    encoding="utf-8")
    with open(case / "case.yaml", "a", encoding="utf-8") as handle:
        handle.write("artifacts:\n  fx_graph: graph/fx_graph.txt\n")
    return case


@pytest.mark.parametrize("lang, expected", [
    ("zh", ["前 200 行里没有 psql 表头（'+---' 边框下的一行 '|'）", "graph/fx_graph.txt 无法读取：找不到文件"]),
    ("en", ["no psql table header (a '|' line under a '+---' border) in the first 200 lines",
            "graph/fx_graph.txt could not be read: file not found"]),
])
def test_reports_give_the_reasons_in_their_language(tmp_path, lang, expected):
    case = _quant_case(tmp_path)
    report = triage_case(load_case(case), lang=lang, environ={}, installed={}, cwd=case)
    problems = [f["problem"] for f in report["facts"] if f["type"] == "artifact_problem"]
    assert len(problems) == 2 and all(p.isascii() for p in problems)   # facts keep English
    text = render(report, "md")
    for phrase in expected:
        assert phrase in text
    if lang == "zh":
        assert english_left(report, text) == set()
