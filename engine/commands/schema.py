"""``qcdoctor schema case|report``: the JSON Schema of case.yaml or of the JSON report."""

from __future__ import annotations

import sys

from qcdoctor.errors import EXIT_OK

ABOUT = dict(help="the JSON Schema of case.yaml (case-v1) or of the JSON report (report-v1)")
# each schema by its short name, its versioned name (as the help and the files say it) and
# its full id
_NAMES = {"case": "case", "case-v1": "case", "qcdoctor/case-v1": "case",
          "report": "report", "report-v1": "report", "qcdoctor/report-v1": "report"}


def declare(command) -> None:
    command.add_argument("which", choices=tuple(_NAMES), metavar="{case,report}",
                         help="case (also case-v1) or report (also report-v1)")


def run(args, parser) -> int:
    from qcdoctor.engine.reports.json_schemas import render_schema
    sys.stdout.write(render_schema(_NAMES[args.which]))
    return EXIT_OK
