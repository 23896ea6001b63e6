"""Shell completion really completes: the generated bash and zsh scripts loaded into an
interactive shell on a pseudo-terminal, a Tab pressed after partial words."""

from __future__ import annotations

import shutil

import pexpect

from qcdoctor.engine.commands.cli import main
from tests.conftest import missing_in_ci

KILL_LINE = "\x15"


def _script(capsys, shell: str) -> str:
    assert main(["completion", shell]) == 0
    return capsys.readouterr().out


def _shell(tmp_path, program: str, arguments: list[str], setup: str) -> pexpect.spawn:
    if shutil.which(program) is None:
        missing_in_ci(f"no {program} found (apt-get install {program}; .ci/run installs it "
                      "for CI)")
    child = pexpect.spawn(program, arguments, env={"PATH": "/usr/bin:/bin", "TERM": "dumb",
                                                   "HOME": str(tmp_path)},
                          encoding="utf-8", timeout=15, dimensions=(40, 200), cwd=str(tmp_path))
    child.sendline(setup + "; echo READY-$((6 * 7))")
    child.expect_exact("READY-42")             # the setup ran (its echo shows 6 * 7)
    return child


def _completes(child: pexpect.spawn, typed: str, expected: str) -> None:
    child.send(KILL_LINE + typed + "\t")
    child.expect_exact(expected)
    child.send(KILL_LINE)


def _cases(child: pexpect.spawn) -> None:
    _completes(child, "qcdoctor tri", "triage")                    # a command
    _completes(child, "qcdoctor triage --form", "--format")        # one of its options
    _completes(child, "qcdoctor triage --format sa", "sarif")      # a value of that option
    _completes(child, "qcdoctor audit --fail", "--fail-on")
    _completes(child, "qcdoctor rules exp", "explain")             # a nested command


def test_bash_completes_commands_options_and_values(tmp_path, capsys):
    (tmp_path / "qcdoctor.bash").write_text(_script(capsys, "bash"), encoding="utf-8")
    child = _shell(tmp_path, "bash", ["--norc", "--noprofile", "-i"],
                   "PS1='$ '; source qcdoctor.bash")
    try:
        _cases(child)
    finally:
        child.close(force=True)


def test_zsh_completes_commands_options_and_values(tmp_path, capsys):
    (tmp_path / "functions").mkdir()
    text = _script(capsys, "zsh")
    assert text.startswith("#compdef qcdoctor")
    (tmp_path / "functions" / "_qcdoctor").write_text(text, encoding="utf-8")
    child = _shell(tmp_path, "zsh", ["-f", "-i"],
                   "PS1='%% '; fpath=(functions $fpath); autoload -Uz compinit; compinit -u -D")
    try:
        _cases(child)
    finally:
        child.close(force=True)
