"""``qcdoctor rules list|docs|explain``: the rule book, a line a rule, as one document, or
one rule whole."""

from __future__ import annotations

import sys

from qcdoctor.errors import EXIT_OK, QcdoctorError

ABOUT = dict(help="list the rules or explain one (rules ID is rules explain ID)")


_SUBCOMMANDS = ("list", "docs", "explain")


def shorthand(argv: list[str]) -> list[str]:
    """``rules ST050`` is ``rules explain ST050``."""
    if argv and argv[0] not in _SUBCOMMANDS and not argv[0].startswith("-"):
        return ["explain", *argv]
    return argv


def declare(command) -> None:
    sub = command.add_subparsers(dest="rules_command", metavar="SUBCOMMAND")
    listing = sub.add_parser("list", help="one line per rule")
    listing.add_argument("--format", choices=("md", "json"), default="md")
    docs = sub.add_parser("docs", help="all rules as one Markdown document")
    docs.add_argument("-o", "--output", metavar="FILE", help="write the document here")
    explain = sub.add_parser("explain", help="everything about one rule")
    explain.add_argument("rule_id")
    for command in (listing, docs, explain):
        command.add_argument("--lang", choices=("zh", "en"),
                             help="language (default: the locale's; see docs/reports.md, "
                                  "Language)")


def run(args, parser) -> int:
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.engine.reports.rule_docs import explain_rule, list_rules, rule_docs
    args.lang = chosen_language(getattr(args, "lang", None))    # no case: --lang, else locale
    if args.rules_command == "explain":
        _check_rule_id(args.rule_id)
        sys.stdout.write(explain_rule(args.rule_id, args.lang))
    elif args.rules_command == "docs":
        from qcdoctor.engine.commands.output_file import emit
        emit(rule_docs(args.lang), args.output, [])
    elif args.rules_command == "list":
        sys.stdout.write(list_rules(args.format, args.lang))
    else:
        parser.parse_args(["rules", "--help"])
    return EXIT_OK


def _check_rule_id(rule_id: str) -> None:
    """An unknown id is refused with the nearest ids (ST05 -> ST050)."""
    from qcdoctor.engine.matching.rulebook import load_rules, rule_by_id
    from qcdoctor.suggest import did_you_mean
    if rule_by_id(rule_id) is None:
        hint = did_you_mean(rule_id.upper(), [r.id for r in load_rules()], cutoff=0.7)
        raise QcdoctorError(f"no rule {rule_id!r}{hint}",
                            fix="see 'qcdoctor rules list' for the ids")
