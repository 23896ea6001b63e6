"""Limits instead of hangs: each oversized input is refused fast, naming the file and limit."""

from __future__ import annotations

import io
import re
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from qcdoctor.collectors import limits
from qcdoctor.collectors.case_file import parse_case
from qcdoctor.engine.commands.cli import main
from qcdoctor.errors import QcdoctorError
from tests.paths import REPO

HEAD = "schema: qcdoctor/case-v1\n"
LAUGHS = HEAD + "title: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"l{i}: &l{i} [{', '.join([f'*{p}' for p in ['a' if i == 0 else f'l{i - 1}'] * 9])}]\n"
    for i in range(9))


def _cli(*args: str) -> tuple[int, str]:
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        code = main(list(args))
    return code, err.getvalue()


def _refused(text: str) -> QcdoctorError:
    start = time.perf_counter()
    with pytest.raises(QcdoctorError) as caught:
        parse_case(text, Path("case.yaml"), None)
    assert time.perf_counter() - start < 2, "a limit must stop the work, not follow it"
    assert caught.value.file == "case.yaml" and caught.value.fix
    return caught.value


@pytest.mark.parametrize("text,line,words", [
    (HEAD + "evidence: [" + ", ".join(["dataset_eval"] * (limits.LIST_ITEMS + 1)) + "]\n", 2,
     f"more than {limits.LIST_ITEMS:,} items"),
    (HEAD + "consistency_levels_tried:\n" + "- 1\n" * 50_000, 3 + limits.LIST_ITEMS,
     f"limit: {limits.LIST_ITEMS:,} per list"),
    (HEAD + "title: " + "[" * 10_000 + "]" * 10_000 + "\n", 2,
     f"more than {limits.YAML_DEPTH} levels deep"),
    (HEAD + "title: " + "x" * (limits.TEXT_CHARS + 1) + "\n", 2,
     f"limit: {limits.TEXT_CHARS:,} per value"),
    (HEAD + 'title: "bad \\ud800 text"\n', 2, "lone surrogate"),
    (HEAD + "title: a\x1fb\n", 2, "U+001F is not allowed"),
    (LAUGHS, None, f"more than {limits.YAML_NODES:,} values, aliases expanded"),
    (HEAD + "symptom: |\n" + "  line\n" * 300_000, None,
     f"larger than the {limits.size_text(limits.CASE_FILE_BYTES)} limit"),
])
def test_case_file_limits(text, line, words):
    err = _refused(text)
    assert words in err.render()
    if line is not None:
        assert err.line == line, err.render()


def test_billion_laughs_is_refused_before_it_expands():
    # the same document, aliases used once each, is an ordinary (schema) error
    assert "billion" not in LAUGHS
    err = _refused(LAUGHS)
    assert "anchors and aliases" in err.fix


def test_huge_case_file_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "case.yaml"
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(HEAD + "consistency_levels_tried: [")
        handle.write("1, " * 20_000_000)            # 60 MB
        handle.write("1]\n")
    start = time.perf_counter()
    code, err = _cli("triage", str(path), "--format", "json")
    assert time.perf_counter() - start < 2
    assert code == 2 and str(path) in err and "1 MiB limit" in err and "internal" not in err


def test_answers_file_limits(tmp_path):
    answers = tmp_path / "answers.yaml"
    answers.write_text(LAUGHS.replace(HEAD, "platform.chip: J6E\n"), encoding="utf-8")
    start = time.perf_counter()
    code, err = _cli("intake", str(tmp_path / "case"), "--answers", str(answers))
    assert time.perf_counter() - start < 5
    assert code == 2 and str(answers) in err and "aliases expanded" in err
    answers.write_text("platform.chip: " + "[" * 5000 + "\n", encoding="utf-8")
    code, err = _cli("intake", str(tmp_path / "case"), "--answers", str(answers))
    assert code == 2 and f"{limits.YAML_DEPTH} levels" in err and "RecursionError" not in err


