"""How intake talks to the user: arrow-key menus on a terminal, plain lines otherwise,
or a file of scripted answers.

Every prompter returns a ``Reply``; the flow (engine/intake/session.py) decides what it means.
On a terminal, choices are picked with the arrow keys or digits (space or a digit ticks in
multi-choice, Enter confirms; Enter with nothing ticked is "none" where that is allowed,
never the highlighted option); everywhere, ``<`` goes back, ``?`` shows help, an empty
answer keeps the default or skips, and end of input saves and stops. Choices named by
numbers (consistency levels 0-2) are listed without places and entered by their names,
typed or pressed, so a digit has one meaning on a terminal and through a pipe; ``n`` or
``none`` answers where the question offers none. A default kept with Enter is then shown
as the answer it became (``> 0.449``, not the offer ``> [0.449]``), and an answer read from
a pipe is written back once, after its prompt (``> [0.449] 0.449`` for a kept default), so
a transcript reads as a terminal's does.
What Enter keeps, and where it came from, is said under the question before Enter can keep
it. ``?`` adds what the question's own lines do not say: its help and the answers it takes. A file of scripted answers is checked whole
before the first question: an unknown key or a value its question would refuse is an
error, asked or not.
"""

from __future__ import annotations

import difflib
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from qcdoctor.collectors import limits
from qcdoctor.collectors.yaml_schema import load_plain
from qcdoctor.engine.intake.questions import (
    AnswerError,
    Question,
    all_question_keys,
    question_for_key,
)
from qcdoctor.engine.reports.termtext import display_width, terminal_width, wrap
from qcdoctor.errors import QcdoctorError, shorten


def _words(lang: str) -> dict:
    """The intake's words in the label table (loaded on first use)."""
    from qcdoctor.wording import labels
    return labels()[lang]["intake"]


@dataclass
class Reply:
    kind: str                 # answer | skip | back | stop
    text: str = ""


def default_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return str(value.get("value", value.get("status", "")))
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) if value else "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def answers_text(question: Question, lang: str) -> str:
    """What the question takes, in the user's words: the form of a typed answer."""
    kind = question.type
    if question.named_by_number:
        kind += "_named"
    if kind.startswith("multi_choice") and question.allow_none:
        kind += "_none"
    minimum = question.minimum
    if kind in ("number", "integer") and minimum is not None:
        kind += "_min"
    return _words(lang)["answers"][kind].format(
        count=len(question.choices), names=", ".join(map(str, question.choices)),
        minimum=f"{minimum:g}" if minimum is not None else "")


def help_lines(question: Question, lang: str, default, source: str,
               shown: set[str]) -> list[str]:
    """What ``?`` adds to a question: its help, the answers it takes, and what Enter keeps
    with where that came from (``source``, '' when not known). A line equal to one already
    on screen (``shown``: the prompt, the why line, the key hint) is left out."""
    w = _words(lang)
    kept = default_text(default)
    lines = [question.help_text(lang), w["help_answers"].format(answers=answers_text(question, lang))]
    if kept:
        lines.append(w["help_default"].format(value=kept, source=source) if source
                     else w["help_default_plain"].format(value=kept))
    return [line for line in lines if line and line not in shown]


def default_origin(default, source: str, lang: str) -> str:
    """The line under a question that says what Enter keeps and where it came from, shown
    before Enter can keep it: a value read from the symptom or guessed from a file is never
    accepted unseen. '' when there is no default, or its origin is not known."""
    kept = default_text(default)
    return _words(lang)["help_default"].format(value=kept, source=source) if kept and source \
        else ""


def menu_hint(question: Question, lang: str) -> str:
    """Every key that works in this menu, and only those."""
    w = _words(lang)
    multi = question.type == "multi_choice"
    if question.named_by_number:        # a digit is the choice of that name, never a place
        names = "/".join(map(str, question.choices))
        parts = [w["menu_move_plain"], w["menu_named_multi" if multi else "menu_named"].format(
            names=names)]
    else:
        parts = [w["menu_move"].format(count=len(question.choices))]
    if multi:
        parts.append(w["menu_toggle"])
        if question.allow_none:
            parts += [w["menu_none"], w["menu_enter_multi"]]
        else:
            parts.append(w["menu_enter_multi_strict"])
    else:
        if question.allow_none:
            parts.append(w["menu_none"])
        parts.append(w["menu_enter"])
    return " · ".join(parts + [w["menu_rest"]])


