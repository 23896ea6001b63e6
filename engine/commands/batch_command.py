"""``qcdoctor triage|audit PATH... [--recursive] [--jobs N]``: the batch from the command line."""

from __future__ import annotations

import sys
from pathlib import Path

from qcdoctor.errors import QcdoctorError


def is_batch(args) -> bool:
    return len(args.case) > 1 or args.recursive or args.format == "jsonl"


def run_batch_command(args) -> int:
    from qcdoctor.engine.commands.batch import (
        Settings,
        default_jobs,
        error_line,
        find_cases,
        run_batch,
        worst_exit,
    )
    from qcdoctor.engine.commands.batch_output import (
        check_output_folder,
        check_planned_outputs,
        summary_table,
        write_outputs,
    )
    from qcdoctor.engine.commands.progress import Progress
    from qcdoctor.engine.reports.formats import EXTENSIONS
    from qcdoctor.engine.reports.locale_language import chosen_language
    from qcdoctor.wording import labels

    if args.example and args.case:
        raise QcdoctorError("--example takes no case folders beside it",
                            fix=f"qcdoctor {args.command} --example NAME, or case folders only")
    if args.example:            # one example made a batch by --format jsonl or --recursive
        made_by = "--format jsonl" if args.format == "jsonl" else "--recursive"
        raise QcdoctorError(f"{made_by} is for several cases, --example gives one",
                            fix=f"qcdoctor {args.command} --example NAME --format json")
    if not args.case:
        raise QcdoctorError("no case folder given", fix=f"qcdoctor {args.command} CASE_FOLDER...")
    jobs = default_jobs() if args.jobs is None else args.jobs
    if jobs < 1:
        raise QcdoctorError("--jobs takes 1 or more", fix="e.g. --jobs 2 (default: one per core)")
    fmt = args.format or "md"        # no terminal view for a batch: its summary is the view
    jsonl = fmt == "jsonl"
    folder = Path(args.output) if args.output else None
    if jsonl and folder:
        raise QcdoctorError("--format jsonl streams to stdout and takes no -o",
                            fix="redirect it: qcdoctor triage ... --format jsonl > reports.jsonl")
    if folder:
        check_output_folder(folder)
    lang = chosen_language(args.lang)     # the batch's own lines: no one case's
    cases = find_cases(args.case, args.recursive)
    if folder:      # refused before any case is read: never over what the batch reads
        check_planned_outputs(folder, cases, EXTENSIONS[fmt], fmt == "html",
                              tuple(args.allow_outside))
    settings = Settings(fmt="jsonl" if jsonl else (fmt if folder else None),
                        audit=args.command == "audit", lang=args.lang,
                        trust_pickles=args.trust_pickles, use_env=not args.no_env,
                        allow_outside=tuple(args.allow_outside), fail_on=args.fail_on)
    progress = Progress(verb=labels()[lang]["batch"]["progress"])
    results = []
    for result in run_batch(cases, settings, jobs, progress):
        if jsonl:                           # streamed as each case is done, in input order
            sys.stdout.write(result.text if result.text is not None else error_line(result))
            sys.stdout.flush()
            result.text = None
        results.append(result)
    unwritten = None
    if folder:
        try:
            write_outputs(folder, results, EXTENSIONS[fmt], lang, html=fmt == "html")
        except QcdoctorError as exc:    # summary.json or index.html: said after the table
            unwritten = exc
    # with jsonl, stdout holds only the reports: the summary goes to stderr
    (sys.stderr if jsonl else sys.stdout).write(summary_table(results, lang))
    if unwritten is not None:
        raise unwritten
    return worst_exit(results)
