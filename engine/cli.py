"""The qcdoctor command line. Exit codes: 0 ran, 1 findings at/above --fail-on, 2 bad input.

Start-up stays light: heavy modules (pandas, torch, durable_rules) load only in the
command that needs them.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from qcdoctor import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FAIL_ON = ("info", "warning", "error", "never")
_FORMAT_HELP = ("md (Markdown), html (one self-contained file with plots) or json; by default "
                "a terminal gets a coloured view and anything else Markdown")
_NO_ENV_HELP = ("ignore this machine (installed Horizon packages, board variables, a board "
                "file in the working directory): for a case folder received from someone else")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="qcdoctor",
        description="Diagnose J6 training-to-deployment consistency problems: which stage "
                    "broke, what to run next, which fix applies, what to keep for support.")
    p.add_argument("--version", action="version", version=f"qcdoctor {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    t = sub.add_parser("triage", help="diagnose a case folder and print the conclusion report")
    t.add_argument("case", nargs="?", help="case folder (with case.yaml) or a case.yaml")
    t.add_argument("--example", metavar="NAME", help="diagnose a bundled example case")
    t.add_argument("--format", choices=("md", "html", "json"), help=_FORMAT_HELP)
    t.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    _color(t)
    t.add_argument("--lang", choices=("zh", "en"), help="report language (default: the case's, else zh)")
    t.add_argument("--fail-on", choices=FAIL_ON, default="never",
                   help="exit 1 when an item at or above this severity is reported")
    t.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling (can run code: only for "
                        "files you trust)")
    t.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(t)

    i = sub.add_parser("intake", help="guided questions that build CASE/case.yaml")
    i.add_argument("case", nargs="?", default=".", help="case folder (default: here)")
    i.add_argument("--lang", choices=("zh", "en"), help="question language (default: the case's, else zh)")
    i.add_argument("--answers", metavar="FILE",
                   help="answers by question key (e.g. platform.chip: J6E), for scripted use")
    _allow_outside(i)

    a = sub.add_parser("audit", help="the deployment checklist of a case, item by item")
    a.add_argument("case", nargs="?", help="case folder (with case.yaml) or a case.yaml")
    a.add_argument("--example", metavar="NAME", help="audit a bundled example case")
    a.add_argument("--format", choices=("md", "html", "json"), help=_FORMAT_HELP)
    a.add_argument("-o", "--output", metavar="FILE", help="write the audit here (atomically)")
    _color(a)
    a.add_argument("--lang", choices=("zh", "en"))
    a.add_argument("--fail-on", choices=FAIL_ON, default="never",
                   help="exit 1 when an item at or above this severity is reported "
                        "(a failed checklist item counts as error)")
    a.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt dumps that need full unpickling")
    a.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(a)

    cmp = sub.add_parser("compare", help="compare two tensor dumps (files or folders of outputs)")
    cmp.add_argument("left", help="dump file or folder (.npy, .pt, .bin)")
    cmp.add_argument("right", help="the reference dump file or folder")
    cmp.add_argument("--decimals", type=int, default=4,
                     help="values differing beyond this many decimals count as mismatched")
    cmp.add_argument("--dtype", default=None,
                     help="dtype of raw .bin files without a sidecar (default float32)")
    cmp.add_argument("--format", choices=("md", "json"), default="md")
    cmp.add_argument("--trust-pickles", action="store_true")

    sub.add_parser("examples", help="list the bundled example cases")

    c = sub.add_parser("collect", help="print the facts gathered for a case")
    c.add_argument("case")
    c.add_argument("--format", choices=("md", "json"), default="md")
    c.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling")
    c.add_argument("--no-env", action="store_true", help=_NO_ENV_HELP)
    _allow_outside(c)

    r = sub.add_parser("rules", help="list the rules or explain one")
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
    return p


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
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_ERROR
    from .errors import QcdoctorError
    try:
        return _COMMANDS[args.command](args, parser)
    except QcdoctorError as exc:
        print(f"qcdoctor: error: {exc.render()}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("qcdoctor: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a bug: say so briefly, keep the trace on demand
        if os.environ.get("QCDOCTOR_DEBUG"):
            raise
        from .errors import shorten
        print(f"qcdoctor: internal error: {type(exc).__name__}: {shorten(exc)}\n"
              "  please report it with the case; QCDOCTOR_DEBUG=1 shows the traceback",
              file=sys.stderr)
        return EXIT_ERROR


def _same_file(target: Path, inputs: list[Path]) -> bool:
    """Whether ``target`` is one of ``inputs``: the same path once resolved, or a hard link."""
    resolved = target.resolve()
    try:
        info = os.stat(target)
        identity = (info.st_dev, info.st_ino)
    except OSError:
        identity = None
    for path in inputs:
        if not os.path.lexists(path):
            continue
        if path.resolve() == resolved:
            return True
        try:
            other = os.stat(path)
        except OSError:
            continue
        if identity == (other.st_dev, other.st_ino):
            return True
    return False


def _tolerant_streams() -> None:
    """Text that cannot be encoded (lone surrogates from undecodable file names, a terminal
    that is not UTF-8) is printed escaped: output never fails on user text."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):       # a closed or detached stream
                pass


