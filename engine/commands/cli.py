"""The qcdoctor command line. Exit codes: 0 ran, 1 findings at/above --fail-on, 2 bad input.

Each command is a module of this folder declaring its options (``ABOUT``, ``declare``) and
its ``run``; ``COMMANDS`` lists them in the order --help shows them. Start-up stays light:
heavy modules (pandas, torch, durable_rules) load only in the command that needs them.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys

from qcdoctor import __version__
from qcdoctor.engine.commands import (
    audit,
    collect,
    compare,
    completion,
    diff,
    examples,
    intake,
    pack,
    probe,
    rules,
    schema,
    triage,
)
from qcdoctor.errors import EXIT_ERROR, EXIT_OK, QcdoctorError

# command -> its module, in the order --help lists them
COMMANDS = {"triage": triage, "intake": intake, "audit": audit, "compare": compare,
            "diff": diff, "pack": pack, "examples": examples, "schema": schema,
            "completion": completion, "probe": probe, "collect": collect, "rules": rules}


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors quote what was typed: shown through the one sanitiser
    (an argument holding ESC would otherwise act on the terminal), with a did-you-mean for a
    mistyped command, choice or option, and reported by the command that was typed (its
    usage, not the top level's). Sub-commands' parsers are of the same class."""

    def error(self, message: str):
        from qcdoctor.safe_text import visible
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {visible(message, lines=False)}\n")

    def _check_value(self, action, value):
        if action.choices is not None and value not in action.choices:
            from qcdoctor.engine.commands.options import did_you_mean
            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from "
                                                 f"{choices}){did_you_mean(value, action.choices)}")
        super()._check_value(action, value)

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            from qcdoctor.engine.commands.options import did_you_mean
            typed = _typed_parser(self, parsed)
            known = [o for a in typed._actions for o in a.option_strings]
            hints = "".join(did_you_mean(e.partition("=")[0], known)
                            for e in extras if e.startswith("-"))
            typed.error(f"unrecognized arguments: {' '.join(extras)}{hints}")
        return parsed


def _typed_parser(parser: argparse.ArgumentParser, parsed) -> argparse.ArgumentParser:
    """The innermost sub-command's parser of what was typed (``rules explain`` in
    ``qcdoctor rules explain ...``), else ``parser``."""
    while True:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(parsed, action.dest, None) or "")
        if chosen is None:
            return parser
        parser = chosen


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line. With ``argv`` naming a command, only that command is declared
    (all of them take a twentieth of a short run); with other ``argv``, the commands
    without their options (for --help and the errors); without ``argv``, or for a command
    that reads the whole command line (completion), everything."""
    p = _Parser(
        prog="qcdoctor",
        description="Diagnose J6 training-to-deployment consistency problems: which stage "
                    "broke, what to run next, which fix applies, what to keep for support.")
    p.add_argument("--version", action="version", version=f"qcdoctor {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    chosen = COMMANDS.get(argv[0]) if argv else None
    every = chosen is None or getattr(chosen, "NEEDS_EVERY_COMMAND", False)
    for name, command in COMMANDS.items():
        if every or command is chosen:
            declared = sub.add_parser(name, **command.ABOUT)
            if argv is None or command is chosen or (every and chosen is not None):
                command.declare(declared)
    return p


def main(argv: list[str] | None = None) -> int:
    _tolerant_streams()
    if argv is None:
        argv = sys.argv[1:]
    if argv and argv[0] in COMMANDS:      # a command's shorthand (rules ST050)
        argv = [argv[0], *getattr(COMMANDS[argv[0]], "shorthand", list)(argv[1:])]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    try:
        return COMMANDS[args.command].run(args, parser)
    except QcdoctorError as exc:
        print(f"qcdoctor: error: {exc.render()}", file=sys.stderr)     # render: sanitised
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("qcdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a bug: say so briefly, keep the trace on demand
        if os.environ.get("QCDOCTOR_DEBUG"):
            raise
        from qcdoctor.errors import shorten
        from qcdoctor.safe_text import visible
        print(f"qcdoctor: internal error: {type(exc).__name__}: {visible(shorten(exc))}\n"
              "  please report it with the case; QCDOCTOR_DEBUG=1 shows the traceback",
              file=sys.stderr)
        return EXIT_ERROR


def entry(argv: list[str] | None = None) -> None:
    """The ``qcdoctor`` command: ``main``, then leave without tearing down every loaded
    module one by one (a noticeable share of a short run); output is flushed and the
    exit handlers (which stop the engine worker) run first. SIGTERM and SIGHUP stop it as
    Ctrl-C does, every temporary folder removed (``termination``)."""
    from qcdoctor.engine.matching import termination
    termination.install()
    try:
        code = main(argv)
        termination.finishing()
    except termination.Terminated as exc:
        termination.finishing()
        print(f"qcdoctor: stopped by {exc.name}", file=sys.stderr)
        code = exc.code
    except SystemExit as exc:       # argparse's usage errors, --help and --version
        code = exc.code
        if isinstance(code, str):
            print(code, file=sys.stderr)
            code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):   # a closed pipe: nothing more can be said
        pass
    atexit._run_exitfuncs()
    os._exit(code or 0)


# error handlers that never fail, whatever the text and the encoding
_NEVER_FAILING = ("backslashreplace", "replace", "xmlcharrefreplace", "namereplace", "ignore")


def _tolerant_streams() -> None:
    """Text that cannot be encoded (lone surrogates from undecodable file names, a report's
    arrows or Chinese under an ASCII locale such as ``PYTHONUTF8=0 LC_ALL=POSIX``) is
    printed as backslash escapes: output never fails on what it says. A UTF-8 stream
    keeps its handler unless it is strict (only lone surrogates can fail there, and
    ``printable`` escapes those first)."""
    import codecs
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        errors = getattr(stream, "errors", None)
        if reconfigure is None or errors in _NEVER_FAILING:
            continue
        try:
            utf = codecs.lookup(getattr(stream, "encoding", None) or "ascii").name.startswith("utf")
        except LookupError:
            utf = False
        if errors == "strict" or not utf:       # surrogateescape fails on a ✓ in ASCII
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):       # a closed or detached stream
                pass
