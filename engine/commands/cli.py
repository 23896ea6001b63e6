"""The qcdoctor command line. Exit codes: 0 ran, 1 findings at/above --fail-on, 2 bad input.

Start-up stays light: heavy modules (pandas, torch, durable_rules) load only in the
command that needs them.
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from qcdoctor import __version__
from qcdoctor.errors import EXIT_ERROR, EXIT_FINDINGS, EXIT_OK, QcdoctorError

FAIL_ON = ("info", "warning", "error", "never")
# per-case report formats, and jsonl: one JSON report a line for a batch
REPORT_FORMATS = ("md", "html", "json", "sarif", "junit", "jsonl")
_FORMAT_HELP = ("md (Markdown), html (one self-contained file with plots), json, sarif or "
                "junit (for CI), jsonl (a batch: one JSON report a line); by default a "
                "terminal gets a coloured view and anything else Markdown")
_NO_ENV_HELP = ("ignore this machine (installed Horizon packages, board variables, a board "
                "file in the working directory): for a case folder received from someone else")


class _Parser(argparse.ArgumentParser):
    """argparse, whose usage errors quote what was typed: shown through the one sanitiser
    (an argument holding ESC would otherwise act on the terminal). Sub-commands' parsers
    are of the same class."""

    def error(self, message: str):
        from qcdoctor.safe_text import visible
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {visible(message, lines=False)}\n")


def _parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The command line. With ``argv`` naming a command, only that command is declared
    (all of them take a twentieth of a short run); with other ``argv``, the commands
    without their options (for --help and the errors); without ``argv``, everything
    (shell completion reads it all)."""
    p = _Parser(
        prog="qcdoctor",
        description="Diagnose J6 training-to-deployment consistency problems: which stage "
                    "broke, what to run next, which fix applies, what to keep for support.")
    p.add_argument("--version", action="version", version=f"qcdoctor {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    chosen = argv[0] if argv and argv[0] in _DECLARATIONS else None
    for name, (settings, options) in _DECLARATIONS.items():
        if chosen in (None, name):
            command = sub.add_parser(name, **settings)
            if argv is None or name == chosen:
                options(command)
    return p


# what triage and audit say differently about the options they share
_CASE_COMMAND_WORDS = {
    "triage": {"example": "diagnose", "output": "report", "lang": "report language (default: "
               "the case's, else zh)", "fail_on": "", "pickles": ".pt files that need full "
               "unpickling (can run code: only for files you trust)"},
    "audit": {"example": "audit", "output": "audit", "lang": None,
              "fail_on": " (a failed checklist item counts as error)",
              "pickles": ".pt dumps that need full unpickling"},
}


def _case_command_options(command: argparse.ArgumentParser, name: str) -> None:
    """The options of triage and audit: one case, a batch or a bundled example, rendered."""
    words = _CASE_COMMAND_WORDS[name]
    _complete(command.add_argument("case", nargs="*", help="case folder (with case.yaml), a "
                                   "case.yaml or a support bundle; several make a batch"), _FILES)
    command.add_argument("--example", metavar="NAME", help=f"{words['example']} a bundled "
                         "example case (as --no-env: this machine is not read)")
    command.add_argument("--format", choices=REPORT_FORMATS, help=_FORMAT_HELP)
    command.add_argument("-o", "--output", metavar="FILE", help=f"write the {words['output']} "
                         "here (atomically); a folder with several cases")
    _batch_options(command)
    _color(command)
    command.add_argument("--lang", choices=("zh", "en"), help=words["lang"])
    command.add_argument("--fail-on", choices=FAIL_ON, default="never",
                         help="exit 1 when an item at or above this severity is reported"
                              + words["fail_on"])
    command.add_argument("--trust-pickles", action="store_true",
                         help=f"allow {words['pickles']}")
    command.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(command)


def _triage_options(t: argparse.ArgumentParser) -> None:
    _case_command_options(t, "triage")


def _intake_options(i: argparse.ArgumentParser) -> None:
    _complete(i.add_argument("case", nargs="?", default=".", help="case folder (default: here)"),
              _FOLDERS)
    i.add_argument("--lang", choices=("zh", "en"),
                   help="question language (default: the case's, else the locale's: "
                        "LC_ALL / LC_MESSAGES / LANG, zh when they name no language)")
    i.add_argument("--answers", metavar="FILE",
                   help="answers by question key (e.g. platform.chip: J6E), for scripted use")
    _allow_outside(i)


def _audit_options(a: argparse.ArgumentParser) -> None:
    _case_command_options(a, "audit")


def _compare_options(cmp: argparse.ArgumentParser) -> None:
    cmp.add_argument("left", help="dump file or folder (.npy, .pt, .bin)")
    cmp.add_argument("right", help="the reference dump file or folder")
    cmp.add_argument("--decimals", type=int, default=4,
                     help="values differing beyond this many decimals count as mismatched")
    cmp.add_argument("--dtype", default=None,
                     help="dtype of raw .bin files without a sidecar (default float32)")
    cmp.add_argument("--format", choices=("md", "json"), default="md")
    cmp.add_argument("--trust-pickles", action="store_true")


def _diff_options(d: argparse.ArgumentParser) -> None:
    _complete(d.add_argument("old", help="the report before: a JSON report, a case folder or "
                                         "a bundle"), _FILES)
    _complete(d.add_argument("new", help="the report after: a JSON report, a case folder or "
                                         "a bundle"), _FILES)
    from qcdoctor.engine.reports.changes import DIFF_FORMATS
    d.add_argument("--format", choices=DIFF_FORMATS, default="md")
    d.add_argument("-o", "--output", metavar="FILE", help="write the diff here (atomically)")
    d.add_argument("--lang", choices=("zh", "en"), help="default: the new report's")
    d.add_argument("--fail-on", choices=("regression", "never"), default="never",
                   help="exit 1 when something got worse")
    d.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling")
    d.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(d)


def _pack_options(pk: argparse.ArgumentParser) -> None:
    _complete(pk.add_argument("case", help="case folder (with case.yaml) or a case.yaml"),
              _FOLDERS)
    pk.add_argument("-o", "--output", metavar="BUNDLE", required=True,
                    help="the .tar.gz to write (never over an existing file)")
    pk.add_argument("--max-file-size", metavar="SIZE", type=_size, default="200M",
                    help="larger files are listed in the manifest as left out (default 200M)")
    pk.add_argument("--lang", choices=("zh", "en"), help="report language (default: the case's)")
    pk.add_argument("--trust-pickles", action="store_true",
                    help="allow .pt files that need full unpickling")
    pk.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)


