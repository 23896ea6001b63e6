"""The qcdoctor command line. Exit codes: 0 ran, 1 findings at/above --fail-on, 2 bad input.

Each command is a module of this folder declaring its options (``ABOUT``, ``declare``) and
its ``run``; ``COMMANDS`` lists them in the order --help shows them. Start-up stays light:
heavy modules (pandas, torch, durable_rules) load only in the command that needs them.
"""

from __future__ import annotations

import argparse
import atexit
import errno
import io
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
from qcdoctor.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, QcdoctorError
from qcdoctor.safe_text import JSON_ESCAPES, json_escapes

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
            from qcdoctor.suggest import did_you_mean
            choices = ", ".join(map(repr, action.choices))
            raise argparse.ArgumentError(action, f"invalid choice: {value!r} (choose from "
                                                 f"{choices}){did_you_mean(value, action.choices)}")
        super()._check_value(action, value)

    def parse_args(self, args=None, namespace=None):
        parsed, extras = self.parse_known_args(args, namespace)
        if extras:
            from qcdoctor.suggest import did_you_mean
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
    printed = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _CheckedOutput.around(sys.stdout), _Unfailing.around(sys.stderr)
    try:
        return _run(argv)
    finally:
        sys.stdout, sys.stderr = printed


def _run(argv: list[str] | None) -> int:
    """The command of ``argv`` run to the end, its output flushed: an exit code whatever
    happens but argparse's own exits (--help, --version, a usage error)."""
    if argv is None:
        argv = sys.argv[1:]
    try:
        if argv and argv[0] in COMMANDS:      # a command's shorthand (rules ST050)
            argv = [argv[0], *getattr(COMMANDS[argv[0]], "shorthand", list)(argv[1:])]
        parser = build_parser(argv)
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            sys.stdout.flush()
            return EXIT_ERROR
        code = COMMANDS[args.command].run(args, parser)
        sys.stdout.flush()          # a report the system refused in part is no success
        return code
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
    _standard_descriptors()
    from qcdoctor.engine.matching import termination
    termination.install()
    try:
        code = main(argv)
        termination.finishing()
    except termination.Terminated as exc:
        termination.finishing()
        _say(f"qcdoctor: stopped by {exc.name}")
        code = exc.code
    except SystemExit as exc:       # argparse's usage errors, --help and --version
        code = exc.code
        if isinstance(code, str):
            _say(code)
            code = 1
    code = _flushed(code or 0)
    atexit._run_exitfuncs()
    os._exit(code)


def _flushed(code: int) -> int:
    """``code`` once stdout and stderr are flushed; EXIT_ERROR, said, when what a run that
    succeeded printed (--help, --version) could not all be written."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:         # the reader left: as a shell, stop quietly
        pass
    except OSError as exc:
        if code in (EXIT_OK, EXIT_FINDINGS):    # else its error was said already
            _say(f"qcdoctor: error: {_standard_output_failed(exc).render()}")
            code = EXIT_ERROR
    except ValueError:              # closed by the program itself: nothing was lost here
        pass
    try:
        sys.stderr.flush()
    except (OSError, ValueError):   # nothing more can be said
        pass
    return code


def _say(text: str) -> None:
    """``text`` on stderr, if it can still be shown there."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _standard_descriptors() -> None:
    """A standard descriptor the shell closed (``>&-``, ``2>&-``) is held by /dev/null:
    else the next file opened (a report's temporary file, a case file) would take its
    number, and what is printed would go into that file. A closed stdout then refuses
    every write (read-only: standard output is closed), a closed stderr drops them."""
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_RDONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        held = os.open(os.devnull, flags)       # the lowest free number: ``fd`` itself
        if held != fd:
            os.dup2(held, fd, inheritable=False)
            os.close(held)
        if fd == 1:
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        elif fd == 2:
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace",
                              closefd=False)


class _StandIn:
    """A stream standing in for sys.stdout or sys.stderr while a command runs; all but its
    writes and flushes is the stream's own."""

    def __init__(self, stream):
        self._stream = stream

    @classmethod
    def around(cls, stream):
        return stream if stream is None or isinstance(stream, cls) else cls(stream)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


class _CheckedOutput(_StandIn):
    """sys.stdout: a write or flush the system refuses (a full disk, a file-size limit, a
    closed descriptor) is one clear error naming standard output, never a report cut
    short that ends with exit 0."""

    def __init__(self, stream):
        super().__init__(stream)
        # unbuffered (python -u, PYTHONUNBUFFERED): the text layer writes straight to the
        # file and drops what a short write (the file-size limit reached) left over
        buffer = getattr(stream, "buffer", None)
        self._raw = buffer if isinstance(buffer, io.RawIOBase) else None

    def write(self, text: str) -> int:
        try:
            if self._raw is None:
                return self._stream.write(text)
            self._write_whole(text.encode(self._stream.encoding, self._stream.errors))
            return len(text)
        except BrokenPipeError:
            raise                           # the reader left: as a shell, stop quietly
        except OSError as exc:
            raise _standard_output_failed(exc) from None

    def _write_whole(self, data: bytes) -> None:
        """``data`` written to the unbuffered file, a short write followed by the next
        (which fails with the reason, if the system refuses the rest)."""
        left = memoryview(data)
        while left:
            written = self._raw.write(left)
            if written is None:                 # a non-blocking descriptor that is full
                raise BlockingIOError(errno.EAGAIN, os.strerror(errno.EAGAIN))
            left = left[written:]

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _standard_output_failed(exc) from None


def _standard_output_failed(exc: OSError) -> QcdoctorError:
    from qcdoctor.engine.commands.output_file import standard_output_failed
    return standard_output_failed(exc)


class _Unfailing(_StandIn):
    """sys.stderr: a message that cannot be shown (stderr closed, or on a full disk) is
    dropped, never an error of its own; the exit code still tells."""

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except (OSError, ValueError):
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except (OSError, ValueError):
            pass


# error handlers that never fail, whatever the text and the encoding
_NEVER_FAILING = ("backslashreplace", "replace", "xmlcharrefreplace", "namereplace", "ignore",
                  JSON_ESCAPES)


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
                # stdout carries JSON (--format json, jsonl, sarif): its escapes are JSON's
                reconfigure(errors=json_escapes() if stream is sys.stdout
                            else "backslashreplace")
            except (ValueError, OSError):       # a closed or detached stream
                pass


