"""How intake talks to the user: arrow-key menus on a terminal, plain lines otherwise,
or a file of scripted answers.

Every prompter returns a ``Reply``; the flow (engine/intake.py) decides what it means.
On a terminal, choices are picked with the arrow keys (space toggles in multi-choice,
Enter confirms); everywhere, ``<`` goes back, ``?`` shows help, an empty answer keeps
the default or skips, and end of input saves and stops.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.yaml_schema import load_plain

from .errors import QcdoctorError
from .questions import Question

HINT = {"zh": "回车：保留默认/跳过 · <：上一题 · ?：说明 · Ctrl-D：保存并结束",
        "en": "Enter: keep default / skip · <: back · ?: help · Ctrl-D: save and stop"}
MENU_HINT = {"zh": "↑↓ 选择 · 空格 勾选（多选）· 回车 确认 · s 跳过 · ← 或 < 上一题 · ? 说明",
             "en": "↑↓ move · space toggle (multi) · Enter confirm · s skip · ← or < back · ? help"}


@dataclass
class Reply:
    kind: str                 # answer | skip | back | stop
    text: str = ""


def _default_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return str(value.get("value", value.get("status", "")))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


class LinePrompter:
    """Plain line prompts: pipes, files, dumb terminals."""

    def __init__(self, stdin=None, stdout=None):
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def header(self, question: Question, lang: str, position: str) -> None:
        self.say(f"\n[{position}] {question.prompt(lang)}")
        self.say(f"  ({question.why[lang]})")
        if question.choices:
            self.say("  " + "  ".join(f"{i}) {c}" for i, c in enumerate(question.choices, 1)))

    def ask(self, question: Question, lang: str, default, position: str) -> Reply:
        self.header(question, lang, position)
        shown = _default_text(default)
        while True:
            self.stdout.write(f"> [{shown}] " if shown else "> ")
            self.stdout.flush()
            line = self.stdin.readline()
            if not line:
                return Reply("stop")
            text = line.strip()
            if text == "?":
                self.say("  " + (question.help.get(lang) or question.why[lang]) + "\n  " + HINT[lang])
                continue
            if text == "<":
                return Reply("back")
            if not text:
                return Reply("answer", shown) if shown else Reply("skip")
            return Reply("answer", text)


class TerminalPrompter(LinePrompter):
    """A real terminal: arrow-key menus for choices, line editing for the rest."""

    def ask(self, question: Question, lang: str, default, position: str) -> Reply:
        if not question.choices:
            self.say(f"  {HINT[lang]}")
            return super().ask(question, lang, default, position)
        self.say(f"\n[{position}] {question.prompt(lang)}")
        self.say(f"  ({question.why[lang]})")
        self.say(f"  {MENU_HINT[lang]}")
        return self._menu(question, lang, default)

    def _menu(self, question: Question, lang: str, default) -> Reply:
        import termios
        import tty

        options = [str(c) for c in question.choices]
        multi = question.type == "multi_choice"
        chosen = set()
        if isinstance(default, (list, tuple)):
            chosen = {str(v) for v in default}
        cursor = options.index(str(_default_text(default))) if _default_text(default) in options else 0
        fd = self.stdin.fileno()
        saved = termios.tcgetattr(fd)
        drawn = 0
        pending = b""
        try:
            tty.setcbreak(fd)                   # keys one by one; Ctrl-C still interrupts
            while True:
                if drawn:
                    self.stdout.write(f"\x1b[{drawn}A\x1b[J")
                for i, option in enumerate(options):
                    mark = ("[x] " if option in chosen else "[ ] ") if multi else ""
                    pointer = "›" if i == cursor else " "
                    self.stdout.write(f"  {pointer} {mark}{option}\n")
                drawn = len(options)
                self.stdout.flush()
                if not pending:
                    pending = os.read(fd, 32)
                key, pending = _next_key(pending)
                if key in (b"\x1b[A", b"k"):
                    cursor = (cursor - 1) % len(options)
                elif key in (b"\x1b[B", b"j"):
                    cursor = (cursor + 1) % len(options)
                elif key == b" " and multi:
                    chosen ^= {options[cursor]}
                elif key in (b"\r", b"\n"):
                    if multi:
                        picked = [o for o in options if o in chosen] or [options[cursor]]
                        return Reply("answer", ", ".join(picked))
                    return Reply("answer", options[cursor])
                elif key in (b"\x1b[D", b"<", b"b"):
                    return Reply("back")
                elif key == b"s":
                    return Reply("skip")
                elif key == b"n" and multi and question.allow_none:
                    return Reply("answer", "none")
                elif key == b"?":
                    self.stdout.write(f"\x1b[{drawn}A\x1b[J")
                    self.say("  " + (question.help.get(lang) or question.why[lang]))
                    drawn = 0
                elif key == b"\x04":
                    return Reply("stop")
                elif key.isascii() and key.isdigit() and 1 <= int(key) <= len(options):
                    cursor = int(key) - 1
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _next_key(data: bytes) -> tuple[bytes, bytes]:
    """Split one key off what the terminal sent: an escape sequence or one byte."""
    if data.startswith(b"\x1b[") and len(data) >= 3:
        return data[:3], data[3:]
    return data[:1], data[1:]


class ScriptedPrompter:
    """Answers from a YAML file, keyed by question (case.yaml key, e.g. platform.chip)."""

    def __init__(self, path: Path, stdout=None):
        self.path = Path(path)
        self.stdout = stdout or sys.stdout
        try:
            size = self.path.stat().st_size
            if size > limits.CASE_FILE_BYTES:
                raise QcdoctorError(f"{size:,} bytes: larger than the "
                                    f"{limits.size_text(limits.CASE_FILE_BYTES)} limit for an "
                                    "answers file", file=str(path),
                                    fix="keep one line per question key")
            text = self.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise QcdoctorError(f"cannot read the answers file: {exc.strerror}", file=str(path)) from None
        except UnicodeDecodeError as exc:
            line = self.path.read_bytes()[:exc.start].count(b"\n") + 1
            raise QcdoctorError(f"not UTF-8 text (byte {exc.start})", file=str(path), line=line,
                                fix="save the answers file as UTF-8") from None
        data = load_plain(text, str(path)) or {}
        if not isinstance(data, dict):
            raise QcdoctorError("the answers file holds a mapping of question keys to answers",
                                file=str(path), fix="e.g. platform.chip: J6E")
        self.answers = {str(k): v for k, v in data.items()}
        self.used: set[str] = set()

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")

    def ask(self, question: Question, lang: str, default, position: str) -> Reply:
        if question.key not in self.answers or question.key in self.used:
            return Reply("skip")
        self.used.add(question.key)
        value = self.answers[question.key]
        return Reply("answer", _default_text(value) if not isinstance(value, str) else value)

    def unused(self) -> list[str]:
        return sorted(set(self.answers) - self.used)
