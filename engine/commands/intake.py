"""``qcdoctor intake CASE``: the guided questions that write CASE/case.yaml, asked on a
terminal, through a pipe, or answered from a file."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from qcdoctor.engine.commands.options import FOLDERS, allow_outside_option, complete
from qcdoctor.errors import EXIT_OK, QcdoctorError

ABOUT = dict(help="guided questions that build CASE/case.yaml")


def declare(command) -> None:
    complete(command.add_argument("case", nargs="?", default=".",
                                  help="case folder (default: here)"), FOLDERS)
    command.add_argument("--lang", choices=("zh", "en"),
                         help="question language (default: the case's, else the locale's; see "
                              "docs/reports.md, Language)")
    command.add_argument("--answers", metavar="FILE",
                         help="answers by question key (e.g. platform.chip: J6E), for scripted "
                              "use")
    allow_outside_option(command)


def run(args, parser) -> int:
    import shlex

    from qcdoctor.collectors.case_file import CASE_FILE
    from qcdoctor.engine.intake.prompts import LinePrompter, ScriptedPrompter, TerminalPrompter
    from qcdoctor.engine.intake.session import Intake
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.wording import labels

    folder = Path(args.case)
    if folder.is_file():
        if folder.name != CASE_FILE:            # never run beside someone's other file
            raise QcdoctorError(f"not a case folder nor a {CASE_FILE}", file=str(folder),
                                fix=f"give the case folder; intake writes FOLDER/{CASE_FILE}")
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise QcdoctorError("not a folder", file=str(folder), fix="give the case folder")
    if args.answers:
        prompter, strict = ScriptedPrompter(Path(args.answers), folder=folder), True
    elif not _readable(sys.stdin):
        raise QcdoctorError("no answers to read: standard input is closed or not readable",
                            fix="run it in a terminal, pipe the answers in, or give them with "
                                "--answers FILE")
    elif sys.stdin.isatty() and sys.stdout.isatty() and \
            os.environ.get("TERM", "dumb") not in ("dumb", "unknown", ""):
        prompter, strict = TerminalPrompter(), False
    else:                                       # a pipe, or a terminal without cursor control
        prompter, strict = LinePrompter(show_hint=sys.stdin.isatty()), False
    # the case is read for its language only when --lang does not say it
    lang = chosen_language(args.lang, None if args.lang else _case_language(folder, args))
    intake = Intake(folder, prompter, lang=lang, strict=strict,
                    allow_outside=tuple(Path(p) for p in args.allow_outside))
    try:
        intake.run()
    except KeyboardInterrupt:
        words = labels()[lang]["intake"]
        message = words["interrupted" if intake.doc.path.exists() else "interrupted_empty"]
        print("\nqcdoctor: " + message.format(path=intake.doc.path, case=shlex.quote(str(folder)),
                                              lang=lang), file=sys.stderr)
        return 130
    return EXIT_OK


def _readable(stream) -> bool:
    """Whether answers can be read from ``stream``: not when descriptor 0 was closed (no
    stream at all) or is open for writing only (``0>/dev/full``)."""
    if stream is None:
        return False
    try:
        fd = stream.fileno()
    except (OSError, ValueError):       # an in-memory stream (the Python API, tests)
        return stream.readable()
    try:
        import fcntl
    except ImportError:                 # no fcntl (Windows): a failed read says it later
        return True
    try:
        mode = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE
    except OSError:
        return False
    return mode in (os.O_RDONLY, os.O_RDWR)


def _case_language(folder: Path, args) -> str | None:
    """The language of the case.yaml already in ``folder`` (a resumed session), if any."""
    from qcdoctor.collectors.case_file import CASE_FILE, load_case
    existing = folder / CASE_FILE
    if not existing.is_file():
        return None
    return load_case(existing, tuple(Path(p) for p in args.allow_outside)).get("language")