def choice_key(question: Question, place: int) -> str:
    """What a menu shows before its ``place``-th choice (from 1): its number in the list,
    or nothing where the choices are named by numbers (the name, in the entry's words, is
    what is typed)."""
    return "" if question.named_by_number else str(place)


class LinePrompter:
    """Plain line prompts: pipes, files, dumb terminals."""

    def __init__(self, stdin=None, stdout=None, show_hint: bool = False):
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.show_hint = show_hint            # a person types (a dumb terminal), not a pipe
        # a terminal shows what is typed; what a pipe sends is written back instead
        self.echoed = _is_terminal(self.stdin)

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def header(self, question: Question, lang: str, position: str) -> None:
        self.say(f"\n[{position}] {question.prompt(lang)}")
        self.say(f"  ({question.why[lang]})")

    def choice_lines(self, question: Question, lang: str) -> list[str]:
        lines = []
        for i, choice in enumerate(question.choices, 1):
            key = choice_key(question, i)
            lines.append(f"  {key + ')' if key else '-'} {choice_words(question, choice, lang)}")
        return lines

    def on_screen(self, question: Question, lang: str, default=None, source: str = "") -> set[str]:
        """The lines the question showed, which its help never repeats."""
        hint = {_words(lang)["hint"]} if self.show_hint else set()
        return {question.prompt(lang), question.why[lang], *hint,
                default_origin(default, source, lang)}

    def origin(self, default, source: str, lang: str) -> None:
        line = default_origin(default, source, lang)
        if line:
            self.say("  " + line)

    def help(self, question: Question, lang: str, default=None, source: str = "") -> None:
        for line in help_lines(question, lang, default, source,
                               self.on_screen(question, lang, default, source)):
            self.say("  " + line)
        if not self.show_hint:                # the keys, where the question did not list them
            self.say("  " + _words(lang)["hint"])

    def ask(self, question: Question, lang: str, default, position: str,
            source: str = "") -> Reply:
        """``source``: where the default came from, in the user's words (shown on ``?``)."""
        self.header(question, lang, position)
        for line in self.choice_lines(question, lang):
            self.say(line)
        self.origin(default, source, lang)
        if self.show_hint:
            self.say("  " + _words(lang)["hint"])
        return self.read(question, lang, default, source)

    def read(self, question: Question, lang: str, default, source: str = "") -> Reply:
        """One typed line: an answer, ``<`` back, ``?`` help, Enter the default, EOF stop."""
        shown = default_text(default)
        prompt = f"> [{shown}] " if shown else "> "
        while True:
            self.stdout.write(prompt)
            self.stdout.flush()
            try:
                line = self.stdin.readline()
            except OSError:                 # the input went away: as at its end
                line = ""
            if not line:
                return Reply("stop")
            text = line.strip()
            if not self.echoed:
                # written back once, as the answer it became: a kept default reads
                # "> [0.449] 0.449", as if typed, never a second answer line
                self.stdout.write((text or shown) + "\n")
            if text == "?":
                self.help(question, lang, default, source)
                continue
            if text == "<":
                return Reply("back")
            if not text:
                if not shown:
                    return Reply("skip")
                if self.echoed:
                    self.kept(prompt + line.rstrip("\r\n"), shown)
                return Reply("answer", shown)
            return Reply("answer", text)

    def kept(self, typed_line: str, value: str) -> None:
        """Enter kept the default: show it as the answer it became, on a line of its own
        (``typed_line``: the prompt line as the terminal shows it)."""
        self.say(f"> {value}")