def _examples_options(ex: argparse.ArgumentParser) -> None:
    ex.add_argument("--copy", nargs=2, metavar=("NAME", "DIR"),
                    help="copy the example NAME into DIR (new or empty) to start a case from")


def _schema_options(sc: argparse.ArgumentParser) -> None:
    sc.add_argument("which", choices=("case", "report"))


def _completion_options(co: argparse.ArgumentParser) -> None:
    co.add_argument("shell", choices=("bash", "zsh"))


def _probe_options(pr: argparse.ArgumentParser) -> None:
    pr.add_argument("--baseline", required=True, metavar="MOD:ATTR",
                    help="the reference model, or a function returning it")
    pr.add_argument("--analysis", required=True, metavar="MOD:ATTR",
                    help="the model to check (fake-quantized), or a function returning it")
    pr.add_argument("--inputs", required=True, metavar="FILE.pt",
                    help="torch.save'd tensor, tuple/list of arguments or dict of keyword "
                         "arguments (loaded with weights_only=True)")
    pr.add_argument("--out", required=True, metavar="DIR",
                    help="new or empty folder (an earlier probe output there is replaced)")
    pr.add_argument("--type", default="fake_quant",
                    choices=("fake_quant", "pre_export", "export", "convert"),
                    help="analysis_model_type: which two stages the models are")
    pr.add_argument("--metric", default="L1", choices=("L1", "MSE", "KL", "ATOL", "Cosine", "SQNR"),
                    help="metric of the sensitivity tables")
    pr.add_argument("--no-sensitivity", action="store_true",
                    help="skip the sensitivity pass (one forward per quantizer)")
    pr.add_argument("--names", metavar="A,B", help="names of the model outputs, comma-separated")
    pr.add_argument("--device", help="run both models there, e.g. cuda:0 (default: where they are)")
    pr.add_argument("--lang", choices=("zh", "en"), help="language of the summary "
                                                        "(default: from the locale)")


