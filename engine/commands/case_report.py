"""What triage and audit run alike: a case folder, a support bundle or a bundled example,
diagnosed, rendered in the format asked for (a coloured view on a terminal), then
``--fail-on``; several cases make a batch."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from qcdoctor.errors import EXIT_FINDINGS, EXIT_OK, QcdoctorError


def diagnose_and_emit(args, audit: bool) -> int:
    """triage and audit: a case folder or a bundled example, rendered, then --fail-on."""
    from qcdoctor.engine.commands.batch_command import is_batch, run_batch_command
    if is_batch(args):
        return run_batch_command(args)
    args.case = args.case[0] if args.case else None
    from qcdoctor.engine.commands.background import read_early
    from qcdoctor.engine.commands.progress import Progress

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
        text = render_output(report, args.format or "md", audit=audit, fail_on=args.fail_on)
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