class TerminalPrompter(LinePrompter):
    """A real terminal: arrow-key menus for choices, text wrapped at the terminal's width."""

    def __init__(self, stdin=None, stdout=None):
        super().__init__(stdin, stdout, show_hint=True)     # every question lists its keys

    def kept(self, typed_line: str, value: str) -> None:
        """The offer ``> [0.449]`` becomes the answer ``> 0.449`` in place: the cursor goes
        back up over the prompt line (as many rows as the terminal wrapped it into)."""
        rows = max(1, math.ceil(display_width(typed_line) / _columns(self.stdout)))
        self.stdout.write(f"\x1b[{rows}A\r\x1b[J> {value}\n")
        self.stdout.flush()

    def say(self, text: str) -> None:
        width = terminal_width() - 1
        for part in text.split("\n"):
            for line in wrap(part, width):
                self.stdout.write(line + "\n")
        self.stdout.flush()

    def ask(self, question: Question, lang: str, default, position: str,
            source: str = "") -> Reply:
        self.header(question, lang, position)
        self.origin(default, source, lang)
        if not question.choices:
            self.say("  " + _words(lang)["hint"])          # under the prompt it belongs to
            return self.read(question, lang, default, source)
        self.say("  " + menu_hint(question, lang))
        return self._menu(question, lang, default, source)

    def _menu(self, question: Question, lang: str, default, source: str = "") -> Reply:
        import termios
        import tty

        options = [str(c) for c in question.choices]
        multi = question.type == "multi_choice"
        chosen = {str(v) for v in default} if multi and isinstance(default, (list, tuple)) else set()
        shown = default_text(default)
        # with nothing to keep, a menu that offers none opens on it: Enter takes nothing unseen
        cursor = options.index(shown) if shown in options else \
            options.index("none") if question.allow_none and "none" in options else 0
        fd = self.stdin.fileno()
        saved = termios.tcgetattr(fd)
        drawn = 0
        pending = b""

        def above(text: str) -> int:
            """A message above the menu, which is then drawn again below it."""
            if drawn:
                self.stdout.write(f"\x1b[{drawn}A\x1b[J")
            self.say(text)
            return 0

        try:
            tty.setcbreak(fd)                   # keys one by one; Ctrl-C still interrupts
            while True:
                if drawn:
                    self.stdout.write(f"\x1b[{drawn}A\x1b[J")
                for line in self._options(question, lang, options, chosen, cursor, multi):
                    self.stdout.write(line + "\n")
                drawn = len(options)
                self.stdout.flush()
                if not pending:
                    pending = os.read(fd, 64)
                    if not pending:             # the terminal went away
                        return Reply("stop")
                key, pending = _next_key(pending)
                if key in (b"\x1b[A", b"\x1bOA", b"k"):
                    cursor = (cursor - 1) % len(options)
                elif key in (b"\x1b[B", b"\x1bOB", b"j"):
                    cursor = (cursor + 1) % len(options)
                elif key == b" " and multi:
                    chosen ^= {options[cursor]}
                elif key in (b"\r", b"\n"):
                    if not multi:
                        return Reply("answer", options[cursor])
                    picked = [o for o in options if o in chosen]
                    if picked:
                        return Reply("answer", ", ".join(picked))
                    if question.allow_none:     # nothing ticked means none, never the cursor
                        return Reply("answer", "none")
                    drawn = above("  " + _words(lang)["tick_first"])
                elif key in (b"\x1b[D", b"\x1bOD", b"<", b"b"):
                    return Reply("back")
                elif key == b"s":
                    return Reply("skip")
                elif key == b"n" and question.allow_none:
                    return Reply("answer", "none")
                elif key == b"?":
                    shown = {question.prompt(lang), question.why[lang], menu_hint(question, lang),
                             default_origin(default, source, lang)}
                    drawn = above("\n".join("  " + line for line in help_lines(
                        question, lang, default, source, shown)))
                elif key == b"\x04":
                    return Reply("stop")
                elif key.isascii() and key.isdigit():
                    place = _digit_place(question, options, key.decode())
                    if place is None:           # no choice of that number: say which are
                        drawn = above("  " + _words(lang)["no_such_choice"].format(
                            key=key.decode(), names=", ".join(
                                options if question.named_by_number else
                                (str(i) for i in range(1, len(options) + 1)))))
                        continue
                    cursor = place
                    if multi:                   # a digit ticks in a multi-choice menu
                        chosen ^= {options[cursor]}
        finally:
            termios.tcsetattr(fd, termios.TCSADRAIN, saved)

    def _options(self, question, lang, options, chosen, cursor, multi) -> list[str]:
        """One line per option, cut to the terminal's width so redrawing stays exact."""
        width = terminal_width() - 1
        lines = []
        for i, option in enumerate(options):
            mark = ("[x] " if option in chosen else "[ ] ") if multi else ""
            pointer = "›" if i == cursor else " "
            place = choice_key(question, i + 1)
            line = f"  {pointer} {place + '. ' if place else ''}{mark}" \
                   f"{choice_words(question, question.choices[i], lang)}"
            lines.append(line if display_width(line) <= width else wrap(line, width)[0])
        return lines