def _collect_options(c: argparse.ArgumentParser) -> None:
    c.add_argument("case")
    c.add_argument("--format", choices=("md", "json"), default="md")
    c.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling")
    c.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(c)


def _rules_options(r: argparse.ArgumentParser) -> None:
    rsub = r.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    rl = rsub.add_parser("list", help="one line per rule")
    rl.add_argument("--format", choices=("md", "json"), default="md")
    rl.add_argument("--lang", choices=("zh", "en"), default="en")
    rd = rsub.add_parser("docs", help="all rules as one Markdown document")
    rd.add_argument("--lang", choices=("zh", "en"), default="en")
    rd.add_argument("-o", "--output", metavar="FILE", help="write the document here")
    re_ = rsub.add_parser("explain", help="everything about one rule")
    re_.add_argument("rule_id")
    re_.add_argument("--lang", choices=("zh", "en"), default="en")


# command -> (its help, the function declaring its options), in the order --help lists them
_DECLARATIONS = {
    "triage": (dict(help="diagnose a case folder and print the conclusion report"),
               _triage_options),
    "intake": (dict(help="guided questions that build CASE/case.yaml"), _intake_options),
    "audit": (dict(help="the deployment checklist of a case, item by item"), _audit_options),
    "compare": (dict(help="compare two tensor dumps (files or folders of outputs)"),
                _compare_options),
    "diff": (dict(help="what changed between two reports of a case (before / after a fix), "
                       "with a one-line verdict"), _diff_options),
    "pack": (dict(help="a support bundle: report, case.yaml, the files read and the artifacts "
                       "to keep, with a manifest"), _pack_options),
    "examples": (dict(help="list the bundled example cases, or copy one"), _examples_options),
    "schema": (dict(help="the JSON Schema of case.yaml (case-v1) or of the JSON report "
                         "(report-v1)"), _schema_options),
    "completion": (dict(help="print the shell completion script"), _completion_options),
    "probe": (dict(help="measure layer metrics of two torch models and write them as "
                        "QuantAnalysis files (imports and runs your model code)",
                   description="Compare every layer output of two torch models on one input "
                               "and write compare_per_layer_out.{csv,txt}, "
                               "output_*_sensitive_ops.{txt,pt} and probe_run.yaml in the "
                               "profiler's formats. MOD:ATTR imports MOD (run from its folder "
                               "or set PYTHONPATH): that runs your code, as pytest runs test "
                               "files. Needs torch."), _probe_options),
    "collect": (dict(help="print the facts gathered for a case"), _collect_options),
    "rules": (dict(help="list the rules or explain one"), _rules_options),
}


def _batch_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("-r", "--recursive", action="store_true",
                         help="also triage every case folder below the folders given")
    command.add_argument("-j", "--jobs", type=int, metavar="N",
                         help="cases at a time in a batch, each in a worker process "
                              "(default: one per core; 1 runs in this process)")


# what shell completion offers for a path argument (read by shtab, which is imported only
# by the completion command): these are its own completion functions
_FILES = {"bash": "_shtab_compgen_files", "zsh": "_files"}
_FOLDERS = {"bash": "_shtab_compgen_dirs", "zsh": "_files -/"}


def _complete(action: argparse.Action, paths: dict) -> argparse.Action:
    action.complete = paths
    return action


def _size(text: str) -> int:
    from qcdoctor.engine.commands.pack import parse_size
    return parse_size(text)