def test_compile_config_limits_become_a_problem_not_a_hang(tmp_path):
    from qcdoctor.collectors.hb_compile_yaml import read_hb_compile
    config = tmp_path / "config.yaml"
    config.write_text(LAUGHS.replace(HEAD, "input_parameters: {input_type_rt: *l8}\n"
                                     .replace("*l8", "x")), encoding="utf-8")
    with pytest.raises(QcdoctorError, match="aliases expanded"):
        read_hb_compile(config)
    config.write_text("compiler_parameters: {core_num: '²'}\nmodel_parameters: [1]\n",
                      encoding="utf-8")
    read = read_hb_compile(config)
    assert (read["march"], read["core_num"], read["inputs"]) == (None, None, [])


def test_every_limit_is_documented_in_the_case_file_guide():
    guide = (REPO / "docs" / "case-file.md").read_text(encoding="utf-8")
    table = guide[guide.index("## Input limits"):]
    names = [n for n in dir(limits) if n.isupper()]
    assert len(names) >= 7
    for name in names:
        value = getattr(limits, name)
        shown = limits.size_text(value)
        row = next((r for r in table.splitlines() if f"`{name}`" in r), None)
        assert row is not None, f"{name} is missing from the limits table"
        assert re.search(rf"\b{re.escape(shown)}\b", row), f"{name}: docs/case-file.md does not say {shown}"


def _script(tmp_path, text: str):
    from qcdoctor.collectors.deploy_script import read_script
    path = tmp_path / "compile_model.py"
    path.write_text(text, encoding="utf-8")
    start = time.perf_counter()
    try:
        return read_script(path)
    finally:
        assert time.perf_counter() - start < 5


def test_compile_script_limits(tmp_path):
    from qcdoctor.collectors.deploy_script import UNKNOWN
    # each function calls the next twice: 2**40 calls if all were followed
    chain = "".join(f"def f{i}():\n    f{i + 1}()\n    f{i + 1}()\n" for i in range(40))
    calls = _script(tmp_path, "import hbdk4.compiler as hc\n" + chain +
                    "def f40():\n    hc.convert(m, 'nash-e')\nf0()\n")
    assert 0 < len(calls) <= limits.SCRIPT_FOLLOWED_CALLS
    calls = _script(tmp_path, "from hbdk4.compiler import convert\nMEAN = [0.0] * 10**12\n"
                    "BIG = [1.0] * 10000000000\nx = 3\n" + "x = x * x\n" * 60 +
                    "n.insert_image_preprocess('yuvbt601full2rgb', 255, BIG, x)\n")
    assert calls[0].args["mean"] is UNKNOWN and calls[0].args["std"] is UNKNOWN
    with pytest.raises(QcdoctorError, match="too deeply") as caught:
        _script(tmp_path, "x = a" + "+a" * 100_000 + "\n")
    assert caught.value.file.endswith("compile_model.py")
    with pytest.raises(QcdoctorError, match="too deeply|not valid Python"):
        _script(tmp_path, "x = " + "-" * 100_000 + "1\n")


def test_undecodable_folder_names_never_break_the_output(tmp_path):
    import os
    import subprocess
    import sys
    folder = os.path.join(os.fsencode(tmp_path), b"case_\xff")
    os.mkdir(folder)
    with open(os.path.join(folder, b"case.yaml"), "w", encoding="utf-8") as handle:
        handle.write(HEAD + "title: demo\n")
    out = tmp_path / "report.md"
    for extra in ([], ["-o", str(out)]):
        done = subprocess.run([sys.executable, "-m", "qcdoctor", "triage", folder, *extra],
                              capture_output=True, timeout=120,
                              env={**os.environ, "PYTHONIOENCODING": "utf-8"})
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
        shown = done.stdout if not extra else out.read_bytes()
        assert b"case_\\udcff" in shown                 # escaped, not a crash


def test_a_plain_yaml_integer_past_the_digit_limit_is_refused_with_its_line():
    """Past Python's 4,300 digits int() refuses with advice meant for programmers
    (probe_run.yaml, answers files and configs are read as plain YAML)."""
    from qcdoctor.collectors.yaml_schema import load_plain
    with pytest.raises(QcdoctorError) as refused:
        load_plain("origin: probe\nlayers: " + "7" * 5000 + "\n", "probe_run.yaml")
    assert refused.value.line == 2
    assert f"a number of 5,000 digits (limit: {limits.NUMBER_DIGITS} digits)" in \
        refused.value.render()
    assert load_plain("layers: " + "7" * limits.NUMBER_DIGITS + "\n", "x")["layers"] > 0
