"""Values from a hostile case never become code in the ready-to-paste snippets.

Each snippet is rendered with benign values and with hostile ones (quotes, line breaks
of every kind, an encoding cookie) in every place a case value can reach; both are
parsed with ``ast``, and the hostile one may hold no call or import the benign one
lacks, while every hostile value survives as the literal it was.
"""

from __future__ import annotations

import ast
import itertools
import re
from importlib import resources

import pytest

from qcdoctor.engine.diagnosis.snippets import comment, identifier, python_literal, render_snippet
from qcdoctor.engine.diagnosis.triage import case_context
from qcdoctor.fact_types import STAGES
from tests.conftest import case_from

HOSTILE = [
    "\"); import os; os.system('id'); (\"",
    "x\"]; import os; os.system(\"id\"); y = [\"",
    "a'\nimport os\nos.system('id')\n'",
    "a\r\nos.system('id')  # ",
    "a\rimport os",
    "a\u2028os.system('id')\u2029\x85\x0c\x0b\x1c",
    "x coding: utf-7 +AAo-import os+AAo-os.system(+ACI-id+ACI-)",
    "x coding=latin-1 \\",
    "'''\"\"\"\\",
    "```\n</code><script>alert(1)</script>",
    "{{ 7 * 7 }}{% raw %}",
]
_COOKIE = re.compile(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _names() -> list[str]:
    folder = resources.files("qcdoctor.templates") / "snippets"
    return sorted(p.name[:-len(".py.j2")] for p in folder.iterdir()
                  if p.name.endswith(".py.j2") and not p.name.startswith("_"))


def _variants(name: str):
    """Every branch a template has: flags for all, stages and levels where they matter."""
    stages = (("qat_export", "qat_bc", "quantized_bc", "hbm_x86", "calib", "board")
              if name == "evaluate_stage" else ("quantized_bc",))
    levels = (0, 1) if name == "consistency_level" else (0,)
    for flags in itertools.product((False, True), (False, True), ("available", "none")):
        for stage, level in itertools.product(stages, levels):
            yield flags, stage, level


def _render(name: str, value: str, flags, stage: str, level: int, lang: str = "en") -> str:
    differs, task, badcase = flags
    context = {"march": value, "input_format_differs": differs, "has_task_input": task,
               "badcase": badcase, "out_dirs": {"convert": value}}
    action = {"analysis_model_type": "convert", "baseline": "qat_bc", "analysis": "quantized_bc",
              "out_dir": value, "stage_to_evaluate": stage, "level": level, "layer": value,
              "ops": f"{value},{value}x", "limit": "130925.09"}
    return render_snippet(name, action, context, lang=lang)


def _shape(code: str) -> tuple[set[str], set[str]]:
    tree = ast.parse(code)
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    imports = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return calls, imports


def _strings(code: str) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(code))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("lang", ("en", "zh"))      # zh: values inside translated comments
@pytest.mark.parametrize("name", _names())
def test_hostile_values_stay_literals(name, lang):
    checked = 0
    for flags, stage, level in _variants(name):
        benign = _render(name, "head.conv", flags, stage, level, lang)
        calls, imports = _shape(benign)
        for value in HOSTILE:
            code = _render(name, value, flags, stage, level, lang)
            got_calls, got_imports = _shape(code)
            assert got_calls <= calls, (value, got_calls - calls)
            assert got_imports == imports, value
            # saved as a file, the first lines choose no encoding
            assert not any(_COOKIE.match(line) for line in code.splitlines()[:2]), code
            assert _shape(code.encode("utf-8").decode("utf-8")) == (got_calls, got_imports)
            compile(code.encode("utf-8"), "<snippet>", "exec")
            if "head.conv" in benign or "./head.conv" in _strings(benign):
                assert value in _strings(code) or f"./{value}" in _strings(code), value
            checked += 1
    assert checked


def test_a_hostile_out_dir_from_the_case_file_stays_a_string():
    out_dir = "\"); import os; os.system('id'); (\""
    case = case_from({"analyses_run": [{"type": "convert", "baseline": "qat_bc",
                                        "analysis": "quantized_bc", "out_dir": out_dir}]})
    context = case_context(case, [])
    code = render_snippet("convert_analysis", {"analysis_model_type": "convert"}, context)
    calls, _ = _shape(code)
    assert "os.system" not in calls
    keywords = [k.value.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Call)
                for k in n.keywords if k.arg == "out_dir"]
    # run 1 in the user's folder, the sensitivity run in one of its own beside it
    assert keywords == [f"./{out_dir}", f"./{out_dir}_sens"]


def test_literals_keep_the_quotes_of_the_code():
    assert python_literal("nash-e") == '"nash-e"'
    assert python_literal("it's") == '"it\'s"'
    assert python_literal('say "x"') == "'say \"x\"'"
    assert python_literal(130925.09) == "130925"
    assert python_literal(2) == "2" and python_literal(None) == "None"
    assert eval(python_literal("a coding: utf-7")) == "a coding: utf-7"     # noqa: S307
    with pytest.raises(ValueError):
        python_literal(float("inf"))


def test_code_is_only_identifiers_and_comments():
    assert identifier("qat_pt") == "qat_pt"
    for bad in ("qat pt", "x;import os", "class", "a.b"):
        with pytest.raises(ValueError):
            identifier(bad)
    assert "\n" not in comment("a\nb") and "\u2028" not in comment("a\u2028b")
    assert not _COOKIE.match("# " + comment("x coding: utf-7"))


@pytest.mark.parametrize("stage", STAGES)
def test_every_stage_gives_code_that_parses(stage):
    code = render_snippet("evaluate_stage", {"stage_to_evaluate": stage}, {"march": "nash-e"})
    ast.parse(code)