def _color(command: argparse.ArgumentParser) -> None:
    command.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                         help="the terminal view's colours: auto (on a terminal, unless NO_COLOR "
                              "is set; FORCE_COLOR forces them), always (also through a pipe), "
                              "never")


def _allow_outside(command: argparse.ArgumentParser) -> None:
    command.add_argument("--allow-outside", metavar="PATH", action="append", default=[],
                         help="also read artifacts in this folder outside the case folder "
                              "(repeatable; by default nothing outside the case is read)")


def _case_files(folder: Path | None, args):
    from qcdoctor.collectors.files import CaseFiles
    return CaseFiles(folder, tuple(Path(p) for p in args.allow_outside))


def main(argv: list[str] | None = None) -> int:
    _tolerant_streams()
    if argv is None:
        argv = sys.argv[1:]
    parser = _parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    from qcdoctor.errors import QcdoctorError
    try:
        return _COMMANDS[args.command](args, parser)
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


def _diagnose_and_emit(args, audit: bool) -> int:
    """triage and audit: a case folder or a bundled example, rendered, then --fail-on."""
    from qcdoctor.engine.commands.batch_command import is_batch, run_batch_command
    if is_batch(args):
        return run_batch_command(args)
    args.case = args.case[0] if args.case else None
    from qcdoctor.engine.commands.background import read_early
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.errors import QcdoctorError

    if bool(args.case) == bool(args.example):
        raise QcdoctorError("give either a case folder or --example NAME",
                            fix=f"qcdoctor {args.command} CASE_FOLDER, or qcdoctor examples "
                                "to list the examples")
    # an example is someone else's case, like a folder received from a user: this machine
    # (its packages, board variables and files, settings above the install) is not read
    use_env = not (args.no_env or args.example)
    with _opened_case(args) as (where, display_path):
        # the case is read in a child while the engine and report code load here
        reading = read_early(where, tuple(Path(p) for p in args.allow_outside),
                             trust_pickles=args.trust_pickles, progress=Progress(),
                             use_env=use_env)
        from qcdoctor.engine.matching import derived  # noqa: F401 - the worker's preload: imported once, for both
        from qcdoctor.engine.matching.runner import bundled_runner
        bundled_runner().warm()     # the engine worker compiles the rules meanwhile
        from qcdoctor.engine.diagnosis.diagnose import fails_on
        from qcdoctor.engine.diagnosis.triage import triage_case
        from qcdoctor.engine.reports.formats import render_output
        case, files, collected, thresholds = reading.result()
        report = triage_case(case, lang=args.lang, full_checklist=audit, case_files=files,
                             display_path=display_path, collected=collected,
                             thresholds_resolved=thresholds, use_env=use_env)
    # never over case.yaml, the bundle, nor any file this run read (script, tables, ...)
    protected = [] if args.example else [Path(args.case), case.file, *sorted(files.read)]
    terminal = _terminal_colors(args) if args.format is None and args.output is None else None
    if terminal is not None:
        import shutil

        from qcdoctor.engine.reports.terminal import render_terminal
        text = render_terminal(report, audit=audit, color=terminal,
                               width=shutil.get_terminal_size().columns)
    else:
        text = render_output(report, args.format or "md", audit=audit)
    from qcdoctor.engine.commands.output_file import emit
    emit(text, args.output, protected)
    if fails_on(report, args.fail_on):
        return EXIT_FINDINGS
    return EXIT_OK


@contextmanager
def _opened_case(args):
    """(path to load, name shown in the report): a bundled example, a support bundle
    (extracted for the time of the run) or the case given."""
    from qcdoctor.collectors.bundle import is_bundle
    if args.example:
        from qcdoctor.engine.commands.examples import example_path
        with example_path(args.example) as path:
            yield path, f"example:{args.example}"
    elif is_bundle(Path(args.case)):
        from qcdoctor.collectors.bundle import opened_bundle
        with opened_bundle(Path(args.case)) as path:
            try:
                yield path, args.case
            except QcdoctorError as exc:     # named as the bundle's member, not a temp file
                raise exc.inside_bundle(path, args.case) from None
    else:
        yield args.case, None


