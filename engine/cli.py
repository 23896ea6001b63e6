"""The qcdoctor command line. Exit codes: 0 ran, 1 findings at/above --fail-on, 2 bad input.

Start-up stays light: heavy modules (pandas, torch, durable_rules) load only in the
command that needs them.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from qcdoctor import __version__

EXIT_OK, EXIT_FINDINGS, EXIT_ERROR = 0, 1, 2
FAIL_ON = ("info", "warning", "error", "never")


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
    t.add_argument("--format", choices=("md", "html", "json"), default="md")
    t.add_argument("-o", "--output", metavar="FILE", help="write the report here (atomically)")
    t.add_argument("--lang", choices=("zh", "en"), help="report language (default: the case's, else zh)")
    t.add_argument("--fail-on", choices=FAIL_ON, default="never",
                   help="exit 1 when an item at or above this severity is reported")
    t.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling (can run code: only for "
                        "files you trust)")

    sub.add_parser("examples", help="list the bundled example cases")

    c = sub.add_parser("collect", help="print the facts gathered for a case")
    c.add_argument("case")
    c.add_argument("--format", choices=("md", "json"), default="md")
    c.add_argument("--trust-pickles", action="store_true",
                   help="allow .pt files that need full unpickling")

    r = sub.add_parser("rules", help="list the rules or explain one")
    rsub = r.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    rl = rsub.add_parser("list", help="one line per rule")
    rl.add_argument("--format", choices=("md", "json"), default="md")
    rl.add_argument("--lang", choices=("zh", "en"), default="en")
    re_ = rsub.add_parser("explain", help="everything about one rule")
    re_.add_argument("rule_id")
    re_.add_argument("--lang", choices=("zh", "en"), default="en")
    return p


def main(argv: list[str] | None = None) -> int:
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


def _emit(text: str, output: str | None, protected: list[Path]) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    from .atomic import write_text_atomic
    from .errors import QcdoctorError
    target = Path(output)
    if any(target.resolve() == p.resolve() for p in protected if p.exists()):
        raise QcdoctorError("refusing to overwrite an input of this run", file=output,
                            fix="write the report to another file")
    if not target.parent.exists() and str(target.parent) not in ("", "."):
        raise QcdoctorError("the folder for the report does not exist", file=output,
                            fix=f"create {target.parent} first")
    write_text_atomic(target, text)


def _cmd_triage(args, parser) -> int:
    from .diagnose import SEVERITY_RANK, max_severity
    from .errors import QcdoctorError
    from .report import render
    from .triage import triage_path

    if bool(args.case) == bool(args.example):
        raise QcdoctorError("give either a case folder or --example NAME",
                            fix="qcdoctor triage CASE_FOLDER, or qcdoctor examples to list examples")
    if args.example:
        from .examples import example_path
        with example_path(args.example) as path:
            report = triage_path(path, lang=args.lang, display_path=f"example:{args.example}",
                                 trust_pickles=args.trust_pickles)
        protected = []
    else:
        report = triage_path(args.case, lang=args.lang, trust_pickles=args.trust_pickles)
        case = Path(args.case)
        protected = [case / "case.yaml" if case.is_dir() else case]
    _emit(render(report, args.format), args.output, protected)
    if args.fail_on != "never" and max_severity(report) >= SEVERITY_RANK[args.fail_on]:
        return EXIT_FINDINGS
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

    facts = collect_facts(load_case(args.case), trust_pickles=args.trust_pickles)
    if args.format == "json":
        print(json.dumps(facts, ensure_ascii=False, indent=2))
        return EXIT_OK
    for fact in facts:
        fields = ", ".join(f"{k}={v}" for k, v in fact.items() if k not in ("type", "source"))
        print(f"{fact['type']}: {fields}  [{fact.get('source', '')}]")
    return EXIT_OK


def _cmd_rules(args, parser) -> int:
    from .ruledocs import explain_rule, list_rules
    if args.rules_command == "explain":
        sys.stdout.write(explain_rule(args.rule_id, args.lang))
    elif args.rules_command == "list":
        sys.stdout.write(list_rules(args.format, args.lang))
    else:
        parser.parse_args(["rules", "--help"])
    return EXIT_OK


_COMMANDS = {"triage": _cmd_triage, "examples": _cmd_examples, "collect": _cmd_collect,
             "rules": _cmd_rules}
