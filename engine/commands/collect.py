"""``qcdoctor collect CASE``: the facts gathered for a case, before any rule reads them."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.engine.commands.options import NO_ENV_HELP, allow_outside_option
from qcdoctor.errors import EXIT_OK

ABOUT = dict(help="print the facts gathered for a case")


def declare(command) -> None:
    command.add_argument("case")
    command.add_argument("--format", choices=("md", "json"), default="md")
    command.add_argument("--lang", choices=("zh", "en"),
                         help="language of where each fact was read (default: the case's, "
                              "else the locale's; see docs/reports.md, Language)")
    command.add_argument("--trust-pickles", action="store_true",
                         help="allow .pt files that need full unpickling")
    command.add_argument("--no-env", action="store_true", help=NO_ENV_HELP)
    allow_outside_option(command)


def run(args, parser) -> int:
    import json

    from qcdoctor.collectors.case_facts import collect_facts
    from qcdoctor.collectors.case_file import load_case
    from qcdoctor.collectors.files import CaseFiles
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.safe_text import json_text, visible
    from qcdoctor.wording import source_text

    outside = tuple(Path(p) for p in args.allow_outside)
    case = load_case(args.case, outside)
    facts = collect_facts(case, trust_pickles=args.trust_pickles, use_env=not args.no_env,
                          files=CaseFiles(case.folder, outside))
    if args.format == "json":
        print(json_text(json.dumps(facts, ensure_ascii=False, indent=2)))
        return EXIT_OK
    lang = chosen_language(args.lang, case.get("language"))
    for fact in facts:     # field names and values are the rules' own words, in any language
        source = source_text(fact.get("source", ""), lang)
        fields = ", ".join(f"{k}={v}" for k, v in fact.items()
                           if k not in ("type", "source", "locations"))
        print(visible(f"{fact['type']}: {fields}  [{source}]", lines=False))
    return EXIT_OK
