"""``qcdoctor diff OLD NEW``: each side a report JSON or a case folder, triaged on the fly."""

from __future__ import annotations

from pathlib import Path

from qcdoctor.engine.commands.options import FILES, NO_ENV_HELP, allow_outside_option, complete
from qcdoctor.errors import EXIT_FINDINGS, EXIT_OK, QcdoctorError

ABOUT = dict(help="what changed between two reports of a case (before / after a fix), "
                  "with a one-line verdict")

# a report of a real case is a few MiB at most; JSON takes several times its size to read
MAX_REPORT_BYTES = 64 << 20
_SIDE_FIX = ("give a JSON report (qcdoctor triage CASE --format json -o report.json), a "
             "case folder or a support bundle")


def declare(command) -> None:
    complete(command.add_argument("old", help="the report before: a JSON report, a case folder "
                                              "or a bundle"), FILES)
    complete(command.add_argument("new", help="the report after: a JSON report, a case folder "
                                              "or a bundle"), FILES)
    from qcdoctor.engine.reports.changes import DIFF_FORMATS
    command.add_argument("--format", choices=DIFF_FORMATS, default="md")
    command.add_argument("-o", "--output", metavar="FILE", help="write the diff here (atomically)")
    command.add_argument("--lang", choices=("zh", "en"), help="default: the new report's")
    command.add_argument("--fail-on", choices=("regression", "never"), default="never",
                         help="exit 1 when something got worse")
    command.add_argument("--trust-pickles", action="store_true",
                         help="allow .pt files that need full unpickling")
    command.add_argument("--no-env", action="store_true", help=NO_ENV_HELP)
    allow_outside_option(command)


def run(args, parser) -> int:
    from qcdoctor.engine.diagnosis.report_changes import diff_reports
    from qcdoctor.engine.reports.changes import render_diff
    old, new = load_side(args.old, args), load_side(args.new, args)
    diff = diff_reports(old, new)
    lang = args.lang or new["language"]
    from qcdoctor.engine.commands.output_file import emit
    protected = [Path(p) for p in (args.old, args.new)]
    emit(render_diff(diff, args.format, lang), args.output, protected)
    return EXIT_FINDINGS if args.fail_on == "regression" and diff["regressions"] else EXIT_OK


def load_side(given: str, args) -> dict:
    """The report of one side: read from JSON, or triaged from a case folder / case.yaml."""
    path = Path(given)
    if not path.exists():
        raise QcdoctorError("no such file or folder", file=given, fix=_SIDE_FIX)
    if path.is_file() and path.suffix == ".json":
        return _read_report(path)
    from qcdoctor.engine.diagnosis.triage import triage_path
    return triage_path(path, allow_outside=args.allow_outside, lang=args.lang,
                       trust_pickles=args.trust_pickles, use_env=not args.no_env)


def _read_report(path: Path) -> dict:
    from qcdoctor.collectors.bounded_data import DataRefused, load_json
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise QcdoctorError(f"{size:,} bytes: larger than the "
                                f"{MAX_REPORT_BYTES >> 20} MiB a report is read up to",
                                file=str(path), fix=_SIDE_FIX)
        with open(path, "rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
        if len(data) > MAX_REPORT_BYTES:
            raise QcdoctorError("it grew while it was read", file=str(path), fix=_SIDE_FIX)
        report = load_json(data.decode("utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise QcdoctorError(f"not a readable JSON report: {exc}", file=str(path),
                            fix=_SIDE_FIX) from None
    except DataRefused as exc:      # bad JSON, or nested or numbered past the limits
        where = f" (line {exc.line})" if exc.line else ""
        raise QcdoctorError(f"not a readable JSON report: {exc.problem}{where}",
                            file=str(path), fix=_SIDE_FIX) from None
    from qcdoctor.engine.reports.schema import check_report
    check_report(report, str(path))
    return report