def _terminal_colors(args) -> bool | None:
    """With no --format: None for plain Markdown (stdout is no terminal: scripts read it),
    else whether the terminal view has colours. --color always/never beats NO_COLOR and
    FORCE_COLOR; FORCE_COLOR also colours a pipe; NO_COLOR beats FORCE_COLOR."""
    no_color = bool(os.environ.get("NO_COLOR"))
    force = os.environ.get("FORCE_COLOR", "") not in ("", "0")
    if args.color == "always" or (args.color == "auto" and force and not no_color):
        return True
    if not sys.stdout.isatty():
        return None
    return args.color == "auto" and not no_color


def _cmd_triage(args, parser) -> int:
    return _diagnose_and_emit(args, audit=False)


def _cmd_intake(args, parser) -> int:
    import shlex

    from qcdoctor.collectors.case_file import CASE_FILE
    from qcdoctor.engine.intake.prompts import LinePrompter, ScriptedPrompter, TerminalPrompter
    from qcdoctor.engine.intake.session import Intake
    from qcdoctor.engine.reports.locale_language import locale_language
    from qcdoctor.errors import QcdoctorError
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
    elif sys.stdin.isatty() and sys.stdout.isatty() and \
            os.environ.get("TERM", "dumb") not in ("dumb", "unknown", ""):
        prompter, strict = TerminalPrompter(), False
    else:                                       # a pipe, or a terminal without cursor control
        prompter, strict = LinePrompter(show_hint=sys.stdin.isatty()), False
    lang = args.lang
    if lang is None:
        existing = folder / CASE_FILE
        lang = locale_language()
        if existing.is_file():
            from qcdoctor.collectors.case_file import load_case
            lang = load_case(existing, tuple(Path(p) for p in args.allow_outside)).get(
                "language", lang)
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


def _cmd_audit(args, parser) -> int:
    return _diagnose_and_emit(args, audit=True)


