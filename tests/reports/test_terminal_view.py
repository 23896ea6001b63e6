"""The terminal view: rich on a terminal, plain Markdown for anything else (scripts read it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pexpect
import pytest

from qcdoctor.collectors.case_file import load_case
from qcdoctor.engine.commands.cli import main
from qcdoctor.engine.commands.examples import example_path
from qcdoctor.engine.diagnosis.triage import triage_case
from qcdoctor.engine.reports.formats import render
from qcdoctor.engine.reports.terminal import render_terminal

ANSI = re.compile(r"\x1b\[[0-9;]*m")
COLUMNS = 90


def _report(name: str, lang: str = "en", audit: bool = False) -> dict:
    with example_path(name) as path:
        return triage_case(load_case(path), lang=lang, environ={}, installed={}, cwd=path,
                           display_path=f"example:{name}", full_checklist=audit)


def _on_a_terminal(*args: str, env: dict | None = None) -> str:
    """What `qcdoctor ARGS` prints on a 90-column terminal."""
    environ = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    environ.update(env or {}, COLUMNS=str(COLUMNS), LINES="40", TERM="xterm")
    child = pexpect.spawn(sys.executable, ["-c", "import sys; from qcdoctor.engine.commands.cli import "
                                           "main; sys.exit(main(sys.argv[1:]))", *args],
                          env=environ, dimensions=(40, COLUMNS), encoding="utf-8", timeout=120)
    out = child.read()
    child.close()
    assert child.exitstatus == 0, out
    return out.replace("\r\n", "\n")


def test_a_terminal_gets_the_coloured_view_fitted_to_its_width():
    out = _on_a_terminal("triage", "--example", "board_nv12_deploy", "--lang", "en")
    assert ANSI.search(out)                                    # coloured
    plain = ANSI.sub("", out)
    assert "╭" in plain and "|---|" not in plain and "<br>" not in plain
    assert max(len(line) for line in plain.splitlines()) <= COLUMNS
    # the failed checklist item is written out, never told by colour alone, and comes first
    rows = [line for line in plain.splitlines() if " FAIL " in line or " pass " in line]
    assert " FAIL " in rows[0]


@pytest.mark.parametrize("args,env", [(["--color", "never"], {}), ([], {"NO_COLOR": "1"}),
                                      ([], {"NO_COLOR": "1", "FORCE_COLOR": "1"})])
def test_no_colour_keeps_the_terminal_layout(args, env):
    out = _on_a_terminal("audit", "--example", "board_nv12_deploy", "--lang", "zh", *args, env=env)
    assert not ANSI.search(out) and "╭" in out and "失败" in out


def test_format_md_on_a_terminal_is_todays_markdown():
    out = _on_a_terminal("triage", "--example", "convert_j6p", "--lang", "en", "--format", "md")
    assert out == render(_report("convert_j6p"), "md")


def test_a_pipe_gets_plain_markdown_unless_colour_is_forced(capsys):
    assert main(["triage", "--example", "convert_j6p", "--lang", "en"]) == 0   # not a terminal
    assert capsys.readouterr().out == render(_report("convert_j6p"), "md")
    code = ("import sys; from qcdoctor.engine.commands.cli import main; "
            "sys.exit(main(['triage', '--example', 'convert_j6p', '--lang', 'en']))")
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    for extra, colour in (({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "0"}, False)):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**env, **extra}).stdout
        assert bool(ANSI.search(out)) == colour and (out.startswith("# ") != colour)
    assert main(["triage", "--example", "convert_j6p", "--lang", "en", "--color", "always"]) == 0
    assert ANSI.search(capsys.readouterr().out)


def test_case_text_is_shown_as_typed_never_as_markup_or_escapes():
    report = _report("convert_quant_analysis")
    report["case"]["title"] = "[bold red]x[/] \x1b[31mred\x07 \u202egnp.exe"
    report["conclusion"]["evidence"][0]["text"] = "see `[link=http://evil.example]y[/link]`"
    out = render_terminal(report, color=True, width=120)
    plain = ANSI.sub("", out)
    assert "[bold red]x[/]" in plain and "[link=http://evil.example]y[/link]" in plain
    assert "\x1b]8;" not in out                               # no hyperlink escape
    assert "\x07" not in out and "\u202e" not in out and "\ufffd[31mred\ufffd" in plain


_FRAME = re.compile(r"[\s│╭╮╰╯─┃┏┓┗┛━┡┩╇┳┻╋┼├┤┬┴└┘┌┐]+")


def _flat(text: str) -> str:
    """The characters shown, without spaces, line breaks and frames."""
    return _FRAME.sub("", text)


@pytest.mark.parametrize("width", [60, 80, 100, 120])
@pytest.mark.parametrize("name", ["convert_j6e_no_retrain", "board_nv12_deploy"])
def test_every_character_of_a_chinese_message_survives_wrapping(name, width):
    """Wrapped at any width, each message keeps every character, in order (rich cut a
    line one cell too wide with an ellipsis: '在 prepare 前设 …' lost its 置)."""
    report = _report(name, lang="zh")
    shown = _flat(render_terminal(report, color=False, width=width))
    assert "…" not in shown.replace("...", "")
    messages = [e["text"] for e in report["conclusion"]["evidence"] if not e.get("overridden")]
    messages += [a["text"] for a in report["next_actions"]]
    messages += [p["text"] for p in report["pitfalls"]]
    for text in messages:
        assert _flat(text).replace("`", "") in shown.replace("`", ""), text[:40]


def test_the_smallest_action_is_not_listed_again_with_the_others():
    report = _report("convert_j6e_no_retrain", lang="zh")
    shown = _flat(render_terminal(report, color=False, width=100))
    first = _flat(report["next_actions"][0]["text"])
    second = _flat(report["next_actions"][1]["text"])
    # once as the smallest action, once more at most where the strategy is explained
    assert shown.count(first) <= 2 and shown.count(second) == 1
    assert "2." + second[:10] in shown and "1." + first[:10] not in shown
