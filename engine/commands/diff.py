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
    command.add_argument("--lang", choices=("zh", "en"),
                         help="the diff's language (default: the new report's, which a "
                              "case folder takes as triage does); a case folder is "
                              "triaged in it, texts of a JSON report in another language "
                              "are named by their rule's title")
    command.add_argument("--fail-on", choices=("regression", "never"), default="never",
                         help="exit 1 when something got worse: a stage turned abnormal or "
                              "its metric dropped beyond the tolerance, a checklist item "
                              "failed, a pitfall appeared")
    command.add_argument("--trust-pickles", action="store_true",
                         help="allow .pt files that need full unpickling")
    command.add_argument("--no-env", action="store_true", help=NO_ENV_HELP)
    allow_outside_option(command)


def run(args, parser) -> int:
    from qcdoctor.engine.diagnosis.report_changes import diff_reports
    from qcdoctor.engine.reports.changes import render_diff
    # one language for every line: the one asked for, else the new report's (as triage
    # picks it for a case folder); the old side is then triaged in it too
    new, new_read = load_side(args.new, args, args.lang)
    lang = args.lang or new["language"]
    old, old_read = load_side(args.old, args, lang)
    diff = diff_reports(old, new)
    from qcdoctor.engine.commands.output_file import emit
    emit(render_diff(diff, args.format, lang), args.output, [*old_read, *new_read])
    return EXIT_FINDINGS if args.fail_on == "regression" and diff["regressions"] else EXIT_OK


def load_side(given: str, args, lang: str | None = None) -> tuple[dict, list[Path]]:
    """The report of one side, read from JSON or triaged (in ``lang``; None: as triage
    picks it) from a case folder / case.yaml / bundle, and every file read for it: none
    of them may be written over."""
    from qcdoctor.collectors.files import check_path_length
    check_path_length(given)
    path = Path(given)
    if not path.exists():
        raise QcdoctorError("no such file or folder", file=given, fix=_SIDE_FIX)
    if path.is_file() and path.suffix == ".json":
        return _read_report(path), [path]
    from qcdoctor.collectors.bundle import is_bundle
    from qcdoctor.engine.diagnosis.triage import triage_path
    if is_bundle(path):             # its files are extracted for the time of the run only
        return triage_path(path, allow_outside=args.allow_outside,
                           **_triage_options(args, lang)), [path]
    return _triage_case(path, args, lang)


def _triage_case(path: Path, args, lang: str | None) -> tuple[dict, list[Path]]:
    """A case folder or case.yaml triaged, with case.yaml and every artifact read."""
    from qcdoctor.collectors.case_file import load_case
    from qcdoctor.collectors.files import CaseFiles
    from qcdoctor.engine.diagnosis.triage import triage_case
    outside = tuple(map(Path, args.allow_outside))
    case = load_case(path, outside)
    files = CaseFiles(case.folder, outside)
    report = triage_case(case, case_files=files, **_triage_options(args, lang))
    return report, [path, case.file, *sorted(files.read)]


def _triage_options(args, lang: str | None) -> dict:
    return dict(lang=lang, trust_pickles=args.trust_pickles, use_env=not args.no_env)


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