def choice_words(question: Question, choice: str, lang: str) -> str:
    """A menu entry as words: the choice's note (what it means), after the choice when that is
    a name the user knows (J6P), else its words in the report language; an internal id is
    never shown (it is still accepted as an answer, as is the number)."""
    from qcdoctor.wording import id_words
    note = question.choice_note(choice, lang)
    if not note:
        return id_words(choice, lang)
    # a name users know (a chip) stays beside its note; an internal id gives way to it
    name = str(choice)
    return note if "_" in name or name in note else f"{name} - {note}"


def _is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):       # no such method, or a closed file
        return False


def _columns(stream) -> int:
    """The columns of the terminal ``stream`` writes to (the real count, unclamped: it
    decides how many rows a line wrapped into)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, ValueError, OSError):
        return shutil.get_terminal_size((80, 24)).columns or 80


def _digit_place(question: Question, options: list[str], digit: str) -> int | None:
    """The menu place a digit key picks: the choice named so where choices are named by
    numbers, else the choice at that place (from 1); None when there is none."""
    if question.named_by_number:
        return options.index(digit) if digit in options else None
    return int(digit) - 1 if 1 <= int(digit) <= len(options) else None


def _next_key(data: bytes) -> tuple[bytes, bytes]:
    """Split one key off what the terminal sent: an escape sequence or one byte."""
    if data[:2] in (b"\x1b[", b"\x1bO") and len(data) >= 3:
        return data[:3], data[3:]
    return data[:1], data[1:]


class ScriptedPrompter:
    """Answers from a YAML file, keyed by question (case.yaml key, e.g. platform.chip)."""

    def __init__(self, path: Path, stdout=None, folder: Path | None = None, stderr=None):
        self.path = Path(path)
        self.stdout = stdout or sys.stdout
        self.stderr = stderr or sys.stderr
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
        for key, value in self.answers.items():
            self._check(key, value, folder)

    def _check(self, key: str, value, folder: Path | None) -> None:
        """An unknown key or a value its question refuses: an error before anything is
        asked, whether or not the question would come up."""
        question = question_for_key(key)
        if question is None:
            keys = [k for k in all_question_keys() if "{" not in k]
            close = difflib.get_close_matches(key, keys, n=1)
            raise QcdoctorError("unknown question key", file=str(self.path), key=key,
                                fix=(f"did you mean '{close[0]}'? " if close else "") +
                                "keys are the case.yaml keys the questions write: " +
                                ", ".join(keys) + ", analyses_run.FOLDER")
        text = value if isinstance(value, str) else default_text(value)
        try:
            question.parse(text, "en")
        except AnswerError as exc:
            raise QcdoctorError(f"{shorten(text, 80)!r} is not accepted: {exc}",
                                file=str(self.path), key=key,
                                fix=_allowed(question) or "see docs/intake.md") from None
        if question.type == "path" and folder is not None and not (Path(folder) / text).is_file():
            raise QcdoctorError(f"{text} is not a file in the case folder {folder}",
                                file=str(self.path), key=key,
                                fix="give the path relative to the case folder")

    def say(self, text: str) -> None:
        self.stdout.write(text + "\n")

    def warn(self, text: str) -> None:
        """A warning on standard error, apart from the transcript on standard output."""
        self.stderr.write(f"qcdoctor: warning: {text}\n")
        self.stderr.flush()

    def ask(self, question: Question, lang: str, default, position: str,
            source: str = "") -> Reply:
        if question.key not in self.answers or question.key in self.used:
            return Reply("skip")
        self.used.add(question.key)
        value = self.answers[question.key]
        return Reply("answer", default_text(value) if not isinstance(value, str) else value)

    def unused(self) -> list[str]:
        return sorted(set(self.answers) - self.used)


def _allowed(question: Question) -> str:
    """The allowed values of a question with choices, for an error's fix line."""
    if not question.choices:
        return ""
    extra = ", none" if question.allow_none else ""
    return "allowed values: " + ", ".join(map(str, question.choices)) + extra