def printable(text: str) -> str:
    """``text`` with lone surrogates escaped, so it can be written as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _emit(text: str, output: str | None, protected: list[Path]) -> None:
    text = printable(text)
    if output is None:
        sys.stdout.write(text)
        return
    from .atomic import write_text_atomic
    from .errors import QcdoctorError
    target = Path(output)
    if _same_file(target, protected):
        raise QcdoctorError("refusing to overwrite an input of this run", file=output,
                            fix="write the report to another file")
    if target.is_dir():
        raise QcdoctorError("this is a folder", file=output,
                            fix="give a file name for the report, e.g. report.md")
    if not target.parent.exists() and str(target.parent) not in ("", "."):
        raise QcdoctorError("the folder for the report does not exist", file=output,
                            fix=f"create {target.parent} first")
    write_text_atomic(target, text)


def _diagnose_and_emit(args, audit: bool) -> int:
    """triage and audit: a case folder or a bundled example, rendered, then --fail-on."""
    from .diagnose import SEVERITY_RANK, max_severity
    from .errors import QcdoctorError
    from .progress import Progress
    from .report import render
    from .triage import triage_path

    if bool(args.case) == bool(args.example):
        raise QcdoctorError("give either a case folder or --example NAME",
                            fix=f"qcdoctor {args.command} CASE_FOLDER, or qcdoctor examples "
                                "to list the examples")
    options = dict(lang=args.lang, trust_pickles=args.trust_pickles, full_checklist=audit,
                   progress=Progress(), use_env=not args.no_env)
    if args.example:
        from .examples import example_path
        with example_path(args.example) as path:
            report = triage_path(path, display_path=f"example:{args.example}",
                                 case_files=_case_files(path, args), **options)
        protected = []
    else:
        from qcdoctor.collectors.case_file import load_case

        from .triage import triage_case
        case = load_case(args.case)
        files = _case_files(case.folder, args)
        report = triage_case(case, case_files=files, **options)
        # never over case.yaml nor any file this run read (script, config, tables, ...)
        protected = [case.file, *sorted(files.read)]
    terminal = _terminal_colors(args) if args.format is None and args.output is None else None
    if terminal is not None:
        import shutil

        from .terminal_report import render_terminal
        text = render_terminal(report, audit=audit, color=terminal,
                               width=shutil.get_terminal_size().columns)
    else:
        text = render(report, args.format or "md", audit=audit)
    _emit(text, args.output, protected)
    if args.fail_on != "never" and max_severity(report) >= SEVERITY_RANK[args.fail_on]:
        return EXIT_FINDINGS
    return EXIT_OK


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
    from .errors import QcdoctorError
    from .intake import Intake
    from .prompts import LinePrompter, ScriptedPrompter, TerminalPrompter

    folder = Path(args.case)
    if folder.is_file():
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise QcdoctorError("not a folder", file=str(folder), fix="give the case folder")
    if args.answers:
        prompter, strict = ScriptedPrompter(Path(args.answers)), True
    elif sys.stdin.isatty() and sys.stdout.isatty():
        prompter, strict = TerminalPrompter(), False
    else:
        prompter, strict = LinePrompter(), False
    lang = args.lang
    if lang is None:
        existing = folder / "case.yaml"
        lang = "zh"
        if existing.is_file():
            from qcdoctor.collectors.case_file import load_case
            lang = load_case(existing).get("language", "zh")
    intake = Intake(folder, prompter, lang=lang, strict=strict,
                    allow_outside=tuple(Path(p) for p in args.allow_outside))
    try:
        intake.run()
    except KeyboardInterrupt:
        message = (f"已中断；已回答的内容保存在 {intake.doc.path}\n  继续：qcdoctor intake {folder}"
                   if lang == "zh" else
                   f"interrupted; answers so far are saved in {intake.doc.path}\n"
                   f"  resume with: qcdoctor intake {folder}")
        print(f"\nqcdoctor: {message}", file=sys.stderr)
        return 130
    return EXIT_OK


def _cmd_audit(args, parser) -> int:
    return _diagnose_and_emit(args, audit=True)


def _cmd_compare(args, parser) -> int:
    import json

    from qcdoctor.collectors.dumps import compare_paths

    from .errors import QcdoctorError
    from .progress import Progress
    if not 0 <= args.decimals <= 12:
        raise QcdoctorError("--decimals takes 0 to 12", fix="e.g. --decimals 4")
    results = compare_paths(Path(args.left), Path(args.right), args.decimals, args.dtype,
                            args.trust_pickles, Progress())
    if args.format == "json":
        from .jsonfmt import without_nonfinite
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


def _cmd_examples(args, parser) -> int:
    from .examples import example_names, example_title
    names = example_names()
    width = max(map(len, names), default=0)
    for name in names:
        print(f"{name.ljust(width)}  {example_title(name)}")
    return EXIT_OK


def _cmd_collect(args, parser) -> int:
    import json

    from qcdoctor.collectors.case_facts import collect_facts
    from qcdoctor.collectors.case_file import load_case

    case = load_case(args.case)
    facts = collect_facts(case, trust_pickles=args.trust_pickles, use_env=not args.no_env,
                          files=_case_files(case.folder, args))
    if args.format == "json":
        print(json.dumps(facts, ensure_ascii=False, indent=2))
        return EXIT_OK
    for fact in facts:
        fields = ", ".join(f"{k}={v}" for k, v in fact.items() if k not in ("type", "source"))
        print(f"{fact['type']}: {fields}  [{fact.get('source', '')}]")
    return EXIT_OK


def _cmd_rules(args, parser) -> int:
    from .ruledocs import explain_rule, list_rules, rule_docs
    if args.rules_command == "explain":
        sys.stdout.write(explain_rule(args.rule_id, args.lang))
    elif args.rules_command == "docs":
        _emit(rule_docs(args.lang), args.output, [])
    elif args.rules_command == "list":
        sys.stdout.write(list_rules(args.format, args.lang))
    else:
        parser.parse_args(["rules", "--help"])
    return EXIT_OK


_COMMANDS = {"triage": _cmd_triage, "intake": _cmd_intake, "audit": _cmd_audit,
             "compare": _cmd_compare,
             "examples": _cmd_examples, "collect": _cmd_collect, "rules": _cmd_rules}