def _cmd_compare(args, parser) -> int:
    import json

    from qcdoctor.collectors.dumps import compare_paths
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.errors import QcdoctorError
    if not 0 <= args.decimals <= 12:
        raise QcdoctorError("--decimals takes 0 to 12", fix="e.g. --decimals 4")
    results = compare_paths(Path(args.left), Path(args.right), args.decimals, args.dtype,
                            args.trust_pickles, Progress())
    if args.format == "json":
        from qcdoctor.engine.matching.jsonfmt import without_nonfinite
        print(json.dumps([without_nonfinite(r) for r in results], indent=2, default=str,
                         allow_nan=False))
        return EXIT_OK
    print(f"| output | cosine | L1 | max abs | rel | mismatch@{args.decimals} | identical |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        if "missing" in r:
            print(f"| {r['output']} | missing on the {r['missing']} side | | | | | |")
        elif r["shape_mismatch"] and r["cosine"] is None:
            print(f"| {r['output']} | shapes {r['shape_left']} vs {r['shape_right']} | | | | | no |")
        else:
            print(f"| {r['output']} | {r['cosine']:.6f} | {r['l1']:.6g} | {r['max_abs']:.6g} | "
                  f"{r['rel']:.3g} | {r['mismatch_ratio']:.4%} | {'yes' if r['identical'] else 'no'} |")
    return EXIT_OK


def _cmd_diff(args, parser) -> int:
    from qcdoctor.engine.commands.diff import run_diff_command
    return run_diff_command(args)


def _cmd_pack(args, parser) -> int:
    from qcdoctor.engine.commands.pack import run_pack_command
    return run_pack_command(args)


def _cmd_schema(args, parser) -> int:
    from qcdoctor.engine.reports.json_schemas import render_schema
    sys.stdout.write(render_schema(args.which))
    return EXIT_OK


def _cmd_completion(args, parser) -> int:
    import shtab
    sys.stdout.write(shtab.complete(_parser(), shell=args.shell))   # every command's options
    return EXIT_OK


def _cmd_probe(args, parser) -> int:
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.engine.reports.locale_language import locale_language
    from qcdoctor.text import render as fill
    from qcdoctor.wording import labels
    try:
        from qcdoctor.probe import compare_models
        from qcdoctor.probe.loading import load_inputs, load_model
    except ImportError as exc:
        from qcdoctor.errors import QcdoctorError
        raise QcdoctorError(f"qcdoctor probe needs torch ({exc})",
                            fix="pip install torch==2.13.0 (the CPU build is enough)") from None
    baseline = load_model(args.baseline, "--baseline")
    analysis = load_model(args.analysis, "--analysis")
    inputs = load_inputs(Path(args.inputs))
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    result = compare_models(baseline, analysis, inputs, Path(args.out),
                            sensitivity=not args.no_sensitivity, metric=args.metric,
                            names=names, analysis_model_type=args.type, device=args.device,
                            progress=Progress())
    lang = args.lang or locale_language()
    P = labels()[lang]["probe"]
    lines = [fill(P["done"], {"rows": len(result.rows), "out": args.out,
                              "files": len(result.files)}, lang)]
    for side, unmatched in (("baseline", result.baseline_only), ("analysis", result.analysis_only)):
        if unmatched:
            lines.append(fill(P["unmatched"], {"count": len(unmatched), "side": P[side],
                                               "names": ", ".join(unmatched[:8])}, lang))
    for output, rows in result.sensitivity.items():
        if rows:
            lines.append(fill(P["sensitivity"], {"output": output, "metric": args.metric,
                                                 "top": rows[0][0], "value": rows[0][3]}, lang))
    lines.append(fill(P["next"], {"out": args.out}, lang))
    print("\n".join(lines))
    return EXIT_OK


def _cmd_examples(args, parser) -> int:
    from qcdoctor.engine.commands.examples import copy_example, example_names, example_title
    if args.copy:
        copy_example(*args.copy)
        return EXIT_OK
    names = example_names()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name.ljust(width)}  {example_title(name)}")
    return EXIT_OK


def _cmd_collect(args, parser) -> int:
    import json

    from qcdoctor.collectors.case_facts import collect_facts
    from qcdoctor.collectors.case_file import load_case

    case = load_case(args.case, tuple(Path(p) for p in args.allow_outside))
    facts = collect_facts(case, trust_pickles=args.trust_pickles, use_env=not args.no_env,
                          files=_case_files(case.folder, args))
    from qcdoctor.safe_text import json_text, visible
    if args.format == "json":
        print(json_text(json.dumps(facts, ensure_ascii=False, indent=2)))
        return EXIT_OK
    for fact in facts:
        fields = ", ".join(f"{k}={v}" for k, v in fact.items()
                           if k not in ("type", "source", "locations"))
        print(visible(f"{fact['type']}: {fields}  [{fact.get('source', '')}]", lines=False))
    return EXIT_OK


def _cmd_rules(args, parser) -> int:
    from qcdoctor.engine.reports.rule_docs import explain_rule, list_rules, rule_docs
    if args.rules_command == "explain":
        sys.stdout.write(explain_rule(args.rule_id, args.lang))
    elif args.rules_command == "docs":
        from qcdoctor.engine.commands.output_file import emit
        emit(rule_docs(args.lang), args.output, [])
    elif args.rules_command == "list":
        sys.stdout.write(list_rules(args.format, args.lang))
    else:
        parser.parse_args(["rules", "--help"])
    return EXIT_OK


_COMMANDS = {"triage": _cmd_triage, "intake": _cmd_intake, "audit": _cmd_audit,
             "compare": _cmd_compare, "diff": _cmd_diff, "pack": _cmd_pack,
             "schema": _cmd_schema, "completion": _cmd_completion, "probe": _cmd_probe,
             "examples": _cmd_examples, "collect": _cmd_collect, "rules": _cmd_rules}
