"""``qcdoctor schema case|report``: the JSON Schema of case.yaml or of the JSON report."""

from __future__ import annotations

import sys

from qcdoctor.errors import EXIT_OK

ABOUT = dict(help="the JSON Schema of case.yaml (case-v1) or of the JSON report (report-v1)")


def declare(command) -> None:
    command.add_argument("which", choices=("case", "report"))


def run(args, parser) -> int:
    from qcdoctor.engine.reports.json_schemas import render_schema
    sys.stdout.write(render_schema(args.which))
    return EXIT_OK
